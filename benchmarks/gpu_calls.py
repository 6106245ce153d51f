"""Whole call against kernel only on the cuda target, with host rows (NumPy) and device rows
(CuPy), at each request size: what a caller pays around the kernels (copies of rows and margins,
allocation, the output transform) and what reading rows already on the GPU saves.

    python benchmarks/gpu_calls.py MODEL [MODEL ...] [--sizes 512,4096,65536,1048576]
        [--repeat 20] [--markdown OUT.md] [--target cuda]

Per model and size: rows drawn around the model's thresholds (3% missing), one compiled model
(``target="cuda"``, the default GPU schedule for that size); the median of ``--repeat`` calls of
``predict`` on the wall clock (``whole``) and of the kernels on CUDA events (``kernel``,
``kernel.last_timing``), for host input and, where CuPy is installed, device input (the call
ends when the result is on the device).  Device results are checked against host results
before timing.  With ``--hummingbird``, Hummingbird's torch model on the same GPU is timed beside
ours on the same rows: its ``predict`` on host rows, and its torch module called on a CUDA tensor
(device rows in, device result out, synchronised), the peer of our device-array call.  Prints a
markdown table; needs an NVIDIA GPU, pycuda and (for device rows) CuPy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback

import numpy as np


def _median_call(call, X, repeat: int, kernel_seconds=None) -> tuple[float, float]:
    """Median wall time of ``call(X)`` over ``repeat`` calls after a warm one (device buffers
    grow to the size once), and of ``kernel_seconds()`` read after each (NaN without)."""
    call(X)
    whole, kernel = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        call(X)
        whole.append(time.perf_counter() - start)
        kernel.append(kernel_seconds() if kernel_seconds else float("nan"))
    return statistics.median(whole), statistics.median(kernel)


def _hummingbird(path: str, forest):
    """Hummingbird's model for ``path`` on the GPU, as the bench peer converts it: (host call,
    device call), or a string saying why there is none."""
    try:
        import torch
        from silvanforge_bench.bench_peers.hummingbird_peer import _lightgbm_model, _xgboost_model
        import hummingbird.ml

        if not torch.cuda.is_available():
            return "torch sees no CUDA GPU"
        if path.endswith(".txt"):
            model, extra, proba = _lightgbm_model(path)
        else:
            model, extra, proba = _xgboost_model(path, forest.num_features)
        converted = hummingbird.ml.convert(model, "torch", extra_config=extra)
        converted.to("cuda")
    except Exception as exc:  # noqa: BLE001  (a peer that cannot take the model is reported, not fatal)
        return f"{type(exc).__name__}: {exc}"[:200]
    host = converted.predict_proba if proba else converted.predict
    module = converted.model

    def device(t):
        with torch.no_grad():
            out = module(t)
        torch.cuda.synchronize()
        return out

    return host, device


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--sizes", default="512,4096,65536,1048576")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--markdown")
    parser.add_argument("--target", default="cuda", help="a GPU target (amd: host rows only)")
    parser.add_argument("--hummingbird", action="store_true",
                        help="time Hummingbird (torch on the same GPU) on the same rows")
    args = parser.parse_args(argv)
    import silvanforge as sf
    from silvanforge.frontend.sampling import random_rows

    try:
        import cupy as cp
    except ImportError:
        cp = None
        print("CuPy is not installed: host rows only", file=sys.stderr)
    sizes = [int(s) for s in args.sizes.split(",")]
    lines = ["| model | rows | input | whole call (ms) | kernel (ms) | around the kernel (ms) | rows/s (whole) "
             "| Hummingbird call (ms) | ours faster by |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    failures = 0
    for path in args.models:
        forest = sf.load_model(path)
        name = path.rsplit("/", 1)[-1]
        peer = _hummingbird(path, forest) if args.hummingbird else "not asked"
        if isinstance(peer, str) and args.hummingbird:
            print(f"{name}: no Hummingbird ({peer})", flush=True)
        for n in sizes:
            try:
                cf = sf.compile(forest, target=args.target, batch_size=n)
                X = random_rows(forest, n, seed=1).astype(cf.main.input_dtype)
                X[np.random.default_rng(2).random(X.shape) < 0.03] = np.nan
                inputs = [("host", X)]
                if cp is not None and args.target == "cuda":
                    d = cp.asarray(X)
                    host_result = cf.predict(X)
                    device_result = cp.asnumpy(cf.predict(d))
                    np.testing.assert_array_equal(device_result, host_result, err_msg=f"{name} {n} rows")
                    inputs.append(("device (CuPy)", d))
                for label, rows in inputs:
                    whole, kernel = _median_call(cf.predict, rows, args.repeat,
                                                 lambda: cf.kernel.last_timing.get("kernel", float("nan")))
                    theirs = ""
                    if not isinstance(peer, str):
                        if label == "host":
                            peer_rows, peer_call = X.astype(np.float32), peer[0]
                        else:
                            import torch

                            peer_rows, peer_call = torch.as_tensor(X, dtype=torch.float32, device="cuda"), peer[1]
                        try:
                            theirs = _median_call(peer_call, peer_rows, args.repeat)[0]
                        except Exception as exc:  # noqa: BLE001  (the peer's failure is reported; ours go on)
                            print(f"{name} {n} {label}: Hummingbird failed ({type(exc).__name__}: {exc})"[:300])
                    peer_cells = (f"{theirs * 1e3:.3f} | {theirs / whole:.1f}x" if theirs else "- | -")
                    lines.append(f"| {name} | {n} | {label} | {whole * 1e3:.3f} | {kernel * 1e3:.3f} | "
                                 f"{(whole - kernel) * 1e3:.3f} | {n / whole:,.0f} | {peer_cells} |")
                    print(lines[-1], flush=True)
            except Exception as exc:  # noqa: BLE001  (one size's failure is reported; the rest are measured)
                failures += 1
                print(f"{name} {n} rows: FAILED {type(exc).__name__}: {exc}"[:2000], flush=True)
                traceback.print_exc(limit=-6)

    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

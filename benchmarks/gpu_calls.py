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
before timing.  Prints a markdown table; needs an NVIDIA GPU, pycuda and (for device rows) CuPy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def _median_call(cf, X, repeat: int) -> tuple[float, float]:
    cf.predict(X)  # warm: device buffers grow to the size once
    whole, kernel = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        cf.predict(X)
        whole.append(time.perf_counter() - start)
        kernel.append(cf.kernel.last_timing.get("kernel", float("nan")))
    return statistics.median(whole), statistics.median(kernel)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--sizes", default="512,4096,65536,1048576")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--markdown")
    parser.add_argument("--target", default="cuda", help="a GPU target (amd: host rows only)")
    args = parser.parse_args(argv)
    import silvanforge as sf
    from silvanforge.sampling import random_rows

    try:
        import cupy as cp
    except ImportError:
        cp = None
        print("CuPy is not installed: host rows only", file=sys.stderr)
    sizes = [int(s) for s in args.sizes.split(",")]
    lines = ["| model | rows | input | whole call (ms) | kernel (ms) | around the kernel (ms) | rows/s (whole) |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for path in args.models:
        forest = sf.load_model(path)
        name = path.rsplit("/", 1)[-1]
        for n in sizes:
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
                whole, kernel = _median_call(cf, rows, args.repeat)
                lines.append(f"| {name} | {n} | {label} | {whole * 1e3:.3f} | {kernel * 1e3:.3f} | "
                             f"{(whole - kernel) * 1e3:.3f} | {n / whole:,.0f} |")
                print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

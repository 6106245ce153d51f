"""The output softmax as it is against NumPy's row-by-row form (reductions along each row, its
sum pairwise), swapped into the registry in one process, on multiclass models: us a call, best
of 7 rounds, 1 thread, this host's code and code for an AVX2-only CPU.

    python benchmarks/real_models.py /tmp/real      # lgb_digits.txt, xgb_digits.json (10 classes)
    python benchmarks/softmax_ab.py /tmp/real/lgb_digits.txt /tmp/real/xgb_digits.json

docs/benchmarks.md, "CatBoost's symmetric trees".
"""

from __future__ import annotations

import sys
import time

import numpy as np

SIZES = (1, 16, 64, 256, 4096)


def rowwise(m, tr):
    """The softmax along each row, as NumPy reduces an (n, k) array (its sum pairwise from 8)."""
    from silvanforge.runtime import transforms

    with np.errstate(invalid="ignore"):
        e = transforms._exp(m - m.max(axis=1, keepdims=True))
        return e / e.astype(np.float64).sum(axis=1, keepdims=True).astype(m.dtype)


def main(paths: list[str]) -> None:
    import silvanforge as sf
    from silvanforge.runtime import transforms

    current = transforms._REGISTRY["softmax"]
    rng = np.random.default_rng(0)
    print("| model | code | " + " | ".join(f"{n} rows: row-wise -> as it is (us)" for n in SIZES) + " |")
    print("|---|---|" + "---|" * len(SIZES))
    for path in paths:
        for cpu in (None, "x86-64-v3"):
            cf = sf.compile(path, threads=1, cpu=cpu).wait()
            X = (rng.random((max(SIZES), cf.num_features)) * 16).astype(cf.main.input_dtype)
            cells = []
            for n in SIZES:
                rows, calls, best = np.ascontiguousarray(X[:n]), max(5, 4000 // n), {}
                try:
                    for _ in range(7):
                        for name, softmax in (("rowwise", rowwise), ("current", current)):
                            transforms._REGISTRY["softmax"] = softmax
                            start = time.perf_counter()
                            for _ in range(calls):
                                cf.predict(rows, threads=1)
                            best[name] = min(best.get(name, np.inf), (time.perf_counter() - start) / calls)
                finally:
                    transforms._REGISTRY["softmax"] = current
                cells.append(f"{best['rowwise'] * 1e6:,.1f} -> {best['current'] * 1e6:,.1f}")
            print(f"| {path.rsplit('/', 1)[-1]} | {cpu or 'this host'} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

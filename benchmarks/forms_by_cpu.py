"""Each representation's form of one model at one request size, for each named CPU, timed in one
process (1 thread, best of 5 over 8 different batches) and checked against the reference.

    python benchmarks/forms_by_cpu.py MODEL [--rows 4096] [--cpus native,x86-64-v3]
        [--reps default,sparse,array,levelwise,bitvector]

What the chooser takes on one ISA may lose on another (the levelwise form leans on AVX-512
permutes): this shows each form's rows/s per CPU beside the default's choice.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cpus", default="native,x86-64-v3")
    parser.add_argument("--reps", default="default,sparse,array,levelwise,bitvector")
    args = parser.parse_args(argv)
    import silvanforge as sf
    from silvanforge.frontend.sampling import random_rows
    from silvanforge.runtime import reference

    forest = sf.load_model(args.model)
    n = args.rows
    X = random_rows(forest, n * 8, seed=1).astype(np.float32 if forest.threshold_dtype == "float32" else np.float64)
    batches = [X[i * n:(i + 1) * n] for i in range(8)]
    print("| cpu | rep asked | form | rows/s |\n|---|---|---|---:|")
    for cpu in args.cpus.split(","):
        for rep in args.reps.split(","):
            try:
                cf = sf.compile(forest, cpu=cpu, rep=None if rep == "default" else rep, batch_size=n, threads=1)
            except sf.InputError as exc:
                print(f"| {cpu} | {rep} | refused: {str(exc)[:60]} | - |")
                continue
            m = min(3000, len(X))
            np.testing.assert_array_equal(cf.predict(X[:m], output_margin=True),
                                          reference.predict(forest, X[:m], output_margin=True))
            cf.predict(batches[0], threads=1)
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                for b in batches:
                    cf.predict(b, threads=1)
                best = min(best, (time.perf_counter() - start) / len(batches))
            print(f"| {cpu} | {rep} | {cf.form_for(n).text()[:48]} | {n / best:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

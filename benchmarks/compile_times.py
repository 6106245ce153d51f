"""Model-load and compile times in seconds, each the best of three after one more in the same
process (the first also pays imports and LLVM's start-up, which a service pays once).

    python benchmarks/compile_times.py MODELS/lgb_flight_1000x255.txt MODELS/xgb_1000x8.json ...

``load`` is :func:`silvanforge.load_model` (the file parsed into the HIR).  The others start
from the file: ``first prediction`` is ``silvanforge.compile(path)`` (what users get without
options: the call returns once the main form is built, the plan's other forms build in the
background, :mod:`silvanforge.plan.lateforms`) and a one-row ``predict``; ``whole plan`` goes on
until every form is built (``cf.wait()``); ``eager`` is ``compile(path, forms="eager")``, every
form built within the call (two threads).  docs/benchmarks.md, "Compile times", quotes this
script.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import silvanforge as sf


def best_of_three(fn) -> float:
    """Seconds the fastest of three calls of ``fn`` took, after one untimed call."""
    fn()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    args = parser.parse_args(argv)
    print("| model | load (s) | first prediction (s) | whole plan (s) | eager (s) | forms |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in args.models:
        forest = sf.load_model(path)
        row = np.zeros((1, forest.input_features), np.float32 if forest.threshold_dtype == "float32" else np.float64)
        load = best_of_three(lambda: sf.load_model(path))
        made = []

        def first():
            cf = sf.compile(path)
            cf.predict(row)
            made.append(cf)

        def whole():
            sf.compile(path).wait()

        # (each timed compile's forms finish building before the next starts)
        first_s = float("inf")
        for k in range(4):
            start = time.perf_counter()
            first()
            took = time.perf_counter() - start
            made[-1].wait()
            if k:
                first_s = min(first_s, took)
        whole_s = best_of_three(whole)
        eager_s = best_of_three(lambda: sf.compile(path, forms="eager"))
        forms = len(sf.compile(path, forms="eager").forms)
        print(f"| {path.stem} | {load:.2f} | {first_s:.2f} | {whole_s:.2f} | {eager_s:.2f} | {forms} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

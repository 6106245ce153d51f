"""Model-load and compile times in seconds, each the second of two in one process (the first also
pays imports and LLVM's start-up, which a service pays once).

    python benchmarks/categorical_models.py /tmp/cat
    python benchmarks/compile_times.py /tmp/cat/lgb_flight_1000x255.txt /tmp/cat/lgb_taxi_1000x255.txt \
        [--batch-size 4096]

``load`` is :func:`silvanforge.load_model` (the file parsed into the HIR); ``compile`` is
:func:`silvanforge.compile` from the file for one batch size, which loads it again, chooses the
representation and schedule, lowers and JIT-compiles one form; ``default`` is
``silvanforge.compile(path)``, what users get without options: the plan's forms for every
request size (two or three programs).  docs/benchmarks.md, "Compile times", quotes this script.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import silvanforge as sf


def second_of_two(fn) -> float:
    """Seconds the second of two calls of ``fn`` took."""
    elapsed = 0.0
    for _ in range(2):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
    return elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--batch-size", type=int, default=4096)
    args = parser.parse_args(argv)
    print(f"| model | load (s) | compile, batch {args.batch_size} (s) | default compile (s) | forms |")
    print("|---|---:|---:|---:|---:|")
    for path in args.models:
        load = second_of_two(lambda: sf.load_model(path))
        build = second_of_two(lambda: sf.compile(path, batch_size=args.batch_size))
        default = second_of_two(lambda: sf.compile(path))
        forms = len(sf.compile(path).forms)
        print(f"| {path.stem} | {load:.2f} | {build:.2f} | {default:.2f} | {forms} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

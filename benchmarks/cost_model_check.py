"""How far the representations' cost estimates are from what tuning measures, per model,
representation and request size: ``sf.tune`` times the forms it tries and keeps each one's
estimate beside its timings (``silvanforge.plan.tuning.estimate_errors``); this prints the measured /
estimated ratio (geometric mean over a representation's forms lowered for that size's batch
class, as the estimate assumes), and the same relative to the
sparse walks' on that model, which is what the default choice among representations depends on
(a representation whose relative ratio is far from 1 is chosen or passed over wrongly).

    python benchmarks/cost_model_check.py MODEL... [--threads 1] [--budget 30] [--out F.json]

docs/benchmarks.md ("The cost model against tuning") shows its output for the request-size
models and the CatBoost models; the estimates were corrected where a ratio was off by more than
1.5x relative to the sparse walks."""

from __future__ import annotations

import argparse
import json
import math
import re
from collections import defaultdict
from pathlib import Path

SIZES = (1, 16, 64, 256, 4096)


def ratios(record: dict) -> dict[str, dict[int, float]]:
    """Representation -> rows per call -> geometric mean of measured / estimated."""
    from silvanforge.plan.tuning import batch_class, estimate_errors

    found: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for k, size, ratio in estimate_errors(record):
        form = record["candidates"][k]["form"]
        rep, batch = re.match(r"rep=(\S+)", form), re.search(r"batch_size=(\S+)", form)
        # An estimate is for a program lowered for the call's size: forms lowered for another
        # batch class are timed at every size, but not compared here.
        lowered_for = None if batch is None or batch.group(1) == "any" else int(batch.group(1))
        if rep and ratio > 0 and lowered_for == batch_class(size):
            found[rep.group(1)][size].append(math.log(ratio))
    return {rep: {size: math.exp(sum(v) / len(v)) for size, v in by.items()} for rep, by in found.items()}


def table(results: dict[str, dict[str, dict[int, float]]]) -> str:
    head = "| model | representation | " + " | ".join(f"{s} rows" for s in SIZES) + " |"
    lines = [head, "|" + "---|" * (2 + len(SIZES))]
    for model, by_rep in results.items():
        base = by_rep.get("sparse", {})
        for rep, by_size in sorted(by_rep.items()):
            cells = []
            for s in SIZES:
                r = by_size.get(s)
                if r is None:
                    cells.append("-")
                    continue
                rel = f" ({r / base[s]:.2f})" if rep != "sparse" and base.get(s) else ""
                cells.append(f"{r:.2f}{rel}")
            lines.append(f"| {model} | {rep} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=30.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import silvanforge as sf

    results = {}
    for path in args.models:
        cf = sf.tune(path, threads=args.threads, budget_s=args.budget, sizes=SIZES)
        results[path.stem] = ratios(cf.tuning)
        print(f"{path.stem}: {cf.tuning['seconds']} s", flush=True)
    print("\nmeasured / estimated ns a row (in brackets: relative to the sparse walks' ratio)\n")
    print(table(results))
    if args.out:
        args.out.write_text(json.dumps({m: {r: {str(s): v for s, v in d.items()} for r, d in by.items()}
                                        for m, by in results.items()}, indent=1))


if __name__ == "__main__":
    main()

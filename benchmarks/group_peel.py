"""Tree groups with peeled walks against the default, head to head in one process.

    python benchmarks/group_peel.py MODEL [--batch 4096] [--rounds 7] [--threads 1]

Compiles MODEL once per variant (the default; padded to one depth; trees reordered by peel depth
or depth, unpadded and padded each to its own depth) and times them in alternation, round after
round (A B C D A B C D ...), so drift on a shared machine hits every variant alike; the best
round counts. `forge bench MODEL --reorder peel` gives the same variants against the peers.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import silvanforge as sf
from silvanforge_bench.bench import random_rows
from silvanforge.frontend.hir_passes import padded_nodes, padded_nodes_each

VARIANTS = {
    "default": {},
    "pad all + peel": {"pad": True},
    "reorder peel, groups peeled": {"reorder": "peel", "pad": False},
    "reorder depth, groups peeled": {"reorder": "depth", "pad": False},
    "reorder depth, each padded, groups peeled": {"reorder": "depth", "pad": True},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-time", type=float, default=0.1)
    ap.add_argument("--max-pad", type=float, default=50.0,
                    help="skip padded variants that would grow the nodes more than this")
    args = ap.parse_args()
    forest = sf.load_model(args.model)
    nodes = sum(t.num_nodes for t in forest.trees)
    growth = {"pad all + peel": padded_nodes(forest) / nodes,
              "reorder depth, each padded, groups peeled": padded_nodes_each(forest) / nodes}
    X = random_rows(forest, args.batch, 0)
    compiled = {}
    for name, opts in VARIANTS.items():
        if growth.get(name, 0) > args.max_pad:
            print(f"{name}: skipped (padding grows the nodes {growth[name]:.0f}x)")
            continue
        start = time.perf_counter()
        compiled[name] = sf.compile(forest, batch_size=args.batch, threads=args.threads, **opts)
        print(f"{name}: compiled in {time.perf_counter() - start:.2f} s; "
              f"{compiled[name].schedule.to_text().count('split(') + 1} tree loop(s)"
              + (f"; padding grows the nodes {growth[name]:.1f}x" if name in growth else ""))
    want = compiled["default"].predict(X, output_margin=True)
    best = {name: float("inf") for name in compiled}
    for _ in range(args.rounds):
        for name, cf in compiled.items():
            calls, start = 0, time.perf_counter()
            while True:
                cf.predict(X, output_margin=True)
                calls += 1
                elapsed = time.perf_counter() - start
                if elapsed >= args.min_time:
                    break
            best[name] = min(best[name], elapsed / calls)
    print(f"\n{args.model}: {forest.num_trees} trees, batch {args.batch}, {args.threads} thread(s), "
          f"best of {args.rounds} alternating rounds")
    base = best["default"]
    for name, cf in compiled.items():
        diff = float(np.max(np.abs(cf.predict(X, output_margin=True) - want))) if len(X) else 0.0
        print(f"  {name:45s} {args.batch / best[name]:>12,.0f} rows/s  {base / best[name]:.2f}x default"
              f"  max |diff| vs default {diff:.2g}")


if __name__ == "__main__":
    main()

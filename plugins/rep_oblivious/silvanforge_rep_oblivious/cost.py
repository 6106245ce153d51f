"""What the oblivious program costs, ns a row (the CPU default compares it with the walks' and
the bitvectors' estimates), and how many rows a block takes."""

from __future__ import annotations

import numpy as np

from silvanforge.ir import hir

# Rows a block: one 512-bit vector of float32 values (two of float64 ones) a level's compare.
LANES, SMALL_LANES = 16, 8
# ns a row, measured on the AMD Zen 4 of docs/benchmarks.md (benchmarks/catboost_oblivious.py's
# CatBoost models, 4096-row calls, 1 thread): a level's compare (a vector compare and a masked
# OR for 16 rows: 0.07 with the trees' loop, gathers left out), a tree's leaf gather and sum per
# output (most of the time: Zen 4's vgatherdpd; 0.8-1.2 with 300 trees of depth 6, whose leaf
# tables stay in L2), more where the leaf tables pass L2 (1000 trees of depth 8: 2 MiB of
# tables, 2.5 ns a tree), and a column's copy into the block (scalar loads).
LEVEL_NS, GATHER_NS, GATHER_FAR_NS, COLUMN_NS = 0.07, 0.8, 2.0, 0.3
L2_BYTES = 1 << 20

# Whether the CPU default may choose it (the walk tests switch it off to test walks by default).
AUTO_CHOOSE = True


def lanes(forest: hir.Forest, batch_size: int | None) -> int:
    """Rows a block: fewer where a call brings fewer rows (a block's lanes cost the same filled
    or not)."""
    return SMALL_LANES if batch_size is not None and batch_size <= SMALL_LANES else LANES


def estimate_ns(facts, batch_size: int | None) -> float:
    """Estimated ns a row of the program for ``facts`` (:class:`.symmetric.Facts`) in calls of
    ``batch_size`` rows (None: large batches)."""
    ns = COLUMN_NS * len(facts.columns)
    table = 8 * sum(len(g.outputs) * int((1 << facts.depth[g.trees]).sum()) for g in facts.groups)
    gather = GATHER_NS if table <= L2_BYTES else GATHER_FAR_NS
    for g in facts.groups:
        ns += len(g.trees) * (LEVEL_NS * g.depth + gather * len(g.outputs))
    if batch_size is not None:
        block = SMALL_LANES if batch_size <= SMALL_LANES else LANES
        ns *= -(-batch_size // block) * block / batch_size  # a partial block costs a whole one
    return float(ns)

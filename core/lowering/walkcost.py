"""The walks' cost model: estimated ns a row of the walks the core generates (MIR -> LIR), which
representations compare their own costs with when the CPU default chooses one
(a representation's ``cost``).  Measured on the AMD Zen 4 of docs/benchmarks.md (its
evaluation without walks, "Categorical features and deep leaf-wise trees")."""

from __future__ import annotations

import numpy as np

from silvanforge.ir import hir
from silvanforge.lowering.forest_stats import depth_stats, split_rows_pay, walks_exit_early

# A walk step, and more as rows grow (a walk reads its row at random: 0.65 ns a step with 8
# features, 2.4 ns with 2000 float64 ones).
WALK_STEP_NS, WALK_STEP_NS_PER_ROW_KB = 0.65, 0.1
# Walks that stop when their rows are at leaves (deep leaf-wise trees), a step of the trees'
# mean leaf depth: the interleaved rows' longest path plus the leaf checks (3.7 us a row on a
# taxi-shaped 300x255 LightGBM model without NaN, mean leaf depth 13.7; 14.3 us with NaN tests
# on the 1000x255 one, 1.11 ns a step, before split rows took NaN-trained models).
WALK_EXIT_STEP_NS = 0.9
# Walks that cannot read split rows test each value for NaN (forest_stats.split_rows_pay: infinite
# thresholds, e.g. LightGBM's NaN-or-not splits, or mixed ops): 1.45-1.9x the steps' time on
# LightGBM models trained on data with NaN (public_shapes.py higgs, airline, year, covtype).
WALK_NAN_TEST_FACTOR = 1.5
# Walks of models with categorical splits take the general step (a flags byte, the bitset's
# length and word loaded, no split rows, one row at a time): 3.3x the numeric step's estimate on
# a flight-delay-shaped LightGBM model (83% categorical splits), 11.6x on an XGBoost one of
# depth 8 (benchmarks/categorical_models.py); the smaller is charged.
WALK_CATEGORICAL_FACTOR = 3.0
# Linear leaves (LightGBM linear_tree): a leaf's model evaluated after each walk, about 9 ns a
# tree and 1.2 ns a term (sparse walks, 1 thread, 4,096 rows: 100-200 trees of 31-63 leaves, 1-20
# terms a leaf; 15-22 ns a tree with LightGBM's own 4.7-6.8 terms, whose varying counts cost the
# term loop's exit branch; measured on an AMD EPYC, not the Zen 4 above).
LINEAR_TREE_NS, LINEAR_TERM_NS = 9.0, 1.2
# A tree of several outputs (XGBoost vector leaves) adds each output's leaf value: 1.6 ns an
# output past the first (sparse walks, 100 trees of depth 8 with 5 outputs: 13.2 ns a tree and
# row against 6.0 with one, 1 thread, 4096 rows, Zen 4).
WALK_OUTPUT_NS = 1.6


def walk_estimate_ns(forest: hir.Forest) -> float:
    """Estimated ns a row of the walks (the costs above): every tree to its depth,
    or, where walks stop when their rows are at leaves (:func:`forest_stats.walks_exit_early`:
    trees deep beside their leaves), about each tree's mean leaf depth; the outputs past a
    tree's first; and the linear leaves' models where there are (:func:`linear_estimate_ns`)."""
    row_kb = forest.num_features * np.dtype(forest.threshold_dtype).itemsize / 1000
    stats = depth_stats(forest)
    depth, mean_leaf, _ = stats
    if walks_exit_early(forest, stats)[0]:
        steps, step_ns = float(mean_leaf.sum()), WALK_EXIT_STEP_NS
    else:
        steps, step_ns = float(depth.sum()), WALK_STEP_NS
    if forest.has_categorical():
        factor = WALK_CATEGORICAL_FACTOR
    else:
        factor = 1.0 if split_rows_pay(forest, check_width=False) else WALK_NAN_TEST_FACTOR
    outputs = sum(len(t.outputs) - 1 for t in forest.trees)
    return ((step_ns + WALK_STEP_NS_PER_ROW_KB * row_kb) * steps * factor + WALK_OUTPUT_NS * outputs
            + linear_estimate_ns(forest))


def linear_estimate_ns(forest: hir.Forest) -> float:
    """Estimated ns a row of the linear leaves' models (0 without them): every linear tree's
    cost plus its mean terms a leaf."""
    linear = [t for t in forest.trees if t.linear is not None]
    terms = sum(len(t.linear.feature) / max(1, t.num_leaves) for t in linear)
    return LINEAR_TREE_NS * len(linear) + LINEAR_TERM_NS * terms

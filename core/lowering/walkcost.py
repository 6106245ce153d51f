"""What the core's walks cost, and the facts about a forest that price them.

The facts (several choices read them): how deep a forest's trees run beside their leaves
(:func:`depth_stats`, :func:`walks_exit_early`) and whether split rows decide its splits and pay
(:func:`split_rows_pay`).  The walk lowering, representations' costs and targets' schedule
choosers all ask, so this module depends on the HIR alone.

The cost model: estimated ns a row of the walks the core generates (MIR -> LIR), which
representations compare their own costs with when the CPU default chooses one (a
representation's ``cost``).  Measured on the AMD Zen 4 of docs/benchmarks.md (its evaluation
without walks, "Categorical features and deep leaf-wise trees")."""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from silvanforge.ir import hir
from silvanforge.ir.hir import Op
from silvanforge.ir.hir_joined import joined, node_depths, offsets, tree_depths
from silvanforge.lowering.layout import category_top
from silvanforge.plan.memo import memoised

__all__ = ["WALK_STEP_NS", "WALK_STEP_NS_PER_ROW_KB", "WALK_STEP_NS_PER_ROW_KB_PAST_L1", "row_step_ns", "WALK_EXIT_STEP_NS", "WALK_NAN_TEST_FACTOR", "WALK_CATEGORICAL_FACTOR", "WALK_OUTPUT_NS",
           "WALK_SET_NS", "WALK_SET_NS_PAST_CACHE", "WALK_SET_CACHE_BYTES",
           "walk_estimate_ns", "linear_estimate_ns", "LEAF_LOOPS_STEP_RATIO", "SPLIT_ROWS_ANY_WIDTH", "SPLIT_ROWS_WALK_SHARE",
           "depth_stats", "walks_exit_early", "split_rows_pay", "split_thresholds_exact", "walks_prefetch",
           "WALK_PREFETCH_BYTES", "CHAIN_MIN_TREES_PER_LANE", "chains_pay"]


# --- the forest's facts

# Walks through self-looping leaves take each tree's deepest path (a counted loop over the
# tree's depth, the same for every lane, so its branch predicts; or peeled where every tree is
# as deep): that pays while a tree's depth is not far past its leaves' mean depth: 1.5-1.8x on
# 1000 trees of depth 10 (docs/benchmarks.md), not on leaf-wise forests of depths 9 to 23 (walks
# to the forest's depth: 0.66-0.75x).  Walks that check for leaves pay a mispredicted branch
# about every other step instead.
LEAF_LOOPS_STEP_RATIO = 1.5  # sum of tree depths / sum of the trees' mean leaf depths, at most


def walks_exit_early(forest: hir.Forest, stats=None) -> tuple[bool, int]:
    """Whether self-looping walks stop once every walk interleaved with them is at a leaf
    (trees deep beside their leaves' mean depth: leaf-wise LightGBM), instead of running each
    tree to its depth; and the steps every walk takes (the shallowest leaf of any tree).

    Early exit: one leaf check a walk a step, the steps themselves unconditional (a leaf stays
    put), so the only branch is the loop's, bounded by the deepest tree's depth.  On 300
    leaf-wise trees of 255 leaves (depth 24.9 on average, a row's path about 6.4, the longest of
    8 rows' paths about 11.5) it ran 1.03x the walks that branch on a leaf check per walk and
    per step (1.2x without the bound, which a lane past its chunk needs: it may read a row not
    its own and step off a leaf), and it keeps the self-looping leaves' layout for all forests.
    ``stats``: :func:`depth_stats` of the forest, if computed already."""
    if not forest.trees:
        return False, 0
    depth, mean_leaf, shallowest = stats or depth_stats(forest)
    return bool(depth.sum() > LEAF_LOOPS_STEP_RATIO * mean_leaf.sum()), shallowest


def depth_stats(forest: hir.Forest) -> tuple[np.ndarray, np.ndarray, int]:
    """Each tree's depth and its leaves' mean depth, and the shallowest leaf of any tree: every
    tree at once, level by level (a per-tree walk took half a second on 1000 deep trees).
    Computed once a compile (every representation's estimate at every band's size asks):
    the arrays are read-only."""
    return memoised(forest, "depth_stats", lambda: _depth_stats(forest))


def _depth_stats(forest: hir.Forest) -> tuple[np.ndarray, np.ndarray, int]:
    if not forest.trees:
        return np.zeros(0, np.int64), np.zeros(0), 0
    offset, node_depth = offsets(forest), node_depths(forest)
    sizes = np.diff(offset)
    tree_of = np.repeat(np.arange(len(sizes)), sizes)
    is_leaf = joined(forest, "left") < 0
    depth = tree_depths(forest)
    leaves = np.bincount(tree_of[is_leaf], minlength=len(sizes))
    mean_leaf = np.bincount(tree_of[is_leaf], weights=node_depth[is_leaf], minlength=len(sizes)) / leaves
    mean_leaf.flags.writeable = False
    return depth, mean_leaf, int(node_depth[is_leaf].min())


# Split rows pay while writing one (2F values) costs little beside walking it: wide rows (2000
# features under 300 trees of depth 8) spend more writing, and more cache, than the walks save.
SPLIT_ROWS_ANY_WIDTH = 128  # columns of a split row that always pay
SPLIT_ROWS_WALK_SHARE = 0.25  # otherwise at most this many columns per walk step of a row


def split_thresholds_exact(threshold: np.ndarray, ops) -> bool:
    """Whether split rows decide these thresholds (of one dtype) exactly.  Split rows hold
    +-inf inputs as +-MAX (the dtype's largest finite value) and missing values as +-inf, so a
    threshold must not be +-MAX, nor -inf; +inf only under ``<=`` (LightGBM's NaN-or-not split
    ``x <= +inf``), compiled as ``x <= MAX``: every number (+inf too, as MAX) goes left, a
    missing value (+inf, or -inf where missing values go left) where its default sends it.  A
    NaN threshold (no input goes left at it) keeps the NaN test too."""
    top = np.finfo(threshold.dtype).max
    if np.isnan(threshold).any() or (np.abs(threshold) == top).any() or (threshold == -np.inf).any():
        return False
    return not (threshold == np.inf).any() or set(int(o) for o in ops) == {int(Op.LE)}


def split_rows_pay(forest: hir.Forest, check_width: bool = True) -> bool:
    """Whether split rows are exact and pay for this forest: every numerical split compares
    with ``<`` or with ``<=`` (one of them), none treats zero as missing, every threshold is
    finite (+-inf would meet an infinite threshold on the wrong side), and the split row is
    narrow beside the walk steps of a row (``check_width``).  Also asked by schedule choosers
    and every walk's estimate: computed once a compile."""
    return memoised(forest, ("split_rows_pay", check_width), lambda: _split_rows_pay(forest, check_width))


def _split_rows_pay(forest: hir.Forest, check_width: bool) -> bool:
    internal = joined(forest, "left") >= 0
    if joined(forest, "zero_missing")[internal].any():
        return False
    if forest.has_categorical():  # (a categorical split reads a split row's value as it is)
        internal &= ~np.concatenate([t.categorical_mask() for t in forest.trees])
    ops = set(int(o) for o in np.unique(joined(forest, "op")[internal]))
    if len(ops) > 1:
        return False
    with np.errstate(over="ignore"):
        if not split_thresholds_exact(joined(forest, "threshold")[internal].astype(forest.threshold_dtype), ops):
            return False
    if not ops <= {int(Op.LT), int(Op.LE)}:
        return False
    if not check_width:
        return True
    steps = int(depth_stats(forest)[0].sum())
    columns = (4 if forest.has_categorical() else 2) * forest.num_features  # (category columns too)
    return columns <= max(SPLIT_ROWS_ANY_WIDTH, SPLIT_ROWS_WALK_SHARE * steps)


# --- the walks' cost model

# A walk step, and more as rows grow (a walk reads its row at random: 0.65 ns a step with 8
# features, 2.4 ns with 2000 float64 ones).
WALK_STEP_NS, WALK_STEP_NS_PER_ROW_KB = 0.65, 0.1
# More again where the rows a batch's interleaved walks read at once outgrow the L1 cache
# (WALK_ROWS_IN_FLIGHT rows, as the walks read them: split rows of 2F+1 values where they are
# exact, beyond WALK_L1_BYTES): their steps read the chunk's rows from L2, a line and a page
# apart.  Measured 0.18 ns a step a KB of row (sparse walks of 100 synthetic trees of depth 8
# on 0.13-16 KB rows, cached a chunk at a time, 4096-row calls, 1 thread, AVX2 code, Zen 4):
# 0.1 priced xgb_epsilon's walks (8 KB rows) and a 968-feature XGBoost model's (Bosch's
# shape) below the levelwise form on AVX2 code, which ran 1.3x and 1.25x faster.  Walks of a
# call under WALK_INTERLEAVED_ROWS rows go a row at a time (the CPU default): its row stays in L1.
WALK_STEP_NS_PER_ROW_KB_PAST_L1 = 0.18
WALK_L1_BYTES, WALK_ROWS_IN_FLIGHT, WALK_INTERLEAVED_ROWS = 32 << 10, 8, 16
# A row's walks of several trees at once prefetch each node's children (the line of each field
# the next step loads) where the forest's thresholds alone pass this much, the L2 cache of the
# hosts measured: the deep nodes of one row's walks then come from L3 (1.07x one row of a
# 1000-tree 255-leaf categorical LightGBM model, 6 MB of nodes).
WALK_PREFETCH_BYTES = 1 << 20


def walks_prefetch(forest: hir.Forest) -> bool:
    """Whether a row's walks of several trees prefetch the children of each node they step from
    (:data:`WALK_PREFETCH_BYTES`)."""
    nodes = int(offsets(forest)[-1]) if forest.trees else 0
    return nodes * np.dtype(forest.threshold_dtype).itemsize > WALK_PREFETCH_BYTES


# Chained walks (silvanforge.lowering.chains) of a row: each lane walks its trees back to back
# where interleaved lanes would wait at their leaves for the longest of their paths, walks that
# exit early (deep, uneven trees: :func:`walks_exit_early`).  One row, 1 thread, against the
# interleaved walks (1000-tree LightGBM models): 1.27x on 31-leaf categorical trees, 1.46x /
# 1.13x on 255-leaf ones (taxi, flight); 1000 XGBoost trees of depth 8, whose walks run to
# each tree's depth without leaf checks, 0.83x.  With 100 trees a lane's dozen paths end
# unevenly (0.85x on a 255-leaf categorical model): a lane takes at least this many trees.
CHAIN_MIN_TREES_PER_LANE = 32


def chains_pay(forest: hir.Forest, lanes: int) -> bool:
    """Whether a few rows' walks of ``forest`` in ``lanes`` lanes pay chained: enough trees a
    lane (:data:`CHAIN_MIN_TREES_PER_LANE`) whose walks exit early."""
    if lanes < 2 or forest.num_trees < CHAIN_MIN_TREES_PER_LANE * lanes:
        return False
    return walks_exit_early(forest)[0]


# Walks that stop when their rows are at leaves (deep leaf-wise trees), a step of the trees'
# mean leaf depth: the interleaved rows' longest path plus the leaf checks (3.7 us a row on a
# taxi-shaped 300x255 LightGBM model without NaN, mean leaf depth 13.7; 14.3 us with NaN tests
# on the 1000x255 one, 1.11 ns a step, before split rows took NaN-trained models).
WALK_EXIT_STEP_NS = 0.9
# Walks that cannot read split rows test each value for NaN (:func:`split_rows_pay`: infinite
# thresholds, e.g. LightGBM's NaN-or-not splits, or mixed ops): 1.45-1.9x the steps' time on
# LightGBM models trained on data with NaN (public_shapes.py higgs, airline, year, covtype).
WALK_NAN_TEST_FACTOR = 1.5
# Walks of models with categorical splits took the general step (a flags byte, the bitset's
# length and word loaded, no split rows, one row at a time): 3.3x the numeric step's estimate on
# a flight-delay-shaped LightGBM model (83% categorical splits), 11.6x on an XGBoost one of
# depth 8 (benchmarks/categorical_models.py); the smaller is charged.  Split rows' category
# columns made a categorical step one word's load (1.3-1.7x one row of a 1000-tree 255-leaf
# flight-delay model), yet its row-interleaved walks at 16 rows still take 1.8x the bitset
# form's time there, so the factor stands until it is measured again.
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


# Categorical splits read set columns (:func:`silvanforge.lowering.layout.split_row_sets`) where
# their distinct sets are at most this many a walk step of a row (each tree's mean leaf depth):
# every set's bit is written once a row (vector code: 32 sets in about 13 AVX-512
# instructions), while a categorical step that branches to its bitset test mispredicts on fresh
# rows.  One row, 1 thread (benchmarks/ab.py --variant bits=sets=0 --variant sets=sets=1): 1.42x
# on a 1000-tree 31-leaf insurance-like LightGBM model (0.86 sets a step), 1.34x on a 1000-tree
# 255-leaf flight-delay one (1.7), 1.09x on a mixed XGBoost one, 0.97x on a 100-tree 255-leaf
# insurance-like one (3.5 sets a step).
SET_COLUMNS_WALK_SHARE = 2.0
# The most words of bitsets set columns are built from (16 MB; every split's, before the distinct
# ones are kept).
SET_COLUMNS_MAX_WORDS = 1 << 22


def set_columns_pay(forest: hir.Forest, batch_size: int | None = None) -> bool:
    """Whether categorical splits read set columns in walks compiled for calls of
    ``batch_size`` rows (None: any): their distinct sets (:func:`category_sets`) few beside a
    row's walk steps (:data:`SET_COLUMNS_WALK_SHARE`), and, unless the walks go a row at a time
    (under :data:`WALK_INTERLEAVED_ROWS` rows), the split rows that interleaved walks read at
    once within the L1 cache: sparse walks of 512-4096 rows of the 1000-tree insurance-like model
    ran 1.2-1.7x slower reading 49 KB split rows."""
    sets = category_sets(forest)
    steps = float(depth_stats(forest)[1].sum())  # (each tree's mean leaf depth)
    if not sets or sets > SET_COLUMNS_WALK_SHARE * steps:
        return False
    if batch_size is not None and batch_size < WALK_INTERLEAVED_ROWS:
        return True
    row = (2 * forest.num_features + 1 + sets) * np.dtype(forest.threshold_dtype).itemsize
    return WALK_ROWS_IN_FLIGHT * row <= WALK_L1_BYTES


def set_columns_fit(forest: hir.Forest) -> bool:
    """Whether the categorical splits' bitsets, each spanning its feature's categories (as
    :func:`silvanforge.lowering.layout.split_row_sets` builds them before keeping the distinct
    ones), are at most :data:`SET_COLUMNS_MAX_WORDS` words: a feature of huge category ids split
    often would ask gigabytes."""
    return _category_set_facts(forest)[1] <= SET_COLUMNS_MAX_WORDS


def category_sets(forest: hir.Forest) -> int:
    """The distinct (feature, category set, missing direction) of the categorical splits: the
    set columns a split row would hold."""
    return _category_set_facts(forest)[0]


def _category_set_facts(forest: hir.Forest) -> tuple[int, int]:
    """(the distinct sets, the words of every split's bitset), computed once a compile."""
    def facts() -> tuple[int, int]:
        splits = [(int(tree.feature[node]), bool(tree.default_left[node]), np.asarray(cats, np.int64))
                  for tree in forest.trees for node, cats in tree.categories.items()]
        top = category_top(forest)
        distinct = {(f, left, cats.tobytes()) for f, left, cats in splits}
        return len(distinct), sum(int(top[f] + 2) // 32 + 1 for f, _, _ in splits)
    return memoised(forest, "category_set_facts", facts)


# Walks a row at a time whose categorical splits read set columns (:func:`set_columns_pay`):
# a categorical step is a numeric one (a word's load), and each row first writes every distinct
# set's bit, about WALK_SET_NS a set while the bitsets' bytes stay within WALK_SET_CACHE_BYTES,
# WALK_SET_NS_PAST_CACHE past it (a word read from each of them, scattered).  One row from the
# data's own rows, 1 thread, Zen 4 VM, less the call's 1.3 us, against the estimate (the general
# factor's before): a 1000-tree 255-leaf taxi-zone LightGBM model (12,025 sets, 51 KB of
# bitsets) 12.0 us / 14.3 (32.0), a 1000-tree 31-leaf insurance-like one (6,128, 31 KB) 4.8 /
# 8.3 (19.4), a 1000-tree 255-leaf flight-delay one (20,963 sets, 829 KB) 29.4 / 32.2 (33.6)
# (benchmarks/categorical_models.py).
WALK_SET_NS, WALK_SET_NS_PAST_CACHE, WALK_SET_CACHE_BYTES = 0.3, 1.0, 512 << 10


def walk_estimate_ns(forest: hir.Forest, batch_size: int | None = None) -> float:
    """Estimated ns a row of the walks (the costs above) in calls of ``batch_size`` rows (None:
    large batches): every tree to its depth, or, where walks stop when their rows are at
    leaves (:func:`walks_exit_early`: trees deep beside their leaves), about each tree's mean
    leaf depth, a step costing more as rows grow (:func:`row_step_ns`); a row's set columns
    where walks a row at a time read them (:data:`WALK_SET_NS`); the outputs past a tree's
    first; and the linear leaves' models where there are (:func:`linear_estimate_ns`)."""
    stats = depth_stats(forest)
    depth, mean_leaf, _ = stats
    if walks_exit_early(forest, stats)[0]:
        steps, step_ns = float(mean_leaf.sum()), WALK_EXIT_STEP_NS
    else:
        steps, step_ns = float(depth.sum()), WALK_STEP_NS
    sets_ns = 0.0
    if not forest.has_categorical():
        factor = 1.0 if split_rows_pay(forest, check_width=False) else WALK_NAN_TEST_FACTOR
    elif batch_size is not None and batch_size < WALK_INTERLEAVED_ROWS and split_rows_pay(forest) \
            and set_columns_pay(forest, batch_size) and set_columns_fit(forest):
        # (as the walks' setup decides, rows of any width aside: it may split wide rows a chunk
        # at a time, or not at all; those keep the general factor, the dearer)
        factor = 1.0
        sets, words = _category_set_facts(forest)
        sets_ns = sets * (WALK_SET_NS if 4 * words <= WALK_SET_CACHE_BYTES else WALK_SET_NS_PAST_CACHE)
    else:
        factor = WALK_CATEGORICAL_FACTOR
    outputs = sum(map(len, map(attrgetter("outputs"), forest.trees))) - len(forest.trees)
    return ((step_ns + row_step_ns(forest, batch_size)) * steps * factor + sets_ns + WALK_OUTPUT_NS * outputs
            + linear_estimate_ns(forest))


def row_step_ns(forest: hir.Forest, batch_size: int | None = None) -> float:
    """What a walk step costs more for the width of the row it reads: WALK_STEP_NS_PER_ROW_KB
    a KB of row, WALK_STEP_NS_PER_ROW_KB_PAST_L1 where the rows interleaved walks read at once
    (split rows where they are exact) pass the L1 cache, in calls of ``batch_size`` rows."""
    itemsize = np.dtype(forest.threshold_dtype).itemsize
    row_kb = forest.num_features * itemsize / 1000
    if batch_size is not None and batch_size < WALK_INTERLEAVED_ROWS:
        return WALK_STEP_NS_PER_ROW_KB * row_kb
    walked = (2 * forest.num_features + 1 if split_rows_pay(forest, check_width=False) else forest.num_features)
    past_l1 = WALK_ROWS_IN_FLIGHT * walked * itemsize > WALK_L1_BYTES
    return (WALK_STEP_NS_PER_ROW_KB_PAST_L1 if past_l1 else WALK_STEP_NS_PER_ROW_KB) * row_kb


def linear_estimate_ns(forest: hir.Forest) -> float:
    """Estimated ns a row of the linear leaves' models (0 without them): every linear tree's
    cost plus its mean terms a leaf."""
    if not forest.has_linear():
        return 0.0
    linear = [t for t in forest.trees if t.linear is not None]
    terms = sum(len(t.linear.feature) / max(1, t.num_leaves) for t in linear)
    return LINEAR_TREE_NS * len(linear) + LINEAR_TERM_NS * terms

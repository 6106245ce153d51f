"""Facts about a forest that several choices read: how deep its trees run beside their leaves
(:func:`depth_stats`, :func:`walks_exit_early`) and whether split rows decide its splits and pay
(:func:`split_rows_pay`).  The walk lowering, the walks' cost model, representations' costs and
targets' schedule choosers all ask, so this module depends on the HIR alone.
"""

from __future__ import annotations

import numpy as np

from silvanforge.ir import hir
from silvanforge.ir.hir import Op
from silvanforge.plan.memo import memoised

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
    offset, left, _, levels = hir.level_order(forest)
    node_depth = np.zeros(len(left), np.int64)
    for depth, level in enumerate(levels):
        node_depth[level] = depth
    sizes = np.diff(offset)
    tree_of = np.repeat(np.arange(len(sizes)), sizes)
    is_leaf = left < 0
    depth = np.maximum.reduceat(node_depth, offset[:-1])
    leaves = np.bincount(tree_of[is_leaf], minlength=len(sizes))
    mean_leaf = np.bincount(tree_of[is_leaf], weights=node_depth[is_leaf], minlength=len(sizes)) / leaves
    depth.flags.writeable = mean_leaf.flags.writeable = False
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
    """Whether split rows are exact and pay for this forest: every split is numerical and
    compares with ``<`` or with ``<=`` (one of them), none treats zero as missing, every threshold
    is finite (+-inf would meet an infinite threshold on the wrong side), and the split row is
    narrow beside the walk steps of a row (``check_width``).  Also asked by schedule choosers
    and every walk's estimate: computed once a compile."""
    return memoised(forest, ("split_rows_pay", check_width), lambda: _split_rows_pay(forest, check_width))


def _split_rows_pay(forest: hir.Forest, check_width: bool) -> bool:
    if forest.has_categorical():
        return False
    ops = set()
    thr_dtype = np.dtype(forest.threshold_dtype)
    for t in forest.trees:
        internal = t.left >= 0
        if t.zero_missing[internal].any():
            return False
        ops.update(int(o) for o in np.unique(t.op[internal]))
        if len(ops) > 1:
            return False
        with np.errstate(over="ignore"):
            if not split_thresholds_exact(t.threshold[internal].astype(thr_dtype), ops):
                return False
    if not ops <= {int(Op.LT), int(Op.LE)}:
        return False
    if not check_width:
        return True
    steps = int(depth_stats(forest)[0].sum())
    return 2 * forest.num_features <= max(SPLIT_ROWS_ANY_WIDTH, SPLIT_ROWS_WALK_SHARE * steps)


__all__ = ["LEAF_LOOPS_STEP_RATIO", "SPLIT_ROWS_ANY_WIDTH", "SPLIT_ROWS_WALK_SHARE", "depth_stats",
           "walks_exit_early", "split_rows_pay", "split_thresholds_exact"]

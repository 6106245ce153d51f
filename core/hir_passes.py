"""Model-level transformations on the HIR (seed 004, section 5.1): each returns a new Forest with
exactly the same predictions.

* :func:`pad_trees` makes every leaf of every tree as deep as the deepest leaf of the forest, so
  walks take a fixed number of steps and need no leaf checks (``peelWalk``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .ir.hir import Forest, Op, Tree


def padded_nodes(forest: Forest, depth: int | None = None) -> int:
    """Node count of the forest once padded to ``depth`` (default: its max depth)."""
    depth = forest.max_depth() if depth is None else depth
    return forest.num_trees * (2 ** (depth + 1) - 1)


def pad_tree(tree: Tree, depth: int) -> Tree:
    """The tree as a complete tree of ``depth`` levels of splits, in array order (children of
    slot k at 2k+1 and 2k+2).  A leaf above the bottom becomes a subtree of dummy splits whose
    two sides are identical copies of the leaf, so whichever way a row goes, it reaches the
    same value: predictions are unchanged for every input, NaN and infinities included."""
    size = 2 ** (depth + 1) - 1
    source = np.full(size, -1, dtype=np.int64)  # original node behind each slot
    source[0] = 0
    for k in range(size):
        node = source[k]
        if 2 * k + 2 >= size:
            continue
        if tree.left[node] >= 0:
            source[2 * k + 1], source[2 * k + 2] = tree.left[node], tree.right[node]
        else:  # a leaf above the bottom: both sides copy it
            source[2 * k + 1] = source[2 * k + 2] = node
    slots = np.arange(size)
    internal = 2 * slots + 2 < size
    real_split = internal & (tree.left[source] >= 0)
    feature = np.where(real_split, tree.feature[source], np.where(internal, 0, -1))
    cats = {int(k): tree.categories[int(source[k])] for k in np.flatnonzero(real_split)
            if int(source[k]) in tree.categories}
    return Tree(
        left=np.where(internal, 2 * slots + 1, -1).astype(np.int32),
        right=np.where(internal, 2 * slots + 2, -1).astype(np.int32),
        feature=feature.astype(np.int32),
        threshold=np.where(real_split, tree.threshold[source], 0.0),
        op=np.where(real_split, tree.op[source], Op.LT).astype(np.uint8),
        default_left=np.where(real_split, tree.default_left[source], True),
        zero_missing=np.where(real_split, tree.zero_missing[source], False),
        leaf_value=np.where(internal[:, None], 0.0, tree.leaf_value[source]),
        outputs=tree.outputs,
        categories=cats,
    )


def pad_trees(forest: Forest, depth: int | None = None) -> Forest:
    """Every tree padded to ``depth`` (default: the forest's max depth); see :func:`pad_tree`."""
    depth = forest.max_depth() if depth is None else depth
    return dataclasses.replace(forest, trees=[pad_tree(t, depth) for t in forest.trees])


def leaf_depth_range(forest: Forest) -> tuple[int, int]:
    """(shallowest, deepest) leaf over the whole forest."""
    lo, hi = None, 0
    for t in forest.trees:
        d = t.node_depths()[t.left < 0]
        lo = int(d.min()) if lo is None else min(lo, int(d.min()))
        hi = max(hi, int(d.max()))
    return lo or 0, hi

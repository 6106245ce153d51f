"""The forest as its library's TreeSHAP walks it (:func:`explained`), and symmetric trees'
levels (:func:`symmetric_levels`).

Path-dependent TreeSHAP depends on a tree's shape, not only on the function it computes: the
cover fraction at a node is conditional on the nodes above it.  A symmetric (oblivious) tree
tests one split a level, so its levels can be walked in any order, and CatBoost's
``ShapValues`` walks them from the last split to the first (the split of the leaf index's
highest bit at the root), never entering a branch whose weight is zero (``FuzzyEquals(1 + w,
1)``).  :func:`explained` gives the same forest with CatBoost's symmetric trees rebuilt in that
order and the leaves its walk never enters holding 0 (a path to them then adds nothing, as
one never walked), so every evaluator of the contributions (the NumPy one of
:mod:`silvanforge.runtime.contributions` and the compiled kernel's arrays of
:mod:`silvanforge.runtime.shap_arrays`) follows CatBoost without knowing of it.  The view is
for contributions only: predictions and leaf indices read the forest as imported.

Before and after, a depth-2 symmetric tree testing ``a`` then ``b`` (leaf index ``b a`` in
bits), whose leaf 2 (``b`` true, ``a`` false) has no weight::

    a? -> b? -> leaves 0, 2        b? -> a? -> leaves 0, 1
       -> b? -> leaves 1, 3           -> a? -> leaves 2 (value 0), 3
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir.hir import Forest, Tree

# CatBoost's FuzzyEquals precision: a branch of weight w with 1 + w equal to 1 to it is skipped.
FUZZY_EPS = 1e-13


def explained(forest: Forest) -> Forest:
    """``forest`` as its library's TreeSHAP walks it: CatBoost's symmetric trees with their
    levels reversed and the leaves its walk skips holding 0; any other forest as it is."""
    if forest.source != "catboost":
        return forest
    trees = [_catboost_view(tree) for tree in forest.trees]
    return dataclasses.replace(forest, trees=trees)


def preordered(tree: Tree) -> Tree:
    """The same tree with its nodes numbered in depth-first preorder, left child first: the
    order a walk of its leaf paths meets them, so deciding them reads node arrays (and
    categorical splits' sets) front to back."""
    left, right = tree.left.tolist(), tree.right.tolist()
    order, stack = [], [0]
    while stack:
        n = stack.pop()
        order.append(n)
        if left[n] >= 0:
            stack.append(right[n])
            stack.append(left[n])
    order = np.array(order, np.int64)
    if order.size == tree.num_nodes and (order == np.arange(order.size)).all():
        return tree
    rank = np.full(tree.num_nodes, -1, np.int64)
    rank[order] = np.arange(order.size)
    kids = lambda a: np.where(a[order] >= 0, rank[np.maximum(a[order], 0)], -1).astype(a.dtype)  # noqa: E731
    take = lambda a: None if a is None else np.asarray(a)[order].copy()  # noqa: E731
    return dataclasses.replace(
        tree, left=kids(tree.left), right=kids(tree.right), feature=take(tree.feature), threshold=take(tree.threshold),
        op=take(tree.op), default_left=take(tree.default_left), zero_missing=take(tree.zero_missing),
        leaf_value=take(tree.leaf_value), categories={int(rank[n]): c for n, c in tree.categories.items()},
        tile_id=None, cover=take(tree.cover), node_ids=take(tree.node_ids))


def symmetric_levels(tree: Tree) -> list[np.ndarray] | None:
    """Every level's nodes, the leaves last, where every node of a level tests the same split
    and every leaf is at the last level, else None.  A level lists the left children of the
    level above, then their right children, so a node's position at level ``k`` is
    ``sum(went_right_i << i)`` over the levels above it."""
    level = np.zeros(1, np.int64)
    out = [level]
    while tree.left[level[0]] >= 0:
        if (tree.left[level] < 0).any() or not _one_split(tree, level):
            return None
        level = np.concatenate([tree.left[level], tree.right[level]]).astype(np.int64)
        out.append(level)
    return out if (tree.left[level] < 0).all() else None


def _one_split(tree: Tree, nodes: np.ndarray) -> bool:
    """Whether ``nodes`` all test the same split."""
    n0 = nodes[0]
    for name in ("feature", "op", "default_left", "zero_missing"):
        values = getattr(tree, name)[nodes]
        if (values != values[0]).any():
            return False
    t = tree.threshold[nodes]
    if not ((t == t[0]) | (np.isnan(t) & np.isnan(t[0]))).all():
        return False
    cats = tree.categories
    if not cats:
        return True
    first = cats.get(int(n0))
    for n in nodes.tolist():
        got = cats.get(n)
        if (got is None) != (first is None) or (got is not None and got is not first
                                                 and not np.array_equal(got, first)):
            return False
    return True


def _catboost_view(tree: Tree) -> Tree:
    if tree.cover is None:
        return tree
    levels = symmetric_levels(tree)
    if levels is not None and len(levels) > 2 and _numbered_by_level(tree, levels):
        tree = _reversed(tree, levels)
    return _skipped_zeroed(tree)


def _numbered_by_level(tree: Tree, levels: list[np.ndarray]) -> bool:
    """Whether the leaves' ids are their levels' bits (CatBoost's symmetric trees, bit ``k``
    for level ``k``), not a depth-first count (its other trees, which may be symmetric too)."""
    if tree.node_ids is None:
        return False
    ids = np.asarray(tree.node_ids)[levels[-1]].astype(np.int64)
    position = np.arange(ids.size)
    for k in range(len(levels) - 1):
        bit, went = (ids >> k) & 1, (position >> k) & 1
        if not ((bit == went).all() or (bit != went).all()):
            return False
    return True


def _reversed(tree: Tree, levels: list[np.ndarray]) -> Tree:
    """The symmetric tree with its levels in reverse order, as a heap (node ``j``'s children
    ``2j + 1`` and ``2j + 2``).  A new leaf's heap position (the root's way its highest bit)
    is the old leaf's position at the last level (the old root's way its lowest bit)."""
    L = len(levels) - 1
    n = (2 << L) - 1
    inner = np.arange((1 << L) - 1)
    depth = np.floor(np.log2(inner + 1)).astype(np.int64)
    source = np.empty(n, np.int64)  # the old node whose split or leaf each new node copies
    source[inner] = np.array([levels[k][0] for k in range(L)], np.int64)[L - 1 - depth]
    source[(1 << L) - 1:] = levels[L]
    left = np.full(n, -1, np.int32)
    right = np.full(n, -1, np.int32)
    left[inner], right[inner] = 2 * inner + 1, 2 * inner + 2
    leaf_value = tree.leaf_value[source].copy()
    leaf_value[inner] = 0.0
    cover = np.asarray(tree.cover, np.float64)[source].copy()
    for j in inner[::-1]:  # children after their parents: from the bottom up
        cover[j] = cover[2 * j + 1] + cover[2 * j + 2]
    node_ids = None if tree.node_ids is None else np.asarray(tree.node_ids)[source].copy()
    categories = {int(j): tree.categories[int(source[j])] for j in inner.tolist()
                  if int(source[j]) in tree.categories}
    return dataclasses.replace(
        tree, left=left, right=right, feature=tree.feature[source].copy(), threshold=tree.threshold[source].copy(),
        op=tree.op[source].copy(), default_left=tree.default_left[source].copy(),
        zero_missing=tree.zero_missing[source].copy(), leaf_value=leaf_value, categories=categories,
        tile_id=None, cover=cover, node_ids=node_ids)


def _skipped_zeroed(tree: Tree) -> Tree:
    """The tree with 0 at the leaves CatBoost's walk never enters (a node on the way, or the
    leaf, of weight zero to ``FUZZY_EPS``)."""
    cover = np.asarray(tree.cover, np.float64)
    light = np.abs((1.0 + cover) - 1.0) <= FUZZY_EPS * np.minimum(np.abs(1.0 + cover), 1.0)
    skipped = np.zeros(tree.num_nodes, bool)
    level = np.zeros(1, np.int64)
    while level.size:
        inner = level[tree.left[level] >= 0]
        kids = np.concatenate([tree.left[inner], tree.right[inner]]).astype(np.int64)
        skipped[kids] = np.concatenate([skipped[inner], skipped[inner]]) | light[kids]
        level = kids
    zeroed = skipped & (tree.left < 0) & (tree.leaf_value != 0).any(axis=1)
    if not zeroed.any():
        return tree
    leaf_value = tree.leaf_value.copy()
    leaf_value[zeroed] = 0.0
    return dataclasses.replace(tree, leaf_value=leaf_value)

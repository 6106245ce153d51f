"""Model-level transformations on the HIR (the SilvanForge paper draft, section 'Optimizations on
High-Level IR'): each returns a new Forest with exactly the same predictions.

* :func:`pad_trees` makes every leaf of every tree as deep as the deepest leaf of the forest, so
  walks take a fixed number of steps and need no leaf checks (``peelWalk``).
* :func:`reorder_trees` puts trees of equal depth (or equal peel depth, the shallowest leaf) next
  to each other (the probability-based tiling draft; the SilvanForge paper draft,
  Fig. 2), so a schedule can split the tree loop at the group
  boundaries and specialise each group's walks (``peel-groups``, :func:`tree_groups`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.errors import InputError
from silvanforge.ir.hir import Forest, Op, Tree
from silvanforge.ir.hir_joined import joined, node_depths


def padded_nodes(forest: Forest, depth: int | None = None) -> int:
    """Node count of the forest once padded to ``depth`` (default: its max depth)."""
    depth = forest.max_depth() if depth is None else depth
    return forest.num_trees * (2 ** (depth + 1) - 1)


def pad_tree(tree: Tree, depth: int) -> Tree:
    """The tree as a complete tree of ``depth`` levels of splits, in array order (children of
    slot k at 2k+1 and 2k+2).  A leaf above the bottom becomes a subtree of dummy splits whose
    two sides are identical copies of the leaf, so whichever way a row goes, it reaches the
    same value (and the same linear model, where leaves have them): predictions are unchanged
    for every input, NaN and infinities included."""
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
    # A dummy split compares with the tree's own op (its outcome never matters): one op per
    # forest keeps the compiled decision a single compare (LightGBM's <= would otherwise meet <).
    real_ops = tree.op[tree.left >= 0]
    dummy_op = int(np.bincount(real_ops).argmax()) if len(real_ops) else int(Op.LT)
    return Tree(
        left=np.where(internal, 2 * slots + 1, -1).astype(np.int32),
        right=np.where(internal, 2 * slots + 2, -1).astype(np.int32),
        feature=feature.astype(np.int32),
        threshold=np.where(real_split, tree.threshold[source], 0.0),
        op=np.where(real_split, tree.op[source], dummy_op).astype(np.uint8),
        default_left=np.where(real_split, tree.default_left[source], True),
        zero_missing=np.where(real_split, tree.zero_missing[source], False),
        leaf_value=np.where(internal[:, None], 0.0, tree.leaf_value[source]),
        outputs=tree.outputs,
        categories=cats,
        # A copied leaf copies its linear model too.
        linear=None if tree.linear is None else tree.linear.take(np.where(internal, -1, source)),
    )


def pad_trees(forest: Forest, depth: int | None = None) -> Forest:
    """Every tree padded to ``depth`` (default: the forest's max depth); see :func:`pad_tree`."""
    depth = forest.max_depth() if depth is None else depth
    return dataclasses.replace(forest, trees=[pad_tree(t, depth) for t in forest.trees])


def leaf_depth_range(forest: Forest) -> tuple[int, int]:
    """(shallowest, deepest) leaf over the whole forest."""
    if not forest.trees:
        return 0, 0
    d = node_depths(forest)[joined(forest, "left") < 0]
    return int(d.min()), int(d.max())


def min_leaf_depth(tree: Tree) -> int:
    """Depth of the shallowest leaf: the steps every walk of the tree takes (its peel depth)."""
    return int(tree.node_depths()[tree.left < 0].min())


GROUP_KEYS = ("depth", "peel")


def _tree_key(tree: Tree, key: str) -> int:
    return tree.depth() if key == "depth" else min_leaf_depth(tree)


@dataclasses.dataclass(frozen=True)
class TreeGroup:
    """Trees ``start .. stop - 1`` share ``key`` (their depth or peel depth); every walk of
    them takes at least ``peel`` steps (their shallowest leaf)."""

    start: int
    stop: int
    key: int
    peel: int


def tree_groups(forest: Forest, key: str = "peel") -> list[TreeGroup]:
    """Runs of consecutive trees with equal ``key`` ("depth": deepest leaf, "peel": shallowest
    leaf), in the forest's order."""
    if key not in GROUP_KEYS:
        raise InputError(f"unknown tree grouping {key!r}; choose {' or '.join(GROUP_KEYS)}")
    groups: list[TreeGroup] = []
    for i, t in enumerate(forest.trees):
        k, peel = _tree_key(t, key), min_leaf_depth(t)
        if groups and groups[-1].key == k:
            g = groups[-1]
            groups[-1] = TreeGroup(g.start, i + 1, k, min(g.peel, peel))
        else:
            groups.append(TreeGroup(i, i + 1, k, peel))
    return groups


def reorder_trees(forest: Forest, key: str = "depth") -> tuple[Forest, list[TreeGroup], np.ndarray]:
    """The trees stably sorted by ``key`` (see :func:`tree_groups`), the groups of equal key and
    the permutation (``new.trees[i] is forest.trees[order[i]]``).

    Each tree keeps its outputs, so every output's margin aggregates the same leaves as before:
    exact for MIN and MAX, and for SUM and AVERAGE up to the order of the additions (the
    library's order is tree order; floating-point sums in another order can round differently
    in the last place).  Trees of one output stay in their original order within a group."""
    keys = np.array([_tree_key(t, key) for t in forest.trees], dtype=np.int64)
    if key not in GROUP_KEYS:
        tree_groups(forest, key)  # raises
    order = np.argsort(keys, kind="stable")
    new = dataclasses.replace(forest, trees=[forest.trees[int(i)] for i in order])
    return new, tree_groups(new, key), order


def pad_each_tree(forest: Forest) -> Forest:
    """Every tree padded to its own depth (:func:`pad_tree`): all of a tree's leaves at one
    depth, so a group of equally deep trees walks without leaf checks."""
    return dataclasses.replace(forest, trees=[pad_tree(t, t.depth()) for t in forest.trees])


def padded_nodes_each(forest: Forest) -> int:
    """Node count once every tree is padded to its own depth."""
    return sum(2 ** (t.depth() + 1) - 1 for t in forest.trees)

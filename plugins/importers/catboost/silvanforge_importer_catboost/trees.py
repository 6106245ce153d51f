"""CatBoost trees -> HIR trees.

A CatBoost split is a binary condition: for a float feature, ``x > border`` with ``x`` the
input as a float32 (CatBoost keeps features as floats) and a float32 border.  True goes to the
"right" (bit 1) side.  In the HIR a node goes left iff ``x <= border`` (:attr:`Op.LE`), which
is the condition's false side, so the children keep CatBoost's order.  A NaN input is
compared as the feature's ``nan_value_treatment`` says: ``AsTrue`` (nan_mode Max) makes the
condition true, ``AsFalse`` (Min) and ``AsIs`` (Forbidden; ``NaN > border`` is false) make it
false: that is the node's missing direction.

Symmetric (oblivious) trees apply the same split at every node of a level: the leaf index is
``sum(bit_i << i)`` over the tree's splits in stored order, and ``leaf_values`` holds
``dimension`` values per leaf, leaf-major.  They become complete trees whose level ``i`` tests
split ``i``.  Non-symmetric trees (grow policies Depthwise and Lossguide) are stored nested
(``split``, ``left``, ``right`` or a leaf ``value``) and are copied node for node.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir.hir import Op, Tree

# CatBoost's depth limit for symmetric trees (it refuses to train deeper); larger files are
# refused, not expanded into millions of nodes.
MAX_OBLIVIOUS_DEPTH = 16
# Nodes a non-symmetric tree may have (Lossguide's max_leaves is at most 64k).
MAX_NODES = 1 << 17


@dataclasses.dataclass(frozen=True)
class Split:
    """One binary condition in HIR terms: go left iff ``x[feature] <= threshold``; missing
    goes left iff ``nan_left``.  ``categories``: for categorical conditions, the categories
    that go left (the condition holds) instead of a threshold."""

    feature: int
    threshold: float
    nan_left: bool
    categories: np.ndarray | None = None  # sorted distinct int64 codes


class _Nodes:
    """Node arrays of one tree, grown one node at a time."""

    def __init__(self, dim: int):
        self.left, self.right, self.feature, self.threshold, self.nan_left = [], [], [], [], []
        self.values: list[np.ndarray] = []
        # CatBoost's number of each leaf (calc_leaf_indexes), 0 on splits
        self.ids: list[int] = []
        # the training weight that reached each leaf (its "weight"), or None where not recorded
        self.weights: list[float | None] = []
        self.categories: dict[int, np.ndarray] = {}
        self.dim = dim

    def add(self) -> int:
        self.left.append(-1)
        self.right.append(-1)
        self.feature.append(-1)
        self.threshold.append(0.0)
        self.nan_left.append(False)
        self.values.append(np.zeros(self.dim))
        self.ids.append(0)
        self.weights.append(None)
        return len(self.left) - 1

    def split(self, node: int, s: Split) -> tuple[int, int]:
        lo, hi = self.add(), self.add()
        self.left[node], self.right[node] = lo, hi
        self.feature[node], self.threshold[node], self.nan_left[node] = s.feature, s.threshold, s.nan_left
        if s.categories is not None:
            # In a categorical HIR split the listed categories go left: the condition's true
            # side, so the children swap.
            self.categories[node] = s.categories
            self.left[node], self.right[node] = hi, lo
        return lo, hi

    def tree(self) -> Tree:
        tree = Tree.from_nodes(self.left, self.right, self.feature, self.threshold, np.array(self.values),
                               op=Op.LE, default_left=self.nan_left, outputs=tuple(range(self.dim)),
                               node_ids=self.ids, cover=self.cover())
        # one array a split, shared by the nodes of a level (a CTR split may list thousands)
        tree.categories = dict(self.categories)
        return tree


    def cover(self) -> np.ndarray | None:
        """The weight that reached each node (a split's: its leaves'), CatBoost's ShapValues
        weighs paths by; None where a leaf's weight is not recorded."""
        if any(self.weights[n] is None for n in range(len(self.left)) if self.left[n] < 0):
            return None
        cover = np.array([w or 0.0 for w in self.weights], dtype=np.float64)
        for node in range(len(self.left) - 1, -1, -1):  # children come after their parent
            if self.left[node] >= 0:
                cover[node] = cover[self.left[node]] + cover[self.right[node]]
        return cover


def oblivious(splits: list[Split], leaf_values: np.ndarray, leaf_weights=None) -> Tree:
    """A symmetric tree: ``leaf_values`` of shape (2**len(splits), dimension), ``leaf_weights``
    (one a leaf, or None)."""
    nodes = _Nodes(leaf_values.shape[1])
    frontier = [(nodes.add(), 0)]  # (node, leaf index bits so far)
    for level, s in enumerate(splits):
        nxt = []
        for node, bits in frontier:
            lo, hi = nodes.split(node, s)  # lo: condition false (bit 0)
            nxt += [(lo, bits), (hi, bits | (1 << level))]
        frontier = nxt
    for node, bits in frontier:
        nodes.values[node] = leaf_values[bits]
        nodes.ids[node] = bits  # a leaf's index: its conditions' bits, level 0 lowest
        nodes.weights[node] = None if leaf_weights is None else float(leaf_weights[bits])
    return nodes.tree()


def nonsymmetric(root, read_split, read_leaf, dim: int, fail) -> Tree:
    """A non-symmetric tree from its nested JSON ``root``: ``read_split(obj)`` -> Split,
    ``read_leaf(obj)`` -> (values (dimension,), weight or None), ``fail(msg)`` raises.  Iterative, so a deeply
    nested (edited) file cannot exhaust the stack."""
    nodes = _Nodes(dim)
    stack = [(root, nodes.add())]
    leaves = 0  # CatBoost numbers a non-symmetric tree's leaves depth first, false side first
    while stack:
        obj, node = stack.pop()
        if len(nodes.left) > MAX_NODES:
            fail(f"a tree has more than {MAX_NODES} nodes")
        if not isinstance(obj, dict):
            fail("a tree node must be an object")
        if "split" in obj:
            if "left" not in obj or "right" not in obj:
                fail("a split node needs both children")
            # CatBoost's ``left`` is the condition's false side
            false_side, true_side = nodes.split(node, read_split(obj["split"]))
            stack.append((obj["right"], true_side))
            stack.append((obj["left"], false_side))
        else:
            nodes.values[node], nodes.weights[node] = read_leaf(obj)
            nodes.ids[node] = leaves
            leaves += 1
    return nodes.tree()

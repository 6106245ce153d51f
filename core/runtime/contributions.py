"""SHAP contributions of each feature to each prediction (``predict(X, pred_contribs=True)``):
path-dependent TreeSHAP with the model's own covers, what XGBoost's ``pred_contribs``,
LightGBM's ``pred_contrib`` and CatBoost's ``ShapValues`` compute, laid out as each returns it
(the bias, the margin's expected value, last), so a row's values add up to its margin.

Each leaf's path contributes on its own (Lundberg et al., "Consistent Individualized Feature
Attribution for Tree Ensembles"; the path form GPUTreeShap computes): with ``d`` distinct
features on the path, ``z_i`` the fraction of the training cover that follows the path at
feature ``i`` and ``o_i`` whether the row does, feature ``j`` gets

    v * (o_j - z_j) * sum_k  k! (d - 1 - k)! / d!  *  c_k

where ``c_k`` is the coefficient of ``x**k`` in ``prod_{i != j} (z_i + x o_i)``, and the bias
gets ``v * prod_i z_i``.  Paths of equal length are evaluated together, as arrays over paths
and rows, in float64; the tables (each path's nodes, sides and fractions) are made once a
model and kept with it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from silvanforge.errors import UnsupportedModelError
from silvanforge.ir.hir import Aggregation, Forest, Tree
from silvanforge.reference import goes_left

# Rows evaluated together: the arrays of one group of paths stay near this many elements.
CHUNK_ELEMENTS = 1 << 22


@dataclasses.dataclass
class PathGroup:
    """Every leaf path with ``d`` distinct features, as arrays (``P`` paths, up to ``D`` nodes)."""

    d: int
    value: np.ndarray  # (P, outputs): the leaf's values (0 on outputs its tree does not add to)
    feature: np.ndarray  # (P, d): the distinct features, in path order
    zero: np.ndarray  # (P, d): the cover fraction following the path at each feature
    node: np.ndarray  # (P, D): global index of each path node (its decision), -1 past the path
    left: np.ndarray  # (P, D): whether the path goes left there
    slot: np.ndarray  # (P, D): which of the d features the node tests


@dataclasses.dataclass
class Tables:
    """What a model's contributions are computed from, made once (:func:`tables`)."""

    groups: list[PathGroup]
    bias: np.ndarray  # (outputs,): the base score plus every tree's expected value
    trees: list[Tree]  # the trees, for their decisions
    starts: np.ndarray  # global index of each tree's node 0
    scale: float  # 1 / the average's divisor (1 for sums)


def refusal(forest: Forest) -> str | None:
    """Why ``forest``'s contributions are not computed, or None."""
    if forest.has_linear():
        return "a model with linear leaves (LightGBM linear_tree): LightGBM gives no contributions for it either"
    if forest.hashed_combinations:
        return "a CatBoost model with feature combinations (CTRs): attributing them to features is not supported"
    if forest.aggregation not in (Aggregation.SUM, Aggregation.AVERAGE):
        return f"trees combined by {forest.aggregation.value}: TreeSHAP needs a sum or an average"
    if forest.source == "onnx":
        return "an ONNX model records no covers (how much training data reached each node)"
    missing = [i for i, t in enumerate(forest.trees) if t.cover is None and t.num_nodes > 1]
    if missing:
        return (f"tree {missing[0]} has no covers (how much training data reached each node), which TreeSHAP "
                "weighs paths by: the model file does not record them")
    return None


def tables(forest: Forest) -> Tables:
    """The path tables of ``forest`` (raises ``UnsupportedModelError`` where :func:`refusal` says why)."""
    why = refusal(forest)
    if why is not None:
        raise UnsupportedModelError(f"pred_contribs: {why}")
    K = forest.num_outputs
    scale = 1.0 / forest.average_divisor if forest.aggregation is Aggregation.AVERAGE else 1.0
    bias = np.zeros(K)
    paths: dict[int, list] = {}
    starts = np.cumsum([0] + [t.num_nodes for t in forest.trees])
    for t, tree in enumerate(forest.trees):
        cover = tree.cover if tree.cover is not None else np.ones(tree.num_nodes)
        for leaf, nodes, sides in _leaf_paths(tree):
            value = np.zeros(K)
            value[list(tree.outputs)] = tree.leaf_value[leaf] * scale
            features: list[int] = []
            zero: list[float] = []
            slot = []
            for node, left in zip(nodes, sides):
                child = tree.left[node] if left else tree.right[node]
                fraction = cover[child] / cover[node] if cover[node] > 0 else 0.0
                f = int(tree.feature[node])
                if f in features:  # a feature met again: one element, fractions multiplied
                    k = features.index(f)
                    zero[k] *= fraction
                else:
                    k = len(features)
                    features.append(f)
                    zero.append(fraction)
                slot.append(k)
            bias += value * float(np.prod(zero))
            paths.setdefault(len(features), []).append(
                (value, features, zero, [starts[t] + n for n in nodes], sides, slot))
    groups = []
    for d, items in sorted(paths.items()):
        D = max(len(item[3]) for item in items)
        node = np.full((len(items), D), -1, np.int64)
        left = np.zeros((len(items), D), bool)
        slot = np.zeros((len(items), D), np.int64)
        for p, (_, _, _, nodes, sides, slots) in enumerate(items):
            node[p, :len(nodes)], left[p, :len(nodes)], slot[p, :len(nodes)] = nodes, sides, slots
        groups.append(PathGroup(d, np.array([item[0] for item in items]).reshape(len(items), K),
                                np.array([item[1] for item in items], np.int64).reshape(len(items), d),
                                np.array([item[2] for item in items], np.float64).reshape(len(items), d),
                                node, left, slot))
    bias += np.asarray(forest.base_score, np.float64) * 1.0
    return Tables(groups, bias, list(forest.trees), starts, scale)


def _leaf_paths(tree: Tree):
    """``(leaf, nodes, sides)`` of every leaf: the internal nodes from the root and whether the
    path goes left at each."""
    stack = [(0, [], [])]
    while stack:
        node, nodes, sides = stack.pop()
        if tree.left[node] < 0:
            yield node, nodes, sides
            continue
        stack.append((int(tree.right[node]), nodes + [node], sides + [False]))
        stack.append((int(tree.left[node]), nodes + [node], sides + [True]))


def decisions(t: Tables, X: np.ndarray, forest: Forest) -> np.ndarray:
    """(n, nodes of all trees): whether each row goes left at each node (leaves: False)."""
    out = np.zeros((X.shape[0], int(t.starts[-1])), dtype=bool)
    for tree, start in zip(t.trees, t.starts[:-1]):
        inner = np.flatnonzero(tree.left >= 0)
        if inner.size == 0:
            continue
        x = X[:, tree.feature[inner]]  # (n, inner)
        nodes = np.broadcast_to(inner, x.shape)
        if tree.categories:
            # (the reference's rule, node by node where categories are tested)
            left = np.empty(x.shape, dtype=bool)
            for k, node in enumerate(inner.tolist()):
                left[:, k] = goes_left(tree, np.full(x.shape[0], node), x[:, k], forest.category_rule)
        else:
            left = goes_left(tree, nodes.ravel(), x.ravel(), forest.category_rule).reshape(x.shape)
        out[:, start + inner] = left
    return out


_WEIGHTS: dict[int, np.ndarray] = {}


def _weights(d: int) -> np.ndarray:
    """``k! (d - 1 - k)! / d!`` for k = 0 .. d - 1: the Shapley weight of a coalition of k others."""
    w = _WEIGHTS.get(d)
    if w is None:
        w = _WEIGHTS[d] = np.array([math.factorial(k) * math.factorial(d - 1 - k) / math.factorial(d)
                                    for k in range(d)])
    return w


def contributions(t: Tables, X: np.ndarray, forest: Forest) -> np.ndarray:
    """(n, outputs, features + 1): each feature's contribution to each output's margin, the
    bias last (rows in the comparison dtype, ``forest.num_features`` columns)."""
    n, K, F = X.shape[0], forest.num_outputs, forest.num_features
    phi = np.zeros((n, K, F + 1))
    phi[:, :, F] = t.bias
    left = decisions(t, X, forest)
    for g in t.groups:
        if g.d == 0:
            continue  # a tree without splits: its value is all bias
        P, D = g.node.shape
        weights = _weights(g.d)
        rows = max(1, CHUNK_ELEMENTS // max(1, P * (g.d + 1)))
        for lo in range(0, n, rows):
            hi = min(n, lo + rows)
            m = hi - lo
            # o (m, P, d): whether the row follows the path at each of its features
            follows = np.ones((m, P, g.d), dtype=bool)
            for k in range(D):
                valid = g.node[:, k] >= 0
                if not valid.any():
                    continue
                went = left[lo:hi][:, np.where(valid, g.node[:, k], 0)] == g.left[:, k]  # (m, P)
                went |= ~valid
                idx = g.slot[:, k]
                # a feature met several times follows the path where every node of it does
                follows[:, np.arange(P), idx] &= went
            o = follows.astype(np.float64)
            z = np.broadcast_to(g.zero, (m, P, g.d))
            # prod_i (z_i + x o_i): coefficients (m, P, d + 1), lowest power first
            poly = np.zeros((m, P, g.d + 1))
            poly[..., 0] = 1.0
            for i in range(g.d):
                shifted = np.zeros_like(poly)
                shifted[..., 1:] = poly[..., :-1] * o[..., i:i + 1]
                poly = poly * z[..., i:i + 1] + shifted
            for j in range(g.d):
                oj, zj = o[..., j], z[..., j]
                # divide (z_j + x o_j) out: o_j = 1 by synthetic division from the top; o_j = 0
                # by z_j (a zero z_j there contributes o_j - z_j = 0 anyway)
                q = np.zeros((m, P, g.d))
                q[..., g.d - 1] = poly[..., g.d]
                for k in range(g.d - 1, 0, -1):
                    q[..., k - 1] = poly[..., k] - zj * q[..., k]
                with np.errstate(divide="ignore", invalid="ignore"):
                    plain = poly[..., :g.d] / zj[..., None]
                quotient = np.where(oj[..., None] > 0, q, np.where(zj[..., None] > 0, plain, 0.0))
                share = (oj - zj) * (quotient @ weights)  # (m, P)
                # add each path's share times its value to feature j of its outputs
                contribution = share[:, :, None] * g.value[None, :, :]  # (m, P, K)
                features = g.feature[:, j]
                for f in np.unique(features):
                    phi[lo:hi, :, f] += contribution[:, features == f, :].sum(axis=1)
    return phi


def shaped(forest: Forest, phi: np.ndarray) -> np.ndarray:
    """``phi`` (n, outputs, features + 1) laid out as the model's library returns contributions:
    XGBoost float32 ``(n, F + 1)`` or ``(n, classes, F + 1)``; LightGBM ``(n, F + 1)`` or
    ``(n, classes * (F + 1))``; CatBoost and the rest float64 ``(n, F + 1)`` or
    ``(n, outputs, F + 1)``."""
    n, K, width = phi.shape
    if forest.source == "xgboost":
        phi = phi.astype(np.float32)
    if K == 1:
        return phi.reshape(n, width)
    if forest.source == "lightgbm":
        return phi.reshape(n, K * width)
    return phi

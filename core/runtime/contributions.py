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

Since ``o`` is a pattern of bits, a path's shares are tabled once for every pattern, as
FastTreeSHAP's second algorithm does (Yang, "Fast TreeSHAP", section 'FastTreeSHAP v2'):
``U(t) = sum_{S in t} k! (d-1-k)!/d! prod_{i not in S} z_i`` over the subsets ``t`` of the path's
features (a subset-sum transform, ``2**d`` values a path), and a row's share for ``j`` is then
``(1 - z_j) / z_j * U(s - {j})`` where it follows the path at ``j`` and ``-U(s)`` where not
(``s``: the features it follows the path at).  Rows then cost ``d`` table reads a path
instead of ``d**2`` products.  Paths longer than :data:`TABLE_MAX_D`, with a zero fraction,
or past the table budget (``table_bytes``, default :data:`TABLE_BYTES`) are computed by
their polynomial.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from silvanforge.errors import UnsupportedModelError
from silvanforge.ir.hir import Aggregation, Forest, Tree
from silvanforge.runtime.reference import goes_left
from silvanforge.runtime.shap_view import explained

# Rows evaluated together: the arrays of one group of paths stay near this many elements.
CHUNK_ELEMENTS = 1 << 22
# Pattern tables: paths of up to this many distinct features, up to this many bytes a model.
TABLE_MAX_D = 12
TABLE_BYTES = 64 << 20


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
    # The pattern tables of the first ``tabled`` paths (``(tabled, 2**d)``: U without the
    # leaf's value) and their ``(1 - z) / z``; the rest are computed by their polynomial.
    tabled: int = 0
    table: np.ndarray | None = None
    ratio: np.ndarray | None = None


@dataclasses.dataclass
class Tables:
    """What a model's contributions are computed from, made once (:func:`tables`)."""

    groups: list[PathGroup]
    bias: np.ndarray  # (outputs,): the base score plus every tree's expected value
    flat: Tree  # every tree's nodes in one array (a node's global index), for the decisions
    plain_nodes: np.ndarray  # global indices of the splits testing no categories
    category_nodes: np.ndarray  # and of those testing categories
    scale: float  # 1 / the average's divisor (1 for sums)


def refusal(forest: Forest, covers: bool = True) -> str | None:
    """Why ``forest``'s contributions are not computed, or None; ``covers``: path-dependent
    ones, which weigh paths by the model's covers (interventional ones need none)."""
    if forest.has_linear():
        return "a model with linear leaves (LightGBM linear_tree): LightGBM gives no contributions for it either"
    if attributed_features(forest) is None:
        return "a CatBoost model with feature combinations (CTRs): attributing them to features is not supported"
    if forest.aggregation not in (Aggregation.SUM, Aggregation.AVERAGE):
        return f"trees combined by {forest.aggregation.value}: TreeSHAP needs a sum or an average"
    if not covers:
        return None
    if forest.source == "onnx":
        return "an ONNX model records no covers (how much training data reached each node)"
    missing = [i for i, t in enumerate(forest.trees) if t.cover is None and t.num_nodes > 1]
    if missing:
        return (f"tree {missing[0]} has no covers (how much training data reached each node), which TreeSHAP "
                "weighs paths by: the model file does not record them")
    return None


def attributed_features(forest: Forest) -> np.ndarray | None:
    """The feature each column's contributions go to: itself for an input column; for a
    computed one (``Forest.hashed_combinations``) whose key reads one input column (a CTR over
    one categorical feature, a one-hot test) that column; None where one reads several (a CTR
    over a combination of features)."""
    source = list(range(forest.input_features))
    for combo in forest.hashed_combinations or ():
        columns = {int(e[1]) for e in combo["elements"]}
        if len(columns) != 1:
            return None
        source.append(columns.pop())
    return np.asarray(source, dtype=np.int64)


def tables(forest: Forest, table_bytes: int = TABLE_BYTES) -> Tables:
    """The path tables of ``forest`` (raises ``UnsupportedModelError`` where :func:`refusal` says
    why), with pattern tables for up to ``table_bytes``."""
    why = refusal(forest)
    if why is not None:
        raise UnsupportedModelError(f"pred_contribs: {why}")
    forest = explained(forest)
    K = forest.num_outputs
    scale = 1.0 / forest.average_divisor if forest.aggregation is Aggregation.AVERAGE else 1.0
    bias = np.zeros(K)
    source = attributed_features(forest)
    paths: dict[int, list] = {}
    starts = np.cumsum([0] + [t.num_nodes for t in forest.trees])
    for t, tree in enumerate(forest.trees):
        # (a computed column's splits are its input feature's: attributed_features)
        fraction, feature_of = fractions(tree).tolist(), source[tree.feature].tolist()
        for leaf, nodes, sides in leaf_paths(tree):
            value = np.zeros(K)
            value[list(tree.outputs)] = tree.leaf_value[leaf] * scale
            features, zero, slot = merged(feature_of, nodes, sides, fraction)
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
    budget = table_bytes
    for g in groups:
        if 0 < g.d <= TABLE_MAX_D:
            # paths with every fraction above zero first: those the tables answer
            order = np.argsort(~(g.zero > 0).all(axis=1), kind="stable")
            for name in ("value", "feature", "zero", "node", "left", "slot"):
                setattr(g, name, getattr(g, name)[order])
            able = int((g.zero > 0).all(axis=1).sum())
            g.tabled = min(able, max(0, budget // (8 << g.d)))
            if g.tabled:
                g.table, g.ratio = _pattern_tables(g.zero[:g.tabled], g.d)
                budget -= g.table.nbytes
    return Tables(groups, bias, *flat_nodes(forest), scale)


def flat_nodes(forest: Forest) -> tuple[Tree, np.ndarray, np.ndarray]:
    """Every tree's nodes in one :class:`Tree` (a node's index there: its global index), and the
    global indices of its splits testing no categories and of those testing categories: what
    :func:`decisions` reads."""
    trees = forest.trees
    starts = np.cumsum([0] + [t.num_nodes for t in trees])
    flat = Tree(**{name: np.concatenate([getattr(tree, name) for tree in trees])
                   for name in ("left", "feature", "threshold", "op", "default_left", "zero_missing")},
                right=np.zeros(int(starts[-1]), np.int32), leaf_value=np.zeros((int(starts[-1]), 1)),
                categories={int(start) + node: cats for tree, start in zip(trees, starts[:-1])
                            for node, cats in tree.categories.items()})
    splits = np.flatnonzero(flat.left >= 0)
    categorical = np.isin(splits, np.fromiter(flat.categories, np.int64, len(flat.categories)))
    return flat, splits[~categorical], splits[categorical]


def _pattern_tables(zero: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``U`` of every path (``zero``: (P, d) fractions) over all ``2**d`` subsets (bit ``i``:
    feature ``i``), and ``(1 - z) / z``."""
    P = zero.shape[0]
    masks = np.arange(1 << d)
    bits = (masks[:, None] >> np.arange(d)) & 1  # (2**d, d)
    # w(|S|) * prod over the features outside S of z
    outside = np.where(bits[None, :, :] == 0, zero[:, None, :], 1.0).prod(axis=2)  # (P, 2**d)
    # (a coalition of all d is never read: some j is always left out; its weight is 0)
    U = np.append(_weights(d), 0.0)[bits.sum(axis=1)][None, :] * outside
    for i in range(d):  # the subset sums, one feature at a time
        view = U.reshape(P, -1, 2, 1 << i)
        view[:, :, 1, :] += view[:, :, 0, :]
    return U, (1.0 - zero) / zero


def fractions(tree: Tree) -> np.ndarray:
    """(nodes, 2): the cover fraction of each node's left and right child (0 under a node of
    no cover; leaves: 0; every cover 1 without covers)."""
    cover = tree.cover if tree.cover is not None else np.ones(tree.num_nodes)
    out = np.zeros((tree.num_nodes, 2))
    inner = np.flatnonzero(tree.left >= 0)
    c = cover[inner].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out[inner, 0] = np.where(c > 0, cover[tree.left[inner]] / c, 0.0)
        out[inner, 1] = np.where(c > 0, cover[tree.right[inner]] / c, 0.0)
    return out


def merged(feature: list[int], nodes: list[int], sides: list[bool], fraction: list):
    """A path's distinct features in path order, the cover fraction following it at each (a
    feature met again: one element, its fractions multiplied) and each node's slot among them
    (``feature``: the tree's as a list; ``fraction``: :func:`fractions` as a list)."""
    features: list[int] = []
    zeros: list[float] = []
    slots: list[int] = []
    for n, left in zip(nodes, sides):
        f = feature[n]
        z = fraction[n][0 if left else 1]
        if f in features:
            k = features.index(f)
            zeros[k] *= z
        else:
            k = len(features)
            features.append(f)
            zeros.append(z)
        slots.append(k)
    return features, zeros, slots


def leaf_paths(tree: Tree):
    """``(leaf, nodes, sides)`` of every leaf: the internal nodes from the root and whether the
    path goes left at each."""
    left, right = tree.left.tolist(), tree.right.tolist()
    stack = [(0, [], [])]
    while stack:
        node, nodes, sides = stack.pop()
        if left[node] < 0:
            yield node, nodes, sides
            continue
        stack.append((right[node], nodes + [node], sides + [False]))
        stack.append((left[node], nodes + [node], sides + [True]))


def decisions(t: Tables, X: np.ndarray, forest: Forest) -> np.ndarray:
    """(n, nodes of all trees): whether each row goes left at each node (leaves: False), by the
    reference's rule (:func:`silvanforge.runtime.reference.goes_left`) over every tree's nodes at once."""
    flat = t.flat
    out = np.zeros((X.shape[0], flat.num_nodes), dtype=bool)
    plain = t.plain_nodes
    if plain.size:
        x = X[:, flat.feature[plain]]  # (n, nodes)
        nodes = np.broadcast_to(plain, x.shape).ravel()
        numeric = dataclasses.replace(flat, categories={})  # (these test none: no per-node lookups)
        out[:, plain] = goes_left(numeric, nodes, x.ravel(), forest.category_rule).reshape(x.shape)
    for node in t.category_nodes.tolist():  # (categories tested node by node)
        out[:, node] = goes_left(flat, np.full(X.shape[0], node), X[:, flat.feature[node]], forest.category_rule)
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
    bias last (rows in the comparison dtype, ``forest.num_features`` columns; contributions
    to the ``input_features`` columns, :func:`attributed_features`)."""
    n, K, F = X.shape[0], forest.num_outputs, forest.input_features
    phi = np.zeros((n, K, F + 1))
    phi[:, :, F] = t.bias
    left = decisions(t, X, forest)
    for g in t.groups:
        if g.d == 0:
            continue  # a tree without splits: its value is all bias
        P = g.node.shape[0]
        rows = max(1, CHUNK_ELEMENTS // max(1, P * (g.d + 1)))
        for lo in range(0, n, rows):
            hi = min(n, lo + rows)
            m = hi - lo
            pattern = patterns(g, left[lo:hi])
            shares = np.empty((m, P, g.d))  # each path's share for each of its features
            T = g.tabled
            if T:
                at = np.arange(T) * (1 << g.d) + pattern[:, :T]  # (m, T): where U(s) is
                flat = g.table.ravel()
                here = flat[at]
                for j in range(g.d):
                    on = (pattern[:, :T] >> j) & 1
                    without = flat[at - (on << j)]  # U(s - {j})
                    shares[:, :T, j] = np.where(on == 1, g.ratio[:, j] * without, -here)
            if T < P:
                follows = ((pattern[:, T:, None] >> np.arange(g.d)) & 1).astype(bool)
                shares[:, T:, :] = _polynomial_shares(follows, g.zero[T:], g.d)
            # each path's share times its value, to feature j of each output
            index = (np.arange(m)[:, None, None] * F + g.feature[None, :, :]).ravel()
            for k in range(K):
                if not g.value[:, k].any():
                    continue
                weighted = (shares * g.value[None, :, k, None]).ravel()
                phi[lo:hi, k, :F] += np.bincount(index, weighted, minlength=m * F).reshape(m, F)
    return phi


def patterns(g: PathGroup, left: np.ndarray) -> np.ndarray:
    """(rows, P): bit ``i`` whether the row follows each path of ``g`` at its feature ``i`` (a
    feature met several times: where every node of it does); ``left``: the rows'
    :func:`decisions`."""
    P, D = g.node.shape
    pattern = np.full((left.shape[0], P), (1 << g.d) - 1, dtype=np.int64)
    for k in range(D):
        valid = g.node[:, k] >= 0
        went = left[:, np.where(valid, g.node[:, k], 0)] == g.left[:, k]  # (rows, P)
        pattern &= np.where(went | ~valid, -1, ~(1 << g.slot[:, k]))
    return pattern


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


def _polynomial_shares(follows: np.ndarray, zero: np.ndarray, d: int) -> np.ndarray:
    """(m, P, d): each path's share for each of its features (without the leaf's value) by the
    path's polynomial: ``(o_j - z_j) * sum_k w(k) c_k``, ``c`` the coefficients of
    ``prod_{i != j} (z_i + x o_i)``."""
    o = follows.astype(np.float64)
    m, P = o.shape[:2]
    z = np.broadcast_to(zero, (m, P, d))
    weights = _weights(d)
    # prod_i (z_i + x o_i): coefficients (m, P, d + 1), lowest power first
    poly = np.zeros((m, P, d + 1))
    poly[..., 0] = 1.0
    for i in range(d):
        shifted = np.zeros_like(poly)
        shifted[..., 1:] = poly[..., :-1] * o[..., i:i + 1]
        poly = poly * z[..., i:i + 1] + shifted
    out = np.empty((m, P, d))
    for j in range(d):
        oj, zj = o[..., j], z[..., j]
        # divide (z_j + x o_j) out: o_j = 1 by synthetic division from the top; o_j = 0 by z_j
        # (a zero z_j there contributes o_j - z_j = 0 anyway)
        q = np.zeros((m, P, d))
        q[..., d - 1] = poly[..., d]
        for k in range(d - 1, 0, -1):
            q[..., k - 1] = poly[..., k] - zj * q[..., k]
        with np.errstate(divide="ignore", invalid="ignore"):
            plain = poly[..., :d] / zj[..., None]
        quotient = np.where(oj[..., None] > 0, q, np.where(zj[..., None] > 0, plain, 0.0))
        out[..., j] = (oj - zj) * (quotient @ weights)
    return out

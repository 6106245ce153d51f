"""Interventional SHAP contributions (``predict(X, pred_contribs=True, background=R)``): each
feature's Shapley value in the game where a coalition ``S`` takes its features from the row ``x``
and the others from a background row ``r``, averaged over the background rows, what
``shap.TreeExplainer(model, data=R, feature_perturbation="interventional")`` computes for the
margin.  The bias (last) is the mean margin of the background rows; a row's values add up to
its margin.  It reads the model's function only (no covers): ONNX models are explained too.

A leaf path decides, for a pair ``(x, r)``, which of its distinct features must come from ``x``
(``x`` follows the path there, ``r`` does not: the set ``N``, ``p`` of them) and which from
``r`` (the reverse: ``F``, ``q`` of them); where neither follows, no coalition reaches the leaf.
The leaf's value ``v`` then goes to each feature of ``N`` with weight ``(p-1)! q! / (p+q)!`` and
from each of ``F`` with ``p! (q-1)! / (p+q)!`` (Lundberg et al., "From local explanations to
global understanding with explainable AI for trees", the independent TreeSHAP of its methods).

Summed over the background, a path's shares depend on the row only through ``u``, the features
it follows the path at: the pairs that reach the leaf are the background rows following it
wherever ``x`` does not (``s``, the complement of ``u``), ``q = |s|`` for all of them, and
``p = d - |pr|`` for a background pattern ``pr``.  So for each ``s`` the counts of background
patterns containing it, by size (a superset sum a size), give three tables a path of ``2**d``
entries: ``B`` and ``C`` (the shares of ``x``'s features, ``B[u] - C[u - {j}]``) and ``M``
(``-M[u]`` for each feature ``x`` does not follow), made once a background.  A row then costs
``d`` table reads a path, as path-dependent SHAP's pattern tables do
(:mod:`silvanforge.runtime.contributions`).  Paths past the table budget are computed against
every background row."""

from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np

from silvanforge.errors import InputError, UnsupportedModelError
from silvanforge.ir.hir import Aggregation, Forest
from silvanforge.runtime.contributions import (CHUNK_ELEMENTS, TABLE_BYTES, PathGroup, Tables, attributed_features,
                                             decisions, flat_nodes, leaf_paths, merged, patterns)
from silvanforge.runtime.contributions import refusal as paths_refusal

__all__ = ["Background", "background_tables", "contributions", "refusal"]

# Paths of up to this many distinct features get tables (2**d entries each, three of them).
TABLE_MAX_D = 12
# Rows evaluated together: a chunk's arrays near this many elements (a quarter of the
# path-dependent evaluator's: 1.7x faster a row at 512 rows of a 100-tree depth-8 model).
ROW_CHUNK_ELEMENTS = 1 << 20


@dataclasses.dataclass
class Background:
    """What a model's interventional contributions against one background are computed from."""

    tables: Tables  # the paths (grouped by distinct features) and the model's nodes
    plus: list  # per group: (tabled, 2**d) B by the row's pattern u
    cross: list  # per group: (tabled, 2**d) C by u - {j}
    minus: list  # per group: (tabled, 2**d) M by u
    patterns: list  # per group: (rows of the background, P - tabled) each background row's pattern
    rows: int  # background rows
    digest: str  # of the background's values, to know it again


def refusal(forest: Forest) -> str | None:
    """Why ``forest``'s interventional contributions are not computed, or None: path-dependent
    SHAP's reasons but its covers."""
    return paths_refusal(forest, covers=False)


def digest(rows: np.ndarray) -> str:
    """The background's identity: its shape and values."""
    return hashlib.blake2b(np.ascontiguousarray(rows).view(np.uint8).tobytes() + str(rows.shape).encode(),
                           digest_size=16).hexdigest()


def background_tables(forest: Forest, rows: np.ndarray, table_bytes: int = TABLE_BYTES) -> Background:
    """The tables of ``forest``'s paths against background ``rows`` (in the comparison dtype,
    ``forest.num_features`` columns), up to ``table_bytes`` of them."""
    why = refusal(forest)
    if why is not None:
        raise UnsupportedModelError(f"pred_contribs with a background: {why}")
    if rows.shape[0] == 0:
        raise InputError("pred_contribs: the background has no rows (give the rows whose mean margin is the bias)")
    t = _paths(forest)
    left = decisions(t, rows, forest)
    plus, cross, minus, kept = [], [], [], []
    budget = table_bytes
    m = rows.shape[0]
    for g in t.groups:
        pr = patterns(g, left) if g.d else np.zeros((m, g.node.shape[0]), np.int64)
        kept.append(pr)
        size = 3 * 8 << g.d
        g.tabled = min(g.node.shape[0], max(0, budget // size)) if g.d <= TABLE_MAX_D else 0
        budget -= g.tabled * size
        tables = [np.zeros((g.tabled, 1 << g.d)) for _ in range(3)]
        per = max(1, CHUNK_ELEMENTS // ((g.d + 1) << g.d))
        for lo in range(0, g.tabled, per):
            hi = min(g.tabled, lo + per)
            for table, part in zip(tables, _tables(pr[:, lo:hi], g.d)):
                table[lo:hi] = part
        plus.append(tables[0])
        cross.append(tables[1])
        minus.append(tables[2])
        kept[-1] = (pr, pr[:, g.tabled:])  # (the untabled paths' are read at each row)
    # The bias: the base score plus each leaf's value times the background rows reaching it.
    full = [(pr == (1 << g.d) - 1).sum(axis=0) for g, (pr, _) in zip(t.groups, kept)]
    t.bias = np.asarray(forest.base_score, np.float64) + sum(
        (g.value * (n / m)[:, None]).sum(axis=0) for g, n in zip(t.groups, full))
    return Background(t, plus, cross, minus, [rest for _, rest in kept], m, digest(rows))


def contributions(bg: Background, X: np.ndarray, forest: Forest) -> np.ndarray:
    """(n, outputs, features + 1): each feature's interventional contribution to each output's
    margin against ``bg``'s background, the bias last (rows as for
    :func:`silvanforge.runtime.contributions.contributions`)."""
    t = bg.tables
    n, K, F = X.shape[0], forest.num_outputs, forest.input_features
    phi = np.zeros((n, K, F + 1))
    phi[:, :, F] = t.bias
    left = decisions(t, X, forest)
    m = bg.rows
    for g, B, C, M, pr in zip(t.groups, bg.plus, bg.cross, bg.minus, bg.patterns):
        if g.d == 0:
            continue  # a tree without splits: its value is all bias
        P, T = g.node.shape[0], g.tabled
        rows = max(1, ROW_CHUNK_ELEMENTS // max(1, P * (g.d + 1) * (1 if T == P else m)))
        for lo in range(0, n, rows):
            hi = min(n, lo + rows)
            u = patterns(g, left[lo:hi])  # (rows, P)
            shares = np.empty((hi - lo, P, g.d))
            if T:
                at = np.arange(T) * (1 << g.d) + u[:, :T]
                c = C.ravel()
                plus, minus = B.ravel()[at], -M.ravel()[at]  # (the same for each feature)
                for j in range(g.d):
                    on = (u[:, :T] >> j) & 1
                    shares[:, :T, j] = np.where(on == 1, plus - c[at - (on << j)], minus)
            if T < P:
                shares[:, T:, :] = _direct(u[:, T:], pr, g.d)
            index = (np.arange(hi - lo)[:, None, None] * F + g.feature[None, :, :]).ravel()
            for k in range(K):
                if not g.value[:, k].any():
                    continue
                weighted = (shares * (g.value[None, :, k, None] / m)).ravel()
                phi[lo:hi, k, :F] += np.bincount(index, weighted, minlength=(hi - lo) * F).reshape(hi - lo, F)
    return phi


def _paths(forest: Forest) -> Tables:
    """Every leaf path of ``forest`` grouped by its distinct features (no covers read), with the
    model's nodes as :func:`silvanforge.runtime.contributions.decisions` reads them."""
    K = forest.num_outputs
    scale = 1.0 / forest.average_divisor if forest.aggregation is Aggregation.AVERAGE else 1.0
    source = attributed_features(forest)
    starts = np.cumsum([0] + [t.num_nodes for t in forest.trees])
    paths: dict[int, list] = {}
    for k, tree in enumerate(forest.trees):
        feature_of = source[tree.feature].tolist()
        ones = [(1.0, 1.0)] * tree.num_nodes
        for leaf, nodes, sides in leaf_paths(tree):
            value = np.zeros(K)
            value[list(tree.outputs)] = tree.leaf_value[leaf] * scale
            features, _, slot = merged(feature_of, nodes, sides, ones)
            paths.setdefault(len(features), []).append((value, features, [starts[k] + i for i in nodes], sides, slot))
    groups = []
    for d, items in sorted(paths.items()):
        D = max([len(item[2]) for item in items] + [1])
        node = np.full((len(items), D), -1, np.int64)
        left = np.zeros((len(items), D), bool)
        slot = np.zeros((len(items), D), np.int64)
        for p, (_, _, nodes, sides, slots) in enumerate(items):
            node[p, :len(nodes)], left[p, :len(nodes)], slot[p, :len(nodes)] = nodes, sides, slots
        groups.append(PathGroup(d, np.array([item[0] for item in items]).reshape(len(items), K),
                                np.array([item[1] for item in items], np.int64).reshape(len(items), d),
                                np.ones((len(items), d)), node, left, slot))
    return Tables(groups, np.zeros(K), *flat_nodes(forest), scale)


def _weights(d: int) -> tuple[np.ndarray, np.ndarray]:
    """``(W+, W-)``, each ``(d + 1, d + 1)`` by ``(p, q)``: ``(p-1)! q! / (p+q)!`` (0 where p is
    0) and ``p! (q-1)! / (p+q)!`` (0 where q is 0)."""
    f = [math.factorial(i) for i in range(2 * d + 2)]
    plus, minus = np.zeros((d + 1, d + 1)), np.zeros((d + 1, d + 1))
    for p in range(d + 1):
        for q in range(d + 1 - p):
            if p:
                plus[p, q] = f[p - 1] * f[q] / f[p + q]
            if q:
                minus[p, q] = f[p] * f[q - 1] / f[p + q]
    return plus, minus


def _tables(pr: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``B``, ``C`` and ``M`` by the row's pattern ``u`` of paths whose background patterns are
    ``pr`` (m, P): see the module's docstring."""
    m, P = pr.shape
    size = 1 << d
    bits = np.array([bin(s).count("1") for s in range(size)])
    counts = np.zeros((P, size))
    np.add.at(counts, (np.broadcast_to(np.arange(P), pr.shape), pr), 1.0)
    # G[p, k, s]: background rows whose pattern has k features and contains s.
    G = np.zeros((P, d + 1, size))
    G[:, bits, np.arange(size)] = counts
    for b in range(d):  # (a superset sum over bit b)
        view = G.reshape(P, d + 1, size >> (b + 1), 2, 1 << b)
        view[:, :, :, 0, :] += view[:, :, :, 1, :]
    plus, minus = _weights(d)
    k = np.arange(d + 1)
    q = bits  # the size of s
    # (p = d - k; C's q is |s| - 1: the row's s lacks the feature j added to it)
    B = np.einsum("pks,ks->ps", G, plus[d - k[:, None], q[None, :]])
    C = np.einsum("pks,ks->ps", G, plus[d - k[:, None], np.maximum(q - 1, 0)[None, :]])
    M = np.einsum("pks,ks->ps", G, minus[d - k[:, None], q[None, :]])
    complement = (size - 1) ^ np.arange(size)  # s of each u
    return B[:, complement], C[:, complement], M[:, complement]


def _direct(u: np.ndarray, pr: np.ndarray, d: int) -> np.ndarray:
    """(rows, P, d) shares of paths without tables, against every background row at once
    (``u``: the rows' patterns (rows, P); ``pr``: the background's (m, P))."""
    plus, minus = _weights(d)
    mask = (1 << d) - 1
    u, pr = u[:, None, :], pr[None, :, :]
    alive = (u | pr) == mask  # (rows, m, P)
    need, forbid = u & ~pr, ~u & pr & mask
    p, q = _popcount(need), _popcount(forbid)
    wp = np.where(alive, plus[p, q], 0.0)  # (need and forbid are disjoint: p + q <= d)
    wm = np.where(alive, minus[p, q], 0.0)
    out = np.empty((u.shape[0], pr.shape[2], d))
    for j in range(d):
        out[..., j] = (((need >> j) & 1) * wp).sum(axis=1) - (((forbid >> j) & 1) * wm).sum(axis=1)
    return out


def _popcount(a: np.ndarray) -> np.ndarray:
    """Set bits of each (non-negative) element."""
    if hasattr(np, "bitwise_count"):  # (NumPy 2)
        return np.bitwise_count(a).astype(np.int64)
    out = np.zeros(a.shape, np.int64)
    a = a.copy()
    while a.any():
        out += a & 1
        a >>= 1
    return out

"""What bitvector evaluation can run (:func:`unsupported`) and the facts about a forest its
chooser, plan and code generator all read: nodes a tree, the features numeric splits read,
their distinct thresholds, the NaN-or-not splits, the categorical splits' tables."""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir import hir
from silvanforge.ir.hir import Aggregation, Op
from silvanforge.plan.memo import memoised

from .leafbits import MAX_LEAVES, WORD

# Per-call stack for the trees' exit leaves (a block's lanes of words each).
MAX_TREES = 16384
# Categorical splits read decision tables (:class:`CatFeature`) of one row per category: models
# whose tables would pass this size (category ids in the millions) are walked instead.
MAX_CATEGORY_TABLE_BYTES = 64 * 2**20


def single_output(forest: hir.Forest) -> hir.Forest:
    """``forest`` with each tree that adds to several outputs (vector leaves: XGBoost's
    multi_output_tree, scikit-learn's classifiers) split into one tree an output, its leaf
    values that output's column, in model order: each output's sum then adds the same values in
    the same order as the reference.  Its nodes are evaluated once an output (the cost counts
    them so)."""
    if all(len(t.outputs) == 1 for t in forest.trees):
        return forest
    trees = [dataclasses.replace(t, leaf_value=t.leaf_value[:, j:j + 1], outputs=(out,))
             for t in forest.trees for j, out in enumerate(t.outputs)]
    return dataclasses.replace(forest, trees=trees)


def unsupported(forest: hir.Forest) -> str | None:
    """Why bitvector evaluation cannot run this forest, or None if it can (asked by the
    refusal, the chooser and the lowering: once a compile)."""
    return memoised(forest, "bitvector unsupported", lambda: _unsupported(forest))


def _unsupported(forest: hir.Forest) -> str | None:
    if forest.aggregation not in (Aggregation.SUM, Aggregation.AVERAGE):
        return f"it sums or averages trees ({forest.aggregation.value} aggregation)"
    if not 0 < forest.num_trees <= MAX_TREES:
        return f"it takes 1 to {MAX_TREES} trees"
    # Every tree's nodes at once (a loop of numpy calls a tree took 0.13 s on 1000 trees of 255
    # leaves, and the check runs thrice a compile); the first offending tree is named.
    trees = forest.trees
    sizes = np.array([t.num_nodes for t in trees], np.int64)
    tree_of = np.repeat(np.arange(len(trees)), sizes)
    left = np.concatenate([t.left for t in trees])
    internal = left >= 0
    categorical = np.concatenate([t.categorical_mask() if t.categories else np.zeros(t.num_nodes, bool)
                                  for t in trees])
    numeric = internal & ~categorical
    op = np.concatenate([t.op for t in trees])
    checks = [
        (np.bincount(tree_of[~internal], minlength=len(trees)) > MAX_LEAVES,
         f"has more than {MAX_LEAVES} leaves"),
        (np.array([len(t.outputs) != 1 for t in trees]), "adds to several outputs"),
        (np.bincount(tree_of[numeric & (op != int(Op.LT)) & (op != int(Op.LE))], minlength=len(trees)) > 0,
         "has splits other than < and <="),
        (np.bincount(tree_of[internal & np.concatenate([t.zero_missing for t in trees])], minlength=len(trees)) > 0,
         "treats zero as missing"),
        (np.bincount(tree_of[numeric & np.isnan(np.concatenate([t.threshold for t in trees]))],
                     minlength=len(trees)) > 0, "has NaN thresholds"),
    ]
    first = min(((int(np.argmax(bad)), n) for n, (bad, _) in enumerate(checks) if bad.any()), default=None)
    if first is not None:
        return f"tree {first[0]} {checks[first[1]][1]}"
    table = category_table_bytes(forest)
    if table > MAX_CATEGORY_TABLE_BYTES:
        return (f"its categorical splits would need {table / 2**20:.0f} MiB of decision tables "
                f"(categories up to {largest_category(forest)}; at most "
                f"{MAX_CATEGORY_TABLE_BYTES // 2**20} MiB)")
    return None

def category_counts(forest: hir.Forest) -> dict[int, list[int]]:
    """Per feature of categorical splits: [categorical nodes, 1 + the largest category named,
    trees with such a node]; read only, computed once a compile."""
    return memoised(forest, "bitvector category counts", lambda: _category_counts(forest))


def _category_counts(forest: hir.Forest) -> dict[int, list[int]]:
    # Every tree's categorical nodes at once (a 1000-tree flight-shaped model has 230k of them;
    # a loop of numpy calls a tree took 60 ms, and this runs four times a compile).
    trees = [(k, t) for k, t in enumerate(forest.trees) if t.categories]
    if not trees:
        return {}
    sets = [c for _, t in trees for c in t.categories.values()]
    feature = np.concatenate([t.feature[np.fromiter(t.categories, np.int64, len(t.categories))]
                              for _, t in trees]).astype(np.int64)
    tree = np.repeat(np.array([k for k, _ in trees], np.int64), [len(t.categories) for _, t in trees])
    sizes = np.fromiter((len(c) for c in sets), np.int64, len(sets))
    top = np.zeros(len(sets), np.int64)
    full = sizes > 0
    if full.any():
        values = np.concatenate([c for c in sets if len(c)]).astype(np.int64)
        top[full] = np.maximum.reduceat(values, np.concatenate([[0], np.cumsum(sizes[full])[:-1]])) + 1
    used = np.unique(feature)
    nodes = np.bincount(feature)[used]
    rows = np.zeros(int(used[-1]) + 1, np.int64)
    np.maximum.at(rows, feature, top)
    pairs = np.unique(tree * (int(used[-1]) + 1) + feature)
    users = np.bincount(pairs % (int(used[-1]) + 1))[used]
    return {int(f): [int(n), int(r), int(u)] for f, n, r, u in zip(used, nodes, rows[used], users)}


def category_table_bytes(forest: hir.Forest) -> int:
    """At most the bytes of the decision tables (:class:`CatFeature`): a row of words per
    category, plus the NaN and no-category rows; every chunk (:class:`Chunk`) gives a feature
    words of its own, so a feature has at most a word more than its nodes need per tree using it."""
    return sum(8 * (rows + 2) * (-(-nodes // WORD) + trees)
               for nodes, rows, trees in category_counts(forest).values())


def largest_category(forest: hir.Forest) -> int:
    return max((rows - 1 for _, rows, _ in category_counts(forest).values()), default=-1)

def node_count(forest: hir.Forest) -> int:
    return int(tree_nodes(forest).sum())


def tree_nodes(forest: hir.Forest) -> np.ndarray:
    """Each tree's internal nodes; read only, counted once a compile (the estimates of every
    request size and form ask)."""
    return memoised(forest, "bitvector tree nodes", lambda: _read_only(
        np.array([int((t.left >= 0).sum()) for t in forest.trees], np.int64).reshape(forest.num_trees)))

def tree_categorical_nodes(forest: hir.Forest) -> np.ndarray:
    """Each tree's categorical splits; read only, counted once a compile."""
    return memoised(forest, "bitvector tree categorical nodes", lambda: _read_only(
        np.array([len(t.categories) for t in forest.trees], np.int64).reshape(forest.num_trees)))


def used_features(forest: hir.Forest) -> list[int]:
    """Features of numeric splits (categorical ones read decision tables, :class:`CatFeature`);
    found once a compile (the estimates and every form's plan ask)."""
    return list(memoised(forest, "bitvector used features", lambda: _used_features(forest)))


def _used_features(forest: hir.Forest) -> list[int]:
    parts = [t.feature[(t.left >= 0) & ~t.categorical_mask()] for t in forest.trees]
    return np.unique(np.concatenate(parts)).tolist() if parts else []


def bin_counts(forest: hir.Forest) -> np.ndarray:
    """Per used feature (:func:`used_features`), how many distinct thresholds its numeric
    nodes have (an upper bound of the narrow form's bins: ``<=`` splits move to the next value);
    read only, counted once a compile."""
    return memoised(forest, "bitvector bin counts", lambda: _read_only(_bin_counts(forest)))


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False  # shared by every caller in the compile
    return a


def _bin_counts(forest: hir.Forest) -> np.ndarray:
    numeric = [(t.left >= 0) & ~t.categorical_mask() for t in forest.trees]
    feature = np.concatenate([t.feature[m] for t, m in zip(forest.trees, numeric)] or [np.zeros(0, np.int64)])
    value = np.concatenate([t.threshold[m].astype(forest.threshold_dtype) for t, m in zip(forest.trees, numeric)]
                           or [np.zeros(0)])
    order = np.lexsort((value, feature))  # a sort, not np.unique(axis=1): 10x faster on 250k nodes
    f, v = feature[order], value[order]
    distinct = np.ones(len(f), bool)
    distinct[1:] = (f[1:] != f[:-1]) | (v[1:] != v[:-1])
    return np.unique(f[distinct], return_counts=True)[1]

def nan_split_features(forest: hir.Forest) -> list[int]:
    """Features of "x <= +inf" splits whose missing values go right (true iff x is NaN): they
    get a third copy in the block, +inf where NaN and 0 elsewhere (found once a compile)."""
    return list(memoised(forest, "bitvector NaN split features", lambda: _nan_split_features(forest)))


def _nan_split_features(forest: hir.Forest) -> list[int]:
    found = set()
    for t in forest.trees:
        internal = np.flatnonzero((t.left >= 0) & ~t.categorical_mask())
        hit = nan_or_not(t, internal, np.dtype(forest.threshold_dtype)) & ~t.default_left[internal]
        found.update(int(f) for f in t.feature[internal[hit]])
    return sorted(found)


def nan_or_not(t: hir.Tree, internal: np.ndarray, thr_dtype: np.dtype) -> np.ndarray:
    """Which of the ``internal`` nodes are "x <= +inf" splits, thresholds as compiled."""
    return nan_or_not_splits(t.op[internal], t.threshold[internal].astype(thr_dtype))


def nan_or_not_splits(op: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """Which nodes of these ops and thresholds (as compiled) are "x <= +inf" splits."""
    return (op == int(Op.LE)) & (threshold == np.inf)


__all__ = ["MAX_TREES", "MAX_CATEGORY_TABLE_BYTES", "unsupported", "category_counts", "category_table_bytes",
           "largest_category", "node_count", "tree_nodes", "used_features", "bin_counts", "nan_split_features",
           "nan_or_not", "nan_or_not_splits"]

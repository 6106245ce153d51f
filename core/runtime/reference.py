"""The reference evaluator: plain NumPy, written to be obviously correct, not fast.

It implements the HIR semantics (see :mod:`silvanforge.ir.hir`) literally and is the oracle
every optimisation and every target is tested against.  It walks one tree at a time for all
rows together (vectorised over rows only), so each rule below reads as it is specified.
"""

from __future__ import annotations

import math

import numpy as np

from silvanforge.inputs.rows import as_rows
from silvanforge.ir.hir import ZERO_THRESHOLD, Aggregation, CategoryRule, Forest, Op, Tree
from silvanforge.runtime import transforms


def category_of(x: np.ndarray, rule: CategoryRule) -> np.ndarray:
    """Category index of each (non-NaN) value, or -1 where the value is no valid category."""
    with np.errstate(invalid="ignore"):
        if rule is CategoryRule.XGBOOST:
            valid = (x >= 0) & (x < 2.0**24)
        elif rule is CategoryRule.LIGHTGBM:
            # static_cast<int>(x) truncates toward zero; (-1, 0) becomes category 0.
            valid = (x > -1) & (x < 2.0**31)
        else:  # EXACT
            valid = (x >= 0) & (x < 2.0**31) & (np.floor(x) == x)
        cats = np.where(valid, np.trunc(np.where(valid, x, 0)), -1)
    return cats.astype(np.int64)


def goes_left(tree: Tree, node: np.ndarray, x: np.ndarray, rule: CategoryRule) -> np.ndarray:
    """The decision at ``node`` (one per row) for feature values ``x``: True means left."""
    thr = tree.threshold[node].astype(x.dtype)
    op = tree.op[node]
    with np.errstate(invalid="ignore"):
        numeric = np.select([op == Op.LT, op == Op.LE, op == Op.EQ], [x < thr, x <= thr, x == thr])
    decision = numeric
    if tree.categories:
        cat_nodes = np.array([n in tree.categories for n in node.tolist()], dtype=bool)
        if cat_nodes.any():
            cats = category_of(x, rule)
            in_set = np.array(
                [c >= 0 and bool(np.isin(c, tree.categories[n])) if is_cat else False
                 for n, c, is_cat in zip(node.tolist(), cats.tolist(), cat_nodes.tolist())],
                dtype=bool,
            )
            decision = np.where(cat_nodes, in_set, numeric)
    missing = np.isnan(x) | (tree.zero_missing[node] & (x >= -ZERO_THRESHOLD) & (x <= ZERO_THRESHOLD))
    return np.where(missing, tree.default_left[node], decision)


def leaf_indices(tree: Tree, X: np.ndarray, rule: CategoryRule) -> np.ndarray:
    """The leaf each row of ``X`` (already in the comparison dtype) reaches in ``tree``."""
    node = np.zeros(X.shape[0], dtype=np.int64)
    rows = np.arange(X.shape[0])
    active = tree.left[node] >= 0
    while active.any():
        r, n = rows[active], node[active]
        left = goes_left(tree, n, X[r, tree.feature[n]], rule)
        node[r] = np.where(left, tree.left[n], tree.right[n])
        active = tree.left[node] >= 0
    return node


def linear_values(tree: Tree, leaves: np.ndarray, X: np.ndarray, plain: np.ndarray) -> np.ndarray:
    """What the leaves ``leaves`` (one a row of ``X``) contribute by their linear models
    (:class:`silvanforge.ir.hir.LinearLeaves`): ``plain`` (the leaf values, in the accumulation
    dtype) where a feature of the model is NaN, else its constant plus each term in order."""
    lin, acc_t = tree.linear, plain.dtype
    out = lin.const[leaves].astype(acc_t)
    missing = np.zeros(len(leaves), dtype=bool)
    count = lin.begin[leaves + 1] - lin.begin[leaves]
    for k in range(int(count.max(initial=0))):
        rows = np.flatnonzero(k < count)
        term = lin.begin[leaves[rows]] + k
        x = X[rows, lin.feature[term]]  # in the comparison dtype
        missing[rows] |= np.isnan(x)
        with np.errstate(invalid="ignore", over="ignore"):
            # LightGBM's dense-row reader drops |x| <= kZeroThreshold: the model reads 0.0.
            z = np.where(np.abs(x) <= ZERO_THRESHOLD, 0, x).astype(acc_t)
            out[rows] = out[rows] + lin.coeff[term].astype(acc_t) * z
    return np.where(missing, plain, out)


def predict_margin(forest: Forest, X: np.ndarray) -> np.ndarray:
    """Margins of shape (n, num_outputs) in the forest's accumulation dtype."""
    X = np.asarray(X, dtype=forest.threshold_dtype)
    acc_t = np.dtype(forest.accumulate_dtype)
    n, k = X.shape[0], forest.num_outputs
    base = np.asarray(forest.base_score, dtype=acc_t)
    agg = forest.aggregation
    if agg is Aggregation.SUM:
        acc = np.tile(base, (n, 1))
    elif agg is Aggregation.AVERAGE:
        acc = np.zeros((n, k), dtype=acc_t)
    else:
        acc = np.full((n, k), np.nan, dtype=acc_t)  # NaN marks "no tree contributed yet"
    for tree in forest.trees:
        leaves = leaf_indices(tree, X, forest.category_rule)
        # Linear leaves can be infinite (an infinite input): sums then may be NaN, as LightGBM's are.
        for j, out in enumerate(tree.outputs):
            value = tree.leaf_value[leaves, j].astype(acc_t)
            if tree.linear is not None:
                value = linear_values(tree, leaves, X, value)
            if agg in (Aggregation.SUM, Aggregation.AVERAGE):
                with np.errstate(invalid="ignore", over="ignore"):
                    acc[:, out] += value
            elif agg is Aggregation.MIN:
                acc[:, out] = np.where(np.isnan(acc[:, out]) | (value < acc[:, out]), value, acc[:, out])
            else:
                acc[:, out] = np.where(np.isnan(acc[:, out]) | (value > acc[:, out]), value, acc[:, out])
    if agg is Aggregation.AVERAGE:
        acc = acc / acc_t.type(forest.average_divisor) + base
    elif agg in (Aggregation.MIN, Aggregation.MAX):
        acc = np.where(np.isnan(acc), acc_t.type(0), acc) + base
    return acc


def predict_leaf(forest: Forest, X: np.ndarray) -> np.ndarray:
    """(n, trees): the number the model's library gives the leaf each row reaches in each tree
    (``Tree.node_ids``, else the leaf's index), for rows as :func:`predict` takes them."""
    X = _codes(forest, X)
    cols = [leaves if tree.node_ids is None else tree.node_ids[leaves]
            for tree in forest.trees for leaves in [leaf_indices(tree, X, forest.category_rule)]]
    return np.stack(cols, axis=1) if cols else np.zeros((X.shape[0], 0), dtype=np.int64)


def predict_per_tree(forest: Forest, X: np.ndarray) -> np.ndarray:
    """(n, trees, outputs): each tree's value for each row on each output, 0 where it adds
    none, in the accumulation dtype (no base score, no averaging), for rows as :func:`predict`
    takes them."""
    X = _codes(forest, X)
    acc_t = np.dtype(forest.accumulate_dtype)
    out = np.zeros((X.shape[0], forest.num_trees, forest.num_outputs), dtype=acc_t)
    for t, tree in enumerate(forest.trees):
        leaves = leaf_indices(tree, X, forest.category_rule)
        for j, o in enumerate(tree.outputs):
            value = tree.leaf_value[leaves, j].astype(acc_t)
            out[:, t, o] = value if tree.linear is None else linear_values(tree, leaves, X, value)
    return out


def predict_contribs(forest: Forest, X: np.ndarray) -> np.ndarray:
    """(n, outputs, features + 1): path-dependent SHAP values by their definition (Lundberg et
    al., "Consistent Individualized Feature Attribution for Tree Ensembles", Algorithm 1): every
    coalition ``S`` of features, ``E[f | x_S]`` by walking the row's way at features in ``S`` and
    averaging both children by their covers elsewhere, weighted as Shapley values weigh them;
    the bias (``E[f]``) last.  Exponential in the features: for tests of small models."""
    X = _codes(forest, X)
    n, K, F = X.shape[0], forest.num_outputs, forest.num_features
    if F > 12:
        raise ValueError("the definition's coalitions are 2**features: at most 12 features here")
    scale = 1.0 / forest.average_divisor if forest.aggregation is Aggregation.AVERAGE else 1.0
    weight = [math.factorial(k) * math.factorial(F - 1 - k) / math.factorial(F) for k in range(F)]
    out = np.zeros((n, K, F + 1))
    out[:, :, F] = np.asarray(forest.base_score, np.float64)
    for r in range(n):
        x = X[r:r + 1]
        for tree in forest.trees:
            left = {m: bool(goes_left(tree, np.array([m]), x[:, tree.feature[m]], forest.category_rule)[0])
                    for m in np.flatnonzero(tree.left >= 0).tolist()}
            cover = tree.cover if tree.cover is not None else np.ones(tree.num_nodes)
            expect = [_expectation(tree, cover, left, S) * scale for S in range(1 << F)]
            for j, o in enumerate(tree.outputs):
                e = np.array([v[j] for v in expect])
                out[r, o, F] += e[0]
                for f in range(F):
                    for S in range(1 << F):
                        if not S >> f & 1:
                            out[r, o, f] += weight[bin(S).count("1")] * (e[S | 1 << f] - e[S])
    return out


def _expectation(tree: Tree, cover: np.ndarray, left: dict, S: int) -> np.ndarray:
    """``E[tree | x_S]``: the row's way where the node's feature is in coalition ``S``, both
    children averaged by cover elsewhere."""
    def walk(node):
        if tree.left[node] < 0:
            return tree.leaf_value[node].astype(np.float64)
        lo, hi = int(tree.left[node]), int(tree.right[node])
        if S >> int(tree.feature[node]) & 1:
            return walk(lo if left[node] else hi)
        if cover[node] <= 0:
            return 0.0 * tree.leaf_value[0]
        return (cover[lo] * walk(lo) + cover[hi] * walk(hi)) / cover[node]
    return walk(0)


def _codes(forest: Forest, X) -> np.ndarray:
    """Rows in the comparison dtype, columns of categories known by hash hashed first."""
    if forest.hashed_categories or forest.hashed_combinations:
        X = as_rows(X, forest, np.dtype(np.float64))
    return np.asarray(X, dtype=forest.threshold_dtype)


def predict(forest: Forest, X: np.ndarray, output_margin: bool = False) -> np.ndarray:
    """What the source library's ``predict`` returns (margins if ``output_margin``) for rows as
    ``CompiledForest.predict`` takes them: columns of categories known by hash are hashed
    first (:func:`silvanforge.inputs.rows.as_rows`); ``predict_margin`` reads rows of codes."""
    if forest.hashed_categories or forest.hashed_combinations:
        X = as_rows(X, forest, np.dtype(np.float64))
    if forest.missing is not None:  # (the estimator's missing=, as its predict reads it)
        X = np.where(np.asarray(X, dtype=np.float64) == forest.missing, np.nan, X)
    margins = predict_margin(forest, X)
    values = margins if output_margin else transforms.apply(forest, margins)
    return transforms.shape_output(forest, values)

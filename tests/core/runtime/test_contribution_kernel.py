"""SHAP contributions by a target's compiled kernel (:mod:`silvanforge.runtime.shap_arrays`):
the same answer for every thread count, for every way a request is split (trees for a few rows,
rows for more) and whether a path is read from its pattern table or integrated, and equal to
the NumPy evaluation on NaN rows, categorical splits, several outputs and symmetric trees read
by leaf."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support_common import labelled as _labels
from support_common import normal_rows as _rows

import silvanforge as sf
from silvanforge.runtime import contributions, reference, shap_arrays, shap_view


def _kernel():
    kernel = shap_arrays.kernel_for("cpu")
    if kernel is None:
        pytest.skip("no installed target has a contributions kernel")
    return kernel


def _numpy(forest, X):
    return contributions.contributions(contributions.tables(forest), X.astype(forest.threshold_dtype), forest)


def _every_way(forest, X, rtol):
    """The kernel's answers at each size band, thread count and path evaluation (tables kept,
    tables made per call with no budget for kept ones, integrals), against NumPy's."""
    kernel = _kernel()
    flat = shap_arrays.arrays(forest)
    rows = X.astype(forest.threshold_dtype)
    for n in (1, shap_arrays.TREE_SPLIT_ROWS - 1, shap_arrays.TREE_SPLIT_ROWS, 2 * shap_arrays.ROWS_PER_CALL + 3):
        want = _numpy(forest, rows[:n])
        for a in (flat, shap_arrays.arrays(forest, 0, kernel=kernel)):
            one = shap_arrays.contributions(a, kernel, rows[:n], 1)
            assert np.array_equal(one, shap_arrays.contributions(a, kernel, rows[:n], 2))  # bit for bit
            np.testing.assert_allclose(one, want, rtol=rtol, atol=rtol * np.abs(want).max())
        integrated = shap_arrays.contributions(flat, kernel, rows[:n], 2, use_tables=False)
        np.testing.assert_allclose(integrated, want, rtol=rtol, atol=rtol * np.abs(want).max())
    return flat


def test_xgboost_with_nan_and_classes():
    xgb = pytest.importorskip("xgboost")
    X = _rows(300, 6).astype(np.float32)
    booster = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 5, "nthread": 1},
                        xgb.DMatrix(X, _labels(X)), 6)
    cf = sf.compile(booster)
    _every_way(cf.forest, X, 1e-12)
    want = booster.predict(xgb.DMatrix(X), pred_contribs=True)
    np.testing.assert_allclose(cf.predict(X, pred_contribs=True, threads=2), want, rtol=1e-4,
                               atol=1e-4 * np.abs(want).max())


def test_lightgbm_categorical():
    lgb = pytest.importorskip("lightgbm")
    X = _rows(500, 4, seed=2)
    X[:, 3] = np.random.default_rng(2).integers(0, 9, 500)
    X[::13, 3] = np.nan
    booster = lgb.train({"objective": "regression", "num_leaves": 31, "verbose": -1, "num_threads": 1,
                         "min_data_per_group": 5, "cat_smooth": 1}, lgb.Dataset(X, X[:, 3] % 4 + np.nan_to_num(X[:, 0]),
                                                                                  categorical_feature=[3]), 10)
    cf = sf.compile(booster)
    assert cf.forest.trees[0].categories or any(t.categories for t in cf.forest.trees)
    _every_way(cf.forest, X, 1e-12)
    for n in (1, 64, 500):
        np.testing.assert_allclose(cf.predict(X[:n], pred_contribs=True), booster.predict(X[:n], pred_contrib=True),
                                   rtol=1e-8, atol=1e-10)


def test_lightgbm_deep_paths_and_wide_category_sets():
    """Leaf-wise trees on 12 features (paths of more features than the kernel unrolls, and of
    fewer) with a categorical feature of 80 categories (sets of several words), equal to
    LightGBM's and NumPy's at every size band."""
    lgb = pytest.importorskip("lightgbm")
    X = _rows(1500, 12, seed=4)
    X[:, 5] = np.random.default_rng(4).integers(0, 80, 1500)
    X[::17, 5] = np.nan
    y = np.prod(np.tanh(np.nan_to_num(X)), axis=1) + np.nan_to_num(X).sum(axis=1) + (X[:, 5] % 7 == 3)
    booster = lgb.train({"objective": "regression", "num_leaves": 250, "min_data_in_leaf": 2, "verbose": -1,
                         "num_threads": 1, "min_data_per_group": 3, "cat_smooth": 1, "max_cat_to_onehot": 1},
                        lgb.Dataset(X, y, categorical_feature=[5]), 4)
    cf = sf.compile(booster)
    flat = _every_way(cf.forest, X, 1e-12)
    depth = [g.d for g in contributions.tables(cf.forest).groups]
    assert flat.max_depth == max(depth) > treeshap_unrolled() >= min(depth)
    assert any(max(max(c) for c in t.categories.values()) >= 32 for t in cf.forest.trees if t.categories)
    for n in (1, 64, 1500):
        np.testing.assert_allclose(cf.predict(X[:n], pred_contribs=True), booster.predict(X[:n], pred_contrib=True),
                                   rtol=1e-8, atol=1e-10)


def treeshap_unrolled() -> int:
    return pytest.importorskip("silvanforge_target_cpu.treeshap").UNROLLED_D


def test_symmetric_trees_read_by_leaf():
    """CatBoost's symmetric trees with random covers, each a table by leaf, equal the definition
    on the trees as CatBoost walks them."""
    cb = pytest.importorskip("catboost")
    X = _rows(300, 5, seed=3)
    model = cb.CatBoostRegressor(iterations=6, depth=4, verbose=0, thread_count=1).fit(X, np.nan_to_num(X[:, 0]))
    forest = sf.compile(model).forest
    rng = np.random.default_rng(3)
    trees = []
    for tree in forest.trees:
        cover = rng.integers(1, 50, tree.num_nodes).astype(np.float64)
        for node in range(tree.num_nodes - 1, -1, -1):
            if tree.left[node] >= 0:
                cover[node] = cover[tree.left[node]] + cover[tree.right[node]]
        trees.append(dataclasses.replace(tree, cover=cover))
    forest = dataclasses.replace(forest, trees=trees)
    flat = _every_way(forest, X, 1e-12)
    assert (flat.named["tree_levels"][:-1] > 0).all()
    got = shap_arrays.contributions(flat, _kernel(), X[:9].astype(forest.threshold_dtype), 1)
    np.testing.assert_allclose(got, reference.predict_contribs(shap_view.explained(forest),
                                                               X[:9].astype(forest.threshold_dtype)),
                               rtol=1e-9, atol=1e-12)


def _catboost(**params):
    cb = pytest.importorskip("catboost")
    X = _rows(300, 5, seed=5)
    y = _labels(X) if params.get("loss_function") == "MultiClass" else np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 2]) ** 2
    kind = cb.CatBoostClassifier if params.get("loss_function") == "MultiClass" else cb.CatBoostRegressor
    model = kind(iterations=6, depth=6, verbose=0, thread_count=1, **params).fit(X, y)
    return model, X, model.get_feature_importance(cb.Pool(X), type="ShapValues")


@pytest.mark.parametrize("params", [{}, {"loss_function": "MultiClass"}], ids=["regression", "multiclass"])
def test_symmetric_trees_with_empty_leaves_by_leaf_equal_catboost(params):
    """Depth 6 on 300 rows leaves leaves empty: every tree is still a table by leaf, and the
    kernel equals CatBoost's ShapValues on NaN rows at every size band and thread count."""
    model, X, want = _catboost(**params)
    forest = sf.compile(model).forest
    assert any((t.cover[t.left < 0] == 0).any() for t in forest.trees)
    assert np.isnan(X).any()
    flat = _every_way(forest, X, 1e-12)
    assert (flat.named["tree_levels"][:-1] > 0).all()
    filled = shap_arrays.arrays(forest, kernel=_kernel())  # the tables made by the kernel's leaf_table
    np.testing.assert_allclose(filled.named["leaf_table"], flat.named["leaf_table"], rtol=1e-12, atol=1e-15)
    for a in (flat, filled):
        got = contributions.shaped(forest, shap_arrays.contributions(a, _kernel(), X.astype(forest.threshold_dtype), 2))
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)


def test_tables_by_leaf_past_the_budget_fall_back_to_paths():
    """A budget for some trees' tables: those trees by leaf, the rest walked by paths (with
    pattern tables or integrals), the same values as CatBoost's."""
    model, X, want = _catboost(loss_function="MultiClass")
    forest = sf.compile(model).forest
    full = shap_arrays.arrays(forest).named
    sizes = 8 * (full["table_columns"][:-1] << full["tree_levels"][:-1])  # each tree's table's bytes
    assert (sizes > 0).all()
    rows = X.astype(forest.threshold_dtype)
    for budget in (0, int(sizes[0] + sizes[1]), int(sizes.sum())):
        flat = shap_arrays.arrays(forest, table_bytes=budget)
        tabled = flat.named["tree_levels"][:-1] > 0
        assert sizes[tabled].sum() <= budget
        assert tabled.sum() == {0: 0, int(sizes.sum()): len(sizes)}.get(budget, tabled.sum())
        assert budget in (0, int(sizes.sum())) or (tabled[:2].all() and not tabled.all())
        for threads in (1, 2):
            got = contributions.shaped(forest, shap_arrays.contributions(flat, _kernel(), rows, threads))
            np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)

"""The forest as its library's TreeSHAP walks it (:mod:`silvanforge.runtime.shap_view`): the same
predictions as the forest imported (CatBoost's symmetric trees with their levels reversed,
every tree renumbered in preorder), the same leaf ids, covers that add up."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.runtime import reference
from silvanforge.runtime import shap_view
from support_common import normal_rows as _rows


def _same_function(forest, view, X):
    np.testing.assert_array_equal(reference.predict_margin(view, X), reference.predict_margin(forest, X))
    np.testing.assert_array_equal(reference.predict_leaf(view, X), reference.predict_leaf(forest, X))


def test_catboost_symmetric_trees_reversed():
    cb = pytest.importorskip("catboost")
    X = _rows(300, 4, seed=11)
    model = cb.CatBoostRegressor(iterations=4, depth=5, verbose=0, thread_count=1).fit(X, np.nan_to_num(X[:, 0]))
    forest = sf.load_model(model)
    view = shap_view.explained(forest)
    rows = X.astype(forest.threshold_dtype)
    _same_function(forest, view, rows)
    for before, after in zip(forest.trees, view.trees):
        levels = shap_view.symmetric_levels(after)
        assert levels is not None
        old = [int(before.feature[level[0]]) for level in shap_view.symmetric_levels(before)[:-1]]
        assert [int(after.feature[level[0]]) for level in levels[:-1]] == old[::-1]
        inner = np.flatnonzero(after.left >= 0)
        np.testing.assert_allclose(after.cover[inner], after.cover[after.left[inner]] + after.cover[after.right[inner]])
        empty = (after.left < 0) & (after.cover == 0)
        assert (after.leaf_value[empty] == 0).all()


def test_other_forests_as_they_are_and_preorder_keeps_the_function():
    lgb = pytest.importorskip("lightgbm")
    X = _rows(400, 4, seed=12)
    X[:, 3] = np.random.default_rng(12).integers(0, 7, 400)
    booster = lgb.train({"num_leaves": 15, "verbose": -1, "num_threads": 1, "min_data_per_group": 5, "cat_smooth": 1},
                        lgb.Dataset(X, X[:, 3] % 3 + np.nan_to_num(X[:, 0]), categorical_feature=[3]), 5)
    forest = sf.load_model(booster)
    assert shap_view.explained(forest) is forest
    view = dataclasses.replace(forest, trees=[shap_view.preordered(t) for t in forest.trees])
    _same_function(forest, view, X)
    for tree in view.trees:
        inner = np.flatnonzero(tree.left >= 0)
        assert (tree.left[inner] == inner + 1).all()  # preorder: the left child follows its parent

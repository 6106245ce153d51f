"""Models the profile and cover tests (core/frontend) train and read: an XGBoost booster whose
trees send most rows one way, a LightGBM model with a categorical feature of three bitset words,
and a forest with its covers taken away."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import silvanforge as sf


def train_xgboost(rng, rows=3000, features=6, rounds=12, depth=5, objective="reg:squarederror", **extra):
    """A booster on ``rows`` float32 rows (feature 2 rounded, so it splits at few values) and
    the rows it was trained on."""
    xgb = pytest.importorskip("xgboost")
    X = rng.normal(size=(rows, features)).astype(np.float32)
    X[:, 2] = np.round(X[:, 2] * 2)
    y = X[:, 0] + X[:, 1] ** 2 - X[:, 2]
    if objective.startswith("multi"):
        y = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    params = {"max_depth": depth, "eta": 0.3, "nthread": 1, "seed": 7, "objective": objective, **extra}
    return xgb.train(params, xgb.DMatrix(X, label=y), rounds), X


def categorical_lightgbm(tmp_path, rng):
    """A binary LightGBM model with categories 0 to 69 in feature 3, saved as ``cat.txt`` in
    ``tmp_path``: the booster, its path and rows (5% NaN) to predict."""
    lgb = pytest.importorskip("lightgbm")
    X = rng.normal(size=(1500, 5))
    X[:, 3] = rng.integers(0, 70, 1500)  # bitsets of three words
    y = (X[:, 0] + np.sin(X[:, 3]) > 0).astype(int)
    booster = lgb.train({"objective": "binary", "num_leaves": 63, "verbose": -1, "num_threads": 1,
                         "min_data_in_leaf": 5, "max_cat_to_onehot": 1}, lgb.Dataset(X, y, categorical_feature=[3]), 40)
    path = tmp_path / "cat.txt"
    booster.save_model(path)
    X[rng.random(X.shape) < 0.05] = np.nan
    return booster, path, X


def without_covers(forest: sf.Forest) -> sf.Forest:
    return dataclasses.replace(forest, trees=[dataclasses.replace(t, cover=None) for t in forest.trees])

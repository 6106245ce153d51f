"""Models the GPU target tests share: multi-class with categorical splits, float64 LightGBM, and
models of the benchmark suites' shapes."""

from __future__ import annotations

import numpy as np


def gpu_models(tmp):
    """A multi-class XGBoost model with categorical splits and NaNs, and a LightGBM model
    (float64) with categorical splits, zero-as-missing and NaNs."""
    import lightgbm as lgb
    import xgboost as xgb

    rng = np.random.default_rng(5)
    n = 600
    X = rng.normal(size=(n, 7)).astype(np.float32)
    X[:, 3] = rng.integers(0, 9, n)
    y = ((X[:, 0] > 0).astype(int) + (X[:, 3] % 3 == 1)).astype(int)
    X[rng.random(X.shape) < 0.1] = np.nan
    dm = xgb.DMatrix(X, y, feature_types=["q", "q", "q", "c", "q", "q", "q"], enable_categorical=True)
    # One training thread: the GPU tests run in parallel workers (pytest-xdist), and each
    # library's OpenMP team the size of the machine, spinning in every worker, made a 3 s test
    # take 40 s on a 16-core GPU host.
    booster = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 5, "nthread": 1,
                         "tree_method": "hist", "max_cat_to_onehot": 1}, dm, 12)
    booster.save_model(tmp / "xgb_multi.json")
    Xl = rng.normal(size=(n, 6))
    Xl[:, 1] = rng.integers(0, 12, n)
    yl = Xl[:, 0] * 2 + (Xl[:, 1] % 4) + rng.normal(size=n) * 0.1
    Xl[rng.random(Xl.shape) < 0.08] = np.nan
    Xl[rng.random(Xl.shape) < 0.05] = 0.0
    ds = lgb.Dataset(Xl, yl, categorical_feature=[1], params={"verbose": -1})
    lgbm = lgb.train({"objective": "regression", "num_leaves": 20, "verbose": -1, "zero_as_missing": True, "num_threads": 1,
                      "min_data_per_group": 5, "cat_smooth": 1}, ds, 15)
    lgbm.save_model(tmp / "lgb_cat.txt")
    return {"xgb_multi": (tmp / "xgb_multi.json", X), "lgb_cat": (tmp / "lgb_cat.txt", Xl)}


def real_shaped_models(tmp):
    """Models shaped like the benchmark suites' (public_shapes.py, real_models.py), trained on a
    few hundred rows: XGBoost binary (28 features) and multi-class (54 features, 8 classes),
    XGBoost with categorical splits, LightGBM float64 regression (90 features) and binary with
    categorical splits, wide rows (2000 features) and 1000 trees."""
    import lightgbm as lgb
    import xgboost as xgb

    rng = np.random.default_rng(17)

    def data(features, n=300):
        X = rng.normal(size=(n, features)).astype(np.float32)
        X[rng.random(X.shape) < 0.05] = np.nan
        return X, np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) * 0.5

    out = {}
    X, y = data(28)
    out["xgb_binary"] = xgb.train({"objective": "binary:logistic", "max_depth": 6, "nthread": 1},
                                  xgb.DMatrix(X, y > 0), 100)
    X, y = data(54)
    out["xgb_multiclass"] = xgb.train({"objective": "multi:softprob", "num_class": 8, "max_depth": 6, "nthread": 1},
                                      xgb.DMatrix(X, np.digitize(y, [-1.5, -1, -.5, 0, .5, 1, 1.5])), 25)
    X, y = data(10)
    X[:, :3] = rng.integers(0, 12, size=(X.shape[0], 3))
    out["xgb_categorical"] = xgb.train(
        {"max_depth": 5, "nthread": 1, "max_cat_to_onehot": 1, "tree_method": "hist"},
        xgb.DMatrix(X, y + (X[:, 2] % 3), feature_types=["c"] * 3 + ["q"] * 7, enable_categorical=True), 50)
    X, y = data(90)
    out["lgb_float64"] = lgb.train({"objective": "regression", "num_leaves": 63, "verbose": -1, "num_threads": 1},
                                   lgb.Dataset(X.astype(np.float64), y), 100)
    X, y = data(12)
    X[:, :3] = rng.integers(0, 20, size=(X.shape[0], 3))
    out["lgb_categorical"] = lgb.train(
        {"objective": "binary", "num_leaves": 31, "verbose": -1, "num_threads": 1, "min_data_per_group": 5,
         "cat_smooth": 1}, lgb.Dataset(X, (y + X[:, 1] % 4) > 1, categorical_feature=[0, 1, 2]), 50)
    X, y = data(2000, 200)
    out["lgb_wide"] = lgb.train({"objective": "regression", "num_leaves": 31, "max_bin": 16, "verbose": -1,
                                 "num_threads": 1}, lgb.Dataset(X, y), 20)
    X, y = data(8)
    out["xgb_1000_trees"] = xgb.train({"max_depth": 4, "nthread": 1}, xgb.DMatrix(X, y), 1000)
    paths = {}
    for name, booster in out.items():
        paths[name] = tmp / (name + (".txt" if name.startswith("lgb") else ".json"))
        booster.save_model(paths[name])
    return paths

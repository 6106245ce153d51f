"""Models the GPU target tests share: multi-class with categorical splits, float64 LightGBM."""

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
    booster = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 5,
                         "tree_method": "hist", "max_cat_to_onehot": 1}, dm, 12)
    booster.save_model(tmp / "xgb_multi.json")
    Xl = rng.normal(size=(n, 6))
    Xl[:, 1] = rng.integers(0, 12, n)
    yl = Xl[:, 0] * 2 + (Xl[:, 1] % 4) + rng.normal(size=n) * 0.1
    Xl[rng.random(Xl.shape) < 0.08] = np.nan
    Xl[rng.random(Xl.shape) < 0.05] = 0.0
    ds = lgb.Dataset(Xl, yl, categorical_feature=[1], params={"verbose": -1})
    lgbm = lgb.train({"objective": "regression", "num_leaves": 20, "verbose": -1, "zero_as_missing": True,
                      "min_data_per_group": 5, "cat_smooth": 1}, ds, 15)
    lgbm.save_model(tmp / "lgb_cat.txt")
    return {"xgb_multi": (tmp / "xgb_multi.json", X), "lgb_cat": (tmp / "lgb_cat.txt", Xl)}

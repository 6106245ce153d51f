"""The training libraries themselves: XGBoost ``inplace_predict`` and LightGBM ``predict``."""

from __future__ import annotations

from .base import Call, PeerContext, versions


def load_xgboost_booster(path: str):
    import xgboost as xgb

    booster = xgb.Booster()
    with open(path, "rb") as f:
        booster.load_model(bytearray(f.read()))  # from a buffer: JSON or UBJSON by content
    return booster


def xgboost_engine(ctx: PeerContext) -> Call:
    booster = load_xgboost_booster(ctx.path)
    return Call("xgboost", lambda X, n: booster.inplace_predict(X, validate_features=False),
                on_threads=lambda n: booster.set_param({"nthread": n}), versions=versions("xgboost"))


def lightgbm_engine(ctx: PeerContext) -> Call:
    import lightgbm as lgb

    booster = lgb.Booster(model_file=ctx.path)
    return Call("lightgbm", lambda X, n: booster.predict(X, num_threads=n), versions=versions("lightgbm"))

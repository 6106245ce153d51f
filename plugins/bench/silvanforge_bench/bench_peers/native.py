"""The training libraries themselves: XGBoost ``inplace_predict`` and LightGBM ``predict``."""

from __future__ import annotations

from .base import Call, PeerContext, PeerUnavailable, versions


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


def xgboost_cuda_engine(ctx: PeerContext) -> Call:
    """XGBoost's own GPU predictor (``device=cuda``); rows are copied in per call, like ours."""
    import ctypes

    import xgboost

    if not xgboost.build_info().get("USE_CUDA"):
        raise PeerUnavailable("xgboost-cuda: this xgboost was built without CUDA")
    try:
        ctypes.CDLL("libcuda.so.1")  # without a driver XGBoost would quietly predict on the CPU
    except OSError:
        raise PeerUnavailable("xgboost-cuda: no CUDA driver (libcuda) here") from None
    booster = load_xgboost_booster(ctx.path)
    try:
        booster.set_param({"device": "cuda"})
        import numpy as np

        booster.inplace_predict(np.zeros((1, ctx.num_features), np.float32), validate_features=False)
    except Exception as exc:  # noqa: BLE001 - a CPU-only build or no GPU
        raise PeerUnavailable(f"xgboost-cuda: {' '.join(str(exc).split())[:160]}") from None
    return Call("xgboost-cuda", lambda X, n: booster.inplace_predict(X, validate_features=False),
                versions=versions("xgboost"))

"""Hummingbird: the forest as PyTorch tensor operations (``hummingbird.ml.convert(model, "torch")``).

Hummingbird converts scikit-learn-style models, so an XGBoost model is loaded as an
``XGBClassifier`` / ``XGBRegressor`` and a LightGBM one as a ``lightgbm.Booster``.  Two gaps are
filled through Hummingbird's own ``extra_config`` (no post-processing outside its predict):
XGBoost's intercept (``base_score``, which Hummingbird's classifier path leaves out and its
regressor path cannot parse in XGBoost >= 3's ``[x]`` form), and LightGBM's sigmoid for binary
objectives (its Booster path assumes a regression); a multiclass LightGBM model is wrapped as a fitted
``LGBMClassifier`` so Hummingbird groups its trees by class.  Other objectives are skipped with a
note.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np

from .base import Call, PeerContext, PeerUnavailable, versions

_IDENTITY_XGB = ("reg:squarederror", "reg:squaredlogerror", "reg:pseudohubererror",
                 "reg:absoluteerror", "reg:quantileerror", "reg:linear")


def _base_scores(config: dict) -> list[float]:
    raw = str(config["learner"]["learner_model_param"].get("base_score", "0.5"))
    return [float(v) for v in raw.strip("[]").replace(",", " ").split() or ["0.5"]]


def _xgboost_model(path: str, num_features: int):
    import xgboost as xgb

    from .native import load_xgboost_booster

    config = json.loads(load_xgboost_booster(path).save_config())
    objective = config["learner"]["objective"]["name"]
    base = _base_scores(config)
    extra: dict = {"n_features": num_features}
    if objective in ("binary:logistic", "reg:logistic"):
        model = xgb.XGBClassifier()
        model.load_model(path)
        p = min(max(base[0], 1e-7), 1 - 1e-7)
        extra["base_prediction"] = [math.log(p / (1 - p))]  # margin space, like XGBoost
        return model, extra, True
    if objective == "multi:softprob":
        model = xgb.XGBClassifier()
        model.load_model(path)
        classes = int(config["learner"]["learner_model_param"].get("num_class", 0))
        extra["base_prediction"] = base if len(base) == classes else base[:1] * classes
        return model, extra, True
    if objective in _IDENTITY_XGB:
        model = xgb.XGBRegressor()
        model.load_model(path)
        booster = model.get_booster()
        saved = booster.save_config

        def scalar_base_score() -> str:  # Hummingbird float()s this field
            cfg = json.loads(saved())
            cfg["learner"]["learner_model_param"]["base_score"] = repr(base[0])
            return json.dumps(cfg)

        if len(base) != 1:
            raise NotImplementedError(f"hummingbird: XGBoost {objective} with {len(base)} targets")
        booster.save_config = scalar_base_score  # this booster only; Hummingbird reads it once
        return model, extra, False
    raise NotImplementedError(f"hummingbird: XGBoost objective {objective} is not handled here")


def _lightgbm_model(path: str):
    import lightgbm as lgb

    booster = lgb.Booster(model_file=path)
    dump = booster.dump_model(num_iteration=-1)
    objective = str(dump.get("objective", "regression")).split()
    name = objective[0] if objective else "regression"
    if dump.get("average_output"):
        raise NotImplementedError("hummingbird: LightGBM random forests (average_output)")
    if name in ("binary", "cross_entropy", "xentropy"):
        sigmoid = [o for o in objective if o.startswith("sigmoid:")]
        if name == "binary" and sigmoid and float(sigmoid[0].split(":")[1]) != 1.0:
            raise NotImplementedError(f"hummingbird: LightGBM {' '.join(objective)}")
        return booster, {"post_transform": "LOGISTIC"}, False
    if name in ("regression", "regression_l1", "huber", "fair", "quantile", "mape", "lambdarank",
                "rank_xendcg"):
        return booster, {}, False
    if name in ("multiclass", "softmax"):
        # Hummingbird's Booster path sums every tree into one output; its LGBMClassifier path
        # groups trees by class and applies the softmax.  Wrap the booster as a fitted classifier.
        classes = int(dump.get("num_class", 1))
        clf = lgb.LGBMClassifier(objective="multiclass")
        clf._Booster, clf.fitted_ = booster, True
        clf._n_features = clf._n_features_in = booster.num_feature()
        clf._n_classes, clf._classes, clf._objective = classes, np.arange(classes), "multiclass"
        return clf, {}, True
    raise NotImplementedError(f"hummingbird: LightGBM objective {name} is not handled here")


def hummingbird_engine(ctx: PeerContext, device: str = "cpu") -> Call:
    import hummingbird.ml
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise PeerUnavailable("hummingbird-cuda: torch sees no CUDA GPU")
    if ctx.fmt.startswith("xgboost"):
        model, extra, proba = _xgboost_model(ctx.path, ctx.num_features)
    elif ctx.fmt.startswith("lightgbm"):
        model, extra, proba = _lightgbm_model(ctx.path)
    else:
        raise NotImplementedError(f"hummingbird: no converter for {ctx.fmt} here")
    start = time.perf_counter()
    converted = hummingbird.ml.convert(model, "torch", extra_config=extra)
    if device != "cpu":
        converted.to(device)  # predict copies the rows in and the result out, as ours does
    seconds = time.perf_counter() - start
    predict = converted.predict_proba if proba else converted.predict
    engine = Call("hummingbird" if device == "cpu" else f"hummingbird-{device}", lambda X, n: predict(X),
                  prepare=lambda X: np.ascontiguousarray(X, dtype=np.float32),
                  on_threads=torch.set_num_threads, versions=versions("hummingbird-ml", "torch"))
    engine.build_what, engine.build_seconds = "conversion to torch", seconds
    return engine


def hummingbird_cuda_engine(ctx: PeerContext) -> Call:
    """Hummingbird's torch backend on the GPU (the peer of the GPU targets in the SilvanForge paper
    draft)."""
    return hummingbird_engine(ctx, device="cuda")

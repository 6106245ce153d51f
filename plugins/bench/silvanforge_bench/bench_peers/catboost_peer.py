"""CatBoost as a peer: its own ``predict`` (``thread_count``), and ONNX Runtime on the ONNX
model CatBoost exports itself (``save_model(format="onnx")``), which CatBoost writes only for
models without categorical features.

The bench's rows are numbers, so models with categorical features are not timed by either
(CatBoost refuses non-integer values in categorical columns).
"""

from __future__ import annotations

import os

import numpy as np

from .base import Call, PeerContext, PeerUnavailable, versions
from .onnx_runtime import ort_sessions

CB = ("catboost-json", "catboost-cbm")  # the formats its engines read

# What ``predict`` returns per loss (as silvanforge_importer_catboost.losses): the prediction
# type to ask CatBoost for.
_PROBABILITY = ("Logloss", "CrossEntropy", "MultiClass", "MultiClassOneVsAll", "MultiLogloss", "MultiCrossEntropy")
_EXPONENT = ("Poisson", "Tweedie")


def _load(ctx: PeerContext, peer: str = "catboost"):
    import catboost as cb

    model = cb.CatBoost()
    model.load_model(ctx.path, format="json" if ctx.fmt == "catboost-json" else "cbm")
    if model.get_cat_feature_indices():
        raise PeerUnavailable(f"{peer}: not timed on this model (it has categorical features; "
                              "the bench's rows are numbers)")
    return model


def _prediction_type(model) -> str:
    loss = str(model.get_all_params().get("loss_function", "RMSE")).split(":")[0]
    return "Probability" if loss in _PROBABILITY else "Exponent" if loss in _EXPONENT else "RawFormulaVal"


def catboost_engine(ctx: PeerContext) -> Call:
    model = _load(ctx)
    kind = _prediction_type(model)
    return Call("catboost", lambda X, n: model.predict(X, prediction_type=kind, thread_count=n),
                prepare=lambda X: np.ascontiguousarray(X, dtype=np.float32), versions=versions("catboost"))


def catboost_onnx_engine(ctx: PeerContext) -> Call:
    """ONNX Runtime on CatBoost's own ONNX export; one session per thread count."""
    model = _load(ctx, "onnxruntime (CatBoost's ONNX export)")
    path = os.path.join(ctx.workdir, "catboost.onnx")
    try:
        model.save_model(path, format="onnx")
    except Exception as exc:  # noqa: BLE001 - CatBoost exports only some models
        raise PeerUnavailable(f"onnxruntime: CatBoost cannot export this model to ONNX "
                              f"({' '.join(str(exc).split())[:160]})") from None
    sessions, session = ort_sessions(path)
    first = session(ctx.threads[0])
    inp = first.get_inputs()[0]
    outputs = [o.name for o in first.get_outputs()]
    # Classifiers give (label, probabilities); regressors their formula value.
    name = "probabilities" if "probabilities" in outputs else outputs[0]
    kind = _prediction_type(model)
    if kind == "Exponent":
        raise PeerUnavailable("onnxruntime: CatBoost's ONNX export gives the raw formula value "
                              "of this model, not the exponent its predict returns")
    engine = Call("onnxruntime", lambda X, n: sessions[n].run([name], {inp.name: X})[0],
                  prepare=lambda X: np.ascontiguousarray(X, dtype=np.float32), on_threads=session,
                  versions=versions("onnxruntime", "catboost"))
    engine.note = "onnxruntime: model exported by catboost (save_model format=onnx)"
    return engine

"""ONNX Runtime: ONNX models as they are; XGBoost and LightGBM converted with onnxmltools."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .base import Call, PeerContext, versions


def onnx_model(path: str, fmt: str, num_features: int) -> tuple[bytes, str | None]:
    """The model as serialized ONNX: the file itself, or converted with onnxmltools."""
    if fmt == "onnx":
        with open(path, "rb") as f:
            return f.read(), None
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    types = [("input", FloatTensorType([None, num_features]))]
    if fmt.startswith("xgboost"):
        from .native import load_xgboost_booster

        model = onnxmltools.convert_xgboost(load_xgboost_booster(path), initial_types=types)
    elif fmt.startswith("lightgbm"):
        import lightgbm as lgb

        model = onnxmltools.convert_lightgbm(lgb.Booster(model_file=path), initial_types=types,
                                             zipmap=False)
    else:
        raise NotImplementedError(f"no ONNX converter for {fmt}")
    return model.SerializeToString(), "converted with onnxmltools"


def ort_sessions(model) -> tuple[dict, Callable]:
    """ONNX Runtime sessions of ``model`` (bytes or a path) by thread count, and the function
    that makes one on first use (intra-op threads are fixed per session)."""
    import onnxruntime as ort

    sessions: dict[int, object] = {}

    def session(threads: int):
        if threads not in sessions:
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            so.log_severity_level = 3
            sessions[threads] = ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])
        return sessions[threads]

    return sessions, session


def onnxruntime_engine(ctx: PeerContext) -> Call:
    blob, how = onnx_model(ctx.path, ctx.fmt, ctx.num_features)
    sessions, session = ort_sessions(blob)
    first = session(ctx.threads[0])
    inp = first.get_inputs()[0]
    dtype = np.float64 if "double" in inp.type else np.float32
    outputs = first.get_outputs()
    # Classifiers give (label, probabilities); predict returns the probabilities.
    label_first = len(outputs) > 1 and ("int" in outputs[0].type or "string" in outputs[0].type)
    name = outputs[1 if label_first else 0].name

    engine = Call("onnxruntime", lambda X, n: sessions[n].run([name], {inp.name: X})[0],
                  prepare=lambda X: np.ascontiguousarray(X, dtype=dtype), on_threads=session,
                  versions=versions("onnxruntime", *(["onnxmltools"] if how else [])))
    engine.note = f"onnxruntime: model {how}" if how else None
    return engine

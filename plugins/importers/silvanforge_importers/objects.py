"""Models held in memory: XGBoost and LightGBM boosters and estimators, ONNX ModelProtos, and
the raw bytes of a model file.

Each object is turned into the bytes its library would save and read by the same importer as
a file, so a model in memory and its saved file give the same forest.  A library is looked up
in ``sys.modules`` only: an object of a library can exist only once the user imported it, and
checking costs nothing for users who never installed it.
"""

from __future__ import annotations

import sys

from silvanforge.errors import UnsupportedModelError
from silvanforge.ir.hir import Forest

from . import lightgbm_text, onnx_trees, xgboost_json

# How error messages name a model that has no file.
BYTES_NAME = "the model bytes"


def import_object(obj, detectors, formats) -> Forest | None:
    """The forest of ``obj``, or None when it is nothing this plugin reads.  ``detectors`` and
    ``formats`` are the plugin's (format, detect) pairs and format -> bytes loader."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        data = bytes(obj)
        head = data[:4096]
        fmt = next((fmt for fmt, detect in detectors if detect(BYTES_NAME, head)), None)
        return None if fmt is None else formats[fmt](data, BYTES_NAME)
    for reader in (_xgboost, _lightgbm, _onnx):
        forest = reader(obj)
        if forest is not None:
            return forest
    return None


def _labels(estimator) -> list | None:
    """A classifier's ``classes_`` as plain Python values (saved in artifacts as JSON)."""
    classes = getattr(estimator, "classes_", None)
    return None if classes is None else [c.item() if hasattr(c, "item") else c for c in classes]


def _xgboost(obj) -> Forest | None:
    xgb = sys.modules.get("xgboost")
    if xgb is None:
        return None
    labels = None
    if isinstance(obj, xgb.XGBModel):
        try:
            booster = obj.get_booster()
        except xgb.core.XGBoostError as exc:  # NotFittedError derives from it in some versions
            raise UnsupportedModelError(f"the {type(obj).__name__} is not fitted: {exc}") from None
        except Exception as exc:  # sklearn's NotFittedError
            raise UnsupportedModelError(f"the {type(obj).__name__} is not fitted ({exc})") from None
        # The estimator's predict stops at the best iteration of early stopping; so does ours.
        best = getattr(obj, "best_iteration", None)  # an AttributeError without early stopping
        if best is not None:
            booster = booster[: int(best) + 1]
        if hasattr(obj, "classes_") and hasattr(obj, "predict_proba"):
            labels = _labels(obj)
    elif isinstance(obj, xgb.Booster):
        booster = obj
    else:
        return None
    forest = xgboost_json.loads_json(bytes(booster.save_raw("json")), f"the {type(obj).__name__}")
    if labels is not None:
        forest.class_labels = labels
    return forest


def _lightgbm(obj) -> Forest | None:
    lgb = sys.modules.get("lightgbm")
    if lgb is None:
        return None
    labels = None
    if isinstance(obj, lgb.LGBMModel):
        if not getattr(obj, "fitted_", False) and getattr(obj, "_Booster", None) is None:
            raise UnsupportedModelError(f"the {type(obj).__name__} is not fitted: call fit first")
        booster = obj.booster_
        if isinstance(obj, lgb.LGBMClassifier):
            labels = _labels(obj)
    elif isinstance(obj, lgb.Booster):
        booster = obj
    else:
        return None
    # model_to_string() keeps the best iteration only when early stopping found one, as
    # predict does by default.
    forest = lightgbm_text.loads(booster.model_to_string(), f"the {type(obj).__name__}")
    if labels is not None:
        forest.class_labels = labels
    return forest


def _onnx(obj) -> Forest | None:
    onnx = sys.modules.get("onnx")
    if onnx is None or not isinstance(obj, onnx.ModelProto):
        return None
    return onnx_trees.from_proto(obj, "the onnx.ModelProto")

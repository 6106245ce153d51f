"""SilvanForge's XGBoost importer: JSON and UBJSON model files, and XGBoost boosters and
estimators held in memory (saved to JSON by XGBoost itself, then read like a file).

Installable alone (``pip install ./plugins/importer_xgboost``): it needs neither xgboost, which
a model file does not, nor the other formats' libraries.
"""

from __future__ import annotations

import sys

from silvanforge import hookimpl
from silvanforge.errors import UnsupportedModelError  # noqa: F401 - raised by the object readers
from silvanforge.ir.hir import Forest

from . import xgboost_json

# How error messages name a model that has no file.
BYTES_NAME = "the model bytes"
_FORMATS = {"xgboost-json": xgboost_json.load_json, "xgboost-ubjson": xgboost_json.load_ubjson}
_FROM_BYTES = {"xgboost-json": xgboost_json.loads_json, "xgboost-ubjson": xgboost_json.loads_ubjson}
_DETECTORS = (("xgboost-json", xgboost_json.detect_json), ("xgboost-ubjson", xgboost_json.detect_ubjson))


@hookimpl
def silvanforge_formats():
    return list(_FORMATS)


@hookimpl
def silvanforge_detect_format(path, head):
    for fmt, detect in _DETECTORS:
        if detect(path, head):
            return fmt
    return None


@hookimpl
def silvanforge_import_model(path, fmt):
    loader = _FORMATS.get(fmt)
    return None if loader is None else loader(path)


@hookimpl
def silvanforge_import_object(obj):
    forest = _from_bytes(obj)
    return forest if forest is not None else _from_object(obj)


def _from_bytes(obj):
    """The forest of raw model bytes in one of this plugin's formats, else None."""
    if not isinstance(obj, (bytes, bytearray, memoryview)):
        return None
    data = bytes(obj)
    head = data[:4096]
    fmt = next((fmt for fmt, detect in _DETECTORS if detect(BYTES_NAME, head)), None)
    return None if fmt is None else _FROM_BYTES[fmt](data, BYTES_NAME)


def _labels(estimator) -> list | None:
    """A classifier's ``classes_`` as plain Python values (saved in artifacts as JSON)."""
    classes = getattr(estimator, "classes_", None)
    return None if classes is None else [c.item() if hasattr(c, "item") else c for c in classes]


def _from_object(obj) -> Forest | None:
    # Looked up in sys.modules only: an XGBoost object exists only once the user imported it.
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

"""SilvanForge's XGBoost importer: JSON and UBJSON model files, and XGBoost boosters and
estimators held in memory (saved to JSON by XGBoost itself, then read like a file).

Installable alone (``pip install ./plugins/importers/xgboost``): it needs neither xgboost, which
a model file does not, nor the other formats' libraries.
"""

from __future__ import annotations

import sys

from silvanforge.errors import UnsupportedModelError
from silvanforge.frontend.loading import Format, FormatImporter
from silvanforge.ir.hir import Forest

from . import xgboost_json


def _labels(estimator) -> list | None:
    """A classifier's ``classes_`` as plain Python values (saved in artifacts as JSON)."""
    classes = getattr(estimator, "classes_", None)
    return None if classes is None else [c.item() if hasattr(c, "item") else c for c in classes]


def _from_object(obj) -> Forest | None:
    # Looked up in sys.modules only: an XGBoost object exists only once the user imported it.
    xgb = sys.modules.get("xgboost")
    if xgb is None:
        return None
    labels, missing = None, None
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
        # The estimator's predict reads its missing= as missing (a booster's user gives it to
        # each DMatrix): so does ours, unless told otherwise.
        missing = getattr(obj, "missing", None)
    elif isinstance(obj, xgb.Booster):
        booster = obj
    else:
        return None
    forest = xgboost_json.loads_json(bytes(booster.save_raw("json")), f"the {type(obj).__name__}")
    if labels is not None:
        forest.class_labels = labels
    if missing is not None and missing == missing:
        forest.missing = float(missing)
    return forest


# The plugin object the entry point names: the hooks over this table (silvanforge.frontend.loading).
plugin = FormatImporter({
    "xgboost-json": Format(xgboost_json.detect_json, xgboost_json.load_json, xgboost_json.loads_json),
    "xgboost-ubjson": Format(xgboost_json.detect_ubjson, xgboost_json.load_ubjson, xgboost_json.loads_ubjson),
}, from_object=_from_object)

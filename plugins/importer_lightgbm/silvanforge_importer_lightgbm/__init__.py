"""SilvanForge's LightGBM importer: model text files, and LightGBM boosters and estimators held
in memory (``model_to_string()``, read like a file).

Installable alone (``pip install ./plugins/importer_lightgbm``): it needs neither lightgbm, which
a model file does not, nor the other formats' libraries.
"""

from __future__ import annotations

import sys

from silvanforge import hookimpl
from silvanforge.errors import UnsupportedModelError  # noqa: F401 - raised by the object readers
from silvanforge.ir.hir import Forest

from . import lightgbm_text

# How error messages name a model that has no file.
BYTES_NAME = "the model bytes"
_FORMATS = {"lightgbm-text": lightgbm_text.load}
_FROM_BYTES = {"lightgbm-text": lightgbm_text.loads}
_DETECTORS = (("lightgbm-text", lightgbm_text.detect),)


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


def _from_object(obj) -> Forest | None:
    # Looked up in sys.modules only: a LightGBM object exists only once the user imported it.
    lgb = sys.modules.get("lightgbm")
    if lgb is None:
        return None
    labels = None
    if isinstance(obj, lgb.LGBMModel):
        if not getattr(obj, "fitted_", False) and getattr(obj, "_Booster", None) is None:
            raise UnsupportedModelError(f"the {type(obj).__name__} is not fitted: call fit first")
        booster = obj.booster_
        if isinstance(obj, lgb.LGBMClassifier):
            classes = getattr(obj, "classes_", None)
            labels = None if classes is None else [c.item() if hasattr(c, "item") else c for c in classes]
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

"""SilvanForge's built-in importers: XGBoost (JSON, UBJSON), LightGBM (text) and ONNX tree ensembles.

Each format lives in its own module with ``detect(path, head) -> bool`` that recognises a file
by content, ``load(path) -> Forest`` and the same from bytes; :mod:`.objects` reads models held
in memory (boosters, estimators, ModelProtos, bytes).  This module only wires them to the hooks.
"""

from __future__ import annotations

from silvanforge import hookimpl

from . import lightgbm_text, objects, onnx_trees, xgboost_json

_FORMATS = {
    "xgboost-json": xgboost_json.load_json,
    "xgboost-ubjson": xgboost_json.load_ubjson,
    "lightgbm-text": lightgbm_text.load,
    "onnx": onnx_trees.load,
}
# The same formats read from bytes in memory (name: what error messages call the model).
_FROM_BYTES = {
    "xgboost-json": xgboost_json.loads_json,
    "xgboost-ubjson": xgboost_json.loads_ubjson,
    "lightgbm-text": lightgbm_text.loads,
    "onnx": onnx_trees.loads,
}
_DETECTORS = (
    ("xgboost-json", xgboost_json.detect_json),
    ("xgboost-ubjson", xgboost_json.detect_ubjson),
    ("lightgbm-text", lightgbm_text.detect),
    ("onnx", onnx_trees.detect),
)


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
    return objects.import_object(obj, _DETECTORS, _FROM_BYTES)

"""SilvanForge's ONNX importer: ``ai.onnx.ml`` tree ensembles, from files and from
``onnx.ModelProto`` objects in memory.  The one importer that needs ``onnx`` (installed with it).
"""

from __future__ import annotations

import sys

from silvanforge import hookimpl
from silvanforge.errors import UnsupportedModelError  # noqa: F401 - raised by the object readers
from silvanforge.ir.hir import Forest

from . import onnx_trees

# How error messages name a model that has no file.
BYTES_NAME = "the model bytes"
_FORMATS = {"onnx": onnx_trees.load}
_FROM_BYTES = {"onnx": onnx_trees.loads}
_DETECTORS = (("onnx", onnx_trees.detect),)


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
    onnx = sys.modules.get("onnx")
    if onnx is None or not isinstance(obj, onnx.ModelProto):
        return None
    return onnx_trees.from_proto(obj, "the onnx.ModelProto")

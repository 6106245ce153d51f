"""SilvanForge's ONNX importer: ``ai.onnx.ml`` tree ensembles, from files and from
``onnx.ModelProto`` objects in memory.  The one importer that needs ``onnx`` (installed with it).
"""

from __future__ import annotations

import sys

from silvanforge.frontend.loading import Format, FormatImporter
from silvanforge.ir.hir import Forest

from . import onnx_trees


def _from_object(obj) -> Forest | None:
    onnx = sys.modules.get("onnx")
    if onnx is None or not isinstance(obj, onnx.ModelProto):
        return None
    return onnx_trees.from_proto(obj, "the onnx.ModelProto")


# The plugin object the entry point names: the hooks over this table (silvanforge.frontend.loading).
plugin = FormatImporter({"onnx": Format(onnx_trees.detect, onnx_trees.load, onnx_trees.loads)},
                        from_object=_from_object)

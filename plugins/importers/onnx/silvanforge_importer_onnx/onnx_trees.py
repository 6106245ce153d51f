"""ONNX tree ensembles (``ai.onnx.ml`` TreeEnsembleRegressor / TreeEnsembleClassifier opset 1
and 3, TreeEnsemble opset 5) -> HIR Forest.

The semantics are onnxruntime's (the CPU kernels of onnxruntime 1.31, established by
experiment), canonicalised into the HIR (:mod:`silvanforge.ir.hir`) as follows.

* Comparisons.  A node sends a row to its *true* child iff ``x MODE t`` or (``x`` is NaN and
  ``nodes_missing_value_tracks_true``).  NaN compares false, except ``!=``.  So
  ``BRANCH_LEQ/LT/EQ`` become ``LE/LT/EQ`` (left = true child), ``BRANCH_GT`` -> ``LE`` and
  ``BRANCH_GTE`` -> ``LT`` and ``BRANCH_NEQ`` -> ``EQ`` with the children swapped, and
  ``default_left`` says where NaN goes after the swap.
* Precision.  The input is compared in the type the kernel receives: float32 for float (and
  integer) inputs, float64 for double inputs, with float32 ``nodes_values`` widened exactly.
  Where a double ensemble only ever sees float32 values (a float graph input cast to double),
  the thresholds are rounded (down for ``<=``, up for ``<``) so that comparing in float32 gives
  the same decisions.  Leaves are accumulated in the threshold type.
* Trees.  (V3) A tree starts at the first node of each run of equal ``nodes_treeids`` (so the
  number of trees is the number of runs, which is the divisor of ``AVERAGE``); children are
  looked up by ``(tree id, node id)``; weights on internal nodes are ignored; shared subtrees
  are copied.  (V5) Trees start at ``tree_roots``; a node whose two children are the same is
  replaced by that child.
* Leaves and outputs.  With one target (regressor ``n_targets=1``, TreeEnsemble
  ``n_targets=1``) onnxruntime uses only the *first* weight listed for a leaf (the leaf's
  ``nodes_values`` entry when it has none), adds ``base_values[0]`` after the trees and ignores
  every post_transform but ``PROBIT``.  With several targets a leaf adds all its weights
  (duplicates summed; for ``MIN``/``MAX`` the extreme one), and an output that no reached leaf
  has a weight for is written as 0 *before* the post_transform, base value or not.  Where that
  can happen on some rows only, an indicator output counts the trees that reached a weight for
  it and the ``onnx`` transform masks with it.
* Aggregation.  onnxruntime sums the trees from 0 and adds the base value last, which is the
  HIR's ``AVERAGE`` with divisor 1 when a base value is not zero.  ``AVERAGE`` divides by the
  number of trees; ``MIN``/``MAX`` add the base value to the extreme.
* Classifiers always sum.  With two class labels onnxruntime's binary special case applies
  (one score ``v`` becomes ``[1-v, v]`` or ``[-v, v]`` ...): see ``transforms._onnx_binary``.
* ``post_transform`` is computed in float32 as onnxruntime does (``transforms.onnx_post``).
  Note: onnxruntime reads TreeEnsemble's integer ``post_transform`` with its own enum
  (1 = LOGISTIC, 2 = SOFTMAX), the reverse of the ONNX specification (1 = SOFTMAX, 2 = LOGISTIC);
  this importer follows onnxruntime.
* ``BRANCH_MEMBER`` (V5).  onnxruntime accepts integer members only.  A set of at most 30
  members all in ``[0, 30]`` matches exactly (``x == m``; :attr:`CategoryRule.EXACT`); any
  other set matches ``int32(x)`` truncated toward zero (:attr:`CategoryRule.LIGHTGBM`).  A forest
  that mixes both kinds expands the exact sets into chains of ``EQ`` nodes.

The graph must hold exactly one tree-ensemble node, fed by the graph input through
``Identity``/``Cast`` only, and its scores may reach the graph outputs through ``Identity``,
``Cast`` (to float/double), ``ZipMap`` and multiplications by 1 (or additions of 0) only.
"""

from __future__ import annotations

import os

from silvanforge.errors import ModelFormatError, SilvanForgeError, UnsupportedModelError
from silvanforge.frontend.loading import read_model_file
from silvanforge.ir.hir import Forest

from .onnx_ensembles import EnsembleAttributes
from .onnx_forest import ForestBuilding
from .onnx_graph import GraphPaths
from .onnx_spec import _DOUBLE, _ENSEMBLE_OPS, _FLOAT16, _ML

# ----------------------------------------------------------------------------- detection
_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("varint runs off the buffer")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def detect(path, head) -> bool:
    """An ONNX ModelProto: a protobuf starting with ``ir_version`` (field 1, byte 0x08) whose
    following fields, as far as ``head`` shows them, are ModelProto fields of the right wire
    types.  Text formats (JSON, UBJSON's ``{``, LightGBM's ``tree``) never start with 0x08."""
    try:
        h = bytes(head)
        if len(h) < 2 or h[0] != 0x08:
            return False
        fields, pos = 0, 1
        try:
            ir_version, pos = _varint(h, pos)
            if not 1 <= ir_version <= 64:
                return False
            fields = 1
            while pos < len(h):
                tag, pos = _varint(h, pos)
                field, wire = tag >> 3, tag & 7
                if _MODEL_FIELDS.get(field) != wire:
                    return False
                if wire == 0:
                    _, pos = _varint(h, pos)
                else:
                    length, pos = _varint(h, pos)
                    pos += length
                fields += 1
        except ValueError:  # a varint cut by the end of what we were shown
            pass
        return fields >= 2 or (fields == 1 and pos >= len(h))
    except Exception:  # noqa: BLE001 - never raise for files that are not ours
        return False


# ----------------------------------------------------------------------------- loading
def load(path) -> Forest:
    """Import the ONNX tree ensemble at ``path``."""
    return loads(read_model_file(path, "ONNX model"), os.fspath(path))


def loads(data: bytes, path: str = "the model") -> Forest:
    """Import an ONNX tree ensemble from its serialized bytes; ``path`` is what errors call it."""
    try:
        from onnx import ModelProto
    except ImportError as exc:  # pragma: no cover - onnx is a dependency of this plugin
        raise ModelFormatError(f"{path}: reading ONNX models needs the 'onnx' package") from exc
    if not data:
        raise ModelFormatError(f"{path}: the ONNX file is empty")
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:
        raise ModelFormatError(
            f"{path}: not a valid ONNX model: the protobuf is truncated or corrupt ({exc})") from exc
    return from_proto(model, path)


def from_proto(model, path: str = "the model") -> Forest:
    """Import an ONNX tree ensemble from an ``onnx.ModelProto`` held in memory."""
    if not model.HasField("graph") or model.ir_version <= 0:
        raise ModelFormatError(f"{path}: not a valid ONNX model (no ir_version or no graph)")
    try:
        return _Importer(path, model).run()
    except SilvanForgeError:
        raise
    except Exception as exc:  # malformed attributes that slipped past the checks
        raise ModelFormatError(
            f"{path}: malformed ONNX tree ensemble ({type(exc).__name__}: {exc})") from exc


class _Importer(GraphPaths, EnsembleAttributes, ForestBuilding):
    """One import: the graph's paths (:mod:`.onnx_graph`), the ensemble's attributes
    (:mod:`.onnx_ensembles`) and the forest built from them (:mod:`.onnx_forest`)."""

    def __init__(self, path: str, model):
        self.path = path
        self.model = model
        self.graph = model.graph

    # ------------------------------------------------------------------ errors
    def fail(self, msg: str):
        raise ModelFormatError(f"{self.path}: {msg}")

    def unsupported(self, msg: str):
        raise UnsupportedModelError(f"{self.path}: {msg}")

    # ------------------------------------------------------------------ driver
    def run(self) -> Forest:
        node = self._ensemble_node()
        self.node = node
        self.op = node.op_type
        self.attrs = {a.name: a for a in node.attribute}
        self._check_attribute_names()
        in_type, narrowed, nfeat_graph = self._input_path(node)
        self._output_path(node)
        if in_type == _FLOAT16:
            self.unsupported(f"{self.op} on float16 inputs is not supported")
        self.double = in_type == _DOUBLE
        # Values are float32 although the kernel compares in double: compare in float32 with
        # thresholds rounded so every decision stays the same.
        self.f32_values = self.double and narrowed
        if self.op == "TreeEnsemble":
            spec = self._parse_v5()
        else:
            spec = self._parse_v3()
        return self._build(spec, nfeat_graph)

    def _check_attribute_names(self) -> None:
        """Refuse attributes the operator's schema (ONNX's own, for the model's ai.onnx.ml opset)
        does not define, as onnxruntime refuses such a graph: one this importer would not read
        could change what the model means."""
        try:
            from onnx.defs import SchemaError, get_schema
        except ImportError:  # (an onnx without its schemas: nothing to check against)
            return
        version = next((o.version for o in self.model.opset_import if o.domain == _ML), None)
        try:
            known = get_schema(self.op, version, _ML).attributes if version else None
        except SchemaError:
            known = None  # (an opset onnx does not know: the parse below decides)
        unknown = sorted(set(self.attrs) - set(known)) if known else []
        if unknown:
            self.fail(f"{self.op} (ai.onnx.ml opset {version}): unknown attribute{'s' * (len(unknown) > 1)} "
                      f"{', '.join(unknown)}, which onnxruntime refuses too")

    def _ensemble_node(self):
        found = [n for n in self.graph.node if n.op_type in _ENSEMBLE_OPS and n.domain == _ML]
        if not found:
            ops = sorted({n.op_type for n in self.graph.node})
            self.unsupported(
                "the ONNX model contains no tree ensemble (TreeEnsembleRegressor, "
                f"TreeEnsembleClassifier or TreeEnsemble); its operators: {', '.join(ops) or 'none'}")
        if len(found) > 1:
            self.unsupported(f"the ONNX model contains {len(found)} tree-ensemble nodes "
                             f"({', '.join(n.op_type for n in found)}); only one is supported")
        return found[0]


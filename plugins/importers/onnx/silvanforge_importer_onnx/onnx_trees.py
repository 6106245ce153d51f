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

import numpy as np
from silvanforge.errors import ModelFormatError, SilvanForgeError, UnsupportedModelError
from silvanforge.importing import read_model_file
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, Op, Transform, Tree

_ENSEMBLE_OPS = ("TreeEnsembleRegressor", "TreeEnsembleClassifier", "TreeEnsemble")
_ML = "ai.onnx.ml"

# onnxruntime's POST_EVAL_TRANSFORM order (also the codes of the "onnx" transforms).
_POST_NAMES = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
_PROBIT = 4
# TreeEnsemble (opset 5) aggregate_function codes.
_AGG_V5 = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
_AGG = {"SUM": Aggregation.SUM, "AVERAGE": Aggregation.AVERAGE, "MIN": Aggregation.MIN,
        "MAX": Aggregation.MAX}
_V3_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "LEAF")
_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)
_LEAF = -1

# TensorProto element types.
_FLOAT, _INT32, _INT64, _FLOAT16, _DOUBLE = 1, 6, 7, 10, 11
_TYPE_NAMES = {1: "float", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 8: "string",
               9: "bool", 10: "float16", 11: "double", 16: "bfloat16"}

# onnxruntime evaluates a membership set exactly when it has at most this many members, all
# in [0, _EXACT_MAX_MEMBER]; otherwise it truncates the feature to int32.
_EXACT_MAX_COUNT = 30
_EXACT_MAX_MEMBER = 30
# Outputs a model may have without a weight for each (each costs memory for every row).
_FREE_OUTPUTS = 4096
# Copying shared subtrees (or unrolling exact sets) must not explode.
_MAX_NODES = 5_000_000


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


class _Importer:
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

    # ------------------------------------------------------------------ graph paths
    def _producers(self):
        prod = {}
        for n in self.graph.node:
            for o in n.output:
                prod[o] = n
        return prod

    def _input_path(self, node):
        """Follow the ensemble's input back to a graph input through Identity / Cast."""
        prod = self._producers()
        inputs = {vi.name: vi for vi in self.graph.input}
        inits = {t.name for t in self.graph.initializer}
        if not node.input or not node.input[0]:
            self.fail(f"the {self.op} node has no input")
        name = node.input[0]
        casts = []
        seen = set()
        while name not in inputs or name in inits:
            if name in seen or name not in prod:
                if name in inits:
                    self.unsupported(f"the {self.op} node reads a constant, not the graph input")
                self.fail(f"the input {name!r} of the {self.op} node is not produced by anything")
            seen.add(name)
            p = prod[name]
            if p.op_type == "Identity" and p.domain in ("", "ai.onnx"):
                name = p.input[0]
            elif p.op_type == "Cast" and p.domain in ("", "ai.onnx"):
                to = _attr_int(p, "to", 0)
                if to not in (_FLOAT, _DOUBLE):
                    self.unsupported(f"a Cast to {_TYPE_NAMES.get(to, to)} feeds the {self.op} "
                                     "node; only casts to float or double are supported")
                casts.append(to)
                name = p.input[0]
            else:
                self.unsupported(f"operator {p.op_type} on the path from the graph input to the "
                                 f"{self.op} node is not supported")
        vi = inputs[name]
        tt = vi.type.tensor_type
        graph_type = tt.elem_type
        if graph_type not in (_FLOAT, _DOUBLE, _INT64, _INT32, _FLOAT16):
            self.unsupported(f"graph input {name!r} has element type "
                             f"{_TYPE_NAMES.get(graph_type, graph_type)}; expected float, double or int")
        types = [graph_type] + casts[::-1]  # in data-flow order
        in_type = types[-1]
        narrowed = any(t in (_FLOAT, _FLOAT16) for t in types[:-1])
        nfeat = None
        if tt.HasField("shape"):
            dims = tt.shape.dim
            if len(dims) == 2 and dims[1].HasField("dim_value") and dims[1].dim_value > 0:
                nfeat = int(dims[1].dim_value)
        return in_type, narrowed and in_type == _DOUBLE, nfeat

    def _output_path(self, node):
        """Check everything downstream of the scores; note a final Cast to float."""
        k = 1 if self.op == "TreeEnsembleClassifier" else 0
        if len(node.output) <= k or not node.output[k]:
            self.fail(f"the {self.op} node has no score output")
        scores = node.output[k]
        consumers = {}
        for n in self.graph.node:
            for i in n.input:
                consumers.setdefault(i, []).append(n)
        consts = self._constants()
        outputs = {o.name for o in self.graph.output}
        self.cast_to_float = False
        reaches_output = False
        frontier, seen = [scores], set()
        while frontier:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            reaches_output |= name in outputs
            for c in consumers.get(name, []):
                ok = False
                if c.op_type in ("Identity",) and c.domain in ("", "ai.onnx"):
                    ok = True
                elif c.op_type == "Cast" and c.domain in ("", "ai.onnx"):
                    to = _attr_int(c, "to", 0)
                    if to not in (_FLOAT, _DOUBLE):
                        self.unsupported(f"the {self.op} scores are cast to "
                                         f"{_TYPE_NAMES.get(to, to)}; only float or double is supported")
                    self.cast_to_float |= to == _FLOAT
                    ok = True
                elif c.op_type == "ZipMap" and c.domain == _ML:
                    ok = True
                elif c.op_type in ("Mul", "Div", "Add", "Sub") and c.domain in ("", "ai.onnx"):
                    neutral = 1.0 if c.op_type in ("Mul", "Div") else 0.0
                    others = [i for k, i in enumerate(c.input) if i != name
                              and (c.op_type in ("Mul", "Add") or k == 1)]
                    ok = (len(c.input) == 2 and len(others) == 1 and others[0] in consts
                          and consts[others[0]].size >= 1 and consts[others[0]].ndim <= 2
                          and bool(np.all(consts[others[0]] == neutral)))
                if not ok:
                    self.unsupported(f"operator {c.op_type} applied to the {self.op} scores is not "
                                     "supported (only Identity, Cast, ZipMap and multiplications "
                                     "by 1 may follow the ensemble)")
                frontier.extend(o for o in c.output if o)
        if not reaches_output:
            self.unsupported(f"the {self.op} scores are not an output of the graph")

    def _constants(self):
        from onnx import numpy_helper

        consts = {}
        def value(t):
            try:
                return np.asarray(numpy_helper.to_array(t))
            except Exception:  # noqa: BLE001 - an unreadable constant is just not neutral
                return None

        for t in self.graph.initializer:
            consts[t.name] = value(t)
        for n in self.graph.node:
            if n.op_type == "Constant" and n.output:
                for a in n.attribute:
                    if a.name == "value" and a.HasField("t"):
                        consts[n.output[0]] = value(a.t)
                    elif a.name in ("value_float", "value_int"):
                        consts[n.output[0]] = np.asarray(a.f if a.name == "value_float" else a.i)
        return {k: v for k, v in consts.items() if v is not None}

    # ------------------------------------------------------------------ attributes
    def ints(self, name):
        a = self.attrs.get(name)
        return [int(v) for v in a.ints] if a is not None else []

    def int_(self, name, default):
        a = self.attrs.get(name)
        return int(a.i) if a is not None else default

    def str_(self, name, default):
        a = self.attrs.get(name)
        return a.s.decode("utf-8", "replace") if a is not None else default

    def strs(self, name):
        a = self.attrs.get(name)
        return [s.decode("utf-8", "replace") for s in a.strings] if a is not None else []

    def floats_or_tensor(self, name, *, what="values"):
        """``name`` (FLOATS) or ``name_as_tensor`` (a double tensor in opset 3), as float64
        holding exactly the kernel's values; None when neither is present."""
        plain = self.attrs.get(name)
        tensor = self.attrs.get(name + "_as_tensor")
        if plain is not None and len(plain.floats) and tensor is not None:
            self.fail(f"{self.op}: both {name} and {name}_as_tensor are set")
        if tensor is not None:
            arr = self.tensor(name + "_as_tensor")
            if arr.dtype == np.float64 and not self.double:
                self.unsupported(f"{self.op}: {name}_as_tensor holds doubles but the ensemble's "
                                 "input is not double (onnxruntime rejects such a model)")
            return self._in_threshold_type(arr)
        if plain is not None:
            return np.asarray(plain.floats, dtype=np.float32).astype(np.float64)
        return None

    def tensor(self, name):
        from onnx import numpy_helper

        a = self.attrs[name]
        if not a.HasField("t"):
            self.fail(f"{self.op}: attribute {name} is not a tensor")
        if a.t.data_location == 1:  # EXTERNAL
            self.unsupported(f"{self.op}: attribute {name} keeps its data in an external file")
        try:
            arr = np.asarray(numpy_helper.to_array(a.t)).reshape(-1)
        except Exception as exc:  # noqa: BLE001 - reported as a format error
            self.fail(f"{self.op}: attribute {name} is not a readable tensor ({exc})")
        return arr

    def _in_threshold_type(self, arr):
        if arr.dtype == np.float16:
            self.unsupported(f"{self.op}: float16 tensors are not supported")
        if self.double:
            return arr.astype(np.float64)
        return arr.astype(np.float32).astype(np.float64)

    def check_len(self, n, **named):
        for name, seq in named.items():
            if len(seq) != n:
                self.fail(f"{self.op}: attribute {name} has {len(seq)} entries, expected {n}")

    # ------------------------------------------------------------------ V3
    def _parse_v3(self):
        op = self.op
        classifier = op == "TreeEnsembleClassifier"
        treeids = self.ints("nodes_treeids")
        n = len(treeids)
        nodeids = self.ints("nodes_nodeids")
        modes_s = self.strs("nodes_modes")
        feats = self.ints("nodes_featureids")
        trues = self.ints("nodes_truenodeids")
        falses = self.ints("nodes_falsenodeids")
        values = self.floats_or_tensor("nodes_values")
        if values is None:
            values = np.zeros(0)
        mvt = self.ints("nodes_missing_value_tracks_true")
        self.check_len(n, nodes_nodeids=nodeids, nodes_modes=modes_s, nodes_featureids=feats,
                       nodes_truenodeids=trues, nodes_falsenodeids=falses, nodes_values=values)
        if len(mvt) > n:
            self.fail(f"{op}: nodes_missing_value_tracks_true has {len(mvt)} entries for {n} nodes")
        mvt = mvt + [0] * (n - len(mvt))
        modes = []
        for s in modes_s:
            if s not in _V3_MODES:
                self.fail(f"{op}: unknown node mode {s!r}")
            modes.append(_LEAF if s == "LEAF" else _V3_MODES.index(s))
        prefix = "class" if classifier else "target"
        w_ids = self.ints(f"{prefix}_ids")
        w_nodes = self.ints(f"{prefix}_nodeids")
        w_trees = self.ints(f"{prefix}_treeids")
        w_vals = self.floats_or_tensor(f"{prefix}_weights")
        if w_vals is None:
            w_vals = np.zeros(0)
        self.check_len(len(w_ids), **{f"{prefix}_nodeids": w_nodes, f"{prefix}_treeids": w_trees,
                                      f"{prefix}_weights": w_vals})
        base = self.floats_or_tensor("base_values")
        base = [] if base is None else list(base)
        post_name = self.str_("post_transform", "NONE")
        if post_name not in _POST_NAMES:
            self.fail(f"{op}: unknown post_transform {post_name!r}")
        post = _POST_NAMES.index(post_name)
        if classifier:
            labels_i = self.ints("classlabels_int64s")
            labels_s = self.strs("classlabels_strings")
            labels = labels_s if labels_s else labels_i
            if not labels:
                self.fail(f"{op}: no class labels (classlabels_int64s / classlabels_strings)")
            n_out = len(labels)
            agg = "SUM"
        else:
            labels = None
            n_out = self.int_("n_targets", 0)
            if n_out <= 0:
                self.fail(f"{op}: n_targets must be positive, got {n_out}")
            self._check_output_count(n_out, len(w_vals) + len(base))
            agg = self.str_("aggregate_function", "SUM")
            if agg not in _AGG:
                self.fail(f"{op}: unknown aggregate_function {agg!r}")
        for t in w_ids:
            if not 0 <= t < n_out:
                self.fail(f"{op}: {prefix} id {t} is outside 0..{n_out - 1}")

        # Index the nodes by (tree id, node id) as onnxruntime does.
        index = {}
        for i in range(n):
            key = (treeids[i], nodeids[i])
            if key in index:
                self.fail(f"{op}: node {nodeids[i]} of tree {treeids[i]} is defined twice")
            index[key] = i
        children = []
        for i in range(n):
            if modes[i] == _LEAF:
                children.append(None)
                continue
            kids = []
            for cid, what in ((trues[i], "true"), (falses[i], "false")):
                j = index.get((treeids[i], cid))
                if j is None or not 0 <= cid < n:
                    self.fail(f"{op}: node {nodeids[i]} of tree {treeids[i]} has a {what} child "
                              f"{cid} that does not exist")
                if j == i:
                    self.fail(f"{op}: node {nodeids[i]} of tree {treeids[i]} is its own child")
                kids.append(j)
            children.append(tuple(kids))
        weights = [[] for _ in range(n)]
        for t, nd, tr, w in zip(w_ids, w_nodes, w_trees, w_vals):
            j = index.get((tr, nd))
            if j is None:
                self.fail(f"{op}: a weight refers to node {nd} of tree {tr}, which does not exist")
            if modes[j] == _LEAF:  # onnxruntime ignores weights on internal nodes
                weights[j].append((int(t), float(w)))
        roots = [i for i in range(n) if i == 0 or treeids[i] != treeids[i - 1]]
        self._check_acyclic(children, roots)
        nodes = [(modes[i], feats[i], float(values[i]), mvt[i] == 1) for i in range(n)]
        # Classifier weights count as positive the way onnxruntime checks them: every entry
        # (internal nodes' too), and only ``w < 0`` counts against it, so NaN is positive.
        return {"kind": "classifier" if classifier else "regressor", "nodes": nodes,
                    "children": children, "leaves": weights, "leaf_fallback": [float(v) for v in values],
                    "roots": roots, "n_out": n_out, "agg": agg, "post": post, "base": base, "labels": labels,
                    "class_ids": w_ids, "all_positive": not any(w < 0 for w in w_vals), "members": {},
                    "out_f32": True}

    def _check_output_count(self, n_out, held):
        """Outputs cost memory for every row: beyond ``_FREE_OUTPUTS`` the file must hold a
        value per output, so that a small file cannot claim millions of them."""
        if n_out > max(_FREE_OUTPUTS, held):
            self.unsupported(f"{self.op}: n_targets={n_out} with {held} weights: at most "
                             f"{max(_FREE_OUTPUTS, held)} outputs are supported here")

    def _check_acyclic(self, children, roots):
        state = {}
        for r in roots:
            if state.get(r) == 2:
                continue
            stack = [(r, 0)]
            while stack:
                i, k = stack.pop()
                if k == 0:
                    if state.get(i) == 1:
                        self.fail(f"{self.op}: the trees contain a cycle")
                    if state.get(i) == 2:
                        continue
                    state[i] = 1
                    stack.append((i, 1))
                    for c in children[i] or ():
                        if state.get(c) == 1:
                            self.fail(f"{self.op}: the trees contain a cycle")
                        if state.get(c) != 2:
                            stack.append((c, 0))
                else:
                    state[i] = 2

    # ------------------------------------------------------------------ V5
    def _parse_v5(self):
        op = self.op
        for name in ("nodes_modes", "nodes_splits", "leaf_weights"):
            if name not in self.attrs:
                self.fail(f"{op}: required attribute {name} is missing")
        modes_raw = self.tensor("nodes_modes")
        n = len(modes_raw)
        feats = self.ints("nodes_featureids")
        splits = self.tensor("nodes_splits")
        trues = self.ints("nodes_truenodeids")
        falses = self.ints("nodes_falsenodeids")
        tleaf = self.ints("nodes_trueleafs")
        fleaf = self.ints("nodes_falseleafs")
        mvt = self.ints("nodes_missing_value_tracks_true")
        self.check_len(n, nodes_featureids=feats, nodes_splits=splits, nodes_truenodeids=trues,
                       nodes_falsenodeids=falses, nodes_trueleafs=tleaf, nodes_falseleafs=fleaf)
        if mvt and len(mvt) != n:
            self.fail(f"{op}: nodes_missing_value_tracks_true has {len(mvt)} entries for {n} nodes")
        mvt = mvt or [0] * n
        want = np.float64 if self.double else np.float32
        for name, arr in (("nodes_splits", splits),):
            if arr.dtype != want:
                self.unsupported(f"{op}: {name} has type {arr.dtype}, the input is "
                                 f"{np.dtype(want).name}; onnxruntime needs them equal")
        splits = self._in_threshold_type(splits)
        leaf_t = self.ints("leaf_targetids")
        leaf_w = self.tensor("leaf_weights")
        if leaf_w.dtype != want:
            self.unsupported(f"{op}: leaf_weights has type {leaf_w.dtype}, the input is "
                             f"{np.dtype(want).name}; onnxruntime needs them equal")
        leaf_w = self._in_threshold_type(leaf_w)
        self.check_len(len(leaf_w), leaf_targetids=leaf_t)
        n_out = self.int_("n_targets", 0)
        if n_out <= 0:
            self.fail(f"{op}: n_targets must be positive, got {n_out}")
        self._check_output_count(n_out, len(leaf_w))
        for t in leaf_t:
            if not 0 <= t < n_out:
                self.fail(f"{op}: leaf target id {t} is outside 0..{n_out - 1}")
        agg_code = self.int_("aggregate_function", 1)
        if agg_code not in _AGG_V5:
            self.fail(f"{op}: unknown aggregate_function {agg_code}")
        post = self.int_("post_transform", 0)
        if not 0 <= post < len(_POST_NAMES):
            self.fail(f"{op}: unknown post_transform {post}")
        modes = []
        for m in modes_raw.tolist():
            if not 0 <= int(m) <= 6:
                self.fail(f"{op}: unknown node mode {m}")
            modes.append(int(m))
        members = {}
        if _MEMBER in modes:
            if "membership_values" not in self.attrs:
                self.fail(f"{op}: BRANCH_MEMBER nodes but no membership_values")
            mv = self.tensor("membership_values")
            if mv.dtype != want:
                self.unsupported(f"{op}: membership_values has type {mv.dtype}, the input is "
                                 f"{np.dtype(want).name}; onnxruntime needs them equal")
            mv = mv.astype(np.float64)
            pos = 0
            for i, m in enumerate(modes):
                if m != _MEMBER:
                    continue
                vals = []
                while pos < len(mv) and not np.isnan(mv[pos]):
                    vals.append(float(mv[pos]))
                    pos += 1
                pos += 1
                if not vals:
                    self.fail(f"{op}: BRANCH_MEMBER node {i} has no member values")
                members[i] = vals
        roots_attr = self.ints("tree_roots")
        if not roots_attr:
            self.fail(f"{op}: tree_roots is empty")
        # Nodes are indexes 0..n-1, leaves n..n+L-1 in the common representation below.
        n_leaves = len(leaf_w)
        children = []
        for i in range(n):
            kids = []
            for cid, is_leaf, what in ((trues[i], tleaf[i], "true"), (falses[i], fleaf[i], "false")):
                if is_leaf:
                    if not 0 <= cid < n_leaves:
                        self.fail(f"{op}: node {i} has {what} leaf {cid}, outside 0..{n_leaves - 1}")
                    kids.append(n + cid)
                else:
                    if not 0 <= cid < n:
                        self.fail(f"{op}: node {i} has {what} node {cid}, outside 0..{n - 1}")
                    if cid == i:
                        self.fail(f"{op}: node {i} is its own child")
                    kids.append(cid)
            children.append(tuple(kids))
        for r in roots_attr:
            if not 0 <= r < n:
                self.fail(f"{op}: tree root {r} is outside 0..{n - 1}")
        nodes = [(modes[i], feats[i], float(splits[i]), mvt[i] == 1) for i in range(n)]
        nodes += [(_LEAF, 0, 0.0, False)] * n_leaves
        children += [None] * n_leaves
        leaves = [[] for _ in range(n)] + [[(int(t), float(w))] for t, w in zip(leaf_t, leaf_w)]
        self._check_acyclic(children, roots_attr)
        return {"kind": "regressor", "nodes": nodes, "children": children, "leaves": leaves,
                    "leaf_fallback": [0.0] * len(nodes), "roots": roots_attr, "n_out": n_out,
                    "agg": _AGG_V5[agg_code], "post": post, "base": [], "labels": None, "class_ids": leaf_t,
                    "all_positive": True, "members": members, "out_f32": not self.double}

    # ------------------------------------------------------------------ building
    def _build(self, spec, nfeat_graph) -> Forest:
        members = spec["members"]
        # Membership sets: exact ones (x == m) and truncating ones (int32(x) in set).
        exact_sets, trunc_sets = {}, {}
        for i, vals in members.items():
            for v in vals:
                if v != np.floor(v) or not -2.0**31 <= v < 2.0**31:
                    self.unsupported(f"{self.op}: BRANCH_MEMBER value {v!r} is not a 32-bit integer "
                                     "(onnxruntime only implements integer members)")
            if len(vals) <= _EXACT_MAX_COUNT and all(0 <= v <= _EXACT_MAX_MEMBER for v in vals):
                exact_sets[i] = sorted({int(v) for v in vals})
            else:
                if min(vals) < 0:
                    self.unsupported(
                        f"{self.op}: BRANCH_MEMBER with negative member values "
                        f"({min(vals):g}): onnxruntime truncates the feature to int32, and the "
                        "HIR has no negative categories")
                trunc_sets[i] = sorted({int(v) for v in vals})
        if trunc_sets:
            rule = CategoryRule.LIGHTGBM
            cat_sets, eq_chains = trunc_sets, exact_sets
        else:
            rule = CategoryRule.EXACT
            cat_sets, eq_chains = exact_sets, {}

        builders = []
        total = 0
        for r in spec["roots"]:
            b = _TreeBuilder()
            self._expand(spec, r, b, cat_sets, eq_chains)
            total += len(b.left)
            if total > _MAX_NODES:
                self.unsupported(f"{self.op}: copying shared subtrees would make more than "
                                 f"{_MAX_NODES} nodes")
            builders.append(b)

        # onnxruntime refuses a row with no more columns than the largest feature a reachable
        # decision node names (one whose two children are the same included): that is the
        # narrowest input it runs, and with a fixed feature dimension the only one.
        max_feat = self._max_feature(spec)
        if max_feat > 2**31 - 2:  # onnxruntime narrows feature ids to int, wrapping larger ones
            self.fail(f"{self.op}: nodes_featureids holds {max_feat}, not a 32-bit feature index")
        if nfeat_graph is not None:
            if max_feat >= nfeat_graph:
                self.fail(f"{self.op}: a node names feature {max_feat} but the graph input has "
                          f"{nfeat_graph} features")
            num_features = nfeat_graph
        else:
            num_features = max_feat + 1
        num_features = max(num_features, 1)

        kind, n_out = spec["kind"], spec["n_out"]
        acc = "float64" if self.double else "float32"
        thr = "float32" if (not self.double or self.f32_values) else "float64"
        post = spec["post"]
        common = {"num_features": num_features, "wider_rows": nfeat_graph is None,
                  "threshold_dtype": thr, "accumulate_dtype": acc,
                      "category_rule": rule, "source": "onnx",
                      "objective": f"{self.op}:{_POST_NAMES[post]}", "output_shape": "matrix",
                      "class_labels": list(spec["labels"]) if spec["labels"] is not None else None}
        out_f32 = spec["out_f32"] or self.cast_to_float
        n_trees = len(builders)
        if kind == "classifier":
            if n_out == 1:
                self.unsupported(f"{self.op} with a single class label is not supported")
            if n_out == 2:
                return self._binary(spec, builders, common, out_f32)
            return self._multi(spec, builders, common, out_f32, "SUM", n_trees, classifier=True)
        if n_out == 1:
            return self._single(spec, builders, common, out_f32, n_trees)
        return self._multi(spec, builders, common, out_f32, spec["agg"], n_trees, classifier=False)

    @staticmethod
    def _max_feature(spec) -> int:
        """The largest feature of a decision node reachable from a root (0 if none)."""
        nodes, children = spec["nodes"], spec["children"]
        best, seen, stack = 0, set(), list(spec["roots"])
        while stack:
            i = stack.pop()
            if i in seen or children[i] is None:
                continue
            seen.add(i)
            best = max(best, int(nodes[i][1]))
            stack.extend(children[i])
        return best

    def _expand(self, spec, root, b, cat_sets, eq_chains):
        """Copy the tree under ``root`` into ``b`` in canonical HIR form."""
        nodes, children, leaves, fallback = (spec["nodes"], spec["children"], spec["leaves"],
                                             spec["leaf_fallback"])
        f32 = self.f32_values
        stack = [(root, None, 0)]  # (source node, parent HIR node, 0 = left / 1 = right)
        while stack:
            src, parent, side = stack.pop()
            # A node whose two children are the same needs no decision.
            while children[src] is not None and children[src][0] == children[src][1]:
                src = children[src][0]
            mode, feat, value, mvt = nodes[src]
            if children[src] is None:
                me = b.leaf(leaves[src], fallback[src])
            else:
                t, f = children[src]
                if mode == _MEMBER and src in eq_chains:
                    me = self._eq_chain(b, feat, eq_chains[src], mvt, t, f, stack)
                    b.attach(parent, side, me)
                    if len(b.left) > _MAX_NODES:
                        self.unsupported(f"{self.op}: expanding membership sets would make more "
                                         f"than {_MAX_NODES} nodes")
                    continue
                if mode == _MEMBER:
                    me = b.node(feat, 0.0, Op.EQ, mvt, cats=cat_sets[src])
                    left, right = t, f
                else:
                    op, swap = {_LEQ: (Op.LE, False), _LT: (Op.LT, False), _GTE: (Op.LT, True),
                                _GT: (Op.LE, True), _EQ: (Op.EQ, False), _NEQ: (Op.EQ, True)}[mode]
                    nan_true = mvt or mode == _NEQ
                    thr = _f32_threshold(op, value) if f32 else value
                    me = b.node(feat, thr, op, (not nan_true) if swap else nan_true)
                    left, right = (f, t) if swap else (t, f)
                stack.append((right, me, 1))
                stack.append((left, me, 0))
            b.attach(parent, side, me)
            if len(b.left) > _MAX_NODES:
                self.unsupported(f"{self.op}: copying shared subtrees would make more than "
                                 f"{_MAX_NODES} nodes")

    def _eq_chain(self, b, feat, values, mvt, t, f, stack):
        """x in {m1..mk} exactly, as ``x == m1 ? T : (x == m2 ? T : ... F)``."""
        first = prev = None
        for k, m in enumerate(values):
            me = b.node(feat, float(m), Op.EQ, mvt)
            if prev is None:
                first = me
            else:
                b.attach(prev, 1, me)
            stack.append((t, me, 0))
            prev = me
        stack.append((f, prev, 1))
        return first

    # ------------------------------------------------------------------ outputs
    def _single(self, spec, builders, common, out_f32, n_trees) -> Forest:
        """One target: each leaf holds its first weight (or its own nodes_values entry)."""
        trees = []
        for b in builders:
            vals = [(ws[0][1] if ws else fb) if ws is not None else 0.0
                    for ws, fb in zip(b.payload, b.fallback)]
            trees.append(b.tree(np.asarray(vals, dtype=np.float64).reshape(-1, 1), (0,)))
        base = spec["base"]
        if len(base) not in (0, 1):
            self.fail(f"{self.op}: base_values has {len(base)} entries for 1 target")
        origin = float(base[0]) if base else 0.0
        agg, divisor = self._aggregation(spec["agg"], n_trees, origin != 0.0)
        post = spec["post"] if spec["post"] == _PROBIT else 0
        return Forest(trees=trees, num_outputs=1, base_score=np.array([origin]),
                      aggregation=agg, average_divisor=divisor,
                      transform=Transform("onnx", (("k", 1.0), ("post", float(post)),
                                                   ("f32", float(out_f32)))),
                      **common)

    def _aggregation(self, name, n_trees, has_base):
        if name == "AVERAGE":
            return Aggregation.AVERAGE, float(max(n_trees, 1))
        if name == "SUM" and has_base:
            # onnxruntime adds the base value after the trees: AVERAGE with divisor 1.
            return Aggregation.AVERAGE, 1.0
        return _AGG[name], 1.0

    def _reach(self, builders, n_out):
        """Per output: 'always' (some tree has a weight for it in every leaf), 'never', or
        'sometimes' (depends on the row)."""
        state = ["never"] * n_out
        for b in builders:
            leaf_sets = [{t for t, _ in ws} for ws in b.payload if ws is not None]
            union = set().union(*leaf_sets) if leaf_sets else set()
            inter = set.intersection(*leaf_sets) if leaf_sets else set()
            for k in union:
                if k in inter:
                    state[k] = "always"
                elif state[k] == "never":
                    state[k] = "sometimes"
        return state

    def _leaf_table(self, b, outs, agg, indicators):
        """leaf_value rows for the outputs ``outs`` (targets) then indicator columns."""
        n = len(b.left)
        table = np.zeros((n, len(outs) + len(indicators)), dtype=np.float64)
        empty = np.inf if agg == "MIN" else (-np.inf if agg == "MAX" else 0.0)
        col = {k: j for j, k in enumerate(outs)}
        for i, ws in enumerate(b.payload):
            if ws is None:
                continue
            got = {}
            for t, w in ws:
                if t not in got:
                    got[t] = w
                elif agg == "MIN":
                    got[t] = min(got[t], w)
                elif agg == "MAX":
                    got[t] = max(got[t], w)
                else:
                    got[t] = got[t] + w
            for k in outs:
                table[i, col[k]] = got.get(k, empty)
            for j, k in enumerate(indicators):
                table[i, len(outs) + j] = (-1.0 if agg == "MIN" else 1.0) if k in got else 0.0
        return table

    def _trees_for(self, builders, n_out, agg, indicators):
        trees = []
        ind_col = {k: n_out + j for j, k in enumerate(indicators)}
        for b in builders:
            touched = sorted({t for ws in b.payload if ws is not None for t, _ in ws})
            if not touched:
                continue  # contributes to nothing (still counted by AVERAGE's divisor)
            inds = [k for k in indicators if k in touched]
            table = self._leaf_table(b, touched, agg, inds)
            trees.append(b.tree(table, tuple(touched) + tuple(ind_col[k] for k in inds)))
        return trees

    def _multi(self, spec, builders, common, out_f32, agg_name, n_trees, classifier) -> Forest:
        n_out = spec["n_out"]
        base = [float(v) for v in spec["base"]]
        if classifier:
            if len(base) > n_out:
                self.fail(f"{self.op}: base_values has {len(base)} entries for {n_out} classes")
            base = base + [0.0] * (n_out - len(base))
            reach = ["always"] * n_out  # classifiers with 3+ classes write every score
        else:
            if len(base) not in (0, n_out):
                self.fail(f"{self.op}: base_values has {len(base)} entries for {n_out} targets")
            base = base or [0.0] * n_out
            reach = self._reach(builders, n_out)
        indicators = []
        for k in range(n_out):
            if reach[k] == "never":
                base[k] = 0.0  # onnxruntime writes 0 for an output no leaf has a weight for
            elif reach[k] == "sometimes" and (base[k] != 0.0 or agg_name in ("MIN", "MAX")):
                indicators.append(k)
        trees = self._trees_for(builders, n_out, agg_name, indicators)
        agg, divisor = self._aggregation(agg_name, n_trees, any(v != 0.0 for v in base))
        params = [("k", float(n_out)), ("post", float(spec["post"])), ("f32", float(out_f32))]
        params += [(f"mask{k}", float(n_out + j)) for j, k in enumerate(indicators)]
        return Forest(trees=trees, num_outputs=n_out + len(indicators),
                      base_score=np.array(base + [0.0] * len(indicators)),
                      aggregation=agg, average_divisor=divisor,
                      transform=Transform("onnx", tuple(params)), **common)

    def _binary(self, spec, builders, common, out_f32) -> Forest:
        base = [float(v) for v in spec["base"]]
        if len(base) > 2:
            self.fail(f"{self.op}: base_values has {len(base)} entries for 2 classes")
        post = spec["post"]
        reach = self._reach(builders, 2)
        binary_case = len(set(spec["class_ids"])) == 1
        indicators = [k for k in (0, 1) if reach[k] == "sometimes"]
        params = [("nb", float(len(base))), ("post", float(post)), ("f32", float(out_f32))]
        params += [(f"b{k}", v) for k, v in enumerate(base)]
        for k in (0, 1):
            if k in indicators:
                params.append((f"h{k}col", float(2 + indicators.index(k))))
            else:
                params.append((f"h{k}", 1.0 if reach[k] == "always" else 0.0))
        if len(base) < 2 and reach[1] != "always":
            # Some rows keep a single score, which onnxruntime writes as two.
            if binary_case:
                wa = 0 if spec["all_positive"] else 2
            elif not base:
                wa = 3
            else:
                self.unsupported(
                    f"{self.op}: two classes, one base value and rows that reach no class-1 "
                    "weight: onnxruntime writes only the first score then (the second is "
                    "uninitialised memory)")
            if post == _PROBIT:
                self.unsupported(
                    f"{self.op}: PROBIT on a binary classifier whose rows can have a single "
                    "score: onnxruntime writes only the first score then (the second is "
                    "uninitialised memory)")
            params.append(("wa", float(wa)))
        trees = self._trees_for(builders, 2, "SUM", indicators)
        return Forest(trees=trees, num_outputs=2 + len(indicators),
                      base_score=np.zeros(2 + len(indicators)), aggregation=Aggregation.SUM,
                      transform=Transform("onnx_binary", tuple(params)), **common)


class _TreeBuilder:
    """HIR node arrays under construction; leaves keep their (target, weight) entries."""

    def __init__(self):
        self.left, self.right, self.feature, self.threshold = [], [], [], []
        self.op, self.default_left = [], []
        self.payload, self.fallback = [], []
        self.cats = {}

    def node(self, feat, thr, op, default_left, cats=None):
        i = len(self.left)
        self.left.append(-1)
        self.right.append(-1)
        self.feature.append(int(feat))
        self.threshold.append(float(thr))
        self.op.append(int(op))
        self.default_left.append(bool(default_left))
        self.payload.append(None)
        self.fallback.append(0.0)
        if cats is not None:
            self.cats[i] = cats
        return i

    def leaf(self, weights, fallback):
        i = self.node(-1, 0.0, Op.LT, False)
        self.payload[i] = list(weights)
        self.fallback[i] = float(fallback)
        return i

    def attach(self, parent, side, child):
        if parent is None:
            return
        if side == 0:
            self.left[parent] = child
        else:
            self.right[parent] = child

    def tree(self, leaf_value, outputs) -> Tree:
        return Tree(
            left=np.asarray(self.left, dtype=np.int32),
            right=np.asarray(self.right, dtype=np.int32),
            feature=np.asarray(self.feature, dtype=np.int32),
            threshold=np.asarray(self.threshold, dtype=np.float64),
            op=np.asarray(self.op, dtype=np.uint8),
            default_left=np.asarray(self.default_left, dtype=np.bool_),
            zero_missing=np.zeros(len(self.left), dtype=np.bool_),
            leaf_value=np.asarray(leaf_value, dtype=np.float64),
            outputs=tuple(int(o) for o in outputs),
            categories={k: np.asarray(v, dtype=np.int64) for k, v in self.cats.items()},
        )


def _f32_threshold(op: Op, t: float) -> float:
    """A float32 threshold giving, for float32 ``x``, the decision ``x OP t`` made in double."""
    f = np.float32(t)
    with np.errstate(over="ignore"):
        if op == Op.LE:  # largest float32 <= t
            if float(f) > t:
                f = np.nextafter(f, np.float32(-np.inf))
        elif op == Op.LT:  # smallest float32 >= t
            if float(f) < t:
                f = np.nextafter(f, np.float32(np.inf))
        elif float(f) != t:  # EQ: a double no float32 equals
            return float("nan")
    return float(f)


def _attr_int(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default

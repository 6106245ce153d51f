"""Reading the graph around the tree-ensemble node: the path from the graph input, the path to
the outputs, constants, and the node's attributes (a part of :class:`.onnx_trees._Importer`)."""

from __future__ import annotations

import numpy as np

from .onnx_spec import _DOUBLE, _FLOAT, _FLOAT16, _INT32, _INT64, _ML, _TYPE_NAMES


class GraphPaths:
    """The graph-reading methods of :class:`.onnx_trees._Importer`."""

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


def _attr_int(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default

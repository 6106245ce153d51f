"""Fuzzing the importers: seeded mutants of small models of every format, each either refused
with a :class:`SilvanForgeError` or predicted exactly as the library predicts it.

Small models are trained here (XGBoost JSON and UBJSON, LightGBM text, linear trees among them,
ONNX from scikit-learn, XGBoost and a hand-built ``TreeEnsemble``, CatBoost JSON with float,
one-hot and CTR splits), then mutated with seeded mutators: bit flips, byte
edits, deletions, insertions and truncations of the file, and edits that keep it parseable so
they reach the importers' semantics: JSON / UBJSON values replaced (numbers by huge, negative,
NaN or string values, arrays shortened, keys dropped), LightGBM lines edited token by token,
ONNX attributes, input types and shapes changed.  For every mutant:

* ``silvanforge.load_model``, then ``compile`` and ``predict`` on a few rows (NaN, infinities,
  zeros, category ids) either raise a ``SilvanForgeError`` subclass, or succeed with the
  compiled predictions (and margins) equal to the reference evaluator's;
* where the mutant loaded, the library (xgboost / lightgbm / onnxruntime) loads it too, and
  runs it on the same rows, its predictions must equal ours: same shape, values to float32
  rounding, NaN where it has NaN.  The library accepting garbage is no excuse: a mutant whose
  numbers differ is an importer bug, fixed by following the library or by refusing the file.
  The library refusing, or crashing on, a mutant we accept is counted, not failed.

Libraries crash on some mutants (XGBoost and LightGBM read child indices and category ids
unchecked), and a crash or hang of ours must be reported, not take pytest down: each format's
mutants run in a worker process (this file run as a script), restarted after the mutant that
killed it; a mutant that crashes or hangs *before* our verdict is a failure.

The default run tries ``DEFAULT_MUTANTS`` per format.  ``SILVANFORGE_FUZZ=N`` also runs the
``slow`` test: N more per format with other seeds (``SILVANFORGE_FUZZ_SEED`` picks them).

Over 600 lines because this file is also the worker's program: the worker process runs it as a
script (:func:`_spawn`), and the mutators, the base models and the verdict must all be in what
that process loads, beside the campaign that drives it.
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import subprocess
import sys
import time
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

FORMATS = ("xgboost-json", "xgboost-ubjson", "lightgbm-text", "onnx", "catboost-json")
SUFFIX = {"xgboost-json": ".json", "xgboost-ubjson": ".ubj", "lightgbm-text": ".txt", "onnx": ".onnx",
          "catboost-json": ".json"}
DEFAULT_MUTANTS = 64  # the suite's share: about 35 s on 2 cores; SILVANFORGE_FUZZ runs more
DEFAULT_SEED = 18
# A mutant gets this long (seconds) before its worker is killed and the mutant called a hang.
MUTANT_TIMEOUT = 60.0
# Widths beyond this are loaded and compiled but not predicted (a row would be huge).
MAX_PREDICT_FEATURES = 4096
RTOL, ATOL = 1e-5, 1e-6


# =============================================================================================
# mutators (pure functions of the input and a numpy Generator)
# =============================================================================================

WEIRD_INTS = [0, 1, 2, 3, -1, -2, 7, 255, 256, 2**24 - 1, 2**24, 2**24 + 1, 2**31 - 1, 2**31,
              2**32 + 1, -(2**31), -(2**31) - 1, 2**63 - 1, 10**9, 10**20]
WEIRD_FLOATS = [0.0, -0.0, 0.5, -0.5, 1.0, 2.0, 1e-45, 1e-300, 3.4e38, 3.5e38, 1e300, -1e300,
                16777217.0, math.nan, math.inf, -math.inf]
WEIRD_STRINGS = ["", "abc", "0", "1", "2", "-1", "1e5", "NaN", "nan", "inf", "[1,2]", "[", "5E-1",
                 "[5E-1]", "[1,2,3]", "[-1E1,2E0]", "2147483648", "-0", "\u00e9", "\u0000",
                 "binary:logistic", "multi:softprob", "multi:softmax", "reg:squarederror",
                 "reg:logistic", "count:poisson", "survival:aft", "survival:cox", "rank:ndcg",
                 "binary:hinge", "reg:gamma", "reg:tweedie", "binary:logitraw",
                 "reg:absoluteerror", "gblinear", "dart", "gbtree", "c", "q", "int", "float"]


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def mutate_bytes(data: bytes, rng) -> tuple[bytes, str]:
    """A format-blind edit of the file's bytes."""
    b = bytearray(data)
    n = len(b)
    op = _pick(rng, ("flip", "set", "delete", "insert", "truncate", "duplicate", "swap"))
    if op == "flip":
        k = int(rng.integers(1, 5))
        where = rng.integers(0, n, k)
        for p in where:
            b[int(p)] ^= 1 << int(rng.integers(8))
        return bytes(b), f"flip bits at {where.tolist()}"
    if op == "set":
        k = int(rng.integers(1, 5))
        where = rng.integers(0, n, k)
        for p in where:
            b[int(p)] = int(_pick(rng, (0, 0xFF, 0x7F, 0x80, 0x01, ord('"'), ord("-"), ord("9"),
                                        ord("["), ord("]"), ord("{"), ord(","), ord("e"),
                                        int(rng.integers(256)))))
        return bytes(b), f"set bytes at {where.tolist()}"
    if op == "delete":
        p, k = int(rng.integers(n)), int(rng.integers(1, 17))
        return bytes(b[:p] + b[p + k:]), f"delete {k} bytes at {p}"
    if op == "insert":
        p, k = int(rng.integers(n + 1)), int(rng.integers(1, 17))
        chunk = bytes(rng.integers(0, 256, k).astype(np.uint8)) if rng.random() < 0.5 else \
            bytes(b[int(rng.integers(n)):][:k])
        return bytes(b[:p]) + chunk + bytes(b[p:]), f"insert {len(chunk)} bytes at {p}"
    if op == "truncate":
        p = int(rng.integers(n))
        return bytes(b[:p]), f"truncate at {p}"
    if op == "duplicate":
        p, k = int(rng.integers(n)), int(rng.integers(1, 65))
        return bytes(b[:p + k]) + bytes(b[p:]), f"duplicate {k} bytes at {p}"
    p, q = sorted(int(v) for v in rng.integers(0, n, 2))
    k = int(rng.integers(1, 17))
    b[p:p + k], b[q:q + k] = b[q:q + k], b[p:p + k]
    return bytes(b), f"swap {k} bytes at {p} and {q}"


# ----------------------------------------------------------------------------- JSON documents
# Keys whose values decide predictions: most edits go to them (the rest hit statistics).
_XGB_KEYS = {"split_indices", "split_conditions", "default_left", "left_children", "right_children",
             "split_type", "categories", "categories_nodes", "categories_segments",
             "categories_sizes", "base_weights", "leaf_weights", "tree_info", "num_class",
             "num_feature", "num_target", "base_score", "name", "num_nodes", "size_leaf_vector",
             "num_trees", "weight_drop", "feature_names", "feature_types", "objective",
             "num_parallel_tree", "iteration_indptr", "learner_model_param", "gradient_booster",
             "tree_param", "trees", "model", "scale_pos_weight", "tweedie_variance_power",
             "max_delta_step", "sigmoid", "num_pairsample", "aft_loss_param"}


# The same for CatBoost's JSON export: borders, splits, leaves, CTR tables and their priors.
_CATBOOST_KEYS = {"features_info", "float_features", "categorical_features", "borders", "border",
                  "flat_feature_index", "feature_index", "float_feature_index", "cat_feature_index",
                  "nan_value_treatment", "values", "value", "ctrs", "ctr_type", "elements",
                  "combination_element", "identifier", "prior_numerator", "prior_denomerator",
                  "shift", "scale", "target_border_idx", "ctr_data", "hash_map", "hash_stride",
                  "counter_denominator", "oblivious_trees", "trees", "splits", "split", "left",
                  "right", "split_index", "split_type", "leaf_values", "scale_and_bias",
                  "model_info", "params", "class_params"}


def _paths(doc) -> list[tuple]:
    out = []

    def walk(v, path):
        out.append(path)
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, path + (k,))
        elif isinstance(v, (list, np.ndarray)):
            if isinstance(v, np.ndarray):
                return  # typed arrays are edited as a whole (UBJSON)
            for i, x in enumerate(v):
                walk(x, path + (i,))

    walk(doc, ())
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _set(doc, path, value):
    if not path:
        return value
    _get(doc, path[:-1])[path[-1]] = value
    return doc


def _weird_scalar(rng, old):
    kind = rng.random()
    if isinstance(old, bool) or kind < 0.08:
        return _pick(rng, [True, False, None, [], {}, 0, 1])
    if isinstance(old, int) and kind < 0.6:
        return _pick(rng, WEIRD_INTS + [old + 1, old - 1, 2 * old, -old, float(old), str(old)])
    if isinstance(old, float) and kind < 0.6:
        return _pick(rng, WEIRD_FLOATS + [old * 2, -old, old + 1e-3, str(old), int(old) if math.isfinite(old) else 0])
    if isinstance(old, str) and kind < 0.7:
        try:
            num = float(old.strip("[]").split(",")[0])
        except ValueError:
            num = None
        if num is not None and rng.random() < 0.5:
            return str(_pick(rng, WEIRD_INTS + WEIRD_FLOATS + [num + 1, -num, num * 2]))
        return _pick(rng, WEIRD_STRINGS)
    return _pick(rng, WEIRD_INTS + WEIRD_FLOATS + WEIRD_STRINGS)


def _edit_list(rng, lst: list) -> tuple[list, str]:
    lst = list(lst)
    op = _pick(rng, ("pop", "remove", "dup", "empty", "shuffle", "append", "replace", "replace",
                     "replace", "half", "retype"))
    if op == "pop" and lst:
        lst.pop()
    elif op == "remove" and lst:
        del lst[int(rng.integers(len(lst)))]
    elif op == "dup" and lst:
        i = int(rng.integers(len(lst)))
        lst.insert(i, lst[i])
    elif op == "empty":
        lst = []
    elif op == "shuffle":
        lst = [lst[int(i)] for i in rng.permutation(len(lst))]
    elif op == "append":
        lst.append(_weird_scalar(rng, lst[-1] if lst else 0))
    elif op == "half":
        lst = lst[: len(lst) // 2]
    elif op == "retype" and lst:
        lst = [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in lst]
    elif lst:
        i = int(rng.integers(len(lst)))
        if isinstance(lst[i], (dict, list)):
            lst[i] = _weird_scalar(rng, 0)
        else:
            lst[i] = _weird_scalar(rng, lst[i])
        return lst, f"{op}[{i}]={lst[i]!r}"[:80]
    return lst, op


def mutate_document(doc, rng, keys=_XGB_KEYS) -> tuple[object, str]:
    """One edit of a parsed XGBoost (or CatBoost: ``keys``) document (dicts, lists, scalars;
    numpy arrays for UBJSON)."""
    paths = _paths(doc)
    hot = [p for p in paths if any(isinstance(k, str) and k in keys for k in p)]
    path = _pick(rng, hot if hot and rng.random() < 0.8 else paths)
    old = _get(doc, path)
    where = "/".join(map(str, path))
    if isinstance(old, np.ndarray):
        new, how = _edit_typed(rng, old)
    elif isinstance(old, list):
        new, how = _edit_list(rng, old)
    elif isinstance(old, dict):
        op = _pick(rng, ("delete", "junk", "replace"))
        if op == "delete" and old and path:
            key = _pick(rng, list(old))
            new = {k: v for k, v in old.items() if k != key}
            how = f"delete {key!r}"
        elif op == "junk":
            new = {**old, _pick(rng, ["x", "num_class", "name", "base_score"]): _weird_scalar(rng, 1)}
            how = "add a key"
        else:
            new = _weird_scalar(rng, 0) if path else old
            how = f"replace with {new!r}"[:60]
    else:
        new = _weird_scalar(rng, old)
        how = f"{old!r} -> {new!r}"[:80]
    return _set(doc, path, new), f"{where}: {how}"


# ----------------------------------------------------------------------------- UBJSON
_MARKER = {np.dtype("int8"): b"i", np.dtype("uint8"): b"U", np.dtype("int16"): b"I",
           np.dtype("int32"): b"l", np.dtype("int64"): b"L", np.dtype("float32"): b"d",
           np.dtype("float64"): b"D"}


def _edit_typed(rng, arr: np.ndarray) -> tuple[object, str]:
    arr = arr.copy()
    op = _pick(rng, ("set", "set", "set", "pop", "empty", "half", "list", "retype"))
    if op == "set" and arr.size:
        i = int(rng.integers(arr.size))
        if arr.dtype.kind == "f":
            v = _pick(rng, WEIRD_FLOATS + [float(arr[i]) * 2, -float(arr[i])])
        else:
            info = np.iinfo(arr.dtype)
            v = _pick(rng, [v for v in WEIRD_INTS + [int(arr[i]) + 1, int(arr[i]) - 1]
                            if info.min <= v <= info.max])
        with np.errstate(over="ignore", invalid="ignore"):
            arr[i] = v
        return arr, f"set [{i}]={v!r}"
    if op == "pop":
        return arr[:-1], "pop"
    if op == "empty":
        return arr[:0], "empty"
    if op == "half":
        return arr[: arr.size // 2], "half"
    if op == "list":
        return arr.tolist(), "untyped"
    wider = {"u": np.int64, "i": np.int64, "f": np.float64}[arr.dtype.kind]
    narrower = {"u": np.int8, "i": np.int32, "f": np.float32}[arr.dtype.kind]
    to = np.dtype(_pick(rng, (wider, narrower)))
    with np.errstate(over="ignore", invalid="ignore"):
        return arr.astype(to), f"retype {arr.dtype} -> {to}"


def ubjson_encode(value) -> bytes:
    """UBJSON the way XGBoost writes it: ``L`` lengths, counted arrays, typed numeric arrays."""
    out = bytearray()

    def length(n):
        out.extend(b"L" + struct.pack(">q", n))

    def enc(v):
        if isinstance(v, dict):
            out.extend(b"{")
            for k, x in v.items():
                kb = str(k).encode("utf-8", "surrogatepass")
                length(len(kb))
                out.extend(kb)
                enc(x)
            out.extend(b"}")
        elif isinstance(v, np.ndarray):
            out.extend(b"[$" + _MARKER[v.dtype] + b"#")
            length(v.size)
            out.extend(v.astype(v.dtype.newbyteorder(">")).tobytes())
        elif isinstance(v, list):
            out.extend(b"[#")
            length(len(v))
            for x in v:
                enc(x)
        elif isinstance(v, bool):
            out.extend(b"T" if v else b"F")
        elif v is None:
            out.extend(b"Z")
        elif isinstance(v, int):
            for m, fmt, lo, hi in ((b"i", ">b", -128, 127), (b"I", ">h", -(2**15), 2**15 - 1),
                                   (b"l", ">i", -(2**31), 2**31 - 1), (b"L", ">q", -(2**63), 2**63 - 1)):
                if lo <= v <= hi:
                    out.extend(m + struct.pack(fmt, v))
                    break
            else:
                text = str(v).encode()
                out.extend(b"H")
                length(len(text))
                out.extend(text)
        elif isinstance(v, float):
            if math.isnan(v) or float(np.float32(v)) == v:
                out.extend(b"d" + struct.pack(">f", v))
            else:
                out.extend(b"D" + struct.pack(">d", v))
        else:
            sb = str(v).encode("utf-8", "surrogatepass")
            out.extend(b"S")
            length(len(sb))
            out.extend(sb)

    enc(value)
    return bytes(out)


# ----------------------------------------------------------------------------- LightGBM text
_LGB_TOKENS = ["-1", "0", "1", "2", "3", "-2", "7", "15", "16", "2147483647", "2147483648",
               "-2147483649", "4294967295", "4294967296", "9223372036854775808", "1e308", "1e400",
               "-1e400", "1e-320", "nan", "NaN", "inf", "-inf", "abc", "0x10", "1.5", "-0", "0.0",
               "1e-35", "-1e-35", "1.0000000180025095e-35"]
_LGB_OBJECTIVES = ["binary sigmoid:1", "binary sigmoid:-1", "binary sigmoid:0.5", "binary",
                   "multiclass num_class:3", "multiclass num_class:2", "multiclassova num_class:3 sigmoid:1",
                   "regression", "regression sqrt", "regression_l1", "huber", "poisson", "gamma",
                   "tweedie", "cross_entropy", "cross_entropy_lambda", "lambdarank", "custom",
                   "quantile", "mape", "fair", "rank_xendcg", "unknown_objective", "xentropy",
                   "softmax num_class:3", "ova num_class:3 sigmoid:2", ""]


def mutate_lightgbm(text: str, rng) -> tuple[str, str]:
    lines = text.split("\n")
    keyed = [i for i, ln in enumerate(lines) if "=" in ln]
    op = _pick(rng, ("token", "token", "token", "token", "value", "objective", "drop", "dup",
                     "swap", "flag", "header"))
    if op in ("token", "value") and keyed:
        i = _pick(rng, keyed)
        key, _, value = lines[i].partition("=")
        tokens = value.split(" ")
        if op == "value":
            new = _pick(rng, _LGB_TOKENS + ["", "1 2", value + " " + value])
            lines[i] = f"{key}={new}"
            return "\n".join(lines), f"line {i + 1} {key}={new[:30]}"
        j = int(rng.integers(len(tokens)))
        sub = rng.random()
        if sub < 0.15:
            del tokens[j]
            how = f"drop token {j}"
        elif sub < 0.25:
            tokens.insert(j, tokens[j])
            how = f"duplicate token {j}"
        else:
            try:
                num = float(tokens[j])
            except ValueError:
                num = None
            cands = _LGB_TOKENS
            if num is not None and math.isfinite(num):
                cands = cands + [repr(num + 1), repr(-num), repr(num * 2), str(int(num) + 1),
                                 str(int(num) - 1), str(~int(num))]
            tokens[j] = _pick(rng, cands)
            how = f"token {j} -> {tokens[j]}"
        lines[i] = key + "=" + " ".join(tokens)
        return "\n".join(lines), f"line {i + 1} {key}: {how}"
    if op == "objective":
        i = next((i for i, ln in enumerate(lines) if ln.startswith("objective=")), None)
        new = _pick(rng, _LGB_OBJECTIVES)
        if i is None:
            lines.insert(2, f"objective={new}")
        else:
            lines[i] = f"objective={new}"
        return "\n".join(lines), f"objective={new}"
    if op == "drop":
        i = int(rng.integers(len(lines)))
        return "\n".join(lines[:i] + lines[i + 1:]), f"drop line {i + 1} ({lines[i][:20]!r})"
    if op == "dup":
        i = int(rng.integers(len(lines)))
        return "\n".join(lines[:i + 1] + lines[i:]), f"duplicate line {i + 1}"
    if op == "swap":
        i, j = (int(v) for v in rng.integers(0, len(lines), 2))
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines), f"swap lines {i + 1} and {j + 1}"
    if op == "flag":
        i = int(rng.integers(len(lines)))
        flag = _pick(rng, ("average_output", "is_linear=1", "num_cat=1", "Tree=1", "end of trees",
                           "tree", "version=v2", "num_class=3", "num_tree_per_iteration=3",
                           "max_feature_idx=0", "max_feature_idx=40", "feature_names=a b",
                           "pandas_categorical:[[1,2]]", "[categorical_feature: 0]", ""))
        lines.insert(i, flag)
        return "\n".join(lines), f"insert {flag!r} at line {i + 1}"
    key = _pick(rng, ("num_class", "num_tree_per_iteration", "max_feature_idx", "version",
                      "tree_sizes", "feature_infos", "label_index"))
    i = next((i for i, ln in enumerate(lines) if ln.startswith(key + "=")), None)
    new = _pick(rng, _LGB_TOKENS)
    if i is None:
        lines.insert(1, f"{key}={new}")
    else:
        lines[i] = f"{key}={new}"
    return "\n".join(lines), f"header {key}={new}"


# ----------------------------------------------------------------------------- ONNX
_ONNX_STRINGS = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
                 "LEAF", "BRANCH_XX", "", "NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT",
                 "SUM", "AVERAGE", "MIN", "MAX", "MEDIAN", "a", "b"]


def mutate_onnx(data: bytes, rng) -> tuple[bytes, str]:
    """An edit of the tree-ensemble node's attributes or the graph around it."""
    import onnx
    from onnx import numpy_helper as nh

    model = onnx.ModelProto()
    model.ParseFromString(data)
    graph = model.graph
    node = next(n for n in graph.node if n.domain == "ai.onnx.ml" and n.op_type.startswith("TreeEnsemble"))
    op = _pick(rng, ("attr", "attr", "attr", "attr", "attr", "drop_attr", "input_type",
                     "input_shape", "opset", "cast"))
    if op == "drop_attr":
        k = int(rng.integers(len(node.attribute)))
        name = node.attribute[k].name
        del node.attribute[k]
        return model.SerializeToString(), f"drop attribute {name}"
    if op == "input_type":
        t = _pick(rng, (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT64,
                        onnx.TensorProto.INT32, onnx.TensorProto.FLOAT16, onnx.TensorProto.STRING))
        graph.input[0].type.tensor_type.elem_type = t
        return model.SerializeToString(), f"input elem_type {t}"
    if op == "input_shape":
        dims = graph.input[0].type.tensor_type.shape.dim
        if len(dims) < 2:
            return mutate_bytes(data, rng)
        choice = _pick(rng, ("dynamic", "wider", "narrower", "param", "rank1"))
        if choice == "dynamic":
            dims[1].Clear()
        elif choice == "wider":
            dims[1].dim_value = (dims[1].dim_value or 1) + int(rng.integers(1, 4))
        elif choice == "narrower":
            dims[1].dim_value = max((dims[1].dim_value or 1) - int(rng.integers(1, 4)), 1)
        elif choice == "param":
            dims[1].dim_param = "F"
        else:
            del dims[1]
        return model.SerializeToString(), f"input shape {choice}"
    if op == "opset":
        imp = model.opset_import[int(rng.integers(len(model.opset_import)))]
        imp.version = int(_pick(rng, (1, 2, 3, 4, 5, 6, 13, 30)))
        return model.SerializeToString(), f"opset {imp.domain or 'ai.onnx'} -> {imp.version}"
    if op == "cast":
        to = _pick(rng, (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT64))
        src = node.input[0]
        graph.node.insert(0, onnx.helper.make_node("Cast", [src], [src + "_fz"], to=to))
        node.input[0] = src + "_fz"
        return model.SerializeToString(), f"cast input to {to}"
    a = node.attribute[int(rng.integers(len(node.attribute)))]
    if a.type == onnx.AttributeProto.INTS and len(a.ints):
        vals = list(a.ints)
        sub = rng.random()
        if sub < 0.15:
            vals.pop(int(rng.integers(len(vals))))
            how = "drop one"
        elif sub < 0.25:
            vals.append(vals[int(rng.integers(len(vals)))])
            how = "append one"
        else:
            i = int(rng.integers(len(vals)))
            vals[i] = int(_pick(rng, [v for v in WEIRD_INTS if -(2**63) <= v < 2**63]
                                + [vals[i] + 1, vals[i] - 1, len(vals), len(vals) - 1]))
            how = f"[{i}]={vals[i]}"
        del a.ints[:]
        a.ints.extend(vals)
    elif a.type == onnx.AttributeProto.FLOATS and len(a.floats):
        vals = list(a.floats)
        sub = rng.random()
        if sub < 0.15:
            vals.pop(int(rng.integers(len(vals))))
            how = "drop one"
        else:
            i = int(rng.integers(len(vals)))
            vals[i] = float(_pick(rng, WEIRD_FLOATS + [vals[i] * 2, -vals[i], vals[i] + 0.5]))
            how = f"[{i}]={vals[i]}"
        del a.floats[:]
        a.floats.extend(vals)
    elif a.type == onnx.AttributeProto.STRINGS and len(a.strings):
        vals = list(a.strings)
        i = int(rng.integers(len(vals)))
        vals[i] = _pick(rng, _ONNX_STRINGS).encode()
        if rng.random() < 0.15:
            vals.pop()
        del a.strings[:]
        a.strings.extend(vals)
        how = f"[{i}]={vals[i] if i < len(vals) else None!r}"
    elif a.type == onnx.AttributeProto.STRING:
        a.s = _pick(rng, _ONNX_STRINGS).encode()
        how = f"= {a.s!r}"
    elif a.type == onnx.AttributeProto.INT:
        a.i = int(_pick(rng, [-1, 0, 1, 2, 3, 4, 5, 6, 7, 100, 2**31]))
        how = f"= {a.i}"
    elif a.type == onnx.AttributeProto.TENSOR:
        arr = nh.to_array(a.t).copy()
        if arr.size and rng.random() < 0.8:
            i = int(rng.integers(arr.size))
            flat = arr.reshape(-1)
            if arr.dtype.kind == "f":
                flat[i] = _pick(rng, WEIRD_FLOATS + [float(flat[i]) + 1, 2.0**31 - 1, 40.0])
            else:
                info = np.iinfo(arr.dtype)
                flat[i] = _pick(rng, [v for v in WEIRD_INTS if info.min <= v <= info.max])
            how = f"[{i}]={flat[i]!r}"
        else:
            arr = arr.reshape(-1)[:-1] if arr.size else arr
            how = "drop one"
        a.t.CopyFrom(nh.from_array(arr, a.t.name))
    else:
        return mutate_bytes(data, rng)
    return model.SerializeToString(), f"{a.name} {how}"


def make_mutant(fmt: str, data: bytes, rng) -> tuple[bytes, str]:
    """One mutant of ``data``: a byte edit (a third of the time) or a format-aware edit."""
    if rng.random() < 1 / 3:
        return mutate_bytes(data, rng)
    if fmt == "xgboost-json":
        doc, how = mutate_document(json.loads(data), rng)
        return json.dumps(doc).encode("utf-8", "surrogatepass"), how
    if fmt == "xgboost-ubjson":
        from silvanforge_importer_xgboost import ubjson

        doc, how = mutate_document(ubjson.decode(data), rng)
        return ubjson_encode(doc), how
    if fmt == "lightgbm-text":
        text, how = mutate_lightgbm(data.decode(), rng)
        return text.encode("utf-8", "surrogatepass"), how
    if fmt == "catboost-json":
        doc, how = mutate_document(json.loads(data), rng, _CATBOOST_KEYS)
        return json.dumps(doc).encode("utf-8", "surrogatepass"), how
    return mutate_onnx(data, rng)


# =============================================================================================
# the worker: one format's mutants, one verdict line each (``python test_fuzz_models.py``)
# =============================================================================================


def rows_for(X: np.ndarray, width: int) -> np.ndarray:
    """The base model's rows cut or widened to ``width`` features (extra columns repeat a mix
    of NaN, zeros, category ids and large values)."""
    n = X.shape[0]
    if width <= X.shape[1]:
        return np.ascontiguousarray(X[:, :width])
    filler = np.array([np.nan, 0.0, 1.0, 3.0, -2.5, 1e9, np.inf, 0.5], np.float32)
    extra = filler[(np.arange(n)[:, None] + np.arange(width - X.shape[1])[None, :]) % len(filler)]
    return np.ascontiguousarray(np.concatenate([X, extra], axis=1))


def _same(a, b) -> str | None:
    """None when ``a`` equals ``b`` (shape, values to float32 rounding, NaN where NaN)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return f"shape {a.shape} != {b.shape}"
    with np.errstate(invalid="ignore", over="ignore"):
        ok = (a == b) | (np.isnan(a) & np.isnan(b)) | (np.abs(a - b) <= ATOL + RTOL * np.abs(b))
    if ok.all():
        return None
    i = np.flatnonzero(~ok.reshape(-1))[0]
    return f"{ok.size - int(ok.sum())} of {ok.size} differ; first {a.reshape(-1)[i]!r} != {b.reshape(-1)[i]!r}"


class _Ours:
    """silvanforge on one mutant: load, compile (cached by fingerprint), predict."""

    def __init__(self):
        self.compiled = {}

    def run(self, fmt, path, X):
        import silvanforge as sf
        from silvanforge.errors import SilvanForgeError
        from silvanforge.runtime import reference

        try:
            forest = sf.load_model(path, fmt=fmt)
        except SilvanForgeError as exc:
            return {"status": "refused", "stage": "load", "error": f"{type(exc).__name__}: {exc}"[:300]}, None
        try:
            key = forest.fingerprint()
            cf = self.compiled.get(key)
            if cf is None:
                cf = sf.compile(forest, threads=1)
                if len(self.compiled) > 64:
                    self.compiled.clear()
                self.compiled[key] = cf
        except SilvanForgeError as exc:
            return {"status": "refused", "stage": "compile", "error": f"{type(exc).__name__}: {exc}"[:300]}, None
        if forest.num_features > MAX_PREDICT_FEATURES:
            return {"status": "accepted", "wide": forest.num_features}, None
        rows = rows_for(X, forest.num_features)
        if fmt == "onnx":
            rows = _onnx_rows(path, rows)
        try:
            got = {"predict": cf.predict(rows)}
            if fmt != "onnx":
                got["margin"] = cf.predict(rows, output_margin=True)
        except SilvanForgeError as exc:
            return {"status": "refused", "stage": "predict", "error": f"{type(exc).__name__}: {exc}"[:300]}, None
        want = {"predict": reference.predict(forest, rows)}
        if "margin" in got:
            want["margin"] = reference.predict(forest, rows, output_margin=True)
        for what in got:
            diff = _same(got[what], want[what])
            if diff:
                return {"status": "failure", "kind": "compiled != reference", "error": f"{what}: {diff}"}, None
        return {"status": "accepted"}, (rows, got)


def _onnx_rows(path, rows):
    """Rows as onnxruntime will see them: integer inputs get integers (what it casts to)."""
    import onnx

    try:
        model = onnx.load(str(path))
        t = model.graph.input[0].type.tensor_type.elem_type
    except Exception:  # noqa: BLE001 - our importer refused or will; any rows do
        return rows
    if t in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
        return np.nan_to_num(rows, nan=0.0, posinf=7.0, neginf=-7.0).round().clip(-1e6, 1e6)
    return rows


def library_predict(fmt, path, rows):
    """The library's predictions (and margins) of the mutant, as ``cf.predict`` returns them."""
    if fmt.startswith("xgboost"):
        import xgboost as xgb

        booster = xgb.Booster(model_file=str(path))
        booster.set_param({"nthread": 1})
        return {"predict": booster.inplace_predict(rows),
                "margin": booster.inplace_predict(rows, predict_type="margin")}
    if fmt == "lightgbm-text":
        import lightgbm as lgb

        booster = lgb.Booster(model_file=str(path))
        return {"predict": booster.predict(rows, num_threads=1),
                "margin": booster.predict(rows, raw_score=True, num_threads=1)}
    if fmt == "catboost-json":
        return _catboost_predict(path, rows)
    import support_onnx

    return {"predict": support_onnx.ort_predict(path, rows)}


def _catboost_predict(path, rows):
    """CatBoost's own predictions of a JSON model: its categorical columns given as the integers
    the rows hold (CatBoost refuses NaN there; that mutant then counts as the library refusing)."""
    import catboost as cb

    model = cb.CatBoost()
    model.load_model(str(path), format="json")
    cats = model.get_cat_feature_indices()
    X = rows.astype(object)
    for c in cats:
        X[:, c] = [int(v) for v in rows[:, c]]
    loss = model.get_all_params().get("loss_function", "RMSE").split(":")[0]
    kind = {"Logloss": "Probability", "CrossEntropy": "Probability", "MultiClass": "Probability",
            "MultiClassOneVsAll": "Probability", "Poisson": "Exponent", "Tweedie": "Exponent"}.get(loss, "RawFormulaVal")
    pool = cb.Pool(X, cat_features=cats)
    got = model.predict(pool, prediction_type=kind, thread_count=1)
    if kind == "Probability" and loss in ("Logloss", "CrossEntropy") and got.ndim == 2:
        got = got[:, 1]
    return {"predict": got, "margin": model.predict(pool, prediction_type="RawFormulaVal", thread_count=1)}


def worker(fmt: str, workdir: Path, seed: int, start: int, stop: int, out) -> None:
    warnings.simplefilter("ignore")
    bases = json.loads((workdir / "bases.json").read_text())[fmt]
    datas = [(workdir / b["path"]).read_bytes() for b in bases]
    rows = [np.load(workdir / b["rows"]) for b in bases]
    ours = _Ours()
    mutants = workdir / "mutants"
    mutants.mkdir(exist_ok=True)
    for i in range(start, stop):
        rng = np.random.default_rng([seed, FORMATS.index(fmt), i])
        k = int(rng.integers(len(datas)))
        data, how = make_mutant(fmt, datas[k], rng)
        path = mutants / f"{fmt}-{i}{SUFFIX[fmt]}"
        path.write_bytes(data)
        out.write(json.dumps({"i": i, "event": "begin", "base": bases[k]["name"], "how": how}) + "\n")
        try:
            verdict, predicted = ours.run(fmt, path, rows[k])
        except Exception as exc:  # noqa: BLE001 - the failure this suite looks for
            import traceback

            tb = traceback.extract_tb(exc.__traceback__)[-1]
            verdict, predicted = {"status": "failure", "kind": "raw exception",
                                  "error": f"{type(exc).__name__}: {exc} ({Path(tb.filename).name}:{tb.lineno})"[:400]}, None
        out.write(json.dumps({"i": i, "event": "ours", **verdict}) + "\n")
        if predicted is not None:
            X, got = predicted
            try:
                want = library_predict(fmt, path, X)
            except Exception as exc:  # noqa: BLE001 - the library refusing is allowed
                lib = {"library": "refused", "error": f"{type(exc).__name__}: {exc}"[:200]}
            else:
                diffs = [f"{w}: {d}" for w in got if (d := _same(got[w], want[w]))]
                lib = {"library": "mismatch", "error": "; ".join(diffs)} if diffs else {"library": "equal"}
            out.write(json.dumps({"i": i, "event": "library", **lib}) + "\n")
        if verdict["status"] != "failure" and not (predicted and lib["library"] == "mismatch"):
            path.unlink()


# =============================================================================================
# the driver (pytest side): base models, workers, verdicts
# =============================================================================================


def _xgboost_bases(d: Path) -> list[dict]:
    import xgboost as xgb

    rng = np.random.default_rng(1)
    out = []
    X = rng.normal(size=(200, 4)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) > 0).astype(float)
    y3 = np.digitize(np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 2]), [-0.5, 0.5])
    C = np.column_stack([rng.integers(0, 12, 200), rng.normal(size=200)]).astype(np.float32)
    yc = np.isin(C[:, 0], [1, 4, 6, 9]) * 2.0 + C[:, 1]
    specs = [
        ("binary", {"objective": "binary:logistic", "max_depth": 3}, xgb.DMatrix(X, label=y), 3, X),
        ("softprob", {"objective": "multi:softprob", "num_class": 3, "max_depth": 2},
         xgb.DMatrix(X, label=y3), 2, X),
        ("categorical", {"tree_method": "hist", "max_cat_to_onehot": 1, "max_depth": 2},
         xgb.DMatrix(C, label=yc, feature_types=["c", "q"], enable_categorical=True), 3, C),
        ("dart", {"booster": "dart", "rate_drop": 0.5, "max_depth": 2}, xgb.DMatrix(X, label=y), 3, X),
        ("multi_output", {"tree_method": "hist", "multi_strategy": "multi_output_tree", "max_depth": 2},
         xgb.DMatrix(X, label=np.column_stack([y, y3])), 2, X),
    ]
    for name, params, dm, rounds, Xb in specs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            booster = xgb.train({"nthread": 1, "seed": 3, **params}, dm, rounds)
        rows = np.concatenate([Xb[:6], np.array([[np.nan] * Xb.shape[1], [0.0] * Xb.shape[1],
                                                 [-1e9] * Xb.shape[1], [3.0] * Xb.shape[1],
                                                 [2.0**24] * Xb.shape[1], [-0.5] * Xb.shape[1]],
                                                np.float32)])
        for fmt, raw in (("xgboost-json", "json"), ("xgboost-ubjson", "ubj")):
            path = d / f"{name}.{raw}"
            path.write_bytes(bytes(booster.save_raw(raw)))
            np.save(d / f"{name}.rows.npy", rows)
            out.append({"fmt": fmt, "name": name, "path": path.name, "rows": f"{name}.rows.npy"})
    return out


def _lightgbm_bases(d: Path) -> list[dict]:
    import lightgbm as lgb

    rng = np.random.default_rng(2)
    n = 300
    X = np.column_stack([rng.integers(0, 40, n), rng.normal(size=n), rng.normal(size=n)])
    X[rng.random(n) < 0.1, 1] = np.nan
    X[rng.random(n) < 0.1, 2] = 0.0
    effect = rng.normal(size=40)
    y = effect[X[:, 0].astype(int)] + np.nan_to_num(X[:, 1])
    specs = [
        ("binary_cat", {"objective": "binary", "max_cat_to_onehot": 2, "min_data_per_group": 5,
                        "cat_smooth": 1}, (y > np.median(y)).astype(float), [0]),
        ("multiclass", {"objective": "multiclass", "num_class": 3},
         np.digitize(y, np.quantile(y, [0.33, 0.66])), "auto"),
        ("regression_zero", {"objective": "regression", "zero_as_missing": True}, y, "auto"),
        ("random_forest", {"objective": "regression", "boosting": "rf", "bagging_freq": 1,
                           "bagging_fraction": 0.7}, y, "auto"),
        # Leaves with linear models: leaf_const, num_features, leaf_features, leaf_coeff lines.
        ("linear_tree", {"objective": "regression", "linear_tree": True, "linear_lambda": 0.1}, y, [0]),
    ]
    out = []
    rows = np.concatenate([X[:6], [[np.nan] * 3, [0.0, -0.0, 1e-36], [39, 1e300, -1e300],
                                   [-1, np.inf, -np.inf], [2.0**31, 0.5, -0.5], [7.5, 1.0, 2.0]]])
    for name, params, label, cat in specs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = lgb.Dataset(X, label, categorical_feature=cat, params={"verbose": -1})
            booster = lgb.train({"num_leaves": 6, "verbose": -1, "num_threads": 1, "seed": 7,
                                 "deterministic": True, "min_data_in_leaf": 5, **params}, ds, 3)
        path = d / f"{name}.txt"
        booster.save_model(str(path))
        np.save(d / f"{name}.rows.npy", rows)
        out.append({"fmt": "lightgbm-text", "name": name, "path": path.name, "rows": f"{name}.rows.npy"})
    return out


def _onnx_bases(d: Path) -> list[dict]:
    import support_onnx

    out = []
    for name in ("skl_gb_bin", "skl_dt_multi_strlabels", "skl_rf_reg", "skl_hgb_bin_nan",
                 "xgb_multi", "v5_member_trunc"):
        case = support_onnx.build_case(name, d)
        X = np.asarray(case.X)[:12]
        np.save(d / f"{name}.rows.npy", X)
        out.append({"fmt": "onnx", "name": name, "path": Path(case.path).name, "rows": f"{name}.rows.npy"})
    return out


def _catboost_bases(d: Path) -> list[dict]:
    import catboost as cb

    rng = np.random.default_rng(4)
    n = 300
    X = np.column_stack([rng.normal(size=n), rng.normal(size=n), rng.integers(0, 3, n), rng.integers(0, 12, n)])
    X[rng.random(n) < 0.1, 0] = np.nan
    y = np.nan_to_num(X[:, 0]) + (X[:, 2] == 1) + np.isin(X[:, 3], [1, 4, 7]) + 0.1 * X[:, 1]
    fit = dict(verbose=0, thread_count=1, random_seed=3, allow_writing_files=False)
    floats = X[:, :2]
    specs = [
        ("logloss", cb.CatBoostClassifier(iterations=3, depth=3, **fit), floats, (y > 1).astype(int), None),
        ("multiclass_depthwise", cb.CatBoostClassifier(iterations=3, depth=3, grow_policy="Depthwise",
                                                       loss_function="MultiClass", **fit),
         floats, np.digitize(y, [0.5, 1.5]), None),
        ("regression_categorical", cb.CatBoostRegressor(iterations=4, depth=3, one_hot_max_size=3,
                                                        max_ctr_complexity=1, **fit),
         X.astype(object), y, [2, 3]),
        ("combinations", cb.CatBoostClassifier(iterations=6, depth=4, one_hot_max_size=3,
                                               max_ctr_complexity=2, **fit),
         X.astype(object), (y > 1).astype(int), [2, 3]),
    ]
    out = []
    for name, model, Xb, label, cats in specs:
        if cats:
            Xb = Xb.copy()
            for c in cats:
                Xb[:, c] = Xb[:, c].astype(int)
        model.fit(cb.Pool(Xb, label, cat_features=cats))
        path = d / f"catboost_{name}.json"
        model.save_model(str(path), format="json")
        width = Xb.shape[1]
        base = np.asarray(X[:6, :width], dtype=np.float64)
        extra = np.array([[np.nan, 0.0, 1.0, 11.0], [np.inf, -np.inf, 2.0, 3.0],
                          [-1e30, 1e30, 0.0, 99.0], [0.5, -0.5, 1.0, 4.0]])[:, :width]
        np.save(d / f"catboost_{name}.rows.npy", np.concatenate([base, extra]))
        out.append({"fmt": "catboost-json", "name": name, "path": path.name, "rows": f"catboost_{name}.rows.npy"})
    return out


def build_bases(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    bases = _xgboost_bases(d) + _lightgbm_bases(d) + _onnx_bases(d) + _catboost_bases(d)
    (d / "bases.json").write_text(json.dumps({f: [b for b in bases if b["fmt"] == f] for f in FORMATS}))


def _spawn(fmt, workdir, seed, start, stop):
    from support_common import TESTS  # the worker imports helper modules (support_onnx.py) from there

    r, w = os.pipe()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    with open(workdir / f"{fmt}.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, __file__, fmt, str(workdir), str(seed), str(start),
                                 str(stop), str(w)], pass_fds=(w,), stdout=log, stderr=log, env=env)
    os.close(w)
    return proc, r


def run_campaign(fmt: str, workdir: Path, seed: int, count: int) -> dict:
    """All ``count`` mutants of one format, restarting the worker after a crash or a hang."""
    events: dict[int, dict] = {}
    start = 0
    while start < count:
        proc, fd = _spawn(fmt, workdir, seed, start, count)
        current, hang, buf = None, False, b""
        try:
            while True:
                if not select.select([fd], [], [], MUTANT_TIMEOUT)[0]:
                    proc.kill()  # silent for too long: the current mutant hangs
                    hang = True
                    break
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    record = json.loads(line)
                    current = record["i"]
                    events.setdefault(current, {})[record["event"]] = record
        finally:
            os.close(fd)
        rc = proc.wait()
        if current is None:
            log = (workdir / f"{fmt}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the {fmt} fuzz worker stopped before its first mutant (exit {rc}):\n{log}")
        if hang:
            events[current]["hang"] = True
        elif rc != 0:
            events[current]["crash"] = rc
        start = current + 1
    return summarize(fmt, events, count)


def summarize(fmt: str, events: dict[int, dict], count: int) -> dict:
    counts: Counter = Counter()
    failures, examples = [], {}
    for i in range(count):
        ev = events.get(i, {})
        begin = ev.get("begin", {"how": "?", "base": "?"})
        ours, lib = ev.get("ours"), ev.get("library")
        where = f"{fmt} mutant {i} of {begin['base']} ({begin['how']})"
        if ours is None:
            what = "hang" if ev.get("hang") else f"crash (exit {ev.get('crash')})"
            failures.append(f"{where}: silvanforge {what}")
            counts["failure"] += 1
        elif ours["status"] == "failure":
            failures.append(f"{where}: {ours['kind']}: {ours['error']}")
            counts["failure"] += 1
        elif ours["status"] == "refused":
            counts[f"refused at {ours['stage']}"] += 1
        elif ours.get("wide"):
            counts["accepted, too wide to predict"] += 1
        elif lib is None:
            counts["accepted, library crashed or hung"] += 1
            examples.setdefault("library crashed or hung", []).append(where)
        elif lib["library"] == "equal":
            counts["accepted, equal to the library"] += 1
        elif lib["library"] == "refused":
            counts["accepted, library refused (equal to the reference)"] += 1
        else:
            failures.append(f"{where}: differs from the library: {lib['error']}")
            counts["failure"] += 1
    return {"format": fmt, "tried": count, "counts": dict(counts), "failures": failures,
            "examples": examples}


def run_all(workdir: Path, seed: int, count: int) -> dict[str, dict]:
    with ThreadPoolExecutor(len(FORMATS)) as pool:
        futures = {fmt: pool.submit(run_campaign, fmt, workdir, seed, count) for fmt in FORMATS}
        return {fmt: f.result() for fmt, f in futures.items()}


def report(summary: dict) -> str:
    lines = [f"{summary['format']}: {summary['tried']} mutants: "
             + ", ".join(f"{v} {k}" for k, v in sorted(summary["counts"].items()))]
    lines += ["  " + f for f in summary["failures"][:30]]
    return "\n".join(lines)


if __name__ == "__main__":  # the worker: FORMAT WORKDIR SEED START STOP FD
    _fmt, _dir, _seed, _start, _stop, _fd = sys.argv[1:7]
    with os.fdopen(int(_fd), "w", buffering=1) as _out:
        worker(_fmt, Path(_dir), int(_seed), int(_start), int(_stop), _out)
    sys.exit(0)


# =============================================================================================
# the tests
# =============================================================================================

import pytest  # noqa: E402  (the worker above runs without pytest)

pytest.importorskip("xgboost")
pytest.importorskip("lightgbm")
pytest.importorskip("onnxruntime")
pytest.importorskip("skl2onnx")
pytest.importorskip("catboost")


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    build_bases(d)
    return d


@pytest.fixture(scope="module")
def default_run(fuzz_dir):
    start = time.perf_counter()
    results = run_all(fuzz_dir, DEFAULT_SEED, DEFAULT_MUTANTS)
    print(f"\nfuzz: {DEFAULT_MUTANTS} mutants per format in {time.perf_counter() - start:.1f} s")
    for s in results.values():
        print(report(s))
    return results


def test_ubjson_encoder_writes_what_xgboost_writes(fuzz_dir):
    """The UBJSON mutants are documents edited and encoded again: unedited, the encoding gives
    back XGBoost's own file byte for byte, so every difference is the edit's."""
    from silvanforge_importer_xgboost import ubjson

    bases = json.loads((fuzz_dir / "bases.json").read_text())
    for b in bases["xgboost-ubjson"]:
        raw = (fuzz_dir / b["path"]).read_bytes()
        again = ubjson_encode(ubjson.decode(raw))
        assert again == raw, b["name"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_mutants_are_refused_or_predicted_like_the_library(default_run, fmt):
    summary = default_run[fmt]
    assert not summary["failures"], report(summary)
    # The mutators reach past the parsers: some mutants load and are checked against the library.
    assert summary["counts"].get("accepted, equal to the library", 0) > DEFAULT_MUTANTS // 10, report(summary)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SILVANFORGE_FUZZ"),
                    reason="set SILVANFORGE_FUZZ=N to try N more mutants per format")
def test_many_mutants(fuzz_dir):
    count = int(os.environ["SILVANFORGE_FUZZ"])
    seed = int(os.environ.get("SILVANFORGE_FUZZ_SEED", DEFAULT_SEED + 1))
    start = time.perf_counter()
    results = run_all(fuzz_dir, seed, count)
    print(f"\nfuzz: {count} mutants per format (seed {seed}) in {time.perf_counter() - start:.1f} s")
    text = "\n".join(report(s) for s in results.values())
    print(text)
    assert not any(s["failures"] for s in results.values()), text

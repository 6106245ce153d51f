"""XGBoost models saved as JSON (``save_model("m.json")``) or UBJSON (``"m.ubj"``), XGBoost 1.0 .. 3.x.

Both files hold the same document (UBJSON is its binary spelling), which is canonicalised
into the HIR as follows:

* **Trees** are ``learner.gradient_booster.model.trees`` (``gbtree``) or
  ``learner.gradient_booster.gbtree.model.trees`` (``dart``, whose ``weight_drop[i]`` scales
  every leaf of tree ``i``).  ``tree_info[i]`` is the output (class / target / quantile) tree
  ``i`` adds to; ``num_parallel_tree`` random forests are just more trees in the sum.
  Multi-output trees (``multi_strategy="multi_output_tree"``) become vector-leaf trees that add
  to every output.  ``gblinear`` has no trees and is refused.
* **Splits**: a numerical split sends ``x < split_condition`` left; a missing value follows
  ``default_left``.  XGBoost compares and accumulates in float32, so thresholds and leaf values
  are rounded to float32 and the forest says so.  A categorical split (``split_type`` 1) sends
  a category *in* its stored set *right* and everything else (including values that are no
  category) left; the HIR's canonical form is "in the set goes left", so such nodes get their
  children swapped and ``default_left`` flipped.
* **Leaves** carry their (learning-rate scaled) value in ``split_conditions``; multi-output
  trees store vectors in ``leaf_weights``, indexed by the leaf's ``right_children`` entry
  (3.x), or in the leaf's slice of ``base_weights`` (2.x).
* **base_score** is stored in the objective's output space, in any of the spellings XGBoost
  has used (``"5E-1"``, ``"[5E-1]"``, vector intercepts ``"[a,b,c]"``); the forest's base score
  is the margin, i.e. the objective's ``ProbToMargin`` of it, computed in float32 (but for a
  model of no trees whose intercept was left to estimate, ``boost_from_average``, which XGBoost
  predicts with base_score as the margin).
* Unreachable (deleted) nodes are dropped and the remaining nodes renumbered in pre-order.
* As XGBoost loads them: trees go where their ``id`` says, the trees predicted with run from
  ``iteration_indptr[0]`` to the last; ``default_left`` is ``value == 1``; a tree that stores
  no category is numerical whatever its ``split_type``; categories at or past 2**24 (no category
  when predicting) are dropped.  What XGBoost would read otherwise than it stands (a
  ``base_score`` of ``"-inf"``, categories out of node order) is refused.

Errors never leak ``KeyError`` / ``IndexError``: a file that is not an XGBoost model, is
truncated or inconsistent raises :class:`ModelFormatError`; a model using something the HIR
cannot express raises :class:`UnsupportedModelError` naming it.

Over 600 lines (the UBJSON decoder is :mod:`.ubjson`, the reading of every tree at once
:mod:`.trees_at_once`) because the rules above are one reading of one document: the document
walk, the base score's spellings, the tree and category decoding and every refusal check the
same fields (``_Fields``) and are only ever used together.
"""

from __future__ import annotations

import functools
import json
import os
import re

import numpy as np

from silvanforge.errors import ModelFormatError, UnsupportedModelError
from silvanforge.frontend.loading import read_model_file
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, Op, Transform, Tree

from . import trees_at_once, ubjson

# objective name -> (ProbToMargin of base_score, output transform)
_OBJECTIVES: dict[str, tuple[str, str]] = {
    "reg:squarederror": ("identity", "identity"),
    "reg:linear": ("identity", "identity"),  # the pre-1.0 name of reg:squarederror
    "reg:squaredlogerror": ("identity", "identity"),
    "reg:pseudohubererror": ("identity", "identity"),
    "reg:absoluteerror": ("identity", "identity"),
    "reg:quantileerror": ("identity", "identity"),
    "reg:logistic": ("logit", "sigmoid"),
    "binary:logistic": ("logit", "sigmoid"),
    "binary:logitraw": ("identity", "identity"),  # XGBoost >= 1.4 (dmlc/xgboost#6517)
    "binary:hinge": ("identity", "hinge"),
    "count:poisson": ("log", "exp"),
    "reg:gamma": ("log", "exp"),
    "reg:tweedie": ("log", "exp"),
    "survival:cox": ("log", "exp"),
    "survival:aft": ("log", "exp"),
    "multi:softmax": ("identity", "argmax"),
    "multi:softprob": ("identity", "softmax"),
    "rank:pairwise": ("identity", "identity"),
    "rank:ndcg": ("identity", "identity"),
    "rank:map": ("identity", "identity"),
}

# Sanity bounds that catch corrupt counts before anything is allocated from them.
_MAX_FEATURES = 2**31 - 1  # feature indices are int32 in XGBoost and in the HIR
_MAX_OUTPUTS = 2**24
# Categories are 32-bit in XGBoost, which sizes a split's bitset by its largest category plus
# one: 2**31 - 1 overflows that (XGBoost fails to allocate, larger values crash it).  A value
# of 2**24 or more is no category at prediction time (``CategoryRule.XGBOOST``), so such set
# members can never match and are dropped rather than laid out.
_MAX_CATEGORY = 2**31 - 2
_NO_CATEGORY_FROM = 2**24
# Outputs a model may have without the file holding anything for each (_check_output_count).
_FREE_OUTPUTS = 4096

_JSON_START = re.compile(rb'\A(?:\xef\xbb\xbf)?\s*\{\s*"')
# A number in a base_score string as XGBoost's JSON reader takes it whole.  Anything else is
# refused: XGBoost reads a prefix of some ("-inf" as 0, "0.25abc" as 0.25), refuses others.
_BASE_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|NaN|-?Infinity")


# ---------------------------------------------------------------------------------------------
# detection
# ---------------------------------------------------------------------------------------------


def detect_json(path, head: bytes) -> bool:
    """A JSON object (text starting with ``{"``) that mentions a ``"learner"`` key."""
    head = _as_bytes(head)
    return bool(_JSON_START.match(head)) and b'"learner"' in head


def detect_ubjson(path, head: bytes) -> bool:
    """A UBJSON object (binary starting with ``{`` and a typed key) that mentions ``learner``."""
    head = _as_bytes(head)
    return head[:1] == b"{" and not _JSON_START.match(head) and b"learner" in head


def _as_bytes(head) -> bytes:
    # Detection never raises: anything that is not bytes-like reads as no bytes at all.
    return bytes(head) if isinstance(head, (bytes, bytearray, memoryview)) else b""


# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------


def load_json(path) -> Forest:
    path = os.fspath(path)
    return loads_json(_read(path), path)


def loads_json(raw: bytes, path: str = "the model") -> Forest:
    """Import an XGBoost JSON model from its bytes (``Booster.save_raw("json")``); ``path`` is
    what error messages call it."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ModelFormatError(
            f"{path}: not an XGBoost JSON model: the file is not UTF-8 text "
            f"(byte {exc.start}); a binary XGBoost model may be UBJSON (.ubj)"
        ) from None
    # A large model's bytes, then its text, are let go once read: the parsed document alone is
    # four times the file.
    del raw
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()):
            problem = f"the JSON ends early (truncated file?): {exc.msg}"
        else:
            problem = f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        raise ModelFormatError(f"{path}: {problem}") from None
    except RecursionError:
        raise ModelFormatError(f"{path}: malformed JSON: nested too deeply") from None
    del text
    return _forest_from_document(doc, path)


def load_ubjson(path) -> Forest:
    path = os.fspath(path)
    return loads_ubjson(_read(path), path)


def loads_ubjson(raw: bytes, path: str = "the model") -> Forest:
    """Import an XGBoost UBJSON model from its bytes; ``path`` is what errors call it."""
    try:
        doc = ubjson.decode(raw)
    except ubjson.UBJSONError as exc:
        raise ModelFormatError(f"{path}: malformed UBJSON: {exc}") from None
    del raw  # (its arrays are copied out)
    return _forest_from_document(doc, path)


def _read(path: str) -> bytes:
    raw = read_model_file(path, "XGBoost model")
    if not raw:
        raise ModelFormatError(f"{path}: the file is empty")
    return raw


# ---------------------------------------------------------------------------------------------
# the document -> HIR
# ---------------------------------------------------------------------------------------------


class _Fields:
    """Typed access to the parsed document; every failure names the file and the JSON path."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, msg: str):
        raise ModelFormatError(f"{self.path}: {msg}")

    def obj(self, parent: dict, key: str, where: str) -> dict:
        value = self.get(parent, key, where)
        if not isinstance(value, dict):
            self.fail(f"{where}.{key} should be an object, found {_kind(value)}")
        return value

    def get(self, parent: dict, key: str, where: str, *default):
        if key in parent:
            return parent[key]
        if default:
            return default[0]
        self.fail(f"not a complete XGBoost model: {where} has no {key!r}")

    def integer(self, value, where: str) -> int:
        """An integer written as a number or (XGBoost's parameters) as a decimal string."""
        if isinstance(value, (bool, np.bool_)):
            self.fail(f"{where} should be an integer, found {value!r}")
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        self.fail(f"{where} should be an integer, found {value!r}")

    def string(self, value, where: str) -> str:
        if not isinstance(value, str):
            self.fail(f"{where} should be a string, found {_kind(value)}")
        return value

    def array(self, value, where: str, kind: str, length: int | None = None) -> np.ndarray:
        """A 1-D array of integers (``kind="int"``), booleans or numbers (``"float"``)."""
        if not isinstance(value, (list, np.ndarray)):
            self.fail(f"{where} should be an array, found {_kind(value)}")
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError):
            self.fail(f"{where} is not an array of numbers")
        if arr.ndim != 1:
            self.fail(f"{where} is not a flat array of numbers")
        if arr.size:
            allowed = {"int": "iub", "bool": "iub", "float": "iubf"}[kind]
            if arr.dtype.kind not in allowed:
                self.fail(f"{where} should hold {'numbers' if kind == 'float' else 'integers'}")
        if length is not None and arr.size != length:
            self.fail(f"{where} has {arr.size} entries, expected {length}")
        if kind == "float":
            return arr.astype(np.float64)
        if kind == "bool":  # XGBoost reads an integer flag as ``value == 1`` (true / false too)
            return arr.astype(np.int64) == 1
        return arr.astype(np.int64)


def _kind(value) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, np.ndarray)):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return type(value).__name__


def _forest_from_document(doc, path: str) -> Forest:
    f = _Fields(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("learner"), dict):
        f.fail("not an XGBoost model: the document has no top-level 'learner' object")
    learner = doc["learner"]

    mparam = f.obj(learner, "learner_model_param", "learner")
    num_feature = f.integer(f.get(mparam, "num_feature", "learner.learner_model_param"),
                            "learner.learner_model_param.num_feature")
    num_class = f.integer(mparam.get("num_class", 0), "learner.learner_model_param.num_class")
    num_target = f.integer(mparam.get("num_target", 1), "learner.learner_model_param.num_target")
    if num_feature <= 0:
        f.fail(f"learner.learner_model_param.num_feature is {num_feature}; a model needs features")
    if num_feature > _MAX_FEATURES:
        f.fail(f"learner.learner_model_param.num_feature is {num_feature}, beyond {_MAX_FEATURES}")
    if num_class < 0 or num_target < 1 or max(num_class, num_target) > _MAX_OUTPUTS:
        f.fail(f"invalid output count (num_class={num_class}, num_target={num_target})")
    num_outputs = max(num_class, num_target, 1)

    objective = _objective_name(f, learner)
    if objective not in _OBJECTIVES:
        raise UnsupportedModelError(
            f"{path}: XGBoost objective {objective!r} is not supported "
            f"(supported: {', '.join(sorted(_OBJECTIVES))})"
        )
    margin_fn, transform = _OBJECTIVES[objective]
    if objective.startswith("multi:") and num_class < 1:
        # XGBoost configures the objective from the learner's num_class and refuses 0.
        f.fail(f"objective {objective!r} needs learner.learner_model_param.num_class of at least "
               f"1, found {num_class}")

    booster = f.obj(learner, "gradient_booster", "learner")
    booster_name = booster.get("name", "gbtree")
    weights = None
    if booster_name == "gbtree":
        model = f.obj(booster, "model", "learner.gradient_booster")
        where = "learner.gradient_booster.model"
    elif booster_name == "dart":
        inner = f.obj(booster, "gbtree", "learner.gradient_booster")
        model = f.obj(inner, "model", "learner.gradient_booster.gbtree")
        where = "learner.gradient_booster.gbtree.model"
        weights = f.array(f.get(booster, "weight_drop", "learner.gradient_booster"),
                          "learner.gradient_booster.weight_drop", "float")
    elif booster_name == "gblinear":
        raise UnsupportedModelError(
            f"{path}: XGBoost booster 'gblinear' (a linear model, not trees) is not supported"
        )
    else:
        raise UnsupportedModelError(f"{path}: XGBoost booster {booster_name!r} is not supported")

    trees_json = f.get(model, "trees", where)
    if not isinstance(trees_json, list):
        f.fail(f"{where}.trees should be an array, found {_kind(trees_json)}")
    n_trees = len(trees_json)
    gparam = model.get("gbtree_model_param", {})
    if isinstance(gparam, dict) and "num_trees" in gparam:
        declared = f.integer(gparam["num_trees"], f"{where}.gbtree_model_param.num_trees")
        if declared != n_trees:
            f.fail(f"{where}.gbtree_model_param.num_trees is {declared} but {n_trees} trees are stored "
                   "(truncated or edited file?)")
    tree_info = f.array(f.get(model, "tree_info", where), f"{where}.tree_info", "int", n_trees)
    _check_output_count(path, num_outputs, trees_json, mparam.get("base_score"))
    base = _base_score(f, mparam.get("base_score", "5E-1"), num_outputs)
    if n_trees == 0 and str(mparam.get("boost_from_average", "0")) == "1":
        # No round trained and the intercept left to be estimated: XGBoost (3.x) predicts with
        # base_score taken as the margin itself (a binary:logistic model of 0 rounds: 0.622).
        base_margin = base.astype(np.float32)
    else:
        base_margin = _prob_to_margin(f, margin_fn, base, objective)
    if weights is not None and weights.size != n_trees:
        f.fail(f"learner.gradient_booster.weight_drop has {weights.size} entries for {n_trees} trees")

    order = _tree_order(f, trees_json, where)
    first, stop = _trees_predicted(f, model.get("iteration_indptr"), n_trees, where)
    picked = order[first:stop]

    def categories_of(tj, k, n, split_type):
        return _categories(f, tj, f"{where}.trees[{picked[k]}]", n, split_type)

    # All trees at once where that reads them as the tree-by-tree walk below does, which
    # reads the rest and names what is wrong in a file.  Once read, the document's trees
    # (this function's own: parsed from the file's bytes) are emptied before the HIR's are
    # made, so that a large model's two forms are never held at once.
    trees = trees_at_once.read_trees(trees_json, picked, tree_info[first:stop],
                                     None if weights is None else weights[first:stop],
                                     num_feature, num_outputs, categories_of, release=trees_json.clear)
    if trees is None:
        trees = []
        for i in range(first, stop):
            w = None if weights is None else np.float32(weights[i])
            trees.append(_tree(f, trees_json[order[i]], f"{where}.trees[{order[i]}]", int(tree_info[i]),
                               num_feature, num_outputs, w))

    names = learner.get("feature_names")
    feature_names = None
    if isinstance(names, list) and len(names) == num_feature and all(isinstance(n, str) for n in names):
        feature_names = list(names)

    return Forest(
        feature_categories=_stored_categories(model.get("cats"), learner.get("feature_types"), num_feature),
        # XGBoost's re-coder refuses a category it was not trained with (3.2.0 alone mapped
        # some to a neighbouring category: dmlc/xgboost#12189).
        unseen_category_error=True,
        trees=trees,
        num_features=num_feature,
        num_outputs=num_outputs,
        base_score=base_margin.astype(np.float64),
        aggregation=Aggregation.SUM,
        transform=Transform(transform),
        threshold_dtype="float32",
        accumulate_dtype="float32",
        category_rule=CategoryRule.XGBOOST,
        feature_names=feature_names,
        source="xgboost",
        objective=objective,
        output_shape="auto",
    )


def _check_output_count(path: str, num_outputs: int, trees_json: list, base_score) -> None:
    """Outputs cost memory and time for every row predicted: beyond ``_FREE_OUTPUTS`` the file
    must hold something per output (a tree, a leaf value, a base_score entry), so that a small
    file cannot claim millions of them (XGBoost itself accepts outputs no tree adds to)."""
    if num_outputs <= _FREE_OUTPUTS:
        return
    def size(v):
        return len(v) if isinstance(v, (list, np.ndarray)) else 0
    held = len(trees_json) + (base_score.count(",") + 1 if isinstance(base_score, str) else size(base_score))
    held += sum(size(tj.get("leaf_weights")) + size(tj.get("base_weights"))
                for tj in trees_json if isinstance(tj, dict))
    if num_outputs > held:
        raise UnsupportedModelError(
            f"{path}: {num_outputs} outputs (num_class / num_target) for a model of "
            f"{len(trees_json)} trees: at most {max(_FREE_OUTPUTS, held)} are supported here")


def _tree_order(f: _Fields, trees_json: list, where: str) -> list[int]:
    """Position in ``trees`` of tree 0, 1, ...: XGBoost puts each tree where its ``id`` says
    (so the array's order does not matter); files without ids are read in order."""
    ids = [tj.get("id") if isinstance(tj, dict) else None for tj in trees_json]
    if all(i is None for i in ids):
        return list(range(len(trees_json)))
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)) for i in ids) \
            or sorted(int(i) for i in ids) != list(range(len(ids))):
        f.fail(f"{where}.trees: the tree ids {[i for i in ids][:8]} are not 0..{len(ids) - 1}, "
               "each once")
    order = [0] * len(ids)
    for pos, i in enumerate(ids):
        order[int(i)] = pos
    return order


def _trees_predicted(f: _Fields, indptr, n_trees: int, where: str) -> tuple[int, int]:
    """The trees XGBoost predicts with: ``iteration_indptr[0]`` up to its last entry, which
    must be the number of trees (the entries between do not matter for a whole prediction)."""
    if indptr is None:
        return 0, n_trees
    bounds = f.array(indptr, f"{where}.iteration_indptr", "int")
    if bounds.size == 0 or bounds[-1] != n_trees or not 0 <= bounds[0] <= n_trees:
        f.fail(f"{where}.iteration_indptr {bounds.tolist()[:8]} does not run from a tree to the "
               f"{n_trees} trees stored")
    return int(bounds[0]), n_trees


def _stored_categories(cats, types, num_feature: int) -> dict[int, list] | None:
    """The category labels XGBoost (3.1 and later) stores for features trained from pandas
    ``category`` columns: ``cats.enc`` has one entry per feature, strings as UTF-8 bytes cut
    at ``offsets``, numbers as ``values``; the label's position is its category code.  Only
    what predict needs to map a frame's labels; anything unexpected leaves frames read by
    their own codes, as XGBoost before 3.1 did."""
    if not isinstance(cats, dict) or not isinstance(types, list) or len(types) != num_feature:
        return None
    enc = cats.get("enc")
    if not isinstance(enc, list) or len(enc) != num_feature:
        return None
    out: dict[int, list] = {}
    for feature, (kind, entry) in enumerate(zip(types, enc)):
        if kind != "c" or not isinstance(entry, dict):
            continue
        values = entry.get("values")
        if not isinstance(values, list) or not values:
            continue
        if "offsets" in entry:
            offsets = entry["offsets"]
            if not (isinstance(offsets, list) and offsets and offsets[-1] == len(values)
                    and all(isinstance(o, int) for o in offsets) and offsets == sorted(offsets)):
                continue
            try:
                raw = bytes(int(v) & 0xFF for v in values)
                out[feature] = [raw[a:b].decode("utf-8", "replace") for a, b in zip(offsets[:-1], offsets[1:])]
            except (TypeError, ValueError):
                continue
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[feature] = list(values)
    return out or None


def _objective_name(f: _Fields, learner: dict) -> str:
    obj = f.get(learner, "objective", "learner")
    if isinstance(obj, str):  # never written by XGBoost, but unambiguous
        return obj
    if not isinstance(obj, dict):
        f.fail(f"learner.objective should be an object, found {_kind(obj)}")
    return f.string(f.get(obj, "name", "learner.objective"), "learner.objective.name")


def _base_score(f: _Fields, value, num_outputs: int) -> np.ndarray:
    """Every spelling of base_score: 0.5, "5E-1", "[5E-1]", "[a,b,c]", [a, b, c]."""
    where = "learner.learner_model_param.base_score"
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        parts = [p.strip() for p in text.split(",")] if text.strip() else []
        if not all(_BASE_NUMBER.fullmatch(p) for p in parts):
            f.fail(f"{where} {value!r} is not a number or a list of numbers")
        vals = [float(p) for p in parts]
    elif isinstance(value, (list, np.ndarray)):
        vals = f.array(value, where, "float").tolist()
    elif isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        vals = [float(value)]
    else:
        f.fail(f"{where} should be a number, found {_kind(value)}")
    if len(vals) == 1:
        vals = vals * num_outputs
    if len(vals) != num_outputs:
        f.fail(f"{where} has {len(vals)} values for a model with {num_outputs} outputs")
    return np.asarray(vals, dtype=np.float32)


def _prob_to_margin(f: _Fields, fn: str, base: np.ndarray, objective: str) -> np.ndarray:
    """XGBoost's ObjFunction::ProbToMargin, in float32 as XGBoost computes it."""
    one = np.float32(1)
    if fn == "logit":
        # XGBoost 3.x accepts an intercept of 0 or 1 (all labels equal) and bounds it to
        # [kRtEps, 1 - kRtEps] before -logf(1.0f / p - 1.0f); inside the bounds nothing changes.
        if not np.all((base >= 0) & (base <= 1)):
            f.fail(f"base_score {base.tolist()} is outside (0, 1), which {objective!r} requires")
        eps = np.float32(1e-6)
        base = np.minimum(np.maximum(base, eps), one - eps)
        return -_logf(one / base - one)
    if fn == "log":  # std::log(base_score); an intercept of 0 gives a margin of -inf
        if not np.all(base >= 0):
            f.fail(f"base_score {base.tolist()} is negative, which {objective!r} does not allow")
        with np.errstate(divide="ignore"):
            return _logf(base)
    return base.astype(np.float32)


def _logf(x: np.ndarray) -> np.ndarray:
    """C's ``logf``, which XGBoost calls, so the base margin matches it bit for bit.

    NumPy's float32 log may differ from the C library's by an ulp; without a C library the
    float64 log rounded to float32 (correctly rounded almost always) stands in.
    """
    x = np.asarray(x, dtype=np.float32)
    fn = _c_logf()
    if fn is None:
        return np.log(x.astype(np.float64)).astype(np.float32)
    return np.asarray([fn(float(v)) for v in x.ravel()], dtype=np.float32).reshape(x.shape)


@functools.lru_cache(maxsize=1)
def _c_logf():
    try:
        import ctypes
        import ctypes.util

        for name in ("libm.so.6", ctypes.util.find_library("m")):
            if not name:
                continue
            try:
                fn = ctypes.CDLL(name).logf
            except OSError:
                continue
            fn.restype = ctypes.c_float
            fn.argtypes = [ctypes.c_float]
            return fn
    except (ImportError, AttributeError, OSError):  # no ctypes or no C maths library
        pass
    return None


def _tree(f: _Fields, tj, where: str, group: int, num_feature: int, num_outputs: int,
          weight) -> Tree:
    if not isinstance(tj, dict):
        f.fail(f"{where} should be an object, found {_kind(tj)}")
    tparam = f.obj(tj, "tree_param", where)
    n = f.integer(f.get(tparam, "num_nodes", f"{where}.tree_param"), f"{where}.tree_param.num_nodes")
    if n <= 0:
        f.fail(f"{where}.tree_param.num_nodes is {n}; a tree needs at least one node")
    leaf_size = f.integer(tparam.get("size_leaf_vector", 1), f"{where}.tree_param.size_leaf_vector")
    leaf_size = max(leaf_size, 1)  # XGBoost < 2.0 wrote 0 for scalar leaves

    def arr(key, kind, *default):
        if key not in tj and default:
            return default[0]
        return f.array(f.get(tj, key, where), f"{where}.{key}", kind, n)

    left = arr("left_children", "int")
    right = arr("right_children", "int")
    feature = arr("split_indices", "int")
    with np.errstate(over="ignore"):  # XGBoost reads numbers beyond float32 as +-inf too
        cond = arr("split_conditions", "float").astype(np.float32)
    default_left = arr("default_left", "bool")
    split_type = arr("split_type", "int", np.zeros(n, dtype=np.int64))
    hessians = arr("sum_hessian", "float", None)  # absent from hand-written models: optional

    if leaf_size > 1:
        if leaf_size != num_outputs:
            f.fail(f"{where} has leaf vectors of size {leaf_size} for a model with {num_outputs} outputs")
        if "leaf_weights" in tj:
            # 3.x: one vector per leaf, found through the leaf's right_children entry.
            leaf_weights = f.array(tj["leaf_weights"], f"{where}.leaf_weights", "float")
            if leaf_weights.size % leaf_size:
                f.fail(f"{where}.leaf_weights has {leaf_weights.size} values, not a multiple of "
                       f"{leaf_size}")
            leaf_weights = leaf_weights.reshape(-1, leaf_size)
            leaf_index = right
        else:
            # 2.x: a leaf's vector is its node weight in base_weights (n_nodes x size).
            leaf_weights = f.array(f.get(tj, "base_weights", where), f"{where}.base_weights", "float",
                                   n * leaf_size).reshape(n, leaf_size)
            leaf_index = np.arange(n)
        outputs = tuple(range(num_outputs))
    else:
        if not 0 <= group < num_outputs:
            f.fail(f"{where}: tree_info gives output {group}, outside 0..{num_outputs - 1}")
        outputs = (group,)

    categories = _categories(f, tj, where, n, split_type)
    # With no category stored, XGBoost evaluates every split numerically.
    evaluated_type = split_type if categories else np.zeros(n, dtype=np.int64)

    # Walk from the root, renumbering reachable nodes in pre-order; unreachable (deleted)
    # nodes are dropped, and a node reached twice means the file is not a tree.
    left_l, right_l = left.tolist(), right.tolist()
    seen = [False] * n
    order: list[int] = []
    stack = [0]
    while stack:
        node = stack.pop()
        if seen[node]:
            f.fail(f"{where}: node {node} is reached twice (the children arrays do not form a tree)")
        seen[node] = True
        order.append(node)
        lo, hi = left_l[node], right_l[node]
        if lo != -1:
            for child, side in ((hi, "right"), (lo, "left")):
                if not 0 <= child < n:
                    f.fail(f"{where}: node {node} has {side} child {child}, outside 0..{n - 1}")
                stack.append(child)

    old = np.asarray(order, dtype=np.int64)  # old id of each new node
    new_id = np.full(n, -1, dtype=np.int64)
    new_id[old] = np.arange(len(old))
    internal = left[old] != -1
    leaf = ~internal
    kind = np.where(internal, split_type[old], 0)
    if np.any((kind != 0) & (kind != 1)):
        bad = int(old[np.flatnonzero((kind != 0) & (kind != 1))[0]])
        f.fail(f"{where}: node {bad} has unknown split_type {int(split_type[bad])}")
    kind = np.where(internal, evaluated_type[old], 0)
    feat = np.where(internal, feature[old], -1)
    bad = internal & ((feat < 0) | (feat >= num_feature))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        f.fail(f"{where}: node {int(old[i])} splits on feature {int(feat[i])}, outside "
               f"0..{num_feature - 1}")

    lo = np.where(internal, new_id[np.where(internal, left[old], 0)], -1)
    hi = np.where(internal, new_id[np.where(internal, right[old], 0)], -1)
    # XGBoost sends a category in the set right; the HIR sends it left: swap, flip default.
    is_cat = kind == 1
    out_left = np.where(is_cat, hi, lo).astype(np.int32)
    out_right = np.where(is_cat, lo, hi).astype(np.int32)
    out_default = np.where(is_cat, ~default_left[old], default_left[old]) & internal
    out_threshold = np.where(internal & ~is_cat, cond[old], 0).astype(np.float64)

    if leaf_size > 1:
        idx = leaf_index[old[leaf]]
        bad = (idx < 0) | (idx >= leaf_weights.shape[0])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            f.fail(f"{where}: leaf {int(old[leaf][i])} points at leaf vector {int(idx[i])}, outside "
                   f"0..{leaf_weights.shape[0] - 1}")
        with np.errstate(over="ignore"):
            values = leaf_weights[idx].astype(np.float32)
    else:
        values = cond[old[leaf]].reshape(-1, 1)
    if weight is not None:  # dart: XGBoost multiplies each tree's float32 output by its weight
        with np.errstate(over="ignore", invalid="ignore"):
            values = (values * weight).astype(np.float32)
    out_leaf = np.zeros((len(old), len(outputs)), dtype=np.float64)
    out_leaf[leaf] = values
    out_cats = {int(new_id[node]): categories.get(int(node), np.zeros(0, dtype=np.int64))
                for node in old[is_cat]}
    m = len(old)
    out_feature = feat.astype(np.int32)

    return Tree(
        left=out_left,
        right=out_right,
        feature=out_feature,
        threshold=out_threshold,
        op=np.full(m, Op.LT, dtype=np.uint8),
        default_left=out_default,
        zero_missing=np.zeros(m, dtype=bool),
        leaf_value=out_leaf,
        outputs=outputs,
        categories=out_cats,
        cover=None if hessians is None else hessians[old].astype(np.float64),
        node_ids=old,  # XGBoost's node ids (pred_leaf gives them): the file's, before renumbering
    )


def _categories(f: _Fields, tj: dict, where: str, n: int, split_type: np.ndarray) -> dict[int, np.ndarray]:
    """node -> sorted category set, from categories_nodes / _segments / _sizes / categories.

    XGBoost hands the entries out walking the nodes in order (an entry whose node comes before
    the previous entry's is never read), refuses an empty entry, and evaluates a tree with no
    entry at all as numerical whatever its split_type says (``HasCategoricalSplit``): the
    caller reads an empty result so."""
    cat_nodes_needed = np.flatnonzero(split_type == 1)
    keys = ("categories_nodes", "categories_segments", "categories_sizes", "categories")
    if not all(k in tj for k in keys):
        if cat_nodes_needed.size:
            f.fail(f"{where} has categorical splits but no {', '.join(k for k in keys if k not in tj)}")
        return {}
    nodes = f.array(tj["categories_nodes"], f"{where}.categories_nodes", "int")
    segments = f.array(tj["categories_segments"], f"{where}.categories_segments", "int", nodes.size)
    sizes = f.array(tj["categories_sizes"], f"{where}.categories_sizes", "int", nodes.size)
    cats = f.array(tj["categories"], f"{where}.categories", "int")
    if nodes.size > 1 and np.any(np.diff(nodes) <= 0):
        f.fail(f"{where}.categories_nodes {nodes.tolist()[:8]} is not in increasing node order")
    out: dict[int, np.ndarray] = {}
    for node, seg, size in zip(nodes.tolist(), segments.tolist(), sizes.tolist()):
        if not 0 <= node < n:
            f.fail(f"{where}.categories_nodes names node {node}, outside 0..{n - 1}")
        if seg < 0 or size <= 0 or seg + size > cats.size:
            f.fail(f"{where}: the categories of node {node} ({seg}..{seg + size}) lie outside "
                   f"categories (length {cats.size}) or are empty")
        chosen = cats[seg:seg + size]
        if np.any(chosen < 0):
            f.fail(f"{where}: node {node} has a negative category")
        if chosen.max() > _MAX_CATEGORY:
            f.fail(f"{where}: node {node} names category {int(chosen.max())}, beyond XGBoost's "
                   f"32-bit categories (at most {_MAX_CATEGORY})")
        out[node] = np.unique(chosen[chosen < _NO_CATEGORY_FROM])
    # XGBoost gives a categorical node without an entry an empty set (everything goes left).
    return out

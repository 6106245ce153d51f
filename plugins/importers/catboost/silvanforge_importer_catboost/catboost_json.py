"""CatBoost's JSON export (``model.save_model(path, format="json")``) -> HIR Forest.

The document holds ``features_info`` (every input column: float features with their borders
and ``nan_value_treatment``, categorical, text and embedding features, each with its
``flat_feature_index``, the column it reads), the trees (``oblivious_trees`` or, for the
Depthwise and Lossguide grow policies, nested ``trees``), ``scale_and_bias`` and
``model_info`` (the loss function, class names).  It is read without CatBoost installed.

How CatBoost predicts, canonicalised into the HIR (:mod:`silvanforge.ir.hir`):

* Inputs become float32 and each split tests ``x > border`` (see :mod:`.trees`); so the HIR
  compares in float32 (``threshold_dtype``), with the borders rounded to float32 as CatBoost
  reads them.
* The formula is ``scale * sum(leaf values) + bias`` in float64, one ``bias`` per dimension:
  the leaf values are stored multiplied by ``scale`` (exact for the default scale 1) and the
  bias is the base score.
* The loss names the transform :func:`.losses.transform`.

What the HIR cannot hold exactly is refused with :class:`UnsupportedModelError` naming it.
"""

from __future__ import annotations

import json
import os

import numpy as np

from silvanforge.errors import ModelFormatError, UnsupportedModelError
from silvanforge.importing import read_model_file
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest

from . import losses, trees
from .fields import Reader

# CatBoost's ENanValueTreatment: whether a NaN makes ``x > border`` true.
_NAN_TRUE = {"AsIs": False, "AsFalse": False, "AsTrue": True}
# Outputs (approx dimensions) a model may have: one per class at most.
_MAX_DIMENSION = 1 << 16


def detect(path, head) -> bool:
    """A JSON object whose first key is CatBoost's ``features_info`` (or that names its trees)."""
    if not isinstance(head, (bytes, bytearray, memoryview)):
        return False
    head = bytes(head).lstrip(b"\xef\xbb\xbf").lstrip()
    if head[:1] != b"{":
        return False
    body = head[1:].lstrip()
    return body.startswith(b'"features_info"') or b'"oblivious_trees"' in head or (
        b'"catboost_version_info"' in head)


def load(path) -> Forest:
    path = os.fspath(path)
    return loads(read_model_file(path, "CatBoost model"), path)


def load_named(path, name: str) -> Forest:
    """The JSON model at ``path``, called ``name`` in messages (an export of something else)."""
    return loads(read_model_file(path, "CatBoost model"), name)


def loads(data: bytes, name: str) -> Forest:
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ModelFormatError(f"{name}: not a valid CatBoost JSON model ({type(exc).__name__}: "
                               f"{str(exc)[:200]})") from None
    return from_document(doc, name)


class _Model:
    """One document being read: its features and how its splits become HIR splits."""

    def __init__(self, doc, name: str):
        self.r = r = Reader(name)
        if not isinstance(doc, dict):
            r.fail("the document must be a JSON object")
        self.doc = doc
        info = r.obj(doc, "features_info", "model")
        for kind in ("text_features", "embedding_features"):
            if r.lst(info, kind, "features_info", required=False):
                raise UnsupportedModelError(
                    f"{name}: CatBoost {kind.replace('_', ' ')} are not supported (their "
                    f"feature calcers have no exact HIR form)")
        self.floats: dict[int, dict] = {}
        self.columns: dict[int, str] = {}  # flat index -> feature id
        for kind in ("float_features", "categorical_features"):
            for i, f in enumerate(r.lst(info, kind, "features_info", required=False)):
                where = f"features_info.{kind}[{i}]"
                flat = r.int(f, "flat_feature_index", where, hi=1 << 20)
                if flat in self.columns:
                    r.fail(f"{where}: column {flat} is described twice")
                self.columns[flat] = f.get("feature_id", "") if isinstance(f.get("feature_id", ""), str) else ""
                if kind == "float_features":
                    index = r.int(f, "feature_index", where, hi=1 << 20)
                    if index in self.floats:
                        r.fail(f"{where}: float feature {index} is described twice")
                    treatment = r.str(f, "nan_value_treatment", where, default="AsIs")
                    if treatment not in _NAN_TRUE:
                        r.fail(f"{where}.nan_value_treatment {treatment!r} is none of {sorted(_NAN_TRUE)}")
                    self.floats[index] = {"flat": flat, "nan_true": _NAN_TRUE[treatment]}
        if not self.columns:
            r.fail("features_info describes no feature")
        self.num_features = max(self.columns) + 1

    def split(self, s, where: str) -> trees.Split:
        r = self.r
        kind = r.str(s, "split_type", where)
        if kind == "FloatFeature":
            index = r.int(s, "float_feature_index", where, hi=1 << 20)
            f = self.floats.get(index)
            if f is None:
                r.fail(f"{where}.float_feature_index {index} names no float feature")
            border = r.num(s.get("border"), f"{where}.border")
            if abs(border) > float(np.finfo(np.float32).max):
                r.fail(f"{where}.border {border!r} is beyond float32")
            # CatBoost reads borders as floats; the float32 they round to is what it compares.
            return trees.Split(f["flat"], float(np.float32(border)), nan_left=not f["nan_true"])
        if kind in ("OneHotFeature", "OnlineCtr"):
            what = "one-hot categorical splits" if kind == "OneHotFeature" else "CTR (target statistics) splits on categorical features"
            raise UnsupportedModelError(f"{r.name}: CatBoost {what} are not supported yet")
        raise UnsupportedModelError(f"{r.name}: CatBoost split type {kind!r} is not supported")


def _scale_and_bias(r: Reader, doc) -> tuple[float, list[float] | None]:
    sb = doc.get("scale_and_bias")
    if sb is None:
        return 1.0, None
    if not isinstance(sb, list) or len(sb) != 2:
        r.fail("scale_and_bias must be [scale, [bias, ...]]")
    scale = r.num(sb[0], "scale_and_bias scale")
    bias = sb[1] if isinstance(sb[1], list) else [sb[1]]
    if not bias or len(bias) > _MAX_DIMENSION:
        r.fail("scale_and_bias has no bias")
    return scale, [r.num(b, "scale_and_bias bias") for b in bias]


def _loss(r: Reader, doc) -> str:
    info = r.obj(doc, "model_info", "model", required=False)
    params = info.get("params")
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except ValueError:
            r.fail("model_info.params is not JSON")
    loss = params.get("loss_function") if isinstance(params, dict) else None
    if not isinstance(loss, dict) or not isinstance(loss.get("type"), str):
        raise UnsupportedModelError(f"{r.name}: the CatBoost model names no loss function "
                                    f"(model_info.params.loss_function): its prediction type is unknown")
    return loss["type"]


def _class_names(doc) -> list | None:
    info = doc.get("model_info")
    cp = info.get("class_params") if isinstance(info, dict) else None
    names = cp.get("class_names") if isinstance(cp, dict) else None
    if isinstance(names, list) and names and all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                                 for v in names):
        return names
    return None


def from_document(doc, name: str) -> Forest:
    m = _Model(doc, name)
    r = m.r
    scale, bias = _scale_and_bias(r, doc)
    loss = losses.loss_name(_loss(r, doc))
    has_oblivious, has_trees = "oblivious_trees" in doc, "trees" in doc
    if has_oblivious == has_trees:
        r.fail("the model must hold exactly one of oblivious_trees and trees")
    raw = r.lst(doc, "oblivious_trees" if has_oblivious else "trees", "model")
    # Without scale_and_bias, symmetric trees tell the dimension by their leaf counts; nested
    # trees are read with one (CatBoost writes scale_and_bias whenever a model has more).
    dim = len(bias) if bias is not None else (None if has_oblivious else 1)

    def leaf_array(values, count: int, where: str) -> np.ndarray:
        nonlocal dim
        if not isinstance(values, list) or not values:
            r.fail(f"{where} must be a non-empty list")
        if dim is None:
            dim = len(values) // count
        if dim < 1 or len(values) != count * dim:
            r.fail(f"{where} has {len(values)} values for {count} leaves of dimension {dim}")
        arr = np.array([r.num(v, where) for v in values], dtype=np.float64).reshape(count, dim)
        return arr * scale if scale != 1.0 else arr

    out = []
    for t_i, t in enumerate(raw):
        where = f"{'oblivious_trees' if has_oblivious else 'trees'}[{t_i}]"
        if has_oblivious:
            if not isinstance(t, dict):
                r.fail(f"{where} must be an object")
            splits = r.lst(t, "splits", where)
            if len(splits) > trees.MAX_OBLIVIOUS_DEPTH:
                r.fail(f"{where} has depth {len(splits)}, beyond CatBoost's {trees.MAX_OBLIVIOUS_DEPTH}")
            hsplits = [m.split(s, f"{where}.splits[{i}]") for i, s in enumerate(splits)]
            values = leaf_array(t.get("leaf_values"), 1 << len(splits), f"{where}.leaf_values")
            out.append(trees.oblivious(hsplits, values))
        else:
            def read_leaf(obj, where=where):
                v = obj.get("value")
                return leaf_array(v if isinstance(v, list) else [v], 1, f"{where} leaf value")[0]

            out.append(trees.nonsymmetric(t, lambda s, where=where: m.split(s, f"{where} split"),
                                          read_leaf, dim, r.fail))
    if dim is None:
        dim = 1
    if bias is None:
        bias = [0.0] * dim
    if not out:
        raise UnsupportedModelError(f"{name}: the CatBoost model has no trees")
    transform = losses.transform(loss, dim)
    return Forest(
        trees=out,
        num_features=m.num_features,
        num_outputs=dim,
        base_score=np.asarray(bias, dtype=np.float64),
        aggregation=Aggregation.SUM,
        transform=transform,
        threshold_dtype="float32",
        accumulate_dtype="float64",
        category_rule=CategoryRule.EXACT,
        feature_names=_feature_names(m),
        source="catboost",
        objective=loss,
        class_labels=_class_names(doc) if transform.name != "identity" else None,
    )


def _feature_names(m: _Model) -> list[str] | None:
    names = [m.columns.get(i, "") for i in range(m.num_features)]
    # Models trained on arrays have no feature ids: rows are matched by position.
    return names if all(names) and len(set(names)) == len(names) else None

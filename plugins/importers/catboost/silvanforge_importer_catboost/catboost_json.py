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
  bias is the base score, added after the trees' sum as CatBoost adds it (an average over a
  divisor of 1, :class:`Aggregation`: a sum started from the bias rounds otherwise).
* The loss names the transform :func:`.losses.transform`.

What the HIR cannot hold exactly is refused with :class:`UnsupportedModelError` naming it.
"""

from __future__ import annotations

import json
import os

import numpy as np

from silvanforge.errors import ModelFormatError, UnsupportedModelError
from silvanforge.frontend.loading import read_model_file
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest

from . import categorical, losses, trees
from .fields import Reader

# CatBoost's ENanValueTreatment: whether a NaN makes ``x > border`` true.
_NAN_TRUE = {"AsIs": False, "AsFalse": False, "AsTrue": True}
_F32_MAX = float(np.finfo(np.float32).max)
# Outputs (approx dimensions) a model may have: one per class at most.
_MAX_DIMENSION = 1 << 16


def detect(path, head) -> bool:
    """A JSON object whose first key is CatBoost's ``features_info`` or ``ctr_data`` (it writes
    keys in order; ``ctr_data`` may fill the head), or that names its trees."""
    if not isinstance(head, (bytes, bytearray, memoryview)):
        return False
    head = bytes(head).lstrip(b"\xef\xbb\xbf").lstrip()
    if head[:1] != b"{":
        return False
    body = head[1:].lstrip()
    return body.startswith((b'"features_info"', b'"ctr_data"')) or b'"oblivious_trees"' in head or (
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
        self.binary: list[tuple] = []
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
                    # CatBoost's binary features, which splits name by split_index: every float
                    # border in order, then one-hot values, then CTR borders
                    for b in r.lst(f, "borders", where, required=False):
                        b = r.num(b, f"{where}.borders")
                        self.binary.append(("float", index, float(np.float32(b)) if abs(b) <= _F32_MAX else None))
        if not self.columns:
            r.fail("features_info describes no feature")
        self.num_features = max(self.columns) + 1
        self._read_categorical(info)

    def _read_categorical(self, info) -> None:
        """Categorical features, their one-hot values and CTRs, and the hashes each knows
        (:mod:`.categorical`); and the binary features split indices count through."""
        r = self.r
        self.cats: dict[int, int] = {}  # categorical feature index -> flat index
        for i, f in enumerate(r.lst(info, "categorical_features", "features_info", required=False)):
            where = f"features_info.categorical_features[{i}]"
            index = r.int(f, "feature_index", where, hi=1 << 20)
            if index in self.cats:
                r.fail(f"{where}: categorical feature {index} is described twice")
            self.cats[index] = f["flat_feature_index"]
            values = r.lst(f, "values", where, required=False)
            for v in values:
                if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 31) <= v < 1 << 31:
                    r.fail(f"{where}.values must be 32-bit integers (category hashes), got {v!r}")
            self.binary += [("onehot", index, v & 0xFFFFFFFF) for v in values]
        self.combos: dict[str, dict] = {}  # the CTRs' combinations of features, by name
        self._tables: dict[str, categorical.CtrTable] = {}
        data = self.doc.get("ctr_data") or {}
        if not isinstance(data, dict):
            r.fail("ctr_data must be an object")
        for i, c in enumerate(r.lst(info, "ctrs", "features_info", required=False)):
            where = f"features_info.ctrs[{i}]"
            ctr = self._ctr(c, where, data)
            for b in r.lst(c, "borders", where):
                self.binary.append(("ctr", ctr, r.num(b, f"{where}.borders")))
        # Computed columns (Forest.hashed_combinations), in order of first use by a split: one
        # a CTR (its value) and one a one-hot test (1 or 0).
        self.computed: list[dict] = []
        self._computed_at: dict[tuple, int] = {}

    def _ctr(self, c, where: str, data) -> dict | None:
        """One CTR's description with its table (by category hash for one feature, by key for
        a combination); refuses CTR types that have no exact form."""
        r = self.r
        kind = r.str(c, "ctr_type", where)
        elements = r.lst(c, "elements", where)
        if kind not in categorical.CTR_TYPES:
            categorical.refuse(r.name, f"CTRs of type {kind!r}")
        single = len(elements) == 1 and isinstance(elements[0], dict) and \
            elements[0].get("combination_element") == "cat_feature_value"
        if single:
            feature, combo = r.int(elements[0], "cat_feature_index", where, hi=1 << 20), None
            if feature not in self.cats:
                r.fail(f"{where}: CTR over categorical feature {feature}, which is not described")
        else:
            feature, combo = None, self._combination(elements, where)
        ident = r.str(c, "identifier", where)
        raw = data.get(ident)
        if not isinstance(raw, dict):
            r.fail(f"{where}: ctr_data has no table for {ident!r}")
        table = self._tables.get(ident)
        if table is None:
            table = self._tables[ident] = self._table(raw, ident, single)
        stride = table.stride
        if kind in ("Counter", "FeatureFreq") and stride != 2:
            r.fail(f"{where}: a {kind} CTR table has one count per key, not {stride - 1}")
        target = r.int(c, "target_border_idx", where, hi=1 << 16)
        if kind in ("Borders", "Buckets") and target >= stride - 1:
            r.fail(f"{where}.target_border_idx {target} is beyond the table's {stride - 1} classes")
        prior = [r.num(c.get(k, d), f"{where}.{k}") for k, d in
                 (("prior_numerator", 0.0), ("prior_denomerator", 1.0), ("shift", 0.0), ("scale", 1.0))]
        return {"kind": kind, "feature": feature, "combo": combo, "table": table, "target": target, "prior": prior}

    def _table(self, raw, ident: str, single: bool) -> categorical.CtrTable:
        """One ``ctr_data`` table, checked: keys (category hashes for a single feature, whose
        keys invert to them; keys as they are for a combination) and their counts."""
        r, where = self.r, f"ctr_data[{ident!r}]"
        stride = r.int(raw, "hash_stride", where, lo=2, hi=1 << 16)
        hmap = r.lst(raw, "hash_map", where)
        if len(hmap) % stride:
            r.fail(f"{where}.hash_map is not a whole number of rows of {stride}")
        denominator = raw.get("counter_denominator", 0)
        if isinstance(denominator, bool) or not isinstance(denominator, int) or not 0 <= denominator < 1 << 62:
            r.fail(f"{where}.counter_denominator must be a count")
        counts = [v for i, v in enumerate(hmap) if i % stride]
        if not all(type(v) is int for v in counts):
            r.fail(f"{where}.hash_map counts must be integers")
        stats = np.array(counts, dtype=object).reshape(-1, stride - 1) if counts else np.zeros((0, stride - 1), object)
        if stats.size and (stats.min() < 0 or stats.max() >= 1 << 62):
            r.fail(f"{where}.hash_map counts must be counts")
        stats = stats.astype(np.int64)
        keys = []
        for key in hmap[::stride]:
            try:
                key = int(key) if type(key) in (str, int) else -1
            except ValueError:
                key = -1
            if not 0 <= key <= categorical._M64:
                r.fail(f"{where}.hash_map has a key that is not a 64-bit integer")
            # a single feature's table is read by category hash, a combination's by key
            keys.append(categorical.hash_of_key(key) if single else (None if key == categorical._EMPTY else key))
        used = [i for i, k in enumerate(keys) if k is not None]
        rows = {keys[i]: i for i in used}
        if len(rows) != len(used):
            r.fail(f"{where}.hash_map has a key twice")
        return categorical.CtrTable(list(rows), stats[used], stride, denominator)

    def _combination(self, elements: list, where: str) -> str:
        """A CTR over a combination of features: its elements (what its computed columns'
        keys hash, ``Forest.hashed_combinations``), named by them.  Keys hash the elements in
        the order the model lists them: categorical values, then float borders, then one-hot
        values."""
        r = self.r
        out = []
        for i, e in enumerate(elements):
            w = f"{where}.elements[{i}]"
            kind = r.str(e, "combination_element", w)
            if kind in ("cat_feature_value", "cat_feature_exact_value"):
                index = r.int(e, "cat_feature_index", w, hi=1 << 20)
                if index not in self.cats:
                    r.fail(f"{w}: categorical feature {index} is not described")
                if kind == "cat_feature_value":
                    out.append(["cat", self.cats[index]])
                else:
                    value = e.get("value")
                    if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 31) <= value < 1 << 31:
                        r.fail(f"{w}.value must be a 32-bit category hash")
                    out.append(["onehot", self.cats[index], value & 0xFFFFFFFF])
            elif kind == "float_feature":
                index = r.int(e, "float_feature_index", w, hi=1 << 20)
                f = self.floats.get(index)
                border = r.num(e.get("border"), f"{w}.border")
                if f is None or abs(border) > _F32_MAX:
                    r.fail(f"{w}: no float feature {index}, or a border beyond float32")
                out.append(["float", f["flat"], float(np.float32(border)), f["nan_true"]])
            else:
                categorical.refuse(r.name, f"CTRs over combinations with {kind!r} elements")
        if not any(e[0] == "cat" for e in out):
            r.fail(f"{where}: a CTR combination without a categorical value")
        name = json.dumps(out)
        self.combos.setdefault(name, {"elements": out})
        return name

    def _computed(self, ident: tuple, make) -> int:
        """The column of the computed column ``ident`` (made by ``make()`` at its first use)."""
        at = self._computed_at.get(ident)
        if at is None:
            at = self._computed_at[ident] = len(self.computed)
            self.computed.append(make())
        return self.num_features + at

    def _ctr_column(self, ctr: dict) -> dict:
        """A CTR's computed column: its key's elements, the keys its table holds and their CTR
        values, and the prior for any other key (:func:`.categorical.ctr_column`)."""
        if ctr["combo"] is not None:
            elements = self.combos[ctr["combo"]]["elements"]
        else:
            elements = [["cat", self.cats[ctr["feature"]]]]
        return categorical.ctr_column(elements, ctr["combo"] is None, ctr["kind"], ctr["table"], ctr["target"],
                                      *ctr["prior"])

    def _binary(self, s, where: str, expected: tuple | None) -> tuple:
        """The binary feature a split's ``split_index`` names, checked against what the split
        says (CatBoost evaluates the split by its index: a split whose fields disagree with it
        is not a model CatBoost wrote, and is not read two ways)."""
        at = self.r.int(s, "split_index", where, hi=1 << 30)
        if at >= len(self.binary) or (expected is not None and self.binary[at] != expected):
            self.r.fail(f"{where}.split_index {at} does not name the split's own feature and border")
        return self.binary[at]

    def split(self, s, where: str) -> trees.Split:
        r = self.r
        kind = r.str(s, "split_type", where)
        if kind == "FloatFeature":
            index = r.int(s, "float_feature_index", where, hi=1 << 20)
            f = self.floats.get(index)
            if f is None:
                r.fail(f"{where}.float_feature_index {index} names no float feature")
            border = r.num(s.get("border"), f"{where}.border")
            if abs(border) > _F32_MAX:
                r.fail(f"{where}.border {border!r} is beyond float32")
            # CatBoost reads borders as floats; the float32 they round to is what it compares.
            border = float(np.float32(border))
            self._binary(s, where, ("float", index, border))
            return trees.Split(f["flat"], border, nan_left=not f["nan_true"])
        if kind == "OneHotFeature":
            index = r.int(s, "cat_feature_index", where, hi=1 << 20)
            if index not in self.cats:
                r.fail(f"{where}.cat_feature_index {index} names no categorical feature")
            value = s.get("value")
            if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 31) <= value < 1 << 31:
                r.fail(f"{where}.value must be a 32-bit category hash, got {value!r}")
            value &= 0xFFFFFFFF
            self._binary(s, where, ("onehot", index, value))
            # a computed column: 1 where the category is ``value``, else 0 (a missing one too)
            column = self._computed(("onehot", index, value),
                                    lambda: categorical.one_hot_column(self.cats[index], value))
            return trees.Split(column, 0.5, nan_left=True)
        if kind == "OnlineCtr":
            kind, ctr, border = self._binary(s, where, None)
            if kind != "ctr" or r.num(s.get("border"), f"{where}.border") != border:
                r.fail(f"{where}: split_index names no CTR border, or another border")
            column = self._computed(("ctr", id(ctr)), lambda: self._ctr_column(ctr))
            # ``ctr > border`` in float32 is the condition: its false side (<=) goes left.  A
            # computed CTR column is never missing (an unknown or missing category: the prior).
            f32 = np.float32(border)
            prior = self.computed[column - self.num_features]["unknown"]
            return trees.Split(column, float(f32), nan_left=not bool(np.float32(prior) > f32))
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
            # A tree of depth 0 (one leaf: CatBoost grows one where no split gains) has no
            # splits, which CatBoost's JSON writes as null.
            splits = [] if t.get("splits", ()) is None else r.lst(t, "splits", where)
            if len(splits) > trees.MAX_OBLIVIOUS_DEPTH:
                r.fail(f"{where} has depth {len(splits)}, beyond CatBoost's {trees.MAX_OBLIVIOUS_DEPTH}")
            hsplits = [m.split(s, f"{where}.splits[{i}]") for i, s in enumerate(splits)]
            values = leaf_array(t.get("leaf_values"), 1 << len(splits), f"{where}.leaf_values")
            # CatBoost reads the model's dimension from leaf values per weight: weights must be
            # one finite number a leaf, or the file is not one it wrote
            weights = t.get("leaf_weights")
            if weights is not None and (not isinstance(weights, list) or len(weights) != 1 << len(splits)):
                r.fail(f"{where}.leaf_weights must have one weight a leaf")
            for w in weights or ():
                r.num(w, f"{where}.leaf_weights")
            out.append(trees.oblivious(hsplits, values, weights))
        else:
            def read_leaf(obj, where=where):
                v = obj.get("value")
                weight = obj.get("weight")
                if weight is not None:
                    r.num(weight, f"{where} leaf weight")
                return leaf_array(v if isinstance(v, list) else [v], 1, f"{where} leaf value")[0], weight

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
        num_features=m.num_features + len(m.computed),
        num_outputs=dim,
        base_score=np.asarray(bias, dtype=np.float64),
        # (the bias after the sum: an average over 1, exact; a model without one sums as any)
        aggregation=Aggregation.AVERAGE if any(bias) else Aggregation.SUM,
        average_divisor=1.0,
        transform=transform,
        threshold_dtype="float32",
        accumulate_dtype="float64",
        category_rule=CategoryRule.EXACT,
        feature_names=_feature_names(m),
        source="catboost",
        objective=loss,
        class_labels=_class_names(doc) if transform.name != "identity" else None,
        # every categorical column is hashed, for the computed columns: no split reads it itself
        hashed_categories={flat: [] for flat in m.cats.values()} or None,
        hashed_combinations=m.computed or None,
    )


def _feature_names(m: _Model) -> list[str] | None:
    names = [m.columns.get(i, "") for i in range(m.num_features)]
    # Models trained on arrays have no feature ids: rows are matched by position.
    return names if all(names) and len(set(names)) == len(names) else None

"""The XGBoost importer against XGBoost itself: every case's predictions and margins, random
rows with NaN and infinities, file detection, older JSON layouts, and error messages.

Over 600 lines because its sections edit the same module-scoped trained models (``small_model``,
``categorical_doc``): split, each file would train them again."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import support_xgboost as sx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silvanforge_importer_xgboost import trees_at_once, ubjson, xgboost_json
from support_common import Draws, assert_close

import silvanforge as sf
from silvanforge.errors import ModelFormatError, SilvanForgeError, UnsupportedModelError
from silvanforge.ir.hir import CategoryRule, Op
from silvanforge.runtime import reference

xgb = pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def cases(model_cases):
    """The factory's cases (support_xgboost.py), each trained once a session (tests/conftest.py)."""
    return model_cases["xgboost"]


def _train(params, X, y, rounds=5, **dm_kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xgb.train({"nthread": 1, "max_depth": 3, **params}, xgb.DMatrix(X, label=y, **dm_kwargs),
                         rounds)


# ---------------------------------------------------------------------------------------------
# differential: every case
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sx.case_names() + sx.importer_only_names())
def test_predictions_match_xgboost(name, cases):
    case = cases.get(name)
    forest = sf.load_model(case.path)
    assert forest.source == "xgboost"
    assert forest.threshold_dtype == "float32" and forest.accumulate_dtype == "float32"
    assert forest.category_rule is CategoryRule.XGBOOST
    assert_close(reference.predict(forest, case.X), case.expected, case)
    assert_close(reference.predict(forest, case.X, output_margin=True), case.expected_margin, case,
                 "margins")


def test_quick_cases_are_a_subset(cases):
    quick = cases.all(quick=True)
    assert [c.name for c in quick] == sx.case_names(quick=True)
    assert set(sx.case_names(quick=True)) < set(sx.case_names())
    assert len(quick) >= 4
    for case in quick:
        assert case.path.exists() and case.X.dtype == np.float32 and np.isnan(case.X).any()


@pytest.mark.parametrize("name,objective,transform,outputs", [
    ("reg_squarederror_json", "reg:squarederror", "identity", 1),
    ("binary_logistic_ubj", "binary:logistic", "sigmoid", 1),
    ("binary_hinge", "binary:hinge", "hinge", 1),
    ("multi_softprob_json", "multi:softprob", "softmax", 4),
    ("multi_softmax_ubj", "multi:softmax", "argmax", 5),
    ("count_poisson", "count:poisson", "exp", 1),
    ("survival_aft", "survival:aft", "exp", 1),
    ("reg_quantileerror_multi", "reg:quantileerror", "identity", 3),
    ("multi_target_vector_leaf", "reg:squarederror", "identity", 3),
])
def test_forest_metadata(name, objective, transform, outputs, cases):
    case = cases.get(name)
    forest = sf.load_model(case.path)
    assert forest.objective == objective
    assert forest.transform.name == transform
    assert forest.num_outputs == outputs
    assert forest.num_features == case.X.shape[1]
    assert all(np.all(t.op[t.left >= 0] == Op.LT) for t in forest.trees)


def test_structure_details(cases):
    rf = sf.load_model(cases.get("rf_multiclass").path)
    assert rf.num_trees == 3 * 3 * 3  # rounds x classes x parallel trees
    assert sorted({t.outputs for t in rf.trees}) == [(0,), (1,), (2,)]
    vec = sf.load_model(cases.get("multi_target_vector_leaf").path)
    assert all(t.outputs == (0, 1, 2) and t.leaf_value.shape[1] == 3 for t in vec.trees)
    cat = sf.load_model(cases.get("categorical_regression").path)
    assert cat.has_categorical()
    assert max(len(c) for t in cat.trees for c in t.categories.values()) > 1
    assert max(int(c.max()) for t in cat.trees for c in t.categories.values() if len(c)) >= 64
    legacy = sf.load_model(cases.get("legacy_1_7_softprob").path)
    assert legacy.feature_names == [f"f_{i}" for i in range(5)]
    assert sf.load_model(cases.get("reg_squarederror_json").path).feature_names is None


def test_json_and_ubjson_give_the_same_forest(tmp_path, rng):
    X = sx.categorical_data(rng, 300)
    booster = _train({"tree_method": "hist"}, X, sx.categorical_label(X, rng), 6,
                     feature_types=sx.CAT_TYPES, enable_categorical=True)
    booster.save_model(str(tmp_path / "m.json"))
    booster.save_model(str(tmp_path / "m.ubj"))
    a, b = sf.load_model(tmp_path / "m.json"), sf.load_model(tmp_path / "m.ubj")
    assert a.fingerprint() == b.fingerprint()


def test_ubjson_decodes_to_the_json_document(cases):
    for name in ("binary_logistic_ubj", "categorical_binary_ubj", "multi_target_vector_leaf",
                 "dart_binary"):
        booster = xgb.Booster(model_file=str(cases.get(name).path))
        from_json = json.loads(booster.save_raw("json"))
        from_ubj = ubjson.decode(bytes(booster.save_raw("ubj")))
        _assert_same_document(from_ubj, from_json, name)


def _assert_same_document(ub, js, where):
    if isinstance(js, dict):
        assert isinstance(ub, dict) and ub.keys() == js.keys(), where
        for k in js:
            _assert_same_document(ub[k], js[k], f"{where}.{k}")
    elif isinstance(js, list) and isinstance(ub, np.ndarray):
        expect = np.asarray(js, dtype=ub.dtype if ub.dtype.kind == "f" else np.float64)
        np.testing.assert_array_equal(ub.astype(expect.dtype), expect, err_msg=where)
    elif isinstance(js, list):
        assert isinstance(ub, list) and len(ub) == len(js), where
        for i, (u, j) in enumerate(zip(ub, js)):
            _assert_same_document(u, j, f"{where}[{i}]")
    elif isinstance(js, float):
        assert np.float32(ub) == np.float32(js), where
    else:
        assert ub == js, where


def test_ubjson_optimised_containers():
    import struct

    doc = (b"{" + b"i\x01a" + b"[$d#i\x03" + struct.pack(">3f", 1.5, -2.0, 0.25)
           + b"i\x01b" + b"[$L#U\x02" + struct.pack(">2q", -7, 2**40)
           + b"i\x01c" + b"[#i\x02" + b"SU\x02hiT"
           + b"i\x01d" + b"{$i#i\x02" + b"i\x01x\x05" + b"i\x01y\xfb"
           + b"i\x01e" + b"[NZFD" + struct.pack(">d", 0.1) + b"I" + struct.pack(">h", -300) + b"]"
           + b"}")
    out = ubjson.decode(doc)
    np.testing.assert_array_equal(out["a"], np.array([1.5, -2.0, 0.25], dtype=np.float32))
    assert out["a"].dtype == np.float32 and out["a"].dtype.isnative
    np.testing.assert_array_equal(out["b"], [-7, 2**40])
    assert out["c"] == ["hi", True]
    assert out["d"] == {"x": 5, "y": -5}
    assert out["e"] == [None, False, 0.1, -300]
    for bad in (doc[:-1], doc[:20], doc + b"x", b"[$q#i\x01\x00", b"[#i\xff", b"[" * 500 + b"]" * 500):
        with pytest.raises(ubjson.UBJSONError):
            ubjson.decode(bad)


# ---------------------------------------------------------------------------------------------
# random rows: NaN, infinities, values on and next to every threshold
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def random_row_models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("xgb_random_rows")
    rng = np.random.default_rng(3)
    X = sx.categorical_data(rng, 400)
    y = (sx.categorical_label(X, rng) > 1).astype(float)
    models = []
    for params, fmt in (({"objective": "binary:logistic", "tree_method": "hist", "max_depth": 5}, "ubj"),
                        ({"objective": "multi:softprob", "num_class": 3, "tree_method": "hist"}, "json")):
        labels = y if params["objective"].startswith("binary") else np.digitize(
            sx.categorical_label(X, rng), [0, 2]).astype(float)
        booster = _train(params, X, labels, 8, feature_types=sx.CAT_TYPES, enable_categorical=True)
        path = tmp / f"m.{fmt}"
        booster.save_model(str(path))
        forest = sf.load_model(path)
        thresholds = np.unique(np.concatenate(
            [t.threshold[t.left >= 0] for t in forest.trees])).astype(np.float32)
        near = np.concatenate([thresholds, np.nextafter(thresholds, np.float32(-np.inf)),
                               np.nextafter(thresholds, np.float32(np.inf))])
        models.append((booster, forest, near))
    return models


_SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 63.0, 64.0, 64.5, 99.0, 100.0, 1e30, -1e30,
            2.0**24, 2.0**24 - 1, 2.0**31, 3.4e38]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_rows_match_xgboost(random_row_models, data):
    which = data.draw(st.integers(0, len(random_row_models) - 1))
    booster, forest, near = random_row_models[which]
    value = st.one_of(
        st.sampled_from(_SPECIAL),
        st.sampled_from(near.tolist()),
        st.floats(width=32, allow_nan=True, allow_infinity=True),
        st.integers(-5, 120).map(float),
    )
    n = data.draw(st.integers(1, 12))
    X = np.array(data.draw(st.lists(st.lists(value, min_size=5, max_size=5), min_size=n, max_size=n)),
                 dtype=np.float32)
    expected = booster.inplace_predict(X)  # a DMatrix refuses infinities; inplace_predict takes them
    margin = booster.inplace_predict(X, predict_type="margin")
    np.testing.assert_allclose(reference.predict(forest, X), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(reference.predict(forest, X, output_margin=True), margin, rtol=1e-5,
                               atol=1e-6)


# ---------------------------------------------------------------------------------------------
# shapes of the document: renumbered / deleted nodes, zero trees
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """(booster, JSON document, X with NaN) of a small binary model."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(200, 4)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(float)
    booster = _train({"objective": "binary:logistic"}, X, y, 4)
    booster.feature_names = ["a", "b", "c", "d"]
    Xt = X.copy()
    Xt[rng.random(Xt.shape) < 0.1] = np.nan
    return booster, json.loads(booster.save_raw("json")), Xt


def _write(tmp_path, doc, name="m.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _trees(doc):
    return doc["learner"]["gradient_booster"]["model"]["trees"]


def _permuted_with_deleted(doc):
    """``doc`` with every tree's nodes but the root shuffled and two unreachable ("deleted")
    nodes appended."""
    doc = json.loads(json.dumps(doc))
    rng = np.random.default_rng(0)
    for tree in _trees(doc):
        n = int(tree["tree_param"]["num_nodes"])
        # Keep the root at 0, shuffle the rest, and append two unreachable ("deleted") nodes.
        perm = np.concatenate([[0], 1 + rng.permutation(n - 1)])
        new_of = np.empty(n, dtype=int)
        new_of[perm] = np.arange(n)
        per_node = [k for k, v in tree.items() if isinstance(v, list) and len(v) == n]
        for key in per_node:
            tree[key] = [tree[key][i] for i in perm] + [tree[key][0]] * 2
        for key in ("left_children", "right_children"):
            tree[key] = [int(new_of[c]) if c >= 0 else -1 for c in tree[key][:n]] + [-1, -1]
        tree["tree_param"]["num_nodes"] = str(n + 2)
        tree["categories_nodes"] = []
    return doc


def test_permuted_and_deleted_nodes(small_model, tmp_path):
    booster, doc, X = small_model
    doc = _permuted_with_deleted(doc)
    forest = sf.load_model(_write(tmp_path, doc))
    assert forest.feature_names == ["a", "b", "c", "d"]
    np.testing.assert_allclose(reference.predict(forest, X), booster.predict(xgb.DMatrix(X, feature_names=booster.feature_names)),
                               rtol=1e-6, atol=1e-7)
    assert all(t.num_nodes == int(tj["tree_param"]["num_nodes"]) - 2
               for t, tj in zip(forest.trees, _trees(doc)))


@pytest.mark.parametrize("objective, base_score", [("binary:logistic", 0.2), ("binary:logistic", None),
                                                   ("reg:logistic", None), ("count:poisson", None),
                                                   ("reg:gamma", 2.0), ("reg:squarederror", None)])
def test_zero_trees(tmp_path, objective, base_score):
    """No round trained: XGBoost's predictions, whose base_score is the margin itself where the
    intercept was left to estimate (a binary:logistic model predicts 0.622) and its link's
    inverse of the margin where it was given."""
    X = np.random.default_rng(1).normal(size=(50, 3)).astype(np.float32)
    params = {"objective": objective, **({} if base_score is None else {"base_score": base_score})}
    booster = _train(params, X, np.abs(X[:, 0]) + (X[:, 0] > 0), 0)
    booster.save_model(str(tmp_path / "m.json"))
    forest = sf.load_model(tmp_path / "m.json")
    assert forest.num_trees == 0
    np.testing.assert_array_equal(reference.predict(forest, X, output_margin=True),
                                  booster.predict(xgb.DMatrix(X), output_margin=True))
    np.testing.assert_array_equal(sf.compile(forest).predict(X), booster.predict(xgb.DMatrix(X)))
    # leaf ids and tree values of no trees: a column of none for each row (were a reshape error)
    cf = sf.compile(forest)
    assert cf.predict(X, pred_leaf=True).shape == (50, 0) and cf.predict(X, pred_leaf=True).dtype == np.float32
    assert cf.predict(X[:1], per_tree=True).shape == (1, 0)


@pytest.mark.parametrize("objective,label", [("binary:logistic", 0.0), ("binary:logistic", 1.0),
                                             ("reg:logistic", 1.0), ("count:poisson", 0.0)])
def test_degenerate_intercepts(tmp_path, objective, label):
    # All labels equal: XGBoost 3.x stores an intercept of 0 or 1, bounds it for the logit,
    # and for log links predicts a margin of -inf.
    X = np.random.default_rng(1).normal(size=(80, 3)).astype(np.float32)
    booster = _train({"objective": objective}, X, np.full(80, label), 2)
    booster.save_model(str(tmp_path / "m.ubj"))
    forest = sf.load_model(tmp_path / "m.ubj")
    dm = xgb.DMatrix(X)
    np.testing.assert_array_equal(reference.predict(forest, X, output_margin=True),
                                  booster.predict(dm, output_margin=True))
    np.testing.assert_allclose(reference.predict(forest, X), booster.predict(dm), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("spelling", ["0.3", "3E-1", "[3E-1]", " [ 3E-1 ] ", 0.3, [0.3]])
def test_base_score_spellings(small_model, tmp_path, spelling):
    _, doc, X = small_model
    doc = json.loads(json.dumps(doc))
    doc["learner"]["learner_model_param"]["base_score"] = spelling
    forest = sf.load_model(_write(tmp_path, doc))
    ref = xgb.Booster()
    doc["learner"]["learner_model_param"]["base_score"] = "3E-1"
    ref.load_model(bytearray(json.dumps(doc).encode()))
    np.testing.assert_array_equal(reference.predict(forest, X, output_margin=True),
                                  ref.predict(xgb.DMatrix(X, feature_names=ref.feature_names), output_margin=True))


# ---------------------------------------------------------------------------------------------
# detection
# ---------------------------------------------------------------------------------------------


def test_detected_by_content_not_extension(small_model, tmp_path):
    booster, doc, _ = small_model
    (tmp_path / "model.txt").write_bytes(booster.save_raw("json"))
    (tmp_path / "model.json").write_bytes(booster.save_raw("ubj"))
    (tmp_path / "pretty.bin").write_text("\ufeff\n  " + json.dumps(doc, indent=2))
    prints = {sf.load_model(tmp_path / n).fingerprint() for n in ("model.txt", "model.json", "pretty.bin")}
    assert len(prints) == 1
    head = (tmp_path / "model.json").read_bytes()[:4096]
    assert xgboost_json.detect_ubjson("x", head) and not xgboost_json.detect_json("x", head)


@settings(max_examples=200, deadline=None)
@given(head=st.one_of(
    st.binary(max_size=300),
    st.binary(max_size=300).map(lambda b: b"{" + b),
    st.text(max_size=200).map(lambda s: ('{"' + s).encode("utf-8", "surrogatepass")),
))
def test_detect_never_raises(head):
    for detect in (xgboost_json.detect_json, xgboost_json.detect_ubjson):
        assert detect("m", head) in (True, False)


@pytest.mark.parametrize("head", [b"", b"tree\nversion=v4\n", b"\x08\x07\x12\x07learner",
                                  b'{"producer": "onnx"}', b'["learner"]', b"learner"])
def test_not_detected(head):
    assert not xgboost_json.detect_json("m", head)
    assert not xgboost_json.detect_ubjson("m", head)


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------


def _edit(doc, fn):
    doc = json.loads(json.dumps(doc))
    fn(doc)
    return doc


def _tree0(doc):
    return _trees(doc)[0]


_BAD_DOCUMENTS = [
    ("no learner", lambda d: d.pop("learner"), "no top-level 'learner'"),
    ("no model param", lambda d: d["learner"].pop("learner_model_param"), "learner_model_param"),
    ("no trees", lambda d: d["learner"]["gradient_booster"]["model"].pop("trees"), "'trees'"),
    ("no tree_info", lambda d: d["learner"]["gradient_booster"]["model"].pop("tree_info"), "tree_info"),
    ("no left_children", lambda d: _tree0(d).pop("left_children"), "left_children"),
    ("trees not a list", lambda d: d["learner"]["gradient_booster"]["model"].update(trees={}),
     "should be an array"),
    ("children not numbers", lambda d: _tree0(d).update(left_children="oops"), "left_children"),
    ("child out of range", lambda d: _tree0(d)["left_children"].__setitem__(0, 999), "outside"),
    ("negative child", lambda d: _tree0(d)["right_children"].__setitem__(0, -5), "outside"),
    ("feature out of range", lambda d: _tree0(d)["split_indices"].__setitem__(0, 4), "feature 4"),
    ("group out of range", lambda d: d["learner"]["gradient_booster"]["model"]["tree_info"].__setitem__(0, 3),
     "output 3"),
    ("short array", lambda d: _tree0(d)["split_conditions"].pop(), "split_conditions"),
    ("cycle", lambda d: _tree0(d)["left_children"].__setitem__(1, 0), "reached twice"),
    ("tree missing", lambda d: d["learner"]["gradient_booster"]["model"]["trees"].pop(), "num_trees"),
    ("bad base_score", lambda d: d["learner"]["learner_model_param"].update(base_score="abc"), "base_score"),
    ("base_score length", lambda d: d["learner"]["learner_model_param"].update(base_score="[1,2]"),
     "base_score"),
    ("logistic base_score", lambda d: d["learner"]["learner_model_param"].update(base_score="2"),
     "outside (0, 1)"),
    ("bad num_feature", lambda d: d["learner"]["learner_model_param"].update(num_feature="four"),
     "num_feature"),
    ("bad num_nodes", lambda d: _tree0(d)["tree_param"].update(num_nodes="-1"), "num_nodes"),
    ("bad split_type", lambda d: _tree0(d)["split_type"].__setitem__(0, 7), "split_type"),
    ("category segment", lambda d: _tree0(d).update(split_type=[1] + _tree0(d)["split_type"][1:],
                                                    categories_nodes=[0], categories_segments=[0],
                                                    categories_sizes=[5], categories=[1]),
     "categories"),
    ("objective not an object", lambda d: d["learner"].update(objective=[1]), "objective"),
]


@pytest.mark.parametrize("what,edit,message", _BAD_DOCUMENTS, ids=[b[0] for b in _BAD_DOCUMENTS])
@pytest.mark.parametrize("fmt", ["json", "ubj"])
def test_broken_documents(small_model, tmp_path, what, edit, message, fmt):
    _, doc, _ = small_model
    path = _write(tmp_path, _edit(doc, edit))
    if fmt == "ubj":  # the same broken document, spelled in UBJSON by a tiny encoder
        path = tmp_path / "m.ubj"
        path.write_bytes(_ubj(_edit(doc, edit)))
    loader = xgboost_json.load_json if fmt == "json" else xgboost_json.load_ubjson
    with pytest.raises(ModelFormatError) as info:
        loader(path)
    assert str(path) in str(info.value) and message in str(info.value)


def _ubj(value) -> bytes:
    import struct

    if isinstance(value, dict):
        out = b"{"
        for k, v in value.items():
            kb = k.encode()
            out += b"L" + struct.pack(">q", len(kb)) + kb + _ubj(v)
        return out + b"}"
    if isinstance(value, list):
        if value and all(isinstance(v, float) for v in value):
            return b"[$d#L" + struct.pack(">q", len(value)) + np.asarray(value, ">f4").tobytes()
        return b"[" + b"".join(_ubj(v) for v in value) + b"]"
    if isinstance(value, bool):
        return b"T" if value else b"F"
    if isinstance(value, int):
        return b"L" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"d" + struct.pack(">f", value)
    if isinstance(value, str):
        vb = value.encode()
        return b"SL" + struct.pack(">q", len(vb)) + vb
    assert value is None
    return b"Z"


def test_malformed_and_truncated_files(small_model, tmp_path):
    booster, doc, _ = small_model
    text = json.dumps(doc)
    cases = {
        "syntax.json": (text.replace(",", ";", 3), "malformed JSON"),
        "truncated.json": (text[: len(text) // 2], "truncated"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_text(content)
        with pytest.raises(ModelFormatError, match=message) as info:
            sf.load_model(tmp_path / name)
        assert str(tmp_path / name) in str(info.value)
    raw = bytes(booster.save_raw("ubj"))
    (tmp_path / "truncated.ubj").write_bytes(raw[: len(raw) * 2 // 3])
    with pytest.raises(ModelFormatError, match="truncated") as info:
        sf.load_model(tmp_path / "truncated.ubj")
    assert "truncated.ubj" in str(info.value)
    (tmp_path / "binary.json").write_bytes(raw)
    with pytest.raises(ModelFormatError, match="not UTF-8"):
        sf.load_model(tmp_path / "binary.json", fmt="xgboost-json")
    (tmp_path / "other.json").write_text('{"weights": [1, 2, 3]}')
    with pytest.raises(ModelFormatError, match="not an XGBoost model"):
        sf.load_model(tmp_path / "other.json", fmt="xgboost-json")
    (tmp_path / "empty.json").write_bytes(b"")
    with pytest.raises(ModelFormatError):
        xgboost_json.load_json(tmp_path / "empty.json")
    with pytest.raises(ModelFormatError, match="cannot read"):
        xgboost_json.load_ubjson(tmp_path / "no-such-file.ubj")


def test_every_truncation_is_a_clean_error(small_model, tmp_path):
    booster, _, _ = small_model
    raw = bytes(booster.save_raw("ubj"))
    text = bytes(booster.save_raw("json"))
    path = tmp_path / "cut"
    for data, loader in ((raw, xgboost_json.load_ubjson), (text, xgboost_json.load_json)):
        for cut in range(1, len(data), max(1, len(data) // 300)):
            path.write_bytes(data[:cut])
            with pytest.raises(ModelFormatError):
                loader(path)


def test_corrupt_bytes_never_crash(small_model, tmp_path):
    """Bytes overwritten anywhere in a model file: refused with a SilvanForgeError, or loaded as
    a forest the evaluator runs.  Any byte for any byte makes almost every JSON file invalid
    UTF-8, so half the bytes written are digits (a number changed keeps the document well
    formed), and enough of the mutants must load for the second half to be checked."""
    booster, _, X = small_model
    draws = Draws()

    @settings(max_examples=150, deadline=None)
    @given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True),
                                    st.one_of(st.integers(0, 255), st.sampled_from(b"0123456789"))),
                          min_size=1, max_size=4),
           use_ubj=st.booleans())
    def check(flips, use_ubj):
        data = bytearray(booster.save_raw("ubj" if use_ubj else "json"))
        # The loader itself works on the bytes before they are corrupted (a loader that refused
        # everything would otherwise pass): the model's margins are the library's.
        whole = tmp_path / "whole"
        whole.write_bytes(bytes(data))
        np.testing.assert_allclose(reference.predict(sf.load_model(whole, fmt="xgboost-ubjson" if use_ubj else "xgboost-json"),
                                                     X, output_margin=True),
                                   booster.predict(xgb.DMatrix(X, feature_names=booster.feature_names), output_margin=True),
                                   rtol=1e-6, atol=1e-6)
        for where, byte in flips:
            data[int(where * len(data))] = byte
        path = tmp_path / "corrupt"
        path.write_bytes(bytes(data))
        try:
            forest = sf.load_model(path, fmt="xgboost-ubjson" if use_ubj else "xgboost-json")
        except SilvanForgeError:
            draws.count("refused")
            return
        if forest.num_features > 1000:  # (a row would be huge)
            draws.count("loaded, too wide to evaluate")
            return
        # whatever loads is a forest the evaluator can run
        reference.predict(forest, np.zeros((2, forest.num_features), dtype=np.float32))
        draws.count("loaded")

    check()
    draws.assert_share("loaded", 0.02)


def test_unsupported_models(small_model, tmp_path):
    _, doc, _ = small_model
    X = np.random.default_rng(2).normal(size=(60, 3)).astype(np.float32)
    linear = _train({"booster": "gblinear"}, X, X[:, 0], 2)
    linear.save_model(str(tmp_path / "linear.json"))
    with pytest.raises(UnsupportedModelError, match="gblinear") as info:
        sf.load_model(tmp_path / "linear.json")
    assert "linear.json" in str(info.value)
    linear.save_model(str(tmp_path / "linear.ubj"))
    with pytest.raises(UnsupportedModelError, match="gblinear"):
        sf.load_model(tmp_path / "linear.ubj")
    odd = _edit(doc, lambda d: d["learner"]["objective"].update(name="reg:mystery"))
    with pytest.raises(UnsupportedModelError, match="reg:mystery"):
        sf.load_model(_write(tmp_path, odd))
    odd = _edit(doc, lambda d: d["learner"]["gradient_booster"].update(name="gbforest"))
    with pytest.raises(UnsupportedModelError, match="gbforest"):
        sf.load_model(_write(tmp_path, odd))


# ---------------------------------------------------------------------------------------------
# odd but loadable files: what XGBoost itself makes of them
# ---------------------------------------------------------------------------------------------


def _xgb_predict(data: bytes, X, margin=False):
    booster = xgb.Booster(model_file=bytearray(data))
    return booster.predict(xgb.DMatrix(X, feature_names=booster.feature_names), output_margin=margin)


def _ubj_default_left(raw: bytes, value: int) -> bytes:
    """Every tree's typed ``default_left`` array (``[$U#L<count>`` then one byte a node) set to
    ``value``, as a hex editor would."""
    out, pos, key = bytearray(raw), 0, b"default_left[$U#L"
    while (pos := raw.find(key, pos)) >= 0:
        start = pos + len(key)
        count = int.from_bytes(raw[start:start + 8], "big")
        out[start + 8:start + 8 + count] = bytes([value]) * count
        pos = start + 8 + count
    assert out != bytearray(raw) or value == 0
    return bytes(out)


@pytest.mark.parametrize("value", [2, 256, 10**9, -1, 1, True, False])
def test_default_left_reads_like_xgboost_json(small_model, tmp_path, value):
    # XGBoost's JSON loader reads an integer default_left as ``value == 1``: 2, 256 and 10**9 send
    # missing values right.
    _, doc, X = small_model
    doc = _edit(doc, lambda d: [t.update(default_left=[value] * len(t["default_left"])) for t in _trees(d)])
    path = _write(tmp_path, doc)
    forest = sf.load_model(path)
    expected = _xgb_predict(path.read_bytes(), X, margin=True)
    np.testing.assert_allclose(reference.predict(forest, X, output_margin=True), expected, rtol=1e-6)
    left = value is True or value == 1
    assert all(bool(t.default_left[t.left >= 0].all()) == left for t in forest.trees)


@pytest.mark.parametrize("value", [2, 255, 1, 0])
def test_default_left_reads_like_xgboost_ubjson(small_model, tmp_path, value):
    booster, _, X = small_model
    data = _ubj_default_left(bytes(booster.save_raw("ubj")), value)
    path = tmp_path / "m.ubj"
    path.write_bytes(data)
    forest = sf.load_model(path)
    expected = _xgb_predict(data, X, margin=True)
    np.testing.assert_allclose(reference.predict(forest, X, output_margin=True), expected, rtol=1e-6)
    np.testing.assert_allclose(sf.compile(forest).predict(X, output_margin=True), expected, rtol=1e-6)


def test_default_left_as_a_float_is_refused_like_xgboost(small_model, tmp_path):
    _, doc, _ = small_model
    path = _write(tmp_path, _edit(doc, lambda d: _tree0(d)["default_left"].__setitem__(0, 1.0)))
    with pytest.raises(xgb.core.XGBoostError):
        _xgb_predict(path.read_bytes(), np.zeros((1, 4), np.float32))
    with pytest.raises(ModelFormatError, match="default_left"):
        sf.load_model(path)


@pytest.mark.parametrize("objective", ["multi:softprob", "multi:softmax"])
@pytest.mark.parametrize("param", [None, "0", "2"])
def test_multiclass_objective_without_classes_is_refused(small_model, tmp_path, objective, param):
    # A binary model relabelled multi-class with num_class 0: XGBoost refuses it (it used to
    # predict 1.0 everywhere here).
    _, doc, X = small_model

    def edit(d):
        d["learner"]["objective"] = {"name": objective}
        if param is not None:
            d["learner"]["objective"]["softmax_multiclass_param"] = {"num_class": param}
        d["learner"]["learner_model_param"]["num_class"] = "0"

    path = _write(tmp_path, _edit(doc, edit))
    with pytest.raises(xgb.core.XGBoostError):
        _xgb_predict(path.read_bytes(), X)
    with pytest.raises(ModelFormatError, match="num_class"):
        sf.load_model(path)


@pytest.fixture(scope="module")
def categorical_doc():
    """(JSON document, X) of a small model with categorical splits on feature 0."""
    rng = np.random.default_rng(4)
    X = np.column_stack([rng.integers(0, 8, 300), rng.normal(size=300)]).astype(np.float32)
    y = np.isin(X[:, 0], [1, 4, 6]) * 2.0 + X[:, 1]
    booster = _train({"tree_method": "hist", "max_cat_to_onehot": 1}, X, y, 3,
                     feature_types=["c", "q"], enable_categorical=True)
    Xt = np.array([[c, v] for c in [0, 1, 2, 3, 4, 5, 6, 7, 8, 40, 2.0**24 - 1, 2.0**24 + 7, 1e9, -1, np.nan]
                   for v in (-1.0, 1.0)], np.float32)
    doc = json.loads(booster.save_raw("json"))
    assert any(t["categories"] for t in _trees(doc))
    return doc, Xt


def _with_category(doc, value):
    """Every categorical split's first category replaced by ``value``."""
    def edit(d):
        for t in _trees(d):
            for seg in t["categories_segments"]:
                t["categories"][seg] = value
    return _edit(doc, edit)


def _cat_predict(data: bytes, X):
    booster = xgb.Booster(model_file=bytearray(data))
    return booster.predict(xgb.DMatrix(X, feature_types=["c", "q"], enable_categorical=True),
                           output_margin=True)


@pytest.mark.parametrize("value", [2**24 - 1, 2**24 + 7])
def test_large_categories_match_xgboost(categorical_doc, tmp_path, value):
    # Categories at or past 2**24 are no category when predicting: such set members never match
    # and are not laid out.
    doc, X = categorical_doc
    path = _write(tmp_path, _with_category(doc, value))
    forest = sf.load_model(path)
    assert max(int(c.max()) for t in forest.trees for c in t.categories.values() if len(c)) < 2**24
    expected = _cat_predict(path.read_bytes(), X)
    np.testing.assert_allclose(reference.predict(forest, X, output_margin=True), expected, rtol=1e-6)
    np.testing.assert_allclose(sf.compile(forest).predict(X, output_margin=True), expected, rtol=1e-6)


@pytest.mark.parametrize("value", [2**31 - 1, 2**31, 2**40])
def test_category_beyond_32_bits_is_refused(categorical_doc, tmp_path, value):
    # A 10 KB file naming category 2**31 - 1 used to lay out a 256 MiB bitset (662 MB in all);
    # XGBoost itself fails to allocate it (and crashes on larger values).
    doc, _ = categorical_doc
    path = _write(tmp_path, _with_category(doc, value))
    if value == 2**31 - 1:
        with pytest.raises(xgb.core.XGBoostError, match="bad_alloc"):
            _cat_predict(path.read_bytes(), np.zeros((1, 2), np.float32))
    with pytest.raises(ModelFormatError, match=str(value)):
        sf.load_model(path)


def test_large_categories_allocate_little(categorical_doc, tmp_path):
    # The largest category XGBoost loads: every bitset past 2**24 is dropped, so loading and
    # compiling stay small (XGBoost itself allocates 256 MiB for it).
    import tracemalloc

    doc, X = categorical_doc
    path = _write(tmp_path, _with_category(doc, 2**31 - 2))
    tracemalloc.start()
    try:
        cf = sf.compile(sf.load_model(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, f"{peak / 2**20:.0f} MiB traced"
    expected = _cat_predict(_write(tmp_path, _with_category(doc, 2**24 + 7), "ref.json").read_bytes(), X)
    np.testing.assert_allclose(cf.predict(X, output_margin=True), expected, rtol=1e-6)


@pytest.fixture(scope="module")
def softprob_doc():
    """(JSON document, X with NaN) of a 3-class softprob model (2 rounds, 6 trees)."""
    rng = np.random.default_rng(12)
    X = rng.normal(size=(200, 4)).astype(np.float32)
    y = np.digitize(X[:, 0] - X[:, 2], [-0.5, 0.5])
    booster = _train({"objective": "multi:softprob", "num_class": 3}, X, y, 2)
    X[rng.random(X.shape) < 0.1] = np.nan
    return json.loads(booster.save_raw("json")), X


def _same_as_xgboost(path, X):
    expected = _xgb_predict(path.read_bytes(), X, margin=True)
    np.testing.assert_allclose(reference.predict(sf.load_model(path), X, output_margin=True), expected,
                               rtol=1e-6, atol=1e-7)


def test_trees_are_placed_by_their_id(softprob_doc, tmp_path):
    # XGBoost puts each tree where its "id" says: the array's order does not matter.
    doc, X = softprob_doc
    path = _write(tmp_path, _edit(doc, lambda d: _trees(d).reverse()))
    _same_as_xgboost(path, X)
    np.testing.assert_array_equal(reference.predict(sf.load_model(path), X),
                                  reference.predict(sf.load_model(_write(tmp_path, doc, "o.json")), X))
    bad = _edit(doc, lambda d: _trees(d)[1].update(id=0))
    with pytest.raises(ModelFormatError, match="tree ids"):
        sf.load_model(_write(tmp_path, bad, "dup.json"))


def test_iteration_indptr_decides_the_trees(softprob_doc, tmp_path):
    # XGBoost predicts with trees iteration_indptr[0] up to its last entry.
    doc, X = softprob_doc
    model = lambda d: d["learner"]["gradient_booster"]["model"]  # noqa: E731
    _same_as_xgboost(_write(tmp_path, _edit(doc, lambda d: model(d)["iteration_indptr"].__setitem__(0, 3))), X)
    _same_as_xgboost(_write(tmp_path, _edit(doc, lambda d: model(d).update(iteration_indptr=[6]))), X)
    with pytest.raises(ModelFormatError, match="iteration_indptr"):
        sf.load_model(_write(tmp_path, _edit(doc, lambda d: model(d)["iteration_indptr"].__setitem__(-1, 5))))


def test_categorical_split_type_without_categories_is_numerical(small_model, tmp_path):
    # A tree that stores no category is evaluated numerically whatever split_type says.
    _, doc, X = small_model
    _same_as_xgboost(_write(tmp_path, _edit(doc, lambda d: _tree0(d)["split_type"].__setitem__(0, 1))), X)


def test_categories_out_of_node_order_are_refused(categorical_doc, tmp_path):
    # XGBoost hands categories out walking the nodes in order: an entry whose node comes
    # before the previous one's is never read.  Such a file is refused.
    doc, _ = categorical_doc

    def edit(d):
        t = next(t for t in _trees(d) if t["categories_nodes"])
        t["categories_nodes"] = t["categories_nodes"] * 2
        t["categories_segments"] = t["categories_segments"] * 2
        t["categories_sizes"] = t["categories_sizes"] * 2

    with pytest.raises(ModelFormatError, match="increasing node order"):
        sf.load_model(_write(tmp_path, _edit(doc, edit)))


@pytest.mark.parametrize("spelling,accepted", [("-inf", False), ("0.25abc", False), ("nan", False),
                                               ("NaN", True), ("Infinity", True), ("1.", True)])
def test_base_score_read_as_xgboost_reads_it(tmp_path, spelling, accepted):
    # XGBoost's JSON reader takes "-inf" as 0 and "0.25abc" as 0.25 (and refuses "nan"):
    # only what it reads whole is accepted, and then it equals XGBoost.
    X = np.random.default_rng(3).normal(size=(40, 3)).astype(np.float32)
    doc = json.loads(_train({"objective": "reg:squarederror"}, X, X[:, 0], 2).save_raw("json"))
    path = _write(tmp_path, _edit(doc, lambda d: d["learner"]["learner_model_param"].update(base_score=spelling)))
    if accepted:
        _same_as_xgboost(path, X)
    else:
        with pytest.raises(ModelFormatError, match="base_score"):
            sf.load_model(path)


@pytest.mark.parametrize("key", ["num_class", "num_target"])
def test_millions_of_outputs_need_a_file_to_match(small_model, tmp_path, key):
    # A few KB claiming 2**24 outputs: XGBoost loads it (broadcasting base_score); here it would
    # cost memory for every row predicted, so it is refused.
    _, doc, _ = small_model

    def edit(d):
        d["learner"]["learner_model_param"][key] = str(2**24)
        d["learner"]["objective"] = {"name": "multi:softprob" if key == "num_class" else "reg:squarederror"}

    with pytest.raises(UnsupportedModelError, match="16777216 outputs"):
        sf.load_model(_write(tmp_path, _edit(doc, edit)))


# ---------------------------------------------------------------------------------------------
# every tree at once (trees_at_once) against the tree-by-tree reading
# ---------------------------------------------------------------------------------------------


def _read_both_ways(monkeypatch, path):
    """(the forest read with every tree at once, whether it was, the forest read tree by tree)."""
    real, results = trees_at_once.read_trees, []
    with monkeypatch.context() as m:
        m.setattr(trees_at_once, "read_trees", lambda *a, **k: results.append(real(*a, **k)) or results[-1])
        at_once = sf.load_model(path)
    with monkeypatch.context() as m:
        m.setattr(trees_at_once, "read_trees", lambda *a, **k: None)
        by_tree = sf.load_model(path)
    return at_once, results[0] is not None, by_tree


def _assert_same_trees(a, b):
    assert a.fingerprint() == b.fingerprint() and a.num_trees == b.num_trees
    for s, t in zip(a.trees, b.trees):
        for name in ("left", "right", "feature", "threshold", "op", "default_left", "zero_missing",
                     "leaf_value", "cover", "node_ids"):
            x, y = getattr(s, name), getattr(t, name)
            assert (x is None) == (y is None), name
            if x is not None:
                assert (x.dtype, x.shape, x.tobytes()) == (y.dtype, y.shape, y.tobytes()), name
        assert s.outputs == t.outputs and list(s.categories) == list(t.categories)
        for node, cats in s.categories.items():
            assert (cats.dtype, cats.tobytes()) == (t.categories[node].dtype, t.categories[node].tobytes())


@pytest.mark.parametrize("name", sx.case_names() + sx.importer_only_names())
def test_trees_read_at_once_as_tree_by_tree(name, cases, monkeypatch):
    at_once, read, by_tree = _read_both_ways(monkeypatch, cases.get(name).path)
    assert read == ("vector_leaf" not in name)  # vector leaves are read a tree at a time
    _assert_same_trees(at_once, by_tree)


def _float_as_int(d):
    # A leaf value written as a JSON integer: its tree's list no longer holds floats only.
    tree = _tree0(d)
    leaf = tree["left_children"].index(-1)
    tree["split_conditions"][leaf] = 0


_EDITED = [
    ("permuted and deleted nodes", "small", _permuted_with_deleted, True),
    ("categorical split_type, no categories", "small",
     lambda doc: _edit(doc, lambda d: _tree0(d)["split_type"].__setitem__(0, 1)), True),
    ("default_left as booleans", "small",
     lambda doc: _edit(doc, lambda d: [t.update(default_left=[v == 1 for v in t["default_left"]])
                                       for t in _trees(d)]), True),
    ("default_left of 2", "small",
     lambda doc: _edit(doc, lambda d: [t.update(default_left=[2] * len(t["default_left"])) for t in _trees(d)]),
     True),
    ("no sum_hessian", "small", lambda doc: _edit(doc, lambda d: [t.pop("sum_hessian") for t in _trees(d)]), True),
    ("sum_hessian in some trees", "small", lambda doc: _edit(doc, lambda d: _tree0(d).pop("sum_hessian")), False),
    ("an integer leaf value", "small", lambda doc: _edit(doc, _float_as_int), False),
    ("categories past 2**24", "categorical", lambda doc: _with_category(doc, 2**24 + 7), True),
    ("trees in reverse", "softprob", lambda doc: _edit(doc, lambda d: _trees(d).reverse()), True),
    ("iteration_indptr from tree 3", "softprob",
     lambda doc: _edit(doc, lambda d: d["learner"]["gradient_booster"]["model"]["iteration_indptr"].__setitem__(0, 3)),
     True),
]


@pytest.mark.parametrize("what,model,edit,read", _EDITED, ids=[e[0] for e in _EDITED])
def test_edited_trees_read_at_once_as_tree_by_tree(small_model, categorical_doc, softprob_doc, tmp_path,
                                                   monkeypatch, what, model, edit, read):
    # What the tree-by-tree reading reads otherwise than the whole-forest one may (here: a tree
    # without sum_hessian among trees with it, an integer among floats) is left to it.
    doc = {"small": small_model[1], "categorical": categorical_doc[0], "softprob": softprob_doc[0]}[model]
    at_once, was_read, by_tree = _read_both_ways(monkeypatch, _write(tmp_path, edit(doc)))
    assert was_read == read
    _assert_same_trees(at_once, by_tree)


def test_document_trees_are_released_once_read(small_model):
    # The importer empties its parsed document's trees before making the HIR's (a large model's
    # document is four times its file), only once they are all read: not when they are left to
    # the tree-by-tree reading.
    _, doc, _ = small_model
    for tree0_feature, expected in ((0, True), (99, False)):
        trees = _trees(_edit(doc, lambda d: _tree0(d)["split_indices"].__setitem__(0, tree0_feature)))
        released = []
        out = trees_at_once.read_trees(trees, list(range(len(trees))), np.zeros(len(trees), np.int64), None,
                                       4, 1, lambda *a: {}, release=lambda: released.append(True))
        assert (out is not None, released) == (expected, [True] if expected else [])

"""Differential tests of the ONNX tree-ensemble importer against onnxruntime.

The reference evaluator run on the imported HIR must give what onnxruntime gives for the
ensemble's scores, to float32 rounding (rtol 1e-5, atol 1e-6; PROBIT cases allow 3e-4
absolute, see ``support_onnx.PROBIT_ATOL``), for every case in ``support_onnx``, for random
rows built from NaN, infinities and the models' own thresholds, and malformed or unsupported
files must fail with a clear ``ModelFormatError`` / ``UnsupportedModelError`` naming the file.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silvanforge_importer_onnx import onnx_trees

import silvanforge as sf
from silvanforge.errors import ModelFormatError, SilvanForgeError, UnsupportedModelError
from silvanforge.ir.hir import CategoryRule, Op
from silvanforge.runtime import reference

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
import support_onnx as S
from onnx import TensorProto as TP
from onnx import helper as oh
from support_common import assert_close


@pytest.fixture(scope="module")
def cases(model_cases):
    """The factory's cases (support_onnx.py), each trained once a session (tests/conftest.py)."""
    return model_cases["onnx"]


# ---------------------------------------------------------------------------- differential
@pytest.mark.parametrize("name", S.case_names())
def test_predictions_match_onnxruntime(name, cases):
    case = cases.get(name)
    forest = sf.load_model(case.path)
    assert forest.source == "onnx"
    assert forest.output_shape == "matrix"
    got = reference.predict(forest, case.X)
    assert_close(got, case.expected, case)


def test_quick_subset(cases):
    quick = S.case_names(quick=True)
    assert set(quick) <= set(S.case_names())
    assert 4 <= len(quick) < len(S.case_names())
    built = cases.all(quick=True)
    assert [c.name for c in built] == quick
    for c in built:
        assert c.path.exists() and c.expected.shape[0] == c.X.shape[0]


# ---------------------------------------------------------------------------- metadata
@pytest.mark.parametrize("name,objective,labels,k", [
    ("skl_dt_multi_strlabels", "TreeEnsembleClassifier:NONE", ["ash", "birch", "cedar"], 3),
    ("xgb_multi", "TreeEnsembleClassifier:SOFTMAX", [0, 1, 2], 3),
    ("xgb_bin", "TreeEnsembleClassifier:LOGISTIC", [0, 1], 2),
    ("skl_rf_reg", "TreeEnsembleRegressor:NONE", None, 1),
    ("v5_avg_targets_post1", "TreeEnsemble:LOGISTIC", None, 3),
])
def test_forest_metadata(name, objective, labels, k, cases):
    case = cases.get(name)
    forest = sf.load_model(case.path)
    assert forest.objective == objective
    assert forest.class_labels == labels
    assert reference.predict(forest, case.X[:3]).shape == (3, k)
    # The number of features comes from the graph input.
    assert forest.num_features == case.X.shape[1]


@pytest.mark.parametrize("name,thr,acc", [
    ("skl_gb_reg", "float32", "float32"),
    ("v3_double_as_tensor", "float64", "float64"),
    ("v3_double_float_attrs", "float64", "float64"),
    ("v3_float_cast_to_double", "float32", "float64"),  # float values: exact in float32
    ("v3_double_cast_to_float", "float32", "float32"),
    ("v5_double", "float64", "float64"),
])
def test_precision(name, thr, acc, cases):
    forest = sf.load_model(cases.get(name).path)
    assert (forest.threshold_dtype, forest.accumulate_dtype) == (thr, acc)


def test_modes_are_canonical(cases):
    forest = sf.load_model(cases.get("v3_modes_sum_base").path)
    ops = {int(o) for t in forest.trees for o, l in zip(t.op, t.left) if l >= 0}
    assert ops == {Op.LT, Op.LE, Op.EQ}


@pytest.mark.parametrize("name,rule,has_eq", [
    ("v5_member_exact", CategoryRule.EXACT, None),
    ("v5_member_trunc", CategoryRule.LIGHTGBM, None),
    ("v5_member_mixed_double", CategoryRule.LIGHTGBM, True),  # exact sets unrolled into EQ
])
def test_membership_rules(name, rule, has_eq, cases):
    forest = sf.load_model(cases.get(name).path)
    assert forest.has_categorical()
    assert forest.category_rule is rule
    if has_eq:
        assert any(int(o) == Op.EQ and n not in t.categories
                   for t in forest.trees for n, (o, l) in enumerate(zip(t.op, t.left)) if l >= 0)


# ---------------------------------------------------------------------------- random rows
HYPO_MODELS = ("v3_modes_sum_base", "v3_sum_logistic_dup", "v3_bin_ids0_1_01_mixed_base0_logistic",
               "v5_member_mixed_double", "v3_float_cast_to_double", "skl_hgb_bin_nan")
_HYPO: dict[str, tuple] = {}


def _hypo_model(name, cases):
    if name not in _HYPO:
        case = cases.get(name)
        forest = sf.load_model(case.path)
        thr = np.unique(np.concatenate([t.threshold[t.left >= 0] for t in forest.trees]))
        thr = thr[np.isfinite(thr)].astype(np.float32)
        near = np.concatenate([thr, np.nextafter(thr, np.float32(np.inf)),
                               np.nextafter(thr, np.float32(-np.inf)), S.MEMBER_X]).astype(np.float64)
        _HYPO[name] = (case, forest, sorted(set(near.tolist())))
    return _HYPO[name]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_rows_match_onnxruntime(data, cases):
    name = data.draw(st.sampled_from(HYPO_MODELS))
    case, forest, near = _hypo_model(name, cases)
    f = case.X.shape[1]
    value = st.one_of(st.sampled_from(near),
                      st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0]),
                      st.floats(width=32, allow_nan=True, allow_infinity=True))
    rows = data.draw(st.lists(st.lists(value, min_size=f, max_size=f), min_size=1, max_size=24))
    X = np.array(rows, dtype=case.X.dtype)
    expected = S.ort_predict(case.path, X)
    assert_close(reference.predict(forest, X), expected, case)


# ---------------------------------------------------------------------------- detection
def test_detect_onnx_by_content(cases, tmp_path):
    case = cases.get("xgb_bin")
    data = case.path.read_bytes()
    assert onnx_trees.detect(str(case.path), data[:4096])
    renamed = tmp_path / "model.bin"  # no .onnx extension
    renamed.write_bytes(data)
    forest = sf.load_model(renamed)
    assert_close(reference.predict(forest, case.X), case.expected, case)


@pytest.mark.parametrize("head", [
    b'{"learner": {"attributes": {}}, "version": [2, 1, 0]}',
    b"{L\x00\x00\x00\x07learner{",
    b"{U\x07learner{",
    b"tree\nversion=v4\nnum_class=1\n",
    b"\xef\xbb\xbftree\nversion=v3\n",
    b"",
    b"\x08",
    b"\x08\x00",
    b"\x08\x07\xff\xff\xff",
    b"PK\x03\x04",
])
def test_detect_rejects_other_formats(head):
    assert onnx_trees.detect("x", head) is False


@settings(max_examples=200, deadline=None)
@given(head=st.binary(max_size=64))
def test_detect_never_raises(head):
    assert onnx_trees.detect("x", head) in (True, False)
    assert onnx_trees.detect("x", b"\x08" + head) in (True, False)


# ---------------------------------------------------------------------------- errors
def _stump_model(op="TreeEnsembleRegressor", **over):
    attrs = {"nodes_treeids": [0, 0, 0], "nodes_nodeids": [0, 1, 2],
                 "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"], "nodes_featureids": [0, 0, 0],
                 "nodes_values": [0.5, 0.0, 0.0], "nodes_truenodeids": [1, 0, 0],
                 "nodes_falsenodeids": [2, 0, 0], "target_treeids": [0, 0], "target_nodeids": [1, 2],
                 "target_ids": [0, 0], "target_weights": [1.0, 2.0], "n_targets": 1}
    attrs.update(over)
    attrs = {k: v for k, v in attrs.items() if v is not None}
    node = oh.make_node(op, ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("X", TP.FLOAT, [None, 2])],
                      [oh.make_tensor_value_info("Y", TP.FLOAT, [None, 1])])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("ai.onnx.ml", 3)],
                         ir_version=9)


def _save(model, tmp_path, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def _raises(path, exc, *words, fmt=None):
    with pytest.raises(exc) as info:
        sf.load_model(path, fmt=fmt)
    msg = str(info.value)
    assert str(path) in msg, msg
    for w in words:
        assert w.lower() in msg.lower(), msg
    return msg


def test_stump_loads(tmp_path):
    path = _save(_stump_model(), tmp_path)
    forest = sf.load_model(path)
    X = np.array([[0.0, 0.0], [1.0, 0.0], [np.nan, 0.0]], np.float32)
    np.testing.assert_array_equal(reference.predict(forest, X), [[1.0], [2.0], [2.0]])


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.97])
def test_truncated_file(tmp_path, cases, keep):
    data = cases.get("skl_gb_bin").path.read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * keep)])
    _raises(path, ModelFormatError, "onnx")


def test_garbage(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(np.random.default_rng(0).bytes(3000))
    _raises(path, ModelFormatError)
    _raises(path, ModelFormatError, "onnx", fmt="onnx")
    text = tmp_path / "text.onnx"
    text.write_text("definitely not a model\n")
    _raises(text, ModelFormatError, fmt="onnx")
    fake = tmp_path / "fake.onnx"
    fake.write_bytes(b"\x08\x07" + b"\xff" * 50)
    _raises(fake, SilvanForgeError, fmt="onnx")


def test_onnx_without_tree_ensemble(tmp_path):
    node = oh.make_node("Abs", ["X"], ["Y"])
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("X", TP.FLOAT, [None, 2])],
                      [oh.make_tensor_value_info("Y", TP.FLOAT, [None, 2])])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=9)
    _raises(_save(model, tmp_path), UnsupportedModelError, "no tree ensemble", "Abs")


def test_two_ensembles(tmp_path):
    model = _stump_model()
    second = onnx.NodeProto()
    second.CopyFrom(model.graph.node[0])
    second.output[0] = "Y2"
    model.graph.node.append(second)
    model.graph.output.append(oh.make_tensor_value_info("Y2", TP.FLOAT, [None, 1]))
    _raises(_save(model, tmp_path), UnsupportedModelError, "2 tree-ensemble nodes")


@pytest.mark.parametrize("where,op", [("after", "Softmax"), ("before", "Abs"),
                                      ("before", "Scaler"), ("after", "Mul2")])
def test_unsupported_operator_on_the_path(tmp_path, where, op):
    model = _stump_model()
    g = model.graph
    if where == "after":
        g.node[0].output[0] = "raw"
        if op == "Mul2":
            g.node.append(oh.make_node("Constant", [], ["two"],
                                       value=oh.make_tensor("two", TP.FLOAT, [1], [2.0])))
            g.node.append(oh.make_node("Mul", ["raw", "two"], ["Y"]))
            op = "Mul"
        else:
            g.node.append(oh.make_node(op, ["raw"], ["Y"]))
    else:
        g.node[0].input[0] = "Xs"
        if op == "Scaler":
            g.node.insert(0, oh.make_node("Scaler", ["X"], ["Xs"], domain="ai.onnx.ml",
                                          offset=[0.0, 0.0], scale=[2.0, 2.0]))
        else:
            g.node.insert(0, oh.make_node(op, ["X"], ["Xs"]))
    _raises(_save(model, tmp_path), UnsupportedModelError, op)


@pytest.mark.parametrize("over,words", [
    ({"nodes_featureids": [0, 0]}, ["nodes_featureids", "2 entries"]),
    ({"nodes_truenodeids": [5, 0, 0]}, ["child", "does not exist"]),
    ({"nodes_truenodeids": [0, 0, 0]}, ["its own child"]),
    ({"target_ids": [0, 3]}, ["target id 3"]),
    ({"target_nodeids": [1, 7]}, ["node 7", "does not exist"]),
    ({"nodes_modes": ["BRANCH_XX", "LEAF", "LEAF"]}, ["BRANCH_XX"]),
    ({"n_targets": 0}, ["n_targets"]),
    ({"aggregate_function": "MEDIAN"}, ["MEDIAN"]),
    ({"post_transform": "SQUARE"}, ["SQUARE"]),
    ({"nodes_nodeids": [0, 1, 1]}, ["defined twice"]),
    ({"base_values": [1.0, 2.0]}, ["base_values"]),
])
def test_malformed_attributes(tmp_path, over, words):
    _raises(_save(_stump_model(**over), tmp_path), ModelFormatError, *words)


def test_attributes_the_schema_does_not_define_are_refused_as_onnxruntime_refuses_them(tmp_path):
    """An attribute outside the operator's schema for the model's ai.onnx.ml opset (made up, or
    opset 3's ``*_as_tensor`` in an opset 1 model) could change what the node means: refused,
    as onnxruntime refuses the graph; the schema's own attributes load."""
    ort = pytest.importorskip("onnxruntime")
    weights = oh.make_tensor("w", TP.FLOAT, [2], [1.0, 2.0])
    for model, words in ((_stump_model(frobnicate=3), ["frobnicate"]),
                         (_stump_model(target_weights=None, target_weights_as_tensor=weights), None)):
        for opset in (1, 3):
            model.opset_import[1].version = opset
            path = _save(model, tmp_path)
            try:
                ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
                theirs = None
            except Exception as exc:  # noqa: BLE001 - onnxruntime's refusal, whatever its class
                theirs = exc
            if words is not None or opset == 1:
                assert theirs is not None
                _raises(path, ModelFormatError, "unknown attribute", *(words or ["target_weights_as_tensor"]))
            else:
                assert theirs is None
                X = np.array([[0.0, 0.0], [1.0, 0.0]], np.float32)
                np.testing.assert_array_equal(reference.predict(sf.load_model(path), X), [[1.0], [2.0]])


def test_cycle(tmp_path):
    model = _stump_model(nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ", "LEAF"],
                         nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 2, 0],
                         target_treeids=[0], target_nodeids=[2], target_ids=[0],
                         target_weights=[1.0])
    _raises(_save(model, tmp_path), ModelFormatError, "cycle")


def test_feature_beyond_graph_input(tmp_path):
    _raises(_save(_stump_model(nodes_featureids=[5, 0, 0]), tmp_path), ModelFormatError,
            "feature 5", "2 features")


def _member_model(members, dtype=np.float32):
    nodes = [(6, 0, 0.0, 0, 1, 1, 1, 0)]
    return S.v5_model(nodes, [(0, 1.0), (0, 2.0)], [0], list(members) + [np.nan], 2, 1,
                      dtype=dtype)


@pytest.mark.parametrize("members,words", [
    ([-1.0, 40.0], ["negative"]),
    ([-3.0], ["negative"]),
    ([2.5], ["2.5", "integer"]),
])
def test_unsupported_membership(tmp_path, members, words):
    _raises(_save(_member_model(members), tmp_path), UnsupportedModelError, "BRANCH_MEMBER", *words)


def test_membership_matches_onnxruntime_per_set(tmp_path):
    # Both onnxruntime rules on one feature, checked value by value.
    X = np.array([[v, 0.0] for v in S.MEMBER_X + [np.nan, np.inf, -np.inf]], np.float32)
    for i, members in enumerate([[0.0], [2.0, 3.0], [30.0], [31.0], [0.0, 64.0],
                                 list(map(float, range(31))), [5.0] * 31]):
        path = _save(_member_model(members), tmp_path, f"m{i}.onnx")
        got = reference.predict(sf.load_model(path), X)
        np.testing.assert_array_equal(got, S.ort_predict(path, X), err_msg=str(members))


def test_binary_probit_single_score(tmp_path):
    model = S.v3_model("TreeEnsembleClassifier",
                       [(0, 0, "BRANCH_LEQ", 0, 0.5, 1, 2, 0), (0, 1, "LEAF", 0, 0.0, 0, 0, 0),
                        (0, 2, "LEAF", 0, 0.0, 0, 0, 0)],
                       [(0, 1, 0, 0.25), (0, 2, 0, 0.75)], 2, labels=[0, 1],
                       post_transform="PROBIT")
    _raises(_save(model, tmp_path), UnsupportedModelError, "PROBIT", "uninitialised")


def test_single_class_classifier(tmp_path):
    model = S.v3_model("TreeEnsembleClassifier",
                       [(0, 0, "LEAF", 0, 0.0, 0, 0, 0)], [(0, 0, 0, 1.0)], 2, labels=[7])
    _raises(_save(model, tmp_path), UnsupportedModelError, "single class label")


def test_float16_input(tmp_path):
    model = _stump_model()
    model.graph.input[0].type.tensor_type.elem_type = TP.FLOAT16
    _raises(_save(model, tmp_path), UnsupportedModelError, "float16")


def test_errors_are_silvanforge_errors(tmp_path, cases):
    """Corrupting single bytes of a valid model never escapes as a raw exception."""
    data = bytearray(cases.get("v3_sum_logistic_dup").path.read_bytes())
    rng = np.random.default_rng(5)
    for i in range(40):
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad), 3):
            bad[pos] = int(rng.integers(256))
        path = tmp_path / f"bad{i}.onnx"
        path.write_bytes(bytes(bad))
        try:
            forest = sf.load_model(path, fmt="onnx")
        except SilvanForgeError as exc:
            assert str(path) in str(exc)
        else:
            reference.predict(forest, np.zeros((2, forest.num_features), np.float32))


# ---------------------------------------------------------------------------- odd but loadable
_STUMP = [(0, 0, "BRANCH_LEQ", 0, 0.5, 1, 2, 0), (0, 1, "LEAF", 0, 0.0, 0, 0, 0),
          (0, 2, "LEAF", 0, 0.0, 0, 0, 0)]


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("weights", [[0.25, np.nan], [np.nan, 0.75], [0.25, 0.75], [0.25, -0.75]],
                         ids=["nan-right", "nan-left", "positive", "negative"])
def test_nan_class_weight_counts_as_positive(tmp_path, post, weights):
    # onnxruntime's binary case: "weights all positive" fails only on w < 0, so one NaN weight
    # leaves rows that reach a number as [1 - v, v], not [-v, v].
    model = S.v3_model("TreeEnsembleClassifier", _STUMP,
                       [(0, 1, 0, weights[0]), (0, 2, 0, weights[1])], 2, labels=[0, 1],
                       post_transform=post)
    path = _save(model, tmp_path)
    X = np.array([[0.0, 0.0], [1.0, 0.0], [np.nan, 1.0], [0.5, 2.0]], np.float32)
    expected = S.ort_predict(path, X)
    forest = sf.load_model(path)
    np.testing.assert_allclose(reference.predict(forest, X), expected, rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(sf.compile(forest).predict(X), expected, rtol=1e-6, equal_nan=True)


def _dynamic_width_model(idle_feature):
    """A stump on feature 1 with a dynamic feature dimension; its true branch passes through a
    node on ``idle_feature`` whose two children are the same leaf (and its leaves name feature
    7, which onnxruntime does not count)."""
    nodes = [(0, 0, "BRANCH_LEQ", 1, 0.5, 3, 2, 0), (0, 1, "LEAF", 7, 0.0, 0, 0, 0),
             (0, 2, "LEAF", 7, 0.0, 0, 0, 0), (0, 3, "BRANCH_LT", idle_feature, 0.0, 1, 1, 0)]
    return S.v3_model("TreeEnsembleRegressor", nodes, [(0, 1, 0, 1.0), (0, 2, 0, 2.0)], None)


def test_dynamic_feature_dimension_counts_every_decision_node(tmp_path):
    # onnxruntime checks the row width against the largest feature of a reachable decision
    # node, one that decides nothing included: the narrowest input it runs.
    path = _save(_dynamic_width_model(idle_feature=3), tmp_path)
    forest = sf.load_model(path)
    assert forest.num_features == 4
    X = np.array([[0, 0, 0, 0], [0, 1, 0, 0], [9, np.nan, 9, 9]], np.float32)
    np.testing.assert_array_equal(sf.compile(forest).predict(X), S.ort_predict(path, X))
    with pytest.raises(Exception, match="requests feature 3"):
        S.ort_predict(path, X[:, :2])  # what the forest used to take


def test_fixed_feature_dimension_counts_every_decision_node(tmp_path):
    model = _dynamic_width_model(idle_feature=3)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 2
    path = _save(model, tmp_path)
    with pytest.raises(Exception, match="requests feature 3"):
        S.ort_predict(path, np.zeros((2, 2), np.float32))  # loads, but never runs
    _raises(path, ModelFormatError, "feature 3", "2 features")


def test_dynamic_feature_dimension_accepts_wider_inputs(tmp_path):
    path = _save(_dynamic_width_model(idle_feature=0), tmp_path)
    forest = sf.load_model(path)
    X = np.array([[0, 0, 5, 5, 5], [0, 1, 5, 5, 5], [0, np.nan, 5, 5, 5]], np.float32)
    expected = S.ort_predict(path, X)  # onnxruntime ignores the extra columns
    np.testing.assert_array_equal(sf.compile(forest).predict(X), expected)


def _big_member_model(member):
    """A TreeEnsemble whose membership set {3, member} is evaluated on int32(x)."""
    return S.v5_model([(6, 0, 0.0, 0, 1, 1, 1, 0)], [(0, 1.0), (0, 2.0)], [0], [3.0, member, np.nan],
                      2, 1, dtype=np.float64)


def test_huge_membership_value_is_refused_before_allocating(tmp_path):
    import tracemalloc

    path = _save(_big_member_model(2.0**31 - 1), tmp_path)
    forest = sf.load_model(path)  # what onnxruntime runs, the reference evaluator runs too
    X = np.array([[3.0, 0], [2.0**31 - 1, 0], [4.0, 0]])
    np.testing.assert_array_equal(reference.predict(forest, X), S.ort_predict(path, X))
    tracemalloc.start()
    try:
        with pytest.raises(UnsupportedModelError, match="2147483647"):
            sf.compile(forest)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, f"{peak / 2**20:.0f} MiB traced while refusing"

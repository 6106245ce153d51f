"""Differential tests of the LightGBM text importer against LightGBM's own ``predict``.

The reference evaluator run on the imported HIR must give what ``lgb.Booster.predict`` gives on
the same inputs, to float64 rounding (LightGBM predicts in float64), for every case in
``support_lightgbm``, for random rows built from NaN, infinities, zeros, tiny values and the
models' own thresholds, and every malformed file must fail with a clear ``ModelFormatError``.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import silvanforge as sf
import support_lightgbm as S
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silvanforge.errors import ModelFormatError, SilvanForgeError, UnsupportedModelError
from silvanforge.ir.hir import CategoryRule
from silvanforge.runtime import reference
from silvanforge_importer_lightgbm import lightgbm_text
from support_common import assert_close

lgb = pytest.importorskip("lightgbm")


@pytest.fixture(scope="module")
def cases(model_cases):
    """The factory's cases (support_lightgbm.py), each trained once a session (tests/conftest.py)."""
    return model_cases["lightgbm"]


# ---------------------------------------------------------------------------- differential
@pytest.mark.parametrize("name", S.case_names())
def test_predictions_match_lightgbm(name, cases):
    case = cases.get(name)
    forest = sf.load_model(case.path)
    assert_close(reference.predict(forest, case.X), case.expected, case)
    assert_close(reference.predict(forest, case.X, output_margin=True), case.expected_margin,
                 case, "margins")


@pytest.mark.parametrize("name", S.case_names())
def test_trees_read_at_once_equal_trees_read_one_at_a_time(name, cases, monkeypatch):
    """The trained models' trees read together (every list parsed once a field) hold, field by
    field, what reading them a tree at a time gives, itself checked against LightGBM above."""
    import dataclasses

    from silvanforge_importer_lightgbm import lightgbm_text

    path = cases.get(name).path
    joined = []
    at_once = lightgbm_text.load(path)
    with monkeypatch.context() as m:
        m.setattr(lightgbm_text._Parser, "lists", lambda self, blocks: [{} for _ in blocks])
        m.setattr(lightgbm_text._Parser, "joined_trees", lambda self, *args: joined.append(True))
        one_at_a_time = lightgbm_text.load(path)
    assert joined and len(at_once.trees) == len(one_at_a_time.trees)
    for a, b in zip(at_once.trees, one_at_a_time.trees):
        for field in dataclasses.fields(a):
            x, y = getattr(a, field.name), getattr(b, field.name)
            if isinstance(x, dict):
                assert list(x) == list(y) and all(np.array_equal(x[k], y[k]) and x[k].dtype == y[k].dtype for k in x)
            elif isinstance(x, np.ndarray):
                assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=True), field.name
            else:
                assert x == y, field.name


def test_quick_subset_is_part_of_full():
    quick = S.case_names(quick=True)
    assert set(quick) <= set(S.case_names())
    assert 4 <= len(quick) < len(S.case_names())


@pytest.mark.parametrize("name,objective,transform,params", [
    ("binary", "binary", "sigmoid", {"alpha": 1.0}),
    ("binary_sigmoid_0.7", "binary", "sigmoid", {"alpha": 0.7}),
    ("multiclassova", "multiclassova", "sigmoid", {"alpha": 1.3}),
    ("multiclass", "multiclass", "softmax", {}),
    ("objective_poisson", "poisson", "exp", {}),
    ("objective_gamma", "gamma", "exp", {}),
    ("objective_tweedie", "tweedie", "exp", {}),
    ("objective_cross_entropy", "cross_entropy", "sigmoid", {}),
    ("objective_cross_entropy_lambda", "cross_entropy_lambda", "log1p_exp", {}),
    ("objective_regression_sqrt", "regression", "signed_square", {}),
    ("objective_huber", "huber", "identity", {}),
    ("objective_lambdarank", "lambdarank", "identity", {}),
    ("regression_nan", "regression", "identity", {}),
])
def test_forest_metadata(name, objective, transform, params, cases):
    case = cases.get(name)
    forest = sf.load_model(case.path)
    assert forest.source == "lightgbm"
    assert forest.objective == objective
    assert forest.transform.name == transform
    assert dict(forest.transform.params) == params
    assert forest.threshold_dtype == "float64" and forest.accumulate_dtype == "float64"
    assert forest.category_rule is CategoryRule.LIGHTGBM
    booster = lgb.Booster(model_file=str(case.path))
    # LightGBM names the features of a model trained without names Column_0, Column_1, ...;
    # such a model has no names of its own and reads frames by position, as LightGBM does.
    defaults = [f"Column_{i}" for i in range(booster.num_feature())]
    names = booster.feature_name()
    assert forest.feature_names == (None if names == defaults else names)
    assert forest.num_features == booster.num_feature()
    assert forest.num_trees == booster.num_trees()
    k = booster.num_model_per_iteration()
    assert forest.num_outputs == k
    assert [t.outputs for t in forest.trees] == [(i % k,) for i in range(forest.num_trees)]


@pytest.mark.parametrize("name", ["rf_binary", "rf_regression"])
def test_random_forest_margin_is_the_raw_score_sum(name, cases):
    """LightGBM's raw_score for rf is the plain sum of the trees, while predict() transforms the
    sum divided by the number of iterations: margins stay sums, the transform divides."""
    case = cases.get(name)
    forest = sf.load_model(case.path)
    booster = lgb.Booster(model_file=str(case.path))
    assert forest.transform.param("margin_divisor", 1.0) == booster.current_iteration() > 1
    raw = booster.predict(case.X, raw_score=True)
    np.testing.assert_allclose(reference.predict(forest, case.X, output_margin=True), raw,
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(reference.predict(forest, case.X), booster.predict(case.X),
                               rtol=1e-12, atol=1e-12)


def test_categorical_bitsets_reach_past_64(cases):
    forest = sf.load_model(cases.get("categorical").path)
    cats = [c for t in forest.trees for c in t.categories.values()]
    assert cats and max(int(c.max()) for c in cats if len(c)) >= 64


def test_constant_trees_are_single_leaves(cases):
    for name in ("constant_label", "multiclass_constant_class", "constant_trees_spliced"):
        forest = sf.load_model(cases.get(name).path)
        assert any(t.num_nodes == 1 for t in forest.trees), name


def test_content_detection_ignores_extension(cases, tmp_path):
    case = cases.get("binary")
    odd = tmp_path / "model.json"
    odd.write_bytes(Path(case.path).read_bytes())
    assert_close(reference.predict(sf.load_model(odd), case.X), case.expected, case)


def test_many_trees_import(cases, tmp_path):
    """A 1000-tree model (a trained model's blocks repeated) imports and still matches."""
    case = cases.get("regression_nan")
    text = Path(case.path).read_text()
    head, rest = text.split("Tree=0", 1)
    head = "".join(ln + "\n" for ln in head.splitlines() if not ln.startswith("tree_sizes="))
    body, tail = ("Tree=0" + rest).split("end of trees", 1)
    blocks = [b.split("\n", 1)[1] for b in body.split("Tree=")[1:]]
    big = "".join(f"Tree={i}\n{blocks[i % len(blocks)]}" for i in range(1000))
    path = tmp_path / "big.txt"
    path.write_text(head + big + "end of trees" + tail)
    forest = sf.load_model(path)
    assert forest.num_trees == 1000
    X = case.X[:50]
    expected = lgb.Booster(model_file=str(path)).predict(X)
    np.testing.assert_allclose(reference.predict(forest, X), expected, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------- zero window
def _stumps(tmp_path, decision_types, thresholds):
    blocks = []
    for dt in decision_types:
        for thr in thresholds:
            i = len(blocks)
            blocks.append(S.tree_block(i, split_feature=[0], threshold=[thr], decision_type=[dt],
                                       left_child=[-1], right_child=[-2],
                                       leaf_value=[2.0 ** -(2 * (i % 24)), -(2.0 ** -(2 * (i % 24) + 1))]))
    path = tmp_path / "stumps.txt"
    path.write_text(S.model_text(blocks, 1))
    return path


_KZ = S.KZ
_EDGE_VALUES = [1e-35, -1e-35, _KZ, -_KZ, float(np.nextafter(_KZ, 1)), float(np.nextafter(-_KZ, -1)),
                float(np.nextafter(1e-35, 0)), float(np.nextafter(-1e-35, 0)), 0.0, np.nan]
_EDGE_THRESHOLDS = [0.5, -0.5, _KZ, -_KZ, 0.0, -0.0, 1e-35, -1e-35, 3e-36, -3e-36,
                    float(np.nextafter(-_KZ, -1)), float(np.nextafter(_KZ, 1))]


def test_tiny_inputs_at_the_zero_window_edges_none_and_nan_missing(tmp_path):
    """LightGBM reads |x| <= 1e-35f as 0.0; the importer folds that into the thresholds exactly."""
    path = _stumps(tmp_path, (0, 2, 8, 10), _EDGE_THRESHOLDS)
    X = np.array(_EDGE_VALUES).reshape(-1, 1)
    expected = lgb.Booster(model_file=str(path)).predict(X)
    np.testing.assert_array_equal(reference.predict(sf.load_model(path), X), expected)


def test_tiny_inputs_at_the_zero_window_edges_zero_missing(tmp_path):
    path = _stumps(tmp_path, (4, 6), _EDGE_THRESHOLDS)
    X = np.array(_EDGE_VALUES).reshape(-1, 1)
    expected = lgb.Booster(model_file=str(path)).predict(X)
    np.testing.assert_array_equal(reference.predict(sf.load_model(path), X), expected)


# ---------------------------------------------------------------------------- hypothesis
_HYPO_MODELS = ["regression_nan", "zero_as_missing", "use_missing_false", "categorical",
                "handcrafted_missing_types", "multiclass_constant_class", "rf_binary",
                "objective_cross_entropy_lambda"]


@pytest.fixture(scope="module")
def hypo_models(cases):
    out = {}
    for name in _HYPO_MODELS:
        case = cases.get(name)
        forest = sf.load_model(case.path)
        thr = np.unique(np.concatenate([t.threshold[t.left >= 0] for t in forest.trees] + [np.zeros(1)]))
        near = np.concatenate([thr, np.nextafter(thr, np.inf), np.nextafter(thr, -np.inf)])
        cats = np.unique(np.concatenate([c for t in forest.trees for c in t.categories.values()]
                                        + [np.zeros(0, dtype=np.int64)])).astype(np.float64)
        pool = np.unique(np.concatenate([near, cats, cats + 0.5, -cats - 0.5, S.SPECIAL]))
        out[name] = (forest, lgb.Booster(model_file=str(case.path)), pool.tolist())
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_rows_match_lightgbm(hypo_models, data):
    name = data.draw(st.sampled_from(_HYPO_MODELS), label="model")
    forest, booster, pool = hypo_models[name]
    value = st.one_of(
        st.sampled_from(pool),
        st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-36, -1e-36, 1e-300]),
        st.floats(allow_nan=True, allow_infinity=True, width=64),
        st.floats(-3, 3),
        st.integers(-5, 300).map(float),
    )
    n = data.draw(st.integers(1, 6), label="rows")
    rows = data.draw(st.lists(st.lists(value, min_size=forest.num_features, max_size=forest.num_features),
                              min_size=n, max_size=n), label="X")
    X = np.array(rows, dtype=np.float64)
    if data.draw(st.booleans(), label="float32"):
        with np.errstate(over="ignore"):
            X = X.astype(np.float32)
    got = reference.predict(forest, X)
    np.testing.assert_allclose(got, booster.predict(X), rtol=1e-12, atol=1e-12, err_msg=name)
    raw = booster.predict(X, raw_score=True)
    np.testing.assert_allclose(reference.predict(forest, X, output_margin=True), raw,
                               rtol=1e-12, atol=1e-12, err_msg=name)


# ---------------------------------------------------------------------------- errors
@pytest.fixture(scope="module")
def good_text(cases):
    return Path(cases.get("categorical").path).read_text()


def _write(tmp_path, text, name="model.txt"):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def _load_error(path, exc=ModelFormatError):
    with pytest.raises(exc) as info:
        sf.load_model(path)
    msg = str(info.value)
    assert str(path) in msg
    return msg


def test_truncated_inside_a_tree_block(tmp_path, good_text):
    cut = good_text.index("Tree=1") + 40
    msg = _load_error(_write(tmp_path, good_text[:cut]))
    assert "truncated" in msg


def test_a_header_without_feature_names_is_refused_as_lightgbm_refuses_it(tmp_path, good_text):
    """Without it the feature count (max_feature_idx) is unchecked: 2e9 asked for gigabytes."""
    text = "\n".join(line for line in good_text.splitlines() if not line.startswith("feature_names="))
    text = text.replace("max_feature_idx=", "max_feature_idx=2000000000\nold_max_feature_idx=", 1)
    assert "no feature_names line" in _load_error(_write(tmp_path, text))


def test_missing_end_of_trees(tmp_path, good_text):
    msg = _load_error(_write(tmp_path, good_text[:good_text.index("end of trees")]))
    assert "end of trees" in msg and "truncated" in msg


@pytest.mark.parametrize("frac", np.linspace(0.0, 1.0, 41).tolist())
def test_truncated_anywhere_gives_a_clear_error(tmp_path, good_text, frac):
    text = good_text[: int(len(good_text) * frac)]
    p = _write(tmp_path, text)
    if "end of trees" in text:
        sf.load_model(p)  # only the trailing sections (importances, parameters) are gone
        return
    with pytest.raises(ModelFormatError) as info:
        sf.load_model(p)
    assert str(p) in str(info.value)
    if "Tree=0" in text:
        assert "truncated" in str(info.value)


def _replace_line(text, key, value, tree=0):
    """Replace the ``key=`` line of tree ``tree`` (or of the header when tree is None)."""
    start = 0 if tree is None else text.index(f"Tree={tree}\n")
    m = re.compile(rf"^{re.escape(key)}=.*$", re.M).search(text, start)
    assert m, key
    return text[:m.start()] + (f"{key}={value}" if value is not None else "") + text[m.end():]


@pytest.mark.parametrize("key,value,needle", [
    ("leaf_value", "1 2", "leaf_value"),
    ("threshold", "abc def", "threshold"),
    ("left_child", "1 2 3", "left_child"),
    ("split_feature", "0 0 0 0 0 0 0 0 0 0 77", "split_feature"),
    ("decision_type", "12 12 12 12 12 12 12 12 12 12 12", "decision_type"),
    ("num_leaves", "x", "num_leaves"),
    ("cat_boundaries", "0 5 2", "cat_boundaries"),
    ("leaf_value", None, "leaf_value"),
])
def test_malformed_tree_arrays(tmp_path, good_text, key, value, needle):
    msg = _load_error(_write(tmp_path, _replace_line(good_text, key, value)))
    assert needle in msg and "Tree=0" in msg


def test_child_pointing_nowhere(tmp_path, good_text):
    m = re.search(r"^left_child=(.*)$", good_text, re.M)
    n = len(m.group(1).split())
    msg = _load_error(_write(tmp_path, _replace_line(good_text, "left_child", " ".join(["-99"] * n))))
    assert "left_child" in msg and "no node" in msg


@pytest.mark.parametrize("key,value", [
    ("max_feature_idx", None), ("feature_names", "a b"), ("tree_sizes", "1 2"), ("num_class", "two"),
])
def test_header_problems(tmp_path, good_text, key, value):
    assert key in _load_error(_write(tmp_path, _replace_line(good_text, key, value, tree=None)))


def test_trees_out_of_order(tmp_path, good_text):
    renumbered = good_text.replace("Tree=1\n", "Tree=7\n", 1)
    assert "Tree=7" in _load_error(_write(tmp_path, renumbered))


def test_objective_problems(tmp_path, good_text):
    msg = _load_error(_write(tmp_path, _replace_line(good_text, "objective", "frobnicate", tree=None)),
                      UnsupportedModelError)
    assert "LightGBM objective 'frobnicate'" in msg
    msg = _load_error(_write(tmp_path, _replace_line(good_text, "objective", "binary", tree=None)))
    assert "sigmoid" in msg


def test_custom_objective_predicts_raw(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 3))
    y = X[:, 0] + rng.normal(size=200)

    def fobj(preds, ds):
        return preds - ds.get_label(), np.ones_like(preds)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        booster = lgb.train({"objective": fobj, "verbose": -1, "num_threads": 1, "num_leaves": 5},
                            lgb.Dataset(X, y), 5)
    path = tmp_path / "custom.txt"
    booster.save_model(str(path))
    forest = sf.load_model(path)
    assert forest.objective == "custom" and forest.transform.name == "identity"
    T = S.sprinkle(rng.normal(size=(100, 3)), rng)
    np.testing.assert_allclose(reference.predict(forest, T),
                               lgb.Booster(model_file=str(path)).predict(T), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("content", [
    b"", b"\x00\x01\x02garbage" * 50, b'{"learner": {"gradient_booster": {}}}', b"tree\n",
    b"tree\nnot a version\nTree=0\n", "tree\nversion=v4\n\xe9\n".encode("latin-1"),
    b"hello world\n" * 10,
])
def test_wrong_format_files(tmp_path, content):
    p = _write(tmp_path, content, "model.txt")
    with pytest.raises(ModelFormatError) as info:
        sf.load_model(p)
    assert str(p) in str(info.value)
    # The importer itself, called directly on a file that is not LightGBM's, says so too.
    with pytest.raises(ModelFormatError) as info:
        lightgbm_text.load(p)
    assert str(p) in str(info.value)


def test_detect_never_raises_and_recognises_content(good_text):
    head = good_text.encode()[:4096]
    assert lightgbm_text.detect("model.json", head)
    assert lightgbm_text.detect("x", good_text[:4096])  # a str head too
    assert lightgbm_text.detect("x", b"\xef\xbb\xbf" + head)
    for bad in (b"", b"tree", b"tree\nversion=", b'{"version": [2, 0]}', b"\xff" * 100, None, 12,
                b"trees\nversion=v4\n", b"Tree=0\nversion=v4"):
        assert lightgbm_text.detect("model.txt", bad) is False


def test_missing_file_error(tmp_path):
    with pytest.raises(ModelFormatError) as info:
        lightgbm_text.load(tmp_path / "nope.txt")
    assert "nope.txt" in str(info.value)


@pytest.mark.parametrize("seed", range(20))
def test_random_corruption_never_raises_raw_errors(tmp_path, good_text, seed):
    """Deleting or mangling random lines gives a result or a SilvanForgeError, never a crash."""
    rng = np.random.default_rng(seed)
    lines = good_text[: good_text.index("end of trees") + 13].splitlines()
    for _ in range(3):
        i = int(rng.integers(len(lines)))
        action = rng.integers(4)
        if action == 0:
            del lines[i]
        elif action == 1:
            lines[i] = lines[i][: int(rng.integers(len(lines[i]) + 1))]
        elif action == 2:
            toks = lines[i].split(" ")
            toks[int(rng.integers(len(toks)))] = str(rng.choice(
                ["-1", "nan", "1e999", "x", "", "99999999999999999999", "-2147483649", "4294967296"]))
            lines[i] = " ".join(toks)
        else:
            lines.insert(i, lines[int(rng.integers(len(lines)))])
    p = _write(tmp_path, "\n".join(lines) + "\n")
    try:
        sf.load_model(p)
    except SilvanForgeError as exc:
        assert str(p) in str(exc)


# ---------------------------------------------------------------------------- read as LightGBM reads
@pytest.fixture(scope="module")
def two_trees():
    """(model text, rows) of a two-tree regression model."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(300, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        booster = lgb.train({"verbose": -1, "num_leaves": 4, "objective": "regression", "num_threads": 1},
                            lgb.Dataset(X, X[:, 0] * 2 + X[:, 1]), 2)
    return booster.model_to_string(), X


def _lgb_raw(path, X):
    return lgb.Booster(model_file=str(path)).predict(X, raw_score=True)


def test_tree_sizes_must_lead_to_the_trees(tmp_path, two_trees):
    # LightGBM finds tree k at the byte offset tree_sizes gives: "0 n" makes it read tree 0
    # twice, not the file's tree 1.  Such a file is refused, never read by its lines.
    text, X = two_trees
    sizes = re.search(r"^tree_sizes=(\d+) (\d+)$", text, re.M)
    edited = _write(tmp_path, text.replace(sizes.group(0), f"tree_sizes=0 {sizes.group(2)}"))
    by_lines = reference.predict(sf.load_model(_write(tmp_path, text, "orig.txt")), X, output_margin=True)
    assert not np.allclose(_lgb_raw(edited, X), by_lines)
    assert "tree_sizes" in _load_error(edited)


def test_end_of_trees_in_the_header_is_a_header_line(tmp_path, two_trees):
    # LightGBM's header runs to the first Tree= line, whatever it holds.
    text, X = two_trees
    path = _write(tmp_path, text.replace("version=v4\n", "version=v4\nend of trees\n", 1))
    np.testing.assert_allclose(reference.predict(sf.load_model(path), X, output_margin=True),
                               _lgb_raw(path, X), rtol=1e-12, atol=1e-12)


def test_num_class_must_match_trees_per_iteration(tmp_path, two_trees):
    # LightGBM predicts num_class columns but fills num_tree_per_iteration of them.
    text, X = two_trees
    path = _write(tmp_path, text.replace("num_class=1\n", "num_class=3\n", 1))
    assert _lgb_raw(path, X[:4]).shape == (4, 3)
    assert "num_class=3" in _load_error(path)


@pytest.mark.parametrize("spelling,lightgbm_reads", [("1_0", "1"), ("0x10", "0"), ("2.5abc", "2.5")])
def test_numbers_lightgbm_reads_otherwise_are_refused(tmp_path, two_trees, spelling, lightgbm_reads):
    # Python's float() would read "1_0" as 10 and "0x10" not at all; LightGBM reads a prefix.
    text, X = two_trees
    text = re.sub(r"^tree_sizes=.*\n", "", text, flags=re.M)  # trees found by lines, not offsets
    first = re.search(r"^leaf_value=(\S+)", text, re.M)

    def with_leaf(value, name):
        return _write(tmp_path, text[:first.start(1)] + value + text[first.end(1):], name)

    odd, plain = with_leaf(spelling, "odd.txt"), with_leaf(lightgbm_reads, "plain.txt")
    np.testing.assert_array_equal(_lgb_raw(odd, X), _lgb_raw(plain, X))
    assert "leaf_value" in _load_error(odd)


_FLOAT_TOKENS = st.one_of(
    st.floats(allow_nan=False).map(repr), st.floats(allow_nan=False, width=32).map(lambda v: "%.9g" % v),
    st.sampled_from(["nan", "-nan", "NaN", "inf", "-inf", "+Infinity", "1e309", "-1e-400", ".5", "5.", "+3"]))


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(_FLOAT_TOKENS, min_size=1, max_size=30))
def test_number_lists_parse_as_python_does(tokens):
    """Tree arrays are parsed by NumPy in C: every token as ``float()`` reads it, bit for bit."""
    from silvanforge_importer_lightgbm.lightgbm_text import _Parser

    parser = _Parser.__new__(_Parser)
    got = parser.array({"leaf_value": " ".join(tokens)}, "leaf_value", np.float64, len(tokens), "Tree=0")
    want = np.array([float(t) for t in tokens])
    number = ~np.isnan(want)  # a NaN's sign means nothing to LightGBM
    assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got[number]), np.signbit(want[number]))


# Tokens of numbers, and of the characters a plain list may hold in any order (most are not
# numbers; some hold spaces); a list is tokens one space apart.
_PLAIN_TOKENS = st.one_of(
    st.integers(-2**64, 2**64).map(str), st.floats().map(repr), st.floats(width=32).map(lambda v: "%.9g" % v),
    st.lists(st.sampled_from(["0", "1", "25", ".", "e", "E", "+", "-", "inf", "nan", "i", "n", "a", "f", " ", "  ",
                              "9223372036854775807", "9223372036854775808"]), min_size=1, max_size=4).map("".join))


@settings(max_examples=500, deadline=None)
@given(lists=st.lists(st.lists(_PLAIN_TOKENS, max_size=6).map(" ".join), min_size=1, max_size=4),
       integers=st.booleans())
def test_lists_parsed_together_are_each_as_python_reads_it_or_left_to_the_pattern(lists, integers):
    """The lists of all trees parsed by one NumPy call: each list then holds exactly what
    ``int()`` or ``float()`` reads of its tokens, which the per-list pattern accepts; anything
    else is left to the list-at-a-time path (None)."""
    from silvanforge_importer_lightgbm.lightgbm_text import _FLOAT, _INT
    from silvanforge_importer_lightgbm.text_arrays import plain_lists as _plain_lists

    dtype = np.int64 if integers else np.float64
    got = _plain_lists(lists, dtype)
    if got is None:
        return
    pattern, read = (_INT, int) if integers else (_FLOAT, float)
    assert len(got) == len(lists)
    for text, arr in zip(lists, got):
        tokens = text.split(" ") if text else []
        assert all(pattern.fullmatch(t) for t in tokens), text
        want = np.array([read(t) for t in tokens], dtype=dtype)
        assert arr.dtype == want.dtype and np.array_equal(arr, want, equal_nan=not integers), text
        number = ~np.isnan(want) if not integers else np.ones(len(want), bool)
        assert np.array_equal(np.signbit(arr[number]), np.signbit(want[number])), text


def test_an_integer_past_int64_is_an_error_not_clamped(tmp_path, good_text):
    m = re.search(r"^split_feature=(.*)$", good_text, re.M)
    n = len(m.group(1).split())
    msg = _load_error(_write(tmp_path, _replace_line(good_text, "split_feature", " ".join(["9223372036854775808"] * n))))
    assert "split_feature" in msg and "Tree=0" in msg


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab= 1\r\n\v\x1c") + ["é"]), max_size=40))
def test_lines_end_where_lightgbm_ends_them(text):
    """Lines end at \\n, \\r\\n and \\r only, each with its byte offset (the fast path through
    str.splitlines agrees with the one that matches line ends one by one)."""
    from silvanforge_importer_lightgbm.text_arrays import split_lines as _split_lines

    offsets, lines = _split_lines(text)
    pieces = re.split(r"(\r\n|\r|\n)", text)
    assert lines == pieces[0::2]
    ends = pieces[1::2] + [""]
    assert offsets == [sum(len((l + e).encode()) for l, e in zip(lines[:k], ends[:k])) for k in range(len(lines))]

"""Outputs other than predictions: ``predict(X, pred_leaf=True)`` (the leaf each row reaches in
each tree, numbered, typed and shaped as the model's library gives it) and ``per_tree=True``
(each tree's own values), compiled, compared with the libraries and with the reference
evaluator on models trained here (NaN rows, categorical splits, multiclass, every importer),
at request sizes from one row to a large batch, and after saving, pickling and the code cache."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, rows_for
from support_common import labelled as _labels
from support_common import normal_rows as _rows

import silvanforge as sf
import silvanforge.sklearn
from silvanforge.errors import InputError, UnsupportedModelError
from silvanforge.runtime import reference

SIZES = (1, 7, 16, 300)


def _per_tree_exact(cf, X):
    """per_tree equals the reference's tree by tree, to the bit."""
    got = cf.predict(X, per_tree=True)
    want = reference.predict_per_tree(cf.forest, X)
    if got.ndim == 2:  # every tree adds to one output: its value there
        outputs = np.array([tree.outputs[0] for tree in cf.forest.trees])
        want = want[:, np.arange(cf.forest.num_trees), outputs]
    np.testing.assert_array_equal(got, want)


def _every_size(cf, X, want_leaf):
    for n in SIZES:
        got = cf.predict(X[:n], pred_leaf=True)
        np.testing.assert_array_equal(got, want_leaf[:n])
        assert got.dtype == want_leaf.dtype and got.shape == want_leaf[:n].shape


def test_xgboost_leaf_ids_are_its_node_ids():
    xgb = pytest.importorskip("xgboost")
    X = _rows(600, 6).astype(np.float32)
    y = _labels(X)
    for params, rounds in (({"max_depth": 5}, 12),
                           ({"objective": "multi:softprob", "num_class": 3, "max_depth": 4}, 6)):
        booster = xgb.train({**params, "nthread": 1}, xgb.DMatrix(X, y), rounds)
        cf = sf.compile(booster)
        want = booster.predict(xgb.DMatrix(X), pred_leaf=True)
        _every_size(cf, X, want)
        _per_tree_exact(cf, X)
        # the estimator's apply, through the estimator-shaped wrapper
        model = xgb.XGBRegressor(n_estimators=5, max_depth=3, nthread=1).fit(X, y)
        np.testing.assert_array_equal(sf.compile(model).predict(X, pred_leaf=True), model.apply(X))


def test_xgboost_categorical_leaf_ids():
    xgb = pytest.importorskip("xgboost")
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"a": rng.normal(size=500), "c": pd.Categorical(rng.integers(0, 6, 500))})
    y = (frame["c"].cat.codes % 2) + np.nan_to_num(frame["a"])
    booster = xgb.train({"max_depth": 4, "nthread": 1, "tree_method": "hist"},
                        xgb.DMatrix(frame, y, enable_categorical=True), 8)
    cf = sf.compile(booster)
    want = booster.predict(xgb.DMatrix(frame, enable_categorical=True), pred_leaf=True)
    np.testing.assert_array_equal(cf.predict(frame, pred_leaf=True), want)


def test_lightgbm_leaf_indices_with_categories_and_classes():
    lgb = pytest.importorskip("lightgbm")
    pd = pytest.importorskip("pandas")
    X = _rows(800, 5, seed=1)
    frame = pd.DataFrame(X, columns=list("abcde"))
    frame["k"] = pd.Categorical(np.random.default_rng(1).choice(list("pqrstu"), 800))
    y = _labels(X)
    booster = lgb.train({"objective": "multiclass", "num_class": 3, "num_leaves": 15, "verbose": -1,
                         "num_threads": 1}, lgb.Dataset(frame, y), 8)
    cf = sf.compile(booster)
    want = booster.predict(frame, pred_leaf=True)
    assert want.dtype == np.int32
    for n in SIZES:
        got = cf.predict(frame.iloc[:n], pred_leaf=True)
        np.testing.assert_array_equal(got, want[:n])
        assert got.dtype == np.int32
    np.testing.assert_array_equal(cf.predict(frame, per_tree=True).reshape(800, 8, 3).sum(axis=1),
                                  booster.predict(frame, raw_score=True))


def test_lightgbm_linear_trees():
    lgb = pytest.importorskip("lightgbm")
    X = _rows(500, 4, seed=2)
    y = 2 * np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1])
    booster = lgb.train({"linear_tree": True, "num_leaves": 7, "verbose": -1, "num_threads": 1},
                        lgb.Dataset(X, y), 5)
    cf = sf.compile(booster)
    np.testing.assert_array_equal(cf.predict(X, pred_leaf=True), booster.predict(X, pred_leaf=True))
    _per_tree_exact(cf, X)


def test_catboost_leaf_indexes():
    cb = pytest.importorskip("catboost")
    X = _rows(500, 5, seed=4)
    y = _labels(X)
    model = cb.CatBoostClassifier(iterations=6, depth=4, loss_function="MultiClass", verbose=0, thread_count=1)
    model.fit(X, y)
    cf = sf.compile(model)
    want = model.calc_leaf_indexes(cb.Pool(X))
    _every_size(cf, X, want)
    _per_tree_exact(cf, X)


def test_catboost_non_symmetric_trees_as_catboost_reads_them_back(tmp_path):
    """CatBoost numbers a non-symmetric tree's leaves one way in the model it trained and
    another in the same model read back from its JSON; the JSON is what the importer reads, so
    the leaves are numbered as the model read back numbers them."""
    cb = pytest.importorskip("catboost")
    X = _rows(500, 5, seed=5)
    model = cb.CatBoostRegressor(iterations=6, depth=4, grow_policy="Lossguide", verbose=0, thread_count=1)
    model.fit(X, np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 2]))
    model.save_model(str(tmp_path / "m.json"), format="json")
    back = cb.CatBoostRegressor()
    back.load_model(str(tmp_path / "m.json"), format="json")
    cf = sf.compile(str(tmp_path / "m.json"))
    np.testing.assert_array_equal(cf.predict(X, pred_leaf=True), back.calc_leaf_indexes(cb.Pool(X)))


def test_scikit_learn_apply():
    pytest.importorskip("sklearn")
    from sklearn.ensemble import GradientBoostingClassifier, GradientBoostingRegressor, RandomForestClassifier
    from sklearn.tree import DecisionTreeRegressor

    X = _rows(400, 5, seed=6, nan=0.0).astype(np.float32)
    y = _labels(X)
    for est in (RandomForestClassifier(n_estimators=4, max_depth=6, random_state=0),
                GradientBoostingClassifier(n_estimators=3, max_depth=3, random_state=0),
                GradientBoostingRegressor(n_estimators=3, max_depth=3, random_state=0),
                DecisionTreeRegressor(max_depth=5, random_state=0)):
        est.fit(X, y)
        want = est.apply(X)
        cf = sf.compile(est)
        _every_size(cf, X, want)
        if isinstance(est, (RandomForestClassifier, GradientBoostingRegressor)):  # (the wrapper: a forest, a boosted model)
            assert np.array_equal(silvanforge.sklearn.compile(est).apply(X), want)
        _per_tree_exact(cf, X)
        # no rows: shaped as one row's (a reshape of no rows cannot infer the stages)
        assert cf.predict(X[:0], pred_leaf=True).shape == (0, *want.shape[1:])


def test_per_tree_of_a_multi_output_forest_is_walked_not_compiled_a_tree_at_a_time():
    """A 3-class random forest's per-tree values: a forest of 30 trees each adding to 3 outputs of
    its own.  The level-at-a-time forms would compile a program a tree (seconds each ten), so
    they refuse it, naming why, and the walks answer, exactly, at every request size."""
    pytest.importorskip("sklearn")
    from sklearn.ensemble import RandomForestClassifier
    from silvanforge.frontend import outputs
    from silvanforge_rep_oblivious import complete, symmetric

    X = _rows(600, 6, seed=8, nan=0.0)
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    cf = sf.compile(RandomForestClassifier(n_estimators=30, max_depth=5, random_state=0).fit(X, y))
    per_tree = outputs.forest_of(cf.forest, "per_tree")
    assert per_tree.num_outputs == 90
    why = complete.recognise(per_tree)
    assert isinstance(why, str) and "30 groups of trees" in why, why
    for n in SIZES:
        _per_tree_exact(cf, X[:n])
    assert "levelwise" not in {f.options.rep for f in cf.output_model("per_tree")._plan[0]}
    # CatBoost's symmetric trees, 3 classes: the symmetric forms refuse their per-tree forest too
    cb = pytest.importorskip("catboost")
    model = cb.CatBoostClassifier(iterations=12, depth=4, loss_function="MultiClass", verbose=False,
                                  random_seed=0, thread_count=1).fit(X, y)
    cf = sf.compile(model)
    assert not isinstance(symmetric.recognise(cf.forest), str)
    why = symmetric.recognise(outputs.forest_of(cf.forest, "per_tree"))
    assert isinstance(why, str) and "12 groups of trees" in why, why
    for n in SIZES:
        _per_tree_exact(cf, X[:n])


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=6, max_depth=6, max_features=8), seed=st.integers(0, 2**16))
def test_random_forests_leaves_and_tree_values_equal_the_reference(forest, seed):
    cf = sf.compile(forest, forms="lazy")  # (the plan's other forms: not what is tested here)
    X = rows_for(forest, np.random.default_rng(seed), 40)
    np.testing.assert_array_equal(cf.predict(X, pred_leaf=True), reference.predict_leaf(forest, X))
    _per_tree_exact(cf, X)


def test_outputs_survive_saving_pickling_and_the_code_cache(tmp_path, monkeypatch):
    lgb = pytest.importorskip("lightgbm")
    X = _rows(300, 4, seed=7)
    booster = lgb.train({"num_leaves": 9, "verbose": -1, "num_threads": 1}, lgb.Dataset(X, _labels(X)), 6)
    want = booster.predict(X, pred_leaf=True)
    cf = sf.compile(booster, cache=tmp_path / "cache")
    assert "pred_leaf: not built; per_tree: not built" in cf.show("plan")
    np.testing.assert_array_equal(cf.predict(X, pred_leaf=True), want)
    assert "pred_leaf: built" in cf.show("plan") and cf.summary()["outputs_built"] == ["pred_leaf"]
    cf.save(tmp_path / "m.forge")
    # An artifact and a pickle keep the output models built before, loaded at their first request
    # after a load, which compiles nothing; the code-cache entry was written before pred_leaf was built.
    from silvanforge.runtime import compiled as compiled_module

    for back, kept in ((sf.load_compiled(tmp_path / "m.forge", trust_code=True), True),
                       (pickle.loads(pickle.dumps(cf)), True),
                       (sf.compile(booster, cache=tmp_path / "cache"), False)):  # (a hit: the entry the first wrote)
        assert back.summary()["outputs_built"] == []
        assert ("pred_leaf: saved (loaded at its first request)" in back.show("plan")) == kept
        if kept:
            with monkeypatch.context() as m:
                m.setattr(compiled_module, "untuned_plan", lambda *a, **k: pytest.fail("compiled, not loaded"))
                np.testing.assert_array_equal(back.predict(X, pred_leaf=True), want)
            np.testing.assert_array_equal(pickle.loads(pickle.dumps(back)).predict(X, pred_leaf=True), want)
        np.testing.assert_array_equal(back.predict(X, pred_leaf=True), want)
        np.testing.assert_array_equal(back.predict(X, per_tree=True), cf.predict(X, per_tree=True))
    # a model loaded and saved again before its first leaf request keeps the saved one
    sf.load_compiled(tmp_path / "m.forge", trust_code=True).save(tmp_path / "again.forge")
    assert "pred_leaf: saved" in sf.load_compiled(tmp_path / "again.forge", trust_code=True).show("plan")
    with pytest.warns(sf.ArtifactWarning, match="not signed"):  # untrusted: no code of it runs
        untrusted = sf.load_compiled(tmp_path / "m.forge", key="another key")
    assert untrusted.summary()["outputs_built"] == [] and "pred_leaf: not built" in untrusted.show("plan")
    np.testing.assert_array_equal(untrusted.predict(X, pred_leaf=True), want)


def test_a_kept_output_model_reads_rows_as_the_model_it_was_kept_with(tmp_path):
    """A code-cache entry is any model's of the same trees: the leaf model it keeps reads rows by
    the names and categories of the model compiled now, as its predictions do."""
    xgb = pytest.importorskip("xgboost")
    pd = pytest.importorskip("pandas")
    X = _rows(300, 4, seed=9)
    booster = xgb.train({"max_depth": 3}, xgb.DMatrix(X, _labels(X), feature_names=list("abcd")), 4)
    first = sf.compile(booster, cache=tmp_path / "cache")
    first.predict(X, pred_leaf=True)
    first.prepare_contributions()  # (the entry written again: with the leaf model)
    renamed = booster.copy()
    renamed.feature_names = list("dcba")
    again = sf.compile(renamed, cache=tmp_path / "cache")  # a hit: the first's entry
    assert "pred_leaf: saved" in again.show("plan")
    frame = pd.DataFrame(X, columns=list("dcba"))
    np.testing.assert_array_equal(again.predict(frame, pred_leaf=True),
                                  renamed.predict(xgb.DMatrix(frame), pred_leaf=True))
    np.testing.assert_array_equal(again.predict(frame), renamed.predict(xgb.DMatrix(frame)))


def test_bad_combinations_are_one_clear_error(tmp_path):
    forest = sf.Forest(trees=[sf.Tree.from_nodes([1, -1, -1], [2, -1, -1], [0, -1, -1], [0.5, 0, 0],
                                                 [0.0, 1.0, 2.0])], num_features=1)
    cf = sf.compile(forest)
    X = np.array([[0.1], [0.9]], dtype=np.float32)
    np.testing.assert_array_equal(cf.predict(X, pred_leaf=True), [[1], [2]])
    with pytest.raises(InputError, match="one of pred_leaf, per_tree and pred_contribs"):
        cf.predict(X, pred_leaf=True, per_tree=True)
    with pytest.raises(InputError, match="output_margin"):
        cf.predict(X, pred_leaf=True, output_margin=True)
    with pytest.raises(InputError, match="features per row"):
        cf.predict(np.zeros((2, 3), np.float32), pred_leaf=True)
    onnx_forest = sf.Forest(trees=forest.trees, num_features=1, source="onnx")
    with pytest.raises(UnsupportedModelError, match="ONNX"):
        sf.compile(onnx_forest).predict(X, pred_leaf=True)
    np.testing.assert_array_equal(sf.compile(onnx_forest).predict(X, per_tree=True), [[1.0], [2.0]])


def test_explanations_check_their_arguments_as_predict_does():
    xgb = pytest.importorskip("xgboost")
    X = _rows(200, 3, seed=4, nan=0.0).astype(np.float32)
    cf = sf.compile(xgb.train({"max_depth": 3}, xgb.DMatrix(X, X[:, 0]), 3))
    for kind in ("pred_contribs", "pred_interactions", "pred_leaf", "per_tree"):
        for missing in ("abc", [1.0]):
            with pytest.raises(InputError, match="missing must be a number"):
                cf.predict(X[:3], missing=missing, **{kind: True})
        # None: the model's own (NaN here), as predict's default
        np.testing.assert_array_equal(cf.predict(X[:3], missing=None, **{kind: True}), cf.predict(X[:3], **{kind: True}))
        for threads in (0, -1, "2"):
            with pytest.raises(InputError, match="threads must be a positive integer"):
                cf.predict(X[:3], threads=threads, **{kind: True})
    np.testing.assert_array_equal(cf.predict(X[:3], pred_contribs=True, missing=0.0),
                                  cf.predict(np.where(X[:3] == 0.0, np.nan, X[:3]), pred_contribs=True))
    for budget in ("abc", 1.5, True, -1):
        with pytest.raises(InputError, match="table_bytes must be a whole number"):
            cf.prepare_contributions(table_bytes=budget)


def test_cli_writes_leaves_and_tree_values(tmp_path, capsys):
    from silvanforge import cli

    lgb = pytest.importorskip("lightgbm")
    X = _rows(50, 3, seed=8, nan=0.0)
    booster = lgb.train({"num_leaves": 5, "verbose": -1, "num_threads": 1}, lgb.Dataset(X, X[:, 0]), 4)
    booster.save_model(str(tmp_path / "m.txt"))
    np.savetxt(tmp_path / "x.csv", X, delimiter=",")
    assert cli.main(["predict", str(tmp_path / "m.txt"), "-i", str(tmp_path / "x.csv"), "--leaf",
                     "-o", str(tmp_path / "leaf.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "leaf.npy"), booster.predict(X, pred_leaf=True))
    assert cli.main(["predict", str(tmp_path / "m.txt"), "-i", str(tmp_path / "x.csv"), "--per-tree"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 50 and all(len(line.split(",")) == 4 for line in lines)
    assert cli.main(["predict", str(tmp_path / "m.txt"), "-i", str(tmp_path / "x.csv"), "--leaf", "--per-tree"]) != 0
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "--leaf and --per-tree: one of --leaf, --per-tree, --contribs at a time" in err, err
    assert cli.main(["predict", str(tmp_path / "m.txt"), "-i", str(tmp_path / "x.csv"), "--contribs", "--margin"]) != 0
    err = capsys.readouterr().err
    assert err == "error: --margin applies to predictions, not to --contribs\n", err

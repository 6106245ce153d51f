"""SHAP contributions (``predict(X, pred_contribs=True)``): equal to XGBoost's ``pred_contribs``,
LightGBM's ``pred_contrib`` and CatBoost's ``ShapValues`` where CatBoost computes path-dependent
TreeSHAP, and to the definition (the reference evaluator's coalitions, Algorithm 1 of the TreeSHAP
paper) on random forests with covers; a row's values add up to its margin; bad combinations
are one clear error."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, rows_for
from support_common import Draws
from support_common import labelled as _labels
from support_common import normal_rows as _rows

import silvanforge as sf
from silvanforge.errors import ArtifactWarning, InputError, UnsupportedModelError
from silvanforge.ir.hir import Aggregation
from silvanforge.runtime import reference


def _adds_up(cf, X, contribs):
    margin = cf.predict(X, output_margin=True)
    total = contribs.reshape(len(X), cf.forest.num_outputs, -1).sum(axis=-1).reshape(margin.shape)
    np.testing.assert_allclose(total, margin, rtol=1e-5, atol=1e-5)


def test_xgboost_pred_contribs():
    xgb = pytest.importorskip("xgboost")
    X = _rows(400, 6).astype(np.float32)
    y = _labels(X)
    for params in ({"max_depth": 5}, {"objective": "multi:softprob", "num_class": 3, "max_depth": 4},
                   {"objective": "binary:logistic", "max_depth": 3, "booster": "dart", "rate_drop": 0.3}):
        booster = xgb.train({**params, "nthread": 1}, xgb.DMatrix(X, y if "num_class" in params else y > 0), 8)
        cf = sf.compile(booster)
        want = booster.predict(xgb.DMatrix(X), pred_contribs=True)
        for n in (1, 16, 400):
            got = cf.predict(X[:n], pred_contribs=True)
            assert got.dtype == np.float32 and got.shape == want[:n].shape
            np.testing.assert_allclose(got, want[:n], rtol=1e-4, atol=1e-4 * np.abs(want).max())
        _adds_up(cf, X, cf.predict(X, pred_contribs=True))


def test_xgboost_pred_interactions():
    """Equal to XGBoost's pred_interactions (float32) on NaN rows, for a regression, several
    classes and DART, at 1 row and more; a feature's row adds up to its contribution; other
    libraries' models and other outputs at once are one clear error."""
    xgb = pytest.importorskip("xgboost")
    X = _rows(300, 5, seed=9).astype(np.float32)
    y = _labels(X)
    for params in ({"max_depth": 5}, {"objective": "multi:softprob", "num_class": 3, "max_depth": 3},
                   {"objective": "binary:logistic", "max_depth": 3, "booster": "dart", "rate_drop": 0.3}):
        booster = xgb.train({**params, "nthread": 1}, xgb.DMatrix(X, y if "num_class" in params else y > 0), 6)
        cf = sf.compile(booster, forms="lazy")
        want = booster.predict(xgb.DMatrix(X), pred_interactions=True)
        for n in (1, 300):
            got = cf.predict(X[:n], pred_interactions=True)
            assert got.dtype == np.float32 and got.shape == want[:n].shape
            np.testing.assert_allclose(got, want[:n], rtol=1e-4, atol=1e-4 * np.abs(want).max())
        np.testing.assert_allclose(got.sum(axis=-1), cf.predict(X, pred_contribs=True), rtol=1e-4,
                                   atol=1e-4 * np.abs(want).max())
    with pytest.raises(InputError, match="one of"):
        cf.predict(X, pred_interactions=True, pred_contribs=True)
    lgb = pytest.importorskip("lightgbm")
    other = sf.compile(lgb.train({"num_leaves": 5, "verbose": -1, "num_threads": 1},
                                 lgb.Dataset(X.copy(), X[:, 0].copy()), 2), forms="lazy")
    with pytest.raises(UnsupportedModelError, match="pred_interactions"):
        other.predict(X, pred_interactions=True)


def test_lightgbm_pred_contrib_with_categories_and_classes():
    lgb = pytest.importorskip("lightgbm")
    pd = pytest.importorskip("pandas")
    X = _rows(600, 4, seed=1)
    frame = pd.DataFrame(X, columns=list("abcd"))
    frame["k"] = pd.Categorical(np.random.default_rng(1).choice(list("pqrstu"), 600))
    for params, y in (({"objective": "multiclass", "num_class": 3}, _labels(X)),
                      ({"objective": "regression"}, np.nan_to_num(X[:, 0]) + (frame["k"].cat.codes % 3))):
        booster = lgb.train({**params, "num_leaves": 15, "verbose": -1, "num_threads": 1,
                             "min_data_per_group": 5, "cat_smooth": 1}, lgb.Dataset(frame, y), 8)
        cf = sf.compile(booster)
        want = booster.predict(frame, pred_contrib=True)
        got = cf.predict(frame, pred_contribs=True)
        assert got.shape == want.shape and got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)
        # LightGBM's own keywords read as its Booster.predict reads them
        np.testing.assert_array_equal(cf.predict(frame, pred_contrib=True), got)
        np.testing.assert_allclose(cf.predict(frame, raw_score=True), booster.predict(frame, raw_score=True),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(cf.predict(frame, raw_score=True), cf.predict(frame, output_margin=True))


def test_catboost_shap_values():
    """CatBoost's ShapValues to float64's rounding on Lossguide and symmetric trees (those as
    CatBoost walks them, :mod:`silvanforge.runtime.shap_view`: deep enough for empty leaves,
    NaN rows, several classes).  Depthwise trees differ from the definition in CatBoost (and do
    not add up to the margin); ours follow the definition there, as on every other model."""
    cb = pytest.importorskip("catboost")
    X = _rows(400, 5, seed=4)
    y = _labels(X)
    model = cb.CatBoostClassifier(iterations=8, depth=4, grow_policy="Lossguide", loss_function="MultiClass",
                                  verbose=0, thread_count=1).fit(X, y)
    cf = sf.compile(model)
    np.testing.assert_allclose(cf.predict(X, pred_contribs=True),
                               model.get_feature_importance(cb.Pool(X), type="ShapValues"), rtol=1e-8, atol=1e-10)
    for symmetric in (cb.CatBoostRegressor(iterations=5, depth=6, verbose=0, thread_count=1).fit(X, np.nan_to_num(X[:, 0])),
                      cb.CatBoostClassifier(iterations=4, depth=5, loss_function="MultiClass", verbose=0,
                                            thread_count=1).fit(X, y)):
        cf = sf.compile(symmetric)
        assert any((t.cover[t.left < 0] == 0).any() for t in cf.forest.trees)  # empty leaves
        want = symmetric.get_feature_importance(cb.Pool(X), type="ShapValues")
        for n in (1, 9, 400):
            got = cf.predict(X[:n], pred_contribs=True)
            assert got.shape == want[:n].shape
            np.testing.assert_allclose(got, want[:n], rtol=1e-8, atol=1e-10)
        _adds_up(cf, X, cf.predict(X, pred_contribs=True))


def test_catboost_one_hot_symmetric_trees():
    """One-hot categorical splits in symmetric trees (each a table by leaf): CatBoost's values."""
    cb = pytest.importorskip("catboost")
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(10)
    frame = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300), "c": rng.choice(list("wxyz"), 300)})
    y = frame.a + 2.0 * (frame.c == "y")
    model = cb.CatBoostRegressor(iterations=5, depth=4, one_hot_max_size=10, verbose=0, thread_count=1)
    model.fit(frame, y, cat_features=["c"])
    cf = sf.compile(model, forms="lazy")
    # (the one-hot tests are computed columns, their contributions attributed to column c)
    assert cf.forest.hashed_combinations and cf.forest.num_features > cf.forest.input_features
    kernel, tables = cf.prepare_contributions()
    if kernel is not None:
        assert (tables.named["tree_levels"][:-1] > 0).all()
    np.testing.assert_allclose(cf.predict(frame, pred_contribs=True),
                               model.get_feature_importance(cb.Pool(frame, cat_features=["c"]), type="ShapValues"),
                               rtol=1e-8, atol=1e-10)


def test_the_table_budget_is_an_option():
    """``prepare_contributions(table_bytes=...)``: no tables (every path a row at a time) or
    the default's, the same values; a negative budget is a clear error."""
    cb = pytest.importorskip("catboost")
    X = _rows(200, 4, seed=9)
    model = cb.CatBoostRegressor(iterations=4, depth=5, verbose=0, thread_count=1).fit(X, np.nan_to_num(X[:, 0]))
    cf = sf.compile(model, forms="lazy")
    want = model.get_feature_importance(cb.Pool(X), type="ShapValues")
    for budget in (0, None):
        cf.prepare_contributions(table_bytes=budget)
        np.testing.assert_allclose(cf.predict(X, pred_contribs=True), want, rtol=1e-8, atol=1e-10)
    with pytest.raises(InputError, match="table_bytes"):
        cf.prepare_contributions(table_bytes=-1)


def test_random_forests_equal_the_definition():
    """Random trees (NaN, categorical splits, several outputs) with random covers.  Forests whose
    trees are taken by their min or max are refused, so half the draws are summed or averaged
    forests, and enough of all the draws must be compared."""
    draws = Draws()

    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(forest=st.one_of(forests(max_trees=4, max_depth=5, max_features=5),
                            forests(max_trees=4, max_depth=5, max_features=5,
                                    aggregations=(Aggregation.SUM, Aggregation.AVERAGE))),
           seed=st.integers(0, 2**16))
    def check(forest, seed):
        rng = np.random.default_rng(seed)
        trees = []
        for tree in forest.trees:
            cover = rng.integers(1, 50, tree.num_nodes).astype(np.float64)
            for node in range(tree.num_nodes - 1, -1, -1):  # a split's cover: its children's
                if tree.left[node] >= 0:
                    cover[node] = cover[tree.left[node]] + cover[tree.right[node]]
            trees.append(dataclasses.replace(tree, cover=cover))
        forest = dataclasses.replace(forest, trees=trees)
        if forest.has_linear() or forest.aggregation.value not in ("sum", "average"):
            with pytest.raises(UnsupportedModelError):
                sf.compile(forest, forms="lazy").predict(rows_for(forest, rng, 2), pred_contribs=True)
            draws.count("refused")
            return
        cf = sf.compile(forest, forms="lazy")
        X = rows_for(forest, rng, 6)
        got = cf.predict(X, pred_contribs=True).reshape(6, forest.num_outputs, -1)
        np.testing.assert_allclose(got, reference.predict_contribs(forest, X), rtol=1e-9, atol=1e-9)
        draws.count("compared")

    check()
    draws.assert_share("compared", 0.3)


def test_scikit_learn_forest_contributions_follow_the_definition():
    pytest.importorskip("sklearn")
    from sklearn.ensemble import RandomForestRegressor

    X = _rows(300, 4, seed=6, nan=0.0).astype(np.float32)
    model = RandomForestRegressor(n_estimators=3, max_depth=4, random_state=0).fit(X, X[:, 0] + X[:, 1] ** 2)
    cf = sf.compile(model)
    got = cf.predict(X[:10], pred_contribs=True)
    np.testing.assert_allclose(got, reference.predict_contribs(cf.forest, X[:10])[:, 0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.sum(axis=1), model.predict(X[:10]), rtol=1e-5)


def test_contributions_survive_saving_and_pickling(tmp_path):
    lgb = pytest.importorskip("lightgbm")
    X = _rows(300, 4, seed=7)
    booster = lgb.train({"num_leaves": 9, "verbose": -1, "num_threads": 1}, lgb.Dataset(X, X[:, 0]), 5)
    want = booster.predict(X, pred_contrib=True)
    cf = sf.compile(booster, forms="lazy")
    cf.save(tmp_path / "m.forge")
    for back in (cf, sf.load_compiled(tmp_path / "m.forge", trust_code=True), pickle.loads(pickle.dumps(cf))):
        np.testing.assert_allclose(back.predict(X, pred_contribs=True), want, rtol=1e-8, atol=1e-10)


def test_tables_are_kept_in_artifacts_pickles_and_the_code_cache(tmp_path, monkeypatch):
    """The kernel's tables, made once, travel with the model: a trusted load (a file, a pickle,
    a code-cache hit) answers without making them again, equal to the library; an untrusted
    load, an artifact saved before they were made, or tables laid out for another kernel make
    them again."""
    lgb = pytest.importorskip("lightgbm")
    from silvanforge.runtime import shap_arrays

    X = _rows(300, 4, seed=8)
    booster = lgb.train({"num_leaves": 9, "verbose": -1, "num_threads": 1}, lgb.Dataset(X, X[:, 0]), 5)
    want = booster.predict(X, pred_contrib=True)
    cf = sf.compile(booster, forms="lazy")
    cf.save(tmp_path / "before.forge")
    kernel, tables = cf.prepare_contributions()
    if kernel is None:
        pytest.skip("no installed target has a contributions kernel")
    cf.save(tmp_path / "m.forge")
    made = []
    real = shap_arrays.arrays
    monkeypatch.setattr(shap_arrays, "arrays", lambda *a, **k: made.append(1) or real(*a, **k))
    kept = [sf.load_compiled(tmp_path / "m.forge", trust_code=True), pickle.loads(pickle.dumps(cf))]
    for back in kept:
        assert "pred_contribs: saved (taken at its first request)" in back.show("plan")
        np.testing.assert_allclose(back.predict(X, pred_contribs=True), want, rtol=1e-8, atol=1e-10)
        assert "pred_contribs: built" in back.show("plan")
        assert back.prepare_contributions()[1].named.keys() == tables.named.keys()
    assert not made
    with pytest.warns(ArtifactWarning):
        untrusted = sf.load_compiled(tmp_path / "m.forge", key="another key")
    for back in (untrusted, sf.load_compiled(tmp_path / "before.forge", trust_code=True)):
        np.testing.assert_allclose(back.predict(X, pred_contribs=True), want, rtol=1e-8, atol=1e-10)
    assert len(made) == 2
    arrays, record = shap_arrays.saved(tables, kernel.arg_layout)
    assert shap_arrays.restored(arrays, record, kernel.arg_layout) is not None
    assert shap_arrays.restored(arrays, record, (*kernel.arg_layout, "another_array")) is None
    cache = tmp_path / "cache"
    first = sf.compile(booster, cache=cache)
    first.prepare_contributions()  # (made, and written into its entry)
    assert len(made) == 3
    np.testing.assert_allclose(sf.compile(booster, cache=cache).predict(X, pred_contribs=True), want,
                               rtol=1e-8, atol=1e-10)
    assert len(made) == 3


def test_contributions_of_a_cached_lazy_compile_leave_its_forms_unbuilt(tmp_path):
    """Tables made while a cached compile's other forms wait for their first use: the entry is
    not written then (that would build the whole plan on the caller's thread), and once the
    forms are built it holds the tables."""
    lgb = pytest.importorskip("lightgbm")
    X = _rows(200, 4, seed=9)
    booster = lgb.train({"num_leaves": 9, "verbose": -1, "num_threads": 1}, lgb.Dataset(X, X[:, 0]), 5)
    want = booster.predict(X, pred_contrib=True)
    cf = sf.compile(booster, cache=tmp_path / "cache", forms="lazy", options=sf.CompileOptions(plan_min_ns=0))
    np.testing.assert_allclose(cf.predict(X, pred_contribs=True), want, rtol=1e-8, atol=1e-10)
    assert not cf.forms_built and cf._late is not None and not cf._late.started
    cf.wait()
    again = sf.compile(booster, cache=tmp_path / "cache")
    np.testing.assert_allclose(again.predict(X, pred_contribs=True), want, rtol=1e-8, atol=1e-10)


def test_models_without_covers_and_bad_combinations_are_one_clear_error():
    forest = sf.Forest(trees=[sf.Tree.from_nodes([1, -1, -1], [2, -1, -1], [0, -1, -1], [0.5, 0, 0],
                                                 [0.0, 1.0, 2.0])], num_features=1)
    cf = sf.compile(forest, forms="lazy")
    X = np.array([[0.1], [0.9]], dtype=np.float32)
    with pytest.raises(UnsupportedModelError, match="no covers"):
        cf.predict(X, pred_contribs=True)
    with pytest.raises(UnsupportedModelError, match="ONNX"):
        sf.compile(dataclasses.replace(forest, source="onnx"), forms="lazy").predict(X, pred_contribs=True)
    covered = dataclasses.replace(forest, trees=[dataclasses.replace(forest.trees[0], cover=np.array([4.0, 3.0, 1.0]))])
    got = sf.compile(covered, forms="lazy").predict(X, pred_contribs=True)
    # E[f] = (3 * 1 + 1 * 2) / 4 = 1.25; the row's leaf minus that goes to the feature
    np.testing.assert_allclose(got, [[-0.25, 1.25], [0.75, 1.25]])
    with pytest.raises(InputError, match="one of pred_leaf, per_tree and pred_contribs"):
        cf.predict(X, pred_leaf=True, pred_contribs=True)


def test_cli_writes_contributions(tmp_path):
    from silvanforge import cli

    lgb = pytest.importorskip("lightgbm")
    X = _rows(40, 3, seed=8, nan=0.0)
    booster = lgb.train({"num_leaves": 5, "verbose": -1, "num_threads": 1}, lgb.Dataset(X, X[:, 0]), 4)
    booster.save_model(str(tmp_path / "m.txt"))
    np.savetxt(tmp_path / "x.csv", X, delimiter=",")
    assert cli.main(["predict", str(tmp_path / "m.txt"), "-i", str(tmp_path / "x.csv"), "--contribs",
                     "-o", str(tmp_path / "c.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "c.npy"), booster.predict(X, pred_contrib=True), rtol=1e-8, atol=1e-12)
    # CSV: a header of the features' names and bias (each class's, several classes), then the rows
    three = lgb.train({"num_leaves": 5, "verbose": -1, "num_threads": 1, "objective": "multiclass", "num_class": 3},
                      lgb.Dataset(X, (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)), 3)
    three.save_model(str(tmp_path / "m3.txt"))
    for model, classes, want in (("m.txt", 1, booster.predict(X, pred_contrib=True)),
                                 ("m3.txt", 3, three.predict(X, pred_contrib=True))):
        assert cli.main(["predict", str(tmp_path / model), "-i", str(tmp_path / "x.csv"), "--contribs",
                         "-o", str(tmp_path / "c.csv")]) == 0
        lines = (tmp_path / "c.csv").read_text().splitlines()
        block = ["f0", "f1", "f2", "bias"]  # (unnamed features: LightGBM's Column_N are not kept)
        assert lines[0].split(",") == (block if classes == 1 else [f"class{k}:{n}" for k in range(3) for n in block])
        np.testing.assert_allclose(np.loadtxt(lines[1:], delimiter=","), want, rtol=1e-12, atol=1e-12)
    # no rows: the header alone, of a 3-D output too (XGBoost's classes)
    xgb = pytest.importorskip("xgboost")
    multi = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 2},
                      xgb.DMatrix(X, (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)), 2)
    multi.save_model(str(tmp_path / "x3.json"))
    (tmp_path / "none.npy").write_bytes(b"")
    np.save(tmp_path / "none.npy", X[:0])
    assert cli.main(["predict", str(tmp_path / "x3.json"), "-i", str(tmp_path / "none.npy"), "--contribs",
                     "-o", str(tmp_path / "c0.csv")]) == 0
    assert (tmp_path / "c0.csv").read_text().splitlines() == \
        [",".join(f"class{k}:{n}" for k in range(3) for n in ("f0", "f1", "f2", "bias"))]


def test_catboost_single_feature_ctrs_equal_catboost():
    """CTRs over one categorical feature each (computed columns): attributed to that feature, as
    CatBoost's ShapValues attribute them, with its one-hot tests of another feature beside them."""
    cb = pytest.importorskip("catboost")
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(3)
    n = 400
    frame = pd.DataFrame({"a": rng.normal(size=n), "c": rng.choice([f"v{i}" for i in range(20)], n),
                          "b": rng.normal(size=n), "d": rng.choice(list("pqrst"), n)})
    y = frame.a + (frame.c.str[1:].astype(int) % 3) + 0.5 * (frame.d == "q")
    model = cb.CatBoostRegressor(iterations=12, depth=5, one_hot_max_size=6, max_ctr_complexity=1, verbose=0,
                                 thread_count=1).fit(frame, y, cat_features=["c", "d"])
    cf = sf.compile(model, forms="lazy")
    assert cf.forest.hashed_combinations and cf.forest.num_features > cf.forest.input_features
    want = model.get_feature_importance(cb.Pool(frame, cat_features=["c", "d"]), type="ShapValues")
    for rows in (slice(0, 1), slice(0, 50), slice(None)):
        np.testing.assert_allclose(cf.predict(frame[rows], pred_contribs=True), want[rows], rtol=1e-8, atol=1e-10)

"""Interventional SHAP contributions (``predict(X, pred_contribs=True, background=R)``): equal
to the definition (every coalition's hybrid row through the reference evaluator, averaged over
the background) on random forests and trained models, tabled or not; equal to shap's
interventional TreeExplainer where shap is installed; a row's values add up to its margin and
the bias is the background's mean margin; bad combinations are one clear error."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, rows_for
from support_common import Draws
from support_common import normal_rows as _rows

import silvanforge as sf
from silvanforge.errors import InputError, UnsupportedModelError
from silvanforge.ir.hir import Aggregation
from silvanforge.runtime import interventional, reference


def _definition(forest, X, R) -> np.ndarray:
    """(n, outputs, F + 1): each feature's Shapley value of the game ``S -> f(x on S, r off
    S)``, averaged over the background rows ``R``; the bias: the background's mean margin."""
    F, K = X.shape[1], forest.num_outputs
    forest = dataclasses.replace(forest, accumulate_dtype="float64")  # (the sums as the tables make them)
    out = np.zeros((len(X), K, F + 1))
    coalitions = list(itertools.product([False, True], repeat=F))
    mask = np.array(coalitions)
    for a, x in enumerate(X):
        for r in R:
            value = dict(zip(coalitions, reference.predict_margin(forest, np.where(mask, x, r)).astype(np.float64)))
            for i in range(F):
                for S in coalitions:
                    if not S[i]:
                        k = sum(S)
                        weight = math.factorial(k) * math.factorial(F - k - 1) / math.factorial(F)
                        out[a, :, i] += weight * (value[S[:i] + (True,) + S[i + 1:]] - value[S]) / len(R)
            out[a, :, F] += value[coalitions[0]] / len(R)
    return out


def test_random_forests_equal_the_definition():
    """Random trees (NaN, categorical splits, zero as missing, several outputs), summed or
    averaged, with and without tables; forests taken by min or max are refused."""
    draws = Draws()

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(forest=forests(max_trees=4, max_depth=4, max_features=4), seed=st.integers(0, 2**16))
    def check(forest, seed):
        rng = np.random.default_rng(seed)
        cf = sf.compile(forest, forms="lazy")
        X, R = rows_for(forest, rng, 3), rows_for(forest, rng, 4)
        if forest.has_linear() or forest.aggregation not in (Aggregation.SUM, Aggregation.AVERAGE):
            with pytest.raises(UnsupportedModelError, match="background"):
                cf.predict(X, pred_contribs=True, background=R)
            draws.count("refused")
            return
        want = _definition(forest, X.astype(forest.threshold_dtype), R.astype(forest.threshold_dtype))
        got = cf.predict(X, pred_contribs=True, background=R).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
        rows = R.astype(forest.threshold_dtype)
        untabled = interventional.background_tables(forest, rows, table_bytes=0)
        assert all(g.tabled == 0 for g in untabled.tables.groups)
        np.testing.assert_allclose(interventional.contributions(untabled, X.astype(forest.threshold_dtype), forest),
                                   want, rtol=1e-9, atol=1e-9)
        draws.count("compared")

    check()
    draws.assert_share("compared", 0.3)


def test_trained_models_equal_the_definition_and_add_up():
    """XGBoost (float32, several classes), LightGBM with categories from a pandas frame, and a
    scikit-learn forest (an average): the definition; a row adds up to its margin, the bias is
    the background's mean margin; a frame as the background equals its array."""
    xgb = pytest.importorskip("xgboost")
    lgb = pytest.importorskip("lightgbm")
    pd = pytest.importorskip("pandas")
    from sklearn.ensemble import RandomForestRegressor

    X = _rows(400, 4, seed=3)
    y = np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 1]) ** 2
    frame = pd.DataFrame(X, columns=list("abcd"))
    frame["c"] = pd.Categorical((np.abs(np.nan_to_num(X[:, 2])) * 3).astype(int) % 5)
    models = [xgb.XGBClassifier(n_estimators=4, max_depth=3, n_jobs=1).fit(X, (y > 0).astype(int) + (y > 2)),
              lgb.LGBMRegressor(n_estimators=5, num_leaves=7, min_child_samples=5, verbose=-1, n_jobs=1).fit(frame, y),
              RandomForestRegressor(n_estimators=3, max_depth=4, random_state=0).fit(np.nan_to_num(X), y)]
    for model, inputs in zip(models, (X, frame, np.nan_to_num(X))):
        cf = sf.compile(model, forms="lazy")
        rows, back = inputs[:5], inputs[100:106]
        got = cf.predict(rows, pred_contribs=True, background=back)
        arrays = [sf_rows(cf, v) for v in (rows, back)]
        want = _definition(cf.forest, *arrays)
        tol = 1e-9 if got.dtype == np.float64 else 1e-6  # (XGBoost's are float32, as its pred_contribs)
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=tol, atol=tol)
        margin = cf.predict(rows, output_margin=True).reshape(len(rows), -1)
        np.testing.assert_allclose(want.sum(axis=-1), margin, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(want[0, :, -1], cf.predict(back, output_margin=True).reshape(len(back), -1).mean(0),
                                   rtol=1e-5, atol=1e-6)
        if inputs is frame:
            np.testing.assert_array_equal(cf.predict(rows, pred_contribs=True, background=arrays[1]), got)


def sf_rows(cf, X):
    """``X`` as the compiled model reads it (frames matched by name, categories by code)."""
    from silvanforge.inputs.rows import as_rows

    return as_rows(X, cf.forest, np.dtype(cf.forest.threshold_dtype))


def test_equal_to_shap_interventional():
    shap = pytest.importorskip("shap")
    xgb = pytest.importorskip("xgboost")
    lgb = pytest.importorskip("lightgbm")
    X = _rows(500, 6, seed=4)
    y = np.nan_to_num(X[:, 0] - np.nan_to_num(X[:, 3]) * X[:, 1])
    boosters = [xgb.train({"max_depth": 4, "nthread": 1}, xgb.DMatrix(X, y), 10),
                lgb.train({"num_leaves": 15, "verbose": -1, "num_threads": 1}, lgb.Dataset(X, y), 10)]
    for booster in boosters:
        cf = sf.compile(booster, forms="lazy")
        back = X[200:230]
        explainer = shap.TreeExplainer(booster, data=back, feature_perturbation="interventional", model_output="raw")
        want = explainer.shap_values(X[:20], check_additivity=False)
        got = cf.predict(X[:20], pred_contribs=True, background=back)
        np.testing.assert_allclose(got[:, :-1], want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[:, -1], explainer.expected_value, rtol=1e-5, atol=1e-6)


def test_models_without_covers_are_explained_against_a_background():
    forest = sf.Forest(trees=[sf.Tree.from_nodes([1, -1, -1], [2, -1, -1], [0, -1, -1], [0.5, 0, 0],
                                                 [0.0, 1.0, 2.0])], num_features=1, source="onnx")
    cf = sf.compile(forest, forms="lazy")
    X = np.array([[0.1], [0.9]], dtype=np.float32)
    R = np.array([[0.2], [0.3], [0.7], [0.8]], dtype=np.float32)
    # E[f(R)] = (1 + 1 + 2 + 2) / 4 = 1.5; the row's leaf minus that goes to the feature
    np.testing.assert_allclose(cf.predict(X, pred_contribs=True, background=R), [[-0.5, 1.5], [0.5, 1.5]])


def test_bad_combinations_are_one_clear_error_and_the_tables_are_kept(monkeypatch):
    forest = sf.Forest(trees=[sf.Tree.from_nodes([1, -1, -1], [2, -1, -1], [0, -1, -1], [0.5, 0, 0],
                                                 [0.0, 1.0, 2.0])], num_features=1)
    cf = sf.compile(forest, forms="lazy")
    X = np.array([[0.1], [0.9]], dtype=np.float32)
    with pytest.raises(InputError, match="background applies to pred_contribs"):
        cf.predict(X, background=X)
    with pytest.raises(InputError, match="background applies to pred_contribs"):
        cf.predict(X, pred_leaf=True, background=X)
    with pytest.raises(InputError, match="one of"):
        cf.predict(X, pred_contribs=True, pred_interactions=True, background=X)
    with pytest.raises(InputError, match="no rows"):
        cf.predict(X, pred_contribs=True, background=X[:0])
    with pytest.raises(InputError):
        cf.predict(X, pred_contribs=True, background=np.zeros((2, 3)))
    built = []
    real = interventional.background_tables
    monkeypatch.setattr(interventional, "background_tables", lambda *a, **k: built.append(1) or real(*a, **k))
    first = cf.predict(X, pred_contribs=True, background=X)
    np.testing.assert_array_equal(cf.predict(X, pred_contribs=True, background=X.copy()), first)
    assert len(built) == 1  # the same values: the same tables
    cf.predict(X, pred_contribs=True, background=X[::-1] + 0.01)
    assert len(built) == 2
    minimum = dataclasses.replace(forest, aggregation=Aggregation.MIN)
    with pytest.raises(UnsupportedModelError, match="min"):
        sf.compile(minimum, forms="lazy").predict(X, pred_contribs=True, background=X)


def test_cli_writes_interventional_contributions(tmp_path, capsys):
    from silvanforge import cli

    lgb = pytest.importorskip("lightgbm")
    X = _rows(60, 3, seed=8, nan=0.0)
    booster = lgb.train({"num_leaves": 5, "verbose": -1, "num_threads": 1}, lgb.Dataset(X, X[:, 0]), 4)
    booster.save_model(str(tmp_path / "m.txt"))
    np.savetxt(tmp_path / "x.csv", X[:10], delimiter=",")
    np.save(tmp_path / "r.npy", X[30:40])
    assert cli.main(["predict", str(tmp_path / "m.txt"), "-i", str(tmp_path / "x.csv"), "--contribs",
                     "--background", str(tmp_path / "r.npy"), "-o", str(tmp_path / "c.csv")]) == 0
    lines = (tmp_path / "c.csv").read_text().splitlines()
    assert lines[0].split(",") == ["f0", "f1", "f2", "bias"]
    cf = sf.compile(str(tmp_path / "m.txt"), forms="lazy")
    np.testing.assert_allclose(np.loadtxt(lines[1:], delimiter=","),
                               cf.predict(X[:10], pred_contribs=True, background=X[30:40]), rtol=1e-12, atol=1e-12)
    # without --contribs, a missing file, the background as the output: one line each, no traceback
    for extra, message in ((["--background", str(tmp_path / "r.npy")], "applies to --contribs"),
                           (["--contribs", "--background", str(tmp_path / "none.csv")], "--background"),
                           (["--contribs", "--background", str(tmp_path / "r.npy"), "-o", str(tmp_path / "r.npy")],
                            "destroy")):
        assert cli.main(["predict", str(tmp_path / "m.txt"), "-i", str(tmp_path / "x.csv"), *extra]) != 0
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err

"""LightGBM linear trees (``linear_tree=True``, ``is_linear=1``) against LightGBM's own ``predict``.

Models are trained here (regression with ``linear_lambda``, binary,
multiclass, categorical splits) on data with NaN, and written by hand where training does not
produce the case (a single-leaf tree with terms, tiny and infinite inputs); every prediction is
compared bit for bit (LightGBM computes in float64): the reference evaluator, the default
compile at 1, 2, 17 and 300 rows, every representation that carries linear leaves, padded
trees, saved and pickled models.  Representations and targets that do not carry them refuse
with a message saying so, and malformed linear fields are refused naming the tree and field.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import support_lightgbm as S

import silvanforge as sf
from silvanforge.api import lower
from silvanforge.errors import ModelFormatError, UnsupportedModelError
from silvanforge.frontend.hir_passes import pad_trees
from silvanforge.ir import hir_io
from silvanforge.plugins import registry
from silvanforge.runtime import reference

lgb = pytest.importorskip("lightgbm")

CARRYING = ("array", "sparse", "reorg")
SIZES = (1, 2, 17, 300)


def _train(params: dict, X, y, rounds: int, categorical="auto"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lgb.train({"linear_tree": True, "verbose": -1, "num_threads": 1, "seed": 7,
                          "deterministic": True, "num_leaves": 8, "min_data_in_leaf": 8, **params},
                         lgb.Dataset(X, y, categorical_feature=categorical), rounds)


def _models():
    rng = np.random.default_rng(29)
    n, d = 500, 5
    X = rng.normal(size=(n, d))
    X[rng.random((n, d)) < 0.08] = np.nan
    lin = 2 * np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 1]) + 0.5 * np.nan_to_num(X[:, 2]) ** 2
    y = lin + 0.1 * rng.normal(size=n)
    T = S.sprinkle(rng.normal(size=(300, d)) * 1.5, rng)
    models = {
        "regression": (_train({"objective": "regression", "linear_lambda": 0.1}, X, y, 20), T),
        "binary": (_train({"objective": "binary"}, X, (y > np.median(y)).astype(float), 15), T),
        "multiclass": (_train({"objective": "multiclass", "num_class": 3, "num_leaves": 6},
                              X, np.digitize(y, np.quantile(y, [0.33, 0.66])), 8), T),
    }
    # Categorical splits (the linear models use numerical features only).
    cat = rng.integers(0, 12, size=n).astype(np.float64)
    Xc = np.column_stack([cat, X[:, :3]])
    yc = rng.normal(size=12)[cat.astype(int)] * 3 + lin
    Tc = np.column_stack([rng.choice(np.r_[np.arange(12), [12, 40, -1, -0.5, 2.5, np.nan]], size=300), T[:, :3]])
    models["categorical"] = (_train({"objective": "regression", "max_cat_to_onehot": 2, "min_data_per_group": 5,
                                     "cat_smooth": 1}, Xc, yc, 15, categorical=[0]), Tc)
    return models


@pytest.fixture(scope="module")
def models():
    return _models()


@pytest.fixture(scope="module")
def compiled(models):
    return {name: sf.compile(booster) for name, (booster, _) in models.items()}


def _same(got, want, what):
    """Bit for bit: margins, and outputs of models without a transform."""
    np.testing.assert_array_equal(got, want, err_msg=what)


def _close(got, want, what):
    """Transformed outputs: LightGBM's exp is the C library's, the reference's NumPy's (they
    differ in the last bit of a few values); the margins under them are compared bit for bit."""
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0, err_msg=what)


def test_models_have_linear_leaves_with_terms(models):
    for name, (booster, _) in models.items():
        forest = sf.load_model(booster)
        assert forest.has_linear(), name
        assert sum(len(t.linear.feature) for t in forest.trees) > 0, name
    text = models["categorical"][0].model_to_string()
    assert "num_cat=1" in text, "the categorical model should split on its category column"


@pytest.mark.parametrize("name", ["regression", "binary", "multiclass", "categorical"])
def test_reference_matches_lightgbm(models, name):
    booster, T = models[name]
    forest = sf.load_model(booster)
    _close(reference.predict(forest, T), booster.predict(T), name)
    _same(reference.predict(forest, T, output_margin=True), booster.predict(T, raw_score=True), name)
    # Padding copies a leaf's model with the leaf.
    _same(reference.predict(pad_trees(forest), T, output_margin=True), booster.predict(T, raw_score=True),
          f"{name} padded")


@pytest.mark.parametrize("name", ["regression", "binary", "multiclass", "categorical"])
def test_default_compile_matches_lightgbm(models, compiled, name):
    booster, T = models[name]
    cf = compiled[name]
    want, margin = booster.predict(T), booster.predict(T, raw_score=True)
    for n in SIZES:
        _close(cf.predict(T[:n]), want[:n], f"{name} {n} rows")
        _same(cf.predict(T[:n], output_margin=True), margin[:n], f"{name} {n} rows, margins")
    # float32 rows: LightGBM widens them to float64, as the compiled model does.
    with np.errstate(over="ignore"):
        T32 = T.astype(np.float32)
    _same(cf.predict(T32[:17], output_margin=True), booster.predict(T32[:17], raw_score=True), f"{name} float32")


@pytest.mark.parametrize("rep", CARRYING)
@pytest.mark.parametrize("name", ["regression", "multiclass", "categorical"])
def test_every_carrying_representation(models, name, rep):
    booster, T = models[name]
    want = booster.predict(T, raw_score=True)
    for pad in (False, True):
        cf = sf.compile(booster, rep=rep, pad=pad)
        for n in (2, 300):
            _same(cf.predict(T[:n], output_margin=True), want[:n], f"{name} rep={rep} pad={pad} {n} rows")


def test_one_row_forms_and_tiles(models):
    booster, T = models["regression"]
    want = booster.predict(T)
    for kw in ({"batch_size": 1}, {"tile_size": 4, "rep": "sparse"}, {"schedule": "one-tree-at-a-time"}):
        cf = sf.compile(booster, **kw)
        for n in (1, 17):
            _same(cf.predict(T[:n]), want[:n], f"{kw} {n} rows")


def _edge_model() -> str:
    """Two hand-written linear trees: a single leaf with two terms, and a split whose right leaf
    reads a feature the split does not (LightGBM fits only branch features; it reads any); and
    a tree without linear leaves beside them."""
    single = S.tree_block(0, leaf_value=(0.5,))
    single = single.replace("is_linear=0", "is_linear=1\nleaf_const=0.25\nnum_features=2\n"
                                            "leaf_features=0 1 \nleaf_coeff=1.5 -3 ")
    split = S.tree_block(1, split_feature=(1,), threshold=(0.5,), decision_type=(2,), left_child=(-1,),
                         right_child=(-2,), leaf_value=(7.0, 8.0))
    split = split.replace("is_linear=0", "is_linear=1\nleaf_const=0 1\nnum_features=0 1\n"
                                         "leaf_features=  2 \nleaf_coeff=  0.125 ")
    plain = S.tree_block(2, split_feature=(2,), threshold=(-0.25,), decision_type=(8,), left_child=(-1,),
                         right_child=(-2,), leaf_value=(-1.0, 2.0))
    return S.model_text([single, split, plain], 3)


def test_hand_written_edge_cases(tmp_path):
    text = _edge_model()
    path = tmp_path / "edge.txt"
    path.write_text(text)
    booster = lgb.Booster(model_file=str(path))
    forest = sf.load_model(path)
    assert forest.trees[0].num_nodes == 1 and forest.trees[0].linear is not None
    assert forest.trees[2].linear is None
    rng = np.random.default_rng(3)
    T = S.sprinkle(rng.normal(size=(200, 3)), rng, special_frac=0.3)
    T[:6] = [[1e-36, 0, 0], [np.inf, -np.inf, 0], [np.nan, 1, 0], [2, np.nan, 0], [1, 1, np.nan], [1, 1, np.inf]]
    want = booster.predict(T)
    _same(reference.predict(forest, T), want, "reference")
    for rep in (None,) + CARRYING:
        cf = sf.compile(path, rep=rep)
        for n in (1, 17, 200):
            _same(cf.predict(T[:n]), want[:n], f"rep={rep} {n} rows")


@pytest.mark.parametrize("rep", ["bitvector", "oblivious"])
def test_representations_without_linear_leaves_refuse(models, rep):
    if rep not in registry().representations():
        pytest.skip(f"{rep} is not installed")
    booster, _ = models["regression"]
    forest = sf.load_model(booster)
    with pytest.raises(UnsupportedModelError, match=rf"the {rep} representation cannot run this model: "
                                                    r"it does not carry linear leaves.*--rep sparse"):
        sf.compile(booster, rep=rep)
    # The default choice skips them: their cost is the reason.
    why = {name: reason for name, ns, reason in registry().rep_costs(forest, "cpu", None)}
    assert "linear leaves" in why[rep]
    assert all(ns is not None for name, ns, _ in registry().rep_costs(forest, "cpu", None) if name in CARRYING)


def test_gpu_targets_refuse(models):
    booster, _ = models["regression"]
    gpus = [t for t in registry().targets() if registry().target_kind(t) == "gpu"]
    if not gpus:
        pytest.skip("no GPU target plugin installed")
    for target in gpus:
        with pytest.raises(UnsupportedModelError, match=rf"target '{target}' does not evaluate linear leaves.*cpu"):
            lower(booster, target=target)


def test_saved_and_pickled(models, compiled, tmp_path):
    booster, T = models["binary"]
    cf = compiled["binary"]
    want = booster.predict(T, raw_score=True)
    _same(pickle.loads(pickle.dumps(cf)).predict(T, output_margin=True), want, "pickled")
    cf.save(tmp_path / "m.forge")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unsigned: compiled again, from the saved forest
        loaded = sf.load_compiled(tmp_path / "m.forge")
    _same(loaded.predict(T, output_margin=True), want, "loaded")
    _same(loaded.predict(T[:1], output_margin=True), want[:1], "loaded, one row")


def test_forest_arrays_and_fingerprint(models):
    forest = sf.load_model(models["categorical"][0])
    back = hir_io.from_arrays(hir_io.to_arrays(forest))
    assert back.fingerprint() == forest.fingerprint()
    for a, b in zip(forest.trees, back.trees):
        for field in ("const", "begin", "feature", "coeff"):
            np.testing.assert_array_equal(getattr(a.linear, field), getattr(b.linear, field))
    # The same trees without their models are another program (code caches and artifacts).
    plain = sf.load_model(models["categorical"][0])
    for t in plain.trees:
        t.linear = None
    assert plain.fingerprint() != forest.fingerprint()
    assert "linear" in sf.show(forest, "hir") and "linear_const" in sf.show(forest, "lir")


def test_sklearn_estimators():
    from silvanforge import sklearn as sfsk

    rng = np.random.default_rng(11)
    X = rng.normal(size=(300, 4))
    y = X[:, 0] * 3 + X[:, 1]
    T = S.sprinkle(rng.normal(size=(50, 4)), rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = lgb.LGBMRegressor(linear_tree=True, n_estimators=10, num_leaves=6, verbose=-1).fit(X, y)
        clf = lgb.LGBMClassifier(linear_tree=True, n_estimators=10, num_leaves=6, verbose=-1).fit(X, y > 0)
    _same(sf.compile(reg).predict(T), reg.predict(T), "LGBMRegressor")
    est = sfsk.compile(clf)
    _close(est.predict_proba(T), clf.predict_proba(T), "LGBMClassifier probabilities")
    _same(est.predict(T), clf.predict(T), "LGBMClassifier labels")


@pytest.mark.parametrize("edit, message", [
    (("num_features=0 1", "num_features=1 1"), r"Tree=1 .*'leaf_features' has 1 entries, expected 2"),
    (("num_features=0 1", "num_features=0 -1"), r"Tree=1 .*'num_features' holds -1"),
    (("leaf_features=  2 ", "leaf_features=  3 "), r"Tree=1 .*'leaf_features' holds feature 3, outside 0..2"),
    (("leaf_coeff=  0.125 ", "leaf_coeff=  inf "), r"Tree=1 .*'leaf_coeff' holds inf, which is not finite"),
    (("leaf_const=0 1", "leaf_const=0 nan"), r"Tree=1 .*'leaf_const' holds nan"),
    (("leaf_const=0 1", "leaf_const=0 1 2"), r"Tree=1 .*'leaf_const' has 3 entries, expected 2"),
    (("leaf_coeff=  0.125 \n", ""), r"Tree=1 .*no 'leaf_coeff=' line"),
])
def test_malformed_linear_fields(edit, message):
    text = _edge_model()
    old, new = edit
    assert old in text
    with pytest.raises(ModelFormatError, match=message):
        sf.load_model(text.replace(old, new).encode())

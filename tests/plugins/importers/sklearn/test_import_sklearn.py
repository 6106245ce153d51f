"""The scikit-learn importer against scikit-learn itself.

Every supported estimator, fitted here on random data (with NaN where it accepts NaN), must give
exactly (bit for bit) what its own ``predict_proba`` (classifiers) or ``predict`` (regressors)
gives, through the reference evaluator and through ``silvanforge.compile``: on random rows, on
rows placed on and beside every split threshold (in float32 and float64), and for
HistGradientBoosting's categorical features on every kind of value numpy input can hold.
Unsupported estimators must be refused with a message naming the problem.

Over 600 lines because every section measures the one importer with the same tools (the
exactness check, the rows on and beside each split, the fitted cases) under one OpenMP setting
for the module; split, the sections would import those tools from each other.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import silvanforge as sf
from silvanforge.errors import InputError, ModelFormatError, UnsupportedModelError
from silvanforge.ir.hir import CategoryRule, Op
from silvanforge.plugins import PluginRegistry, registry
from silvanforge.runtime import reference, transforms

sklearn = pytest.importorskip("sklearn")
from silvanforge_importer_sklearn.tree_arrays import round_down_to_float32  # noqa: E402
from sklearn import dummy, ensemble, linear_model, tree  # noqa: E402

SEED = 0


@pytest.fixture(autouse=True, scope="module")
def one_openmp_thread():
    """HistGradientBoosting fits and predicts with OpenMP threads that spin while they wait;
    on a small shared machine they fight the compiled kernels' own threads (seconds lost per
    call).  One thread changes none of scikit-learn's numbers (rows are independent)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
        yield


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def import_object(est):
    """The hook every in-memory model goes through (what load_model / compile call)."""
    return registry().hook.silvanforge_import_object(obj=est)


def expected(est, X):
    return est.predict_proba(X) if hasattr(est, "predict_proba") else est.predict(X)


def assert_exact(est, X, forest=None, check_reference=True, **compile_kwargs):
    """The forest of ``est`` gives exactly what scikit-learn gives on ``X``, compiled and (unless
    ``check_reference`` is False) through the reference evaluator; returns the forest."""
    want = expected(est, X)
    forest = import_object(est) if forest is None else forest
    if check_reference:
        ref = reference.predict(forest, X)
        assert ref.shape == want.shape and ref.dtype == want.dtype
        np.testing.assert_array_equal(ref, want, err_msg="reference evaluator")
    got = sf.compile(forest, **compile_kwargs).predict(X)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want, err_msg=f"compiled {compile_kwargs}")
    return forest


def accepts_nan(est) -> bool:
    """Whether the fitted estimator's predict takes NaN (trees since 1.3 with the right
    splitter, HistGradientBoosting); GradientBoosting refuses it."""
    row = np.full((1, est.n_features_in_), np.nan)
    try:
        expected(est, row)
    except ValueError:
        return False
    return True


def split_points(est) -> list[tuple[int, float]]:
    """(feature, threshold) of every numerical split, read from scikit-learn's own structures."""
    if hasattr(est, "_predictors"):
        out = []
        for iteration in est._predictors:
            for p in iteration:
                nodes = p.nodes[(p.nodes["is_leaf"] == 0) & (p.nodes["is_categorical"] == 0)]
                out += list(zip(nodes["feature_idx"].tolist(), nodes["num_threshold"].tolist()))
        return out
    trees = [est] if hasattr(est, "tree_") else list(np.ravel(est.estimators_))
    out = []
    for t in trees:
        inner = t.tree_.children_left >= 0
        out += list(zip(t.tree_.feature[inner].tolist(), t.tree_.threshold[inner].tolist()))
    return out


def boundary_rows(est, rng, base: np.ndarray, limit: int = 1500) -> np.ndarray:
    """Rows with one feature set on a threshold or one of its float32 / float64 neighbours
    (the float32 value nearest a threshold is above it half of the time: rounding it to
    nearest instead of down would send those rows the wrong way)."""
    values = []
    for f, t in split_points(est):
        if not math.isfinite(t):
            continue
        t32 = np.float32(t)
        for v in (t, np.nextafter(t, -np.inf), np.nextafter(t, np.inf), t32,
                  np.nextafter(t32, np.float32(-np.inf)), np.nextafter(t32, np.float32(np.inf))):
            values.append((f, float(v)))
    if len(values) > limit:
        values = [values[i] for i in rng.choice(len(values), limit, replace=False)]
    rows = base[rng.integers(len(base), size=len(values))].copy()
    for i, (f, v) in enumerate(values):
        rows[i, f] = v
    return rows


def data(rng, n: int, d: int, task: str, nan: bool):
    X = rng.normal(size=(n, d))
    signal = X[:, 0] + 0.5 * np.sin(2 * X[:, 1 % d]) + 0.3 * X[:, 2 % d] ** 2
    if task == "regression":
        y = signal + 0.1 * rng.normal(size=n)
    elif task == "positive":  # poisson / gamma targets
        y = np.exp(signal / 2) + 0.01
    elif task == "binary":
        y = (signal + 0.3 * rng.normal(size=n) > 0.3).astype(int)
    else:
        y = np.digitize(signal + 0.3 * rng.normal(size=n), [-0.5, 0.2, 0.8, 1.5])
    if nan:
        X[rng.random(X.shape) < 0.1] = np.nan
    return X, y


def rows_for(est, rng, X_train, nan: bool) -> np.ndarray:
    """Random rows (NaN where the estimator takes it) plus rows on every threshold."""
    X = rng.normal(size=(400, X_train.shape[1])) * 1.5
    if nan:
        X[rng.random(X.shape) < 0.15] = np.nan
    clean = np.where(np.isnan(X_train), 0.0, X_train)
    return np.vstack([X, boundary_rows(est, rng, clean)])



# ---------------------------------------------------------------------------------------------
# every estimator, every task, with and without NaN
# ---------------------------------------------------------------------------------------------

SMALL_TREE = dict(max_depth=6, random_state=SEED)
SMALL_FOREST = dict(n_estimators=8, max_depth=5, random_state=SEED)
SMALL_GB = dict(n_estimators=12, max_depth=3, learning_rate=0.3, random_state=SEED)
SMALL_HGB = dict(max_iter=12, max_leaf_nodes=15, learning_rate=0.3, random_state=SEED)

CASES = {
    "dt_regression": (lambda: tree.DecisionTreeRegressor(**SMALL_TREE), "regression"),
    "dt_binary": (lambda: tree.DecisionTreeClassifier(**SMALL_TREE), "binary"),
    "dt_multiclass": (lambda: tree.DecisionTreeClassifier(**SMALL_TREE), "multiclass"),
    "extra_tree_multiclass": (lambda: tree.ExtraTreeClassifier(**SMALL_TREE), "multiclass"),
    "rf_regression": (lambda: ensemble.RandomForestRegressor(**SMALL_FOREST), "regression"),
    "rf_binary": (lambda: ensemble.RandomForestClassifier(**SMALL_FOREST), "binary"),
    "rf_multiclass": (lambda: ensemble.RandomForestClassifier(**SMALL_FOREST), "multiclass"),
    "et_regression": (lambda: ensemble.ExtraTreesRegressor(**SMALL_FOREST), "regression"),
    "et_binary": (lambda: ensemble.ExtraTreesClassifier(**SMALL_FOREST), "binary"),
    "et_multiclass": (lambda: ensemble.ExtraTreesClassifier(**SMALL_FOREST), "multiclass"),
    "gb_regression": (lambda: ensemble.GradientBoostingRegressor(**SMALL_GB), "regression"),
    "gb_huber": (lambda: ensemble.GradientBoostingRegressor(loss="huber", **SMALL_GB), "regression"),
    "gb_binary": (lambda: ensemble.GradientBoostingClassifier(**SMALL_GB), "binary"),
    "gb_exponential": (lambda: ensemble.GradientBoostingClassifier(loss="exponential", **SMALL_GB),
                       "binary"),
    "gb_multiclass": (lambda: ensemble.GradientBoostingClassifier(**SMALL_GB), "multiclass"),
    "hgb_regression": (lambda: ensemble.HistGradientBoostingRegressor(**SMALL_HGB), "regression"),
    "hgb_absolute_error": (lambda: ensemble.HistGradientBoostingRegressor(
        loss="absolute_error", **SMALL_HGB), "regression"),
    "hgb_quantile": (lambda: ensemble.HistGradientBoostingRegressor(
        loss="quantile", quantile=0.8, **SMALL_HGB), "regression"),
    "hgb_poisson": (lambda: ensemble.HistGradientBoostingRegressor(loss="poisson", **SMALL_HGB),
                    "positive"),
    "hgb_gamma": (lambda: ensemble.HistGradientBoostingRegressor(loss="gamma", **SMALL_HGB),
                  "positive"),
    "hgb_binary": (lambda: ensemble.HistGradientBoostingClassifier(**SMALL_HGB), "binary"),
    "hgb_multiclass": (lambda: ensemble.HistGradientBoostingClassifier(**SMALL_HGB), "multiclass"),
}


# GradientBoosting refuses NaN in fit and predict; every other estimator takes it.
TAKES_NAN = {name for name in CASES if not name.startswith("gb_")}


def fit_case(name: str, nan: bool, rng):
    make, task = CASES[name]
    X, y = data(rng, 500, 5, task, nan)
    return make().fit(X, y), X


@pytest.mark.parametrize("name,nan", [
    pytest.param(name, nan, id=f"{name}-{'nan' if nan else 'no_nan'}")
    for name in CASES for nan in (False, True) if name in TAKES_NAN or not nan])
def test_predictions_are_exactly_sklearns(name, nan, rng):
    est, X_train = fit_case(name, nan, rng)
    X = rows_for(est, rng, X_train, nan=accepts_nan(est))
    forest = assert_exact(est, X)
    classifier = hasattr(est, "predict_proba")
    assert forest.source == "sklearn" and type(est).__name__ in forest.objective
    assert forest.num_features == X_train.shape[1] and forest.feature_names is None
    assert forest.accumulate_dtype == "float64"
    if classifier:
        assert forest.class_labels == est.classes_.tolist()
        json.dumps(forest.class_labels)
    else:
        assert forest.class_labels is None
    if "Hist" in type(est).__name__:
        assert forest.threshold_dtype == "float64"
        assert forest.num_trees == est.n_iter_ * est.n_trees_per_iteration_
    else:
        # float32 comparisons against thresholds that are float32 values
        assert forest.threshold_dtype == "float32"
        for t in forest.trees:
            inner = t.left >= 0
            assert np.all(t.op[inner] == Op.LE)
            assert np.array_equal(t.threshold[inner].astype(np.float32).astype(np.float64),
                                  t.threshold[inner])


def test_nan_takes_missing_go_to_left_both_ways(rng):
    """A tree fitted on NaN sends NaN both ways at different nodes, and the forest agrees on
    rows that are NaN in every feature (each node's missing direction decides alone)."""
    est, _ = fit_case("rf_multiclass", True, rng)
    directions = np.concatenate([t.tree_.missing_go_to_left[t.tree_.children_left >= 0]
                                 for t in est.estimators_])
    assert directions.any() and not directions.all()
    X = np.full((3, est.n_features_in_), np.nan)
    X[1, 0] = 0.2
    assert_exact(est, X)


def test_forced_representations(rng):
    """A random forest walked by the sparse representation, and gradient boosting models
    evaluated by bitvectors (which take summed single-output trees)."""
    est, X_train = fit_case("rf_multiclass", True, rng)
    assert_exact(est, rows_for(est, rng, X_train, nan=True), rep="sparse")
    est, X_train = fit_case("et_regression", True, rng)
    assert_exact(est, rows_for(est, rng, X_train, nan=True), rep="sparse")
    est, X_train = fit_case("gb_binary", False, rng)
    assert_exact(est, rows_for(est, rng, X_train, nan=False), rep="bitvector")
    est, X_train = fit_case("hgb_regression", True, rng)
    assert_exact(est, rows_for(est, rng, X_train, nan=True), rep="bitvector")


def test_a_grown_forest_keeps_each_distinct_leaf_vector_once(rng):
    """A fully grown random forest's leaves are one-hot class votes: the layout stores each
    distinct vector once (every leaf's slot points at its copy), and every representation that
    walks still predicts sklearn's probabilities exactly."""
    from silvanforge.lowering.walksetup import build_layout

    X, _ = data(rng, 400, 5, "regression", False)
    y = np.digitize(X[:, 0] - X[:, 2], [-0.5, 0.0, 0.6])
    est = ensemble.RandomForestClassifier(n_estimators=6, random_state=SEED).fit(X, y)
    forest = import_object(est)
    layout = build_layout(forest)
    leaves = np.concatenate([t.leaf_value[t.left < 0] for t in forest.trees]).astype(layout.leaf_dtype)
    distinct = np.unique(leaves, axis=0)
    assert len(layout.leaf_values) == distinct.size < leaves.size
    for tree, laid in zip(forest.trees, layout.trees):
        leaf = np.flatnonzero(tree.left < 0)
        at = laid.leaf_slot[leaf][:, None] + np.arange(len(tree.outputs))
        np.testing.assert_array_equal(layout.leaf_values[at], tree.leaf_value[leaf].astype(layout.leaf_dtype))
    rows = rng.normal(size=(300, 5))
    for rep in ("sparse", "array", "reorg"):
        assert_exact(est, rows, rep=rep)


def test_nine_classes_sum_as_sklearn_does(rng):
    """From 8 classes on, NumPy sums a C-ordered row pairwise and a Fortran-ordered one left to
    right: GradientBoosting's softmax takes the first, HistGradientBoosting's the second."""
    X, _ = data(rng, 900, 4, "regression", False)
    y = np.digitize(X[:, 0] + 0.4 * X[:, 1], np.linspace(-1.5, 1.5, 8))
    assert len(np.unique(y)) == 9
    rows = rng.normal(size=(1500, 4))
    gb = ensemble.GradientBoostingClassifier(n_estimators=4, max_depth=2, random_state=SEED).fit(X, y)
    hgb = ensemble.HistGradientBoostingClassifier(max_iter=4, random_state=SEED).fit(X, y)
    assert import_object(gb).transform.param("fortran", -1.0) == 0.0
    assert import_object(hgb).transform.param("fortran", -1.0) == 1.0
    assert_exact(gb, rows)
    assert_exact(hgb, rows)


@given(seed=st.integers(0, 2**32 - 1), n_features=st.integers(1, 6), n_classes=st.integers(1, 4),
       depth=st.integers(1, 6), n_trees=st.integers(1, 4),
       family=st.sampled_from(["rf", "et", "gb", "dt"]))
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_random_shapes(seed, n_features, n_classes, depth, n_trees, family):
    """Random numbers of features, classes (1 to 4; 1 is a regressor), depths and trees: the
    reference evaluator on the imported forest is scikit-learn."""
    rng = np.random.default_rng(seed)
    n = 120
    X = rng.normal(size=(n, n_features))
    y = X[:, 0] + rng.normal(size=n) * 0.5
    classify = n_classes > 1
    if classify:
        y = np.digitize(y, np.quantile(y, np.linspace(0, 1, n_classes + 1)[1:-1]))
    if family == "gb" and classify and len(np.unique(y)) < 2:
        return
    kw = dict(max_depth=depth, random_state=seed % 1000)
    est = {
        ("rf", True): lambda: ensemble.RandomForestClassifier(n_estimators=n_trees, **kw),
        ("rf", False): lambda: ensemble.RandomForestRegressor(n_estimators=n_trees, **kw),
        ("et", True): lambda: ensemble.ExtraTreesClassifier(n_estimators=n_trees, **kw),
        ("et", False): lambda: ensemble.ExtraTreesRegressor(n_estimators=n_trees, **kw),
        ("gb", True): lambda: ensemble.GradientBoostingClassifier(n_estimators=n_trees, **kw),
        ("gb", False): lambda: ensemble.GradientBoostingRegressor(n_estimators=n_trees, **kw),
        ("dt", True): lambda: tree.DecisionTreeClassifier(**kw),
        ("dt", False): lambda: tree.DecisionTreeRegressor(**kw),
    }[family, classify]().fit(X, y)
    rows = np.vstack([rng.normal(size=(50, n_features)), boundary_rows(est, rng, X, limit=300)])
    forest = import_object(est)
    np.testing.assert_array_equal(reference.predict(forest, rows), expected(est, rows))


# ---------------------------------------------------------------------------------------------
# thresholds, transforms
# ---------------------------------------------------------------------------------------------

_F32_MAX = float(np.finfo(np.float32).max)
finite32 = st.floats(width=32, allow_nan=False)
any64 = st.one_of(st.floats(allow_nan=False), st.sampled_from(
    [0.0, -0.0, _F32_MAX, -_F32_MAX, math.nextafter(_F32_MAX, math.inf), 1e300, -1e300,
     float(np.finfo(np.float32).tiny) / 3]))


@given(t=any64, x=st.one_of(finite32, st.sampled_from([math.inf, -math.inf])))
@settings(max_examples=400, deadline=None)
def test_rounding_thresholds_down_keeps_float32_decisions(t, x):
    """For every float32 input, ``x <= t`` in double (scikit-learn) is ``x <= r`` with r the
    float32 threshold the importer stores, infinities and thresholds beyond FLT_MAX included."""
    r = round_down_to_float32(np.array([t]))[0]
    assert np.float32(r) == r or math.isinf(r)
    x32 = np.float32(x)
    assert (float(x32) <= t) == (x32 <= np.float32(r))
    t32 = np.float32(np.float64(t)) if abs(t) <= _F32_MAX else None
    if t32 is not None and float(t32) <= t:
        assert r == float(t32)  # nothing lost where t was already representable or rounded down


def test_binary_and_softmax_transforms_are_sklearns_losses():
    """The transforms equal scikit-learn's loss objects bit for bit, at extreme margins too,
    and without SciPy (artifacts scored where it is missing)."""
    from sklearn._loss.loss import ExponentialLoss, HalfBinomialLoss, HalfMultinomialLoss

    from silvanforge.ir.hir import Forest, Transform

    rng = np.random.default_rng(1)
    m = np.concatenate([rng.normal(0, 4, 20000), [0.0, -0.0, 36.9, -36.9, 40, -745.2, 800, -800,
                                                  709.9, np.inf, -np.inf]])[:, None]

    def run(name, params, margins):
        forest = Forest(trees=[], num_features=1, num_outputs=margins.shape[1],
                        base_score=np.zeros(margins.shape[1]), transform=Transform(name, params))
        return transforms.apply(forest, margins)

    np.testing.assert_array_equal(run("sklearn_binary", (), m), HalfBinomialLoss().predict_proba(m))
    np.testing.assert_array_equal(run("sklearn_binary", (("scale", 2.0),), m),
                                  ExponentialLoss().predict_proba(m))
    k9 = rng.normal(0, 3, (5000, 9))
    loss = HalfMultinomialLoss(n_classes=9)
    np.testing.assert_array_equal(run("sklearn_softmax", (), k9), loss.predict_proba(k9))
    np.testing.assert_array_equal(run("sklearn_softmax", (("fortran", 1.0),), k9),
                                  loss.predict_proba(np.asfortranarray(k9)))
    # The C library's exp through math.exp where SciPy is not importable.
    saved = {name: mod for name, mod in sys.modules.items() if name.startswith("scipy")}
    try:
        for name in saved:
            sys.modules[name] = None  # makes `from scipy.special import expit` raise ImportError
        without = run("sklearn_binary", (), m)
    finally:
        sys.modules.update(saved)
    np.testing.assert_array_equal(without, HalfBinomialLoss().predict_proba(m))


# ---------------------------------------------------------------------------------------------
# gradient boosting baselines
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("init,task", [
    ("zero", "binary"), ("zero", "multiclass"), ("zero", "regression"),
    (dummy.DummyClassifier(strategy="uniform"), "multiclass"),
    (dummy.DummyClassifier(strategy="most_frequent"), "binary"),  # clipped to eps before logit
    (dummy.DummyClassifier(strategy="prior"), "multiclass"),
    (dummy.DummyRegressor(strategy="median"), "regression"),
    (dummy.DummyRegressor(strategy="quantile", quantile=0.9), "regression"),
], ids=lambda v: getattr(v, "strategy", v))
def test_gradient_boosting_init_baselines(init, task, rng):
    X, y = data(rng, 400, 4, task, False)
    cls = ensemble.GradientBoostingRegressor if task == "regression" else ensemble.GradientBoostingClassifier
    est = cls(n_estimators=5, max_depth=2, init=init, random_state=SEED).fit(X, y)
    forest = assert_exact(est, rng.normal(size=(300, 4)))
    expected_base = np.zeros(forest.num_outputs) if init == "zero" else \
        est._raw_predict_init(np.zeros((1, 4), np.float32))[0]
    np.testing.assert_array_equal(forest.base_score, expected_base)


# ---------------------------------------------------------------------------------------------
# HistGradientBoosting categorical features
# ---------------------------------------------------------------------------------------------

CODED = np.array([0.0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33])


def coded_data(rng, n):
    """Feature 1: categories 0, 3, ..., 33; feature 3: 0..4; both sometimes NaN."""
    X = np.column_stack([rng.normal(size=n), rng.choice(CODED, n), rng.normal(size=n),
                         rng.integers(0, 5, n).astype(float)])
    X[rng.random(n) < 0.12, 1] = np.nan
    X[rng.random(n) < 0.12, 3] = np.nan
    signal = (X[:, 0] + np.isin(X[:, 1], [3, 9, 12, 30]) * 2 - (X[:, 3] == 2)
              + np.isnan(X[:, 1]) * 1.5 - np.isnan(X[:, 3]))
    return X, signal


def odd_categories(rng, n, choices):
    return rng.choice(np.asarray(choices, dtype=np.float64), n)


@pytest.mark.parametrize("task", ["regression", "binary", "multiclass"])
def test_hgb_integer_coded_categories(task, rng):
    X, signal = coded_data(rng, 1500)
    y = {"regression": signal, "binary": (signal > 0.5).astype(int),
         "multiclass": np.digitize(signal, [-0.5, 0.5, 2])}[task]
    cls = ensemble.HistGradientBoostingRegressor if task == "regression" else \
        ensemble.HistGradientBoostingClassifier
    est = cls(max_iter=8, categorical_features=[1, 3], random_state=SEED).fit(X, y)
    # sklearn's categorical splits send missing values both ways: both HIR forms are exercised
    directions = np.concatenate([p.nodes["missing_go_to_left"][(p.nodes["is_categorical"] == 1)
                                                               & (p.nodes["is_leaf"] == 0)]
                                 for it in est._predictors for p in it])
    assert directions.any() and not directions.all()
    rows = rng.normal(size=(1200, 4))
    # known, unknown, negative, fractional, -0.0, past 255 / 2**24 / 2**31, NaN
    rows[:, 1] = odd_categories(rng, 1200, [0, 3, 6, 9, 12, 15, 30, 33, 1, 7, 36, 2.5, 3.0000001,
                                            -3, -0.0, -0.5, 255, 256, 259, 2.0**24 + 3, 2.0**31 + 9,
                                            1e300, -1e300, np.nan])
    rows[:, 3] = odd_categories(rng, 1200, [0, 1, 2, 3, 4, 5, 6, -1, -0.5, 0.5, 3.5, 256, 258,
                                            np.nan])
    forest = assert_exact(est, rows)
    assert forest.has_categorical() and forest.category_rule is CategoryRule.EXACT
    assert {int(t.feature[k]) for t in forest.trees for k in t.categories} <= {1, 3}
    named = set().union(*(set(c.tolist()) for t in forest.trees for k, c in t.categories.items()
                          if t.feature[k] == 1))
    assert named and named <= set(CODED.astype(int).tolist())  # raw values, not the codes
    assert forest.feature_categories == {1: list(range(34)), 3: list(range(5))}
    assert_exact(est, rows, forest=forest, check_reference=False, rep="bitvector")


def test_hgb_integer_categories_new_since_training_in_one_row_frames(rng):
    """A request of one row whose category came after training (a store opened since) is a
    frame none of whose values is a known category: scikit-learn reads it as missing, and so
    does every frame (the labels are the values themselves, so no code is mistaken for one)."""
    pd = pytest.importorskip("pandas")
    pl = pytest.importorskip("polars")
    pa = pytest.importorskip("pyarrow")
    X, signal = coded_data(rng, 1500)
    names = ["a", "store", "b", "size"]
    frame = pd.DataFrame(X, columns=names).astype({"store": "Int64", "size": "Int64"})
    est = ensemble.HistGradientBoostingClassifier(max_iter=8, categorical_features=["store", "size"],
                                                  random_state=SEED).fit(frame, (signal > 0.5).astype(int))
    cf = sf.compile(est)
    for store in (99, 4, -1, 7.5, 2**31 + 9):
        rows = pd.DataFrame({"a": [0.25], "store": [store], "b": [-1.0], "size": [2]})
        expected = est.predict_proba(rows)
        for given in (rows, pl.from_pandas(rows), pa.Table.from_pandas(rows, preserve_index=False),
                      rows.to_dict("records")):
            np.testing.assert_array_equal(cf.predict(given), expected, err_msg=f"{store}, {type(given).__name__}")


def test_hgb_categorical_columns_are_mapped_back_to_input_order(rng):
    """The preprocessor puts categorical columns first; the forest reads the caller's columns."""
    X, signal = coded_data(rng, 800)
    X = X[:, [0, 2, 3, 1]]  # numbers, numbers, categories 0..4, categories 0, 3, ..., 33
    est = ensemble.HistGradientBoostingRegressor(max_iter=10, categorical_features=[3, 2],
                                                 random_state=SEED).fit(X, signal)
    rows = X[rng.integers(800, size=1000)].copy()
    rows[::3, 3] = 7  # unknown
    forest = assert_exact(est, rows)
    cat_features = {int(t.feature[k]) for t in forest.trees for k in t.categories}
    num_features = {int(t.feature[k]) for t in forest.trees for k in np.flatnonzero(t.left >= 0)
                    if k not in t.categories}
    assert cat_features == {2, 3} and num_features.isdisjoint(cat_features)
    assert forest.feature_categories == {2: list(range(5)), 3: list(range(34))}


@pytest.mark.parametrize("categories", [[-2.0, -1.0, 0.0, 1.0], [0.5, 1.5, 2.5]],
                         ids=["negative", "fractional"])
def test_hgb_categories_that_are_no_hir_category_are_refused(categories, rng):
    X = np.column_stack([rng.normal(size=300), rng.choice(categories, 300)])
    est = ensemble.HistGradientBoostingRegressor(max_iter=3, categorical_features=[1]).fit(X, X[:, 1])
    with pytest.raises(UnsupportedModelError, match="categorical feature at column 1.*non-negative"):
        import_object(est)


def colour_frame(rng, n, unseen=False):
    pd = pytest.importorskip("pandas")
    colours = ["red", "green", "blue", "cyan"] + (["mauve"] if unseen else [])
    sizes = [10, 20, 5, 40] + ([7] if unseen else [])
    return pd.DataFrame({
        "x": rng.normal(size=n),
        "colour": pd.Categorical(rng.choice(colours + [None], n),
                                 categories=["red", "green", "blue", "cyan", "mauve", "unused"]),
        "y": rng.normal(size=n),
        "size": pd.Categorical(rng.choice(sizes, n)),
    })


@pytest.mark.parametrize("task", ["regression", "multiclass"])
def test_hgb_pandas_categories(task, rng, tmp_path):
    df = colour_frame(rng, 1500)
    signal = df.x + (df.colour == "green") * 2 - df.colour.isna() + (df.size == 20) * 1.5
    cls = ensemble.HistGradientBoostingRegressor if task == "regression" else \
        ensemble.HistGradientBoostingClassifier
    y = signal if task == "regression" else np.digitize(signal, [-0.5, 0.5, 2])
    est = cls(max_iter=15, categorical_features="from_dtype", random_state=SEED).fit(df, y)
    forest = import_object(est)
    encoder = est._preprocessor.named_transformers_["encoder"]
    assert forest.feature_names == ["x", "colour", "y", "size"]
    # strings: the encoder's labels in code order; numbers: their own values
    colours = [c for c in encoder.categories_[0] if isinstance(c, str)]  # not the NaN it lists
    assert colours == ["blue", "cyan", "green", "red"]
    assert forest.feature_categories == {1: colours, 3: list(range(41))}
    json.dumps(forest.feature_categories)
    test = colour_frame(rng, 2000, unseen=True)  # unseen labels and None are missing values
    cf = sf.compile(forest)
    np.testing.assert_array_equal(cf.predict(test), expected(est, test))
    cf.save(tmp_path / "hgb.forge")
    again = sf.load_compiled(tmp_path / "hgb.forge", trust_code=True)  # we saved it
    assert again.forest.feature_categories == forest.feature_categories
    np.testing.assert_array_equal(again.predict(test), expected(est, test))


def test_feature_names_from_a_data_frame(rng):
    pd = pytest.importorskip("pandas")
    X, y = data(rng, 300, 3, "binary", False)
    df = pd.DataFrame(X, columns=["alpha", "beta", "gamma"])
    for est in (ensemble.RandomForestClassifier(n_estimators=3, random_state=SEED),
                ensemble.GradientBoostingClassifier(n_estimators=3, random_state=SEED),
                ensemble.HistGradientBoostingClassifier(max_iter=3)):
        est.fit(df, y)
        forest = sf.load_model(est)
        assert forest.feature_names == ["alpha", "beta", "gamma"]
        np.testing.assert_array_equal(sf.compile(forest).predict(df[["gamma", "alpha", "beta"]]),
                                      est.predict_proba(df))


def test_class_labels_are_plain_python(rng):
    X, y = data(rng, 300, 3, "multiclass", False)
    names = np.array(["ant", "bee", "cat", "dog", "eel"])[y]
    est = ensemble.RandomForestClassifier(n_estimators=3, random_state=SEED).fit(X, names)
    forest = import_object(est)
    assert forest.class_labels == est.classes_.tolist() and all(type(c) is str for c in forest.class_labels)
    assert sf.compile(forest).classes_ == forest.class_labels
    flags = ensemble.GradientBoostingClassifier(n_estimators=3).fit(X, y > 1)
    assert import_object(flags).class_labels == [False, True]
    json.dumps(import_object(flags).class_labels)


def test_compile_and_load_model_take_the_estimator(rng):
    X, y = data(rng, 300, 3, "regression", True)
    est = ensemble.HistGradientBoostingRegressor(max_iter=5).fit(X, y)
    assert sf.load_model(est).fingerprint() == import_object(est).fingerprint()
    np.testing.assert_array_equal(sf.compile(est).predict(X), est.predict(X))


# ---------------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    tree.DecisionTreeClassifier, tree.DecisionTreeRegressor, ensemble.RandomForestClassifier,
    ensemble.ExtraTreesRegressor, ensemble.GradientBoostingClassifier,
    ensemble.HistGradientBoostingRegressor, ensemble.HistGradientBoostingClassifier,
], ids=lambda c: c.__name__)
def test_unfitted_estimators_are_refused(make):
    with pytest.raises(UnsupportedModelError, match=f"the {make.__name__} is not fitted"):
        import_object(make())
    with pytest.raises(UnsupportedModelError, match="not fitted"):
        sf.compile(make())


@pytest.mark.parametrize("make", [
    lambda: tree.DecisionTreeRegressor(max_depth=3), lambda: tree.DecisionTreeClassifier(max_depth=3),
    lambda: ensemble.RandomForestRegressor(n_estimators=2, max_depth=3),
    lambda: ensemble.ExtraTreesClassifier(n_estimators=2, max_depth=3),
])
def test_multi_output_estimators_are_refused(make, rng):
    X = rng.normal(size=(100, 3))
    Y = np.column_stack([X[:, 0] > 0, X[:, 1] > 0]).astype(int)
    est = make().fit(X, Y)
    with pytest.raises(UnsupportedModelError, match=r"multi-output .*2 targets"):
        import_object(est)


def test_init_estimators_without_a_constant_baseline_are_refused(rng):
    X, y = data(rng, 200, 3, "regression", False)
    est = ensemble.GradientBoostingRegressor(n_estimators=2, init=linear_model.LinearRegression()).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="init estimator is a LinearRegression"):
        import_object(est)
    est = ensemble.GradientBoostingClassifier(
        n_estimators=2, init=dummy.DummyClassifier(strategy="stratified")).fit(X, y > 0)
    with pytest.raises(UnsupportedModelError, match="stratified"):
        import_object(est)


def test_subclasses_that_change_predictions_are_refused(rng):
    class Halved(ensemble.RandomForestRegressor):
        def predict(self, X):
            return super().predict(X) / 2

    class Plain(ensemble.RandomForestRegressor):
        pass

    X, y = data(rng, 200, 3, "regression", False)
    with pytest.raises(UnsupportedModelError, match="Halved overrides predict"):
        import_object(Halved(n_estimators=2).fit(X, y))
    plain = Plain(n_estimators=2, random_state=SEED).fit(X, y)
    np.testing.assert_array_equal(reference.predict(import_object(plain), X), plain.predict(X))


def test_objects_that_are_not_ours(rng):
    X, y = data(rng, 100, 3, "regression", False)
    linear = linear_model.LinearRegression().fit(X, y)
    assert import_object(linear) is None and import_object(object()) is None
    # a library's object no importer reads: named as a model kind not compiled (not a file format)
    with pytest.raises(UnsupportedModelError, match="LinearRegression is not a model SilvanForge compiles"):
        sf.load_model(linear)
    iso = ensemble.IsolationForest(n_estimators=2).fit(X)
    with pytest.raises(UnsupportedModelError, match="IsolationForest is not a model SilvanForge compiles"):
        sf.load_model(iso)
    with pytest.raises(ModelFormatError, match="cannot read a model from builtins.object"):
        sf.load_model(object())


# ---------------------------------------------------------------------------------------------
# the plugin
# ---------------------------------------------------------------------------------------------


def test_plugin_is_discovered_and_reads_no_file_format(tmp_path):
    from importlib import metadata

    import silvanforge_importer_sklearn as plugin

    reg = PluginRegistry()
    rec = next(r for r in reg.records if r.name == "sklearn")
    assert rec.group == "silvanforge.importers" and rec.error is None
    assert rec.distribution == "silvanforge-importer-sklearn"
    assert rec.version == metadata.version("silvanforge-importer-sklearn")
    assert rec.provides == [] and "scikit-learn" in plugin.STATUS
    assert not any("sklearn" in f for f in reg.formats())
    path = tmp_path / "model.json"
    path.write_text("{}")
    with pytest.raises(ModelFormatError, match="unknown model format 'sklearn'"):
        sf.load_model(path, fmt="sklearn")
    with pytest.raises(InputError, match="fmt names the format of a model file"):
        sf.load_model(ensemble.RandomForestRegressor(), fmt="sklearn")


def test_importing_the_plugin_does_not_import_sklearn():
    """The plugin module tree imports nothing of scikit-learn (checked in a fresh interpreter)."""
    import subprocess

    code = ("import sys, silvanforge_importer_sklearn, silvanforge.plugins as p; "
            "p.registry().hook.silvanforge_import_object(obj=object()); "
            "assert 'sklearn' not in sys.modules, 'sklearn was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)

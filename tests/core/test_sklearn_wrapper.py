"""silvanforge.sklearn: a compiled model that stands where the estimator stood (predict gives
the estimator's class labels, predict_proba its probabilities, inside a Pipeline too)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sklearn")
pd = pytest.importorskip("pandas")
xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")

from sklearn.base import clone, is_classifier, is_regressor  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import silvanforge as sf  # noqa: E402
import silvanforge.sklearn as sfk  # noqa: E402
from silvanforge.errors import UnsupportedModelError  # noqa: E402


@pytest.fixture(autouse=True)
def one_openmp_thread():
    """LightGBM's and HistGradientBoosting's OpenMP threads spin against the compiled kernels'
    on a 2-core machine (seconds a fit); one thread changes none of their numbers."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
        yield


def _close(got, expected):
    # LightGBM's sigmoid/softmax may round 1 ulp off NumPy's; labels are compared exactly.
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(31)
    X = pd.DataFrame(rng.normal(size=(400, 5)), columns=["a", "b", "c", "d", "e"])
    X.iloc[rng.random(X.shape) < 0.1] = np.nan
    s = X["a"].fillna(0) - X["c"].fillna(0) + rng.normal(0, 0.5, len(X))
    return X, s, np.digitize(s, [-0.7, 0.7])


@pytest.mark.parametrize("make", [
    lambda: xgb.XGBClassifier(n_estimators=15, max_depth=3),
    lambda: lgb.LGBMClassifier(n_estimators=15, verbose=-1),
])
@pytest.mark.parametrize("classes", [2, 3])
def test_classifiers_predict_their_labels_and_probabilities(data, make, classes):
    X, s, y3 = data
    y = (s > 0).astype(int) if classes == 2 else y3
    if "LGBM" in type(make()).__name__:
        y = np.array(["low", "mid", "high"])[y]  # LightGBM keeps any labels
    model = make().fit(X, y)
    fast = sfk.compile(model)
    assert is_classifier(fast)
    np.testing.assert_array_equal(fast.classes_, model.classes_)
    np.testing.assert_array_equal(fast.predict(X), model.predict(X))
    _close(fast.predict_proba(X), model.predict_proba(X))
    assert fast.n_features_in_ == 5
    np.testing.assert_array_equal(fast.feature_names_in_, np.array(list("abcde"), dtype=object))
    # frames in another column order are matched by name
    np.testing.assert_array_equal(fast.predict(X[X.columns[::-1]]), model.predict(X))


def test_regressors_predict_values_and_have_no_probabilities(data):
    X, s, _ = data
    for model in (xgb.XGBRegressor(n_estimators=15, max_depth=3).fit(X, s),
                  lgb.LGBMRegressor(n_estimators=15, verbose=-1).fit(X, s)):
        fast = sfk.compile(model)
        assert is_regressor(fast) and not hasattr(fast, "predict_proba")
        np.testing.assert_array_equal(fast.predict(X), model.predict(X))


def test_a_fitted_pipeline_compiles_its_last_step(data):
    X, s, _ = data
    y = (s > 0).astype(int)
    pipe = Pipeline([("scale", StandardScaler()), ("model", xgb.XGBClassifier(n_estimators=10))]).fit(X, y)
    fast = sfk.compile(pipe)
    assert isinstance(fast, Pipeline) and isinstance(fast[-1], sfk.CompiledEstimator)
    assert fast[0] is pipe[0]  # the fitted scaler, shared
    np.testing.assert_array_equal(fast.predict(X), pipe.predict(X))
    np.testing.assert_array_equal(fast.predict_proba(X), pipe.predict_proba(X))


def test_fit_inside_a_pipeline_fits_a_clone_and_compiles_it(data):
    X, _, y3 = data
    inner = lgb.LGBMClassifier(n_estimators=10, verbose=-1)
    pipe = Pipeline([("scale", StandardScaler()), ("model", sfk.CompiledEstimator(inner))]).fit(X, y3)
    plain = Pipeline([("scale", StandardScaler()), ("model", clone(inner))]).fit(X, y3)
    assert not hasattr(inner, "booster_")  # the given estimator is left unfitted
    np.testing.assert_array_equal(pipe.predict(X), plain.predict(X))
    _close(pipe.predict_proba(X), plain.predict_proba(X))
    # scikit-learn's own machinery: params, clone, the not-fitted error
    wrapper = sfk.CompiledEstimator(inner, threads=1)
    assert wrapper.get_params()["threads"] == 1
    copy = clone(wrapper)
    assert copy.threads == 1 and copy.estimator is not inner
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        copy.predict(X)


@pytest.mark.parametrize("make", [
    lambda: __import__("sklearn.ensemble", fromlist=["x"]).RandomForestClassifier(n_estimators=10, max_depth=6,
                                                                                  random_state=0),
    lambda: __import__("sklearn.ensemble", fromlist=["x"]).HistGradientBoostingClassifier(max_iter=15),
    lambda: __import__("sklearn.ensemble", fromlist=["x"]).GradientBoostingClassifier(n_estimators=15),
    lambda: __import__("sklearn.tree", fromlist=["x"]).DecisionTreeClassifier(max_depth=5, random_state=0),
])
def test_scikit_learn_forests_predict_their_own_labels(data, make):
    X, s, y3 = data
    labels = np.array(["low", "mid", "high"])[y3]
    model = make()
    Xf = X if "GradientBoostingClassifier" != type(model).__name__ else X.fillna(0.0)  # it refuses NaN
    model.fit(Xf, labels)
    fast = sfk.compile(model)
    np.testing.assert_array_equal(fast.classes_, model.classes_)
    np.testing.assert_array_equal(fast.predict(Xf), model.predict(Xf))
    np.testing.assert_array_equal(fast.predict_proba(Xf), model.predict_proba(Xf))
    pipe = Pipeline([("scale", StandardScaler()), ("model", make())]).fit(Xf, labels)
    np.testing.assert_array_equal(sfk.compile(pipe).predict(Xf), pipe.predict(Xf))


def test_scikit_learn_regressors(data):
    from sklearn.ensemble import ExtraTreesRegressor, HistGradientBoostingRegressor

    X, s, _ = data
    for model in (ExtraTreesRegressor(n_estimators=8, max_depth=6, random_state=0).fit(X, s),
                  HistGradientBoostingRegressor(max_iter=15).fit(X, s)):
        fast = sfk.compile(model)
        assert not hasattr(fast, "predict_proba")
        np.testing.assert_array_equal(fast.predict(X), model.predict(X))


def test_score_and_model_selection(data):
    from sklearn.model_selection import GridSearchCV, cross_val_score

    X, s, y3 = data
    clf = sfk.CompiledEstimator(xgb.XGBClassifier(n_estimators=5, max_depth=2))
    scores = cross_val_score(clf, X, y3, cv=2)
    plain = cross_val_score(xgb.XGBClassifier(n_estimators=5, max_depth=2), X, y3, cv=2)
    np.testing.assert_array_equal(scores, plain)
    reg = sfk.compile(lgb.LGBMRegressor(n_estimators=5, verbose=-1).fit(X, s))
    assert reg.score(X, s) == pytest.approx(reg.estimator_.score(X, s), rel=1e-12)
    search = GridSearchCV(sfk.CompiledEstimator(xgb.XGBClassifier(n_estimators=5)),
                          {"estimator__max_depth": [1, 2]}, cv=2).fit(X, y3)
    assert search.best_params_["estimator__max_depth"] in (1, 2)


def test_classifiers_without_class_probabilities_are_refused(data):
    """A multi-label XGBoost classifier (a 2-D target: a 0/1 matrix, not one class) and a
    LightGBM classifier of a custom objective (raw scores): read as probabilities their labels
    would be wrong; refused naming what to use instead."""
    X, _, y = data
    y = (y > 0).astype(int)
    multi = xgb.XGBClassifier(n_estimators=3, max_depth=2).fit(X, np.c_[y, 1 - y])
    with pytest.raises(UnsupportedModelError, match="multi-label"):
        sfk.compile(multi)

    def logloss(label, raw):
        p = 1 / (1 + np.exp(-raw))
        return p - label, p * (1 - p)

    custom = lgb.LGBMClassifier(n_estimators=3, objective=logloss, verbose=-1).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="raw scores"):
        sfk.compile(custom)
    # the plain compiled model gives them still
    np.testing.assert_allclose(sf.compile(custom).predict(X), custom.predict(X, raw_score=True), rtol=1e-12)


def test_a_catboost_classifier_wrapped_counts_its_features(data):
    """CatBoost's estimators say ``n_features_in_`` 0: the wrapper says the features its rows hold."""
    catboost = pytest.importorskip("catboost")
    X, _, y = data
    fitted = catboost.CatBoostClassifier(iterations=5, depth=3, verbose=0, thread_count=1,
                                         allow_writing_files=False).fit(X, (y > 0).astype(int))
    fast = sfk.compile(fitted)
    assert fast.n_features_in_ == X.shape[1]
    np.testing.assert_array_equal(fast.predict(X), fitted.predict(X).ravel())

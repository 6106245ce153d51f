"""CatBoost importer, differential against ``catboost``'s own predict.

Small models are trained here on generated data with NaN in the inputs (and infinities, zeros
and a denormal in the rows predicted), saved as JSON and as ``.cbm``, and compiled from the
file and from the fitted object; every prediction type users call is compared with
``model.predict(X, prediction_type=...)``.  CatBoost computes in float64: margins are compared
exactly (its bias added after the trees, as it adds it) where the scale is 1; probabilities and
exponents to a few float64 ulps (NumPy's ``exp`` against the C library's), as margins of another
scale (whose leaves the HIR holds scaled).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

cb = pytest.importorskip("catboost")

import silvanforge as sf  # noqa: E402
from silvanforge.errors import ModelFormatError, SilvanForgeError, UnsupportedModelError  # noqa: E402

RTOL = ATOL = 1e-12
_FIT = dict(verbose=0, thread_count=1, random_seed=3, allow_writing_files=False)


def _data(seed=0, n=400, f=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, f))
    X[rng.random(X.shape) < 0.1] = np.nan
    Xt = rng.normal(size=(200, f))
    Xt[rng.random(Xt.shape) < 0.15] = np.nan
    Xt[:6, 0] = [np.inf, -np.inf, 0.0, -0.0, 1e-40, np.nan]
    y = np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) ** 2 + 0.1 * rng.normal(size=n)
    return rng, X, Xt, y


def _sources(model, tmp_path, which=(0, 1, 2)):
    """The model as a JSON file, a .cbm file and the fitted object (those ``which`` picks)."""
    model.save_model(str(tmp_path / "m.json"), format="json")
    model.save_model(str(tmp_path / "m.cbm"))
    return [[tmp_path / "m.json", tmp_path / "m.cbm", model][i] for i in which]


def _check(model, Xt, tmp_path, prediction_type, which=(0, 1, 2)):
    # CatBoost's own predict (CatBoostRanker's hides prediction_type)
    expected = cb.CatBoost.predict(model, Xt, prediction_type=prediction_type)
    if prediction_type == "Probability" and expected.shape[1] == 2 and \
            model.get_all_params()["loss_function"] in ("Logloss", "CrossEntropy"):
        expected = expected[:, 1]  # a binary model predicts P(class 1), as XGBoost's
    raw = cb.CatBoost.predict(model, Xt, prediction_type="RawFormulaVal")
    exact = model.get_scale_and_bias()[0] == 1.0
    for src in _sources(model, tmp_path, which):
        cf = sf.compile(src)
        if exact and prediction_type == "RawFormulaVal":
            np.testing.assert_array_equal(cf.predict(Xt), expected, err_msg=str(src))
        np.testing.assert_allclose(cf.predict(Xt), expected, rtol=RTOL, atol=ATOL, err_msg=str(src))
        margins = cf.predict(Xt, output_margin=True)
        if exact:
            np.testing.assert_array_equal(margins, raw.reshape(margins.shape), err_msg=str(src))
        np.testing.assert_allclose(margins, raw, rtol=RTOL, atol=ATOL, err_msg=str(src))


def _one_source(*params):
    """One of the three sources for a grid cell (the grids cover each source many times; the
    file and object readers share everything past the JSON)."""
    return (sum(map(ord, "".join(params))) % 3,)


# Every loss and every grow policy, paired so that each appears more than once.
@pytest.mark.parametrize("loss,grow_policy", [
    ("RMSE", "SymmetricTree"), ("MAE", "Depthwise"), ("Quantile:alpha=0.3", "Lossguide"),
    ("Poisson", "SymmetricTree"), ("Tweedie:variance_power=1.4", "Depthwise"), ("Poisson", "Lossguide")])
def test_regression_losses(loss, grow_policy, tmp_path):
    rng, X, Xt, y = _data(1)
    if loss.split(":")[0] in ("Poisson", "Tweedie"):
        y = rng.poisson(np.exp(np.clip(y, -3, 2)))
    size = dict(max_leaves=11) if grow_policy == "Lossguide" else dict(depth=4)
    model = cb.CatBoostRegressor(iterations=15, loss_function=loss, grow_policy=grow_policy, **size, **_FIT).fit(X, y)
    _check(model, Xt, tmp_path, "Exponent" if loss.split(":")[0] in ("Poisson", "Tweedie") else "RawFormulaVal",
           which=_one_source(loss, grow_policy))


@pytest.mark.parametrize("loss,grow_policy", [
    ("Logloss", "SymmetricTree"), ("CrossEntropy", "Depthwise"), ("MultiClass", "Lossguide"),
    ("MultiClassOneVsAll", "SymmetricTree"), ("Logloss", "Lossguide"), ("MultiClass", "Depthwise"),
    ("MultiClassOneVsAll", "Lossguide")])
def test_classification_losses(loss, grow_policy, tmp_path):
    rng, X, Xt, y = _data(2)
    if loss in ("Logloss", "CrossEntropy"):
        y = (y > 0.5).astype(int) if loss == "Logloss" else 1 / (1 + np.exp(-y))
    else:
        y = np.digitize(y, [0.0, 0.8, 2.0])
    size = dict(max_leaves=9) if grow_policy == "Lossguide" else dict(depth=3)
    cls = cb.CatBoostClassifier if loss != "CrossEntropy" else cb.CatBoost
    model = cls(dict(iterations=12, loss_function=loss, grow_policy=grow_policy, **size, **_FIT)) \
        if cls is cb.CatBoost else cls(iterations=12, loss_function=loss, grow_policy=grow_policy, **size, **_FIT)
    model.fit(X, y)
    _check(model, Xt, tmp_path, "Probability", which=_one_source(loss, grow_policy))


@pytest.mark.parametrize("nan_mode", ["Min", "Max", "Forbidden"])
def test_nan_modes(nan_mode, tmp_path):
    rng, X, Xt, y = _data(3)
    if nan_mode == "Forbidden":
        X = np.nan_to_num(X)  # CatBoost refuses NaN when training this way; predicts it as-is
    model = cb.CatBoostRegressor(iterations=20, depth=5, nan_mode=nan_mode, **_FIT).fit(X, y)
    _check(model, Xt, tmp_path, "RawFormulaVal", which=_one_source(nan_mode))


@pytest.mark.parametrize("loss", ["YetiRank", "PairLogit", "QueryRMSE"])
def test_ranking_losses(loss, tmp_path):
    rng, X, Xt, y = _data(4)
    groups = np.sort(rng.integers(0, 40, len(y)))
    rel = np.clip(np.round(y), 0, 4)
    model = cb.CatBoostRanker(iterations=12, depth=4, loss_function=loss, **_FIT).fit(X, rel, group_id=groups)
    _check(model, Xt, tmp_path, "RawFormulaVal", which=_one_source(loss))


def test_scale_and_bias(tmp_path):
    rng, X, Xt, y = _data(5)
    model = cb.CatBoostClassifier(iterations=10, depth=3, loss_function="MultiClass", **_FIT)
    model.fit(X, np.digitize(y, [0.0, 1.0]))
    model.set_scale_and_bias(1.7, [0.25, -0.5, 1.5])
    _check(model, Xt, tmp_path, "Probability")


def test_sklearn_wrapper_class_labels(tmp_path):
    import silvanforge.sklearn

    rng, X, Xt, y = _data(6)
    for labels in (np.array(["low", "mid", "high"]), np.array(["no", "yes"])):
        target = labels[np.digitize(y, [0.5, 1.5][: len(labels) - 1])]
        model = cb.CatBoostClassifier(iterations=10, depth=3, **_FIT).fit(X, target)
        est = silvanforge.sklearn.compile(model)
        np.testing.assert_array_equal(est.classes_, model.classes_)
        np.testing.assert_array_equal(est.predict(Xt), model.predict(Xt).reshape(-1))
        np.testing.assert_allclose(est.predict_proba(Xt), model.predict_proba(Xt), rtol=RTOL, atol=ATOL)
    reg = cb.CatBoostRegressor(iterations=10, depth=3, **_FIT).fit(X, y)
    np.testing.assert_allclose(silvanforge.sklearn.compile(reg).predict(Xt), reg.predict(Xt), rtol=RTOL, atol=ATOL)


def test_pandas_columns_by_name(tmp_path):
    pd = pytest.importorskip("pandas")
    rng, X, Xt, y = _data(7, f=4)
    cols = ["alpha", "beta", "gamma", "delta"]
    model = cb.CatBoostRegressor(iterations=10, depth=3, **_FIT).fit(pd.DataFrame(X, columns=cols), y)
    frame = pd.DataFrame(Xt, columns=cols)
    for src in _sources(model, tmp_path):
        cf = sf.compile(src)
        # columns in another order are matched by name
        got = cf.predict(frame[cols[::-1]])
        np.testing.assert_allclose(got, model.predict(frame), rtol=RTOL, atol=ATOL)


def test_refused_features_are_named(tmp_path):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(8)
    words = np.array(["red apple", "green pear", "blue sky", "red sky", "green apple"])
    frame = pd.DataFrame({"x": rng.normal(size=200), "t": words[rng.integers(0, 5, 200)]})
    model = cb.CatBoostClassifier(iterations=5, depth=2, text_features=["t"], **_FIT)
    model.fit(frame, (frame.x > 0).astype(int))
    model.save_model(str(tmp_path / "t.cbm"))
    for given in (model, tmp_path / "t.cbm"):  # (the file's export to JSON refused it vaguely)
        with pytest.raises(UnsupportedModelError, match="CatBoost text features are not supported \\('t'\\)"):
            sf.load_model(given)


def test_unknown_loss_and_malformed_files(tmp_path):
    rng, X, Xt, y = _data(9)
    model = cb.CatBoostRegressor(iterations=3, depth=2, loss_function="RMSEWithUncertainty", **_FIT).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="RMSEWithUncertainty"):
        sf.load_model(model)
    good = cb.CatBoostRegressor(iterations=3, depth=2, **_FIT).fit(X, y)
    good.save_model(str(tmp_path / "m.json"), format="json")
    text = (tmp_path / "m.json").read_bytes()
    (tmp_path / "cut.json").write_bytes(text[: len(text) // 2])
    with pytest.raises(ModelFormatError, match="cut.json"):
        sf.load_model(tmp_path / "cut.json")
    (tmp_path / "bad.cbm").write_bytes(b"CBM1" + b"\x00" * 64)
    with pytest.raises(SilvanForgeError, match="bad.cbm"):
        sf.load_model(tmp_path / "bad.cbm")


def test_cbm_without_catboost_names_the_install(tmp_path, monkeypatch):
    rng, X, Xt, y = _data(10)
    model = cb.CatBoostRegressor(iterations=3, depth=2, **_FIT).fit(X, y)
    model.save_model(str(tmp_path / "m.cbm"))
    monkeypatch.setitem(sys.modules, "catboost", None)  # import catboost now raises ImportError
    with pytest.raises(UnsupportedModelError, match="pip install catboost"):
        sf.load_model(tmp_path / "m.cbm")


# ------------------------------------------------------------------ categorical features
_WORDS = ["p", "q", "r", "s", "t", "u", "v", "w", "k", "l", "m", "n"]


def _cat_frame(rng, n):
    pd = pytest.importorskip("pandas")
    return pd.DataFrame({
        "a": rng.normal(size=n),
        "colour": rng.choice(["red", "green", "blue"], n),              # one-hot (3 values)
        "word": rng.choice(_WORDS, n),                                  # CTRs over strings
        "count": rng.integers(0, 20, n),                                # CTRs over integers
        "kind": pd.Categorical(rng.choice([f"kind-{i}" for i in range(7)], n)),  # pandas categories
    })


def _cat_target(df):
    return (df.a + (df.colour == "red") + df.word.isin(["p", "q", "r"]) + (df.kind == "kind-1")
            + (df["count"] % 3 == 0))


def _cat_rows(rng, n):
    te = _cat_frame(rng, n)
    te.loc[:8, "word"] = "never seen"           # unseen categories take CatBoost's prior
    te.loc[9:16, "count"] = 99
    te.loc[17:20, "colour"] = "purple"
    te.loc[21:24, "a"] = np.nan
    return te


_CATS = ["colour", "word", "count", "kind"]


@pytest.mark.parametrize("loss,grow_policy", [
    ("Logloss", "SymmetricTree"), ("MultiClass", "Depthwise"), ("RMSE", "Lossguide"),
    ("RMSE", "SymmetricTree"), ("Logloss", "Depthwise")])
def test_categorical_one_hot_and_ctr(loss, grow_policy, tmp_path):
    rng = np.random.default_rng(11)
    df, te = _cat_frame(rng, 500), _cat_rows(rng, 200)
    score = _cat_target(df)
    target = {"Logloss": (score > 1.2).astype(int), "MultiClass": np.digitize(score, [0.5, 1.5]),
              "RMSE": score}[loss]
    cls = cb.CatBoostRegressor if loss == "RMSE" else cb.CatBoostClassifier
    size = dict(max_leaves=10) if grow_policy == "Lossguide" else dict(depth=4)
    model = cls(iterations=15, loss_function=loss, grow_policy=grow_policy, cat_features=_CATS,
                one_hot_max_size=4, max_ctr_complexity=1, **size, **_FIT).fit(df, target)
    raw = cb.CatBoost.predict(model, te, prediction_type="RawFormulaVal")
    expected = cb.CatBoost.predict(model, te, prediction_type="RawFormulaVal" if loss == "RMSE" else "Probability")
    if loss == "Logloss":
        expected = expected[:, 1]
    (src,) = _sources(model, tmp_path, _one_source(loss, grow_policy))
    cf = sf.compile(src)
    # every categorical split is a number compared on a computed column (a CTR or a one-hot test)
    assert not any(t.categories for t in cf.forest.trees)
    np.testing.assert_allclose(cf.predict(te, output_margin=True), raw, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(cf.predict(te), expected, rtol=RTOL, atol=ATOL)
    # the same rows as an object array (columns by position), values as CatBoost reads them
    np.testing.assert_allclose(cf.predict(te.astype(object).to_numpy(), output_margin=True), raw,
                               rtol=RTOL, atol=ATOL)
    if grow_policy == "Depthwise":
        pl = pytest.importorskip("polars")
        np.testing.assert_allclose(cf.predict(pl.from_pandas(te), output_margin=True), raw, rtol=RTOL, atol=ATOL)
        # a compiled artifact keeps the hashed categories
        cf.save(tmp_path / "m.forge")
        again = sf.load_compiled(tmp_path / "m.forge", trust_code=True)
        np.testing.assert_allclose(again.predict(te[te.columns[::-1]], output_margin=True), raw,
                                   rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("ctr", [["Counter"], ["Buckets"], ["Borders:TargetBorderCount=2", "Counter:CtrBorderCount=5"]])
def test_ctr_types(ctr, tmp_path):
    rng = np.random.default_rng(12)
    df, te = _cat_frame(rng, 500), _cat_rows(rng, 200)
    target = np.digitize(_cat_target(df), [0.5, 1.5])
    model = cb.CatBoostClassifier(iterations=15, depth=4, loss_function="MultiClass", cat_features=_CATS,
                                  one_hot_max_size=1, max_ctr_complexity=1, simple_ctr=ctr, **_FIT).fit(df, target)
    cf = sf.compile(model)
    np.testing.assert_allclose(cf.predict(te, output_margin=True),
                               cb.CatBoost.predict(model, te, prediction_type="RawFormulaVal"), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("loss", ["Logloss", "RMSE"])
def test_ctr_combinations(loss, tmp_path):
    """CTRs over combinations of categorical values, float borders and one-hot values: each
    combination's key is a computed column (Forest.hashed_combinations)."""
    rng = np.random.default_rng(13)
    df, te = _cat_frame(rng, 600), _cat_rows(rng, 200)
    score = _cat_target(df) + (df.word == "p") * (df["count"] % 2) + (df.colour == "red") * (df.a > 0)
    cls = cb.CatBoostRegressor if loss == "RMSE" else cb.CatBoostClassifier
    model = cls(iterations=40, depth=6, loss_function=loss, cat_features=_CATS, one_hot_max_size=3,
                max_ctr_complexity=3, **_FIT).fit(df, score if loss == "RMSE" else (score > 1.5).astype(int))
    forest = sf.load_model(model)
    assert forest.hashed_combinations, "the model was meant to combine features"
    assert {e[0] for c in forest.hashed_combinations for e in c["elements"]} >= {"cat", "float"}
    cf = sf.compile(model)
    raw = cb.CatBoost.predict(model, te, prediction_type="RawFormulaVal")
    np.testing.assert_allclose(cf.predict(te, output_margin=True), raw, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(cf.predict(te.astype(object).to_numpy(), output_margin=True), raw, rtol=RTOL, atol=ATOL)
    assert cf.num_features == te.shape[1]
    cf.save(tmp_path / "m.forge")
    np.testing.assert_allclose(sf.load_compiled(tmp_path / "m.forge", trust_code=True).predict(te, output_margin=True),
                               raw, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("native", [True, False])
def test_combinations_found_either_way_equal_catboost(native, monkeypatch):
    """The computed columns (CTRs over combinations, one-hot tests) filled by the CPU target's
    kernel or by NumPy (no target has a kernel), at 1 to 200 rows, from frames and object
    arrays: CatBoost's margins, and a value never seen (hashed once, then remembered) as
    CatBoost takes it."""
    from silvanforge.inputs import hashed_rows

    if not native:
        monkeypatch.setattr(hashed_rows, "_kernel", lambda: None)
    rng = np.random.default_rng(14)
    df, te = _cat_frame(rng, 500), _cat_rows(rng, 200)
    score = _cat_target(df) + (df.word == "p") * (df["count"] % 2)
    model = cb.CatBoostRegressor(iterations=30, depth=5, cat_features=_CATS, one_hot_max_size=3,
                                 max_ctr_complexity=2, **_FIT).fit(df, score)
    cf = sf.compile(model)
    assert cf.forest.hashed_combinations
    raw = cb.CatBoost.predict(model, te, prediction_type="RawFormulaVal")
    for n in (1, 7, 64, 65, 200):
        np.testing.assert_allclose(cf.predict(te.iloc[:n], output_margin=True), raw[:n], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(cf.predict(te.iloc[:n].astype(object).to_numpy(), output_margin=True), raw[:n],
                                   rtol=RTOL, atol=ATOL)
    # a frame whose category column holds other categories in another order
    other = te.copy()
    other["kind"] = other["kind"].cat.reorder_categories(list(other["kind"].cat.categories)[::-1])
    np.testing.assert_allclose(cf.predict(other, output_margin=True), raw, rtol=RTOL, atol=ATOL)
    # the rows shared among threads (a share of 16 rows and more) by the target's native workers,
    # then by Python's pool (a kernel without a hand-off of its own), and labels as Python strings
    monkeypatch.setattr(hashed_rows, "SHARE_ROWS", 16)
    monkeypatch.setattr(hashed_rows, "THREAD_ROWS", 16)
    from silvanforge_target_cpu import hashed_columns

    handed, run_shares = [], hashed_columns.HashedColumnsKernel.run_shares

    def hand_off(self, args, bounds, *rest):
        if not own:  # (as where the native pool is busy or absent)
            return False
        ran = run_shares(self, args, bounds, *rest)
        if ran:  # (the native workers ran these shares)
            handed.append(bounds)
        return ran
    monkeypatch.setattr(hashed_columns.HashedColumnsKernel, "run_shares", hand_off)
    for own in (True, False):
        for threads in (2, 3):
            np.testing.assert_allclose(cf.predict(te, output_margin=True, threads=threads), raw, rtol=RTOL, atol=ATOL)
    assert not native or sorted({len(b) - 1 for b in handed}) == [2, 3]
    labels = te.astype({c: object for c in ("colour", "word")})
    np.testing.assert_allclose(cf.predict(labels, output_margin=True), raw, rtol=RTOL, atol=ATOL)


def test_frames_read_by_schema_and_values_coded_across_calls(monkeypatch):
    """A compiled model reads a frame by the plan of its schema and codes a column's values
    across calls (the call's tables of combinations kept by the values they are of): calls of
    new values, of the same names with other dtypes or categories, of shuffled columns, with
    every memory at its smallest, each give CatBoost's margins for their own rows."""
    from silvanforge.inputs import frames, hashed_rows

    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(18)
    df, te = _cat_frame(rng, 500), _cat_rows(rng, 200)
    model = cb.CatBoostRegressor(iterations=30, depth=5, cat_features=_CATS, one_hot_max_size=3,
                                 max_ctr_complexity=2, **_FIT).fit(df, _cat_target(df) + (df.word == "p") * df.a)
    cf = sf.compile(model)
    assert cf.forest.hashed_combinations

    def check(frame, **kwargs):
        # (CatBoost reads columns by position: the frame in the training order)
        want = cb.CatBoost.predict(model, frame[list(df.columns)], prediction_type="RawFormulaVal")
        np.testing.assert_allclose(cf.predict(frame, output_margin=True, **kwargs), want, rtol=RTOL, atol=ATOL)

    # values first seen in later calls (a call of a few values, then of more), the same rows again
    few = te[te.word.isin(["p", "q"]) & (te["count"] < 5)]
    for frame in (few, te.iloc[:70], te, few, te.iloc[::-1], te.iloc[:1]):
        check(frame)
    # the same names with other dtypes, or other categories in another order
    kinds = list(te["kind"].cat.categories)
    others = [te.astype({"count": np.int32}), te.astype({"count": str, "kind": str}),
              te.astype({"word": "category", "count": "category"}), te.astype({"word": object, "colour": object}),
              te.assign(kind=pd.Categorical(te["kind"].astype(str), categories=kinds[::-1] + ["kind-99"])),
              te[["kind", "a", "count", "word", "colour"]]]
    for frame in others:
        check(frame)
        check(frame.iloc[:3])
    assert len(cf._schemas) <= frames.SCHEMAS
    # calls of other values from threads at once, on a model that has seen none yet
    from concurrent.futures import ThreadPoolExecutor

    fresh = sf.compile(model)
    calls = [few, te, te.iloc[:70], others[1], others[2], te.iloc[::-1]] * 4
    wants = [cb.CatBoost.predict(model, f[list(df.columns)], prediction_type="RawFormulaVal") for f in calls]
    with ThreadPoolExecutor(4) as pool:
        gots = list(pool.map(lambda f: fresh.predict(f, output_margin=True, threads=1), calls))
    for got, want in zip(gots, wants):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # every memory at its smallest: a column's values start again, the tables are rebuilt; rows
    # a column at a time from 16 rows on
    monkeypatch.setattr(hashed_rows, "COLUMN_VALUES", 3)
    monkeypatch.setattr(hashed_rows, "DENSE_TABLES", 1)
    monkeypatch.setattr(hashed_rows, "FORTRAN_ROWS", 16)
    again = sf.compile(model)
    big = pd.concat([te] * 6, ignore_index=True)  # (rows past a block of the kernel's)
    for frame in (te, few, te.iloc[:50], others[1], others[-1], big, te):
        want = cb.CatBoost.predict(model, frame[list(df.columns)], prediction_type="RawFormulaVal")
        np.testing.assert_allclose(again.predict(frame, output_margin=True), want, rtol=RTOL, atol=ATOL)
    # two threads sharing a call's rows
    monkeypatch.setattr(hashed_rows, "SHARE_ROWS", 16)
    for frame in (te, others[1], big):
        np.testing.assert_allclose(again.predict(frame, output_margin=True, threads=2),
                                   cb.CatBoost.predict(model, frame[list(df.columns)], prediction_type="RawFormulaVal"),
                                   rtol=RTOL, atol=ATOL)
        check(frame, threads=2)


def _kernel_flag_in_a_fresh_process(tmp_path, seed: int, open_model, flag: str):
    """A small CatBoost model with CTRs and one-hot features, opened in a fresh process by the
    line ``open_model(model, tmp_path)`` gives (``cf = ...``): ``flag`` (an expression over the
    CPU target's ``hashed_columns``) read before the first call, which must predict as CatBoost."""
    import json
    import subprocess

    rng = np.random.default_rng(seed)
    df, te = _cat_frame(rng, 300), _cat_rows(rng, 60)
    model = cb.CatBoostRegressor(iterations=10, depth=4, cat_features=_CATS, one_hot_max_size=3,
                                 max_ctr_complexity=2, **_FIT).fit(df, _cat_target(df))
    te.to_pickle(tmp_path / "rows.pkl")
    script = (
        "import json, pandas as pd, silvanforge as sf\n"
        "from silvanforge_target_cpu import hashed_columns\n"
        f"{open_model(model, tmp_path)}\n"
        f"flag = {flag}\n"
        f"y = cf.predict(pd.read_pickle({str(tmp_path / 'rows.pkl')!r}), output_margin=True)\n"
        "print(json.dumps({'flag': flag, 'y': y.tolist()}))\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(out["y"], cb.CatBoost.predict(model, te, prediction_type="RawFormulaVal"),
                               rtol=RTOL, atol=ATOL)
    return out["flag"]


def test_an_artifact_carries_the_kernel_of_computed_columns(tmp_path):
    """A saved model with computed columns carries the machine code of their kernel: a trusted
    load in a fresh process maps it (nothing compiled at the first call) and predicts as
    CatBoost; code for another host or of another kernel is not mapped."""
    import json

    from silvanforge_target_cpu import hashed_columns

    def save_then_load(model, where):
        sf.compile(model).save(where / "m.forge", key="k")
        return f"cf = sf.load_compiled({str(where / 'm.forge')!r}, key='k')"
    assert _kernel_flag_in_a_fresh_process(tmp_path, 19, save_then_load,
                                           "hashed_columns._kernel is not None and hashed_columns._kernel.mapped")
    saved = hashed_columns.kernel().artifact()
    assert hashed_columns._saved_code(saved)
    n = int.from_bytes(saved[:4], "little")
    meta = json.loads(saved[4:4 + n])
    for field, other in (("cpu", "another-cpu"), ("ir", "0" * 16)):
        edited = json.dumps({**meta, field: other}).encode()
        assert hashed_columns._saved_code(len(edited).to_bytes(4, "little") + edited + saved[4 + n:]) is None
    assert hashed_columns._saved_code(b"\x05\x00") is None


@pytest.mark.parametrize("forms", ["background", "eager"])
def test_a_compile_makes_the_kernel_of_computed_columns(forms, tmp_path):
    """A compile without a code cache makes the kernel of computed columns beside the model's
    forms (in the background builder, or within an eager compile), so a fresh process's first
    categorical call compiles nothing, and predicts as CatBoost."""
    def compiled(model, where):
        model.save_model(str(where / "m.cbm"))
        return f"cf = sf.compile({str(where / 'm.cbm')!r}, forms={forms!r}).wait()"
    assert _kernel_flag_in_a_fresh_process(tmp_path, 20, compiled, "hashed_columns._kernel is not None")


def test_booleans_in_a_categorical_feature_are_read_as_catboost_reads_them():
    """CatBoost's predict hashes True and False as it hashes 1 and 0 (a bool column, a nullable
    one, among objects): a model trained on a bool column, and one whose labels hold "True" and
    "1" apart, answer as CatBoost through every input that holds booleans."""
    pd, pl, pa = pytest.importorskip("pandas"), pytest.importorskip("polars"), pytest.importorskip("pyarrow")
    rng = np.random.default_rng(3)
    labels = np.array(["0", "1", "True", "False", "red"])
    for column in (rng.random(600) < 0.5, rng.choice(labels, 600)):
        frame = pd.DataFrame({"a": rng.normal(size=600), "c": column})
        y = (np.isin(frame.c.astype(str), ["True", "0"]) + frame.a * 0.3 + rng.normal(size=600) * 0.3 > 0.5)
        model = cb.CatBoostClassifier(iterations=12, depth=3, verbose=False, thread_count=1, cat_features=["c"],
                                      one_hot_max_size=8, allow_writing_files=False).fit(frame, y.astype(int))
        cf = sf.compile(model)
        X = pd.DataFrame({"a": [0.1, -0.2, 0.3], "c": [True, False, True]})
        want = model.predict(X, prediction_type="RawFormulaVal")
        for given in (X, X.astype({"c": "boolean"}), X.astype({"c": object}), X.to_dict("records"),
                      pl.from_pandas(X), pa.Table.from_pandas(X, preserve_index=False)):
            np.testing.assert_allclose(cf.predict(given, output_margin=True), want, rtol=1e-12, atol=1e-12,
                                       err_msg=type(given).__name__)


def test_integer_columns_coded_across_calls_hash_as_catboost():
    """A column of integers is coded across calls through a table over their span once its
    values are known: negative and unsigned integers, and a value not seen yet, hash as CatBoost
    hashes them, call after call."""
    from silvanforge.inputs.category_hash import catboost_hash
    from silvanforge.inputs.hashed_rows import HashedInputs
    from silvanforge.ir.hir import Forest

    reading = HashedInputs(Forest(trees=[], num_features=1, num_outputs=1, base_score=np.zeros(1)))
    calls = [np.array([-3, 5, 7, -3]), np.array([-3, 5, 7, -3]), np.array([5, 7, 5], dtype=np.uint64),
             np.array([5, 9], dtype=np.int32), np.array([9, -3], dtype=np.int16), np.array([True, False])]
    for values in calls:
        codes, table = reading.hash_codes(values, 0)
        assert ((table[codes] + (1 << 32)) & 0xFFFFFFFF).tolist() == [catboost_hash(v) for v in values.tolist()]
    assert reading._columns[0].integers is not None  # (the table over the span was read)


def test_a_tree_of_one_leaf_is_read(tmp_path):
    """CatBoost writes a tree that found no split (depth 0) with ``"splits": null``: one leaf."""
    import json

    rng = np.random.default_rng(15)
    X, y = rng.normal(size=(300, 3)), rng.normal(size=300)
    model = cb.CatBoostRegressor(iterations=4, depth=2, **_FIT).fit(X, y)
    model.save_model(str(tmp_path / "m.json"), format="json")
    doc = json.loads((tmp_path / "m.json").read_text())
    first = doc["oblivious_trees"][0]
    doc["oblivious_trees"][0] = {"leaf_values": [0.125 * len(first["leaf_values"])],
                                 "leaf_weights": [sum(first["leaf_weights"])], "splits": None}
    (tmp_path / "one.json").write_text(json.dumps(doc))
    back = cb.CatBoostRegressor()
    back.load_model(str(tmp_path / "one.json"), format="json")
    Xt = rng.normal(size=(50, 3))
    np.testing.assert_allclose(sf.compile(tmp_path / "one.json").predict(Xt, output_margin=True),
                               back.predict(Xt, prediction_type="RawFormulaVal"), rtol=RTOL, atol=ATOL)


def test_category_hash_is_catboosts(tmp_path):
    """silvanforge.inputs.category_hash against the hashes CatBoost stores for its training values
    (every CityHash length branch: 0-16, 17-32, 33-64 and longer, and UTF-8)."""
    pd = pytest.importorskip("pandas")
    from silvanforge.inputs.category_hash import catboost_hash

    rng = np.random.default_rng(14)
    labels = ["", "x", "ab", "abcd", "abcdefghi", "0123456789abcdefg", "z" * 33, "é" * 40,
              "long " * 30, "-1", "0", "123456789", "Привет", "a\u0000b"] + \
             ["".join(rng.choice(list("abcdefgh"), k)) for k in rng.integers(1, 200, 30)]
    df = pd.DataFrame({"a": rng.normal(size=4 * len(labels)), "c": labels * 4})
    y = rng.integers(0, 2, len(df))
    model = cb.CatBoostClassifier(iterations=2, depth=2, cat_features=["c"], **_FIT).fit(df, y)
    model.save_model(str(tmp_path / "m.json"), format="json", pool=cb.Pool(df, y, cat_features=["c"]))
    import json

    stored = json.loads((tmp_path / "m.json").read_text())["features_info"]["cat_features_hash"]
    assert len(stored) == len(set(labels))
    for entry in stored:
        assert catboost_hash(entry["value"]) == entry["hash"], entry["value"]
    assert catboost_hash(7) == catboost_hash("7") == catboost_hash(7.0)


@pytest.mark.parametrize("loss", ["MultiRMSE", "MultiQuantile:alpha=0.2,0.8", "LogLinQuantile"])
def test_more_regression_losses(loss, tmp_path):
    rng, X, Xt, y = _data(15)
    target = np.column_stack([y, -2 * y]) if loss == "MultiRMSE" else np.abs(y) + 0.5
    model = cb.CatBoostRegressor(iterations=10, depth=3, loss_function=loss, **_FIT).fit(X, target)
    _check(model, Xt, tmp_path, "RawFormulaVal", which=_one_source(loss))


def test_forge_predict_reads_categorical_csv_cells(tmp_path, capsys):
    """``forge predict`` on a CSV whose categorical columns hold labels and integers (a header
    in another order): CatBoost's predict_proba; a malformed model is one ``error:`` line."""
    from silvanforge import cli

    rng = np.random.default_rng(16)
    df, te = _cat_frame(rng, 400), _cat_rows(rng, 40)
    model = cb.CatBoostClassifier(iterations=10, depth=3, cat_features=_CATS, one_hot_max_size=4,
                                  max_ctr_complexity=1, **_FIT).fit(df, (_cat_target(df) > 1.2).astype(int))
    model.save_model(str(tmp_path / "m.cbm"))
    te = te.astype({"kind": str})
    te[te.columns[::-1]].to_csv(tmp_path / "rows.csv", index=False)
    assert cli.main(["predict", str(tmp_path / "m.cbm"), "--input", str(tmp_path / "rows.csv"),
                     "--output", str(tmp_path / "out.csv")]) == 0
    np.testing.assert_allclose(np.loadtxt(tmp_path / "out.csv"), model.predict_proba(te)[:, 1], rtol=RTOL, atol=ATOL)
    capsys.readouterr()
    (tmp_path / "bad.json").write_bytes(b'{"features_info": {"float_features": 3}}')
    assert cli.main(["predict", str(tmp_path / "bad.json"), "--input", str(tmp_path / "rows.csv")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "bad.json" in err[0], err


def test_integer_categories_in_numeric_arrays(tmp_path):
    """Integer categories in float32 / float64 / int arrays are hashed as CatBoost hashes the
    integers, for one row (the lean path of small requests) as for many."""
    rng = np.random.default_rng(17)
    X = np.column_stack([rng.normal(size=500), rng.integers(0, 15, 500), rng.integers(0, 4, 500)])
    y = X[:, 0] + np.isin(X[:, 1], [2, 5, 7]) + (X[:, 2] == 1)
    Xi = X.astype(object)
    Xi[:, 1:] = X[:, 1:].astype(int)
    model = cb.CatBoostRegressor(iterations=15, depth=4, cat_features=[1, 2], one_hot_max_size=4,
                                 max_ctr_complexity=2, **_FIT).fit(Xi, y)
    cf = sf.compile(model)
    T = np.column_stack([rng.normal(size=40), rng.integers(0, 20, 40), rng.integers(0, 6, 40)])
    Ti = T.astype(object)
    Ti[:, 1:] = T[:, 1:].astype(int)
    want = model.predict(Ti)
    for rows in (T.astype(np.float32), T, Ti):
        np.testing.assert_allclose(cf.predict(rows), want, rtol=1e-6 if rows.dtype == np.float32 else RTOL, atol=ATOL)
        np.testing.assert_allclose(cf.predict(rows[:1]), want[:1], rtol=1e-6 if rows.dtype == np.float32 else RTOL, atol=ATOL)

"""predict on what users hold: data frames (pandas, polars, pyarrow) matched to the model by
column name, categorical columns mapped as XGBoost and LightGBM map them.

Every expected value is the training library's own prediction on the frame in its training
order (or on the codes the library itself would use)."""

from __future__ import annotations

import numpy as np
import pytest
from support_common import record_small_calls
from hypothesis import given, settings
from hypothesis import strategies as st

import silvanforge as sf
from silvanforge.errors import InputError

pd = pytest.importorskip("pandas")
xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")

def _same(got, expected):
    """Equal to the library's own output: to the last bit, but for LightGBM's softmax, whose
    exponentials are the C library's (NumPy's differ in the last bit of a few percent of them:
    1 ulp; a wrong column is far off)."""
    np.testing.assert_allclose(got, np.asarray(expected, dtype=np.asarray(got).dtype), rtol=1e-12, atol=0)


COLOURS = ["red", "green", "blue", "amber", "violet"]
SIZES = [3, 7, 11, 40]


def _frame(rng, n=600):
    """Numeric and categorical columns (string and integer labels), 10% of each missing."""
    df = pd.DataFrame({
        "age": rng.normal(40, 12, n),
        "colour": pd.Categorical(rng.choice(COLOURS, n), categories=COLOURS),
        "income": rng.lognormal(3, 1, n),
        "size": pd.Categorical(rng.choice(SIZES, n), categories=SIZES),
        "score": rng.uniform(-1, 1, n),
    })
    df.loc[rng.random(n) < 0.1, "age"] = np.nan
    df.loc[rng.random(n) < 0.1, "colour"] = None
    df.loc[rng.random(n) < 0.1, "size"] = None
    return df


def _target(df, rng, classes=2):
    signal = (df["age"].fillna(40) / 12 + df["colour"].isin(["red", "blue"]) * 1.5
              + (df["size"] == 7) * 1.0 + df["score"] + rng.normal(0, 0.3, len(df)))
    if classes == 2:
        return (signal > signal.median()).astype(int)
    return np.digitize(signal, np.quantile(signal, np.linspace(0, 1, classes + 1)[1:-1]))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    df = _frame(rng)
    return df, _target(df, rng), _target(df, rng, classes=3)


@pytest.fixture(scope="module")
def xgb_binary(data):
    df, y, _ = data
    return xgb.XGBClassifier(n_estimators=25, max_depth=4, enable_categorical=True,
                             tree_method="hist").fit(df, y)


@pytest.fixture(scope="module")
def lgb_multiclass(data):
    df, _, y3 = data
    return lgb.LGBMClassifier(n_estimators=20, num_leaves=15, min_child_samples=5,
                              verbose=-1).fit(df, y3)


def _test_rows(df, rng, n=120):
    """Rows with the training labels in another category order and with missing labels."""
    t = df.sample(n, random_state=1).reset_index(drop=True)
    t["colour"] = pd.Categorical(t["colour"].astype(object), categories=COLOURS[::-1])
    return t


# ------------------------------------------------------------------ columns by name
@pytest.mark.parametrize("kind", ["pandas", "polars", "pyarrow"])
def test_reordered_columns_predict_like_the_library(data, xgb_binary, lgb_multiclass, kind):
    df, _, _ = data
    rows = _test_rows(df, np.random.default_rng(2))
    shuffled = rows[["score", "size", "age", "income", "colour"]]
    for model in (xgb_binary, lgb_multiclass):
        expected = model.predict_proba(rows)
        expected = expected[:, 1] if expected.shape[1] == 2 and model is xgb_binary else expected
        got = sf.compile(model).predict(_as(shuffled, kind))
        _same(got, expected)


def _as(frame, kind):
    if kind == "pandas":
        return frame
    if kind == "pyarrow":
        pa = pytest.importorskip("pyarrow")
        return pa.Table.from_pandas(frame, preserve_index=False)
    pl = pytest.importorskip("polars")
    # polars' categorical columns hold strings: string categories become an Enum of the frame's
    # categories; integer ones are their plain values (what polars.from_pandas makes of them),
    # read as the model's labels.
    cols = {}
    for name in frame.columns:
        s = frame[name]
        if name == "colour":
            values = [None if v != v else v for v in s.astype(object).tolist()]
            cols[name] = pl.Series(name, values, dtype=pl.Enum(list(s.cat.categories)))
        elif name == "size":
            cols[name] = pl.Series(name, s.astype(float).to_numpy())
        else:
            cols[name] = pl.Series(name, s.to_numpy())
    return pl.DataFrame(cols)


@pytest.mark.parametrize("kind", ["pandas", "polars", "pyarrow"])
def test_renamed_missing_and_unknown_columns_are_named(data, xgb_binary, kind):
    df, _, _ = data
    rows = df.head(20)
    cf = sf.compile(xgb_binary)
    with pytest.raises(InputError, match="missing 'age'.*not features of the model: 'AGE'"):
        cf.predict(_as(rows.rename(columns={"age": "AGE"}), kind))
    with pytest.raises(InputError, match="missing 'income'"):
        cf.predict(_as(rows.drop(columns=["income"]), kind))
    with pytest.raises(InputError, match="not features of the model: 'extra'"):
        cf.predict(_as(rows.assign(extra=1.0), kind))


def test_frames_without_names_and_models_without_names_go_by_position(rng):
    X = rng.normal(size=(400, 4))
    y = X[:, 0] - 2 * X[:, 3]
    named = pd.DataFrame(X, columns=list("abcd"))
    # A model trained on an array has no names: any frame is read by position.
    unnamed_model = xgb.XGBRegressor(n_estimators=10, max_depth=3).fit(X, y)
    _same(sf.compile(unnamed_model).predict(named), unnamed_model.predict(X))
    # LightGBM calls the features of such a model Column_0...; still no names of the user's.
    lgb_model = lgb.LGBMRegressor(n_estimators=10, verbose=-1).fit(X, y)
    _same(sf.compile(lgb_model).predict(named), lgb_model.predict(X))
    # A frame with pandas' default integer columns has no names: read by position.
    named_model = xgb.XGBRegressor(n_estimators=10, max_depth=3).fit(named, y)
    _same(sf.compile(named_model).predict(pd.DataFrame(X)), named_model.predict(named))


@settings(max_examples=15, deadline=None)
@given(order=st.permutations(["age", "colour", "income", "size", "score"]))
def test_any_column_order_gives_the_same_predictions(lgb_multiclass_model, rows_for_order, order):
    cf, expected = lgb_multiclass_model
    _same(cf.predict(rows_for_order[list(order)]), expected)


@pytest.fixture(scope="module")
def lgb_multiclass_model(lgb_multiclass, rows_for_order):
    return sf.compile(lgb_multiclass), lgb_multiclass.predict_proba(rows_for_order)


@pytest.fixture(scope="module")
def rows_for_order(data):
    return _test_rows(data[0], np.random.default_rng(3), n=40)


# ------------------------------------------------------------------ categorical columns
def _unseen(rows):
    t = rows.copy()
    labels = t["colour"].astype(object).to_numpy().copy()
    labels[::4] = "teal"  # a colour no tree was trained on
    t["colour"] = pd.Categorical(labels)
    return t


def test_lightgbm_unseen_and_missing_categories_are_missing_values(data):
    df, y, _ = data
    model = lgb.LGBMClassifier(n_estimators=20, num_leaves=15, min_child_samples=5, verbose=-1).fit(df, y)
    rows = _unseen(_test_rows(df, np.random.default_rng(4)))
    assert rows["colour"].isna().any() and (rows["colour"] == "teal").any()
    cf = sf.compile(model)
    _same(cf.predict(rows), model.predict_proba(rows)[:, 1])
    # the same through the booster, whose predict maps pandas_categorical too
    _same(cf.predict(rows), model.booster_.predict(rows))


def test_lightgbm_categories_survive_the_saved_model_and_the_artifact(data, tmp_path):
    df, y, _ = data
    model = lgb.LGBMClassifier(n_estimators=10, verbose=-1).fit(df, y)
    path = tmp_path / "m.txt"
    model.booster_.save_model(str(path))
    rows = _test_rows(df, np.random.default_rng(5))
    expected = model.predict_proba(rows)[:, 1]
    cf = sf.compile(path)
    assert cf.forest.feature_categories == {1: COLOURS, 3: SIZES}
    _same(cf.predict(rows), expected)
    cf.save(tmp_path / "m.forge")
    loaded = sf.load_compiled(tmp_path / "m.forge")
    assert loaded.forest.feature_categories == {1: COLOURS, 3: SIZES}
    _same(loaded.predict(rows[rows.columns[::-1]]), expected)


def test_xgboost_categories_map_like_xgboost_and_unseen_ones_are_refused(data, xgb_binary):
    df, _, _ = data
    rows = _test_rows(df, np.random.default_rng(6))
    cf = sf.compile(xgb_binary)
    assert cf.forest.feature_categories[1] == COLOURS
    assert cf.forest.feature_categories[3] == SIZES
    _same(cf.predict(rows), xgb_binary.predict_proba(rows)[:, 1])
    with pytest.raises(InputError, match="column 'colour' has a category the model was not trained with"):
        cf.predict(_unseen(rows))


def test_category_codes_in_arrays_are_read_as_the_library_reads_them(data, xgb_binary):
    df, _, _ = data
    rows = _test_rows(df, np.random.default_rng(8))
    # the training order of categories: codes as the training frame had them
    codes = rows.copy()
    for name, labels in (("colour", COLOURS), ("size", SIZES)):
        codes[name] = rows[name].cat.set_categories(labels).cat.codes.replace(-1, np.nan).astype(float)
    X = codes[["age", "colour", "income", "size", "score"]].to_numpy()
    _same(sf.compile(xgb_binary).predict(X), xgb_binary.predict_proba(rows)[:, 1])


def test_string_columns_are_mapped_through_the_stored_labels(data, lgb_multiclass):
    df, _, _ = data
    rows = _test_rows(df, np.random.default_rng(9))
    as_strings = rows.assign(colour=rows["colour"].astype(object))
    _same(sf.compile(lgb_multiclass).predict(as_strings),
                                  lgb_multiclass.predict_proba(rows))


# ------------------------------------------------------------------ dtypes and bad frames
def test_nullable_and_boolean_columns(rng):
    X = rng.normal(size=(300, 3))
    y = X[:, 0] + X[:, 1] - X[:, 2]
    cols = ["a", "b", "c"]
    model = xgb.XGBRegressor(n_estimators=10, max_depth=3).fit(pd.DataFrame(X, columns=cols), y)
    cf = sf.compile(model)
    ints = np.round(X * 3)
    frame = pd.DataFrame({"a": pd.array(ints[:, 0].astype(int), dtype="Int64"),
                          "b": pd.array(ints[:, 1], dtype="Float64"), "c": ints[:, 2] > 0})
    frame.loc[::5, "a"] = pd.NA
    frame.loc[::7, "b"] = pd.NA
    expected_rows = np.column_stack([ints[:, 0], ints[:, 1], (ints[:, 2] > 0).astype(float)])
    expected_rows[::5, 0] = np.nan
    expected_rows[::7, 1] = np.nan
    _same(cf.predict(frame), cf.predict(expected_rows))


def test_numeric_frames_of_any_size_predict_like_the_library(rng):
    """A frame of plain NumPy numbers (float32/64, int8-64, unsigned, bool) is read in one
    conversion; in any column order and at 1-16 rows (online scoring: the small-call path)
    or many, the predictions are XGBoost's own on the same frame."""
    n = 400
    frame = pd.DataFrame({"f32": rng.normal(size=n).astype(np.float32), "f64": rng.normal(size=n) * 1e3,
                          "i8": rng.integers(-100, 100, n).astype(np.int8),
                          "i64": rng.integers(-2**40, 2**40, n), "u16": rng.integers(0, 60000, n).astype(np.uint16),
                          "flag": rng.random(n) < 0.5})
    frame.loc[::9, "f64"] = np.nan
    y = (frame["f32"] + frame["f64"] / 1e3 + frame["flag"] + frame["i8"] / 50 > 0.5).astype(int)
    model = xgb.XGBClassifier(n_estimators=30, max_depth=5).fit(frame, y)
    cf = sf.compile(model)
    small_calls = []
    record_small_calls(cf, lambda rows, result: small_calls.append(len(rows)))
    shuffled = frame[["u16", "flag", "f64", "i64", "f32", "i8"]]
    for k in (1, 2, 16, 17, n):
        np.testing.assert_array_equal(cf.predict(shuffled.iloc[:k]), model.predict_proba(frame.iloc[:k])[:, 1])
    assert small_calls == [1, 2, 16]


def test_arrow_int64_past_2_53_converts_as_numpy_does(rng):
    # Arrow's checked cast calls these values lossy; NumPy and pandas round them to float64.
    big = np.array([2**53 + 1, 2**60 + 3, -(2**62) - 1, 7, 2**63 - 1], dtype=np.int64)
    X = np.column_stack([rng.normal(size=big.size), big])
    model = xgb.XGBRegressor(n_estimators=5, max_depth=3).fit(
        pd.DataFrame(rng.normal(size=(100, 2)) * 2.0**60, columns=["a", "b"]), rng.normal(size=100))
    cf = sf.compile(model)
    frame = pd.DataFrame({"a": X[:, 0], "b": big})
    expected = cf.predict(frame)
    _same(expected, cf.predict(np.column_stack([X[:, 0], big.astype(np.float64)])))
    for kind in ("pyarrow", "polars"):
        _same(cf.predict(_as(frame, kind)), expected)


def test_frames_that_cannot_be_read_say_why(rng):
    X = rng.normal(size=(200, 2))
    model = xgb.XGBRegressor(n_estimators=5, max_depth=2).fit(pd.DataFrame(X, columns=["a", "b"]), X[:, 0])
    cf = sf.compile(model)
    with pytest.raises(InputError, match="column 'b' holds"):
        cf.predict(pd.DataFrame({"a": [1.0], "b": ["text"]}))
    with pytest.raises(InputError, match="two columns named 'a'"):
        cf.predict(pd.DataFrame([[1.0, 2.0, 3.0]], columns=["a", "b", "a"]))
    with pytest.raises(InputError, match="pandas Series is one column"):
        cf.predict(pd.Series([1.0, 2.0], index=["a", "b"]))
    scipy_sparse = pytest.importorskip("scipy.sparse")
    with pytest.raises(InputError, match="sparse matrices"):
        cf.predict(scipy_sparse.csr_matrix(X))


def test_polars_categorical_without_stored_labels_is_refused(rng):
    pl = pytest.importorskip("polars")
    X = rng.integers(0, 3, size=(200, 2)).astype(float)
    model = xgb.XGBRegressor(n_estimators=5, max_depth=2).fit(pd.DataFrame(X, columns=["a", "b"]), X[:, 0])
    frame = pl.DataFrame({"a": pl.Series(["x", "y"], dtype=pl.Categorical), "b": [1.0, 2.0]})
    with pytest.raises(InputError, match="'a' is categorical with labels such as 'x', but the model's feature 'a' "
                                         "is a number"):
        sf.compile(model).predict(frame)


def test_dates_and_durations_are_refused(rng):
    X = rng.normal(size=(100, 2))
    model = xgb.XGBRegressor(n_estimators=3, max_depth=2).fit(pd.DataFrame(X, columns=["a", "b"]), X[:, 0])
    cf = sf.compile(model)
    frame = pd.DataFrame({"a": pd.date_range("2020-01-01", periods=3), "b": [1.0, 2.0, 3.0]})
    with pytest.raises(InputError, match="column 'a' holds dates, times or durations"):
        cf.predict(frame)
    with pytest.raises(InputError, match="dates, times or durations"):
        cf.predict(frame.assign(a=pd.to_timedelta([1, 2, 3], unit="s")))
    for array in (np.array([[1, 2]], dtype="timedelta64[s]"), np.array([[1, 2]], dtype="datetime64[s]")):
        with pytest.raises(InputError, match="numeric"):
            cf.predict(array)


def test_columns_of_other_values_are_refused_in_one_line_of_their_own(rng):
    """Dates, lists, structs and intervals in any library's frame: one line naming the column and
    what it holds, without the text of the library's failed conversion."""
    pa = pytest.importorskip("pyarrow")
    X = rng.normal(size=(100, 2))
    cf = sf.compile(xgb.XGBRegressor(n_estimators=3, max_depth=2).fit(pd.DataFrame(X, columns=["a", "b"]), X[:, 0]))
    b = pa.array([1.0])
    cases = [(pa.table({"a": pa.array([1], pa.timestamp("s")), "b": b}), "dates, times or durations"),
             (pa.table({"a": pa.array([1], pa.date32()), "b": b}), "dates, times or durations"),
             (pa.table({"a": pa.array([[1.0]]), "b": b}), "lists, structs or maps"),
             (pa.table({"a": pa.array([{"q": 1}]), "b": b}), "lists, structs or maps"),
             (pd.DataFrame({"a": pd.period_range("2020", periods=1), "b": [1.0]}), "dates, times or durations"),
             (pd.DataFrame({"a": pd.interval_range(0, 1), "b": [1.0]}), "intervals")]
    for frame, held in cases:
        with pytest.raises(InputError) as caught:
            cf.predict(frame)
        message = str(caught.value)
        assert message.startswith(f"column 'a' holds {held}"), message
        assert "\n" not in message and "cast" not in message and "float()" not in message, message


def test_polars_128_bit_integers_are_refused_by_name(rng):
    pl = pytest.importorskip("polars")
    if not hasattr(pl, "Int128"):
        pytest.skip("a polars without 128-bit integers")
    X = rng.normal(size=(100, 2))
    model = xgb.XGBRegressor(n_estimators=3, max_depth=2).fit(pd.DataFrame(X, columns=["a", "b"]), X[:, 0])
    for n in (1, 3, 300):
        cf = sf.compile(model)  # (a few rows under the names of a plan made before are read as Python ints)
        frame = pl.DataFrame({"a": pl.Series(range(n), dtype=pl.Int128), "b": [1.0] * n})
        with pytest.raises(InputError, match="column 'a' holds 128-bit integers"):
            cf.predict(frame)
        np.testing.assert_array_equal(cf.predict(frame.with_columns(pl.col("a").cast(pl.Int64))),
                                      cf.predict(np.column_stack([np.arange(n), np.ones(n)])))


# ------------------------------------------------------------------ CSV files (forge predict)
def _forge(capsys, *args):
    from silvanforge import cli

    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_csv_labels_of_categorical_features_map_like_a_frame(data, xgb_binary, lgb_multiclass, tmp_path, capsys):
    """A CSV with a header is read as a frame: columns by name, a categorical feature's labels
    through the model's (a number there is a code, as in an array), missing cells missing."""
    df, _, _ = data
    rows = _test_rows(df, np.random.default_rng(11))
    csv = rows[["score", "size", "age", "income", "colour"]].copy()
    csv["size"] = rows["size"].cat.set_categories(SIZES).cat.codes.replace(-1, np.nan)
    (tmp_path / "rows.csv").write_text(csv.to_csv(index=False, na_rep=""))
    assert "red" in (tmp_path / "rows.csv").read_text()
    xgb_binary.get_booster().save_model(str(tmp_path / "x.json"))
    lgb_multiclass.booster_.save_model(str(tmp_path / "l.txt"))
    for path, model in ((tmp_path / "x.json", xgb_binary), (tmp_path / "l.txt", lgb_multiclass)):
        out = tmp_path / "y.npy"
        code, _, err = _forge(capsys, "predict", path, "-i", tmp_path / "rows.csv", "-o", out)
        assert code == 0, err
        expected = model.predict_proba(rows)
        _same(np.load(out).reshape(expected.shape[0], -1),
              expected[:, 1:] if model is xgb_binary else expected)
    # a label the XGBoost model never saw is refused (as XGBoost does); a word in a numeric
    # column is named with its line and column
    (tmp_path / "teal.csv").write_text(csv.assign(colour=["teal"] * len(csv)).to_csv(index=False, na_rep=""))
    code, _, err = _forge(capsys, "predict", tmp_path / "x.json", "-i", tmp_path / "teal.csv", "-o", out)
    assert code != 0 and "Traceback" not in err
    assert "teal.csv: column 'colour' has a category the model was not trained with" in err, err
    bad = csv.astype(object)
    bad.loc[3, "age"] = "old"
    (tmp_path / "bad.csv").write_text(bad.to_csv(index=False, na_rep=""))
    code, _, err = _forge(capsys, "predict", tmp_path / "l.txt", "-i", tmp_path / "bad.csv", "-o", out)
    assert code != 0 and "Traceback" not in err
    assert "bad.csv: line 5, column 3: 'old' is not a number (feature 'age' is not categorical)" in err, err


def test_csv_missing_words_that_are_labels_read_as_labels(tmp_path, capsys):
    """``NA``, ``null``, ``None`` in a CSV are missing values, but where a categorical feature
    has the word as a label (a country ``NA``), that label, exactly as the frame is read; the
    same words in a numeric column, or not among the labels, stay missing."""
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(5)
    n = 1200
    labels = ["NA", "US", "FR", "null", "None"]
    df = pd.DataFrame({"a": rng.normal(size=n), "country": pd.Categorical(rng.choice(labels, n), categories=labels)})
    y = df.a + df.country.cat.codes * 0.7 + rng.normal(size=n) * 0.1
    model = xgb.XGBRegressor(n_estimators=20, max_depth=3, enable_categorical=True, tree_method="hist").fit(df, y)
    rows = pd.DataFrame({"a": [0.1, np.nan, -0.5, 1.0, 0.3, 0.7],
                         "country": pd.Categorical(["NA", "US", "null", "None", "FR", None], categories=labels)})
    text = "a,country\n0.1,NA\nNA,US\n-0.5,null\n1.0,None\n0.3,FR\n0.7,\n"
    (tmp_path / "rows.csv").write_text(text)
    model.get_booster().save_model(str(tmp_path / "m.json"))
    code, _, err = _forge(capsys, "predict", tmp_path / "m.json", "-i", tmp_path / "rows.csv", "-o", tmp_path / "y.npy")
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), sf.compile(model).predict(rows))
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), model.predict(rows), rtol=1e-6)
    # "na" (not a label: labels are case-sensitive) is missing, as an empty cell is
    (tmp_path / "na.csv").write_text("a,country\n0.1,na\n0.1,\n")
    code, _, err = _forge(capsys, "predict", tmp_path / "m.json", "-i", tmp_path / "na.csv", "-o", tmp_path / "y.npy")
    assert code == 0, err
    y = np.load(tmp_path / "y.npy")
    assert y[0] == y[1]


def test_csv_words_of_catboost_categories_are_their_text(tmp_path, capsys):
    """CatBoost's categorical features (known by hash) read a cell ``NA`` or ``None`` as that
    text, as CatBoost does (it has no missing category)."""
    cb = pytest.importorskip("catboost")
    rng = np.random.default_rng(8)
    n = 600
    df = pd.DataFrame({"a": rng.normal(size=n), "c": rng.choice(["NA", "US", "None", "FR"], n)})
    y = df.a + (df.c == "NA") * 2 + (df.c == "None") * -1.5 + rng.normal(size=n) * 0.1
    model = cb.CatBoostRegressor(iterations=20, depth=3, cat_features=["c"], verbose=False, random_seed=0,
                                 thread_count=1).fit(df, y)
    model.save_model(str(tmp_path / "m.cbm"))
    rows = pd.DataFrame({"a": [0.1, -0.3, 0.5, 0.0], "c": ["NA", "None", "US", "FR"]})
    rows.to_csv(tmp_path / "rows.csv", index=False)
    code, _, err = _forge(capsys, "predict", tmp_path / "m.cbm", "-i", tmp_path / "rows.csv", "-o", tmp_path / "y.npy")
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), model.predict(rows), rtol=1e-9, atol=1e-12)


def test_csv_numbers_that_are_no_category_code_are_refused(tmp_path, capsys):
    """A CSV number in a categorical column is the category's code (as in an array): a frame of
    integer categories written by ``to_csv`` holds labels (10-40 of 4 categories) that would be
    read as unseen codes and answer otherwise, so a number past the codes (or not whole) is an
    error naming its line and column; the codes themselves, and JSON Lines labels, are read."""
    rng = np.random.default_rng(3)
    d = pd.DataFrame({"a": rng.normal(size=2000),
                      "b": pd.Categorical(rng.choice([30, 10, 20, 40], 2000), categories=[30, 10, 20, 40])})
    booster = lgb.train({"objective": "regression", "num_leaves": 7, "min_data_per_group": 5, "cat_smooth": 1,
                         "verbose": -1}, lgb.Dataset(d, d.b.cat.codes * 1.0 + d.a), 20)
    booster.save_model(str(tmp_path / "m.txt"))
    rows = d.iloc[:6].reset_index(drop=True)
    want = booster.predict(rows)
    rows.to_csv(tmp_path / "labels.csv", index=False)
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "labels.csv", "-o", tmp_path / "y.npy")
    first = next(r for r, v in enumerate(rows.b) if v >= 4)
    assert code != 0 and "Traceback" not in err
    assert (f"labels.csv: line {first + 2}, column 2: {rows.b[first]} is one of the labels of the categorical "
            "feature 'b' but not a category code (0 to 3)") in err, err
    # a number that is neither (50) is an unseen category, as the library reads it; so is one
    # equal to --missing, which predict makes missing
    rows.assign(b=rows.b.cat.codes.where(rows.index != 1, 50)).to_csv(tmp_path / "unseen.csv", index=False)
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "unseen.csv", "-o", tmp_path / "y.npy")
    assert code == 0, err
    unseen = np.stack([rows.a, rows.b.cat.codes.where(rows.index != 1, 50).astype(float)], 1)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), sf.compile(str(tmp_path / "m.txt")).predict(unseen))
    rows.assign(b=rows.b.cat.codes.where(rows.index != 1, 40)).to_csv(tmp_path / "sentinel.csv", index=False)
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "sentinel.csv", "-o",
                          tmp_path / "y.npy", "--missing", "40")
    assert code == 0, err
    rows.assign(b=rows.b.cat.codes).to_csv(tmp_path / "codes.csv", index=False)
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "codes.csv", "-o", tmp_path / "y.npy")
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-12)
    # a .npy holds an array: its numbers are codes, whatever they are (as predict reads arrays)
    np.save(tmp_path / "rows.npy", np.stack([rows.a, rows.b.astype(float)], axis=1))
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "rows.npy", "-o", tmp_path / "y.npy")
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"),
                                  sf.compile(str(tmp_path / "m.txt")).predict(np.stack([rows.a, rows.b.astype(float)], 1)))
    (tmp_path / "rows.jsonl").write_text(rows.to_json(orient="records", lines=True))
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "rows.jsonl", "-o", tmp_path / "y.npy")
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-12)


# ------------------------------------------------------------------ numbers where the model has labels
def test_plain_numbers_for_a_labelled_feature_are_its_labels_or_refused():
    """An integer-category column arrives as plain integers from polars.from_pandas (or an
    astype(int)): read as the model's labels, the same answers as the categorical frame; where
    the labels are strings, numbers are refused rather than silently read as codes."""
    pl = pytest.importorskip("polars")
    rng = np.random.default_rng(11)
    n = 1500
    df = pd.DataFrame({"a": rng.normal(size=n), "c": pd.Categorical(rng.choice([10, 20, 30, 50], n))})
    df.loc[::37, "c"] = np.nan
    y = (df.a + (df.c == 20) * 2 + rng.normal(size=n) * 0.1 > 0.5).astype(int)
    model = lgb.LGBMClassifier(n_estimators=20, min_child_samples=5, verbose=-1).fit(df, y)
    cf = sf.compile(model)
    expected = model.predict_proba(df)[:, 1]
    for frame in (pl.from_pandas(df), df.assign(c=df.c.astype(float))):
        _same(cf.predict(frame), expected)
    words = pd.DataFrame({"a": df.a, "c": pd.Categorical(rng.choice(["x", "y", "z"], n))})
    cf_words = sf.compile(lgb.LGBMClassifier(n_estimators=5, verbose=-1).fit(words, (words.c == "y").astype(int)))
    with pytest.raises(InputError, match="column 'c' holds plain .* categorical with the labels 'x', 'y', 'z'"):
        cf_words.predict(words.assign(c=words.c.cat.codes))
    # codes (0..3) where the labels are 10, 20, 30, 50: none is a label, refused, never all missing
    with pytest.raises(InputError, match="none of which is one of the labels"):
        cf.predict(df.assign(c=df.c.cat.codes.replace(-1, np.nan).astype(float)))


def test_what_is_not_rows_is_named():
    xgb = pytest.importorskip("xgboost")
    X = np.random.default_rng(0).normal(size=(200, 3)).astype(np.float32)
    booster = xgb.train({"max_depth": 2}, xgb.DMatrix(X, X[:, 0] > 0), 3)
    cf = sf.compile(booster)
    with pytest.raises(InputError, match="predict got None: pass the rows"):
        cf.predict(None)
    with pytest.raises(InputError, match="xgboost.core.DMatrix, the training library's own data container"):
        cf.predict(xgb.DMatrix(X))
    with pytest.raises(InputError, match="predict got a builtins.str"):
        cf.predict("X.csv")
    with pytest.raises(TypeError, match="compile it first"):
        sf.load_model(booster).predict(X)


def test_lightgbm_names_with_spaces_read_the_training_frame():
    """LightGBM keeps "my feature" as "my_feature" and scores the frame it was trained on (and its
    records): so do the compiled model and silvanforge.sklearn; other names are still refused."""
    import silvanforge.sklearn as sfk

    rng = np.random.default_rng(4)
    df = pd.DataFrame(rng.normal(size=(300, 3)), columns=["my feature", "income (k$)", "age"])
    model = lgb.LGBMRegressor(n_estimators=5, verbose=-1).fit(df, df["my feature"] + df["age"] ** 2)
    want = model.predict(df)
    cf = sf.compile(model)
    np.testing.assert_allclose(cf.predict(df), want, rtol=1e-12)
    np.testing.assert_allclose(cf.predict(df[["age", "income (k$)", "my feature"]]), want, rtol=1e-12)
    np.testing.assert_allclose(sfk.compile(model).predict(df), want, rtol=1e-12)
    np.testing.assert_allclose(cf.predict(df.to_dict("records")[:3]), want[:3], rtol=1e-12)
    np.testing.assert_allclose(cf.predict(df.rename(columns=lambda c: c.replace(" ", "_"))), want, rtol=1e-12)
    with pytest.raises(InputError, match="not features of the model: 'my-feature'"):
        cf.predict(df.rename(columns={"my feature": "my-feature"}))


def test_text_for_number_categories_is_refused_and_records_of_unseen_numbers_are_missing():
    """Integer categories (3, 7, 11, 20) as text ("7") in a frame's plain column: refused as
    LightGBM refuses it (every value would silently be missing), from pandas, arrow and polars,
    one row and many; a record's number is a label, an unseen one missing however few records."""
    pa = pytest.importorskip("pyarrow")
    pl = pytest.importorskip("polars")
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"a": rng.normal(size=800), "icat": pd.Categorical(rng.choice([3, 7, 11, 20], 800))})
    y = df.a + df.icat.astype(int).map({3: 1.0, 7: 3.0, 11: -2.0, 20: 5.0}).astype(float)
    model = lgb.LGBMRegressor(n_estimators=10, verbose=-1).fit(df, y)
    cf = sf.compile(model)
    text = df.assign(icat=df.icat.astype(int).astype(str))
    for frame in (text, text.astype({"icat": "string"}), pa.Table.from_pandas(text, preserve_index=False),
                  pl.from_pandas(text)):
        for rows in (frame, frame[:1]):
            with pytest.raises(InputError, match="'icat' holds text such as .*categories are numbers"):
                cf.predict(rows)
    unseen = pd.DataFrame({"a": [0.1, 0.1], "icat": pd.Categorical([7, 21], categories=[3, 7, 11, 20, 21])})
    want = model.predict(unseen)
    np.testing.assert_allclose(cf.predict([{"a": 0.1, "icat": 7}, {"a": 0.1, "icat": 21}]), want, rtol=1e-12)
    np.testing.assert_allclose(cf.predict({"a": 0.1, "icat": 21}), want[1:], rtol=1e-12)


def test_pandas_columns_of_arrow_data_and_string_views_are_read_as_arrow():
    """pandas columns of arrow dictionaries and strings (pd.read_parquet(dtype_backend='pyarrow'))
    and arrow string_view columns (polars' newest arrow) equal the categorical frame."""
    pa = pytest.importorskip("pyarrow")
    rng = np.random.default_rng(6)
    df = pd.DataFrame({"a": rng.normal(size=400), "color": pd.Categorical(rng.choice(["red", "green", "blue"], 400))})
    model = lgb.LGBMRegressor(n_estimators=5, verbose=-1).fit(df, df.a + (df.color == "red") * 2.0)
    cf = sf.compile(model)
    want = cf.predict(df)
    words = pa.array(df.color.astype(str))
    for column in (pd.array(words.dictionary_encode(), dtype=pd.ArrowDtype(pa.dictionary(pa.int32(), pa.string()))),
                   pd.array(words, dtype=pd.ArrowDtype(pa.string()))):
        np.testing.assert_array_equal(cf.predict(df.assign(color=column)), want)
        np.testing.assert_array_equal(cf.predict(df.assign(color=column)[:1]), want[:1])
    if hasattr(pa, "string_view"):
        table = pa.table({"a": df.a, "color": words.cast(pa.string_view())})
        np.testing.assert_array_equal(cf.predict(table), want)

"""A few rows of a polars frame of plain numbers reach the CPU target's small calls as polars hands
them out: row tuples of Python numbers, which its C call writes into its staging as NumPy
converts them (silvanforge.runtime.kernel.Kernel.small_calls).  Exactly the array of the same
values as float64; anything else under the same names (booleans, strings, decimals, a column of
nulls or lists) read as before, with the same answers and errors."""

from __future__ import annotations

import decimal

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.errors import InputError
from support_common import record_small_calls

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")
xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")

NAMES = ["a", "b", "c", "d"]


def _compiled(rng, library: str):
    n = 600
    X = rng.normal(size=(n, 4)) * 100
    X[:, 1] = rng.integers(-(2 ** 62), 2 ** 62, n)  # (64-bit integers past 2**53: float32 rounds them twice)
    y = X[:, 0] / 100 + X[:, 1] / 2 ** 61 + np.sin(X[:, 2]) + X[:, 3] / 50 + rng.normal(size=n)
    frame = pd.DataFrame(X, columns=NAMES)
    model = (xgb.XGBRegressor(n_estimators=12, max_depth=5).fit(frame, y) if library == "xgboost" else
             lgb.LGBMRegressor(n_estimators=12, num_leaves=15, verbose=-1).fit(frame, y))
    cf = sf.compile(model, threads=1)
    if not cf._tuples:
        pytest.skip("the CPU target was installed without its C call: no small call reads row tuples")
    cf.model = model
    return cf


def _values(rng, k: int) -> list[list]:
    """k rows of Python values of each number kind: floats with None, NaN, infinities and -0.0,
    64-bit integers past 2**53, and floats of float32."""
    rows = []
    for _ in range(k):
        a = rng.choice([None, float("nan"), float("inf"), -float("inf"), -0.0, float(rng.normal() * 100)])
        rows.append([None if a is None else float(a), int(rng.integers(-(2 ** 62), 2 ** 62)),
                     float(np.float32(rng.normal() * 100)), float(rng.normal() * 100)])
    return rows


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])  # float32 rows and float64 rows
def test_polars_row_tuples_equal_the_array(rng, library):
    cf = _compiled(rng, library)
    taken = []
    record_small_calls(cf, lambda rows, result: taken.append(type(rows)))
    for k in (1, 2, 3, 4):
        raw = _values(rng, k)
        X = np.array([[np.nan if v is None else float(v) for v in row] for row in raw])
        frame = pl.DataFrame({"a": pl.Series([r[0] for r in raw], dtype=pl.Float64),
                              "b": pl.Series([r[1] for r in raw], dtype=pl.Int64),
                              "c": pl.Series([r[2] for r in raw], dtype=pl.Float32),
                              "d": pl.Series([r[3] for r in raw], dtype=pl.Float64)})
        expected = cf.predict(X)
        for made in (frame, frame.select(["d", "b", "a", "c"]), frame.select(["b", "c", "d", "a"]),
                     frame.with_columns(pl.col("b").cast(pl.UInt64, strict=False)).fill_null(3)
                     if (X[:, 1] >= 0).all() else frame):
            del taken[:]
            np.testing.assert_array_equal(cf.predict(made), expected)
            assert taken == [list]
        # a value given as missing: read as an array (the value replaced), the same answer
        value = float(raw[0][3])
        want = cf.predict(np.where(X == value, np.nan, X))
        np.testing.assert_array_equal(cf.predict(frame, missing=value), want)


def test_other_values_under_the_same_names_are_read_as_before(rng):
    """After a frame of numbers, frames of the same names holding booleans, strings, decimals, a
    column of nulls or of lists: the same answers and errors as the general readers give."""
    cf = _compiled(rng, "xgboost")
    general = sf.compile(cf.model, threads=1)
    general._tuples = False  # (the general readers: what a frame's rows came to before)
    base = {"a": [0.5, None], "b": [3, 4], "c": [1.5, 2.5], "d": [-1.0, 2.0]}
    others = [{"b": [True, False]}, {"b": ["x", "y"]}, {"a": [decimal.Decimal("0.5"), None]},
              {"a": pl.Series([None, None], dtype=pl.Null)}, {"d": [[1.0], [2.0]]}, {"b": [2 ** 63 - 1, 0]}]
    for change in others:
        for k in (1, 2):
            for columns in (base, {**base, **change}, base):
                frame = pl.DataFrame(columns)[:k]
                for model in (cf, general):
                    try:
                        got = model.predict(frame)
                    except InputError as exc:
                        got = str(exc)
                    if model is cf:
                        first = got
                if isinstance(got, str):
                    assert first == got
                else:
                    np.testing.assert_array_equal(first, got)
                    assert len(got) == k


def test_small_calls_read_row_tuples_as_numpy_converts_them(rng):
    """A small call given a list of row tuples: the rows NumPy makes of them as float64, in the
    kernel's dtype; None (not read) for a value of another type (a bool, a string, a NumPy
    scalar, an integer beyond float64), a row of another length or kind."""
    for library in ("xgboost", "lightgbm"):
        cf = _compiled(rng, library)
        small, _ = cf._small_for[3]
        assert small.reads_tuples
        rows = [(0.5, 2 ** 60 + 1, None, -0.0), (float("nan"), -(2 ** 62) + 3, float("inf"), 1e-300),
                (1e30, 0, -1.5, 7)]
        want = np.array(rows, dtype=np.float64).astype(cf.kernel.input_dtype)
        for apply in (False, True):
            got, expected = small(rows, apply), small(want, apply)
            np.testing.assert_array_equal(got[0], expected[0])
            assert got[1] == expected[1]
        for bad in ([(True, 1.0, 2.0, 3.0)] * 3, [("x", 1.0, 2.0, 3.0)] * 3, [(np.float64(1), 1.0, 2.0, 3.0)] * 3,
                    [(10 ** 400, 1.0, 2.0, 3.0)] * 3, [(1.0, 2.0, 3.0)] * 3, [[1.0, 2.0, 3.0, 4.0]] * 3):
            assert small(bad, False) is None


def test_without_the_c_call_frames_are_read_as_arrays(rng, monkeypatch):
    small = pytest.importorskip("silvanforge_target_cpu.small")
    monkeypatch.setattr(small, "foreign_call", lambda: None)
    n = 300
    X = rng.normal(size=(n, 4))
    model = xgb.XGBRegressor(n_estimators=6, max_depth=4).fit(pd.DataFrame(X, columns=NAMES), X[:, 0])
    cf = sf.compile(model, threads=1)
    assert not cf._tuples
    frame = pl.DataFrame(X[:2], schema=NAMES, orient="row")
    np.testing.assert_array_equal(cf.predict(frame), cf.predict(X[:2]))


def test_polars_integers_where_the_labels_are_integers_equal_the_pandas_categories(rng):
    """pandas integer categories become plain integers in polars: a few rows read as Python
    values through the labels' codes, more rows by a sorted search of the labels; both equal the
    pandas frame's answers, nulls and NaN missing, an unseen number missing, a column of no
    label at all refused as the column reader refuses it."""
    n = 400
    levels = [3, 7, 11, 20, 40]
    frame = pd.DataFrame({"k": pd.Categorical(rng.choice(levels, n), categories=levels),
                          "x": rng.normal(size=n)})
    y = frame["k"].cat.codes.to_numpy() % 3 + frame["x"].to_numpy()
    cf = sf.compile(lgb.LGBMRegressor(n_estimators=10, num_leaves=7, min_child_samples=5, verbose=-1).fit(frame, y),
                    threads=1)
    for k in (1, 3, 4, 40, 64):
        values = rng.choice(levels + [5, None], k).tolist()  # (5: a number that is no label)
        values[0] = levels[k % len(levels)]
        made = pd.DataFrame({"k": pd.Categorical(values, categories=levels), "x": rng.normal(size=k)})
        made.loc[k // 2, "x"] = np.nan
        expected = cf.predict(made)
        for polars_frame in (pl.from_pandas(made),
                             pl.from_pandas(made).with_columns(pl.col("k").cast(pl.Float64))):
            assert polars_frame.schema["k"].is_numeric()
            np.testing.assert_array_equal(cf.predict(polars_frame), expected)
            np.testing.assert_array_equal(cf.predict(polars_frame.select(["x", "k"])), expected)
    for k in (1, 64):
        codes = pl.DataFrame({"k": list(range(100, 100 + k)), "x": [0.0] * k})  # (codes, not labels)
        with pytest.raises(InputError, match="none of which is one of the labels"):
            cf.predict(codes)


@pytest.mark.parametrize("labels", [[3, 7, 11], [0.5, -0.0, 2.0, 0.5], [1, 2 ** 53, -(2 ** 53)], [float("nan"), 4.0],
                                    [], [2 ** 60 + 1, 5]])
def test_number_labels_looked_up_at_once_equal_the_lookup_of_each(rng, labels):
    """Labels._number_codes (sorted search) against the label dict a value at a time: numbers of
    every kind, NaN, -0.0, repeated labels (the first code), integers past 2**53 (left to the
    dict)."""
    from silvanforge.inputs.columns import Labels

    pool = [v for v in labels if v == v] + [0.0, -0.0, 1.5, 3.0, float("nan"), 2 ** 53 + 2]
    for dtype in (np.float64, np.float32, np.int64, object):
        values = np.array(rng.choice(np.array(pool, dtype=object), 50).tolist(), dtype=object)
        if dtype is not object:
            if np.dtype(dtype).kind == "i":
                values = np.array([v for v in values if v == v and float(v) == int(v)] or [0], dtype=object)
            values = values.astype(dtype)
        fast = Labels(labels, False).lookup(values)
        slow = Labels(labels, False).lookup(values.astype(object))
        np.testing.assert_array_equal(fast, slow)


def test_integer_columns_with_nulls_are_looked_up_as_integers(rng):
    """A polars or arrow integer column with a null, where the labels are integers past 2**53:
    each value looked up as the integer it is (NumPy's copy of it would make floats of them, and
    2**60 + 1 would round onto the label 2**60)."""
    import pyarrow as pa

    from silvanforge.inputs.columns import Labels, arrow_column, polars_column

    labels = Labels([1, 2 ** 60], False)
    for values in ([2 ** 60 + 1, None, 1], [2 ** 60, None, 2 ** 60 + 1], [2 ** 60 + 1, 5, 1]):
        want = [np.nan if v is None or v not in (1, 2 ** 60) else float([1, 2 ** 60].index(v)) for v in values]
        np.testing.assert_array_equal(polars_column(pl.Series("k", values), "k", labels), want)
        np.testing.assert_array_equal(arrow_column(pa.array(values, pa.int64()), "k", labels), want)


def test_dates_under_the_names_of_numbers_are_refused_as_a_fresh_model_refuses_them(rng):
    import datetime

    cf = _compiled(rng, "xgboost")
    fresh = sf.compile(cf.model, threads=1)
    numbers = {"a": [0.5] * 6, "b": [3] * 6, "c": [1.5] * 6, "d": [2.0] * 6}
    dates = {**numbers, "a": [datetime.date(2026, 1, k + 1) for k in range(6)]}
    for k in (1, 5, 6):
        cf.predict(pl.DataFrame(numbers)[:k])
        for model in (cf, fresh):
            with pytest.raises(InputError, match="'a'"):
                model.predict(pl.DataFrame(dates)[:k])


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_polars_rows_with_labels_reach_the_small_calls_as_codes(rng, library):
    """A few rows whose categorical columns are Enums, Categoricals or strings (and integer
    labels as plain integers): each label its code in the tuples the small call reads, None
    missing; equal to the array.  A label the model never saw: missing for LightGBM, refused by
    XGBoost; integers that are codes, not labels: refused as the column reader refuses them."""
    n = 600
    colours, sizes = ["red", "green", "blue", "amber"], [10, 20, 30]
    made = pd.DataFrame({"x": rng.normal(size=n), "colour": pd.Categorical(rng.choice(colours, n), categories=colours),
                         "size": pd.Categorical(rng.choice(sizes, n), categories=sizes)})
    y = made.x + made.colour.isin(["red", "blue"]) * 2 + (made["size"] == 20) + rng.normal(0, .2, n)
    model = (xgb.XGBRegressor(n_estimators=10, max_depth=4, enable_categorical=True, tree_method="hist")
             if library == "xgboost" else lgb.LGBMRegressor(n_estimators=10, num_leaves=15, verbose=-1)).fit(made, y)
    cf = sf.compile(model, threads=1)
    if not cf._tuples:
        pytest.skip("the CPU target was installed without its C call: no small call reads row tuples")
    taken = []
    record_small_calls(cf, lambda rows, result: taken.append(type(rows)))
    cats = cf.forest.feature_categories
    for k in (1, 3):
        x = [None if i == 1 else float(v) for i, v in enumerate(rng.normal(size=k))]
        colour = [None if i == 2 else str(rng.choice(colours)) for i in range(k)]
        size = [int(rng.choice(sizes)) for _ in range(k)]
        X = np.array([[np.nan if a is None else a, np.nan if c is None else cats[1].index(c), cats[2].index(s)]
                      for a, c, s in zip(x, colour, size)])
        expected = cf.predict(X)
        for colour_type in (pl.Enum(colours[::-1]), pl.Categorical, pl.String):
            frame = pl.DataFrame({"size": pl.Series(size, dtype=pl.Int64), "x": pl.Series(x, dtype=pl.Float64),
                                  "colour": pl.Series(colour, dtype=colour_type)})
            del taken[:]
            np.testing.assert_array_equal(cf.predict(frame), expected)
            assert taken == [list], colour_type
    teal = pl.DataFrame({"x": [0.5], "colour": pl.Series(["teal"], dtype=pl.Categorical), "size": [10]})
    if library == "lightgbm":
        np.testing.assert_array_equal(cf.predict(teal), cf.predict(np.array([[0.5, np.nan, cats[2].index(10)]])))
    else:
        with pytest.raises(InputError, match="column 'colour' has a category the model was not trained"):
            cf.predict(teal)
    with pytest.raises(InputError, match="none of which is one of the labels"):
        cf.predict(pl.DataFrame({"x": [0.5], "colour": ["red"], "size": [1]}))

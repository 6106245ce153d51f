"""polars frames of numbers (silvanforge.inputs.polars_frames) give exactly what the same rows as
an array give: a few rows read as Python values (integers past 2**53, booleans, nulls, any
column order), more copied at once by polars and taken into the model's order, and another
dtype under the same names (dates, integers, booleans) read as itself."""

from __future__ import annotations

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.errors import InputError

pd = pytest.importorskip("pandas")
xgb = pytest.importorskip("xgboost")


def test_a_few_polars_rows_of_integers_booleans_and_nulls_equal_the_array(rng):
    """A few polars rows, read as Python values, of integer columns (64-bit ones past 2**53:
    float32 rows round them twice, as the array of float64 does), booleans, nulls, in any column
    order: the array of the same values; a column of lists refused as more rows refuse it."""
    pl = pytest.importorskip("polars")
    n = 40
    X = np.column_stack([rng.integers(-(2 ** 60), 2 ** 60, n).astype(np.float64), rng.integers(0, 255, n),
                         rng.random(n) < 0.5, rng.normal(size=n)])
    names = ["big", "small", "flag", "score"]
    y = X[:, 0] / 2 ** 59 + X[:, 1] / 100 + X[:, 2] + X[:, 3] + rng.normal(size=n)
    cf = sf.compile(xgb.XGBRegressor(n_estimators=8, max_depth=4).fit(pd.DataFrame(X, columns=names), y))
    big = rng.integers(-(2 ** 62), 2 ** 62, n)
    X[:, 0] = [float(v) for v in big.tolist()]
    X[::3, 3] = np.nan
    frame = pl.DataFrame([pl.Series("big", big, dtype=pl.Int64), pl.Series("small", X[:, 1].astype(np.uint8)),
                          pl.Series("flag", X[:, 2].astype(bool)), pl.Series("score", X[:, 3], nan_to_null=True)])
    for k in (1, 2, 4, 5, n):
        for order in (names, names[::-1]):
            np.testing.assert_array_equal(cf.predict(frame[:k].select(order)), cf.predict(X[:k]))
    lists = frame.with_columns(pl.Series("score", [[v, v] for v in X[:, 3]]))
    for k in (1, n):
        with pytest.raises(InputError, match="column 'score'"):
            cf.predict(lists[:k])


def test_polars_numbers_copied_at_once_and_other_dtypes_under_their_names(rng):
    """A polars frame of plain numbers in the model's order and dtype, of more rows than are read
    as Python values, is polars' own copy; dates, integers or booleans under the same names after
    it are read as themselves (dates refused, as before), and the numbers again after them."""
    import datetime

    pl = pytest.importorskip("polars")
    X = rng.normal(size=(400, 3)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    names = ["a", "b", "c"]
    cf = sf.compile(xgb.XGBRegressor(n_estimators=6, max_depth=3).fit(pd.DataFrame(X, columns=names), np.nan_to_num(X[:, 1])))
    for k in (5, 64, 127):
        frame = pl.DataFrame(X[:k], schema=names)
        for _ in range(2):
            np.testing.assert_array_equal(cf.predict(frame), cf.predict(X[:k]))
        with pytest.raises(InputError, match="'b' holds dates, times or durations"):
            cf.predict(frame.with_columns(pl.Series("b", [datetime.date(2020, 1, 1)] * k)))
        whole = np.round(np.nan_to_num(X[:k, 1]))
        as_integers = frame.with_columns(pl.Series("b", whole.astype(np.int64)))
        np.testing.assert_array_equal(cf.predict(as_integers), cf.predict(np.column_stack([X[:k, :1], whole, X[:k, 2:]])))
        as_booleans = frame.with_columns(pl.Series("b", whole > 0))
        np.testing.assert_array_equal(cf.predict(as_booleans),
                                      cf.predict(np.column_stack([X[:k, :1], whole > 0, X[:k, 2:]])))
        np.testing.assert_array_equal(cf.predict(frame), cf.predict(X[:k]))

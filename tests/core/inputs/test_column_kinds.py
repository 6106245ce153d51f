"""What a column's kind tells when the model's feature is of another: a categorical column on a
feature the model reads as a number is read by its categories' values (as scikit-learn reads
it), not by its codes; one of words is refused naming the column."""

from __future__ import annotations

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.errors import InputError


def test_a_categorical_column_on_a_numeric_feature_is_read_by_its_values():
    """A number feature sent as a pandas category or an arrow dictionary column (a parquet
    column's encoding): its categories' values, as scikit-learn reads them (its codes would be
    other numbers), at one row and many, NaN kept; categories that are not numbers are refused
    naming the column; a feature the model splits by categories still reads codes."""
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    pl = pytest.importorskip("polars")
    xgb = pytest.importorskip("xgboost")
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(5)
    values = rng.integers(0, 10, 300).astype(float) * 1.5 + 5
    frame = pd.DataFrame({"a": rng.normal(size=300), "cnt": values})
    y = frame.a + frame.cnt ** 2 * 0.1
    cf = sf.compile(RandomForestRegressor(n_estimators=5, max_depth=5, random_state=0).fit(frame, y))
    with_nan = frame.assign(cnt=np.where(np.arange(300) % 7 == 0, np.nan, frame.cnt))
    want = cf.predict(with_nan.to_numpy())
    as_category = with_nan.assign(cnt=pd.Categorical(with_nan.cnt))
    table = pa.table({"a": with_nan.a, "cnt": pa.array(with_nan.cnt, from_pandas=True).dictionary_encode()})
    for X in (as_category, table):
        np.testing.assert_array_equal(cf.predict(X), want)
        one = X.iloc[3:4] if hasattr(X, "iloc") else X.slice(3, 1)
        np.testing.assert_array_equal(cf.predict(one), want[3:4])
    for words in (frame.assign(cnt=pd.Categorical(np.where(values > 10, "big", "small"))),
                  pl.DataFrame({"a": frame.a, "cnt": pl.Series(np.where(values > 10, "big", "small")).cast(pl.Categorical)})):
        with pytest.raises(InputError, match="'cnt' is categorical with labels such as .*is a number"):
            cf.predict(words)
    # XGBoost on codes: its categorical feature keeps reading a category column's codes
    codes = pd.DataFrame({"a": frame.a, "c": pd.Categorical(rng.choice(["x", "y", "z"], 300))})
    model = xgb.XGBRegressor(n_estimators=5, max_depth=3, enable_categorical=True, tree_method="hist").fit(codes, y)
    np.testing.assert_allclose(sf.compile(model).predict(codes), model.predict(codes), rtol=1e-6)

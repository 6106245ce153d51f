"""Inputs at their edges, against the training library's own predictions: column labels that are
not strings, a number among a categorical feature's labels in records, pandas' NA in records,
half floats and complex numbers, Arrow streams, and what is not an input at all."""

from __future__ import annotations

import numpy as np
import pytest
import silvanforge as sf
from silvanforge.errors import InputError

pd = pytest.importorskip("pandas")
xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")

NAMES = ["age", "income", "score"]
COLOURS = ["red", "green", "blue", "amber"]


@pytest.fixture(scope="module")
def named():
    """An XGBoost regressor fitted on a frame of named columns, and its compiled model."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(400, 3)), columns=NAMES)
    model = xgb.XGBRegressor(n_estimators=10, max_depth=3, nthread=1).fit(frame, frame.age * 2 + frame.income - frame.score ** 2)
    return model, sf.compile(model, threads=1), frame


@pytest.fixture(scope="module")
def categorical():
    """A LightGBM regressor with a categorical feature of string labels, and its compiled model."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"age": rng.normal(40, 10, 600), "colour": pd.Categorical(rng.choice(COLOURS, 600),
                                                                                    categories=COLOURS),
                          "n": rng.integers(0, 5, 600).astype(float)})
    y = frame.age / 10 + (frame.colour == "blue") * 3 + frame.n + rng.normal(size=600)
    model = lgb.LGBMRegressor(n_estimators=20, verbose=-1, min_data_per_group=5, cat_smooth=1).fit(frame, y)
    return model, sf.compile(model, threads=1), frame


def test_labels_not_strings_are_matched_by_their_text_never_by_position(named):
    """A mix of labels, a MultiIndex's tuples, or integer labels in another order than a frame
    made from an array are matched by their text or refused (XGBoost: "feature_names mismatch");
    read by position they gave another feature's values."""
    _, cf, frame = named
    shuffled = frame[["score", "income", "age"]]
    with pytest.raises(InputError, match=r"missing 'income'; not features of the model: '1'"):
        cf.predict(shuffled.set_axis(["score", 1, "age"], axis=1))
    with pytest.raises(InputError, match=r"not features of the model: \"\('grp', 'score'\)\""):
        cf.predict(pd.concat({"grp": shuffled}, axis=1))
    with pytest.raises(InputError, match="not features of the model: '2', '0', '1'"):
        cf.predict(pd.DataFrame(frame.to_numpy())[[2, 0, 1]])
    # a frame made from an array (labels 0, 1, 2 in order) is read by position, as an array is
    np.testing.assert_array_equal(cf.predict(pd.DataFrame(frame.to_numpy())), cf.predict(frame))


def test_integer_labels_of_a_model_fitted_on_them_are_matched_in_any_order():
    """XGBoost and LightGBM name the features of a frame of integer labels "0", "1", ...: the
    frame's integer labels are matched to them in any order."""
    rng = np.random.default_rng(2)
    frame = pd.DataFrame(rng.normal(size=(500, 3)))
    y = frame[0] * 3 + frame[1] - frame[2] ** 2
    for model in (xgb.XGBRegressor(n_estimators=10, nthread=1).fit(frame, y),
                  lgb.LGBMRegressor(n_estimators=10, verbose=-1).fit(frame, y)):
        cf = sf.compile(model, threads=1)
        want = model.predict(frame)
        np.testing.assert_array_equal(cf.predict(frame[[2, 0, 1]]), want)
        np.testing.assert_array_equal(cf.predict(frame), want)


@pytest.mark.parametrize("records", [
    [{"age": 31.0, "colour": 2, "n": 1.0}],  # alone
    [{"age": 30.0, "colour": "red", "n": 1.0}, {"age": 31.0, "colour": 2, "n": 1.0}],  # beside a label
    [{"age": 31.0, "colour": 2.0, "n": 1.0}, {"age": 30.0, "colour": "red", "n": 1.0}],
])
def test_a_number_among_labels_in_records_is_refused_whatever_the_other_records_hold(categorical, records):
    """A number for a feature of string labels is no label and no code (LightGBM refuses a mixed
    object column): refused, where beside another record's label it was read as missing."""
    _, cf, _ = categorical
    with pytest.raises(InputError, match=r"'colour' is the number 2(\.0)?, and the feature's categories are labels"):
        cf.predict(records)


def test_pandas_missing_values_in_records_are_missing(categorical):
    """Records of a frame of nullable columns hold pandas' NA: a missing number or label, as None."""
    model, cf, _ = categorical
    records = [{"age": pd.NA, "colour": "red", "n": 3.0}, {"age": 30.0, "colour": pd.NA, "n": pd.NA},
               {"age": 31.0, "colour": "blue", "n": 1.0}]
    want = model.predict(pd.DataFrame({"age": [np.nan, 30, 31], "n": [3, np.nan, 1],
                                       "colour": pd.Categorical(["red", None, "blue"], categories=COLOURS)})
                         [["age", "colour", "n"]])
    np.testing.assert_array_equal(cf.predict(records), want)
    np.testing.assert_array_equal(cf.predict(records[1]), want[1:2])


def test_half_floats_in_arrow_are_read_and_complex_numbers_refused(named):
    pa = pytest.importorskip("pyarrow")
    model, cf, frame = named
    for n in (1, 300):
        half = frame.iloc[:n].assign(age=frame.age.iloc[:n].astype(np.float16))
        want = model.get_booster().inplace_predict(half.astype(np.float32))
        table = pa.Table.from_pandas(half, preserve_index=False)
        np.testing.assert_array_equal(cf.predict(table), want)
        np.testing.assert_array_equal(cf.predict(table.to_batches()[0]), want)
    for rows in (frame, frame.iloc[:1]):
        with pytest.raises(InputError, match="column 'age' holds complex numbers"):
            cf.predict(rows.assign(age=rows.age.astype(complex)))


def test_an_arrow_stream_is_read_as_its_table_and_a_tuple_of_records_is_named(named):
    pa = pytest.importorskip("pyarrow")
    _, cf, frame = named
    table = pa.Table.from_pandas(frame, preserve_index=False)
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=64))
    np.testing.assert_array_equal(cf.predict(reader), cf.predict(frame))
    with pytest.raises(InputError, match="a tuple of dicts: records are a dict or a list of dicts"):
        cf.predict(tuple(frame.iloc[:3].to_dict("records")))


def test_keys_and_labels_that_only_equal_positions_are_not_read_by_position(named):
    """A record's keys always name their features: integer keys are matched by their text (and
    refused where the model's names are others), in any order; a frame's labels are read by
    position only where they are the integers 0, 1, 2, ... (booleans and floats that equal them are
    not pandas' labels of a frame made from an array)."""
    _, cf, frame = named
    for record in ({0: 1.0, 1: 0.0, 2: 0.0}, {2: 0.0, 1: 0.0, 0: 1.0}):
        with pytest.raises(InputError, match="not features of the model"):
            cf.predict([record])
    for labels in ([False, True, 2], [0.0, 1.0, 2.0]):
        with pytest.raises(InputError, match="not features of the model"):
            cf.predict(frame.set_axis(labels, axis=1))


def test_a_column_that_hands_over_an_arrow_stream_is_no_rows(named):
    """A pyarrow array or a polars Series holds one column: refused as any column is, not read as
    a table of its stream."""
    pa = pytest.importorskip("pyarrow")
    _, cf, frame = named
    for column in (pa.chunked_array([frame.age.to_numpy()]), pa.array(frame.age.to_numpy())):
        with pytest.raises(InputError, match="2-D"):
            cf.predict(column)


def test_values_that_are_no_labels_or_numbers_are_named(categorical, named):
    """An object column's list where a label belongs is refused by name (one row read the list as
    its item, two raised a bare TypeError); a bad cell among numbers is shown; bytes in arrow are
    no numbers (arrow's cast parsed b"60" as 60)."""
    pa = pytest.importorskip("pyarrow")
    model, cf, frame = categorical
    rows = frame.iloc[:2].reset_index(drop=True)
    for cells in ([["red"], "red"], [{"a": 1}, "red"]):
        given = rows.assign(colour=pd.Series(cells, dtype=object))
        for n in (1, 2):
            with pytest.raises(InputError, match=r"column 'colour' holds (\['red'\]|\{'a': 1\}), which is no category label"):
                cf.predict(given.iloc[:n])
    odd = rows.assign(colour=pd.Series(["red", np.nan], dtype=object))
    np.testing.assert_array_equal(cf.predict(odd), cf.predict(rows.assign(colour=pd.Categorical(["red", None], categories=COLOURS))))
    _, numeric, data = named
    for cell, shown in (("41.2", r"'41\.2' \(str\)"), (True, r"True \(bool\)")):
        given = data.iloc[:2].astype({"age": object})
        given.loc[1, "age"] = cell
        with pytest.raises(InputError, match=f"column 'age' holds object values such as {shown}"):
            numeric.predict(given)
    table = pa.table({"age": pa.array([b"60", b"20"]), "income": [1.0, 2.0], "score": [0.0, 1.0]})
    with pytest.raises(InputError, match=r"column 'age' holds bytes \(binary\)"):
        numeric.predict(table)


def test_a_refused_category_is_named_with_its_value_in_every_input():
    """XGBoost refuses a category it was not trained with; the error names the value (and the
    record or line where the rows are records), whatever holds the rows."""
    pa = pytest.importorskip("pyarrow")
    pl = pytest.importorskip("polars")
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"age": rng.normal(size=300), "colour": pd.Categorical(rng.choice(COLOURS, 300),
                                                                                 categories=COLOURS)})
    model = xgb.XGBRegressor(n_estimators=5, max_depth=3, enable_categorical=True, tree_method="hist")
    cf = sf.compile(model.fit(frame, frame.age + (frame.colour == "red")), threads=1)
    good, bad = {"age": 0.5, "colour": "red"}, {"age": 0.5, "colour": "Teal"}
    named_value = r"column 'colour' has a category the model was not trained with: 'Teal' \(it knows 'red'"
    tables = [pd.DataFrame([good, bad]), pd.DataFrame([good, bad]).astype({"colour": "category"}),
              pl.DataFrame([good, bad]), pl.DataFrame([good, bad]).with_columns(pl.col("colour").cast(pl.Categorical)),
              pa.Table.from_pylist([good, bad]), pa.Table.from_pylist([good, bad] * 40)]
    # (categories the rows do not use, refused too, come first: the row's is named)
    unused = pd.DataFrame([good, bad]).astype({"colour": pd.CategoricalDtype(["Aqua", "red", "Teal"])})
    tables += [unused, unused.iloc[1:]]
    for n in (2, 80):
        indices = pa.array([1, 2] * (n // 2), pa.int8())
        table = pa.table({"age": [0.5] * n, "colour": pa.DictionaryArray.from_arrays(indices, pa.array(["Aqua", "red", "Teal"]))})
        tables += [table, table.slice(1, 1)]
    for rows in tables:
        with pytest.raises(InputError, match=named_value):
            cf.predict(rows)
    with pytest.raises(InputError, match=r"record 1: 'colour' is \"Teal\", a category the model was not trained with"):
        cf.predict([good, bad])


def test_a_column_of_nulls_alone_is_missing(categorical):
    """A frame made of records whose categorical (or number) value is None holds a column of
    arrow's and polars' null type: missing in every row, as the records are (it was refused as
    numbers where categories belong)."""
    pa = pytest.importorskip("pyarrow")
    pl = pytest.importorskip("polars")
    model, cf, frame = categorical
    records = frame.iloc[:3].astype(object).to_dict("records")
    for name in ("colour", "age"):
        given = [{**r, name: None} for r in records]
        want = cf.predict(given)
        np.testing.assert_allclose(want, model.predict(frame.iloc[:3].assign(**{name: np.nan}).astype(
            {"colour": frame.colour.dtype})), rtol=1e-12)
        for rows in (pa.Table.from_pylist(given), pl.DataFrame(given)):
            np.testing.assert_array_equal(cf.predict(rows), want)
            np.testing.assert_array_equal(cf.predict(rows.slice(1, 1)), want[1:2])

"""A CatBoost model with categorical features (one-hot and CTR columns) through the calls
around predict: records (dicts by feature name) equal to CatBoost's own predict on the same rows
as a frame, bad values named by feature as a clear InputError (not a TypeError from the
hashing), and a plan tuned with and without sample rows."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

cb = pytest.importorskip("catboost")
pd = pytest.importorskip("pandas")

import silvanforge as sf  # noqa: E402
from silvanforge.errors import InputError  # noqa: E402


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(11)
    frame = pd.DataFrame({"age": rng.normal(size=300), "colour": rng.choice(["red", "blue", "green"], 300),
                          "size": rng.normal(size=300)})
    model = cb.CatBoostRegressor(iterations=8, depth=3, cat_features=["colour"], verbose=0, thread_count=1,
                                 random_seed=3, allow_writing_files=False)
    model.fit(frame, frame.age + (frame.colour == "red") * 2)
    return model, sf.compile(model), frame


def test_records_equal_catboost(fitted):
    model, cf, frame = fitted
    rows = frame.iloc[:20]
    records = rows.to_dict("records")
    want = model.predict(rows)
    np.testing.assert_allclose(cf.predict(records), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cf.predict(records[3]), want[3:4], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("record,message,by_record", [
    ({"age": "old", "colour": "red", "size": 1.0}, r"column 0 \('age'\) holds 'old', not a number",
     r"record 1: 'age' is \"old\", not a number"),
    ({"age": [1], "colour": "red", "size": 1.0}, r"column 0 \('age'\) holds \[1\], not a number",
     r"record 1: 'age' is \[1\], not a number"),
    ({"age": 1.0, "colour": [1], "size": 1.0}, r"column 1 \('colour'\) holds a value that is no category label",
     r"record 1: 'colour' is \[1\], not a label or a category code"),
    ({"age": 1.0, "colour": {"a": 1}, "size": 1.0}, r"column 1 \('colour'\) holds a value that is no category label",
     r"record 1: 'colour' is \{\"a\": 1\}, not a label or a category code"),
    ({"age": 1.0, "colour": 2.5, "size": 1.0}, r"column 1 \('colour'\) holds a value that is no category label "
     r"\(the number 2.5: categories are read from strings and integers\)", None),
])
def test_bad_values_are_named_by_feature(fitted, record, message, by_record):
    """Records name the record and feature of a bad value, arrays its column; a fractional number
    is no category (CatBoost refuses every float there; an integral one is read as its integer)."""
    _, cf, _ = fitted
    good = {"age": 1.0, "colour": "red", "size": 1.0}
    with pytest.raises(InputError, match=by_record or message):
        cf.predict([good, record])
    with pytest.raises(InputError, match=message):  # the same values as an object array
        cf.predict(np.array([[record["age"], record["colour"], record["size"]]], dtype=object))
    # what CatBoost reads as a number is one (SQL drivers' Decimal, a number's text or bytes)
    for number in ("1.5", b"1.5", Decimal("1.5")):
        np.testing.assert_array_equal(cf.predict([good, {**good, "age": number}])[1:], cf.predict({**good, "age": 1.5}))
    np.testing.assert_array_equal(cf.predict([good, {**good, "colour": pd.NaT}])[1:],
                                  cf.predict({**good, "colour": None}))


@pytest.mark.parametrize("grow", ["SymmetricTree", "Depthwise"])
@pytest.mark.parametrize("sample", [False, True])
def test_a_plan_is_tuned_for_computed_columns(sample, grow):
    """Tuning times the forms on the rows the kernels read (the computed columns included); a
    model computing columns from its input was timed on them as if they were the input."""
    rng = np.random.default_rng(12)
    frame = pd.DataFrame({"a": rng.normal(size=400), "colour": rng.choice(list("rbgxy"), 400),
                          "shape": rng.choice(list("stuv"), 400), "b": rng.normal(size=400)})
    model = cb.CatBoostRegressor(iterations=12, depth=4, cat_features=["colour", "shape"], one_hot_max_size=2,
                                 grow_policy=grow, verbose=0, thread_count=1, random_seed=3, allow_writing_files=False)
    model.fit(frame, frame.a + (frame.colour == "r") + (frame["shape"] == "s") * (frame.colour == "x"))
    assert sf.load_model(model).hashed_combinations  # (CTR and one-hot columns: what was refused)
    tuned = sf.tune(model, rows=frame if sample else None, budget_s=1.5, threads=1)
    assert tuned.tuning is not None
    np.testing.assert_allclose(tuned.predict(frame.iloc[:60]), model.predict(frame.iloc[:60]), rtol=1e-12, atol=1e-12)


def test_a_polars_lazy_frame_is_refused_naming_collect(fitted):
    pl = pytest.importorskip("polars")
    _, cf, frame = fitted
    with pytest.raises(InputError, match=r"polars LazyFrame.*frame.collect\(\)"):
        cf.predict(pl.from_pandas(frame.iloc[:3]).lazy())
    np.testing.assert_array_equal(cf.predict(pl.from_pandas(frame.iloc[:3])), cf.predict(frame.iloc[:3]))


def test_a_profile_reads_rows_as_predict_does(fitted, tmp_path):
    """Profiling takes the model's input (its computed columns made from it), as predict does:
    the counts equal those of the rows the kernels read."""
    from silvanforge.frontend import profiling
    from silvanforge.inputs.rows import as_rows

    model, cf, frame = fitted
    forest = cf.forest
    rows = frame.iloc[:100]
    got = profiling.profile(forest, rows)
    plain = profiling.tree_hits
    kernel_rows = as_rows(rows, forest, np.dtype(forest.threshold_dtype))
    for tree, hits in zip(forest.trees, got.hits):
        np.testing.assert_array_equal(hits, plain(tree, kernel_rows, forest.category_rule))
    assert int(got.hits[0][0]) == len(rows)  # (every row reaches a root)


@pytest.mark.parametrize("dtype", ["str", "large_string[pyarrow]", "string[pyarrow]"])
def test_labels_held_by_arrow_equal_catboost_call_after_call(fitted, dtype):
    """A column of labels held by arrow (pandas' str, Arrow-backed strings) is read, from the
    call after its values were first seen, by the C++ reader's index of the values seen: equal
    to CatBoost's predict call after call, a label never seen (nor trained on) read as before
    and then indexed too, and a missing label read as the object column reads it; a column
    whose every call brings a new value is never indexed."""
    pa = pytest.importorskip("pyarrow")
    from silvanforge.inputs.arrow_native import reader

    reader(wait=True)
    model, cf, frame = fitted
    rows = frame.iloc[:40].copy()
    rows["colour"] = rows["colour"].astype(dtype)
    feature = 1
    for call in range(3):
        np.testing.assert_allclose(cf.predict(rows), model.predict(rows), rtol=1e-12, atol=1e-12)
    column = cf._schemas.hashing()._columns[feature]
    assert column.strings is not None and column.strings[1] is not None and column.strings[0] is column.state
    unseen = rows.copy()
    unseen.loc[unseen.index[::7], "colour"] = "violet"  # (hashed by CatBoost: its CTRs answer it)
    unseen["colour"] = unseen["colour"].astype(dtype)
    for call in range(3):
        np.testing.assert_allclose(cf.predict(unseen), model.predict(unseen), rtol=1e-12, atol=1e-12)
    # (the index made again with "violet", at the second call that found the values unchanged)
    assert column.strings[0] is column.state and column.strings[1] is not None
    missing = unseen.copy()
    missing["colour"] = pd.array([None if i % 5 == 0 else v for i, v in enumerate(unseen["colour"])], dtype=dtype)
    as_objects = missing.astype({"colour": object})
    np.testing.assert_array_equal(cf.predict(missing), cf.predict(as_objects))
    new_each_call = rows.copy()
    for call in range(4):
        new_each_call.loc[new_each_call.index[call], "colour"] = f"shade {call} ({dtype})"  # (new in every call)
        new_each_call["colour"] = new_each_call["colour"].astype(dtype)
        np.testing.assert_allclose(cf.predict(new_each_call), model.predict(new_each_call), rtol=1e-12, atol=1e-12)
        assert column.strings[0] is not column.state or column.strings[1] is None  # (no index of these values)


def _as_arrow(frame, kind: str):
    """``frame`` as a pyarrow table or polars frame whose categorical column is held as ``kind``."""
    pa = pytest.importorskip("pyarrow")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    labels = table.column("colour")
    if kind == "arrow dictionary":
        return table.set_column(1, "colour", labels.dictionary_encode())
    if kind == "arrow string views":
        return table.set_column(1, "colour", labels.cast(pa.string_view()))
    if kind == "record batch":
        return table.combine_chunks().to_batches()[0]
    if kind == "arrow chunks":
        return pa.concat_tables([table.slice(0, 7), table.slice(7)])
    if kind == "arrow stream":
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=5))
    pl = pytest.importorskip("polars")
    frame = pl.from_arrow(table)
    if kind == "polars Categorical":
        return frame.with_columns(pl.col("colour").cast(pl.Categorical))
    if kind == "polars Enum":
        return frame.with_columns(pl.col("colour").cast(pl.Enum(["blue", "green", "red", "violet"])))
    return frame


@pytest.mark.parametrize("kind", ["arrow", "arrow dictionary", "arrow string views", "record batch", "arrow chunks",
                                  "arrow stream", "polars", "polars Categorical", "polars Enum"])
def test_arrow_and_polars_frames_equal_catboost_call_after_call(fitted, kind):
    """pyarrow tables and polars frames are read as their arrow columns (no pandas frame made of
    them): each call equal to CatBoost's predict on the same rows, the first calls and those after
    the column's values were indexed, a label the model never saw and a missing one."""
    model, cf, frame = fitted
    for start in (0, 20, 20, 40):  # (the same rows again: read by the index of the values seen)
        rows = frame.iloc[start:start + 20].reset_index(drop=True)
        if start == 40:
            rows.loc[3, "colour"] = "violet"  # never seen in training: CatBoost's prior
        np.testing.assert_allclose(cf.predict(_as_arrow(rows, kind)), model.predict(rows), rtol=1e-12, atol=1e-12)
    if kind in ("arrow", "arrow dictionary", "polars", "polars Categorical", "polars Enum"):
        rows = frame.iloc[:6].reset_index(drop=True)
        missing = rows.assign(colour=rows.colour.where(rows.index != 2, None))
        # (CatBoost refuses a missing category; ours is the value no category matches, as in a pandas frame)
        np.testing.assert_array_equal(cf.predict(_as_arrow(missing, kind)), cf.predict(missing))


def test_integer_categories_in_arrow_equal_catboost():
    """Categories given as integers (codes of real data) in a pyarrow table, with and without a
    null among them, equal CatBoost's predict on the pandas frame."""
    pa = pytest.importorskip("pyarrow")
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"x": rng.normal(size=300), "code": rng.integers(0, 6, 300)})
    model = cb.CatBoostRegressor(iterations=8, depth=3, cat_features=["code"], verbose=0, thread_count=1,
                                 random_seed=3, allow_writing_files=False)
    model.fit(frame, frame.x + (frame.code == 2) * 2)
    cf = sf.compile(model)
    rows = frame.iloc[:30]
    table = pa.Table.from_pandas(rows, preserve_index=False)
    np.testing.assert_allclose(cf.predict(table), model.predict(rows), rtol=1e-12, atol=1e-12)
    with_null = table.set_column(1, "code", pa.array([None] + rows.code.tolist()[1:], pa.int64()))
    np.testing.assert_array_equal(cf.predict(with_null)[1:], cf.predict(table)[1:])
    np.testing.assert_array_equal(cf.predict(with_null)[:1], cf.predict(rows.assign(code=[None] + rows.code.tolist()[1:]).astype({"code": object}))[:1])


def test_records_with_pandas_missing_values_equal_catboost(fitted):
    """Records made of a frame of nullable columns hold pandas' NA: a missing number, as None."""
    model, cf, frame = fitted
    rows = frame.iloc[:5].reset_index(drop=True)
    records = rows.to_dict("records")
    records[1]["age"] = pd.NA
    want = model.predict(rows.assign(age=rows.age.where(rows.index != 1, np.nan)))
    np.testing.assert_allclose(cf.predict(records), want, rtol=1e-12, atol=1e-12)


def test_none_in_an_object_array_or_records_is_a_missing_number(fitted):
    """None (and pandas' NA) where a number belongs, in an object array as in records: a missing
    value, as NaN there is; a list there is still refused."""
    model, cf, frame = fitted
    rows = frame.iloc[:4].reset_index(drop=True)
    values = rows.to_numpy(dtype=object)
    values[2, 0] = None
    want = model.predict(rows.assign(age=rows.age.where(rows.index != 2, np.nan)))
    np.testing.assert_allclose(cf.predict(values), want, rtol=1e-12, atol=1e-12)
    records = rows.to_dict("records")
    records[2]["age"] = None
    np.testing.assert_allclose(cf.predict(records), want, rtol=1e-12, atol=1e-12)
    values[1, 0] = [1]
    with pytest.raises(InputError, match=r"column 0 \('age'\) holds \[1\], not a number"):
        cf.predict(values)


def test_missing_values_of_every_kind_are_missing_in_few_rows_and_many():
    """A NaN of any kind (float, float32, NaT, Decimal's) in an object column is a missing value
    however many rows a call has (a few are coded by a dict, more by pandas' factorize)."""
    from silvanforge.inputs.distinct_values import FEW_VALUES, factorise

    for missing in (None, float("nan"), np.float32("nan"), pd.NaT, np.datetime64("NaT"), Decimal("NaN"), pd.NA):
        for n in (2, FEW_VALUES + 2):
            values = np.array([missing, "red"] * (n // 2), dtype=object)
            codes, uniques, _ = factorise(values)
            assert codes.tolist() == [-1, 0] * (n // 2) and list(uniques) == ["red"], (missing, n)


def test_an_arrow_dictionary_much_longer_than_its_column_equals_its_values(fitted):
    """A dictionary column whose dictionary holds many labels the rows do not (a polars
    Categorical's may hold every string its process saw) is read as its values."""
    pa = pytest.importorskip("pyarrow")
    model, cf, frame = fitted
    rows = frame.iloc[:10].reset_index(drop=True)
    table = pa.Table.from_pandas(rows, preserve_index=False)
    dictionary = pa.array(sorted(set(rows.colour)) + [f"other{i}" for i in range(3000)])
    indices = pa.array([dictionary.to_pylist().index(v) for v in rows.colour], pa.int32())
    long = table.set_column(1, "colour", pa.DictionaryArray.from_arrays(indices, dictionary))
    for _ in range(3):
        np.testing.assert_allclose(cf.predict(long), model.predict(rows), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("index_type", ["int8", "uint8", "uint16", "uint32", "int64", "uint64"])
def test_dictionary_indices_of_any_integer_type_with_nulls(fitted, index_type):
    """An arrow dictionary column's indices may be of any integer type, unsigned too (a null in
    such a column was an OverflowError): each row as its labels give it, a null missing."""
    pa = pytest.importorskip("pyarrow")
    model, cf, frame = fitted
    rows = frame.iloc[:6].reset_index(drop=True)
    labels = sorted(set(rows.colour))
    indices = pa.array([None if i == 2 else labels.index(v) for i, v in enumerate(rows.colour)], index_type)
    table = pa.Table.from_pandas(rows, preserve_index=False)
    table = table.set_column(1, "colour", pa.DictionaryArray.from_arrays(indices, pa.array(labels)))
    missing = rows.assign(colour=rows.colour.where(rows.index != 2, None))
    np.testing.assert_array_equal(cf.predict(table), cf.predict(missing))
    np.testing.assert_allclose(cf.predict(table)[[0, 1, 3, 4, 5]], model.predict(rows)[[0, 1, 3, 4, 5]],
                               rtol=1e-12, atol=1e-12)


def test_a_column_of_nulls_alone_is_missing_and_nested_values_are_refused(fitted):
    """A categorical column of arrow's or polars' null type (a request's record whose value was
    None) is missing in every row, as the record is; lists and structs there are refused by name."""
    pa = pytest.importorskip("pyarrow")
    pl = pytest.importorskip("polars")
    _, cf, frame = fitted
    record = {"age": 0.3, "colour": None, "size": -1.0}
    want = cf.predict(record)
    np.testing.assert_array_equal(cf.predict(pa.Table.from_pylist([record])), want)
    np.testing.assert_array_equal(cf.predict(pl.DataFrame([record])), want)
    for values in (pa.array([[1.0]]), pa.array([{"a": 1}])):
        table = pa.table({"age": [0.3], "colour": values, "size": [-1.0]})
        with pytest.raises(InputError, match=r"column 1 \('colour'\) holds a value that is no category label"):
            cf.predict(table)


def test_numbers_as_text_in_a_frame_equal_catboost(fitted):
    """A pandas column of numbers' text (str or object, a missing value among them) on a number
    feature is read as CatBoost's own predict reads it: the numbers; text that is no number is
    refused as before."""
    model, cf, frame = fitted
    rows = frame.iloc[:4].reset_index(drop=True)
    text = rows.assign(age=[repr(v) for v in rows.age])
    for given in (text, text.astype({"age": object})):
        np.testing.assert_allclose(cf.predict(given), model.predict(given), rtol=1e-12, atol=1e-12)
    with_none = text.astype({"age": object})
    with_none.loc[1, "age"] = None
    np.testing.assert_array_equal(cf.predict(with_none), cf.predict(rows.assign(age=rows.age.where(rows.index != 1))))
    with pytest.raises(InputError, match="column 'age' holds"):
        cf.predict(text.assign(age=["old"] + list(text.age[1:])))
    # (a list there is no number: one row's was read as its item)
    for n in (1, 4):
        listed = rows.iloc[:n].assign(age=pd.Series([[v] for v in rows.age[:n]], dtype=object))
        with pytest.raises(InputError, match="column 'age' holds"):
            cf.predict(listed)


def test_dates_are_no_categories(fitted):
    """Dates and times where a category belongs are refused, as CatBoost refuses them (their
    text would be a category no training row held), in records, frames and arrow alike."""
    pa = pytest.importorskip("pyarrow")
    import datetime

    _, cf, _ = fitted
    good = {"age": 1.0, "colour": "red", "size": 1.0}
    for value in (pd.Timestamp("2020-01-01"), datetime.date(2020, 1, 1), np.datetime64("2020-01-01")):
        for rows in ([good, {**good, "colour": value}], pd.DataFrame([good, {**good, "colour": value}])):
            with pytest.raises(InputError, match=r"column 1 \('colour'\) holds a value that is no category label"):
                cf.predict(rows)
    table = pa.table({"age": [1.0], "colour": pa.array([datetime.datetime(2020, 1, 1)]), "size": [1.0]})
    with pytest.raises(InputError, match="categories are read from strings and integers"):
        cf.predict(table)


def test_calls_of_values_seen_before_read_every_combination_by_its_table():
    """CTRs over combinations of three categorical features: a few rows hash most chains a row at
    the first call of their values and read every chain by a table kept from the second; new
    values start again (a category not seen: CatBoost's prior).  Every call equals CatBoost."""
    rng = np.random.default_rng(5)
    n = 600
    frame = pd.DataFrame({"a": rng.choice([f"a{i}" for i in range(7)], n), "b": rng.choice(list("pqrst"), n),
                          "c": rng.choice(list("wxyz"), n), "x": rng.normal(size=n)})
    y = ((frame.a == "a1") + (frame.b == "q") * (frame.c == "x") + frame.x * 0.2 > 0.5).astype(int)
    model = cb.CatBoostClassifier(iterations=25, depth=4, cat_features=["a", "b", "c"], max_ctr_complexity=3,
                                  one_hot_max_size=2, verbose=0, thread_count=1, random_seed=0,
                                  allow_writing_files=False).fit(frame, y)
    cf = sf.compile(model)
    unseen = frame.iloc[:3].assign(a=["a9", "a1", "zz"])
    for rows in (frame.iloc[:2], frame.iloc[:2], frame.iloc[2:5], frame, frame.iloc[7:9], unseen, unseen,
                 frame.iloc[:4]):
        np.testing.assert_allclose(cf.predict(rows, output_margin=True),
                                   model.predict(rows, prediction_type="RawFormulaVal"), rtol=1e-12, atol=1e-12)

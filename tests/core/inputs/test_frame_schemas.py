"""Frames read through the plan of their schema (silvanforge.inputs.frames) and records by feature name
(silvanforge.inputs.records) give exactly what the same rows as an array of the model's codes give:
every frame kind (pandas NumPy, nullable and Arrow-backed dtypes, categories, strings; polars
Enum, Categorical and strings; arrow dictionaries), any column order, any category order,
missing and unseen categories.  The schema memory stays bounded and a frame with the same names
and other dtypes or categories is read afresh.  The array each test compares with is built here
from the frame's labels, independently of the code under test."""

from __future__ import annotations

import json

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import silvanforge as sf
from silvanforge.errors import InputError
from silvanforge.inputs.frames import SCHEMAS
from support_common import ARROW_NUMBER_TYPES, arrow_number_columns, errors_in_threads

pd = pytest.importorskip("pandas")
lgb = pytest.importorskip("lightgbm")
xgb = pytest.importorskip("xgboost")
pa = pytest.importorskip("pyarrow")

COLOURS = ["red", "green", "blue", "amber", "violet"]
SHAPES = ["disc", "star", "cube"]
NAMES = ["age", "colour", "income", "shape", "score"]


def _training(n=800, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"age": rng.normal(40, 12, n),
                       "colour": pd.Categorical(rng.choice(COLOURS, n), categories=COLOURS),
                       "income": rng.integers(0, 100, n).astype(np.float64),
                       "shape": pd.Categorical(rng.choice(SHAPES, n), categories=SHAPES),
                       "score": rng.uniform(-1, 1, n)})
    y = (df.age / 12 + df.colour.isin(["red", "blue"]) * 1.5 + (df["shape"] == "star") + df.score
         + df.income / 50 + rng.normal(0, 0.3, n))
    return df, (y > y.median()).astype(int)


@pytest.fixture(scope="module")
def models():
    df, y = _training()
    lgbm = lgb.LGBMClassifier(n_estimators=15, num_leaves=15, min_child_samples=5, verbose=-1).fit(df, y)
    xgbm = xgb.XGBClassifier(n_estimators=15, max_depth=4, enable_categorical=True, tree_method="hist").fit(df, y)
    return {"lightgbm": sf.compile(lgbm), "xgboost": sf.compile(xgbm)}


def _rows(n, seed, unseen=False, missing=True):
    """Labels and numbers (object columns): what each frame kind is built from."""
    rng = np.random.default_rng(seed)
    colour = rng.choice(COLOURS + (["teal"] if unseen else []), n).astype(object)
    shape = rng.choice(SHAPES, n).astype(object)
    age = rng.normal(40, 12, n)
    income = rng.integers(0, 100, n).astype(np.float64)
    if missing:
        colour[rng.random(n) < 0.2] = None
        shape[rng.random(n) < 0.2] = None
        age[rng.random(n) < 0.2] = np.nan
        income[rng.random(n) < 0.2] = np.nan
    return {"age": age, "colour": colour, "income": income, "shape": shape, "score": rng.uniform(-1, 1, n)}


def _expected(cf, raw):
    """The same rows as an array of the model's codes: labels through the model's own lists,
    an unseen label missing (LightGBM's rule; the XGBoost model refuses it, tested apart)."""
    cats = cf.forest.feature_categories
    X = np.empty((len(raw["age"]), len(NAMES)))
    for f, name in enumerate(NAMES):
        if f in cats:
            X[:, f] = [cats[f].index(v) if v in cats[f] else np.nan for v in raw[name]]
        else:
            X[:, f] = raw[name]
    return cf.predict(X)


def _pandas(raw, order, colour_categories, kind):
    cols = {}
    for name in order:
        v = raw[name]
        if name in ("colour", "shape"):
            cats = colour_categories if name == "colour" else SHAPES
            cols[name] = (pd.Series(v, dtype="str") if kind == "strings"
                          else pd.Categorical(v, categories=[c for c in cats if c in set(cats)]))
        elif kind == "nullable":
            s = pd.array(v, dtype="Float64")
            cols[name] = pd.array(np.where(np.isnan(v), 0, v).astype(int), dtype="Int64") if name == "income" else s
            if name == "income":
                cols[name][np.isnan(v)] = pd.NA
        elif kind == "arrow-backed":
            cols[name] = pd.array(v, dtype="float64[pyarrow]")
        else:
            cols[name] = v
    return pd.DataFrame(cols)


def _polars(raw, order, colour_categories, kind):
    pl = pytest.importorskip("polars")
    series = []
    for name in order:
        v = raw[name]
        if name in ("colour", "shape"):
            values = [None if x is None else x for x in v]
            dtype = {"enum": pl.Enum(colour_categories if name == "colour" else SHAPES),
                     "categorical": pl.Categorical, "strings": pl.String}[kind]
            series.append(pl.Series(name, values, dtype=dtype))
        else:
            series.append(pl.Series(name, v, nan_to_null=name == "income"))
    return pl.DataFrame(series)


def _arrow(raw, order, colour_categories, kind):
    arrays = []
    for name in order:
        v = raw[name]
        if name in ("colour", "shape"):
            values = pa.array(list(v), type=pa.string())
            if kind == "dictionary":
                cats = colour_categories if name == "colour" else SHAPES
                indices = pa.array([None if x is None else cats.index(x) for x in v], type=pa.int32())
                values = pa.DictionaryArray.from_arrays(indices, pa.array(cats))
            arrays.append(values)
        else:
            arrays.append(pa.array(v, from_pandas=name == "income"))
    return pa.Table.from_arrays(arrays, names=list(order))


FRAMES = [("pandas", "numpy"), ("pandas", "nullable"), ("pandas", "arrow-backed"), ("pandas", "strings"),
          ("polars", "enum"), ("polars", "categorical"), ("polars", "strings"),
          ("pyarrow", "dictionary"), ("pyarrow", "strings")]
MAKERS = {"pandas": _pandas, "polars": _polars, "pyarrow": _arrow}


@settings(max_examples=30, deadline=None)
@given(frame=st.sampled_from(FRAMES), order=st.permutations(NAMES), colours=st.permutations(COLOURS),
       n=st.sampled_from([1, 3, 17, 70]), seed=st.integers(0, 2**16), unseen=st.booleans())
def test_every_frame_kind_equals_the_array_of_codes(models, frame, order, colours, n, seed, unseen):
    cf = models["lightgbm"]
    library, kind = frame
    raw = _rows(n, seed, unseen=unseen)
    if kind == "enum" and unseen:
        colours = colours + ["teal"]  # an Enum holds only its categories
    if library == "pyarrow" and kind == "dictionary" and unseen:
        colours = colours + ["teal"]
    X = MAKERS[library](raw, order, colours, kind)
    expected = _expected(cf, raw)
    np.testing.assert_array_equal(cf.predict(X), expected)
    np.testing.assert_array_equal(cf.predict(X), expected)  # again, through the remembered plan


@pytest.mark.parametrize("library,kind", [("pandas", "numpy"), ("polars", "enum"), ("pyarrow", "dictionary")])
def test_xgboost_frames_equal_the_array_and_refuse_unseen_categories(models, library, kind):
    cf = models["xgboost"]
    for n, seed in ((1, 1), (40, 2)):
        raw = _rows(n, seed)
        order = NAMES[::-1]
        np.testing.assert_array_equal(cf.predict(MAKERS[library](raw, order, COLOURS[::-1], kind)), _expected(cf, raw))
    for n in (30, 1):  # (a row of polars: read as Python values)
        raw = _rows(n, 3, unseen=True)
        raw["colour"][0] = "teal"
        with pytest.raises(InputError, match="column 'colour' has a category the model was not trained with"):
            cf.predict(MAKERS[library](raw, NAMES, COLOURS + ["teal"], kind))


@pytest.mark.parametrize("index_type", ["int8", "uint8", "int16", "uint32", "int64"])
def test_dictionary_columns_with_nulls_equal_the_array(models, index_type):
    """Arrow dictionary columns with null entries, indices of signed and unsigned types (polars'
    Enums arrive as unsigned ones), 1 and 70 rows, a null row alone too: nulls are missing, an
    unseen category missing (LightGBM) or refused (XGBoost), as through any other frame."""
    for n, seed in ((70, 4), (1, 5), (1, 6)):
        raw = _rows(n, seed, unseen=True)
        raw["colour"][0] = None if seed == 6 else raw["colour"][0]
        arrays = []
        for name in NAMES:
            v = raw[name]
            if name in ("colour", "shape"):
                cats = COLOURS[::-1] + ["teal"] if name == "colour" else SHAPES
                indices = pa.array([None if x is None else cats.index(x) for x in v], type=getattr(pa, index_type)())
                arrays.append(pa.DictionaryArray.from_arrays(indices, pa.array(cats)))
            else:
                arrays.append(pa.array(v, from_pandas=True))
        table = pa.Table.from_arrays(arrays, names=NAMES)
        np.testing.assert_array_equal(models["lightgbm"].predict(table), _expected(models["lightgbm"], raw))
        if any(x == "teal" for x in raw["colour"]):
            with pytest.raises(InputError, match="column 'colour' has a category the model was not trained with"):
                models["xgboost"].predict(table)
        else:
            np.testing.assert_array_equal(models["xgboost"].predict(table), _expected(models["xgboost"], raw))


def test_same_names_other_dtypes_or_categories_are_read_afresh(models):
    cf = models["lightgbm"]
    raw = _rows(25, 5)
    expected = _expected(cf, raw)
    frame = _pandas(raw, NAMES, COLOURS, "numpy")
    np.testing.assert_array_equal(cf.predict(frame), expected)
    # the same frame, its categories reordered in place: other codes for the same labels
    frame["colour"] = frame["colour"].cat.reorder_categories(COLOURS[::-1])
    np.testing.assert_array_equal(cf.predict(frame), expected)
    # a frame of equal categories in another order (pandas calls their dtypes equal)
    other = _pandas(raw, NAMES, [COLOURS[i] for i in (3, 0, 4, 1, 2)], "numpy")
    assert other["colour"].dtype == frame["colour"].dtype
    np.testing.assert_array_equal(cf.predict(other), expected)
    # the same names, a categorical column now its labels as strings, a number column Float64
    for changed in (frame.assign(colour=frame["colour"].astype(object)),
                    frame.assign(age=pd.array(raw["age"], dtype="Float64"))):
        np.testing.assert_array_equal(cf.predict(changed), expected)
    # polars: Enum after strings under the same names; arrow: another dictionary order
    pl = pytest.importorskip("polars")
    for kind in ("strings", "enum", "categorical", "enum"):
        np.testing.assert_array_equal(cf.predict(_polars(raw, NAMES, COLOURS[::-1], kind)), expected)
    for cats in (COLOURS, COLOURS[::-1], COLOURS):  # (Enums of other categories: one kind of dtype)
        np.testing.assert_array_equal(cf.predict(_polars(raw, NAMES, cats, "enum")), expected)
    assert isinstance(cf.predict(pl.DataFrame({n: raw[n] for n in ("age", "income", "score")})
                                 .with_columns(pl.lit("red").alias("colour"), pl.lit("star").alias("shape"))),
                      np.ndarray)
    for cats in (COLOURS, COLOURS[::-1]):
        np.testing.assert_array_equal(cf.predict(_arrow(raw, NAMES, cats, "dictionary")), expected)
    # a few polars rows (read as Python values) after the same names held other kinds: a number
    # column now strings is refused as the general reading refuses it, labels now numbers too
    few = _rows(2, 6)
    np.testing.assert_array_equal(cf.predict(_polars(few, NAMES, COLOURS, "strings")), _expected(cf, few))
    with pytest.raises(InputError, match="column 'age' holds strings"):
        cf.predict(_polars(few, NAMES, COLOURS, "strings").with_columns(pl.col("age").cast(pl.String)))
    np.testing.assert_array_equal(cf.predict(_polars(few, NAMES, COLOURS, "strings")), _expected(cf, few))
    numbers = _polars(few, NAMES, COLOURS, "strings").with_columns(pl.Series("colour", [0.0, 1.0]))
    for X in (numbers, numbers.to_pandas()):
        with pytest.raises(InputError, match="column 'colour' holds plain (double|float64) values"):
            cf.predict(X)


@pytest.mark.parametrize("library", ["lightgbm", "xgboost"])
def test_rows_one_at_a_time_and_frames_called_again_equal_the_array(models, library):
    """A one-row frame reads its categories as scalars (pandas) or Python values (polars): each
    label, a missing one and (for the model that maps it to missing) an unseen one, alone,
    through tables of categories in several orders; frames of equal categories held by other
    objects, called in turn, keep their own."""
    cf = models[library]
    raw = _rows(12, 21, unseen=library == "lightgbm")
    raw["colour"][:7] = COLOURS + [None, "teal" if library == "lightgbm" else None]
    raw["shape"][:4] = SHAPES + [None]
    expected = _expected(cf, raw)
    orders = (COLOURS, COLOURS[::-1], [COLOURS[i] for i in (2, 4, 0, 3, 1)])
    kinds = [("pandas", "numpy"), ("polars", "enum"), ("polars", "strings"), ("pyarrow", "dictionary")]
    for i in range(len(expected)):
        row = {name: values[i:i + 1] for name, values in raw.items()}
        for (maker, kind), colours in zip(kinds * 3, orders * 4):
            frame = MAKERS[maker](row, NAMES[::-1], colours + (["teal"] if library == "lightgbm" else []), kind)
            for _ in range(2):
                np.testing.assert_array_equal(cf.predict(frame), expected[i:i + 1])
    frames = [_pandas(raw, NAMES, colours, "numpy") for colours in orders + (COLOURS,)]
    for frame in frames * 2:
        np.testing.assert_array_equal(cf.predict(frame), expected)
        np.testing.assert_array_equal(cf.predict(frame.iloc[2:3]), expected[2:3])


def test_number_columns_side_by_side_equal_the_array(rng):
    """Number columns of a frame with categories that are features side by side (written at once:
    through a slice up to a few hundred rows, by index above; into rows in column order from a
    few thousand), in the model's order and shuffled, float32 and float64, pandas and polars: the
    array of the same values."""
    pl = pytest.importorskip("polars")
    from silvanforge.inputs.schemas import COLUMN_ORDER_ROWS

    n = COLUMN_ORDER_ROWS + 10
    names = ["colour", "a", "b", "c", "d"]
    colour = rng.choice(COLOURS, n)
    numbers = rng.normal(size=(n, 4))
    numbers[rng.random(numbers.shape) < 0.1] = np.nan
    train = pd.DataFrame({"colour": pd.Categorical(colour, categories=COLOURS),
                          **{name: numbers[:, j] for j, name in enumerate(names[1:])}})
    y = train["colour"].cat.codes.to_numpy() + np.nan_to_num(numbers).sum(axis=1)
    cf = sf.compile(lgb.LGBMRegressor(n_estimators=8, num_leaves=15, verbose=-1).fit(train, y))
    X = np.column_stack([[COLOURS.index(c) for c in colour], numbers])
    for k in (1, 64, 256, 257, n):
        expected = cf.predict(X[:k])
        for dtype in (np.float64, np.float32):
            frame = train.iloc[:k].astype({name: dtype for name in names[1:]})
            frame["colour"] = frame["colour"].cat.set_categories(COLOURS[::-1])
            for order in (names, ["b", "colour", "a", "d", "c"]):
                got = frame[order]
                if dtype == np.float32:
                    want = cf.predict(np.column_stack([X[:k, :1], X[:k, 1:].astype(np.float32)]))
                else:
                    want = expected
                np.testing.assert_array_equal(cf.predict(got), want)
                np.testing.assert_array_equal(cf.predict(pl.from_pandas(got)), want)


def test_frames_made_anew_each_call_equal_the_array(models):
    """Frames made for each call, as a service makes them (their column names and categories
    new objects, compared by value with the last ones): equal names and categories, categories
    in another order or held as Python objects, names in another order, a name changed, in turn."""
    cf = models["lightgbm"]
    raw = _rows(6, 23)
    expected = _expected(cf, raw)
    reordered = [COLOURS[i] for i in (4, 2, 0, 1, 3)]

    def frame(order=NAMES, colours=COLOURS, labels="str"):
        made = _pandas(raw, order, colours, "numpy")
        made["colour"] = made["colour"].cat.set_categories(pd.Index(colours, dtype=labels))
        return made
    for _ in range(2):
        for made in (frame(), frame(), frame(colours=reordered), frame(labels=object), frame(colours=reordered,
                     labels=object), frame(order=NAMES[::-1]), frame(), frame(order=NAMES[::-1], colours=reordered)):
            np.testing.assert_array_equal(cf.predict(made), expected)
            np.testing.assert_array_equal(cf.predict(made.iloc[1:2]), expected[1:2])
        with pytest.raises(InputError, match="weight"):
            cf.predict(frame().rename(columns={"age": "weight"}))


def test_numeric_frames_of_every_kind_equal_the_array(rng):
    pl = pytest.importorskip("polars")
    n = 1100  # (from 1024 rows an arrow table's columns are read one by one)
    X = rng.normal(size=(n, 4)) * 100
    X[rng.random(X.shape) < 0.1] = np.nan
    names = list("abcd")
    model = xgb.XGBRegressor(n_estimators=10, max_depth=4).fit(pd.DataFrame(X, columns=names), rng.normal(size=n))
    cf = sf.compile(model)
    for k in (1, 5, 16, 17, 64, 300, n):
        rows = X[:k]
        expected = cf.predict(rows)
        frame = pd.DataFrame(rows, columns=names)
        shuffled = ["c", "a", "d", "b"]
        # (the model reads float32: a float32 frame of one block in its order is read from the
        # block; a few rows of polars floats as Python values, nulls and NaN alike missing)
        for X_ in (frame, frame[shuffled], frame.astype(np.float32), frame.astype(np.float32)[shuffled],
                   pl.from_pandas(frame[shuffled]), pl.from_pandas(frame.astype(np.float32)),
                   pl.from_pandas(frame[shuffled], nan_to_null=True),
                   pl.from_pandas(frame.astype(np.float32)[shuffled]).with_columns(pl.col("a").cast(pl.Float64)),
                   pa.Table.from_pandas(frame[shuffled], preserve_index=False)):
            np.testing.assert_array_equal(cf.predict(X_), expected)
        # a value given as missing is replaced in a copy: the frame read from its block is unchanged
        single = frame.astype(np.float32)
        before = single.to_numpy().copy()
        np.testing.assert_array_equal(cf.predict(single, missing=float(before[0, 0])),
                                      cf.predict(np.where(before == before[0, 0], np.nan, before)))
        np.testing.assert_array_equal(single.to_numpy(), before)


NUMBER_TYPES = ARROW_NUMBER_TYPES


@pytest.mark.parametrize("native", [True, False])
def test_large_arrow_tables_of_every_number_type_equal_the_array(rng, monkeypatch, native):
    """Tables of every arrow number type with nulls, sliced, in several chunks, any column order,
    as many rows as the target's kernel of arrow columns copies (and without it; a half float
    column, which it does not read): the array of the same values as float64, for a model of
    float32 rows (XGBoost) and of float64 (LightGBM)."""
    from silvanforge.inputs import arrow_frames, arrow_native

    monkeypatch.setattr(arrow_native, "reader", lambda wait=False: None)  # (the C++ reader: tested apart)
    runs = []
    if native:
        kernel = arrow_frames.columns_kernel(wait=True)
        if kernel is None:
            pytest.skip("no installed target has a kernel of arrow columns here")

        class Counted:
            arg_layout, kinds = kernel.arg_layout, kernel.kinds

            def run(self, *args):
                runs.append(args)
                kernel.run(*args)
        monkeypatch.setattr(arrow_frames, "columns_kernel", Counted)
    else:
        monkeypatch.setattr(arrow_frames, "columns_kernel", lambda: None)
    n = arrow_frames.ARROW_BY_COLUMN_ROWS + 300
    columns, X = arrow_number_columns(rng, n)
    names = [f"x_{t}" for t in NUMBER_TYPES]
    y = np.nan_to_num(X / np.nanstd(X, axis=0)).sum(axis=1) + rng.normal(size=n)
    frame = pd.DataFrame(X, columns=names)
    for model in (xgb.XGBRegressor(n_estimators=8, max_depth=5).fit(frame, y),
                  lgb.LGBMRegressor(n_estimators=8, num_leaves=31, verbose=-1).fit(frame, y)):
        cf = sf.compile(model)
        whole = pa.Table.from_arrays(columns, names=names)
        table = whole.drop_columns(["x_float16"]).add_column(0, "x_float16", pa.array(X[:, 8]))  # (as float64)
        shuffled = [names[i] for i in rng.permutation(len(names))]
        for got, rows in ((table, X), (table.select(shuffled), X), (table.slice(7), X[7:]),
                          (pa.concat_tables([table.slice(0, 500), table.slice(500)]), X),
                          (pa.concat_tables([table.slice(3, 700), table.slice(900)]).select(shuffled),
                           np.concatenate([X[3:703], X[900:]])),
                          (whole, X)):
            assert len(rows) >= arrow_frames.ARROW_BY_COLUMN_ROWS
            np.testing.assert_array_equal(cf.predict(got), cf.predict(rows))
        expected = cf.predict(X)

        def work(k):  # (threads at once, each its own rows, each call its own export)
            for _ in range(3):
                np.testing.assert_array_equal(cf.predict(table.slice(k)), expected[k:])
        errors = errors_in_threads(work, [0, 1, 2, 3])
        assert not errors, errors[0]
    assert bool(runs) == native


def test_schema_memory_is_bounded_and_safe_from_threads(models):
    cf = models["lightgbm"]
    raw = _rows(9, 7)
    expected = _expected(cf, raw)
    rng = np.random.default_rng(0)
    orders = [list(rng.permutation(NAMES)) for _ in range(3 * SCHEMAS)]
    frames = [_pandas(raw, order, COLOURS, "numpy") for order in orders]

    def work(some):
        for frame in some * 3:
            np.testing.assert_array_equal(cf.predict(frame), expected)

    errors = errors_in_threads(work, [frames[i::4] for i in range(4)])
    assert not errors, errors[0]
    assert 0 < len(cf._schemas) <= SCHEMAS


def test_frame_errors_are_as_before(models):
    cf = models["lightgbm"]
    frame = _pandas(_rows(4, 8), NAMES, COLOURS, "numpy")
    with pytest.raises(InputError, match="missing 'income'"):
        cf.predict(frame.drop(columns=["income"]))
    with pytest.raises(InputError, match="not features of the model: 'extra'"):
        cf.predict(frame.assign(extra=1.0))
    with pytest.raises(InputError, match="column 'age' holds dates"):
        cf.predict(frame.assign(age=pd.date_range("2020-01-01", periods=4)))
    with pytest.raises(InputError, match="column 'colour' holds plain"):
        cf.predict(frame.assign(colour=frame["colour"].cat.codes))


def test_an_arrow_record_batch_is_its_table_and_a_lazy_frame_is_refused(models):
    cf = models["lightgbm"]
    raw = _rows(9, 5)
    table = _arrow(raw, NAMES[::-1], COLOURS, "dictionary")
    batch = table.to_batches()[0]
    np.testing.assert_array_equal(cf.predict(batch), _expected(cf, raw))
    np.testing.assert_array_equal(cf.predict(batch, pred_leaf=True), cf.predict(table, pred_leaf=True))
    pl = pytest.importorskip("polars")
    with pytest.raises(InputError, match=r"polars LazyFrame.*frame.collect\(\)"):
        cf.predict(_polars(raw, NAMES, COLOURS, "enum").lazy())


# ------------------------------------------------------------------ records and JSON Lines
def _records(raw):
    return [{name: (None if (isinstance(v, float) and v != v) else v) for name, v in
             zip(NAMES[::-1], [raw[n][i] for n in NAMES[::-1]])} for i in range(len(raw["age"]))]


@pytest.mark.parametrize("library", ["lightgbm", "xgboost"])
def test_records_equal_the_array(models, library):
    cf = models[library]
    raw = _rows(40, 9)
    records = _records(raw)
    expected = _expected(cf, raw)
    np.testing.assert_array_equal(cf.predict(records), expected)
    np.testing.assert_array_equal(cf.predict(records[3]), expected[3:4])
    np.testing.assert_array_equal(cf.predict({**records[0], "age": int(31)}),
                                  cf.predict({**records[0], "age": 31.0}))
    # records agree however many, record by record, with an unseen label missing or refused as
    # the library does; a NaN label (read the general way, column by column) as None
    raw = _rows(6, 11)
    raw["colour"][1] = "teal"
    few = _records(raw)
    if library == "lightgbm":
        many = cf.predict(few * 2)[:6]
        np.testing.assert_array_equal(many, _expected(cf, raw))
        np.testing.assert_array_equal(cf.predict(few), many)
        for i, record in enumerate(few):
            np.testing.assert_array_equal(cf.predict(record), many[i:i + 1])
    else:
        with pytest.raises(InputError, match="record 1: 'colour' is \"teal\", a category the model was not trained "
                                             "with \\(it knows 'red', 'green', 'blue', 'amber', 'violet'\\)"):
            cf.predict(few)
        np.testing.assert_array_equal(cf.predict(few[2:]), cf.predict(few[2:] * 3)[:4])
    np.testing.assert_array_equal(cf.predict({**few[0], "income": True}), cf.predict({**few[0], "income": 1.0}))
    np.testing.assert_array_equal(cf.predict([{**few[0], "colour": float("nan")}, few[3]]),
                                  cf.predict([{**few[0], "colour": None}, few[3]]))
    # no records: no rows, as an empty array of rows (and the server) answers
    empty = cf.predict([])
    assert empty.shape == cf.predict(np.empty((0, len(NAMES)))).shape == (0,) + expected.shape[1:]


def test_bad_records_are_named(models):
    cf = models["lightgbm"]
    record = _records(_rows(2, 10))[0]
    with pytest.raises(InputError, match="the keys of record 0 do not match the model's features: missing 'age'"):
        cf.predict({k: v for k, v in record.items() if k != "age"})
    with pytest.raises(InputError, match="the keys of record 1 .* not features of the model: 'weight'"):
        cf.predict([record, {**record, "weight": 3}])
    with pytest.raises(InputError, match="record 0: 'age' is 'old', not a number"):
        cf.predict({**record, "age": "old"})
    with pytest.raises(InputError, match="record 1 is a list"):
        cf.predict([record, [1, 2]])
    with pytest.raises(InputError, match="""record 0: 'colour' is \\["red"\\], not a label or a category code"""):
        cf.predict({**record, "colour": ["red"]})  # (was read as numbers: "holds plain number values")
    numbered = sf.compile(lgb.LGBMRegressor(n_estimators=3, min_child_samples=5, min_data_per_group=5, verbose=-1).fit(
        pd.DataFrame({"a": np.arange(60.0), "size": pd.Categorical(np.arange(60) % 3)}), np.arange(60.0)))
    np.testing.assert_array_equal(numbered.predict({"a": 1.0, "size": 2}),
                                  numbered.predict(pd.DataFrame({"a": [1.0], "size": pd.Categorical([2], [0, 1, 2])})))
    with pytest.raises(InputError, match="'size' is the string '2', and the feature's categories are numbers"):
        numbered.predict({"a": 1.0, "size": "2"})  # (was an unseen label: silently missing)
    with pytest.raises(InputError, match="record 1: 'age' is an integer too large for a number"):
        cf.predict([record, {**record, "age": -10 ** 400}])  # (past float64: Python's float refuses it too)
    with pytest.raises(InputError, match="a dict of columns .*a list of 300 values.*pandas.DataFrame") as raised:
        cf.predict({k: [v] * 300 for k, v in record.items()})  # (named so, not printed whole)
    assert len(str(raised.value)) < 300
    with pytest.raises(InputError, match="record 0: '.*' is array\\(0.5\\)"):  # (0-d arrays: a record's, not columns)
        cf.predict({k: np.array(0.5) for k in record})
    unnamed = sf.compile(xgb.XGBRegressor(n_estimators=2).fit(np.eye(3), [0, 1, 2]))
    with pytest.raises(InputError, match="the model has no feature names"):
        unnamed.predict({"f0": 1.0})


def test_plain_number_records_of_every_value_kind_equal_the_array():
    """Records of numbers (read at once, the dtype NumPy finds telling plain ones): integers
    alone, booleans alone, NumPy scalars, None and NaN among them, keys in any order, as many
    as a thousand; anything else (a string, a list, a key too many) read the general way."""
    names = ["a", "b", "c"]
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 3))
    numbered = sf.compile(xgb.XGBRegressor(n_estimators=4, max_depth=3).fit(pd.DataFrame(X, columns=names), X[:, 0]))
    rows = rng.integers(-5, 5, size=(1000, 3))
    ints = [{"c": int(c), "a": int(a), "b": int(b)} for a, b, c in rows.tolist()]
    np.testing.assert_array_equal(numbered.predict(ints), numbered.predict(rows.astype(np.float64)))
    bools = [{"a": bool(a > 0), "b": bool(b > 0), "c": True} for a, b, _ in rows.tolist()[:50]]
    np.testing.assert_array_equal(numbered.predict(bools), numbered.predict(
        np.c_[rows[:50, :2] > 0, np.ones(50)].astype(np.float64)))
    mixed = [{"a": np.float32(0.5), "b": None, "c": 3}, {"a": float("nan"), "b": np.int64(2), "c": 1.25},
             {"b": 2 ** 60, "a": -0.0, "c": False}]
    np.testing.assert_array_equal(numbered.predict(mixed), numbered.predict(
        np.array([[0.5, np.nan, 3.0], [np.nan, 2.0, 1.25], [-0.0, float(2 ** 60), 0.0]])))
    from silvanforge.inputs.records import records_matrix

    assert records_matrix([], numbered.forest).shape == (0, 3)
    for bad, message in (({"a": "1.5", "b": 1.0, "c": 1.0}, "'a' is '1.5', not a number"),
                         ({"a": np.array([1.0, 2.0]), "b": 1.0, "c": 1.0}, "'a' is array"),
                         ({"a": np.array(1.5), "b": 1.0, "c": 1.0}, "'a' is array"),  # (NumPy reads it as a number)
                         ({"a": np.ma.masked, "b": 1.0, "c": 1.0}, "'a' is masked"),
                         ({"a": [1.0], "b": 1.0, "c": 1.0}, "'a' is \\[1.0\\], not a number"),
                         ({"a": 1.0, "b": 1.0, "d": 1.0}, "not features of the model: 'd'")):
        for records in ([{"a": 0.0, "b": 0.0, "c": 0.0}, bad], [bad, {"a": 0.0, "b": None, "c": 0.0}]):
            with pytest.raises(InputError, match=message):
                numbered.predict(records)


def _forge(capsys, *args):
    from silvanforge import cli

    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_forge_predict_reads_json_lines(models, tmp_path, capsys):
    df, y = _training()
    model = lgb.LGBMClassifier(n_estimators=10, verbose=-1).fit(df, y)
    model.booster_.save_model(str(tmp_path / "m.txt"))
    cf = sf.compile(tmp_path / "m.txt")
    raw = _rows(25, 11)
    lines = [json.dumps(r) for r in _records(raw)]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines[:10]) + "\n\n" + "\n".join(lines[10:]) + "\n")
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "rows.jsonl", "-o", tmp_path / "y.npy")
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy").reshape(-1), _expected(cf, raw))
    (tmp_path / "bad.jsonl").write_text(lines[0] + "\n" + lines[1][:-3] + "\n")
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "bad.jsonl")
    assert code != 0 and "Traceback" not in err
    assert "bad.jsonl: line 2: not JSON" in err, err
    (tmp_path / "twice.jsonl").write_text(lines[0] + "\n" + lines[1][:-1] + ', "age": 3.0, "x": {"y": 1}}\n')
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "twice.jsonl")
    assert code != 0 and "twice.jsonl: line 2: the key 'age' twice in one object" in err, err
    (tmp_path / "odd.jsonl").write_text(lines[0] + "\n" + json.dumps({**json.loads(lines[1]), "tail": 1}) + "\n")
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "odd.jsonl")
    assert code != 0 and "odd.jsonl: the keys of line 2 do not match the model's features" in err, err
    (tmp_path / "deep.jsonl").write_text(lines[0] + "\n" + '{"age": ' + "[" * 100_000 + "\n")
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "deep.jsonl")
    assert code != 0 and err == "error: " + str(tmp_path / "deep.jsonl") + ": line 2: arrays or objects nested " \
        "too deeply to be a record\n", err

    (tmp_path / "null.jsonl").write_text(lines[0] + "\nnull\n")
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "null.jsonl")
    assert code != 0 and "null.jsonl: line 2: a JSON null, not an object of feature name to value" in err, err
    (tmp_path / "latin.jsonl").write_bytes(lines[0].encode() + b"\n\xff\xfe\n")
    code, _, err = _forge(capsys, "predict", tmp_path / "m.txt", "-i", tmp_path / "latin.jsonl")
    assert code != 0 and "latin.jsonl: not UTF-8 text, so not a JSON Lines file" in err, err
    # a number past float32's range is infinite to a float32 model, as XGBoost reads it: NumPy's
    # warning of the cast is not shown
    xgb.XGBClassifier(n_estimators=5, max_depth=3, enable_categorical=True, tree_method="hist").fit(df, y) \
        .save_model(tmp_path / "x.json")
    record = {**json.loads(lines[0]), "colour": "red", "shape": "disc"}
    (tmp_path / "big.jsonl").write_text(json.dumps({**record, "age": 1e50}) + "\n")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        code, out, err = _forge(capsys, "predict", tmp_path / "x.json", "-i", tmp_path / "big.jsonl")
    assert code == 0 and err == "" and out.strip(), err
    assert not [w for w in shown if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in shown]
    assert float(out) == pytest.approx(float(sf.compile(tmp_path / "x.json").predict({**record, "age": np.inf})[0]),
                                       rel=1e-6)

"""The C++ reader of pyarrow Tables (silvanforge.inputs.arrow_native, arrow_rows.cpp) gives exactly
what the same rows as an array give: number columns of every integer and float type with nulls,
sliced and in several chunks, in any column order, into float32 and float64 rows; dictionary
columns of every index type with labels in any order, nulls, dictionaries that change between
calls and between chunks, categories the model refuses; string columns of labels and number
columns of integer labels; polars frames read as their Arrow C stream (nulls, Enum, Categorical
and String columns, slices, chunks, schemas that change under the same names).  Each test checks
the C++ reader answered (not the Python reader behind it), and the module refuses bad
arguments, is rebuilt where its file could have been planted, and is not used where it cannot
be built.  It is over 600 lines as one module because its tests share the compiled reader, the
counting wrapper each test checks the reader's answers by, and the trained models (fixtures of
the module's scope): split, each part would train and wrap them again."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.errors import InputError
from silvanforge.inputs import arrow_native
from silvanforge.inputs.native import FirstUse
from support_common import arrow_number_columns, errors_in_threads

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
lgb = pytest.importorskip("lightgbm")
xgb = pytest.importorskip("xgboost")

NUMBER_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"]
COLOURS = ["red", "green", "blue", "amber", "violet"]
SIZES = [20, 30, 40]  # integer category labels


class Counted:
    """The module, counting what ``read`` and ``read_blocks`` answered (0: it read the rows, 1:
    left them; a 2, a table or frame whose columns are not the plan it was asked with, means
    nothing was read and is not counted)."""

    def __init__(self, module):
        self.module, self.answers = module, []

    def plan(self, *args):
        return self.module.plan(*args)

    def set_labels(self, *args):
        return self.module.set_labels(*args)

    def __getattr__(self, name):  # (the module's other functions, as they are)
        return getattr(self.module, name)

    def read(self, *args):
        answer = self.module.read(*args)
        if answer != 2:
            self.answers.append(answer)
        return answer

    def read_blocks(self, *args):
        answer = self.module.read_blocks(*args)
        if answer != 2:
            self.answers.append(answer)
        return answer

    def read_stream(self, *args):  # (0 where it read the rows; "table" where it handed them back)
        answer = self.module.read_stream(*args)
        self.answers.append(answer if isinstance(answer, int) else "table")
        return answer


@pytest.fixture(scope="module")
def module():
    try:
        return arrow_native.load()
    except arrow_native.NativeUnavailable as exc:
        if "compiler" in str(exc) or "Linux" in str(exc) or "SILVANFORGE_ARROW_NATIVE" in str(exc):
            pytest.skip(f"the C++ reader cannot be built here: {exc}")
        raise


@pytest.fixture(scope="module")
def counting(module):
    # (one for the module's tests: a plan keeps the reader's functions it was made with, and
    # the models are the module's)
    return Counted(module)


@pytest.fixture
def counted(counting, monkeypatch):
    counting.answers.clear()
    monkeypatch.setattr(arrow_native, "reader", lambda wait=False: counting)
    return counting


def _numbers(rng, n):
    return arrow_number_columns(rng, n, NUMBER_TYPES)


@pytest.fixture(scope="module")
def number_models():
    rng = np.random.default_rng(3)
    _, X = _numbers(rng, 600)
    y = np.nan_to_num(X / np.nanstd(X, axis=0)).sum(axis=1) + rng.normal(size=len(X))
    frame = pd.DataFrame(X, columns=NUMBER_TYPES)
    return [sf.compile(xgb.XGBRegressor(n_estimators=8, max_depth=5).fit(frame, y)),  # float32 rows
            sf.compile(lgb.LGBMRegressor(n_estimators=8, num_leaves=31, verbose=-1).fit(frame, y))]  # float64


@pytest.mark.parametrize("n", [1, 5, 70, 2100])
def test_number_columns_of_every_type_equal_the_array(number_models, counted, n):
    rng = np.random.default_rng(n)
    columns, X = _numbers(rng, n + 9)
    table = pa.Table.from_arrays(columns, names=NUMBER_TYPES)
    shuffled = [NUMBER_TYPES[i] for i in rng.permutation(len(NUMBER_TYPES))]
    half = (n + 9) // 2
    for cf in number_models:
        for got, rows in ((table.slice(0, n), X[:n]), (table.select(shuffled).slice(9), X[9:]),
                          (pa.concat_tables([table.slice(0, half), table.slice(half, n + 9 - half)]), X),
                          (pa.concat_tables([table.slice(3, n), table.slice(0, 0)]).select(shuffled), X[3:n + 3])):
            counted.answers.clear()
            np.testing.assert_array_equal(cf.predict(got), cf.predict(rows))
            assert counted.answers == [0]


def _categorical_training(n=900, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"age": rng.normal(40, 12, n),
                       "colour": pd.Categorical(rng.choice(COLOURS, n), categories=COLOURS),
                       "size": pd.Categorical(rng.choice(SIZES, n), categories=SIZES),
                       "score": rng.uniform(-1, 1, n)})
    y = df.age / 12 + df.colour.isin(["red", "blue"]) * 1.5 + (df["size"] == 30) + df.score + rng.normal(0, .3, n)
    return df, (y > y.median()).astype(int)


def _both_models(df, y) -> dict:
    """A LightGBM and an XGBoost classifier of ``df``'s categories, compiled."""
    return {"lightgbm": sf.compile(lgb.LGBMClassifier(n_estimators=12, num_leaves=15, min_child_samples=5,
                                                      verbose=-1).fit(df, y)),
            "xgboost": sf.compile(xgb.XGBClassifier(n_estimators=12, max_depth=4, enable_categorical=True,
                                                    tree_method="hist").fit(df, y))}


@pytest.fixture(scope="module")
def categorical_models():
    return _both_models(*_categorical_training())


def _expected(cf, age, colour, size, score):
    """The rows as an array of the model's codes (an unseen label missing)."""
    cats = cf.forest.feature_categories
    X = np.empty((len(age), 4))
    X[:, 0], X[:, 3] = age, score
    for f, values in ((1, colour), (2, size)):
        X[:, f] = [cats[f].index(v) if v in cats[f] else np.nan for v in values]
    return cf.predict(X)


def _dictionary(values, labels, index_type, value_type=None):
    indices = pa.array([None if v is None else labels.index(v) for v in values], type=index_type)
    return pa.DictionaryArray.from_arrays(indices, pa.array(labels, type=value_type))


def _table(rng, n, colours, sizes, index_type, value_type, unseen=False):
    colour = [None if rng.random() < 0.15 else c for c in rng.choice(colours if unseen else COLOURS, n).tolist()]
    size = [None if rng.random() < 0.15 else int(s) for s in rng.choice(SIZES, n)]
    age, score = rng.normal(40, 12, n), rng.uniform(-1, 1, n)
    age[rng.random(n) < 0.1] = np.nan
    table = pa.table({"score": score, "colour": _dictionary(colour, colours, index_type, value_type),
                      "age": pa.array(age, from_pandas=True), "size": _dictionary(size, sizes, index_type)})
    return table, (age, colour, size, score)


@pytest.mark.parametrize("library", ["lightgbm", "xgboost"])
@pytest.mark.parametrize("index_type,value_type", [(pa.int8(), pa.string()), (pa.int32(), pa.large_string()),
                                                   (pa.uint16(), pa.string()), (pa.int64(), pa.large_string())])
def test_dictionary_columns_equal_the_array(categorical_models, counted, library, index_type, value_type):
    """Labels in any order (a table made anew each call, as a request's is), nulls, a
    dictionary changed between calls and between the chunks of one table."""
    cf = categorical_models[library]
    rng = np.random.default_rng(index_type.bit_width)
    for n in (1, 4, 64, 300):
        colours = [COLOURS[i] for i in rng.permutation(len(COLOURS))]
        sizes = [SIZES[i] for i in rng.permutation(len(SIZES))]
        counted.answers.clear()
        for _ in range(3):  # (the first call may register the new dictionary: the next are read in C++)
            table, raw = _table(rng, n, colours, sizes, index_type, value_type)
            np.testing.assert_array_equal(cf.predict(table), _expected(cf, *raw))
        assert counted.answers[1:] == [0, 0]
    # chunks of other dictionaries of string labels: each read in C++ through the model's codes
    # of its labels (the reader's set_label_codes), not the registered dictionary's; the integer
    # sizes (no such codes) in the order registered first
    cf.predict(_table(rng, 3, COLOURS, SIZES, index_type, value_type)[0])
    first, raw_first = _table(rng, 5, COLOURS, SIZES, index_type, value_type)
    second, raw_second = _table(rng, 7, COLOURS[::-1], SIZES, index_type, value_type)
    both = pa.concat_tables([first, second])
    expected = _expected(cf, *(np.concatenate([a, b]) if isinstance(a, np.ndarray) else a + b
                               for a, b in zip(raw_first, raw_second)))
    for _ in range(2):
        counted.answers.clear()
        np.testing.assert_array_equal(cf.predict(both), expected)
        assert counted.answers == [0]


def test_categories_the_model_refuses_are_refused_as_before(categorical_models, counted):
    """A dictionary holding a label the model never saw: rows without it are read in C++; a row
    with it is missing for LightGBM and refused by XGBoost, with the Python reader's message."""
    colours = COLOURS + ["teal"]
    rng = np.random.default_rng(7)
    for library, cf in categorical_models.items():
        known, raw = _table(rng, 6, colours, SIZES, pa.int32(), pa.string())
        np.testing.assert_array_equal(cf.predict(known), _expected(cf, *raw))
        counted.answers.clear()
        known, raw = _table(rng, 6, colours, SIZES, pa.int32(), pa.string())
        np.testing.assert_array_equal(cf.predict(known), _expected(cf, *raw))
        assert counted.answers == [0]
        teal = pa.table({"score": [0.5], "colour": _dictionary(["teal"], colours, pa.int32()), "age": [30.0],
                         "size": _dictionary([20], SIZES, pa.int32())})
        if library == "lightgbm":
            np.testing.assert_array_equal(cf.predict(teal), _expected(cf, [30.0], ["teal"], [20], [0.5]))
        else:
            with pytest.raises(InputError, match="column .colour. has a category the model was not trained"):
                cf.predict(teal)
            with pytest.raises(InputError, match="column .colour. has a category the model was not trained"):  # (again: the C++ reader leaves it again)
                cf.predict(teal)


@pytest.mark.parametrize("indices", [[0, 5, None], [None, -1, 1], [2, 1, 4], [7]])
def test_dictionary_indices_outside_the_dictionary_are_refused(categorical_models, counted, indices):
    """Indices arrow makes only unchecked (``safe=False``): refused with the column's name in
    every reader (C++, Python, one row, pandas' Arrow-backed dictionaries, a record batch), never
    read as another label or as missing; the valid rows alone read as before."""
    colours = COLOURS[:4]
    colour = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int8()), pa.array(colours), safe=False)
    n = len(indices)
    table = pa.table({"score": [0.5] * n, "colour": colour, "age": [30.0] * n,
                      "size": _dictionary([20] * n, SIZES, pa.int32())})
    valid = [i for i, k in enumerate(indices) if k is None or 0 <= k < len(colours)]
    for cf in categorical_models.values():
        for given in (table, table.to_batches()[0], table.to_pandas(types_mapper=pd.ArrowDtype),
                      *[table.slice(i, 1) for i in range(n) if i not in valid]):
            with pytest.raises(InputError, match="column 'colour' is a dictionary column with index -?[0-9]+ for a "
                                                 "dictionary of 4 values"):
                cf.predict(given)
        if not valid:
            continue
        # (an index past int64's range, beside a null: named as it is, no warning of NumPy's cast)
        huge = pa.DictionaryArray.from_arrays(pa.array([0, 2 ** 63, None][:n] + [0] * max(0, n - 3), pa.uint64()),
                                              pa.array(colours), safe=False)
        if n >= 2:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with pytest.raises(InputError, match="with index 9223372036854775808 for"):
                    cf.predict(table.set_column(1, "colour", huge))
        rows = table.take(pa.array(valid, pa.int64()))
        np.testing.assert_array_equal(cf.predict(rows), _expected(
            cf, [30.0] * len(valid), [None if indices[i] is None else colours[indices[i]] for i in valid],
            [20] * len(valid), [0.5] * len(valid)))


def test_tables_in_threads_with_their_own_dictionaries(categorical_models, counted):
    cf = categorical_models["lightgbm"]

    def work(k):
        rng = np.random.default_rng(k)
        colours = [COLOURS[i] for i in rng.permutation(len(COLOURS))]
        for n in (1, 3, 50) * 4:
            table, raw = _table(rng, n, colours, SIZES, pa.int8(), pa.string())
            np.testing.assert_array_equal(cf.predict(table), _expected(cf, *raw))
    errors = errors_in_threads(work, list(range(4)))
    assert not errors, errors[0]
    assert 0 in counted.answers


def test_the_module_refuses_bad_arguments(module):
    plan = module.plan(2, [(0, 0, pa.float64().id)], [(1, 1, pa.int8().id, pa.string().id)])
    table = pa.table({"x": [1.0, 2.0], "c": _dictionary(["a", "b"], ["a", "b"], pa.int8())})
    with pytest.raises(TypeError, match="Table"):
        module.read(plan, table.to_batches()[0], np.empty((2, 2)))
    for out in (np.empty((3, 2)), np.empty((2, 3)), np.empty((2, 2), dtype=np.int64), np.empty(4)):
        with pytest.raises(ValueError, match="out"):
            module.read(plan, table, out)
    out = np.empty((2, 2))
    assert module.read(plan, table, out) == 1  # (no codes given for the dictionary yet)
    with pytest.raises(ValueError, match="lut"):
        module.set_labels(plan, 0, table.column("c").chunk(0).dictionary, np.zeros(2), None)
    with pytest.raises(IndexError):
        module.set_labels(plan, 1, table.column("c").chunk(0).dictionary, np.zeros(3), None)
    module.set_labels(plan, 0, pa.array(["a", "b"]), np.array([5.0, 6.0, np.nan]), None)
    assert module.read(plan, table, out) == 0
    np.testing.assert_array_equal(out, [[1.0, 5.0], [2.0, 6.0]])
    assert module.read(plan, table.select(["c", "x"]), out) == 1  # (types other than the plan's)
    with pytest.raises(ValueError, match="feature"):
        module.plan(2, [(0, 2, pa.float64().id)], [])
    # string and labelled columns, and their setters
    with pytest.raises(ValueError, match="string type"):
        module.plan(2, [], [], None, [], [(0, 0, pa.int32().id)])
    with pytest.raises(ValueError, match="feature"):
        module.plan(2, [], [], None, [(0, 5, pa.int32().id)])
    strings = module.plan(2, [], [], None, [(1, 1, pa.int64().id)], [(0, 0, pa.string().id)])
    for setter, labels in ((module.set_string_codes, ["a"]), (module.set_number_codes, [1.0]),
                           (module.set_label_codes, ["a"])):
        with pytest.raises(IndexError, match="no .* column 1"):
            setter(strings, 1, labels, False)
    with pytest.raises(TypeError, match="str"):
        module.set_string_codes(strings, 0, ["a", 2], False)
    with pytest.raises(TypeError):
        module.set_number_codes(strings, 0, ["a"], False)
    pair = pa.table({"s": ["a", "zz"], "n": [7, 8]})
    assert module.read(strings, [pair.column(0), pair.column(1)], out) == 1  # (no labels given yet)
    module.set_string_codes(strings, 0, ["zz", "a", "zz"], False)
    module.set_number_codes(strings, 0, [8.0, 7.0], False)
    assert module.read(strings, [pair.column(0), pair.column(1)], out) == 0
    np.testing.assert_array_equal(out, [[1.0, 1.0], [0.0, 0.0]])
    # streams: a capsule of another kind, one read already
    with pytest.raises(ValueError):
        module.read_stream(None, object(), out)
    capsule = pair.__arrow_c_stream__()
    assert isinstance(module.read_stream(None, capsule, out), pa.Table)
    with pytest.raises(ValueError, match="read already"):
        module.read_stream(None, capsule, out)


def test_same_values_tells_what_arrows_equals_does_or_leaves_it(module):
    """``same_values`` (pandas' categories held by arrow, compared by value): True or False as
    arrow's ``equals`` says, None where it cannot tell (nulls, several chunks, other types)."""
    labels = pa.chunked_array([["red", "green", "blue"]])
    cases = [(pa.chunked_array([["red", "green", "blue"]]), True), (pa.chunked_array([["red", "blue", "green"]]), False),
             (pa.chunked_array([["red", "green"]]), False), (pa.array(["red", "green", "blue"]), True),
             (pa.chunked_array([["x", "red", "green", "blue"]]).slice(1), True)]
    for other, expected in cases:
        assert module.same_values(labels, other) is expected
        assert labels.equals(other if isinstance(other, pa.ChunkedArray) else pa.chunked_array([other])) is expected
    assert module.same_values(pa.chunked_array([[1, 2, 3]]), pa.chunked_array([[1, 2, 3]])) is True
    assert module.same_values(pa.chunked_array([[1, 2, 3]]), pa.chunked_array([[1, 2, 4]])) is False
    for other in (pa.chunked_array([["red"], ["green", "blue"]]), pa.chunked_array([["red", None, "blue"]]),
                  pa.chunked_array([["red", "green", "blue"]], type=pa.large_string()), pa.chunked_array([[1, 2, 3]]),
                  "red"):
        assert module.same_values(labels, other) is None


def test_a_table_matches_its_plan_by_names_and_kinds(module):
    """``matches``: the same names and kinds in the same order (a table made anew each call, as
    arrow's own schema comparison tells), nothing else."""
    def table(x=pa.float64(), c=pa.int8(), labels=pa.string(), names=("x", "c"), extra=False):
        columns = {names[0]: pa.array([1.0, 2.0], type=x),
                   names[1]: pa.DictionaryArray.from_arrays(pa.array([0, 1], type=c), pa.array(["a", "b"], type=labels))}
        if extra:
            columns["y"] = pa.array([1, 2])
        return pa.table(columns)

    columns = [("x", pa.float64().id, -1, -1), ("c", pa.dictionary(pa.int8(), pa.string()).id, pa.int8().id,
                                                  pa.string().id)]
    plan = module.plan(2, [(0, 0, pa.float64().id)], [(1, 1, pa.int8().id, pa.string().id)], columns)
    assert module.matches(plan, table())
    for other in (table(x=pa.float32()), table(c=pa.int16()), table(labels=pa.large_string()), table(names=("c", "x")),
                  table(names=("x", "d")), table(extra=True), table().select(["x"]), table().select(["c", "x"])):
        assert not module.matches(plan, other)
        assert not other.schema.equals(table().schema)  # (arrow's own comparison agrees)
        # read with ``check``: 2, and nothing written
        out = np.full((other.num_rows, 2), 7.0)
        assert module.read(plan, other, out, True) == 2 and (out == 7.0).all()
    # The schema matched last is kept, so its tables are not compared again: tables made with
    # that schema object match, and tables of other schemas after them are still refused.
    first = table()
    assert module.matches(plan, first)
    same_schema = pa.table({"x": pa.array([5.0], pa.float64()), "c": pa.DictionaryArray.from_arrays(
        pa.array([1], pa.int8()), pa.array(["a", "b"]))}, schema=first.schema)
    assert same_schema.schema is first.schema or same_schema.schema.equals(first.schema)
    assert module.matches(plan, same_schema) and module.matches(plan, first)
    for other in (table(x=pa.float32()), table(names=("c", "x")), table().select(["x"])):
        assert not module.matches(plan, other)
    assert not module.matches(module.plan(2, [], []), table())  # (a plan without columns matches nothing)
    assert module.read(module.plan(2, [], []), table(), np.empty((2, 2)), True) == 2
    # the same columns: compared, then read as without the check
    checked, unchecked = np.full((2, 2), 7.0), np.full((2, 2), 7.0)
    assert module.read(plan, table(), checked, True) == module.read(plan, table(), unchecked) == 1  # (no codes yet)
    plan = module.plan(2, [(0, 0, pa.float64().id)], [], [("x", pa.float64().id, -1, -1)])
    assert module.read(plan, table().select(["x"]), checked, True) == 0 and checked[:, 0].tolist() == [1.0, 2.0]
    with pytest.raises(TypeError):
        module.matches(plan, table().to_batches()[0])


def test_unbuildable_or_turned_off_leaves_the_python_reader(categorical_models, monkeypatch, tmp_path):
    monkeypatch.setenv("SILVANFORGE_ARROW_NATIVE", "0")
    with pytest.raises(arrow_native.NativeUnavailable, match="turned off"):
        arrow_native.load(tmp_path)
    monkeypatch.delenv("SILVANFORGE_ARROW_NATIVE")
    monkeypatch.setattr(arrow_native, "_compiler", lambda: "/bin/false")
    with pytest.raises(arrow_native.NativeUnavailable, match="false failed"):
        arrow_native.load(tmp_path / "fresh")
    assert not [p for p in os.listdir(tmp_path / "fresh")]  # (nothing half-built left)
    # the process's reader: None where it cannot be had, and tables are read as before
    monkeypatch.setattr(arrow_native, "_NATIVE", FirstUse(lambda: arrow_native.load(), "the reader"))
    monkeypatch.setattr(arrow_native, "load", lambda: (_ for _ in ()).throw(arrow_native.NativeUnavailable("no")))
    assert arrow_native.reader(wait=True) is None
    cf = categorical_models["lightgbm"]
    table, raw = _table(np.random.default_rng(1), 9, COLOURS, SIZES, pa.int8(), pa.string())
    np.testing.assert_array_equal(cf.predict(table), _expected(cf, *raw))


def test_a_file_others_could_write_is_built_again(tmp_path):
    """The cache of the C++ readers (a module of a few lines here, built as they are: theirs
    take 10 s a build) rebuilds a module another user could have written, and refuses a
    directory others can write."""
    from silvanforge.inputs.native import NativeUnavailable, compiler, load_module

    source = tmp_path / "tiny.cpp"
    source.write_text('#include <Python.h>\nstatic PyModuleDef def_ = {PyModuleDef_HEAD_INIT, "tiny", nullptr, -1};\n'
                      'extern "C" __attribute__((visibility("default"))) PyObject* PyInit_tiny() '
                      '{ return PyModule_Create(&def_); }\n')
    directory = tmp_path / "cache"
    try:
        built = load_module(source, "tiny", directory, compiler(), [], [])
    except NativeUnavailable as exc:
        pytest.skip(f"no C++ module can be built here: {exc}")
    path = built.__file__
    os.chmod(path, 0o777)
    with open(path, "ab") as planted:
        planted.write(b"planted")
    load_module(source, "tiny", directory, compiler(), [], [])
    assert os.stat(path).st_mode & 0o777 == 0o700
    with open(path, "rb") as built_again:
        assert not built_again.read().endswith(b"planted")
    os.chmod(directory, 0o777)
    with pytest.raises(InputError, match="writable by other users"):
        load_module(source, "tiny", directory, compiler(), [], [])


@pytest.mark.parametrize("n", [1, 6, 2100])
def test_pandas_frames_of_arrow_backed_numbers_equal_the_array(number_models, counted, n, monkeypatch):
    """A pandas frame whose columns are Arrow-backed numbers of every type (pd.ArrowDtype, nulls
    pd.NA), sliced, in any column order, made anew each call, beside NumPy and nullable columns:
    its Arrow-backed columns read in C++, the rows those of the array."""
    rng = np.random.default_rng(n + 1)
    columns, X = _numbers(rng, n + 5)
    frame = pd.DataFrame({name: pd.Series(column.to_pandas(types_mapper=pd.ArrowDtype))
                          for name, column in zip(NUMBER_TYPES, columns)})
    shuffled = [NUMBER_TYPES[i] for i in rng.permutation(len(NUMBER_TYPES))]
    mixed = frame.copy()
    mixed["float64"] = X[:, NUMBER_TYPES.index("float64")]  # a NumPy column
    mixed["int16"] = pd.array(X[:, NUMBER_TYPES.index("int16")], dtype="Float64")  # a nullable one, pd.NA missing
    for cf in number_models:
        for got, rows in ((frame.iloc[:n], X[:n]), (frame[shuffled].iloc[5:], X[5:]), (mixed, X),
                          (frame.copy(), X)):
            assert str(got.dtypes.iloc[0]).endswith("[pyarrow]")
            counted.answers.clear()
            np.testing.assert_array_equal(cf.predict(got), cf.predict(rows))
            assert counted.answers == [0]
    # without the reader: pandas' own conversions, the same rows
    before = cf.predict(frame)
    monkeypatch.setattr(counted, "read", lambda *args: 1)
    np.testing.assert_array_equal(cf.predict(frame), before)


def test_a_refused_cache_is_said_once_and_a_fork_asks_again(monkeypatch):
    monkeypatch.setattr(arrow_native, "_NATIVE", FirstUse(lambda: arrow_native.load(), "the C++ reader of arrow tables"))

    def refused(cache=None):
        raise InputError("/somewhere: writable by other users; refusing to keep or load code there")
    monkeypatch.setattr(arrow_native, "load", refused)
    with pytest.warns(sf.errors.CacheWarning, match="writable by other users"):
        assert arrow_native.reader(wait=True) is None
    # a child forked while the build's thread ran (it has no such thread) starts its own
    native = arrow_native._NATIVE
    native.found.clear()
    native.after_fork()
    assert native.build is None
    native.found.append("found")
    native.build = "running"
    native.after_fork()  # (known already: nothing to ask)
    assert native.build == "running"


def test_a_process_that_ends_before_its_build_leaves_the_module_built(module, tmp_path):
    """The compile outlives a process that reads one table and ends: the next finds the module."""
    import subprocess
    import sys
    import time

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    directory = tmp_path / "silvanforge" / "arrow-rows"
    # (the process starts the build and ends as soon as the compiler runs)
    script = ("import os, sys, time\n"
              "from silvanforge.inputs import arrow_native\n"
              "arrow_native.reader()\n"
              "while not (os.path.isdir(sys.argv[1]) and [p for p in os.listdir(sys.argv[1]) if p.endswith('.part')]):\n"
              "    time.sleep(0.01)\n")
    subprocess.run([sys.executable, "-c", script, str(directory)], env=env, check=True, timeout=120)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not [p for p in os.listdir(directory) if p.endswith(".so")]:
        time.sleep(0.5)
    built = [p for p in os.listdir(directory) if p.endswith(".so")]
    assert built and not [p for p in os.listdir(directory) if p.endswith(".part")]
    assert arrow_native.load(directory).read is not None


def test_a_frames_blocks_walked_in_cpp_key_it_as_pandas_does(module, number_models, monkeypatch):
    """``arrow_blocks``: each one-column block of Arrow-backed numbers by its type id and column,
    the others (NumPy, nullable, Arrow strings) left to the caller; a frame keyed so reads as the
    Python key reads it, with the module and without."""
    rng = np.random.default_rng(9)
    columns, X = _numbers(rng, 7)
    frame = pd.DataFrame({name: pd.Series(column.to_pandas(types_mapper=pd.ArrowDtype))
                          for name, column in zip(NUMBER_TYPES, columns)})
    frame["float64"] = X[:, NUMBER_TYPES.index("float64")]  # NumPy
    frame["int16"] = pd.array(X[:, NUMBER_TYPES.index("int16")], dtype="Float64")  # nullable
    frame["label"] = pd.array(["a"] * 7, dtype=pd.ArrowDtype(pa.string()))  # Arrow strings
    frame["colour"] = pd.Categorical(["red"] * 7)  # pandas categories: by their class where it is given
    blocks = frame._mgr.blocks
    for categorical in (None, pd.Categorical):
        kinds, where, arrays, others = module.arrow_blocks(*[blocks] + [categorical] * (categorical is not None))
        kinds, where = np.frombuffer(kinds, dtype=np.int32), np.frombuffer(where, dtype=np.int32)
        for i, block in enumerate(blocks):
            arrow = getattr(block.dtype, "pyarrow_dtype", None)
            if arrow is not None and not pa.types.is_string(arrow):
                assert kinds[i] == arrow.id and where[i] == block.mgr_locs.as_array[0]
                assert arrays[i] is block.values._pa_array and i not in others
            elif categorical is not None and type(block.values) is categorical:
                assert kinds[i] == -2 and where[i] == block.mgr_locs.as_array[0] and arrays[i] is None
                assert i not in others
            else:
                assert kinds[i] == -1 and where[i] == -1 and arrays[i] is None and i in others
    assert module.arrow_blocks(()) == (b"", b"", [], [])
    rows = frame.drop(columns=["label", "colour"])
    for cf in number_models:
        expected = cf.predict(X)
        with_module = cf.predict(rows)
        monkeypatch.setattr(arrow_native, "reader", lambda wait=False: None)
        np.testing.assert_array_equal(cf.predict(rows), expected)
        np.testing.assert_array_equal(with_module, expected)
        monkeypatch.undo()


def test_a_frame_of_the_last_names_and_other_blocks_is_read_as_itself(module, counted):
    """A pandas frame of Arrow-backed numbers and categories whose blocks are those the last
    frame's plan holds is read in one C++ walk (``read_blocks``), its categories mapped as they
    are (another order); one of the same names whose blocks hold other columns (made by
    ``insert``), other types, a NumPy column, strings where categories were is read as itself,
    not as the last one's blocks; a Series is not a frame."""
    rng = np.random.default_rng(4)
    names = [f"f{i}" for i in range(11)] + ["colour"]
    X = rng.normal(size=(600, 12))
    X[:, 11] = rng.integers(0, len(COLOURS), 600)
    train = pd.DataFrame(X, columns=names).assign(colour=pd.Categorical.from_codes(X[:, 11].astype(int), COLOURS))
    cf = sf.compile(xgb.XGBRegressor(n_estimators=6, max_depth=4, enable_categorical=True, max_cat_to_onehot=1).fit(
        train, X[:, :11].sum(axis=1) + X[:, 11] % 3))
    rows = X[:3].astype(np.float32)
    expected = cf.predict(rows)

    def arrow(j, type_=pa.float32()):
        return pd.array(pa.array(rows[:, j], type=type_), dtype=pd.ArrowDtype(type_))

    def colours(order=COLOURS):
        return pd.Categorical([COLOURS[int(c)] for c in rows[:, 11]], categories=order)

    def frame(**changed):
        return pd.DataFrame({n: changed.get(n, arrow(j) if j < 11 else colours()) for j, n in enumerate(names)})

    for _ in range(2):
        np.testing.assert_array_equal(cf.predict(frame()), expected)
    for again in (frame(), frame(colour=colours(COLOURS[::-1]))):
        counted.answers.clear()
        np.testing.assert_array_equal(cf.predict(again), expected)
        assert counted.answers == [0]  # (one walk read it)
    inserted = frame().drop(columns="f0")
    inserted.insert(0, "f0", arrow(0))
    assert [b.mgr_locs.as_array[0] for b in inserted._mgr.blocks] != list(range(12))
    others = (inserted, frame(f1=arrow(1, pa.float64())), frame(f1=rows[:, 1]),
              frame(colour=colours().astype(object)), frame(colour=colours().astype(str)))
    for other in others + (frame(), inserted):
        np.testing.assert_array_equal(cf.predict(other), expected)
    cf.predict(frame())  # (the last plan a frame's)
    with pytest.raises(InputError):  # (a Series of one column: not rows of 12 features)
        cf.predict(frame()["f0"])


def test_blocks_a_list_whose_items_change_while_walked_are_walked_as_they_were(module):
    """``arrow_blocks`` and ``read_blocks`` walk a sequence of their own: a list emptied by a
    block's attribute read (Python code) meanwhile is no freed item read."""
    chunked = pa.chunked_array([pa.array(np.arange(3, dtype=np.float32))])

    class Placement:
        indexer = slice(0, 1, 1)

    class Values:
        _pa_array = chunked

    blocks: list = []

    class Block:
        _mgr_locs = Placement()

        @property
        def values(self):
            blocks.clear()
            return Values()

    blocks[:] = [Block(), Block()]
    kinds, where, arrays, others = module.arrow_blocks(blocks, pd.Categorical)
    assert np.frombuffer(kinds, np.int32).tolist() == [pa.float32().id] * 2 and arrays == [chunked, chunked]
    blocks[:] = [Block(), Block()]
    out = np.zeros((3, 1), np.float32)
    plan = module.plan(1, [(1, 0, pa.float32().id)], [])
    assert module.read_blocks(plan, blocks, kinds, where, pd.Categorical, out) == 0
    assert out[:, 0].tolist() == [0.0, 1.0, 2.0]


SHAPES = ["round", "square", "long triangle", "star-shaped with many points"]  # (views: inline and not)


@pytest.fixture(scope="module")
def string_models():
    """Models whose categorical features hold string labels alone (a polars frame of them is read
    as its stream throughout)."""
    rng = np.random.default_rng(5)
    n = 900
    df = pd.DataFrame({"age": rng.normal(40, 12, n),
                       "colour": pd.Categorical(rng.choice(COLOURS, n), categories=COLOURS),
                       "shape": pd.Categorical(rng.choice(SHAPES, n), categories=SHAPES),
                       "score": rng.uniform(-1, 1, n).astype(np.float32)})
    y = df.age / 12 + df.colour.isin(["red", "blue"]) * 1.5 + (df["shape"] == "star-shaped with many points") \
        + df.score + rng.normal(0, .3, n)
    return _both_models(df, (y > y.median()).astype(int))


_string_rows = _expected  # (age, colour, shape, score: the same array of the model's codes)


def _polars_frame(pl, rng, n, kind, colours=COLOURS, order=("age", "colour", "shape", "score")):
    """A polars frame as its readers make them (missing values null), its labels as ``kind``
    ("enum": an Enum of the labels in another order; "categorical")."""
    age = [None if rng.random() < 0.1 else float(v) for v in rng.normal(40, 12, n)]
    colour = [None if rng.random() < 0.15 else c for c in rng.choice(colours, n).tolist()]
    shape = [None if rng.random() < 0.15 else c for c in rng.choice(SHAPES, n).tolist()]
    score = [None if rng.random() < 0.1 else float(v) for v in rng.uniform(-1, 1, n).astype(np.float32)]
    label = (lambda labels: pl.Enum([labels[i] for i in rng.permutation(len(labels))])) if kind == "enum" else \
        (lambda labels: pl.Categorical)
    columns = {"age": pl.Series("age", age, pl.Float64), "colour": pl.Series("colour", colour, label(colours)),
               "shape": pl.Series("shape", shape, label(SHAPES)), "score": pl.Series("score", score, pl.Float32)}
    raw = (np.array([np.nan if v is None else v for v in age]), colour, shape,
           np.array([np.nan if v is None else v for v in score], dtype=np.float32))
    return pl.DataFrame([columns[c] for c in order]), raw


@pytest.mark.parametrize("kind", ["enum", "categorical"])
@pytest.mark.parametrize("n", [5, 64, 700, 2100])
def test_polars_frames_read_as_their_stream_equal_the_array(string_models, counted, kind, n):
    """Nulls, Enums of labels in another order, Categoricals (each frame its own labels, in the
    order they appear), columns in another order, slices (at an offset) and chunks: each equal to
    the array, read by the C++ reader from the stream once a call made its plan."""
    pl = pytest.importorskip("polars")
    rng = np.random.default_rng(n)
    for library, cf in string_models.items():
        for call in range(3):
            frame, raw = _polars_frame(pl, rng, n + 8, kind, order=("score", "colour", "age", "shape"))
            counted.answers.clear()
            np.testing.assert_array_equal(cf.predict(frame), _string_rows(cf, *raw), err_msg=library)
            np.testing.assert_array_equal(cf.predict(frame.slice(8)), _string_rows(cf, *(v[8:] for v in raw)))
            if call:
                assert counted.answers == [0, 0], library
        chunked = pl.concat([frame.head(3), frame.slice(3)], rechunk=False)
        assert chunked.n_chunks() == 2
        counted.answers.clear()
        np.testing.assert_array_equal(cf.predict(chunked), _string_rows(cf, *raw))
        assert counted.answers == [0]


def test_polars_labels_the_model_never_saw(string_models, counted):
    """A label the model never saw, in a frame's labels but in no row: read in C++; in a row:
    missing for LightGBM, refused by XGBoost with the Python reader's message."""
    pl = pytest.importorskip("polars")
    rng = np.random.default_rng(11)
    colours = COLOURS + ["teal"]
    for library, cf in string_models.items():
        for kind in ("enum", "categorical"):
            frame, raw = _polars_frame(pl, rng, 40, kind, colours=COLOURS)
            cf.predict(frame)  # (its plan)
            frame, raw = _polars_frame(pl, rng, 40, kind, colours=COLOURS)
            if kind == "enum":  # (teal among the Enum's labels, in no row)
                frame = frame.with_columns(pl.col("colour").cast(pl.String).cast(pl.Enum(colours[::-1])))
            counted.answers.clear()
            np.testing.assert_array_equal(cf.predict(frame), _string_rows(cf, *raw))
            assert counted.answers == [0], (library, kind)
            teal, raw = _polars_frame(pl, rng, 40, kind, colours=colours)
            if "teal" not in raw[1]:
                continue
            if library == "lightgbm":
                np.testing.assert_array_equal(cf.predict(teal), _string_rows(cf, *raw))
            else:
                with pytest.raises(InputError, match="column .colour. has a category the model was not trained"):
                    cf.predict(teal)


def test_polars_schemas_that_change_under_the_same_names(string_models, number_models, counted):
    """Another type under a column's name (integers for floats, an Enum for a Categorical, a
    string column, which the stream's reader does not read), and back: each read as itself."""
    pl = pytest.importorskip("polars")
    rng = np.random.default_rng(13)
    cf = string_models["lightgbm"]
    for kind in ("categorical", "enum", "categorical"):
        frame, raw = _polars_frame(pl, rng, 30, kind)
        np.testing.assert_array_equal(cf.predict(frame), _string_rows(cf, *raw))
        as_integers = frame.with_columns(pl.col("age").fill_null(0).round().cast(pl.Int32))
        np.testing.assert_array_equal(cf.predict(as_integers), _string_rows(
            cf, np.round(np.nan_to_num(raw[0])), *raw[1:]))
        as_strings = frame.with_columns(pl.col("colour").cast(pl.String), pl.col("shape").cast(pl.String))
        np.testing.assert_array_equal(cf.predict(as_strings), _string_rows(cf, *raw))
    # plain numbers with nulls of every integer and float type, past the stream's row count
    columns, X = _numbers(rng, 300)
    frame = pl.from_arrow(pa.Table.from_arrays(columns, names=NUMBER_TYPES))
    for model in number_models:
        for _ in range(2):
            counted.answers.clear()
            np.testing.assert_array_equal(model.predict(frame), model.predict(X))
        assert counted.answers == [0]


@pytest.mark.parametrize("value_type", ["string_view", "binary_view"])
def test_dictionaries_of_string_views(categorical_models, counted, value_type):
    if not hasattr(pa, value_type):
        pytest.skip(f"pyarrow without {value_type}")
    rng = np.random.default_rng(17)
    labels = getattr(pa, value_type)()
    cf = categorical_models["lightgbm"]
    for n in (1, 6, 80):
        colours = [COLOURS[i] for i in rng.permutation(len(COLOURS))]
        counted.answers.clear()
        for _ in range(2):
            table, raw = _table(rng, n, colours, SIZES, pa.int16(), labels if value_type == "string_view" else None)
            if value_type == "binary_view":  # (labels as bytes: not the model's, all missing)
                table = table.set_column(1, "colour", pa.DictionaryArray.from_arrays(
                    table.column("colour").chunk(0).indices, pa.array([c.encode() for c in colours], labels)))
                raw = (raw[0], [None] * n, raw[2], raw[3])
            np.testing.assert_array_equal(cf.predict(table), _expected(cf, *raw))
        assert counted.answers[-1] == 0


@pytest.mark.parametrize("size_type", ["int8", "uint16", "int64", "float64"])
def test_number_columns_of_integer_category_labels(categorical_models, counted, size_type):
    """A plain number column where the model's labels are numbers (pandas' integer categories,
    which arrow and polars hold as integers): read by the C++ reader as labels, nulls and NaN
    missing; a value the model never saw missing for LightGBM and refused by XGBoost; a column
    none of whose values is a label (codes) refused; an integer past 2**53 left to the Python
    reader."""
    rng = np.random.default_rng(19)
    colours = list(COLOURS)
    for library, cf in categorical_models.items():
        for n in (3, 70):
            for call in range(2):
                table, (age, colour, size, score) = _table(rng, n, colours, SIZES, pa.int32(), pa.string())
                table = table.set_column(3, "size", pa.array(size, type=getattr(pa, size_type)()))
                counted.answers.clear()
                np.testing.assert_array_equal(cf.predict(table), _expected(cf, age, colour, size, score))
                if call:
                    assert counted.answers == [0], library
        unseen = table.set_column(3, "size", pa.array([50] + SIZES[:1] * (n - 1), type=getattr(pa, size_type)()))
        if library == "lightgbm":
            np.testing.assert_array_equal(cf.predict(unseen), _expected(cf, age, colour, [None] + SIZES[:1] * (n - 1),
                                                                          score))
        else:
            with pytest.raises(InputError, match="column .size. has a category the model was not trained"):
                cf.predict(unseen)
        codes = table.set_column(3, "size", pa.array([0, 1, 2] * (n // 3) + [0] * (n % 3), type=getattr(pa, size_type)()))
        with pytest.raises(InputError, match="none of which is one of the labels"):
            cf.predict(codes)
        if size_type == "int64" and library == "lightgbm":
            huge = table.set_column(3, "size", pa.array([2 ** 60] + SIZES[:1] * (n - 1), type=pa.int64()))
            counted.answers.clear()
            np.testing.assert_array_equal(cf.predict(huge), _expected(cf, age, colour, [None] + SIZES[:1] * (n - 1),
                                                                        score))
            assert counted.answers == [1]


def test_polars_integer_category_labels_read_as_their_stream(categorical_models, counted):
    pl = pytest.importorskip("polars")
    rng = np.random.default_rng(23)
    cf = categorical_models["lightgbm"]
    for n in (9, 300):
        for call in range(2):
            table, (age, colour, size, score) = _table(rng, n, COLOURS, SIZES, pa.uint8(), pa.string())
            frame = pl.DataFrame({"age": age, "colour": pl.Series(colour, dtype=pl.Categorical),
                                  "size": pl.Series(size, dtype=pl.Int64), "score": score})
            counted.answers.clear()
            np.testing.assert_array_equal(cf.predict(frame), _expected(cf, age, colour, size, score))
            if call:
                assert counted.answers == [0]


def test_polars_frames_the_stream_leaves_to_the_general_reading(string_models, number_models, counted):
    """A frame made from an array (columns named by position: read by position, not by the
    stream's names), a half-float column under the usual names (arrow reads no half floats),
    a Boolean one: each read as before; the usual frame read from the stream again after them."""
    pl = pytest.importorskip("polars")
    rng = np.random.default_rng(29)
    _, X = _numbers(rng, 300)
    for model in number_models:
        np.testing.assert_array_equal(model.predict(pl.DataFrame(X)), model.predict(X))
    cf = string_models["lightgbm"]
    frame, raw = _polars_frame(pl, rng, 200, "categorical")
    for _ in range(2):
        np.testing.assert_array_equal(cf.predict(frame), _string_rows(cf, *raw))
    if hasattr(pl, "Float16"):
        half = frame.with_columns(pl.col("score").cast(pl.Float16))
        np.testing.assert_array_equal(cf.predict(half), _string_rows(
            cf, *raw[:3], raw[3].astype(np.float16).astype(np.float32)))
    flags = frame.with_columns(pl.col("age").is_null().alias("age"))
    np.testing.assert_array_equal(cf.predict(flags), _string_rows(cf, np.isnan(raw[0]).astype(float), *raw[1:]))
    np.testing.assert_array_equal(cf.predict(frame), _string_rows(cf, *raw))  # (its plan again)
    counted.answers.clear()
    np.testing.assert_array_equal(cf.predict(frame), _string_rows(cf, *raw))
    assert counted.answers == [0]


@pytest.mark.parametrize("string_type", ["string", "large_string", "string_view"])
def test_string_columns_of_labels_are_read_in_cpp(categorical_models, counted, string_type):
    """A table of strings where the model's labels are strings (JSON rows made a table), nulls
    missing: equal to the array and read by the C++ reader; a label the model never saw missing
    for LightGBM and refused by XGBoost; integer labels given as strings refused as before."""
    if not hasattr(pa, string_type):
        pytest.skip(f"pyarrow without {string_type}")
    rng = np.random.default_rng(31)
    strings = getattr(pa, string_type)()
    for library, cf in categorical_models.items():
        for n in (1, 6, 700):
            for call in range(2):
                table, (age, colour, size, score) = _table(rng, n, COLOURS, SIZES, pa.int8(), pa.string())
                table = table.set_column(1, "colour", pa.array(colour, strings))
                counted.answers.clear()
                np.testing.assert_array_equal(cf.predict(table), _expected(cf, age, colour, size, score))
                if call:
                    assert counted.answers[-1] == 0, library
        teal = table.set_column(1, "colour", pa.array(["teal"] + colour[1:], strings))
        if library == "lightgbm":
            np.testing.assert_array_equal(cf.predict(teal), _expected(cf, age, [None] + colour[1:], size, score))
        else:
            with pytest.raises(InputError, match="column .colour. has a category the model was not trained"):
                cf.predict(teal)
        words = table.set_column(3, "size", pa.array([str(s) for s in size], strings))
        with pytest.raises(InputError, match="column 'size' holds text such as"):
            cf.predict(words)


def test_pandas_and_polars_strings_of_labels(categorical_models, counted):
    """pandas' str columns (held by arrow), object columns of labels, polars' String columns:
    each equal to the array; records' frames whose number column is missing in every row given
    (object None) read as missing, text there refused."""
    pl = pytest.importorskip("polars")
    rng = np.random.default_rng(37)
    cf = categorical_models["lightgbm"]
    for n in (1, 5, 300):
        table, (age, colour, size, score) = _table(rng, n, COLOURS, SIZES, pa.int8(), pa.string())
        expected = _expected(cf, age, colour, size, score)
        records = [{"age": None if a != a else float(a), "colour": c, "size": s, "score": float(v)}
                   for a, c, s, v in zip(age, colour, size, score)]
        made = pd.DataFrame(records)
        as_str = made.astype({"colour": "str"})
        as_object = made.astype({"colour": object})
        for frame in (made, as_str, as_object, pl.DataFrame(records)):
            np.testing.assert_array_equal(cf.predict(frame), expected)
        if n >= 5 and pd.api.types.is_string_dtype(as_str["colour"].dtype) and \
                hasattr(as_str["colour"].array, "_pa_array"):
            counted.answers.clear()
            np.testing.assert_array_equal(cf.predict(as_str), expected)
            assert counted.answers == [0]
    one = pd.DataFrame([{"age": None, "colour": "red", "size": 20, "score": 0.5}])
    assert one["age"].dtype == object
    np.testing.assert_array_equal(cf.predict(one), _expected(cf, [np.nan], ["red"], [20], [0.5]))
    old = pd.DataFrame([{"age": "old", "colour": "red", "size": 20, "score": 0.5}])
    huge = one.astype({"age": object})
    huge.loc[0, "age"] = 10 ** 400  # (past float64: refused, not an OverflowError)
    for frame in (old, old.astype({"age": object}), huge):
        with pytest.raises(InputError, match="column 'age' holds ((str|object) values|an integer too large)"):
            cf.predict(frame)
    small = one.astype({"age": object})
    small.loc[0, "age"] = np.int8(40)  # (NumPy's numbers in an object column: numbers)
    np.testing.assert_array_equal(cf.predict(small), _expected(cf, [40.0], ["red"], [20], [0.5]))


def test_records_made_a_table_or_frame(categorical_models, counted):
    """Records as a service makes them a pyarrow table (a value missing in every record given: a
    column of nulls alone) or a pandas frame (integer labels as int64, a missing number None):
    equal to the array; the table read by the C++ reader."""
    rng = np.random.default_rng(41)
    for library, cf in categorical_models.items():
        for n in (1, 3, 40):
            _, (age, colour, size, score) = _table(rng, n, COLOURS, SIZES, pa.int8(), pa.string())
            age[:] = np.nan  # (missing in every record)
            size = [int(s) if s is not None else SIZES[0] for s in size]
            size[0] = None if n > 1 else size[0]
            records = [{"age": None, "colour": c, "size": s, "score": float(v)}
                       for c, s, v in zip(colour, size, score)]
            expected = _expected(cf, age, colour, size, score)
            table = pa.Table.from_pylist(records)
            assert pa.types.is_null(table.schema.field("age").type)
            for call in range(2):
                counted.answers.clear()
                np.testing.assert_array_equal(cf.predict(table), expected, err_msg=library)
                if call:
                    assert counted.answers == [0]
            np.testing.assert_array_equal(cf.predict(pd.DataFrame(records)), expected, err_msg=library)

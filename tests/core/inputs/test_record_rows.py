"""Records read by the C++ reader (``record_rows.cpp``, silvanforge.inputs.records) give exactly what the
Python reader gives, rows or errors: numbers of every plain type, None and NaN, labels known and
unknown (missing or refused as the library does), number labels, keys in any order, records
parsed one by one (JSON Lines), and anything not plain (another type, a key missing or unknown, a
dict subclass, a label past float64) left to the Python reader with its errors."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import silvanforge as sf
from silvanforge.errors import InputError
from silvanforge.inputs import records
from silvanforge.inputs.native import FirstUse, NativeUnavailable

pd = pytest.importorskip("pandas")
lgb = pytest.importorskip("lightgbm")
xgb = pytest.importorskip("xgboost")

# (ASCII: XGBoost keeps other labels garbled; labels past ASCII are read below by a plan alone)
COLOURS = ["red", "green", "blue", "amber", "a much longer label than eight bytes"]
SIZES = [3, 7, 11, 40]


@pytest.fixture(scope="module")
def module():
    found = records.native_reader(wait=True)
    if found is None:
        pytest.skip("the C++ reader of records cannot be built here (no compiler?)")
    return found


@pytest.fixture(scope="module")
def models():
    rng = np.random.default_rng(0)
    n = 600
    frame = pd.DataFrame({"age": rng.normal(40, 12, n), "colour": pd.Categorical(rng.choice(COLOURS, n), COLOURS),
                          "size": pd.Categorical(rng.choice(SIZES, n), SIZES), "score": rng.uniform(-1, 1, n)})
    y = frame.age / 12 + frame.colour.isin(["red", "blue"]) + (frame["size"] == 7) + frame.score + rng.normal(0, .3, n)
    return {
        # (unseen labels missing; numbers labels on "size")
        "lightgbm": sf.compile(lgb.LGBMRegressor(n_estimators=12, num_leaves=15, min_child_samples=5,
                                                 min_data_per_group=5, verbose=-1).fit(frame, y)),
        # (unseen labels refused)
        "xgboost": sf.compile(xgb.XGBRegressor(n_estimators=12, max_depth=4, enable_categorical=True,
                                               tree_method="hist").fit(frame, y)),
    }


def _both(cf, X, dtype=np.float64):
    """(the C++ reader's rows or error, the Python reader's), each a (kind, value) pair."""
    out = []
    for native in (True, False):
        readers = records.record_readers(cf.forest)
        if not native:
            readers._native = False
        try:
            out.append(("rows", records.records_matrix(X, cf.forest, readers=readers, dtype=np.dtype(dtype))))
        except InputError as exc:
            out.append(("error", str(exc)))
    return out


def _assert_same(cf, X, dtype=np.float64):
    (kind, native), (python_kind, python) = _both(cf, X, dtype)
    assert kind == python_kind, (native, python)
    if kind == "rows":
        # (the Python reader's rows are float64, which the caller converts: as the C++ reader writes them)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(native.astype(dtype), python.astype(dtype))
    else:
        assert native == python
    return native


def _read_natively(cf, X, dtype=np.float64):
    readers = records.record_readers(cf.forest)
    return readers.read(X, np.dtype(dtype))


VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.integers(-2 ** 70, 2 ** 70),
                   st.booleans(), st.none(), st.just(float("nan")), st.just(-0.0),
                   st.sampled_from(["red", "grün", "teal", "", "3", "a much longer label than eight bytes"]),
                   st.sampled_from([np.float64(1.5), np.int64(3), np.float32(0.25)]),
                   st.sampled_from([3, 7, 11, 40, 3.0, 7.0, 5, 2 ** 53, 2 ** 53 + 2]))


@st.composite
def _records(draw):
    names = ["age", "colour", "size", "score"]
    n = draw(st.integers(1, 6))
    out = []
    for _ in range(n):
        order = draw(st.permutations(names))
        record = {name: draw(VALUES) for name in order}
        if draw(st.integers(0, 9)) == 0:  # (a key missing, or one too many)
            if draw(st.booleans()):
                record.pop(order[0])
            else:
                record["weight"] = 1.0
        out.append(record)
    return out


@settings(max_examples=150, deadline=None)
@given(rows=_records(), library=st.sampled_from(["lightgbm", "xgboost"]),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_records_of_any_values_read_as_the_python_reader_reads_them(module, models, rows, library, dtype):
    cf = models[library]
    _assert_same(cf, rows, dtype)
    _assert_same(cf, rows[0], dtype)


def test_plain_records_are_read_in_cpp_and_equal_the_array(module, models):
    rng = np.random.default_rng(5)
    n = 300
    raw = {"age": rng.normal(40, 12, n), "colour": rng.choice(COLOURS + [None], n),
           "size": rng.choice(SIZES + [None, 7.0], n), "score": rng.uniform(-1, 1, n)}
    raw["age"][rng.random(n) < .2] = np.nan
    rows = [{k: (raw[k][i].item() if hasattr(raw[k][i], "item") else raw[k][i])
             for k in ("score", "size", "age", "colour")} for i in range(n)]
    for library, cf in models.items():
        cats = cf.forest.feature_categories
        X = np.array([[r["age"], np.nan if r["colour"] is None else cats[1].index(r["colour"]),
                       np.nan if r["size"] is None else cats[2].index(int(r["size"])), r["score"]] for r in rows])
        for dtype in (np.float32, np.float64):
            got = _read_natively(cf, rows, dtype)
            assert got is not None and got.dtype == dtype, library
            np.testing.assert_array_equal(got, X.astype(dtype))
        np.testing.assert_array_equal(cf.predict(rows), cf.predict(X))
        np.testing.assert_array_equal(cf.predict(rows[7]), cf.predict(X[7:8]))
        # records parsed one by one (JSON Lines: the same names, other objects) and as one document
        for parsed in ([json.loads(json.dumps(r)) for r in rows], json.loads(json.dumps(rows))):
            np.testing.assert_array_equal(_read_natively(cf, parsed), X)


def test_what_is_not_plain_is_left_to_the_python_reader(module, models):
    cf = models["lightgbm"]
    plain = {"age": 31.0, "colour": "red", "size": 7, "score": 0.5}
    assert _read_natively(cf, plain) is not None
    assert _read_natively(cf, [plain, {**plain, "colour": "green"}]) is not None

    class Record(dict):
        pass

    class Name(str):
        pass

    for odd in ({**plain, "age": np.float64(31.0)}, {**plain, "colour": "teal"}, {**plain, "size": "7"},
                {**plain, "size": 5}, {**plain, "size": 2 ** 60}, {**plain, "colour": 3.0}, {**plain, "age": "31"},
                {**plain, "age": 10 ** 400}, {**plain, "colour": True}, Record(plain),
                {Name("age") if k == "age" else k: v for k, v in plain.items()},
                {k: v for k, v in plain.items() if k != "age"}, {**plain, "weight": 1.0},
                {**plain, "colour": "\ud800"}):
        assert _read_natively(cf, [plain, odd]) is None, odd
        _assert_same(cf, [plain, odd])
        _assert_same(cf, odd)
    assert _read_natively(cf, []) is None and _read_natively(cf, (plain,)) is None
    # the Python reader's errors, as before
    with pytest.raises(InputError, match="record 1: 'age' is an integer too large for a number"):
        cf.predict([plain, {**plain, "age": -10 ** 400}])
    with pytest.raises(InputError, match="record 1: 'colour' is \"teal\", a category the model was not trained with"):
        models["xgboost"].predict([plain, {**plain, "colour": "teal"}])
    np.testing.assert_array_equal(cf.predict([plain, {**plain, "colour": "teal"}])[1:],
                                  cf.predict({**plain, "colour": None}))


def test_a_name_or_label_of_any_bytes(module):
    """Names and labels past ASCII, empty, with a NUL, repeated labels (the first code), and a
    model whose names repeat (no plan: the Python reader)."""
    names = ["ä", "", "b", "long name over eight bytes"]
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 4))
    cf = sf.compile(xgb.XGBRegressor(n_estimators=3, max_depth=3).fit(pd.DataFrame(X, columns=names), X[:, 0]))
    rows = [dict(zip(names[::-1], r[::-1])) for r in X[:20].tolist()]
    np.testing.assert_array_equal(_read_natively(cf, rows), X[:20])
    plan = module.plan(("a", "a"), [])
    assert plan is None
    plan = module.plan(("a\x00z", "b"), [(1, {"x": 0.0, "ÿ": 1.0, "x\x00y": 2.0}, None)])
    out = np.empty((3, 2))
    given = [{"a\x00z": 1.0, "b": "ÿ"}, {"b": "x", "a\x00z": None}, {"b": "x\x00y", "a\x00z": 2}]
    assert module.read(plan, given, out) == 0
    np.testing.assert_array_equal(out, [[1.0, 1.0], [np.nan, 0.0], [2.0, 2.0]])
    assert module.read(plan, [{"a": 1.0, "b": "x"}], np.empty((1, 2))) == 1  # (the name is all its bytes)
    assert module.read(plan, [{"a\x00z": 1.0, "b": "x\x00"}], np.empty((1, 2))) == 1
    numbers = module.plan(("a", "b"), [(1, {}, {0.0: 0.0, 2.5: 1.0})])
    out = np.empty((3, 2))
    assert module.read(numbers, [{"a": 1, "b": -0.0}, {"a": 2, "b": 2.5}, {"a": 3, "b": math.nan}], out) == 0
    np.testing.assert_array_equal(out, [[1.0, 0.0], [2.0, 1.0], [3.0, np.nan]])


def test_bad_arguments_are_refused(module):
    plan = module.plan(("a",), [])
    with pytest.raises(TypeError):
        module.plan(["a"], [])
    with pytest.raises(TypeError):
        module.plan((1,), [])
    with pytest.raises(TypeError):
        module.plan(("a",), [(0, ["x"], None)])
    with pytest.raises(ValueError):
        module.plan(("a",), [(3, {}, None)])
    with pytest.raises(ValueError, match="float32 or float64"):
        module.read(plan, [{"a": 1.0}], np.empty((1, 1), np.int64))
    with pytest.raises(ValueError, match="float32 or float64"):
        module.read(plan, [{"a": 1.0}, {"a": 2.0}], np.empty((1, 1)))
    with pytest.raises(ValueError, match="not C-contiguous"):
        module.read(plan, [{"a": 1.0}, {"a": 2.0}], np.empty((2, 2))[:, :1])
    read_only = np.empty((1, 1))
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        module.read(plan, [{"a": 1.0}], read_only)
    with pytest.raises(TypeError):
        module.read(plan, ({"a": 1.0},), np.empty((1, 1)))
    with pytest.raises(ValueError):
        module.read("not a plan", [{"a": 1.0}], np.empty((1, 1)))


def test_turned_off_or_unbuildable_leaves_the_python_reader(models, monkeypatch, tmp_path):
    monkeypatch.setenv("SILVANFORGE_RECORDS_NATIVE", "0")
    with pytest.raises(NativeUnavailable, match="turned off"):
        records.load_native(tmp_path)
    monkeypatch.delenv("SILVANFORGE_RECORDS_NATIVE")
    monkeypatch.setattr(records, "compiler", lambda: "/bin/false")
    with pytest.raises(NativeUnavailable, match="false failed"):
        records.load_native(tmp_path / "fresh")
    assert not os.listdir(tmp_path / "fresh")  # (nothing half-built left)
    monkeypatch.setattr(records, "_NATIVE", FirstUse(lambda: records.load_native(tmp_path / "fresh"), "the reader"))
    assert records.native_reader(wait=True) is None
    cf = models["lightgbm"]
    plain = {"age": 31.0, "colour": "red", "size": 7, "score": 0.5}
    assert records.record_readers(cf.forest).read([plain], np.dtype(np.float64)) is None
    np.testing.assert_array_equal(cf.predict(plain), cf.predict(pd.DataFrame(
        {"age": [31.0], "colour": pd.Categorical(["red"], COLOURS), "size": pd.Categorical([7], SIZES),
         "score": [0.5]})))

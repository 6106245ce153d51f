"""pandas frames read in one walk of the C++ reader (``read_blocks`` with ``frame_blocks`` and
``set_frame``, silvanforge.inputs.frames): NumPy blocks of every number dtype, object columns
(numbers with None, NaN and pd.NA; labels), pandas' str columns, Arrow-backed numbers and
categories, in any placement, give exactly what the same rows as an array of the model's codes
give; a frame of the same names whose blocks differ (another dtype, another placement) is read
the general way, and a value the walk does not vouch for is left to the Python reader, with
its errors."""

from __future__ import annotations

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.errors import InputError
from silvanforge.inputs import arrow_native
from support_common import errors_in_threads

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
lgb = pytest.importorskip("lightgbm")
xgb = pytest.importorskip("xgboost")

COLOURS = ["red", "green", "blue", "amber"]
NUMBERS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "bool"]
NAMES = ["colour", *NUMBERS, "extra"]


class Answers:
    """The reader, counting what ``read_blocks`` answered (0 read, 1 left to Python, 2 other blocks)."""

    def __init__(self, module):
        self.module, self.answers = module, []

    def __getattr__(self, name):
        return getattr(self.module, name)

    def read_blocks(self, *args):
        answer = self.module.read_blocks(*args)
        self.answers.append(answer)
        return answer


@pytest.fixture(scope="module")
def module():
    found = arrow_native.reader(wait=True)
    if found is None:
        pytest.skip("the C++ reader cannot be built here")
    return found


@pytest.fixture
def answers(module, monkeypatch):
    spy = Answers(module)
    monkeypatch.setattr(arrow_native, "reader", lambda wait=False: spy)
    return spy


def _values(rng, n):
    """Each number column's values (of its dtype's range) and the labels."""
    columns = {"colour": rng.choice(COLOURS, n).astype(object)}
    for name in NUMBERS:
        if name == "bool":
            columns[name] = rng.random(n) < 0.5
        elif name.startswith("float"):
            columns[name] = rng.normal(0, 100, n).astype(name)
        else:
            info = np.iinfo(name)
            columns[name] = rng.integers(max(info.min, -2 ** 62), min(info.max, 2 ** 62), n, dtype=name, endpoint=True)
            if name in ("int64", "uint64"):  # (past 2**53 too: through float64, as NumPy reads them)
                columns[name][: n // 2] = np.array([2 ** 62 + 1, 2 ** 53 + 1] * n, dtype=name)[: n // 2]
    columns["extra"] = rng.normal(size=n)
    return columns


@pytest.fixture(scope="module")
def models():
    rng = np.random.default_rng(0)
    n = 500
    values = _values(rng, n)
    frame = pd.DataFrame({k: (pd.Categorical(v, COLOURS) if k == "colour" else v.astype(np.float64))
                          for k, v in values.items()})
    y = frame[NUMBERS[:4]].sum(axis=1) / 1e9 + frame.colour.isin(["red"]) + frame.extra + rng.normal(size=n)
    return {"lightgbm": sf.compile(lgb.LGBMRegressor(n_estimators=10, num_leaves=15, verbose=-1).fit(frame, y)),
            "xgboost": sf.compile(xgb.XGBRegressor(n_estimators=10, max_depth=4, enable_categorical=True,
                                                   tree_method="hist").fit(frame, y))}


def _array(cf, values, n):
    cats = cf.forest.feature_categories
    X = np.empty((n, len(NAMES)))
    for f, name in enumerate(NAMES):
        column = values[name]
        X[:, f] = [np.nan if v is None or v is pd.NA or v != v else cats[f].index(v) for v in column] if f in cats \
            else [np.nan if v is None or v is pd.NA else float(v) for v in column.tolist()]
    return X


def _frames(values, n, rng):
    """Frames of the same rows made as users make them."""
    order = list(rng.permutation(NAMES))
    records = [{k: values[k][i].item() if hasattr(values[k][i], "item") else values[k][i] for k in order}
               for i in range(n)]
    typed = pd.DataFrame({k: values[k] for k in order})  # (a block a dtype, columns interleaved)
    yield "typed", typed
    yield "typed, categories", typed.astype({"colour": pd.CategoricalDtype(COLOURS[::-1])})
    yield "records", pd.DataFrame(records)  # (ints, floats and bools as NumPy blocks; labels str)
    objects = typed.astype({"extra": object, "colour": object})
    yield "object columns", objects
    arrow = typed.astype({"float64": pd.ArrowDtype(pa.float64()), "int32": pd.ArrowDtype(pa.int32())})
    yield "Arrow-backed beside NumPy", arrow


@pytest.mark.parametrize("n", [1, 3, 70, 2100])  # (2100: rows laid out in column order)
@pytest.mark.parametrize("library", ["lightgbm", "xgboost"])
def test_frames_of_every_block_kind_equal_the_array(models, answers, library, n):
    cf = models[library]
    rng = np.random.default_rng(n)
    values = _values(rng, n)
    expected = cf.predict(_array(cf, values, n))
    for what, frame in _frames(values, n, rng):
        # The first call plans, the next is walked; a copy (pandas may consolidate its blocks:
        # another layout, planned) and another copy, walked
        for again, X in enumerate([frame, frame, frame.copy(), frame.copy()]):
            answers.answers.clear()
            np.testing.assert_array_equal(cf.predict(X), expected, err_msg=f"{what}, call {again}")
            if again in (1, 3):
                assert answers.answers == [0], (what, again, answers.answers)


def test_object_columns_with_missing_values_and_labels(models, answers, monkeypatch):
    cf = models["lightgbm"]
    rng = np.random.default_rng(4)
    values = _values(rng, 6)
    frame = pd.DataFrame(values).astype({"extra": object, "colour": object})
    frame.loc[1, "extra"] = None
    frame.loc[2, "extra"] = pd.NA
    frame.loc[3, "extra"] = float("nan")
    frame.loc[4, "colour"] = None
    frame.loc[5, "colour"] = float("nan")
    values["extra"] = frame["extra"].to_numpy()
    values["colour"] = frame["colour"].to_numpy()
    expected = cf.predict(_array(cf, values, 6))
    for _ in range(2):
        np.testing.assert_array_equal(cf.predict(frame), expected)
    assert answers.answers[-1] == 0
    # values the walk leaves to the Python reader: the same rows, or its errors
    for column, value, answer in (("extra", np.float64(0.25), 1), ("extra", 7, 0), ("colour", "teal", 1)):
        odd = frame.copy()
        odd.loc[0, column] = value
        cf.predict(odd)  # (its layout planned: an assignment may move a column to a block of its own)
        answers.answers.clear()
        got = cf.predict(odd)
        assert answers.answers == [answer], (column, value, answers.answers)
        row = {**{k: v[0] for k, v in values.items()}, column: None if value == "teal" else value}
        np.testing.assert_array_equal(got[:1], cf.predict(_array(cf, {k: np.array([v], dtype=object)
                                                                     for k, v in row.items()}, 1)))
    for column, value, message in (("extra", "text", "holds object values"), ("extra", True, "holds object values"),
                                   ("extra", 10 ** 400, "holds an integer too large for a number"), ("colour", 3.5, None)):
        odd = frame.copy()
        odd.loc[0, column] = value
        if message is None:  # (a number among labels: the Python reader's rule, rows or error alike)
            outcomes = []
            for read in (lambda: cf.predict(odd), lambda: _python_read(cf, odd, monkeypatch)):
                try:
                    outcomes.append(("rows", read().tolist()))
                except InputError as exc:
                    outcomes.append(("error", str(exc)))
            assert outcomes[0] == outcomes[1], outcomes
            continue
        with pytest.raises(InputError, match=message):
            cf.predict(odd)
    with pytest.raises(InputError, match="category the model was not trained with"):
        models["xgboost"].predict(frame.assign(colour=["teal"] + list(frame.colour[1:])))


def _python_read(cf, X, monkeypatch):
    """``cf.predict(X)`` with every frame read by the Python readers."""
    with monkeypatch.context() as patched:
        patched.setattr(arrow_native, "reader", lambda wait=False: None)
        patched.setattr(cf, "_schemas", type(cf._schemas)(cf.forest))
        return cf.predict(X)


def test_a_frame_of_the_same_names_with_other_blocks_is_read_afresh(models, answers, monkeypatch):
    cf = models["lightgbm"]
    rng = np.random.default_rng(5)
    values = _values(rng, 4)
    expected = cf.predict(_array(cf, values, 4))
    frame = pd.DataFrame(values)
    for _ in range(2):
        np.testing.assert_array_equal(cf.predict(frame), expected)
    # another dtype under a name; the same dtypes placed otherwise (a column moved between blocks)
    for other in (frame.astype({"int8": np.float64}), frame.astype({"int16": np.int32, "int32": np.int16}),
                  frame.astype({"extra": np.float32}), frame.astype({"extra": object})):
        want = _python_read(cf, other, monkeypatch)
        answers.answers.clear()
        np.testing.assert_array_equal(cf.predict(other), want)
        assert 2 in answers.answers or answers.answers == [], answers.answers
        answers.answers.clear()
        np.testing.assert_array_equal(cf.predict(other), want)
        assert answers.answers == [0]
    # a frame whose blocks pandas has not consolidated (columns set one by one)
    loose = pd.DataFrame({"colour": values["colour"]})
    for name in NAMES[1:]:
        loose[name] = values[name]
    np.testing.assert_array_equal(cf.predict(loose), expected)
    np.testing.assert_array_equal(cf.predict(loose.copy()), expected)


def test_frame_blocks_classifies_and_bad_arguments_are_refused(module):
    frame = pd.DataFrame({"a": np.arange(3.0), "b": np.arange(3), "c": ["x", None, "z"],
                          "d": pd.Categorical(["x", "y", "x"]), "e": np.arange(3, dtype=np.float16),
                          "f": pd.array([1, None, 3], dtype=pd.ArrowDtype(pa.int64())), "g": [1.0, 2.0, 3.0]})
    frame["h"] = frame["c"].astype(object)
    blocks = frame._mgr.blocks
    kinds, columns, placements = module.frame_blocks(blocks, pd.Categorical, np.ndarray)
    kinds = np.frombuffer(kinds, np.int32)
    by_dtype = {str(b.dtype): (int(k), p) for b, k, p in zip(blocks, kinds, placements)}
    assert by_dtype["float64"][0] == -11 and by_dtype["int64"][0] == -15 and by_dtype["object"][0] == -23
    assert by_dtype["float16"][0] == -1  # (not read: the general way)
    assert by_dtype["category"][0] == -2 and by_dtype["int64[pyarrow]"][0] == pa.int64().id
    assert by_dtype["str"][0] in (pa.string().id, pa.large_string().id)
    for block, placement in zip(blocks, placements):  # (as pandas holds it, a NumPy block's)
        ix = block.mgr_locs.indexer
        if isinstance(block.values, np.ndarray) and block.dtype != np.float16:
            assert placement == ((ix.start, ix.stop, ix.step) if isinstance(ix, slice) else ix.tobytes())
        else:
            assert placement is None
    assert module.frame_blocks((), pd.Categorical, np.ndarray) == (b"", b"", [])
    plan = module.plan(2, [], [])
    with pytest.raises(ValueError, match="kind of NumPy numbers"):
        module.set_frame(plan, [(0, -1, [])], [], pd.NA)
    with pytest.raises(ValueError, match="out of range"):
        module.set_frame(plan, [(0, -11, [(0, 5)])], [], pd.NA)
    with pytest.raises(ValueError, match="out of range"):
        module.set_frame(plan, [], [(0, 0, 9, None)], pd.NA)
    with pytest.raises(TypeError):
        module.set_frame(plan, [], [(0, 0, 1, [1, 2])], pd.NA)  # (labels: str)
    with pytest.raises(TypeError):
        module.set_frame(plan, (), [], pd.NA)
    one = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]})
    kinds, columns, placements = module.frame_blocks(one._mgr.blocks, pd.Categorical, np.ndarray)
    module.set_frame(plan, [(0, -11, [(0, 1), (1, 0)])], [], pd.NA)
    out = np.empty((2, 2))
    assert module.read_blocks(plan, one._mgr.blocks, kinds, columns, pd.Categorical, out, np.ndarray, placements) == 0
    np.testing.assert_array_equal(out, [[3.0, 1.0], [4.0, 2.0]])
    with pytest.raises(ValueError, match="placements"):
        module.read_blocks(plan, one._mgr.blocks, kinds, columns, pd.Categorical, out, np.ndarray, [])
    # without NumPy's class and placements, NumPy blocks are never read: 2
    assert module.read_blocks(plan, one._mgr.blocks, kinds, columns, pd.Categorical, out) == 2
    # a block placed otherwise: 2
    assert module.read_blocks(plan, one[["b", "a"]].copy()._mgr.blocks, kinds, columns, pd.Categorical, out,
                              np.ndarray, [(1, 3, 1)]) == 2


SIZES = [3, 7, 11, 40]


@pytest.fixture(scope="module")
def sized():
    """LightGBM on a feature of integer categories ("size") and a number."""
    rng = np.random.default_rng(6)
    n = 400
    frame = pd.DataFrame({"size": pd.Categorical(rng.choice(SIZES, n), SIZES), "x": rng.normal(size=n)})
    y = (frame["size"] == 7) + frame.x + rng.normal(0, .1, n)
    cf = sf.compile(lgb.LGBMRegressor(n_estimators=8, num_leaves=7, min_data_per_group=5, min_child_samples=5,
                                      verbose=-1).fit(frame, y))
    assert cf.forest.feature_categories[0] == SIZES
    return cf


def test_number_columns_on_features_of_number_labels(sized, answers):
    """A frame of records with integer labels (pandas' integer categories, which records hold as
    plain numbers): looked up in the walk; a value the labels lack, or an integer past 2**53, is
    the Python reader's (missing, or a column none of whose values is a label refused)."""
    cf = sized
    for dtype in (np.int64, np.int16, np.uint8, np.float64):
        records = pd.DataFrame({"size": np.array([40, 3, 7], dtype=dtype), "x": [0.5, -1.0, 2.0]})
        expected = cf.predict(np.array([[3, 0.5], [0, -1.0], [1, 2.0]]))
        for _ in range(2):
            answers.answers.clear()
            np.testing.assert_array_equal(cf.predict(records), expected)
        assert answers.answers == [0], (dtype, answers.answers)
    records = pd.DataFrame({"size": np.array([40, 3, 7]), "x": [0.5, -1.0, 2.0]})
    cf.predict(records)
    for size, want in ((5, np.nan), (2 ** 60, np.nan)):
        odd = records.assign(size=[size, 3, 7])
        answers.answers.clear()
        np.testing.assert_array_equal(cf.predict(odd), cf.predict(np.array([[want, 0.5], [0, -1.0], [1, 2.0]])))
        assert answers.answers == [1], answers.answers
    with pytest.raises(InputError, match="none of which is one of the labels"):
        cf.predict(records.assign(size=[0, 1, 2]))  # (codes: refused, as before)
    with_nan = pd.DataFrame({"size": [40.0, np.nan, 7.0], "x": [0.5, -1.0, 2.0]})
    cf.predict(with_nan)
    answers.answers.clear()
    np.testing.assert_array_equal(cf.predict(with_nan), cf.predict(np.array([[3, 0.5], [np.nan, -1.0], [1, 2.0]])))
    assert answers.answers == [0]


@pytest.mark.parametrize("library", ["lightgbm", "xgboost"])
def test_categorical_columns_in_the_walk(models, answers, library):
    """Categorical columns read in the walk through the table of their last categories, compared
    by value (a frame made anew holds them anew); other categories (another order, more, fewer,
    one the model never saw) are read by the Python reader, whose new table the walk then reads."""
    cf = models[library]
    rng = np.random.default_rng(8)
    n = 5
    values = _values(rng, n)
    values["colour"][1] = "amber"
    expected = cf.predict(_array(cf, values, n))
    base = pd.DataFrame(values)
    frames = [base.astype({"colour": pd.CategoricalDtype(cats)})
              for cats in (COLOURS, COLOURS[::-1], COLOURS + ["teal"], ["amber", "red", "green", "blue"])]
    for i, frame in enumerate(frames):
        for again, X in enumerate([frame, frame, frame.copy(), frame.copy()]):
            answers.answers.clear()
            np.testing.assert_array_equal(cf.predict(X), expected, err_msg=f"categories {i}, call {again}")
            if again == 3:
                assert answers.answers == [0], (i, answers.answers)
    # the categories alternating between calls: each read right
    for frame in frames * 2:
        np.testing.assert_array_equal(cf.predict(frame.copy()), expected)
    # a category the model never saw in a row: missing (LightGBM) or refused (XGBoost)
    unseen = base.assign(colour=pd.Categorical(["teal"] + list(values["colour"][1:]), COLOURS + ["teal"]))
    cf.predict(unseen.iloc[1:])
    if library == "xgboost":
        with pytest.raises(InputError, match="category the model was not trained with"):
            cf.predict(unseen)
    else:
        want = _array(cf, {**values, "colour": np.array([None] + list(values["colour"][1:]), dtype=object)}, n)
        np.testing.assert_array_equal(cf.predict(unseen), cf.predict(want))


def test_integer_categories_in_the_walk(sized, answers):
    cf = sized
    cf._schemas = type(cf._schemas)(cf.forest)  # (no plan of another test's frames)
    rows = pd.DataFrame({"size": pd.Categorical([40, 3, 7], [40, 7, 3]), "x": [0.5, -1.0, 2.0]})
    expected = cf.predict(np.array([[3, 0.5], [0, -1.0], [1, 2.0]]))
    for X in (rows, rows, rows.copy(), rows.copy()):
        answers.answers.clear()
        np.testing.assert_array_equal(cf.predict(X), expected)
    assert answers.answers == [0]
    other = rows.assign(size=pd.Categorical([40, 3, 7], [3, 7, 40, 11]))
    answers.answers.clear()
    np.testing.assert_array_equal(cf.predict(other), expected)
    assert answers.answers == [0]  # (other categories: that column the Python reader's, which registers them)
    answers.answers.clear()
    np.testing.assert_array_equal(cf.predict(other.copy()), expected)
    assert answers.answers == [0]


def test_bool_bytes_other_than_one_are_true(models, answers):
    """A bool block's bytes are read as NumPy reads them (any nonzero byte True), not as C++'s
    bool of that byte."""
    cf = models["lightgbm"]
    rng = np.random.default_rng(10)
    values = _values(rng, 4)
    values["bool"] = np.array([2, 0, 1, 255], dtype=np.uint8).view(bool)
    frame = pd.DataFrame(values)
    expected = cf.predict(_array(cf, {**values, "bool": np.array([1, 0, 1, 1])}, 4))
    for _ in range(2):
        answers.answers.clear()
        np.testing.assert_array_equal(cf.predict(frame), expected)
    assert answers.answers == [0]


def test_labels_no_utf8_holds_are_left_to_python(answers):
    """A categorical feature whose labels UTF-8 cannot hold (a lone surrogate: the model's labels
    changed so after training, as no library here trains on them) is read the general way, not
    refused by the walk or the records' reader."""
    rng = np.random.default_rng(11)
    n = 300
    labels = ["red", "blue", "zzz"]
    frame = pd.DataFrame({"a": rng.normal(size=n), "c": pd.Categorical(rng.choice(labels, n), labels)})
    cf = sf.compile(lgb.LGBMRegressor(n_estimators=4, num_leaves=7, min_data_per_group=5, verbose=-1).fit(
        frame, frame.a + (frame.c == "red") + rng.normal(0, .1, n)))
    cf.forest.feature_categories[1][2] = "\ud800x"
    cf._schemas = type(cf._schemas)(cf.forest)
    rows = pd.DataFrame({"a": [0.5, 1.0], "c": pd.Series(["red", "blue"], dtype=object)})
    expected = cf.predict(np.array([[0.5, 0.0], [1.0, 1.0]]))
    for _ in range(3):
        np.testing.assert_array_equal(cf.predict(rows), expected)
    np.testing.assert_array_equal(cf.predict([{"a": 0.5, "c": "red"}, {"a": 1.0, "c": "blue"}]), expected)
    from silvanforge.inputs import records

    module = records.native_reader(wait=True)
    if module is not None:
        assert module.plan(("a", "b\ud800"), []) is None
        assert module.plan(("a", "c"), [(1, {"\ud800x": 0.0}, None)]) is None


def test_plans_made_by_threads_at_once_read_every_block(models, monkeypatch):
    """Two threads walking a new plan's first frame at once (the reader's plan made slowly, so
    that they interleave): the walk reads by a plan it configured itself, never by the other
    thread's plan of arrow columns alone (whose NumPy and object features it would not write)."""
    import threading
    import time

    module = arrow_native.reader(wait=True)
    if module is None:
        pytest.skip("the C++ reader cannot be built here")

    class Slow:
        calls = 0

        def __getattr__(self, name):
            return getattr(module, name)

        def plan(self, *args):
            Slow.calls += 1
            made = module.plan(*args)
            time.sleep(0.005 if Slow.calls % 2 else 0.03)
            return made

    rng = np.random.default_rng(12)
    values = _values(rng, 3)
    frame = pd.DataFrame(values).astype({"extra": object, "float64": pd.ArrowDtype(pa.float64())})
    for _ in range(4):
        cf = models["lightgbm"]
        cf._schemas = type(cf._schemas)(cf.forest)  # (no plan yet)
        expected = _python_read(cf, frame, monkeypatch)
        monkeypatch.setattr(arrow_native, "reader", lambda wait=False: None)
        cf.predict(frame)  # (the plan made, the walk not yet)
        monkeypatch.setattr(arrow_native, "reader", lambda wait=False: Slow())
        barrier = threading.Barrier(2)

        def work(_):
            barrier.wait()
            cf.predict(frame)

        assert errors_in_threads(work, [0, 1]) == []
        for _ in range(2):
            np.testing.assert_array_equal(cf.predict(frame.copy()), expected)
            np.testing.assert_array_equal(cf.predict(frame), expected)


def test_the_first_refused_column_is_named_as_without_the_walk():
    """Two categorical columns refused in one frame, one read by the walk and one in Python (its
    categories held as objects): the error names the column the Python reader names first."""
    rng = np.random.default_rng(13)
    n = 300
    frame = pd.DataFrame({"c": pd.Categorical(rng.choice(["a", "b"], n), pd.Index(["a", "b"], dtype=object)),
                          "k": pd.Categorical(rng.choice([1, 2], n), [1, 2]), "x": rng.normal(size=n)})
    cf = sf.compile(xgb.XGBRegressor(n_estimators=4, max_depth=3, enable_categorical=True, max_cat_to_onehot=1).fit(
        frame, frame.x + (frame.c == "a")))
    first = pd.DataFrame({"c": pd.Categorical(["a"], pd.Index(["a", "b"], dtype=object)),
                          "k": pd.Categorical([1], [1, 2]), "x": [.5]})
    cf.predict(first)
    cf.predict(first.copy())
    bad = pd.DataFrame({"c": pd.Categorical(["zz"], pd.Index(["a", "b", "zz"], dtype=object)),
                        "k": pd.Categorical([9], [1, 2, 9]), "x": [.5]})
    with pytest.raises(InputError, match="column 'c' has a category"):
        cf.predict(bad)


def test_a_block_class_changed_after_a_walk_is_read_as_it_now_is(module, monkeypatch):
    """The walk calls pandas' C getters of a block's values and placement directly, found once a
    class: a class given another ``values`` after that (a property here) is read through it, as
    Python reads it, and as before once it is restored."""
    from pandas.core.internals.blocks import ExtensionBlock

    rng = np.random.default_rng(3)
    n, names = 4, [f"c{i}" for i in range(12)]
    X = rng.normal(size=(n, len(names)))
    cf = sf.compile(xgb.XGBRegressor(n_estimators=8, max_depth=3).fit(pd.DataFrame(X, columns=names), X[:, 0] - X[:, 3]))
    frame = pd.DataFrame(X, columns=names).astype(pd.ArrowDtype(pa.float64()))
    assert all(type(b) is ExtensionBlock for b in frame._mgr.blocks)
    for _ in range(3):
        np.testing.assert_array_equal(cf.predict(frame), cf.predict(X))
    monkeypatch.setattr(ExtensionBlock, "values", property(
        lambda block: pd.array(np.full(n, 0.25), dtype=pd.ArrowDtype(pa.float64()))))
    for _ in range(2):
        np.testing.assert_array_equal(cf.predict(frame), cf.predict(np.full_like(X, 0.25)))
    monkeypatch.undo()
    np.testing.assert_array_equal(cf.predict(frame), cf.predict(X))


def test_frames_of_one_block_known_without_their_key_equal_the_array(monkeypatch):
    """A frame of one NumPy block (made from an array) is known by its names and its block's
    dtype: a frame that differs in either, or has another block besides, is read by its own plan,
    never by the last one's; frames of the same names and dtype, views and unpickled copies among
    them, are read without their key."""
    import pickle

    from silvanforge.inputs import pandas_frames

    read = []  # (what each frame read without its key answered: rows, or None)
    block_rows = pandas_frames._PandasPlan.block_rows
    monkeypatch.setattr(pandas_frames._PandasPlan, "block_rows",
                        lambda plan, *args: read.append(block_rows(plan, *args)) or read[-1])
    rng = np.random.default_rng(11)
    names = [f"x{i}" for i in range(7)]
    train = rng.normal(size=(300, len(names)))
    cf = sf.compile(xgb.XGBRegressor(n_estimators=8, max_depth=4).fit(
        pd.DataFrame(train, columns=names), train[:, 0] - 2 * train[:, 3] * train[:, 5]))
    X = np.round(rng.normal(size=(6, len(names))), 2)
    X[1, 3] = np.nan
    expected = cf.predict(X)
    frame = pd.DataFrame(X, columns=names)
    strided = pd.DataFrame(np.asfortranarray(X)[::-1], columns=names, copy=False)  # (a view: the block's rows strided)
    for rows in (frame, frame.copy(), frame.iloc[:1], pickle.loads(pickle.dumps(frame)), strided,
                 pd.DataFrame(X.astype(np.float32), columns=names), pd.DataFrame(X[:, ::-1], columns=names)):
        want = cf.predict(rows.to_numpy())
        for call in range(2):  # (the second call by the first's plan, without its key)
            read.clear()
            np.testing.assert_array_equal(cf.predict(rows), want)
            assert call == 0 or (len(read) == 1 and read[0] is not None), read
    np.testing.assert_array_equal(cf.predict(frame), expected)
    with pytest.raises(InputError, match="x0"):  # (one block of strings under the same names: refused as before)
        cf.predict(pd.DataFrame(X.astype(str), columns=names, dtype=object))
    # the names in another order; a column in a block of its own; then the first again
    np.testing.assert_array_equal(cf.predict(frame[names[::-1]]), expected)
    two = frame.fillna(0).round(0).astype({"x2": np.int64})  # (a block of floats, one of integers)
    np.testing.assert_array_equal(cf.predict(two), cf.predict(two.to_numpy(dtype=np.float64)))
    np.testing.assert_array_equal(cf.predict(frame), expected)

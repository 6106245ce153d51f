"""What users rely on from CompiledForest: any batch, dtype and order; errors; threads; saving."""

from __future__ import annotations

import pickle

import threading
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import make_forest, rows_for
from support_common import record_small_calls

import silvanforge as sf
from silvanforge.ir.hir import Forest, Op, Transform
from silvanforge.runtime import reference


@pytest.fixture(scope="module")
def forest():
    return make_forest()


@pytest.fixture(scope="module")
def compiled(forest):
    return sf.compile(forest)


@pytest.mark.parametrize("n", [0, 1, 2, 255, 256, 257, 1000, 5001])
def test_any_batch_size(forest, compiled, n):
    X = rows_for(forest, np.random.default_rng(n), n)
    got = compiled.predict(X)
    assert got.shape == (n, 3)
    np.testing.assert_array_equal(got, reference.predict(forest, X))


def test_compiled_batch_size_is_not_a_limit(forest):
    cf = sf.compile(forest, batch_size=64)
    X = rows_for(forest, np.random.default_rng(1), 1000)
    np.testing.assert_array_equal(cf.predict(X), reference.predict(forest, X))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("order", ["C", "F"])
def test_dtypes_and_orders(forest, compiled, dtype, order):
    X = rows_for(forest, np.random.default_rng(3), 700)
    if dtype is np.int32:
        X = np.nan_to_num(X, posinf=9, neginf=-9)
    X = np.asarray(X, dtype=dtype, order=order)
    np.testing.assert_array_equal(compiled.predict(X), reference.predict(forest, X))


def test_strided_views(forest, compiled):
    X = rows_for(forest, np.random.default_rng(4), 900)
    for view in (X[::3], X[::-1], np.asfortranarray(X)[100:400]):
        np.testing.assert_array_equal(compiled.predict(view), reference.predict(forest, view))


def test_output_margin_and_missing_value(forest, compiled):
    X = rows_for(forest, np.random.default_rng(5), 400)
    np.testing.assert_array_equal(compiled.predict(X, output_margin=True),
                                  reference.predict(forest, X, output_margin=True))
    # missing=0.0: zeros are treated as NaN, as XGBoost's DMatrix(missing=0.0) does.
    X0 = np.where(np.random.default_rng(6).random(X.shape) < 0.2, 0.0, X)
    expected = reference.predict(forest, np.where(X0 == 0.0, np.nan, X0))
    np.testing.assert_array_equal(compiled.predict(X0, missing=0.0), expected)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_threads_give_identical_results(forest, threads):
    cf = sf.compile(forest, threads=threads)
    X = rows_for(forest, np.random.default_rng(8), 3000)
    np.testing.assert_array_equal(cf.predict(X), reference.predict(forest, X))


def test_safe_from_many_threads(forest, compiled):
    X = rows_for(forest, np.random.default_rng(9), 2000)
    want = reference.predict(forest, X)
    errors = []

    def worker(seed):
        try:
            for _ in range(5):
                np.testing.assert_array_equal(compiled.predict(X, threads=2), want)
        except Exception as exc:  # collected: assertion errors in threads do not fail pytest
            errors.append(exc)

    _in_threads(worker, 8)
    assert not errors


def _in_threads(target, count: int) -> None:
    """``target(k)`` for k in 0..count-1, on that many threads at once."""
    threads = [threading.Thread(target=target, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.mark.parametrize("bad, message", [
    (np.zeros((4, 6)), "expects 5 features per row, got 6"),
    (np.zeros(5), "2-D array"),
    (np.zeros((2, 2, 5)), "2-D array"),
    (np.array([["a"] * 5]), "numeric"),
    (np.zeros((3, 5), dtype=complex), "real numbers"),
])
def test_bad_inputs_are_clear_errors(compiled, bad, message):
    with pytest.raises(sf.InputError, match=message):
        compiled.predict(bad)


def test_unknown_plugins_and_bad_options(forest):
    with pytest.raises(sf.PluginError, match="unknown representation 'nope'"):
        sf.compile(forest, rep="nope")
    with pytest.raises(sf.PluginError, match="unknown target 'tpu'"):
        sf.compile(forest, target="tpu")
    with pytest.raises(sf.InputError, match="batch_size must be a positive integer"):
        sf.compile(forest, batch_size=0)
    with pytest.raises(sf.InputError, match="threads must be a positive integer"):
        sf.compile(forest, threads=-1)


def test_save_and_load_roundtrip(tmp_path, forest, compiled):
    path = tmp_path / "m.forge"
    compiled.save(path)
    loaded = sf.load_compiled(path)
    X = rows_for(forest, np.random.default_rng(10), 500)
    np.testing.assert_array_equal(loaded.predict(X), compiled.predict(X))
    assert loaded.rep == compiled.rep and loaded.schedule == compiled.schedule


@pytest.mark.parametrize("differs", ["cpu", "generator"])
def test_saved_kernel_for_another_machine_is_rebuilt(tmp_path, forest, compiled, monkeypatch, differs):
    """Code saved on another CPU, or by another version of the CPU target's code generator (a
    development install changes it without a new version), is compiled again."""
    path = tmp_path / "m.forge"
    compiled.save(path)
    from silvanforge_target_cpu import jit

    real = jit.host_signature()
    monkeypatch.setattr(jit, "host_signature", lambda: {**real, differs: "something-else"})
    calls = []
    original = jit.compile_module
    monkeypatch.setattr(jit, "compile_module", lambda *a: calls.append(1) or original(*a))
    loaded = sf.load_compiled(path)
    assert calls, "a kernel built for another CPU must be recompiled, not loaded"
    X = rows_for(forest, np.random.default_rng(11), 300)
    np.testing.assert_array_equal(loaded.predict(X), reference.predict(forest, X))


def test_corrupt_or_foreign_artifacts(tmp_path, compiled):
    bad = tmp_path / "bad.forge"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(sf.ArtifactError, match="not a SilvanForge compiled model"):
        sf.load_compiled(bad)
    with pytest.raises(sf.ArtifactError, match="not found"):
        sf.load_compiled(tmp_path / "missing.forge")
    # Another model's forest under this artifact's fingerprint is detected.
    good = tmp_path / "good.forge"
    compiled.save(good)
    other = sf.compile(make_forest(seed=99))
    other_path = tmp_path / "other.forge"
    other.save(other_path)
    mixed = tmp_path / "mixed.forge"
    with zipfile.ZipFile(good) as zg, zipfile.ZipFile(other_path) as zo, zipfile.ZipFile(mixed, "w") as zm:
        for member in zg.namelist():  # every member this artifact has (a one-row form's too)
            zm.writestr(member, (zo if member == "forest.npz" else zg).read(member))
    with pytest.raises(sf.ArtifactError, match="forest.npz does not match the manifest"):
        sf.load_compiled(mixed)


def test_float64_models_accumulate_in_float64():
    forest = make_forest(num_outputs=1, dtype="float64")
    cf = sf.compile(forest)
    X = rows_for(forest, np.random.default_rng(12), 600)
    got = cf.predict(X, output_margin=True)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, reference.predict(forest, X, output_margin=True))


@pytest.mark.parametrize("options", [{}, {"rep": "bitvector"}, {"rep": "sparse"}, {"rep": "array"},
                                     {"rep": "reorg"}, {"schedule": "tree-parallel"}, {"tile_size": 3},
                                     {"batch_size": 1}])
def test_small_requests_take_the_lean_path_and_match_the_reference(forest, options):
    """1-16 rows of the kernel's dtype, C-ordered, go through the kernel's staging arrays (one
    foreign call a phase); the answers are the general path's (the reference's, but for
    tree-parallel's partial sums, which add in another order), from many threads at once too."""
    cf = sf.compile(forest, **options)
    assert cf._small_for is not None
    X = rows_for(forest, np.random.default_rng(31), 16).astype(cf.kernel.input_dtype)
    calls = []
    record_small_calls(cf, lambda rows, result: calls.append(len(rows)))
    exact = options.get("schedule") != "tree-parallel"
    for k in range(1, 17):
        general = cf.kernel.margins(X[:k], forest.num_outputs, 1)
        np.testing.assert_array_equal(cf.predict(X[:k], output_margin=True), general)
        if exact:
            np.testing.assert_array_equal(general, reference.predict(forest, X[:k], output_margin=True))
            np.testing.assert_array_equal(cf.predict(X[:k]), reference.predict(forest, X[:k]))
    assert calls == [k for k in range(1, 17) for _ in range(2 if exact else 1)]
    assert _hammered(cf, forest, X, 16, 200) == []
    # Fortran-ordered and strided rows are staged like C-ordered ones; rows of another dtype
    # are converted first and then take the lean path too; more rows go the general way, with
    # the same answers
    calls.clear()
    wide = X[:5].astype(np.float64) if X.dtype == np.float32 else X[:5].astype(np.float32)
    np.testing.assert_array_equal(cf.predict(np.asfortranarray(X[:5])), cf.predict(X[:5]))
    np.testing.assert_array_equal(cf.predict(X[:10:2]), cf.predict(X[:10:2].copy()))
    np.testing.assert_allclose(cf.predict(wide), reference.predict(forest, wide), rtol=1e-6)
    assert calls == [5, 5, 5, 5, 5]
    many = np.concatenate([X, X])
    np.testing.assert_array_equal(cf.predict(many)[16:], cf.predict(X))
    assert calls == [5, 5, 5, 5, 5, 16]
    # an unpickled array holds an equal dtype of another object (arrays sent between processes)
    pickled = pickle.loads(pickle.dumps(X[:5]))
    assert pickled.dtype is not X.dtype and pickled.dtype == X.dtype
    calls.clear()
    np.testing.assert_array_equal(cf.predict(pickled), cf.predict(X[:5]))
    assert calls == [5, 5]
    pd = pytest.importorskip("pandas")  # (an unpickled frame's block likewise)
    frame = pickle.loads(pickle.dumps(pd.DataFrame(X[:5])))
    np.testing.assert_array_equal(cf.predict(frame), cf.predict(X[:5]))
    assert calls == [5, 5, 5, 5]


@pytest.mark.parametrize("options", [{}, {"rep": "sparse"}, {"rep": "bitvector"}, {"schedule": "tree-parallel"}])
def test_one_thread_requests_of_hundreds_of_rows_take_the_lean_path_too(forest, options):
    """Calls of 17 to lean_rows rows on one thread (the compile option, or ``threads=1``) go
    through the lean path of the form answering them, its staging grown for them (from many
    threads at once too); their answers are the general path's: C- and Fortran-ordered rows,
    float64 rows converted first, margins and probabilities.  More threads, or more rows, go
    the general way."""
    from silvanforge.plan.bands import SMALL_ROWS, lean_rows

    one = sf.compile(forest, threads=1, **options)
    every = sf.compile(forest, threads=2, **options)
    most = lean_rows(np.dtype(one.main.input_dtype).itemsize * forest.num_features)
    assert most > SMALL_ROWS
    X = rows_for(forest, np.random.default_rng(5), most + 1).astype(one.main.input_dtype)
    calls = []
    record_small_calls(one, lambda rows, result: calls.append(len(rows)))
    record_small_calls(every, lambda rows, result: calls.append(len(rows)))
    exact = options.get("schedule") != "tree-parallel"
    for n in (17, 100, most):
        general = one.form_for(n).kernel.margins(X[:n], forest.num_outputs, 1)
        np.testing.assert_array_equal(one.predict(X[:n], output_margin=True), general)
        np.testing.assert_array_equal(one.predict(np.asfortranarray(X[:n]), output_margin=True), general)
        np.testing.assert_array_equal(every.predict(X[:n], threads=1, output_margin=True), general)
        if exact:
            np.testing.assert_array_equal(one.predict(X[:n]), reference.predict(forest, X[:n]))
            np.testing.assert_array_equal(one.predict(X[:n].astype(np.float64)), reference.predict(forest, X[:n]))
    assert calls == [n for n in (17, 100, most) for _ in range(5 if exact else 3)]
    calls.clear()
    every.predict(X[:100])
    one.predict(X)  # (most + 1 rows)
    assert calls == []
    assert _hammered(one, forest, X, most, 40) == []


def _hammered(cf, forest, X, most: int, calls: int) -> list:
    """Four threads at once each predicting margins of ``calls`` random draws of 1 to ``most`` of
    ``X``'s rows: the seeds of those that differed from the general path's (the kernel of the
    form answering them)."""
    errors = []

    def hammer(seed):
        rng = np.random.default_rng(seed)
        for _ in range(calls):
            k = int(rng.integers(1, most + 1))
            rows = X[rng.permutation(most)[:k]]
            if not np.array_equal(cf.predict(rows, output_margin=True),
                                  cf.form_for(k).kernel.margins(rows, forest.num_outputs, 1)):
                errors.append(seed)

    _in_threads(hammer, 4)
    return errors


def _chain_forest(values, dtype: str, transform: Transform) -> Forest:
    """One tree whose leaf k (rows with x0 = k) holds values[k]: margins chosen row by row
    (``values`` 2-D: a row of margins each, one vector leaf for every output)."""
    from silvanforge.ir.hir import Tree

    values = np.asarray(values, np.float64)
    values = values.reshape(len(values), -1)
    L, K = values.shape
    left = np.full(2 * L - 1, -1, np.int32)
    right = np.full(2 * L - 1, -1, np.int32)
    for i in range(L - 1):
        left[i], right[i] = L - 1 + i, i + 1 if i < L - 2 else 2 * L - 2
    feature = np.where(left >= 0, 0, -1).astype(np.int32)
    threshold = np.where(left >= 0, np.arange(2 * L - 1) + 0.5, 0.0)
    leaf = np.zeros((2 * L - 1, K))
    leaf[L - 1:] = values
    tree = Tree(left=left, right=right, feature=feature, threshold=threshold,
                op=np.full(2 * L - 1, int(Op.LT), np.uint8), default_left=np.zeros(2 * L - 1, bool),
                zero_missing=np.zeros(2 * L - 1, bool), leaf_value=leaf, outputs=tuple(range(K)))
    return Forest(trees=[tree], num_features=2, num_outputs=K, base_score=np.zeros(K), transform=transform,
                  threshold_dtype=dtype, accumulate_dtype=dtype, source="random")


_MARGINS = st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False),
                     st.sampled_from([0.0, -0.0, 88.0, -88.0, 88.8, -104.0, 709.0, -745.0, 1e-45, 3.4e38]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(_MARGINS, min_size=1, max_size=16),
       transform=st.sampled_from([Transform("sigmoid"), Transform("sigmoid", (("alpha", 0.37),)),
                                  Transform("sigmoid", (("alpha", 2.5),)),
                                  Transform("exp"), Transform("hinge"), Transform("identity"),
                                  Transform("sigmoid", (("margin_divisor", 3.0),)), Transform("softmax")]),
       dtype=st.sampled_from(["float32", "float64"]), rep=st.sampled_from([None, "bitvector"]))
def test_small_requests_transform_in_the_kernel_as_the_reference_does(values, transform, dtype, rep):
    """The small-call entry applies identity, hinge and float32 sigmoid / exp / softmax in machine code
    (every margin of the row: overflowing exp, ties at 0, signed zeros), bit for bit the
    reference's; float64 sigmoid / exp are NumPy's ufuncs after it (without errstate where the
    entry finds no exp can overflow); other transforms NumPy's whole."""
    import warnings

    forest = _chain_forest(values, dtype, transform)
    cf = sf.compile(forest, rep=rep)
    X = np.zeros((len(values), 2), cf.kernel.input_dtype)
    X[:, 0] = np.arange(len(values))
    applied = []
    record_small_calls(cf, lambda rows, result: applied.append(result[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # overflow in exp is expected and silent, as in the reference
        got = cf.predict(X)
    want = reference.predict(forest, X)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    exp_based = transform.name in ("sigmoid", "exp")
    # (softmax of one finite margin is exp(0) / 1: in the kernel for float32)
    in_kernel = transform.name in ("identity", "hinge") or (dtype == "float32" and (exp_based or transform.name == "softmax"))
    # float64 sigmoid / exp: NumPy's ufuncs without errstate where no exp can overflow
    guarded = (dtype == "float64" and exp_based and abs(transform.param("alpha", 1.0)) <= 1
               and bool((np.abs(np.asarray(values, np.float64)) < 700).all()))
    assert applied == [(in_kernel or guarded) and transform.param("margin_divisor", 1.0) == 1.0]
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


_SPREADS = st.one_of(st.floats(-30, 30, width=32), st.sampled_from([0.0, -0.0, -17.9, -18.1, -87.0, -104.0, 3e38]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 16), outputs=st.integers(2, 12), data=st.data(),
       dtype=st.sampled_from(["float32", "float64"]))
def test_small_requests_softmax_in_the_kernel_as_the_reference_does(rows, outputs, data, dtype):
    """Float32 softmax of small calls runs in machine code, bit for bit the reference's
    (XGBoost's multi-class probabilities), where every margin is finite, however far apart (a
    row's exponentials summed in class order as the reference sums them: -87 and -104 make
    subnormal and zero ones, 3e38 a difference past float32's range); a margin not
    finite, or float64 margins, leave the call to NumPy's whole, with the same answers."""
    pytest.importorskip("silvanforge_target_cpu.small")
    values = np.array(data.draw(st.lists(st.lists(_SPREADS, min_size=outputs, max_size=outputs),
                                         min_size=rows, max_size=rows)), np.float64)
    forest = _chain_forest(values, dtype, Transform("softmax"))
    cf = sf.compile(forest)
    X = np.zeros((rows, 2), cf.kernel.input_dtype)
    X[:, 0] = np.arange(rows)
    applied = []
    record_small_calls(cf, lambda rows, result: applied.append(result[1]))
    got, want = cf.predict(X), reference.predict(forest, X)
    np.testing.assert_array_equal(got, want)
    assert applied == [dtype == "float32" and bool(np.isfinite(values.astype(dtype)).all())]


@pytest.mark.parametrize("dtype, transform", [("float32", Transform("sigmoid")), ("float64", Transform("sigmoid")),
                                              ("float64", Transform("exp")), ("float32", Transform("identity")),
                                              ("float32", Transform("softmax"))])
def test_small_calls_without_the_c_module_are_the_same(monkeypatch, dtype, transform):
    """Where the CPU target was installed without its C call (no compiler), small requests go
    through ctypes and NumPy staging with the same answers; with it, C-ordered rows take it and
    other layouts the staging."""
    small = pytest.importorskip("silvanforge_target_cpu.small")
    margins = [0.5, -3.0, 40.0, -800.0, 0.0, 1e-3]
    if transform.name == "softmax":  # rows of 3 outputs, one far apart (NumPy's softmax then)
        margins = [[m, -m, 1.0] for m in margins]
    forest = _chain_forest(margins, dtype, transform)
    X = np.zeros((6, 2), np.float32 if dtype == "float32" else np.float64)
    X[:, 0] = np.arange(6)
    X = X.astype(sf.compile(forest).kernel.input_dtype)
    want, want_margin = reference.predict(forest, X), reference.predict(forest, X, output_margin=True)
    with_c = sf.compile(forest)  # every form made with the C call
    monkeypatch.setattr(small, "foreign_call", lambda: None)
    without = sf.compile(forest)
    for cf in (with_c, without):
        for k in range(1, 7):
            for rows in (X[:k], np.asfortranarray(X[:k]), X[::-1][:k]):
                order = rows[:, 0].astype(int)
                np.testing.assert_array_equal(cf.predict(rows), want[order])
                np.testing.assert_array_equal(cf.predict(rows, output_margin=True), want_margin[order])


def test_numpy_exp_loop_is_numpys_own_or_none():
    """float64 sigmoid / exp of small calls run NumPy's own exp loop, taken from the ufunc only
    after it returned np.exp's bits on a probe; a loop one ulp off anywhere is refused."""
    import ctypes

    small = pytest.importorskip("silvanforge_target_cpu.small")
    fn, data = small.numpy_exp_loop()
    if fn:
        assert small._same_as_numpy(fn, data or None)

    def off_by_one_ulp(args, dims, steps, _data):
        n = dims[0]
        x = np.ctypeslib.as_array(ctypes.cast(args[0], ctypes.POINTER(ctypes.c_double)), (n,))
        out = np.ctypeslib.as_array(ctypes.cast(args[1], ctypes.POINTER(ctypes.c_double)), (n,))
        with np.errstate(all="ignore"):
            e = np.exp(x)
        out[:] = np.where(x > 300, np.nextafter(e, np.inf), e)

    wrong = small._LOOP(off_by_one_ulp)
    assert not small._same_as_numpy(ctypes.cast(wrong, ctypes.c_void_p).value, None)


def test_the_exp_loop_comes_through_numpys_c_api(monkeypatch):
    """The C module finds a ufunc's float64 loop through NumPy's C API (PyUFuncObject's
    documented fields): np.exp's, which the probe then accepts; none for a ufunc of two inputs;
    a TypeError for anything not a ufunc.  Without the C module there is no loop to find (its
    small calls run NumPy's ufunc)."""
    small = pytest.importorskip("silvanforge_target_cpu.small")
    native = small.foreign_call()
    if native is not None:
        fn, data = native.unary_float64_loop(np.exp)
        assert fn and small._same_as_numpy(fn, data or None)
        assert small._find_exp_loop() == (fn, data)
        assert native.unary_float64_loop(np.add) == (0, 0)
        with pytest.raises(TypeError, match="expected a numpy ufunc"):
            native.unary_float64_loop(len)
    monkeypatch.setattr(small, "foreign_call", lambda: None)
    assert small._find_exp_loop() == (0, 0)

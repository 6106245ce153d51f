"""Device arrays given to ``predict`` (silvanforge.inputs.device): recognised by protocol before
any host conversion, checked as the kernel will read them, and refused with one clear
InputError by targets that read host memory (cpu, amd).  The objects here describe device
memory through ``__cuda_array_interface__`` / DLPack as CuPy and JAX do; nothing reads their
pointers on this path.  The successful device path runs on an NVIDIA GPU (tests marked
``gpu``): CuPy and torch inputs, exact against the reference evaluator."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from support_common import without_opencl

import silvanforge as sf
from silvanforge.inputs.device import DeviceArray, device_rows, is_device_array
from silvanforge.plugins import registry
from silvanforge.runtime import reference


class CudaArrayInterface:
    """An object describing device memory as ``__cuda_array_interface__`` v3 does."""

    def __init__(self, shape, typestr="<f4", strides=None, pointer=0x7F0000000000, stream=None):
        self.shape, self.typestr, self.strides, self.pointer, self.stream = shape, typestr, strides, pointer, stream

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.pointer, False),
                "strides": self.strides, "version": 3, "stream": self.stream}


class DLPackOnly:
    """A DLPack producer on a CUDA device without ``__cuda_array_interface__`` (as JAX's arrays)."""

    def __dlpack__(self, stream=None):
        raise AssertionError("not to be exported without CuPy")

    def __dlpack_device__(self):
        return (2, 0)


class DLPackHost:
    """A DLPack producer in host memory (as a torch CPU tensor): the host path reads it."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    import xgboost as xgb

    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 5)).astype(np.float32)
    y = (X[:, 0] + X[:, 2] > 0).astype(int)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 3}, xgb.DMatrix(X, y), 6)
    path = tmp_path_factory.mktemp("dev") / "m.json"
    booster.save_model(path)
    return path, X


def test_device_arrays_are_recognised_by_protocol():
    assert is_device_array(CudaArrayInterface((4, 5)))
    assert is_device_array(DLPackOnly())
    assert not is_device_array(DLPackHost(np.zeros((2, 5), np.float32)))
    assert not is_device_array(np.zeros((2, 5)))
    out = DeviceArray(0x1000, (3, 2), np.float32, owner=None, device=0)
    cai = out.__cuda_array_interface__
    assert cai["shape"] == (3, 2) and cai["typestr"] == "<f4" and cai["data"] == (0x1000, False)
    assert out.reshaped((6,)).shape == (6,)


def test_device_rows_checks_what_the_kernel_reads():
    rows = device_rows(CudaArrayInterface((4, 5)), 5, np.float32)
    assert rows.shape == (4, 5) and rows.strides == (5, 1) and rows.kind == "interface"
    fortran = device_rows(CudaArrayInterface((4, 5), strides=(4, 16)), 5, np.float32)
    assert fortran.strides == (1, 4)
    wide = device_rows(CudaArrayInterface((4, 7)), 5, np.float32, wider=True)
    assert wide.strides == (7, 1)
    cases = [
        (CudaArrayInterface((4, 5), "<f8"), "reads float32 rows on the device, got float64"),
        (CudaArrayInterface((4, 5), "<i4"), "reads float32 rows on the device, got int32"),
        (CudaArrayInterface((4, 6)), "expects 5 features per row, got 6"),
        (CudaArrayInterface((20,)), "2-D array"),
        (CudaArrayInterface((4, 5), strides=(40, 4)), "C- or Fortran-ordered"),  # every other row
        (CudaArrayInterface((4, 5), strides=(20, 2)), "C- or Fortran-ordered"),  # not whole elements
        (CudaArrayInterface((4, 5), strides=(-20, 4)), "C- or Fortran-ordered"),
        (CudaArrayInterface((4, 5), ">f4"), "little-endian"),
        (CudaArrayInterface((4, 5), pointer=0), "null data pointer"),
        (DLPackOnly(), "CuPy"),
    ]
    for array, message in cases:
        with pytest.raises(sf.InputError, match=message):
            device_rows(array, 5, np.float32)
    assert device_rows(CudaArrayInterface((0, 5), pointer=0), 5, np.float32).shape == (0, 5)


@pytest.mark.parametrize("target", ["cpu", "amd"])
def test_host_targets_refuse_device_arrays(model, target):
    ok, why = registry().target_available(target)
    if not ok:
        without_opencl(why) if target == "amd" else pytest.skip(f"{target} cannot run here")
    path, X = model
    cf = sf.compile(path, target=target)
    for array in (CudaArrayInterface((4, 5)), CudaArrayInterface((4, 5), "<f8"), DLPackOnly()):
        with pytest.raises(sf.InputError, match=f"the '{target}' target reads rows from host memory"):
            cf.predict(array)
    # host input, DLPack-on-the-CPU included, works as before
    np.testing.assert_allclose(cf.predict(DLPackHost(X[:7])), reference.predict(sf.load_model(path), X[:7]),
                               rtol=1e-6, atol=1e-7)


def test_forge_refuses_device_arrays_in_one_line(model):
    """The CLI reads files, so the error is the library's: one InputError, no traceback."""
    path, _ = model
    cf = sf.compile(path)
    with pytest.raises(sf.InputError) as info:
        cf.predict(CudaArrayInterface((2, 5)))
    assert "\n" not in str(info.value)


class HostMemoryDeviceKernel:
    """The cpu kernel behind the DeviceKernel capability, reading "device" rows through their
    pointer in host memory: a stand-in for device memory, so the core's side of the device path
    (what it checks, what ``finish`` applies, the result's shape and kind) runs without a GPU.
    Whether CUDA kernels read device memory is for the tests marked ``gpu``."""

    def __init__(self, inner):
        self.inner = inner
        self.module, self.input_dtype, self.output_dtype = inner.module, inner.input_dtype, inner.output_dtype
        self.calls = []

    def margins(self, rows, num_outputs, threads=None):
        return self.inner.margins(rows, num_outputs, threads)

    def small_calls(self, max_rows, transform=None, flat=False):
        return None

    def artifact(self):
        return b""

    def device_predict(self, rows, num_outputs, finish=None):
        self.calls.append(rows)
        n, cols = rows.shape
        item = rows.dtype.itemsize
        buf = (ctypes.c_char * max(1, item * ((n - 1) * rows.strides[0] + (cols - 1) * rows.strides[1] + 1)))
        base = np.frombuffer(buf.from_address(rows.pointer), dtype=rows.dtype) if n else np.zeros(1, rows.dtype)
        X = np.lib.stride_tricks.as_strided(base, (n, cols), (rows.strides[0] * item, rows.strides[1] * item))
        out = np.ascontiguousarray(self.inner.margins(X, num_outputs))
        if finish is not None:
            out = np.ascontiguousarray(finish(out))
        return DeviceArray(out.ctypes.data, out.shape, out.dtype, owner=out, device=0)


def _read_back(result):
    cai = result.__cuda_array_interface__
    return np.ctypeslib.as_array(ctypes.cast(cai["data"][0], ctypes.POINTER(np.ctypeslib.as_ctypes_type(
        np.dtype(cai["typestr"])))), shape=cai["shape"]).copy() if np.prod(cai["shape"]) else \
        np.zeros(cai["shape"], np.dtype(cai["typestr"]))


def test_the_core_side_of_the_device_path(tmp_path):
    """Through a kernel with the DeviceKernel capability, predict passes the checked rows,
    transforms margins exactly as on the host and returns the result shaped as the library's."""
    from support_gpu import gpu_models

    from silvanforge.plan.forms import Form
    from silvanforge.runtime.compiled import CompiledForest

    for path, X in gpu_models(tmp_path).values():
        host = sf.compile(path, target="cpu")
        main = host.main
        kernel = HostMemoryDeviceKernel(main.kernel)
        cf = CompiledForest(host.forest, [Form(main.forest, kernel, main.options, main.lir_module, main.mir_function)])
        rows = np.ascontiguousarray(X, dtype=kernel.input_dtype)
        for order in ("C", "F"):
            R = np.asarray(rows, order=order)
            strides = None if order == "C" else R.strides
            for margin in (False, True):
                got = cf.predict(CudaArrayInterface(R.shape, R.dtype.str, strides, R.ctypes.data),
                                 output_margin=margin)
                assert isinstance(got, DeviceArray)
                np.testing.assert_array_equal(_read_back(got), host.predict(rows, output_margin=margin))
        assert kernel.calls[-1].strides == (1, rows.shape[0])
        with pytest.raises(sf.InputError, match="missing= is not applied"):
            cf.predict(CudaArrayInterface(rows.shape, rows.dtype.str, None, rows.ctypes.data), missing=0.0)
        empty = cf.predict(CudaArrayInterface((0, rows.shape[1]), rows.dtype.str, None, 0))
        assert _read_back(empty).shape == host.predict(rows[:0]).shape


# ------------------------------------------------------------------ on an NVIDIA GPU
def _cuda(path):
    return sf.compile(path, target="cuda")


@pytest.fixture
def on_cuda(model):
    """CuPy, the model's forest and rows, and the model compiled for the cuda target."""
    cp = pytest.importorskip("cupy")
    path, X = model
    return cp, sf.load_model(path), X, _cuda(path)


@pytest.mark.gpu
def test_cupy_in_cupy_out(on_cuda):
    cp, forest, X, cf = on_cuda
    for n in (0, 1, 7, 300):
        d = cp.asarray(X[:n])
        for margin in (False, True):
            got = cf.predict(d, output_margin=margin)
            assert isinstance(got, cp.ndarray) and got.device.id == d.device.id
            np.testing.assert_allclose(cp.asnumpy(got), reference.predict(forest, X[:n], output_margin=margin),
                                       rtol=1e-6, atol=1e-6)
    fortran = cp.asfortranarray(cp.asarray(X))
    np.testing.assert_allclose(cp.asnumpy(cf.predict(fortran)), reference.predict(forest, X), rtol=1e-6, atol=1e-6)
    with pytest.raises(sf.InputError, match="float64"):
        cf.predict(cp.asarray(X, dtype=cp.float64))
    with pytest.raises(sf.InputError, match="Fortran-ordered"):
        cf.predict(cp.asarray(X)[::2])
    host = CudaArrayInterface((4, 5), pointer=X.ctypes.data)  # a host pointer posing as device memory
    with pytest.raises(sf.InputError, match="not CUDA device memory"):
        cf.predict(host)


@pytest.mark.gpu
def test_cuda_array_interface_and_torch(on_cuda):
    cp, forest, X, cf = on_cuda
    d = cp.asarray(X)
    bare = CudaArrayInterface(X.shape, "<f4", None, d.data.ptr)
    got = cf.predict(bare)
    assert isinstance(got, DeviceArray)
    np.testing.assert_allclose(cp.asnumpy(cp.asarray(got)), reference.predict(forest, X), rtol=1e-6, atol=1e-6)
    torch = pytest.importorskip("torch")
    t = torch.as_tensor(X, device="cuda")
    out = cf.predict(t)
    assert isinstance(out, torch.Tensor) and out.is_cuda
    np.testing.assert_allclose(out.cpu().numpy(), reference.predict(forest, X), rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_multiclass_and_float64_on_the_device(tmp_path):
    cp = pytest.importorskip("cupy")
    from support_gpu import gpu_models

    for path, X in gpu_models(tmp_path).values():
        forest = sf.load_model(path)
        cf = _cuda(path)
        dtype = cf.main.input_dtype
        got = cf.predict(cp.asarray(X, dtype=dtype))
        np.testing.assert_allclose(cp.asnumpy(got), reference.predict(forest, X.astype(dtype)), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["sigmoid", "softmax", "exp", "hinge"])
def test_the_device_transform_equals_the_host_one_bit_for_bit(name, monkeypatch):
    """A device call transforms float32 margins on the GPU (the cuda target's .finish) and must
    give exactly what the host call gives from the same margins; large margins (subnormal or
    overflowing exponentials, softmax classes far apart) are flagged there
    and transformed on the host, still exactly."""
    import dataclasses

    from silvanforge_target_cuda import launch

    from silvanforge.ir.hir import Transform
    from silvanforge.testing import random_forest, rows_for

    cp = pytest.importorskip("cupy")
    outcomes = []
    real = launch.CudaKernel._finish_here

    def spy(self, *args):
        outcomes.append(real(self, *args))
        return outcomes[-1]

    monkeypatch.setattr(launch.CudaKernel, "_finish_here", spy)
    checked = 0
    for seed in range(40):
        if checked >= 12:  # a dozen compiles a transform: nvcc runs for each
            break
        forest = random_forest(seed, plain=True)
        if (name == "softmax") != (forest.num_outputs > 1) or forest.accumulate_dtype != "float32":
            continue
        params = (("alpha", 0.7),) if name == "sigmoid" and seed % 2 else ()
        # 60: margins far past exp's float32 range; 0 on a base score chosen to be flagged (a
        # subnormal exponential: softmax classes 90 apart)
        flagged = {"sigmoid": 90.0, "exp": -90.0, "hinge": 1.0}.get(name)
        for scale in (1.0, 60.0, 0.0):
            trees = [dataclasses.replace(t, leaf_value=t.leaf_value * scale) for t in forest.trees]
            base = forest.base_score if scale else \
                (np.full(forest.num_outputs, flagged) if flagged else 90.0 * np.arange(forest.num_outputs))
            model = dataclasses.replace(forest, trees=trees, base_score=base, transform=Transform(name, params))
            cf = sf.compile(model, target="cuda")
            X = rows_for(model, np.random.default_rng(seed), 500).astype(cf.main.input_dtype)
            got = cp.asnumpy(cf.predict(cp.asarray(X)))
            np.testing.assert_array_equal(got, cf.predict(X), err_msg=f"seed {seed} scale {scale}")
            # The GPU sums a row's trees in another order than the reference: its margins agree to
            # float32 rounding, which exp magnifies by the margin (one last bit of a margin of 170 is
            # 1.5e-5 of its exponential), so the reference is compared on the margins; the
            # transform is the host's, exactly, above.
            np.testing.assert_allclose(cf.predict(X, output_margin=True), reference.predict(model, X, output_margin=True),
                                       rtol=1e-5, atol=1e-4 * max(scale, 1.0), err_msg=f"seed {seed} scale {scale}")
            checked += 1
    assert checked >= 4
    assert True in outcomes  # transformed on the device
    if name != "hinge":
        assert False in outcomes  # and flagged for the host where it must be


def test_a_binary_sklearn_classifier_on_the_device_path_keeps_both_columns():
    """One margin, two probabilities a row (scikit-learn's binary predict_proba): the device
    path returns the (n, 2) result, not a reshape of it."""
    from sklearn.ensemble import GradientBoostingClassifier

    from silvanforge.plan.forms import Form
    from silvanforge.runtime.compiled import CompiledForest

    rng = np.random.default_rng(8)
    X = rng.normal(size=(200, 4)).astype(np.float32)
    est = GradientBoostingClassifier(n_estimators=3, max_depth=2, random_state=0).fit(X, X[:, 0] > 0)
    host = sf.compile(est, target="cpu")
    main = host.main
    kernel = HostMemoryDeviceKernel(main.kernel)
    cf = CompiledForest(host.forest, [Form(main.forest, kernel, main.options, main.lir_module, main.mir_function)])
    rows = np.ascontiguousarray(X[:40], dtype=kernel.input_dtype)
    got = _read_back(cf.predict(CudaArrayInterface(rows.shape, rows.dtype.str, None, rows.ctypes.data)))
    assert got.shape == (40, 2)
    np.testing.assert_array_equal(got, host.predict(rows))

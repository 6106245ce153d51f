"""pycuda spelling of the GPU kernel runtime (:class:`silvanforge_gpu.runtime.GpuKernel`).

The model's buffers are copied to the device once; rows are copied in once per call
(:mod:`.copying` says how) and the margins out; kernel time is measured with CUDA events.  Rows already on the
device (CuPy, torch, ``__cuda_array_interface__``: :mod:`silvanforge.inputs.device`) are read in
place by :meth:`CudaKernel.device_predict` (the :class:`silvanforge.runtime.kernel.DeviceKernel`
capability), and the result is a fresh device buffer.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import time

import numpy as np
import pycuda.driver as cuda

from silvanforge.inputs.device import DeviceArray
from silvanforge.errors import InputError, PluginError, ScheduleError
from silvanforge_gpu.runtime import GpuKernel

from . import copying, finish as device_finish, source
from .nvcc import compile_ptx

_device = None

# How rows reach the device: :mod:`.copying` (a run-time setting; staging in chunks by 8
# threads did not help, 0.85 / 1.38 ms).  A pageable copy is on the legacy default stream, which
# the kernel stream (a blocking one) waits for, so the kernels never read rows still in flight.


_libcuda = None


def _driver():
    # pycuda's register_host_memory fails under numpy 2 (it sets an array's base twice), so the
    # driver's own calls are used, through ctypes.
    global _libcuda
    if _libcuda is None:
        _libcuda = ctypes.CDLL("libcuda.so.1")
        _libcuda.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        _libcuda.cuMemHostUnregister.argtypes = [ctypes.c_void_p]
        _libcuda.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
        _libcuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
    return _libcuda


# cuPointerGetAttribute's attributes and memory types (cuda.h).
_ATTR_MEMORY_TYPE, _ATTR_DEVICE_ORDINAL = 2, 9
_MEMORY_HOST = 1


def pointer_device(pointer: int) -> int:
    """The ordinal of the device holding ``pointer``, or an InputError where it is not device
    memory the driver knows (a host pointer in a ``__cuda_array_interface__``)."""
    lib = _driver()
    kind, ordinal = ctypes.c_uint(0), ctypes.c_int(-1)
    if lib.cuPointerGetAttribute(ctypes.addressof(kind), _ATTR_MEMORY_TYPE, pointer) != 0 \
            or kind.value == _MEMORY_HOST:
        raise InputError(f"the device array's pointer {pointer:#x} is not CUDA device memory")
    if lib.cuPointerGetAttribute(ctypes.addressof(ordinal), _ATTR_DEVICE_ORDINAL, pointer) != 0:
        raise InputError(f"the CUDA driver does not know the device of pointer {pointer:#x}")
    return ordinal.value


def host_register(array: np.ndarray) -> bool:
    """Page-lock a contiguous array's memory in place (the current context); False where the
    driver refuses (read-only or foreign memory), and the caller copies another way."""
    return _driver().cuMemHostRegister_v2(array.ctypes.data, array.nbytes, 0) == 0


def host_unregister(address: int) -> None:
    _driver().cuMemHostUnregister(address)


def _primary():
    global _device
    if _device is None:
        cuda.init()
        if cuda.Device.count() == 0:
            raise PluginError("the CUDA driver sees no GPU")
        dev = cuda.Device(0)
        _device = (dev, dev.retain_primary_context())
    return _device


def device_arch() -> str:
    major, minor = _primary()[0].compute_capability()
    return f"sm_{major}{minor}"


class CudaKernel(GpuKernel):
    def __init__(self, module, ptx: str | None = None):
        self.device, self.context = _primary()
        self.ordinal = 0  # _primary's device
        for fn in module.functions:
            if fn.launch.threads_per_block > 1024:
                raise ScheduleError(f"a block of {fn.launch.threads_per_block} threads is more than CUDA's 1024")
        self.arch = device_arch()
        self.ptx = ptx or compile_ptx(source(module), self.arch)
        with self._activate():
            self.cu_module = cuda.module_from_buffer(self.ptx.encode())
            self._functions = [self.cu_module.get_function(fn.name) for fn in module.functions]
            self._finishers = {}
            for name in device_finish.KERNELS:  # absent from PTX an older release saved
                try:
                    self._finishers[name] = self.cu_module.get_function(name)
                except cuda.LogicError:
                    pass
            self._flag = None
            self.stream = cuda.Stream()
            self._pinned = {}
            self._registered = None
            super().__init__(module)

    @classmethod
    def from_artifact(cls, module, blob: bytes):
        try:
            meta = json.loads(blob.decode())
        except (UnicodeDecodeError, ValueError):
            return None
        if meta.get("arch") != device_arch():
            return None
        return cls(module, meta["ptx"])

    def artifact(self) -> bytes:
        return json.dumps({"arch": self.arch, "ptx": self.ptx}).encode()

    @contextlib.contextmanager
    def _activate(self):
        self.context.push()
        try:
            yield
        finally:
            cuda.Context.pop()

    # ------------------------------------------------------------------ device input
    def device_predict(self, rows, num_outputs, finish=None):
        """Margins of rows in device memory (a :class:`silvanforge.inputs.device.DeviceRows`),
        read where they are; see :class:`silvanforge.runtime.kernel.DeviceKernel`."""
        n = rows.shape[0]
        with self._lock, self._activate():
            if n:
                where = pointer_device(rows.pointer)
                if where != self.ordinal or (rows.device is not None and rows.device != self.ordinal):
                    raise InputError(f"the rows are on CUDA device {where}, the model's kernels on device "
                                     f"{self.ordinal}: move them (for CuPy, cupy.asarray under "
                                     f"cupy.cuda.Device({self.ordinal}))")
            if rows.stream not in (None, 0):
                # The producer's stream (__cuda_array_interface__ v3): its writes land first.
                _driver().cuStreamSynchronize(ctypes.c_void_p(int(rows.stream)))
            out = cuda.mem_alloc(max(n * num_outputs * self.output_dtype.itemsize, 256))
            start = time.perf_counter()
            kernel = 0.0
            if n:
                rs, cs = rows.strides
                kernel = self._run(np.uintp(rows.pointer), rs, cs, n, num_outputs, out)
            plan = None if finish is None or not n else \
                device_finish.plan(getattr(finish, "transform", None), self.output_dtype, num_outputs)
            if plan is not None and plan[0] in self._finishers:
                if self._finish_here(plan, out, n, num_outputs):
                    self.last_timing = {"kernel": kernel, "total": time.perf_counter() - start}
                    return DeviceArray(int(out), (n, num_outputs), self.output_dtype, out, self.ordinal)
                # A value the host must transform (see .finish): the margins again, then NumPy.
                kernel += self._run(np.uintp(rows.pointer), rs, cs, n, num_outputs, out)
            self.stream.synchronize()
            self.last_timing = {"kernel": kernel, "total": time.perf_counter() - start}
            if finish is None:
                return DeviceArray(int(out), (n, num_outputs), self.output_dtype, out, self.ordinal)
            margins = np.empty((n, num_outputs), dtype=self.output_dtype)
            if n:
                cuda.memcpy_dtoh(margins, out)
            values = np.ascontiguousarray(finish(margins))
            back = cuda.mem_alloc(max(values.nbytes, 256))
            if values.nbytes:
                cuda.memcpy_htod(back, values)
            return DeviceArray(int(back), values.shape, values.dtype, back, self.ordinal)

    def _finish_here(self, plan, out, n: int, num_outputs: int) -> bool:
        """Transform the margins at ``out`` in place on the device (``plan``: .finish.plan);
        False where a value was flagged for the host, the margins then overwritten."""
        name, args, flagged = plan
        count = device_finish.elements(name, n, num_outputs)
        grid = ((count + device_finish.BLOCK - 1) // device_finish.BLOCK, 1, 1)
        if not flagged:
            self._finishers[name](out, np.int64(count), *args, block=(device_finish.BLOCK, 1, 1),
                                  grid=grid, stream=self.stream)
            self.stream.synchronize()
            return True
        if self._flag is None:
            self._flag = (cuda.mem_alloc(4), cuda.pagelocked_empty(1, np.int32))
        flag, seen = self._flag
        cuda.memset_d32_async(flag, 0, 1, self.stream)
        rows = n if name == "sf_finish_softmax" else count
        self._finishers[name](out, np.int64(rows), *args, flag, block=(device_finish.BLOCK, 1, 1),
                              grid=grid, stream=self.stream)
        cuda.memcpy_dtoh_async(seen, flag, self.stream)
        self.stream.synchronize()
        return int(seen[0]) == 0

    def _upload_model(self, name, array):
        return cuda.to_device(array)

    def _alloc(self, nbytes):
        return cuda.mem_alloc(nbytes)

    def _write(self, handle, array):
        settings = copying.current()
        if settings.copy == "pageable":  # the driver stages it (one thread)
            cuda.memcpy_htod(handle, array)
            return
        if settings.copy == "registered" and array.nbytes >= settings.register_min_bytes:
            if host_register(array):  # the caller's pages pinned for this call: one DMA, no staging
                cuda.memcpy_htod_async(handle, array, self.stream)
                self._registered = array.ctypes.data  # unpinned once the stream is done with it (_read)
                return
        pinned = self._pinned.get("rows")
        if pinned is None or pinned.nbytes < array.nbytes:
            pinned = cuda.pagelocked_empty(max(array.nbytes, 256), np.uint8)
            self._pinned["rows"] = pinned
        pinned[:array.nbytes] = array.view(np.uint8)  # staged: one numpy copy, then one DMA
        cuda.memcpy_htod_async(handle, pinned[:array.nbytes], self.stream)

    def _fill(self, handle, count, value, dtype):
        host = np.full(count, value, dtype=dtype)
        if value == 0:
            cuda.memset_d8_async(handle, 0, host.nbytes, self.stream)
        else:
            cuda.memcpy_htod_async(handle, host, self.stream)
            self.stream.synchronize()

    def _launch(self, index, grid, block, args):
        self._functions[index](*args, block=tuple(int(b) for b in block),
                               grid=tuple(int(g) for g in grid), stream=self.stream)

    def _read(self, handle, out):
        self.stream.synchronize()
        registered, self._registered = self._registered, None
        if registered is not None:
            host_unregister(registered)
        cuda.memcpy_dtoh(out, handle)  # pageable destination: a synchronous copy

    def _start_timer(self):
        start = cuda.Event()
        start.record(self.stream)
        return start

    def _kernel_seconds(self, start):
        end = cuda.Event()
        end.record(self.stream)
        end.synchronize()
        return end.time_since(start) * 1e-3

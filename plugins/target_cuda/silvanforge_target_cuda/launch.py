"""pycuda spelling of the core's GPU kernel runtime (:class:`silvanforge.gpu_runtime.GpuKernel`).

The model's buffers are copied to the device once; rows go through a pinned host buffer (one
copy per call, asynchronous on the kernel's stream); kernel time is measured with CUDA events.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pycuda.driver as cuda

from silvanforge.errors import PluginError, ScheduleError
from silvanforge.gpu_runtime import GpuKernel

from . import source
from .nvcc import compile_ptx

_device = None


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
        for fn in module.functions:
            if fn.launch.threads_per_block > 1024:
                raise ScheduleError(f"a block of {fn.launch.threads_per_block} threads is more than CUDA's 1024")
        self.arch = device_arch()
        self.ptx = ptx or compile_ptx(source(module), self.arch)
        with self._activate():
            self.cu_module = cuda.module_from_buffer(self.ptx.encode())
            self._functions = [self.cu_module.get_function(fn.name) for fn in module.functions]
            self.stream = cuda.Stream()
            self._pinned = {}
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

    def _upload_model(self, name, array):
        return cuda.to_device(array)

    def _alloc(self, nbytes):
        return cuda.mem_alloc(nbytes)

    def _write(self, handle, array):
        pinned = self._pinned.get("rows")
        if pinned is None or pinned.nbytes < array.nbytes:
            pinned = cuda.pagelocked_empty(max(array.nbytes, 256), np.uint8)
            self._pinned["rows"] = pinned
        view = pinned[:array.nbytes]
        view[:] = array.view(np.uint8)
        cuda.memcpy_htod_async(handle, view, self.stream)

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

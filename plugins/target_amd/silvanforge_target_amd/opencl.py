"""pyopencl spelling of the GPU kernel runtime (:class:`silvanforge_gpu.runtime.GpuKernel`)."""

from __future__ import annotations

import os

import numpy as np
import pyopencl as cl

from silvanforge.errors import PluginError, ScheduleError
from silvanforge_gpu.c_dialect import OPENCL, emit
from silvanforge_gpu.runtime import GpuKernel

_context = None


def device_context():
    """One context and queue for the process: the device ``SILVANFORGE_OPENCL_DEVICE`` names,
    else the first GPU, else the first device of any kind, that builds a kernel."""
    global _context
    if _context is None:
        wanted = os.environ.get("SILVANFORGE_OPENCL_DEVICE", "").lower()
        devices = [d for p in cl.get_platforms() for d in p.get_devices()]
        if wanted:
            devices = [d for d in devices if wanted in f"{d.platform.name} {d.name}".lower()]
            if not devices:
                raise PluginError(f"no OpenCL device matches SILVANFORGE_OPENCL_DEVICE={wanted!r}")
        if not devices:
            raise PluginError("no OpenCL device found")
        gpus = [d for d in devices if d.type & cl.device_type.GPU]
        ordered = gpus + [d for d in devices if d not in gpus]
        # The first that builds a kernel: a machine may list a platform that cannot (pip's PoCL
        # 3.0 on CPUs newer than its LLVM) beside one that can (the distribution's PoCL).
        ctx = next((c for c in map(_building_context, ordered) if c is not None), None)
        device = ctx.devices[0] if ctx is not None else ordered[0]
        ctx = ctx or cl.Context([device])
        queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        _context = (ctx, queue, device)
    return _context


_PROBE = "__kernel void probe(__global float *a) { a[0] = 1.0f; }"


def _building_context(device):
    """A context on ``device`` where a tiny kernel builds, or None."""
    try:
        ctx = cl.Context([device])
        cl.Program(ctx, _PROBE).build()
        return ctx
    except Exception:  # noqa: BLE001 - any failure: the device cannot serve
        return None


def device_key() -> str:
    """What the chosen device's code and timings depend on, as JSON (``device`` first)."""
    import json

    _, _, device = device_context()
    return json.dumps({"device": device.name.strip(), "vendor": device.vendor.strip(),
                       "driver": device.driver_version.strip(), "platform": device.platform.name.strip(),
                       "platform_version": device.platform.version.strip()}, sort_keys=False)


_probe: list = []  # [problem or None], once per process


def build_problem() -> str | None:
    """Why the chosen device cannot build OpenCL C, or None when a tiny kernel builds.  A platform
    can list a device and still fail every build: PoCL 3.0's LLVM 14, for one, does not know CPUs
    newer than it (AMD Zen 4) and asks for target CPU 'generic', which it then rejects."""
    if not _probe:
        try:
            ctx, _, device = device_context()
            cl.Program(ctx, _PROBE).build()
            _probe.append(None)
        except Exception as exc:
            log = " ".join(str(exc).split())
            reason = next((line.strip() for line in str(exc).splitlines() if "error:" in line), log[:200])
            name = device.name.strip() if "device" in locals() else "the OpenCL device"
            _probe.append(f"{name} cannot build OpenCL kernels ({reason}); on a CPU newer than pip's "
                          "PoCL knows, install Debian's or Ubuntu's pocl-opencl-icd")
    return _probe[0]


class OpenCLKernel(GpuKernel):
    def __init__(self, module):
        self.ctx, self.queue, self.device = device_context()
        for fn in module.functions:
            if fn.launch.threads_per_block > self.device.max_work_group_size:
                raise ScheduleError(f"a block of {fn.launch.threads_per_block} threads is more than this "
                                    f"OpenCL device allows ({self.device.max_work_group_size})")
        self.source = emit(module, OPENCL)
        try:
            self.program = cl.Program(self.ctx, self.source).build()
        except cl.RuntimeError as exc:  # a bug of ours, not the user's: keep the build log
            raise PluginError(f"OpenCL build failed: {exc}") from None
        self._kernels = [getattr(self.program, fn.name) for fn in module.functions]
        super().__init__(module)

    def _upload_model(self, name, array):
        mf = cl.mem_flags
        return cl.Buffer(self.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=array)

    def _alloc(self, nbytes):
        return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size=nbytes)

    def _write(self, handle, array):
        cl.enqueue_copy(self.queue, handle, array, is_blocking=True)  # array may be a temporary

    def _fill(self, handle, count, value, dtype):
        if count:
            cl.enqueue_fill_buffer(self.queue, handle, np.asarray(value, dtype=dtype), 0,
                                   count * np.dtype(dtype).itemsize)

    def _launch(self, index, grid, block, args):
        gsize = tuple(g * b for g, b in zip(grid, block))
        self._events.append(self._kernels[index](self.queue, gsize, block, *args))

    def _read(self, handle, out):
        cl.enqueue_copy(self.queue, out, handle, is_blocking=True)

    def _start_timer(self):
        self._events = []
        return self._events

    def _kernel_seconds(self, events):
        cl.wait_for_events(events)
        return sum((e.profile.end - e.profile.start) for e in events) * 1e-9

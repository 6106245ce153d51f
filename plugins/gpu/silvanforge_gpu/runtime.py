"""What every GPU target does around its kernels, written once: buffers that stay on the device,
one copy of the rows in and the margins out per call, scratch filled per call, the kernels of
a module launched in order over the grid their :class:`silvanforge.ir.lir.Launch` gives.

A target subclasses :class:`GpuKernel` with its API's spelling of six operations (upload,
allocate, fill, launch, download, synchronise).  It is a :class:`silvanforge.runtime.kernel.Kernel`:
``predict`` hands its ``margins`` the whole batch; it has no lean path for small requests, and
no artifact unless the subclass has one (CUDA's PTX).  A target whose API reads device pointers
(CUDA) also implements :class:`silvanforge.runtime.kernel.DeviceKernel` through :meth:`GpuKernel._run`,
the launches without the copies: rows already on the device are read where they are.
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np

from silvanforge.ir import lir
from silvanforge.runtime.kernel import BaseKernel

from .c_dialect import kernel_arguments


class GpuKernel(BaseKernel):
    """Base of the CUDA and OpenCL kernels (see the module docstring)."""

    def __init__(self, module: lir.Module):
        self.module = module
        self.phases = module.functions
        self.scratch = module.scratch_buffers()
        self.input_dtype = lir.LIR_TO_NUMPY[module.input_type]
        self.output_dtype = lir.LIR_TO_NUMPY[module.output_type]
        self.arguments = kernel_arguments(module)
        # One call at a time per kernel: the device buffers for rows and margins are reused.
        self._lock = threading.Lock()
        self._capacity: dict[str, tuple[int, object]] = {}
        self._model = [self._upload_model(b.name, np.ascontiguousarray(b.data) if b.data.size
                                          else np.zeros(1, b.data.dtype)) for b in module.model_buffers()]
        #: seconds of the last call: ``kernel`` (launches, device clock) and ``total`` (with copies)
        self.last_timing: dict[str, float] = {}

    # ------------------------------------------------------------------ what a target provides
    def _upload_model(self, name: str, array: np.ndarray):
        raise NotImplementedError

    def _alloc(self, nbytes: int):
        raise NotImplementedError

    def _write(self, handle, array: np.ndarray) -> None:
        raise NotImplementedError

    def _fill(self, handle, count: int, value, dtype) -> None:
        raise NotImplementedError

    def _launch(self, index: int, grid: tuple, block: tuple, args: list) -> None:
        raise NotImplementedError

    def _read(self, handle, out: np.ndarray) -> None:
        raise NotImplementedError

    def _activate(self):
        """A context manager making the device current for this thread (CUDA contexts)."""
        return contextlib.nullcontext()

    def _start_timer(self):
        return None

    def _kernel_seconds(self, timer) -> float:
        return float("nan")

    # ------------------------------------------------------------------ shared logic
    def _buffer(self, key: str, nbytes: int):
        """A device buffer of at least ``nbytes``, kept and grown across calls."""
        have = self._capacity.get(key)
        if have is None or have[0] < nbytes:
            have = (max(nbytes, 256), self._alloc(max(nbytes, 256)))
            self._capacity[key] = have
        return have[1]

    def margins(self, rows: np.ndarray, num_outputs: int, threads: int | None = None) -> np.ndarray:
        """The margins of ``rows`` (``threads`` is for CPU kernels: a GPU grid runs them)."""
        n = rows.shape[0]
        out = np.empty((n, num_outputs), dtype=self.output_dtype)
        if n == 0:
            return out
        if not (rows.flags.c_contiguous or rows.flags.f_contiguous):
            rows = np.ascontiguousarray(rows)
        item = rows.itemsize
        rs, cs = rows.strides[0] // item, rows.strides[1] // item
        if rows.shape[1] <= 1 or n == 1:  # strides of a unit dimension can be anything
            rs, cs = (rows.shape[1], 1) if rows.flags.c_contiguous else (1, n)
        with self._lock, self._activate():
            start = time.perf_counter()
            d_rows = self._buffer("rows", rows.nbytes)
            self._write(d_rows, rows.ravel(order="K"))
            d_out = self._buffer("margins", out.nbytes)
            kernel = self._run(d_rows, rs, cs, n, num_outputs, d_out)
            self._read(d_out, out)
            self.last_timing = {"kernel": kernel, "total": time.perf_counter() - start}
        return out

    def _run(self, d_rows, rs: int, cs: int, n: int, num_outputs: int, d_out) -> float:
        """Launch every phase over ``n`` rows at ``d_rows`` (a device handle or pointer; element
        strides ``rs``, ``cs``) writing margins to ``d_out``; the kernel seconds where timed.
        Called holding the lock, the device current."""
        scratch = []
        for i, buf in enumerate(self.scratch):
            handle = self._buffer(f"scratch{i}", n * buf.per_row * self.output_dtype.itemsize)
            self._fill(handle, n * buf.per_row, buf.fill, self.output_dtype)
            scratch.append(handle)
        scalars = [np.int64(v) for v in (rs, cs, 0, n, 0, 0, n)]
        args = [d_rows, *scalars, d_out, *self._model, *scratch]
        timer = self._start_timer()
        for index, fn in enumerate(self.phases):
            self._launch(index, fn.launch.grid_for(n), fn.launch.block, args)
        return self._kernel_seconds(timer)

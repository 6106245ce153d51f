"""The kernel contract: what a target's :meth:`silvanforge.target.Target.compile` returns, the
one interface the compiled model calls.

:class:`Kernel` is a :class:`typing.Protocol` (``isinstance(k, Kernel)`` checks a kernel has
every member): the LIR module it runs, the dtypes of the rows it reads and the margins it
writes, :meth:`~Kernel.margins` of a whole batch, and two optional capabilities that every
kernel still answers, so the core never probes for them:

- :meth:`~Kernel.small_calls`: a lean path for requests of a few rows, or None where the kernel
  has none (every request then goes through ``margins``);
- :meth:`~Kernel.artifact`: bytes a target's ``load_kernel`` maps again without compiling, or
  ``b""`` where there are none (a saved model is then compiled again when loaded).

A third capability is a protocol of its own, :class:`DeviceKernel`, since only kernels that
run on a GPU have it: :meth:`~DeviceKernel.device_predict` reads rows that are already in device
memory (:mod:`silvanforge.inputs.device`) and leaves the result there.  ``predict`` asks for it
(``isinstance(kernel, DeviceKernel)``) only when given a device array, and a kernel without it
gets an :class:`~silvanforge.errors.InputError` (a host-only target: never a silent host copy).

Two bases give the defaults: :class:`BaseKernel` (no lean path, no artifact) and
:class:`PhaseKernel`, for kernels that run an LIR module's phases as functions over row and
tree ranges: the core's runtime (:func:`silvanforge.runtime.threads.run_phases`) splits them over
threads, so such a kernel supplies only ``run``.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Protocol, runtime_checkable

import numpy as np

from silvanforge.errors import PluginError
from silvanforge.ir import lir
from silvanforge.runtime.threads import rows_per_share, rows_per_thread, run_phases

#: A lean call ``(rows, apply) -> (values, applied)``: margins of up to ``max_rows`` rows of the
#: kernel's input dtype, or where ``apply`` and the kernel can, the transformed values
#: (``applied`` True); see :meth:`Kernel.small_calls` (also for rows given as a list of tuples).
SmallCall = Callable[[np.ndarray, bool], "tuple[np.ndarray, bool] | None"]


@runtime_checkable
class Kernel(Protocol):
    """What every target's kernel implements (see the module docstring)."""

    #: The LIR module this kernel runs (saved with the model beside its artifact).
    module: lir.Module
    #: The dtype of the rows ``margins`` and small calls read (the caller converts to it).
    input_dtype: np.dtype
    #: The dtype of the margins it writes.
    output_dtype: np.dtype

    def margins(self, rows: np.ndarray, num_outputs: int, threads: int | None = None) -> np.ndarray:
        """The margins ``(n, num_outputs)`` of ``rows`` (n x features of ``input_dtype``; C or
        Fortran order or a strided view; n may be 0), using up to ``threads`` CPU threads (None:
        all; a kernel that runs elsewhere may ignore it).  Safe to call from many threads."""
        ...

    def small_calls(self, max_rows: int, transform=None, flat: bool = False) -> SmallCall | None:
        """A function for requests of up to ``max_rows`` rows on the calling thread, or None
        where the kernel has no lean path.  ``transform``: the forest's output transform, which
        the call may apply itself when asked (``apply``) and it can do so bit for bit;
        ``flat``: one output, returned as (n,) rather than (n, 1).  A kernel whose program
        splits a row's trees over threads (a phase looping over trees) may also take
        ``threads``, the form's thread count: its calls then take a third argument, ``1`` for
        a call to run on the calling thread alone (``predict(threads=1)``).

        A call may also read rows as a frame's library hands a few out: a list of tuples of
        Python numbers (float, int; None missing) in the model's feature order, converted as
        NumPy converts them to float64 and then to the input dtype.  Such a call has an
        attribute ``reads_tuples`` True, and returns None for a list it does not read (a value
        of another type): the caller then reads the rows otherwise."""
        ...

    def artifact(self) -> bytes:
        """Bytes from which the target's ``load_kernel`` rebuilds this kernel on a matching
        host without compiling, or ``b""`` where there are none."""
        ...


@runtime_checkable
class DeviceKernel(Protocol):
    """The device-input capability of a GPU kernel (see the module docstring)."""

    def device_predict(self, rows, num_outputs: int, finish=None):
        """The margins ``(n, num_outputs)`` of ``rows`` (a
        :class:`silvanforge.inputs.device.DeviceRows`: checked for shape, dtype and order) as a
        :class:`silvanforge.inputs.device.DeviceArray` on the rows' device, computed there
        without copying the rows to the host.  ``finish``: None, or a host function of the
        margins (a NumPy array) whose result is copied back to the device and returned instead
        (the core's exact output transform); its ``transform`` attribute (the forest's
        :class:`~silvanforge.ir.hir.Transform`) lets a kernel apply it on the device instead,
        returning the ``(n, num_outputs)`` values, where they equal ``finish``'s bit for bit.  Raise :class:`~silvanforge.errors.InputError` for
        rows on another device.  Synchronous: it waits for the rows' stream before reading them
        and returns a complete result.  Safe to call from many threads."""
        ...


class BaseKernel:
    """Defaults of the optional capabilities: no lean path and no artifact."""

    def small_calls(self, max_rows: int, transform=None, flat: bool = False) -> SmallCall | None:
        return None

    def artifact(self) -> bytes:
        return b""


class PhaseKernel(BaseKernel):
    """Base of kernels that run an LIR module's phases (its functions) as calls over row and
    tree ranges; :meth:`margins` is the core's runtime splitting them over threads.

    A subclass sets ``module``, ``input_dtype``, ``output_dtype``, ``phases`` (the module's
    functions) and ``scratch`` (its scratch buffers), and implements :meth:`run`."""

    phases: list
    scratch: list
    #: A hand-off of the kernel's own (native workers): ``run_shares(phase, rows, out, scratch,
    #: shares) -> bool`` runs every share of a phase and says whether it did; None: none, the
    #: runtime's thread pool runs the shares.
    run_shares: ClassVar[Callable | None] = None

    @property
    def walk_steps_per_row(self) -> int:
        """Walk steps a row of the program takes (its module's ``info``; 0: unknown)."""
        return int(self.module.info.get("walk_steps_per_row", 0) or 0)

    @property
    def min_rows_per_thread(self) -> int:
        """Rows a thread should at least take (a cheap model: a hand-off costs more than few
        rows), under the run-time settings in effect (:mod:`silvanforge.runtime.threads`)."""
        return rows_per_thread(self.walk_steps_per_row)

    @property
    def min_rows_per_share(self) -> int:
        """Rows a share should at least hold where ``run_shares`` hands them off, under the
        run-time settings in effect."""
        return rows_per_share(self.walk_steps_per_row)

    def run(self, phase: int, rows: np.ndarray, out: np.ndarray, scratch: list, row_begin: int,
            row_end: int, iter_begin: int = 0, iter_end: int = 0) -> None:
        """One call of phase ``phase`` over rows ``[row_begin, row_end)`` and, for a phase whose
        parallel loop runs over trees, its iterations ``[iter_begin, iter_end)``."""
        raise NotImplementedError

    def margins(self, rows: np.ndarray, num_outputs: int, threads: int | None = None) -> np.ndarray:
        return run_phases(self, rows, num_outputs, threads)


def check_kernel(kernel, target: str) -> Kernel:
    """``kernel`` if it implements :class:`Kernel`, else a PluginError naming what it lacks."""
    if isinstance(kernel, Kernel):
        return kernel
    missing = [m for m in ("module", "input_dtype", "output_dtype", "margins", "small_calls", "artifact")
               if not hasattr(kernel, m)]
    raise PluginError(f"target {target!r} returned {type(kernel).__name__}, not a silvanforge.runtime.kernel.Kernel "
                      f"(it lacks {', '.join(missing)})")

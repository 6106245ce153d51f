"""When a compile's other forms start while its main form is still being built.

A default compile returns once its main form is built and leaves the plan's other forms to a
background thread (:mod:`silvanforge.plan.lateforms`).  The main form spends most of its time in
the target's machine code generation (LLVM: 0.4-0.9 s of a 1000-tree model's second), which
runs outside Python and on one core; on a machine with a second core idle, the other forms'
estimates and lowering (Python) fit in that time, and their own machine code then runs beside
the main form's.  Started unconditionally, the builder took the main form's core where the
machine was busy, so the first prediction came later: it starts early only where a core was
found idle while the main form was lowered (:class:`IdleCores`), else after the main form, as
before.

How a target says its long native work begins: :func:`native_work` around the call (the CPU
target's LLVM pipeline); the core listens on the thread building the main form
(:func:`on_native_work`).  Nothing here changes what is built, only when.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator

__all__ = ["IDLE_CORE", "IdleCores", "native_work", "on_native_work"]

_listening = threading.local()


@contextlib.contextmanager
def native_work() -> Iterator[None]:
    """Wrapped by a target around a long call that runs outside Python (the GIL released), such
    as generating machine code: a compile may start other Python work on another thread meanwhile
    (:mod:`silvanforge.plan.overlap`).  Costs nothing where no compile listens."""
    listener = getattr(_listening, "fn", None)
    if listener is not None:
        _listening.fn = None  # (once: the first native call of the main form)
        try:
            listener()
        except Exception:  # noqa: BLE001 - starting others early is only a gain: the build goes on
            pass
    yield


@contextlib.contextmanager
def on_native_work(fn: Callable[[], None]) -> Iterator[None]:
    """``fn()`` called, on this thread, when code run inside this block enters its first
    :func:`native_work`."""
    outer = getattr(_listening, "fn", None)
    _listening.fn = fn
    try:
        yield
    finally:
        _listening.fn = outer


# The idle share of a core (measured while the main form was lowered: it keeps one core busy
# itself) above which a second core counts as free.
IDLE_CORE = 0.75


class IdleCores:
    """How many of this process's cores stood idle since it was made (``idle()``), from the
    kernel's counts of each CPU's time (Linux ``/proc/stat``; the CPUs this process may run
    on).  None where the counts are not there or the time since is too short to say."""

    # Fewer CPU ticks (1/100 s each, summed over the CPUs) than this say nothing.
    MIN_TICKS = 8

    def __init__(self):
        try:
            self._cpus = {f"cpu{c}".encode() for c in os.sched_getaffinity(0)}
        except (AttributeError, OSError):
            self._cpus = None
        self._start = self._times()

    def _times(self) -> tuple[int, int] | None:
        """(idle, all) ticks of this process's CPUs since boot, or None."""
        if not self._cpus or len(self._cpus) < 2:
            return None
        try:
            with open("/proc/stat", "rb") as f:
                lines = f.read().split(b"\n")
        except OSError:
            return None
        idle = total = 0
        for line in lines[1:]:
            fields = line.split()
            if not fields or not fields[0].startswith(b"cpu"):
                break
            if fields[0] in self._cpus:
                # user nice system idle iowait irq softirq steal (guest time is within user's)
                ticks = [int(x) for x in fields[1:9]]
                idle += ticks[3] + ticks[4]
                total += sum(ticks)
        return idle, total

    def idle(self) -> float | None:
        """Cores idle on average since this was made (0 to the process's CPUs), or None."""
        now = self._times()
        if self._start is None or now is None or now[1] - self._start[1] < self.MIN_TICKS:
            return None
        return (now[0] - self._start[0]) / (now[1] - self._start[1]) * len(self._cpus)

    def a_core_free(self) -> bool:
        """Whether a core other than the caller's stood idle (:data:`IDLE_CORE`); False where
        it cannot be told."""
        idle = self.idle()
        return idle is not None and idle >= IDLE_CORE

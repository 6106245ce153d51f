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
(:func:`on_native_work`), and on the threads building the other forms, which take turns at
their Python (:class:`Turns`).  Nothing here changes what is built, only when.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

from silvanforge.runtime.cpu_quota import cpu_quota, read_file

__all__ = ["IDLE_CORE", "IdleCores", "Turns", "native_work", "on_native_work"]

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
    on), and no more than its cgroup's CPU quota left unused (:func:`cpu_quota`: its processes'
    CPU time over the time since, or, where that is not counted, the quota less the caller's
    busy core).  None where the counts are not there, the process may use less than two cores,
    or the time since is too short to say.  ``root``: where the kernel's files are (tests);
    ``clock``: seconds, for the quota's share."""

    # Fewer CPU ticks (1/100 s each, summed over the CPUs) than this say nothing.
    MIN_TICKS = 8

    def __init__(self, root: str = "/", clock: Callable[[], float] = time.monotonic):
        self._root, self._clock = root, clock
        try:
            cpus = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            cpus = set()
        self._quota = cpu_quota(root)
        cores = len(cpus) if self._quota is None else min(len(cpus), self._quota.cores)
        self._cpus = {f"cpu{c}" for c in cpus} if cores >= 2 else None
        self._start = self._times()

    def _times(self) -> tuple[int, int, float, float | None] | None:
        """(idle, all) ticks of this process's CPUs since boot, the clock and the cgroup's CPU
        seconds, or None."""
        if not self._cpus:
            return None
        stat = read_file(self._root, "proc/stat")
        if stat is None:
            return None
        idle = total = 0
        for line in stat.split("\n")[1:]:
            fields = line.split()
            if not fields or not fields[0].startswith("cpu"):
                break
            if fields[0] in self._cpus:
                # user nice system idle iowait irq softirq steal (guest time is within user's)
                ticks = [int(x) for x in fields[1:9]]
                idle += ticks[3] + ticks[4]
                total += sum(ticks)
        used = self._quota.used(self._root) if self._quota is not None else None
        return idle, total, self._clock(), used

    def idle(self) -> float | None:
        """Cores idle on average since this was made (0 to the process's CPUs), or None."""
        now, start = self._times(), self._start
        if start is None or now is None or now[1] - start[1] < self.MIN_TICKS:
            return None
        idle = (now[0] - start[0]) / (now[1] - start[1]) * len(self._cpus)
        if self._quota is not None:
            if now[3] is not None and start[3] is not None and now[2] > start[2]:
                left = self._quota.cores - (now[3] - start[3]) / (now[2] - start[2])
            else:
                left = self._quota.cores - 1  # (the caller keeps a core busy)
            idle = min(idle, max(0.0, left))
        return idle

    def a_core_free(self) -> bool:
        """Whether a core other than the caller's stood idle (:data:`IDLE_CORE`); False where
        it cannot be told."""
        idle = self.idle()
        return idle is not None and idle >= IDLE_CORE


class Turns:
    """The Python part of building forms (lowering, the target's code generation), one thread at
    a time: Python holds the GIL, so two forms lowered together each took as long as both, and
    neither's machine code started before both were lowered (on the flight 1000x255 model, the
    16-row form's LLVM started a third of a second late; docs/benchmarks.md, "Compile times").
    A thread's turn ends as its form's native work starts (:func:`native_work`: the next form's
    Python then runs beside it, on the other core) or as its build ends.  A target that never
    announces native work builds its forms one after another."""

    def __init__(self):
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """A form built inside this block holds the turn until its native work starts."""
        self._lock.acquire()
        held = [True]

        def end():
            if held[0]:
                held[0] = False
                self._lock.release()

        try:
            with on_native_work(end):
                yield
        finally:
            end()

"""The forms of a plan built after its compile returned: ``sf.compile(model, forms=...)``.

A compile's main form (the one answering the largest requests, lowered for the compile's batch
size) does not depend on the other bands, so the compile can return once it is built; the
bands' estimates and the forms for smaller requests follow:

- ``"background"`` (the default): on a thread of their own, started as the compile returns.
- ``"lazy"``: the same, started by the first request of at most ``MID_MAX`` rows (the only
  ones another form may answer): a service sending large batches never pays for them.
- ``"eager"``: within the compile, as before (two threads: :func:`silvanforge.plan.policy.untuned_plan`).

Meanwhile the main form answers every request: the same numbers (every form is exact), at the
main form's speed.  When the forms are built, the plan the compile would have made eagerly
(the same forms, bands and programs) replaces it in one assignment, so a call sees the one or
the other, never a mix.  What needs the whole plan waits for it: ``cf.forms``, ``cf.bands``,
``cf.form_for``, ``save``, ``to_bytes``, pickling, ``cf.wait()``; ``cf.show("plan")`` does
not, and says which forms are built.

Threads and processes: the builder checks a process-wide guard between steps (a form lowered,
a form compiled).  A fork waits for the step in flight (LLVM never forks mid-call), and in the
child the builds start again from the main form when next needed; at interpreter exit the
builder stops after its step.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref

from silvanforge.errors import InputError
from silvanforge.plan.bands import MID_MAX

MODES = ("background", "lazy", "eager")
DEFAULT_MODE = "background"


def check_mode(mode: str | None) -> str:
    """``forms=`` of a compile: None is :data:`DEFAULT_MODE`."""
    if mode is None:
        return DEFAULT_MODE
    if mode not in MODES:
        raise InputError(f"forms must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    return mode


class _Stopped(Exception):
    """The interpreter is exiting: the builder stops between steps."""


class _Guard:
    """Steps of every builder run together; a fork waits until none is in flight."""

    def __init__(self):
        self.cond = threading.Condition()
        self.active = 0
        self.forking = False
        self.exiting = False

    @contextlib.contextmanager
    def step(self):
        with self.cond:
            while self.forking:
                self.cond.wait()
            if self.exiting:
                raise _Stopped
            self.active += 1
        try:
            yield
        finally:
            with self.cond:
                self.active -= 1
                self.cond.notify_all()

    def before_fork(self):
        with self.cond:
            self.forking = True
            while self.active:
                self.cond.wait()

    def after_fork_in_parent(self):
        with self.cond:
            self.forking = False
            self.cond.notify_all()


_guard = _Guard()
_pending: "weakref.WeakSet[LateForms]" = weakref.WeakSet()


class LateForms:
    """The forms of one compiled model still to build: ``build()`` gives ``(forms, bands)``
    (the eager plan's, around the main form), ``install(forms, bands)`` hands them to the
    compiled model, ``done()`` (optional) runs after, on the builder's thread.  The compiled
    model starts a background build (:meth:`start`) once it holds this."""

    def __init__(self, build, install, mode: str, done=None):
        self._build, self._install, self._done_hook = build, install, done
        self.mode = mode
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        _pending.add(self)

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def poke(self, rows) -> None:
        """A request of ``rows`` (what ``predict`` took) arrived: a lazy build starts where
        another form may answer a request of its size."""
        if self._thread is None:
            try:
                n = len(rows)
            except TypeError:
                n = 0
            if n <= MID_MAX:
                self.start()

    def start(self) -> None:
        with self._lock:
            if self._thread is None and not self._finished.is_set():
                self._thread = threading.Thread(target=self._run, name="silvanforge-forms", daemon=True)
                self._thread.start()

    def wait(self) -> None:
        """Until every form is built (started here if it was not); the builder's error, if any,
        raised here (``predict`` went on with the main form)."""
        self.start()
        self._finished.wait()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            forms, bands = self._build(_guard.step)
            self._install(forms, bands)
            if self._done_hook is not None:
                self._done_hook()
        except _Stopped:
            self.error = RuntimeError("the interpreter exited before the forms were built")
        except BaseException as exc:  # noqa: BLE001 - kept for wait(); predict keeps the main form
            self.error = exc
        self._build = self._install = self._done_hook = None  # the model, the compile's memo
        self._finished.set()
        _pending.discard(self)

    def _after_fork_in_child(self) -> None:
        # The builder thread did not survive the fork: the build starts again when needed.
        self._lock = threading.Lock()
        if not self._finished.is_set():
            self._thread = None
            if self.mode == "background":
                self.mode = "lazy"  # no thread started behind the child's back at fork


def _before_fork():
    _guard.before_fork()


def _after_fork_in_parent():
    _guard.after_fork_in_parent()


def _after_fork_in_child():
    global _guard
    _guard = _Guard()
    for late in list(_pending):
        late._after_fork_in_child()


def _at_exit():
    with _guard.cond:
        _guard.exiting = True
    for late in list(_pending):
        thread = late._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout=30)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
atexit.register(_at_exit)


__all__ = ["DEFAULT_MODE", "MODES", "LateForms", "check_mode"]

"""Several server processes on one listening socket: ``forge serve --workers N``.

Why processes: a server answers on one event loop, and Python runs one thread's code at a time,
so one process keeps about one core busy whatever the machine has (under load its event loop,
not the compiled code, is what every request waits for: docs/benchmarks.md, "Serving").  N
processes accepting on the same socket answer about N times as many requests where there are
cores for them.

The model is compiled (or loaded) once, by the parent, before it forks: the workers share its code
and tables copy-on-write, and none of them compiles.  On Linux each worker listens on a socket of
its own bound to the port with SO_REUSEPORT, and the kernel shares new connections out among them
by a hash of each; elsewhere they share one socket, and a connection goes to whichever accepts
first (unevenly: on one socket, one of two workers took five sixths of 64 clients' connections).
The parent holds every socket, so connections waiting for a worker that died wait for the one
that replaces it.  Each worker has its own micro-batcher (requests are batched within a worker)
and its own ``/health`` counts, which name its process.

The parent supervises.  A worker that ends without being asked to is replaced, unless workers
keep ending within a second of starting (something is wrong with every worker: the parent then
stops them all and fails).  SIGTERM or SIGINT to the parent stops every worker as one server
stops (the requests in flight answered), then the parent ends as the signal would.  A worker
whose parent is gone (killed outright) stops itself.  POSIX only: ``os.fork``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable

from silvanforge.errors import InputError, SilvanForgeError

# A worker ending sooner than this after it started counts as a failure to start.
QUICK_END_S = 1.0
# How often a worker looks whether its parent is still there.
ORPHAN_CHECK_S = 1.0


def check_workers(workers: int) -> None:
    """An InputError where this platform cannot run ``workers`` processes."""
    if workers > 1 and not hasattr(os, "fork"):
        raise InputError("--workers above 1 needs os.fork (Linux, macOS): on this platform run one server "
                         "process a port instead")


def run_workers(serve_one: Callable[[int], None], workers: int, log=None) -> int:
    """Fork ``workers`` processes, worker ``i`` calling ``serve_one(i)`` (a server on a socket
    bound before, until a signal stops it; a worker that replaces another takes its number), and
    supervise them (see the module docstring) until they have all ended.  Returns the signal that stopped them (0: none; they ended by themselves);
    raises SilvanForgeError where workers kept failing to start."""
    check_workers(workers)
    log = log or sys.stderr
    children: dict[int, tuple[int, float]] = {}  # pid -> (its worker number, when it started)
    stopping: list[int] = []  # the signal that stops the workers, once one came

    def stop(signum, frame=None) -> None:
        if not stopping:
            stopping.append(signum)
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def spawn(worker: int) -> None:
        parent = os.getpid()
        sys.stdout.flush()
        log.flush()
        pid = os.fork()
        if pid == 0:  # the worker: it never returns into the parent's code
            _run_worker(lambda: serve_one(worker), parent, previous)
        children[pid] = (worker, time.monotonic())

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    failed = None
    try:
        quick_ends = 0
        for worker in range(workers):
            spawn(worker)
        while children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            ended = children.pop(pid, None)
            if ended is None or stopping:
                continue
            worker, started = ended
            quick_ends = quick_ends + 1 if time.monotonic() - started < QUICK_END_S else 0
            why = _why_ended(status)
            if quick_ends >= max(2, workers):  # every worker fails: the others stopped, and an error
                failed = f"worker {pid} ended ({why}) within a second of starting, {quick_ends} in a row"
                stop(signal.SIGTERM)
                continue
            log.write(f"forge serve: worker {pid} ended ({why}); starting another\n")
            log.flush()
            spawn(worker)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if failed is not None:
        raise SilvanForgeError(f"the server's workers fail: {failed} (each one's error is above)")
    return stopping[0] if stopping else 0


def _run_worker(serve_one: Callable[[], None], parent: int, previous: dict) -> None:
    """The forked worker's life: the signals as they were before the parent took them (uvicorn
    installs its own), a watch on the parent, the server; then the process ends."""
    code = 0
    try:
        for s, handler in previous.items():
            signal.signal(s, handler)
        threading.Thread(target=_watch_parent, args=(parent,), name="forge-serve-parent-watch", daemon=True).start()
        serve_one()
    except KeyboardInterrupt:  # (Ctrl-C reaches every process of the terminal's group)
        pass
    except BaseException:  # noqa: BLE001 - a worker's failure is reported, and the parent replaces it
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _watch_parent(parent: int) -> None:
    """SIGTERM to this worker once its parent is gone (killed outright, so it could not stop
    its workers): else the worker would serve on, orphaned, holding the port."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK_S)
    os.kill(os.getpid(), signal.SIGTERM)


def _why_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"

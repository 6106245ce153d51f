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

The parent supervises.  A worker that ends without being asked to is replaced (a little later
the more ended lately), unless more than twice as many as there are workers end within ten
seconds (something is wrong with every worker: the parent then stops the others and fails).
SIGTERM or SIGINT to the parent stops every worker as one server stops (the requests in flight
answered), then the parent ends as the signal would; the signals are held back while a worker is
forked, so one that arrives meanwhile reaches every worker too.  A worker whose parent is gone
(killed outright) notices within a second and stops itself as on SIGTERM.  A worker that hangs, alive, is not found out:
the connections the kernel gives its socket wait.  POSIX only: ``os.fork``.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable

from silvanforge.errors import InputError, SilvanForgeError

from .app import listen

# Workers ending without being asked to, this many (at least) within FAILURE_WINDOW_S: every
# worker fails (its error, a start that cannot succeed): the parent stops the others and fails.
# Each replacement waits a little more the more ended lately (RESTART_DELAY_S each, at most
# MAX_RESTART_DELAY_S), so a worker failing at its first request is not restarted in a tight loop.
FAILURE_WINDOW_S = 10.0
RESTART_DELAY_S, MAX_RESTART_DELAY_S = 0.1, 1.0
# How often the parent looks at its workers, and a worker whether its parent is still there.
POLL_S = 0.05
ORPHAN_CHECK_S = 1.0
_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Whether the kernel shares a port's connections out among sockets bound with SO_REUSEPORT
# (Linux; BSD and macOS accept the option without sharing).
SHARES_CONNECTIONS = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def listen_workers(host: str, port: int, workers: int) -> list[socket.socket]:
    """The sockets ``workers`` servers listen on at ``host``:``port`` (0: a free port), worker
    ``i`` on ``sockets[i % len(sockets)]``: one a worker where the kernel shares connections out
    among sockets bound with SO_REUSEPORT (one socket shared by two workers gave one of them five
    sixths of 64 clients' connections), else one they share.  An address in use is an
    InputError: the address is tried without SO_REUSEPORT first, since with it a second server's
    sockets would join another's on the port, silently, and take some of its connections."""
    if workers <= 1 or not SHARES_CONNECTIONS:
        return [listen(host, port)]
    probe = listen(host, port)
    port = probe.getsockname()[1]
    probe.close()
    sockets: list[socket.socket] = []
    try:
        for _ in range(workers):
            sockets.append(listen(host, port, reuse_port=True))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def check_workers(workers: int, target_kind: str = "cpu") -> None:
    """An InputError where this platform cannot run ``workers`` processes of a model compiled
    for a target of ``target_kind`` ("cpu" or "gpu")."""
    if workers > 1 and not hasattr(os, "fork"):
        raise InputError("--workers above 1 needs os.fork (Linux, macOS): on this platform run one server "
                         "process a port instead")
    if workers > 1 and target_kind != "cpu":  # (CUDA's and OpenCL's contexts are not fork-safe)
        raise InputError("--workers above 1 serves models compiled for the CPU: a GPU's context does not survive "
                         "the fork that starts the workers (run one server a GPU instead)")


def run_workers(serve_one: Callable[[int], None], workers: int, log=None) -> int:
    """Fork ``workers`` processes, worker ``i`` calling ``serve_one(i)`` (a server on a socket
    bound before, until a signal stops it; a worker that replaces another takes its number), and
    supervise them (see the module docstring) until they have all ended.  Returns the signal that
    stopped them (0: none; they ended by themselves); raises SilvanForgeError where workers kept
    failing."""
    check_workers(workers)
    log = log or sys.stderr
    children: dict[int, int] = {}  # pid -> its worker number
    stopping: list[int] = []  # the signal that stops the workers, once one came
    ended: list[float] = []  # when workers ended unasked, within the last FAILURE_WINDOW_S

    def stop(signum, frame=None) -> None:
        if not stopping:
            stopping.append(signum)
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def spawn(worker: int) -> None:
        # (SIGTERM and SIGINT held back across the fork: in the child until it has its own
        # handlers again, in the parent until the child is known to ``stop``)
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            if stopping:
                return
            parent = os.getpid()
            sys.stdout.flush()
            log.flush()
            pid = os.fork()
            if pid == 0:  # the worker: it never returns into the parent's code
                _run_worker(lambda: serve_one(worker), parent, previous, held)
            children[pid] = worker
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    # What exists now stays out of the collector's sight in every worker (a collection after the
    # fork would write to every object's page, and each worker would copy them all: 31 MB a worker)
    gc.collect()
    gc.freeze()
    previous = {s: signal.signal(s, stop) for s in _SIGNALS}
    failed = None
    try:
        for worker in range(workers):
            spawn(worker)
        while children:
            # (only its own children: the caller may have others, which are not its to collect)
            done = [(pid, status) for pid, status in map(_reaped, list(children)) if pid]
            if not done:
                time.sleep(POLL_S)
                continue
            for pid, status in done:
                worker = children.pop(pid)
                if stopping:
                    continue
                now = time.monotonic()
                ended[:] = [t for t in ended if now - t < FAILURE_WINDOW_S] + [now]
                if len(ended) >= 2 * workers + 1 and failed is None:
                    failed = f"{len(ended)} workers ended in {FAILURE_WINDOW_S:g} s, the last {pid} ({_why_ended(status)})"
                    stop(signal.SIGTERM)
                    continue
                log.write(f"forge serve: worker {pid} ended ({_why_ended(status)}); starting another\n")
                log.flush()
                time.sleep(min(MAX_RESTART_DELAY_S, RESTART_DELAY_S * (len(ended) - 1)))
                spawn(worker)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if failed is not None:
        raise SilvanForgeError(f"the server's workers keep failing: {failed} (each one's error is above)")
    return stopping[0] if stopping else 0


def _reaped(pid: int) -> tuple[int, int]:
    """(pid, its wait status) where child ``pid`` has ended (and is collected now), else (0, 0)."""
    try:
        return os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # (collected already, by someone else)
        return pid, 0


def _run_worker(serve_one: Callable[[], None], parent: int, previous: dict, mask) -> None:
    """The forked worker's life: the signals as they were before the parent took them (uvicorn
    installs its own; one sent meanwhile arrives now), a watch on the parent, the server; then
    the process ends."""
    code = 0
    try:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
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

"""``forge serve``: a compiled model behind HTTP, concurrent requests micro-batched.

A command of the ``forge`` CLI added through the ``silvanforge.commands`` entry point; it loads
or compiles MODEL as ``forge predict`` does and serves it with uvicorn until SIGINT or SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys

import typer

from silvanforge.cli import load_or_compile
from silvanforge.cli.flags import MODEL_ARG, cache_opt, target_opt, threads_opt
from silvanforge.errors import InputError
from silvanforge.plugins import registry
from silvanforge.runtime.threads import default_threads

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def serve(
    model: str = MODEL_ARG,
    host: str = typer.Option("127.0.0.1", "--host", help="The address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="The port to listen on (0: a free one)."),
    threads: int | None = threads_opt("Threads each predict call uses (default: all usable CPUs, shared out among "
                                      "--workers)."),
    batch_window_us: float = typer.Option(
        200.0, "--batch-window-us", min=0.0,
        help="Microseconds to wait for more requests after the first before predicting them in one call "
             "(0: merge only requests already waiting; uvloop's timers count whole milliseconds, so a window "
             "under half of one closes at the event loop's next turn)."),
    max_queue: int = typer.Option(1024, "--max-queue", min=1,
                                  help="Requests that may wait for a predict call; more are answered 503."),
    max_body_mb: float = typer.Option(64.0, "--max-body-mb", min=0.001,
                                      help="The largest request body read, in MiB; a larger one is answered 413."),
    target: str | None = target_opt(),
    trust_code: bool = typer.Option(False, "--trust-code",
                                    help="Run an artifact's machine code though it is not signed with "
                                         "your key (only for artifacts you trust: it is native code)."),
    cache: str | None = cache_opt(),
    log_level: str = typer.Option("info", "--log-level",
                                  help="uvicorn's log level: critical, error, warning, info, debug."),
    prepare: str | None = typer.Option(
        None, "--prepare",
        help="Outputs that bodies may ask for beside predictions to build before serving, comma-separated: "
             "pred_contribs (SHAP contributions), pred_leaf (leaf indices); else the first request asking "
             "builds them (seconds for a large model) and the requests behind it wait."),
    workers: int = typer.Option(1, "--workers", "-w", min=1,
                                help="Server processes sharing the port, each with its own event loop and batcher "
                                     "(the model compiled once, before they start; POSIX only). Each predicts on "
                                     "--threads threads, default the usable CPUs shared out among them."),
):
    """Serve MODEL over HTTP: POST /predict (JSON rows, records or columns), GET /health, GET /model.
    Requests arriving within --batch-window-us of each other are predicted in one call."""
    from .app import make_app, make_server, prepare_outputs
    from .workers import check_workers, listen_workers, run_workers

    if log_level.lower() not in LOG_LEVELS:
        raise InputError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    check_workers(workers, registry().target_kind(target) if target and workers > 1 else "cpu")  # (before a compile)
    if threads is None and workers > 1:  # (each worker's calls on its share of the CPUs, not all of them)
        threads = max(1, default_threads() // workers)
    sockets = listen_workers(host, port, workers)  # first: an address in use is an error line before any compile
    try:
        cf = load_or_compile(model, target, None, None, None, threads, trust_code=trust_code, cache=cache)
        check_workers(workers, registry().target_kind(cf.target))  # (an artifact's own target)
        if prepare:  # (before a fork: built once, every worker's)
            prepare_outputs(cf, [name.strip() for name in prepare.split(",") if name.strip()])
        if workers > 1:
            cf.wait()  # (every form built before the fork: no worker builds its own)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    bound = sockets[0].getsockname()
    processes = f", {workers} workers" if workers > 1 else ""
    sys.stderr.write(f"serving {model} on http://{_url_host(host)}:{bound[1]} "
                     f"(batch window {batch_window_us:g} us, queue {max_queue}{processes}); Ctrl-C stops\n")
    sys.stderr.flush()

    def serve_one(worker: int = 0):
        # uvicorn stops on SIGINT or SIGTERM, answering the requests in flight, then raises the
        # signal again: SIGTERM ends the process as that signal would, Ctrl-C arrives as KeyboardInterrupt
        app = make_app(cf, threads=threads, window_us=batch_window_us, max_queue=max_queue,
                       max_body_bytes=max(1, int(max_body_mb * (1 << 20))))
        make_server(app, log_level=log_level.lower()).run(sockets=[sockets[worker % len(sockets)]])

    try:
        if workers == 1:
            serve_one()
        elif run_workers(serve_one, workers) == signal.SIGTERM:
            # (every worker stopped: this process ends as SIGTERM would, as one server's does)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            sys.stderr.write("stopped\n")
    except KeyboardInterrupt:
        sys.stderr.write("stopped\n")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host

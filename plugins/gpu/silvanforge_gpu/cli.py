"""``forge tune-gpu``: time the GPU template's candidates for a model on a GPU target and keep the
fastest schedule (Algorithm 1, :mod:`silvanforge_gpu.explore`).

A command of the ``forge`` CLI added through the ``silvanforge.commands`` entry point, so the
core carries no GPU tooling; it uses the CLI's own argument builders and consoles.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from silvanforge.cli import _err, _out
from silvanforge.cli.flags import MODEL_ARG
from silvanforge.errors import InputError


def tune(
    model: str = MODEL_ARG,
    target: str = typer.Option(..., "--target", "-t", show_default=False, help="A GPU target: cuda or amd."),
    batch_size: int = typer.Option(4096, "--batch-size", "-b", min=1, help="Rows per call to tune for."),
    out: str | None = typer.Option(None, "--out", "-o", help="Write the best schedule here (text)."),
    repeat: int = typer.Option(3, "--repeat", min=1, help="Timed calls per candidate (the best counts)."),
):
    """Time the GPU loop nests worth trying for MODEL (rows per block, threads per tree, what is
    cached) on TARGET and keep the fastest schedule."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from silvanforge.plugins import registry as reg

    from .explore import explore

    reg().check_target(target)
    if reg().target_kind(target) != "gpu":
        raise InputError(f"tune explores the GPU template; {target!r} is not a GPU target")
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=_err(), transient=True) as progress:
        task = progress.add_task("tune", total=None)
        result = explore(model, target, batch_size, repeat=repeat,
                         progress=lambda what, done, total: progress.update(
                             task, description=escape(what), completed=done, total=total))
    table = Table(title=f"GPU template on {target}, batch {batch_size}", title_justify="left")
    for col in ("rep", "rows/block", "rows/thread", "tree threads", "shared", "kernel time"):
        table.add_column(col)
    for t in sorted(result.trials, key=lambda t: t.seconds):
        p = t.params
        table.add_row(t.rep, str(p.rows_per_block), str(p.rows_per_thread), str(p.tree_threads),
                      "yes" if p.shared_reduce else "", f"{t.seconds * 1e6:.1f} µs")
    _out().print(table)
    text = result.schedule.to_text()
    if out is not None:
        try:
            Path(out).write_text(text + "\n")
        except OSError as exc:
            raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    _out().print(f"best: --rep {result.best.rep} --schedule {escape(out or 'FILE')}\n{escape(text)}")

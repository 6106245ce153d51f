"""``forge bench``: our compiled model against the peers installed, on the same random rows.

A command of the ``forge`` CLI added through the ``silvanforge.commands`` entry point, so the
core carries no benchmark tooling; it uses the CLI's own option builders and consoles.
"""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from silvanforge import cli as forge_cli
from silvanforge.cli import _err, _out, read_schedule
from silvanforge.cli.flags import cpu_opt, profile_opt, rep_opt, reorder_opt, schedule_opt, target_opt, tile_opt
from silvanforge.errors import InputError


def bench(
    model: str = typer.Argument(..., help="A model file (XGBoost, LightGBM, CatBoost or ONNX).", show_default=False),
    batch_sizes: str = typer.Option("1,64,512,4096", "--batch-sizes", help="Comma-separated batch sizes."),
    compile_batch: str = typer.Option(
        "each", "--compile-batch",
        help="The batch size ours is compiled for: each (one compile per batch size), none (one "
             "compile without a batch size, as a service compiled once for any request), or a number."),
    threads: str | None = typer.Option(
        None, "--threads", "-j",
        help="Threads to predict with, or a comma-separated list timed one after the other "
             "(e.g. 1,2 or 1,all; default: all usable CPUs)."),
    target: str | None = target_opt(),
    rep: str | None = rep_opt(),
    schedule: str | None = schedule_opt(),
    repeat: int = typer.Option(5, "--repeat", min=1, help="Timing runs per measurement; the best counts."),
    min_time: float = typer.Option(0.1, "--min-time", min=0.0,
                                   help="Seconds each timing run lasts at least (repeating the call)."),
    peers: str | None = typer.Option(None, "--peers",
                                        help="Comma-separated peers to run (default: every available one)."),
    markdown: str | None = typer.Option(None, "--markdown", help="Also write the results as markdown here."),
    append: bool = typer.Option(False, "--append",
                                help="Add the results to the --markdown file as a new section."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --markdown file."),
    lleaves_venv: str | None = typer.Option(
        None, "--lleaves-venv",
        help="A virtual environment for lleaves (needs llvmlite < 0.44), built there if missing "
             "(default: $SILVANFORGE_LLEAVES_VENV, or ~/.cache/silvanforge/lleaves-venv if present)."),
    tile_size: int | None = tile_opt(),
    profile: str | None = profile_opt(),
    reorder: str | None = reorder_opt(),
    pad: bool | None = typer.Option(None, "--pad/--no-pad",
                                    help="Pad trees to one depth (or each to its own with --reorder); "
                                         "default: when it at most doubles the nodes."),
    cpu: str | None = cpu_opt(),
    output: str = typer.Option("predict", "--output",
                               help="What is timed: predict (predictions), leaf (leaf indices against the "
                                    "library's pred_leaf) or contribs (SHAP contributions against the "
                                    "library, shap and fasttreeshap)."),
    missing: float = typer.Option(0.0, "--missing", min=0.0, max=1.0,
                                  help="Share of the rows' values made missing (NaN), as wide sparse "
                                       "datasets hold them (Bosch's rows: about 0.8)."),
):
    """Time our compiled model against the available peers on the same random inputs."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from . import bench as benchmod

    sizes = benchmod.parse_batch_sizes(batch_sizes)
    thread_counts = benchmod.parse_threads(threads)
    peer_list = None
    if peers is not None:
        peer_list = [p.strip() for p in peers.split(",") if p.strip()]
        # a GPU target's peers (hummingbird-cuda, xgboost-cuda) are named as the CPU peers are
        known = list(dict.fromkeys(p[0] for p in (*benchmod.PEERS, *benchmod.bench_peers.GPU_PEERS)))
        known += ["shap", "fasttreeshap"] if output == "contribs" else []
        unknown = [p for p in peer_list if p not in known]
        if unknown:
            raise InputError(f"unknown peer {unknown[0]!r}; known: {', '.join(known)}")
    sched = read_schedule(schedule)
    if compile_batch not in ("each", "none"):
        try:
            compile_batch = int(compile_batch)
        except ValueError:
            raise InputError(f"--compile-batch must be each, none or a positive integer, got {compile_batch!r}") from None
    if markdown is not None:
        benchmod.check_markdown_target(markdown, append, overwrite)
    elif append or overwrite:
        raise InputError("--append and --overwrite need --markdown FILE")

    if output not in ("predict", "leaf", "contribs"):
        raise InputError(f"--output must be predict, leaf or contribs, got {output!r}")
    if missing and output != "predict":
        raise InputError("--missing applies to --output predict only")
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=_err(), transient=True) as progress:
        task = progress.add_task("bench", total=None)

        def on_progress(what: str, done: int, total: int) -> None:
            progress.update(task, description=what, completed=done, total=total)

        if output != "predict":
            from .explanations import run_output_bench

            report = run_output_bench(model, output, sizes, benchmod._thread_counts(thread_counts),
                                      repeat=repeat, min_time=min_time, peers=peer_list, progress=on_progress)
        else:
            report = benchmod.run_bench(model, sizes, threads=thread_counts, target=target or "cpu", rep=rep,
                                        schedule=sched, repeat=repeat, min_time=min_time, peers=peer_list,
                                        progress=on_progress, lleaves_venv=lleaves_venv,
                                        tile_size=tile_size or 1, profile=profile, reorder=reorder, pad=pad,
                                        compile_batch=compile_batch, cpu=cpu, missing=missing)

    out = _out()
    table = Table(title=escape(benchmod.describe(report)), title_justify="left")
    for h in benchmod.HEADERS:
        table.add_column(h, justify="right" if h in benchmod.NUMERIC else "left", overflow="fold")
    agrees = benchmod.HEADERS.index("agrees")
    previous = None
    for row in benchmod.table_rows(report):
        if previous is not None and row[:2] != previous:
            table.add_section()
        previous = row[:2]
        cells = [escape(c) for c in row]
        if row[agrees] == "NO":
            cells[agrees] = "[red]NO[/red]"
        table.add_row(*cells)
    out.print(table)
    if report.builds:
        out.print(f"build times (not in rows/s): {escape(benchmod.describe_builds(report))}")
    for note in report.notes:
        out.print(f"note: {escape(note)}")
    if markdown is not None:
        done = benchmod.write_markdown(markdown, report, benchmod.command_line(forge_cli._invocation),
                                       append=append, overwrite=overwrite)
        out.print(f"{done} {escape(markdown)}")

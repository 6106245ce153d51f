"""The ``forge`` command line: a thin layer over the public API.

    forge compile MODEL [-o model.forge]          compile and report what was built
    forge predict MODEL --input X.csv --output Y.csv
    forge show MODEL --level hir|mir|lir|target   print one level of the pipeline
    forge plugins                                 what is installed and which targets run here
    forge profile MODEL --data X.csv [-o P.npz]   node hit counts for probability-based tiling and node order
    forge COMMAND ...                             commands plugins add (forge plugins lists them)

MODEL is a model file (XGBoost JSON/UBJSON, LightGBM text, CatBoost JSON/.cbm, ONNX) or an artifact saved by
``forge compile -o`` (recognised by content).  Every user error ends the command with one line
``error: ...`` on stderr and a non-zero exit status; only compiler bugs show a traceback.
"""

from __future__ import annotations

import enum
import os
import sys
import warnings
from importlib import metadata
from pathlib import Path

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from silvanforge import __version__, api
from silvanforge.artifact import archive
from silvanforge.cli import files
from silvanforge.lowering import choices
from silvanforge.frontend import profiling
from silvanforge.plan import tuning
from silvanforge.errors import ArtifactWarning, CacheWarning, InputError, SilvanForgeError
from silvanforge.cli.flags import (LEVEL_OPT, MODEL_ARG, cache_opt, cpu_opt, header_opt, profile_opt, rep_opt, reorder_opt,
                                    schedule_opt, target_opt, threads_opt, tile_opt)
from silvanforge.cli.keys import key_app
from silvanforge.frontend.loading import is_artifact, load_model
from silvanforge.plugins import registry
from silvanforge.frontend.tiling import format_hir

try:  # typer >= 0.2x vendors click; older releases use click itself
    from typer._click import exceptions as _click_exc
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as _click_exc

app = typer.Typer(
    name="forge",
    help="SilvanForge: compile decision forests (XGBoost, LightGBM, CatBoost, ONNX, scikit-learn) into fast inference code.",
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class Level(str, enum.Enum):
    hir = "hir"
    mir = "mir"
    lir = "lir"
    target = "target"
    plan = "plan"


def _out() -> Console:
    # Piped or redirected output is not cut to 80 columns (rich's default off a terminal).
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(highlight=False, width=160 if wide else None)


def _err() -> Console:
    return Console(stderr=True, highlight=False)


def _note(message: str) -> None:
    sys.stderr.write(f"note: {message}\n")


def read_schedule(path: str | None):
    """The schedule in file ``path``, or the name of a canned schedule or of one a plugin adds
    (None: let the target choose); errors name the file."""
    if path is None:
        return None
    if not os.path.exists(path):
        named = registry().schedules()
        if path in named:
            return path  # compile() resolves the name against the model
        raise InputError(f"schedule file not found: {path} (canned schedules: {', '.join(named)})")
    return choices.schedule_from_file(path)


def load_or_compile(model: str, target: str | None, rep: str | None, schedule: str | None,
                    batch_size: int | None = None, threads: int | None = None,
                    tile_size: int | None = None, profile: str | None = None,
                    reorder: str | None = None, trust_code: bool = False, cache: str | None = None,
                    cpu: str | None = None):
    """A CompiledForest from a model file (compiled now) or a saved artifact (loaded; its machine
    code runs when signed with SILVANFORGE_ARTIFACT_KEY or with --trust-code)."""
    if profile is not None and not os.path.isfile(profile):  # (a model it would not tile read none at all)
        raise InputError(f"--profile {profile}: file not found")
    if is_artifact(model):
        with warnings.catch_warnings(record=True) as read:  # (a key file refused: a note below)
            warnings.simplefilter("always", ArtifactWarning)
            meta = archive.read(model).meta  # checked, and its options compared, before compiling
        if cpu is not None:  # compared as the target spells it ("native": None, as recorded)
            cpu = api.compile_options(None, target=meta["target"], cpu=cpu).cpu or "native"
        for flag, wanted, actual in (("--target", target, meta["target"]), ("--rep", rep, meta["rep"]),
                                     ("--tile-size", tile_size, meta["tile_size"]),
                                     ("--cpu", cpu, meta["cpu"] or "native")):
            if wanted is not None and wanted != actual:
                raise InputError(f"{model} was compiled with {flag[2:]} {actual!r}; compile the model "
                                 f"file again to use {flag} {wanted}")
        if schedule is not None or batch_size is not None or profile is not None or reorder is not None:
            raise InputError(f"{model} is already compiled; --schedule, --batch-size, --profile and "
                             "--reorder apply only when compiling a model file")
        with _err().status(f"loading {escape(model)}"), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ArtifactWarning)
            cf = api.load_compiled(model, trust_code=trust_code)
        for message in dict.fromkeys(str(w.message) for w in read + caught if issubclass(w.category, ArtifactWarning)):
            _note(message.replace("pass trust_code=True", "pass --trust-code"))  # (once each; the option's spelling)
        return cf
    sched = read_schedule(schedule)
    with _err().status(f"compiling {escape(model)}"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CacheWarning)
        cf = api.compile(model, target=target, rep=rep, schedule=sched,
                         batch_size=batch_size, threads=threads, tile_size=tile_size or 1,
                         profile=profile, reorder=reorder, cache=cache, cpu=cpu)
    for w in caught:  # a cache that failed is a note: the predictions still come
        if issubclass(w.category, CacheWarning):
            _note(str(w.message))
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return cf


# --------------------------------------------------------------------------- commands
def _version_callback(value: bool):
    if value:
        typer.echo(f"forge (silvanforge) {__version__}")
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context,
          version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                       help="Print the version and exit.")):
    """SilvanForge: compile decision forests into inference code for one model, batch size and target."""
    if ctx.invoked_subcommand is None:
        text = ctx.get_help()  # rich help prints itself and returns ""
        if text:
            typer.echo(text)


@app.command("compile")
def compile_command(
    model: str = MODEL_ARG,
    target: str | None = target_opt(),
    rep: str | None = rep_opt(),
    schedule: str | None = schedule_opt(),
    batch_size: int | None = typer.Option(None, "--batch-size", "-b", min=1,
                                             help="Batch size to tune for (any batch size still works)."),
    threads: int | None = threads_opt(),
    output: str | None = typer.Option(None, "--output", "-o",
                                         help="Save the compiled model here (load it with predict/show)."),
    tile_size: int | None = tile_opt(),
    profile: str | None = profile_opt(),
    reorder: str | None = reorder_opt(),
    cache: str | None = cache_opt(),
    cpu: str | None = cpu_opt(),
):
    """Compile MODEL and report what was built; save it with -o."""
    files.refuse_overwrite(output, model=model, profile=profile)
    cf = load_or_compile(model, target, rep, schedule, batch_size, threads, tile_size, profile, reorder,
                         cache=cache, cpu=cpu)
    if output is not None:
        try:
            cf.save(output)
        except OSError as exc:
            raise InputError(f"cannot write {output}: {exc.strerror or exc}") from None
    s = cf.summary()
    table = Table(title=f"compiled {escape(model)}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    forest = cf.forest
    main = " (main form)" if len(cf.forms) > 1 else ""
    rows = [
        ("model", f"{forest.source} {forest.objective}".strip()),
        ("trees", s["trees"]), ("max depth", s["max_depth"]), ("features", s["features"]),
        ("outputs", s["outputs"]), ("target", s["target"]),
        *([("cpu", f"{cf.cpu} (code for that CPU, not this host's)")] if cf.cpu is not None else []),
        # (the main form's: a plan of several forms names each one's representation below)
        ("representation" + main, s["rep"]),
        ("schedule" + main, s["schedule"]),
        *([("tile size", cf.tile_size)] if cf.tile_size > 1 else []),
        *([("probability-tiled trees", s["probability_tiled_trees"])] if cf.tile_ids is not None else []),
        *([("trees grouped by", cf.reorder)] if cf.reorder else []),
        *([("one form below (ns a row)", cf.options.plan_min_ns)] if cf.options.plan_min_ns is not None else []),
        *[(name.replace("_", " "), value) for name, value in cf.options.lowering().items() if value is not None],
        *[(f"{cf.rep} option {name}", value) for name, value in cf.options.rep_options.items()],
        ("batch size", cf.batch_size if cf.batch_size is not None else "any (not tuned for one)"),
        ("threads", "GPU grid" if registry().target_kind(cf.target) == "gpu"
         else cf.threads if cf.threads is not None else "all usable CPUs"),
        ("plan" + (" (tuned)" if cf.tuning is not None else ""),
         "; ".join(f"{b.text()} rows: form {b.form} ({cf.forms[b.form].options.rep})" for b in cf.bands)),
        ("compile time", f"{cf.compile_seconds:.3f} s"),
    ]
    if output is not None:
        rows.append(("saved to", output))
    for key, value in rows:
        table.add_row(key, escape(str(value)))
    _out().print(table)


@app.command()
def predict(
    model: str = MODEL_ARG,
    input_path: str = typer.Option(..., "--input", "-i", show_default=False,
                              help="Rows to predict: X.csv (optional header; empty, nan, na, null, none = missing), "
                                   "X.jsonl (a JSON object a line, by feature name), X.npy, a Parquet or "
                                   "Arrow IPC (Feather v2) file, or - for CSV or JSON Lines on stdin."),
    output: str | None = typer.Option(None, "--output", "-o",
                                         help="Where to write predictions: Y.csv or Y.npy (default: CSV on stdout)."),
    target: str | None = target_opt(),
    rep: str | None = rep_opt(),
    schedule: str | None = schedule_opt(),
    margin: bool = typer.Option(False, "--margin", help="Raw margins (XGBoost output_margin, LightGBM raw_score)."),
    leaf: bool = typer.Option(False, "--leaf", help="The leaf each row reaches, a column a tree (pred_leaf, apply)."),
    per_tree: bool = typer.Option(False, "--per-tree", help="Each tree's value for each row, a column a tree."),
    contribs: bool = typer.Option(False, "--contribs", help="SHAP contributions, a column a feature, the bias last."),
    background: str | None = typer.Option(None, "--background", help="With --contribs: interventional SHAP values "
                                          "against these rows (a file as --input reads), the bias their mean margin."),
    missing: float | None = typer.Option(None, "--missing", help="A value to treat as missing, besides NaN."),
    threads: int | None = threads_opt(),
    tile_size: int | None = tile_opt(),
    profile: str | None = profile_opt(),
    reorder: str | None = reorder_opt(),
    trust_code: bool = typer.Option(False, "--trust-code", help="Run an artifact's machine code though it is not "
                                    "signed with your key (only for artifacts you trust: it is native code)."),
    cache: str | None = cache_opt(),
    header: bool | None = header_opt(),
    cpu: str | None = cpu_opt(),
):
    """Predict rows from a CSV, JSON Lines, .npy, Parquet or Arrow file; one output line (or row) per input row."""
    files.refuse_output_flags(margin, **{"--leaf": leaf, "--per-tree": per_tree, "--contribs": contribs})
    if background is not None and not contribs:
        raise InputError("--background applies to --contribs (interventional SHAP values): add --contribs")
    files.refuse_overwrite(output, predictions=True, model=model, input=input_path, profile=profile,
                           background_rows=background)
    cf = load_or_compile(model, target, rep, schedule, None, threads, tile_size, profile, reorder,
                         trust_code=trust_code, cache=cache, cpu=cpu)
    rows = files.read_rows(input_path, cf.num_features, cf.forest.feature_names, header)
    if rows.note:
        _note(rows.note)
    X = files.model_rows(rows, cf.forest, missing)  # its messages name the file already
    try:
        back = None if background is None else files.model_rows(
            files.read_rows(background, cf.num_features, cf.forest.feature_names, header), cf.forest, missing)
    except InputError as exc:
        raise InputError(f"--background: {exc}") from None
    try:
        y = cf.predict(X, output_margin=margin, threads=threads, pred_leaf=leaf, per_tree=per_tree,
                       pred_contribs=contribs, background=back, **({} if missing is None else {"missing": missing}))
    except InputError as exc:
        raise InputError(f"{input_path}: {exc}") from None
    files.write_predictions(output, y, files.contribution_header(cf.forest, y) if contribs else None)


@app.command()
def show(
    model: str = MODEL_ARG,
    level: Level | None = LEVEL_OPT,
    target: str | None = target_opt(),
    rep: str | None = rep_opt(),
    schedule: str | None = schedule_opt(),
    max_trees: int = typer.Option(3, "--max-trees", min=0, help="Trees to print at hir (0: all)."),
    tile_size: int | None = tile_opt(),
    show_tuning: bool = typer.Option(False, "--tuning", help="Print the tuning record of a tuned artifact."),
    cpu: str | None = cpu_opt(),
):
    """Print MODEL at one level of the pipeline (with --tile-size, hir prints the tiles too);
    --level plan prints the forms answering each band of rows per call."""
    if show_tuning:
        if not is_artifact(model):
            raise InputError(f"{model} is not a compiled artifact: --tuning shows the record forge tune saves")
        record = (archive.read(model).plan or {}).get("tuning")
        if record is None:
            raise InputError(f"{model} was not tuned (forge tune MODEL -o FILE tunes it)")
        sys.stdout.write(tuning.record_text(record) + "\n")
        return
    if level is None:
        raise InputError("say which level to show: --level hir|mir|lir|target|plan (or --tuning)")
    if level is Level.plan:
        # (the whole plan: its forms built, as the model would run once warm)
        cf = load_or_compile(model, target, rep, schedule, tile_size=tile_size, cpu=cpu).wait()
        sys.stdout.write(cf.plan_text() + "\n")
        return
    if level is Level.hir and not is_artifact(model) and target is None and rep is None \
            and schedule is None:
        forest = load_model(model)
        text = format_hir(forest, tile_size or 1, max_trees=max_trees or None)
    elif is_artifact(model):
        cf = load_or_compile(model, target, rep, schedule, tile_size=tile_size, cpu=cpu)
        text = format_hir(cf.forest, cf.tile_size, max_trees=max_trees or None) \
            if level is Level.hir else cf.show(level.value)
        if level is not Level.hir:
            _options_line(cf.options)
    elif level is Level.hir:
        text = format_hir(load_model(model), tile_size or 1, max_trees=max_trees or None)
    else:
        # Lowering only: a GPU schedule prints here even where no GPU can run it.
        low = api.lower(model, target=target, rep=rep, schedule=read_schedule(schedule),
                       tile_size=tile_size or 1, cpu=cpu)
        text = low.show(level.value)
        _options_line(low.options)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _options_line(options) -> None:
    """The options that decided the program shown (as its artifact records them), on stderr:
    the program on stdout stays what the level prints (a file to diff, or to feed a tool)."""
    schedule = options.schedule.to_text().replace("\n", "; ") if options.schedule is not None else ""
    sys.stderr.write(f"options: {options.describe()}" + (f" schedule={schedule}" if schedule else "") + "\n")


@app.command()
def tune(
    model: str = MODEL_ARG,
    target: str | None = target_opt(),
    output: str | None = typer.Option(None, "--output", "-o", help="Save the tuned model here."),
    rows: str | None = typer.Option(None, "--rows", "-i",
                                    help="Sample rows the model will see (CSV or .npy); default: drawn around its thresholds."),
    threads: int | None = threads_opt(),
    budget: float = typer.Option(60.0, "--budget", help="Seconds to spend compiling and timing."),
    sizes: str | None = typer.Option(None, "--sizes",
                                     help="Request sizes (rows per call) to time, comma-separated; default: "
                                          "1,16,64,256,4096 on a CPU, a GPU target's own (512,4096,65536)."),
    cpu: str | None = cpu_opt(),
):
    """Time the forms worth trying for MODEL at each request size (1 row to large batches) on
    this machine and keep the fastest for each band of rows per call (a GPU target: its
    template's candidates at 512, 4096 and 65536 rows)."""
    files.refuse_overwrite(output, model=model, rows=rows)
    if not budget > 0:
        raise InputError(f"--budget must be a positive number of seconds, got {budget}")
    at = tuning.SIZES
    if sizes is not None:
        parts = [p.strip() for p in sizes.split(",")]
        if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise InputError(f"--sizes takes positive row counts separated by commas, got {sizes!r}")
        at = tuple(int(p) for p in parts)
    if target is not None:
        registry().check_target(target)
    source = api.read_artifact_forest(model) if is_artifact(model) else load_model(model)
    sample = None
    if rows is not None:
        read = files.read_rows(rows, source.num_features, source.feature_names)
        if getattr(read, "note", None):
            _note(read.note)
        sample = files.model_rows(read, source)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=_err(), transient=True) as progress:
        task = progress.add_task("tune", total=None)
        cf = tuning.tune(source, rows=sample, target=target, threads=threads, budget_s=budget, sizes=at,
                      cpu=cpu, progress=lambda what, done, total: progress.update(
                          task, description=escape(what), completed=done, total=total or None))
    if output is not None:
        try:
            cf.save(output)
        except OSError as exc:
            raise InputError(f"cannot write {output}: {exc.strerror or exc}") from None
    _out().print(escape(cf.plan_text()))
    _out().print(f"tuned in {cf.tuning['seconds']} s" + (f"; saved to {escape(output)}" if output else
                                                          " (not saved: give -o FILE)"))


app.add_typer(key_app, name="key")  # forge key show|rotate|export (silvanforge.cli.keys)


@app.command()
def plugins():
    """List the installed plugins and whether each target can run on this machine."""
    reg = registry()
    out = _out()
    out.print(f"silvanforge {__version__} ({escape(str(Path(__file__).parent))})")
    table = Table(title="plugins", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("group", "entry point", "distribution", "version"):
        table.add_column(col, no_wrap=True)
    table.add_column("provides")
    table.add_column("status", overflow="fold")
    for rec in sorted(reg.records, key=lambda r: (r.group, r.name)):
        if rec.error is not None:
            status = f"[red]broken[/red]: {escape(rec.error)}"
        else:
            plugin = reg.pm.get_plugin(f"{rec.group}:{rec.name}")
            declared = getattr(plugin, "STATUS", None)
            if declared:
                status = f"[yellow]{escape(str(declared))}[/yellow]"
            elif not rec.provides:
                status = "[yellow]provides nothing[/yellow]"
            else:
                status = "[green]loaded[/green]"
        table.add_row(rec.group.removeprefix("silvanforge."), escape(rec.name), escape(rec.distribution),
                      escape(rec.version), escape(", ".join(rec.provides)) or "-", status)
    out.print(table)
    if not reg.records:
        out.print("no plugins found: pip install -r requirements.txt installs the shipped ones (see README)")

    commands = Table(title="commands added by plugins", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("command", "distribution", "status"):
        commands.add_column(col, overflow="fold")
    for ep in metadata.entry_points(group=COMMANDS_GROUP):
        try:
            ep.load()
            status = "[green]loaded[/green]"
        except Exception as exc:  # noqa: BLE001 - shown, never fatal
            status = f"[red]broken[/red]: {escape(f'{type(exc).__name__}: {exc}')}"
        dist = ep.dist.name if getattr(ep, "dist", None) is not None else "-"
        commands.add_row(f"forge {escape(ep.name)}", escape(dist), status)
    if commands.row_count:
        out.print(commands)

    targets = Table(title="targets", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("target", "kind", "class", "runs here", "why not"):
        targets.add_column(col, overflow="fold")
    for name in reg.targets():
        ok, why = reg.target_available(name)
        cls = type(reg.target(name))
        targets.add_row(escape(name), reg.target_kind(name), escape(f"{cls.__module__}.{cls.__qualname__}"),
                        "[green]yes[/green]" if ok else "[red]no[/red]", escape(why))
    out.print(targets)


@app.command("profile")
def profile_command(
    model: str = MODEL_ARG,
    data: str = typer.Option(..., "--data", "-d", show_default=False,
                             help="Rows to profile with: X.csv (optional header) or X.npy, as for predict."),
    out: str | None = typer.Option(None, "--out", "-o",
                                   help="Where to write the profile: P.npz, or P.json for JSON "
                                        "(default: MODEL's name + .profile.npz, next to it)."),
    alpha: float = typer.Option(0.05, "--alpha", min=0.0, max=1.0,
                                help="Skewed: this fraction of the leaves ..."),
    beta: float = typer.Option(0.9, "--beta", min=0.0, max=1.0, help="... covers this fraction of the rows."),
    header: bool | None = header_opt(),
):
    """Count how many rows reach every node of every tree (for `--profile`: tiling, node order)."""
    forest = load_model(model)  # an artifact's stored model, too
    rows = files.read_rows(data, forest.num_features, forest.feature_names, header)
    if rows.note:
        _note(rows.note)
    X = files.model_rows(rows, forest)
    try:
        prof = profiling.profile(forest, X)
    except InputError as exc:
        raise InputError(f"{data}: {exc}") from None
    if out is None:
        stem = Path(model)
        out = str(stem.with_name(stem.name.split(".")[0] + ".profile.npz"))
    prof.save(out)
    s = profiling.summary(forest, prof, alpha, beta)
    table = Table(title=f"profile of {escape(model)}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in (
        ("rows", f"{s['rows']:,}"), ("trees", s["trees"]),
        ("skewed trees", f"{s['skewed']} of {s['trees']} (alpha {alpha:g} of the leaves cover beta "
                         f"{beta:g} of the rows; tiled by probability with --profile)"),
        ("leaves never reached", f"{s['unreached_leaves']:,} of {s['leaves']:,}"),
        ("leaves covering beta", f"median {s['median_leaf_fraction']:.1%} of a tree's leaves"),
        ("written to", out),
    ):
        table.add_row(key, escape(str(value)))
    _out().print(table)


# --------------------------------------------------------------------------- entry point
def _plugin_commands() -> None:
    """Commands other distributions add (entry-point group ``silvanforge.commands``: a name and a
    typer command function), such as the benchmark tooling's.  One that fails to load is left out; ``forge plugins`` lists it with
    the error.  Added when ``main`` first runs, not at import: a command module imports this one
    for its option builders."""
    global _commands_added
    if _commands_added:
        return
    _commands_added = True
    for ep in metadata.entry_points(group=COMMANDS_GROUP):
        try:
            fn = ep.load()
        except Exception:  # noqa: BLE001 - a broken third-party command never breaks forge
            continue
        app.command(ep.name)(fn)


COMMANDS_GROUP = "silvanforge.commands"
_commands_added = False

_invocation: list[str] = ["forge"]  # the command line being run, for `bench --markdown`


def _one_line(message: str) -> str:
    return " ".join(str(message).split()) or "unknown error"


def _fail(message: str, code: int = 1) -> int:
    sys.stderr.write(f"error: {_one_line(message)}\n")
    sys.stderr.flush()
    return code


def main(argv: list[str] | None = None) -> int:
    """Run ``forge`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    User errors (SilvanForgeError, unreadable files, bad options) become one ``error:`` line on
    stderr; anything else is a bug and keeps its traceback.
    """
    global _invocation
    _invocation = ["forge", *(sys.argv[1:] if argv is None else argv)]
    _plugin_commands()
    command = typer.main.get_command(app)
    try:
        with warnings.catch_warnings():
            # A number past float32's range read by a float32 model is infinite, as the libraries
            # read it (XGBoost's float32 rows): NumPy's warning of the cast, with its source line,
            # would read to a user of the command as something gone wrong.
            warnings.filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning)
            rv = command.main(args=argv, prog_name="forge", standalone_mode=False)
    except _click_exc.UsageError as exc:
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        return _fail(exc.format_message() + where, exc.exit_code)
    except _click_exc.ClickException as exc:
        return _fail(exc.format_message(), exc.exit_code)
    except SilvanForgeError as exc:
        return _fail(str(exc))
    except FileNotFoundError as exc:
        return _fail(f"file not found: {exc.filename or exc}")
    except BrokenPipeError:
        # The reader (head, less) went away: stop quietly.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces stdout until exit
        except OSError:  # pragma: no cover
            pass
        return 1
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(f"{where}{exc.strerror or exc}")
    except (KeyboardInterrupt, typer.Abort):
        return _fail("interrupted", 130)
    except MemoryError:  # (a request past this machine's memory: a huge batch size, model or input)
        return _fail("out of memory: the command asked for more memory than this machine has (a batch size, "
                     "a model's or an input's size)")
    return rv if isinstance(rv, int) else 0


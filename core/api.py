"""The public compiler API: ``compile``, ``CompiledForest`` and ``load_compiled``."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import time
import zipfile

import numpy as np

from . import __version__, transforms
from .errors import ArtifactError, InputError, PluginError, ScheduleError
from .ir import hir, hir_io, lir, mir
from .hir_passes import pad_trees, padded_nodes
from .loading import load_model
from .lowering import lower_to_lir
from .tiling import check_tile_size, format_hir
from .plugins import registry
from .runtime import check_rows, run_kernel
from .scheduler import CANNED, Schedule, canned, lower_to_mir, parse_schedule

ARTIFACT_FORMAT = 1
# Padding every tree to the forest's depth lets walks skip leaf checks (peelWalk); it is chosen
# while it at most doubles the nodes (docs/benchmarks.md measures what it buys).
PAD_LIMIT = 2.0
# Measured on the CPU (docs/benchmarks.md): sparse walks beat array walks, which load a tree
# offset at every step; array and reorg stay available by name.
REPRESENTATION_PREFERENCE = ("sparse", "array", "reorg")


def choose_representation(forest: hir.Forest) -> str:
    reps = registry().representations()
    for rep in REPRESENTATION_PREFERENCE:
        if rep in reps:
            return rep
    if not reps:
        raise PluginError("no representation plugin is installed (pip install silvanforge-rep-sparse)")
    return reps[0]


def choose_padding(forest: hir.Forest) -> bool:
    nodes = sum(t.num_nodes for t in forest.trees)
    return padded_nodes(forest) <= PAD_LIMIT * max(nodes, 1)


def _as_schedule(schedule, forest: hir.Forest, batch_size) -> Schedule | None:
    """A Schedule from a Schedule, the name of a canned one, or schedule text."""
    if schedule is None or isinstance(schedule, Schedule):
        return schedule
    if isinstance(schedule, str):
        if schedule.strip() in CANNED:
            return canned(schedule.strip(), forest, batch_size)
        return parse_schedule(schedule)
    raise ScheduleError(f"a schedule must be a Schedule, its text or a canned name "
                        f"({', '.join(CANNED)}), got {type(schedule).__name__}")


@dataclasses.dataclass
class Lowered:
    """What the front half of the compiler produced, before any target code."""

    forest: hir.Forest  # the model as imported
    pad: bool  # whether HIR passes padded it (``lowered_forest`` is then the padded one)
    lowered_forest: hir.Forest
    rep: str
    schedule: Schedule
    mir: mir.MirFunction
    lir: lir.Module
    tile_size: int = 1


def lower(model, target: str = "cpu", rep: str | None = None, schedule=None,
          batch_size: int | None = None, pad: bool | None = None, tile_size: int = 1) -> Lowered:
    """The front half of ``compile``: model -> HIR (-> padded HIR) -> MIR -> LIR, for ``target``
    (which need not be able to run here).

    ``pad``: pad trees to one depth (:func:`silvanforge.hir_passes.pad_trees`); ``None`` pads when
    the target chooses the schedule and padding is cheap, so that schedule can drop leaf checks
    (never with tiles: a uniform node depth does not make a uniform tile depth).
    ``tile_size``: nodes evaluated per walk step (:mod:`silvanforge.tiling`; 1 = node by node);
    above 1 it needs a representation that lays out tiles (sparse).
    """
    check_tile_size(tile_size)
    tile_size = int(tile_size)
    model_forest = model if isinstance(model, hir.Forest) else load_model(model)
    hir.verify(model_forest)
    if pad is None:
        pad = schedule is None and tile_size == 1 and choose_padding(model_forest)
    forest = pad_trees(model_forest) if pad else model_forest
    reg = registry()
    if target not in reg.targets():
        reg.check_target(target)  # raises: unknown target
    rep = rep or choose_representation(forest)
    reg.check_representation(rep)
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or batch_size <= 0):
        raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
    sched = _as_schedule(schedule, forest, batch_size) or reg.hook.silvanforge_target_default_schedule(
        target=target, forest=forest, batch_size=batch_size)
    mir_fn = lower_to_mir(forest, sched)
    module = lower_to_lir(forest, mir_fn, rep, reg.hook, tile_size=tile_size,
                          gpu=reg.target_kind(target) == "gpu")
    return Lowered(model_forest, bool(pad), forest, rep, sched, mir_fn, module, tile_size)


def show(model, level: str, target: str = "cpu", rep: str | None = None, schedule=None,
         batch_size: int | None = None, pad: bool | None = None, tile_size: int = 1) -> str:
    """The program at ``level`` (hir, mir, lir, target) without running anything: GPU schedules
    can be printed on a machine without a GPU."""
    low = lower(model, target, rep, schedule, batch_size, pad, tile_size)
    if level == "hir":
        return format_hir(low.forest, low.tile_size)
    if level == "mir":
        return mir.format_function(low.mir)
    if level == "lir":
        return lir.format_module(low.lir)
    if level == "target":
        return registry().hook.silvanforge_target_source(target=target, module=low.lir)
    raise InputError(f"unknown level {level!r}; choose hir, mir, lir or target")


class CompiledForest:
    """A forest compiled for one target; ``predict`` behaves like the training library's."""

    def __init__(self, forest, kernel, lir_module, mir_function, target, rep, schedule,
                 batch_size, threads, compile_seconds, pad: bool = False, tile_size: int = 1):
        self.forest: hir.Forest = forest  # the model as imported (HIR passes work on copies)
        self.pad = pad
        self.tile_size = tile_size
        self.kernel = kernel
        self.lir_module: lir.Module = lir_module
        self.mir_function: mir.MirFunction = mir_function
        self.target, self.rep, self.schedule = target, rep, schedule
        self.batch_size, self.threads = batch_size, threads
        self.compile_seconds = compile_seconds

    @property
    def num_features(self) -> int:
        return self.forest.num_features

    @property
    def num_outputs(self) -> int:
        return self.forest.num_outputs

    @property
    def classes_(self):
        return self.forest.class_labels

    def predict(self, X, output_margin: bool = False, missing: float = np.nan,
                threads: int | None = None) -> np.ndarray:
        """Predictions for rows ``X`` (n, num_features): what the source library returns.

        ``output_margin`` gives raw margins (XGBoost ``output_margin``, LightGBM ``raw_score``).
        ``missing`` marks an extra value treated as missing, like XGBoost's DMatrix ``missing``.
        """
        rows = check_rows(X, self.forest.num_features, self.kernel.input_dtype)
        if not (isinstance(missing, float) and np.isnan(missing)):
            try:
                missing_value = float(missing)
            except (TypeError, ValueError):
                raise InputError(f"missing must be a number, got {missing!r}") from None
            rows = np.where(rows == rows.dtype.type(missing_value), rows.dtype.type(np.nan), rows)
        margins = run_kernel(self.kernel, rows, self.forest.num_outputs,
                             self.threads if threads is None else threads)
        values = margins if output_margin else transforms.apply(self.forest, margins)
        return transforms.shape_output(self.forest, values)

    def show(self, level: str) -> str:
        """The program at ``level``: hir, mir, lir or target."""
        if level == "hir":
            return format_hir(self.forest, self.tile_size)
        if level == "mir":
            return mir.format_function(self.mir_function)
        if level == "lir":
            return lir.format_module(self.lir_module)
        if level == "target":
            return registry().hook.silvanforge_target_source(target=self.target, module=self.lir_module)
        raise InputError(f"unknown level {level!r}; choose hir, mir, lir or target")

    def summary(self) -> dict:
        f = self.forest
        return {"trees": f.num_trees, "max_depth": f.max_depth(), "features": f.num_features,
                "outputs": f.num_outputs, "target": self.target, "rep": self.rep,
                "schedule": self.schedule.to_text().replace("\n", "; "), "padded": self.pad,
                "tile_size": self.tile_size, "compile_seconds": round(self.compile_seconds, 3)}

    # ---------------------------------------------------------------- saving
    def save(self, path) -> None:
        """Write a self-contained artifact: the HIR, the options and the target's machine code."""
        arrays = hir_io.to_arrays(self.forest)
        meta = {
            "format": ARTIFACT_FORMAT, "silvanforge": __version__, "target": self.target,
            "rep": self.rep, "schedule": self.schedule.to_text(), "batch_size": self.batch_size,
            "threads": self.threads, "fingerprint": self.forest.fingerprint(), "pad": self.pad,
            "tile_size": self.tile_size,
        }
        blob = self.kernel.artifact() if hasattr(self.kernel, "artifact") else b""
        tmp = f"{os.fspath(path)}.tmp-{os.getpid()}"
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("meta.json", json.dumps(meta))
            buf = io.BytesIO()
            np.savez(buf, **arrays)
            z.writestr("forest.npz", buf.getvalue())
            z.writestr("kernel.bin", blob)
        os.replace(tmp, path)  # never leave a half-written artifact under the real name


def compile(model, target: str = "cpu", rep: str | None = None, schedule=None,
            batch_size: int | None = None, threads: int | None = None,
            pad: bool | None = None, tile_size: int = 1) -> CompiledForest:
    """Compile a model file or HIR ``Forest`` for ``target``; ``None`` options are chosen well.

    ``tile_size`` > 1 walks trees a tile of that many nodes per step (seed 001, 3.2-3.8; sparse
    representation only); the default 1 walks node by node."""
    start = time.perf_counter()
    reg = registry()
    reg.check_target(target)
    if threads is not None and (not isinstance(threads, (int, np.integer)) or threads <= 0):
        raise InputError(f"threads must be a positive integer, got {threads!r}")
    low = lower(model, target, rep, schedule, batch_size, pad, tile_size)
    kernel = reg.hook.silvanforge_target_compile(target=target, module=low.lir,
                                                 options={"threads": threads, "batch_size": batch_size})
    return CompiledForest(low.forest, kernel, low.lir, low.mir, target, low.rep, low.schedule,
                          batch_size, threads, time.perf_counter() - start, pad=low.pad,
                          tile_size=low.tile_size)


def load_compiled(path) -> CompiledForest:
    """Load a saved artifact; machine code built for another host or version is rebuilt."""
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as z:
            meta = json.loads(z.read("meta.json"))
            with np.load(io.BytesIO(z.read("forest.npz")), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            blob = z.read("kernel.bin")
    except FileNotFoundError:
        raise ArtifactError(f"compiled model not found: {path}") from None
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise ArtifactError(f"{path}: not a SilvanForge compiled model or corrupt ({exc})") from None
    if meta.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(f"{path}: artifact format {meta.get('format')} is not {ARTIFACT_FORMAT}")
    try:
        forest = hir_io.from_arrays(arrays)
        hir.verify(forest)
    except Exception as exc:
        raise ArtifactError(f"{path}: the stored model is corrupt ({exc})") from None
    if forest.fingerprint() != meta.get("fingerprint"):
        raise ArtifactError(f"{path}: the stored model does not match its fingerprint (corrupt or edited)")
    start = time.perf_counter()
    reg = registry()
    target, rep = meta["target"], meta["rep"]
    reg.check_target(target)
    reg.check_representation(rep)
    sched = parse_schedule(meta["schedule"])
    pad = bool(meta.get("pad", False))
    tile_size = meta.get("tile_size", 1)
    try:
        check_tile_size(tile_size)
    except InputError as exc:
        raise ArtifactError(f"{path}: {exc}") from None
    lowered_forest = pad_trees(forest) if pad else forest
    mir_fn = lower_to_mir(lowered_forest, sched)
    module = lower_to_lir(lowered_forest, mir_fn, rep, reg.hook, tile_size=tile_size,
                          gpu=reg.target_kind(target) == "gpu")
    options = {"threads": meta.get("threads"), "batch_size": meta.get("batch_size")}
    kernel = None
    if blob and meta.get("silvanforge") == __version__:
        kernel = reg.hook.silvanforge_target_load_kernel(target=target, module=module, blob=blob,
                                                         options=options)
    if kernel is None:
        kernel = reg.hook.silvanforge_target_compile(target=target, module=module, options=options)
    return CompiledForest(forest, kernel, module, mir_fn, target, rep, sched, meta.get("batch_size"),
                          meta.get("threads"), time.perf_counter() - start, pad=pad, tile_size=tile_size)

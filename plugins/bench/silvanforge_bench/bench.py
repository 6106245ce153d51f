"""``forge bench``: our compiled model against the peers installed here, on the same inputs.

Every engine (SilvanForge and each peer that applies to the model's format and is available)
predicts the *same* random rows, at every thread count asked for (``threads=[1, 2]``: one set of
rows per count).  For each batch size the engine is warmed up, then timed best-of-``repeat``; one
timing run calls ``predict`` enough times to last at least ``min_time`` seconds, so tiny batches
are not lost in timer noise.  Before timing, every peer's predictions are compared with ours (max
abs difference) so a fast but wrong run is visible in the table.

The peers (XGBoost, LightGBM, CatBoost, ONNX Runtime, Treelite GTIL, TL2cgen, Hummingbird, lleaves, oneDAL) live in
:mod:`silvanforge.bench_peers`, one module each; see there how each is called.  They are optional
and imported lazily; a missing or failing one becomes a note, never an error.  lleaves runs from
its own environment when this one's llvmlite is too new (``lleaves_venv``).

Times include only the ``predict`` call: inputs are converted to each engine's own container
(a DMatrix, a float32 array) beforehand, and building an engine (our compile, TL2cgen's gcc -O3
build, lleaves' LLVM compile, Hummingbird's conversion) is reported apart, never in rows/s.
Each timing cycles through 16 different batches of random rows (4,096 rows where batches are small)
(:func:`bench_peers._timing.rotation`), the same for every engine: one batch repeated would let
branchy code learn its paths and keep it in cache.
Built libraries are cached by the model's hash (:func:`bench_peers.cache_root`).  Quote ratios
from one run; shared machines are noisy.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Sequence

import numpy as np

from . import bench_peers
from .bench_peers import (
    PEERS,
    Engine,
    ExternalEngine,
    PeerContext,
    PeerUnavailable,
    time_call,
)
from .bench_peers._timing import pool_rows, rotation
from silvanforge.errors import InputError
from silvanforge.frontend.sampling import random_rows  # noqa: F401 - benchmark scripts import it from here

# The report (its records, the machine, the table, markdown) is report.py's; importable from here
# as before.
from .report import (HEADERS, NUMERIC, OURS, OURS_KERNEL, BenchReport, Build, Measurement,  # noqa: F401
                     check_markdown_target, command_line, describe, describe_builds, machine_description, machine_details, table_rows, to_markdown,
                     write_markdown)

DEFAULT_BATCH_SIZES = (1, 64, 512, 4096)
# Peers are compared with ours at this tolerance; the max abs difference is always reported.
AGREE_RTOL, AGREE_ATOL = 1e-5, 1e-6
SETTLE_SECONDS = 0.05  # idle time before timing each engine (see run_bench)

ProgressFn = Callable[[str, int, int], None]  # (what is happening, steps done, total steps)

__all__ = [
    "OURS",
    "PEERS",
    "BenchReport",
    "Measurement",
    "command_line",
    "compare",
    "describe",
    "machine_description",
    "parse_batch_sizes",
    "parse_threads",
    "random_rows",
    "run_bench",
    "table_rows",
    "time_call",
    "to_markdown",
    "write_markdown",
]


# --------------------------------------------------------------------------- engines
class Ours(Engine):
    name = OURS

    def __init__(self, compiled: dict[int, dict[int, object]]):
        """``compiled``: thread count -> batch size -> CompiledForest."""
        super().__init__()
        self.compiled = compiled
        self.set_threads(next(iter(compiled)))

    def set_threads(self, threads: int) -> None:
        self.threads = threads
        self.by_size = self.compiled[threads]
        self.fallback = self.by_size[max(self.by_size)]

    def predict(self, prepared):
        return self.by_size.get(len(prepared), self.fallback).predict(prepared)

    def kernel_seconds(self, prepared, repeat: int) -> float:
        """Best device time of the kernels alone (GPU kernels record it per call)."""
        cf = self.by_size.get(len(prepared), self.fallback)
        best = float("inf")
        for _ in range(repeat):
            cf.predict(prepared)
            best = min(best, cf.kernel.last_timing.get("kernel", float("nan")))
        return best


def _importable(module: str) -> bool:
    return bench_peers.importable(module)


def _version(dist: str) -> str | None:
    return bench_peers.version(dist)


# --------------------------------------------------------------------------- inputs and checks
def _align(ours: np.ndarray, peer) -> np.ndarray:
    """The peer's output in our shape (a binary classifier's (n, 2) becomes column 1)."""
    if isinstance(peer, list) and peer and isinstance(peer[0], dict):  # ONNX ZipMap
        keys = sorted(peer[0])
        peer = np.array([[row[k] for k in keys] for row in peer])
    peer = np.asarray(peer)
    n = ours.shape[0]
    if peer.shape == ours.shape:
        return peer
    flat = peer.reshape(n, -1) if peer.size and n else peer
    if ours.ndim == 1 and flat.ndim == 2:
        if flat.shape[1] == 1:
            return flat[:, 0]
        if flat.shape[1] == 2:
            return flat[:, 1]
    if flat.size == ours.size:
        return flat.reshape(ours.shape)
    raise ValueError(f"output shape {peer.shape} does not match ours {ours.shape}")


def compare(ours: np.ndarray, peer) -> tuple[float, bool]:
    """(max abs difference, agrees within tolerance); NaN in both places counts as equal."""
    ours = np.asarray(ours, dtype=np.float64)
    other = np.asarray(_align(ours, peer), dtype=np.float64)
    both_nan = np.isnan(ours) & np.isnan(other)
    diff = np.where(both_nan, 0.0, np.abs(ours - other))
    diff = np.where(np.isnan(diff), np.inf, diff)
    worst = float(diff.max()) if diff.size else 0.0
    return worst, bool(np.allclose(ours, other, rtol=AGREE_RTOL, atol=AGREE_ATOL, equal_nan=True))


def parse_batch_sizes(text: str) -> list[int]:
    sizes = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            value = 0
        if value <= 0:
            raise InputError(f"batch sizes must be comma-separated positive integers, got {text!r}")
        sizes.append(value)
    return sorted(set(sizes))


def parse_threads(text: str | None) -> list[int] | None:
    """``"1,2"`` -> [1, 2] (in the order given); ``"all"`` is every usable CPU; None stays None."""
    if text is None:
        return None
    from silvanforge.runtime.threads import default_threads

    counts: list[int] = []
    for part in str(text).split(","):
        part = part.strip().lower()
        if part in ("all", "max"):
            value = default_threads()
        else:
            try:
                value = int(part)
            except ValueError:
                value = 0
        if value <= 0:
            raise InputError(f"threads must be positive integers or 'all', comma-separated, got {text!r}")
        if value not in counts:
            counts.append(value)
    return counts


def _thread_counts(threads) -> list[int]:
    from silvanforge.runtime.threads import default_threads

    if threads is None:
        return [default_threads()]
    if isinstance(threads, str):
        return parse_threads(threads) or [default_threads()]
    values = [threads] if isinstance(threads, (int, np.integer)) else list(threads)
    counts: list[int] = []
    for t in values:
        if not isinstance(t, (int, np.integer)) or isinstance(t, bool) or t <= 0:
            raise InputError(f"threads must be a positive integer, got {t!r}")
        if int(t) not in counts:
            counts.append(int(t))
    if not counts:
        raise InputError("threads: give at least one thread count")
    return counts


# --------------------------------------------------------------------------- the benchmark
def run_bench(model, batch_sizes=DEFAULT_BATCH_SIZES, threads: int | Sequence[int] | str | None = None,
              target: str = "cpu", rep: str | None = None, schedule=None, repeat: int = 5,
              min_time: float = 0.1, seed: int = 0, peers: list[str] | None = None,
              progress: ProgressFn | None = None, lleaves_venv: str | None = None,
              cache_dir: str | None = None, tile_size: int = 1, profile=None,
              reorder: str | None = None, pad: bool | None = None,
              compile_batch: int | str = "each", cpu: str | None = None, missing: float = 0.0) -> BenchReport:
    """Time SilvanForge and the applicable available peers on ``model``; see the module doc.

    ``threads`` is one thread count or several (``[1, 2]``, ``"1,all"``); every engine is timed at
    each.  ``schedule`` is a :class:`Schedule`, its text, a canned name, or ``None`` for the
    target's default at each batch size.  ``peers`` limits which peers run (names as in
    :data:`PEERS`); ``None`` runs all.  ``lleaves_venv`` is an environment for lleaves (built there
    when missing; see :mod:`silvanforge.bench_peers.lleaves_peer`).  ``cache_dir`` keeps built
    peer libraries (default :func:`bench_peers.cache_root`).  ``tile_size`` compiles ours with
    tiled walks (:mod:`silvanforge.frontend.tiling`); ``profile``, ``reorder`` and ``pad`` are passed to
    :func:`silvanforge.compile`.  ``compile_batch``: the batch size ours is compiled for:
    ``"each"`` (a compile per batch size whose default schedule differs), ``"none"`` (one compile
    without a batch size, as a service compiled once for any request), or a number.
    ``cpu``: the CPU ours is compiled for (:func:`silvanforge.compile`'s ``cpu``; None: this
    host's); the peers build for this host as they always do, so the table says what code for
    that CPU gives up (or gains) on this machine.  ``missing``: the share of the rows' values
    made missing (:func:`random_rows`; the report notes it).
    """
    from silvanforge import api
    from silvanforge.frontend.loading import load_model

    if not 0.0 <= missing <= 1.0:
        raise InputError(f"missing must be a share between 0 and 1, got {missing}")
    from silvanforge.plugins import registry
    from silvanforge.runtime.threads import default_threads
    from silvanforge.scheduler import Schedule, parse_schedule

    batch_sizes = sorted({int(b) for b in batch_sizes})
    if not batch_sizes or batch_sizes[0] <= 0:
        raise InputError(f"batch sizes must be positive integers, got {batch_sizes}")
    if repeat <= 0:
        raise InputError(f"repeat must be a positive integer, got {repeat}")
    thread_counts = _thread_counts(threads)

    model = os.fspath(model)
    reg = registry()
    fmt = _detect_format(model, reg)
    forest = load_model(model)
    reg.check_target(target)
    if isinstance(schedule, str):  # a canned (or plugin-named) schedule's name, or schedule text
        named = reg.schedules()
        schedule = named[schedule.strip()](forest, None) if schedule.strip() in named \
            else parse_schedule(schedule)

    # One compile per distinct schedule: the default may depend on the batch size.
    groups: dict[str, list[int]] = {}
    if compile_batch != "each":
        if compile_batch != "none" and (not isinstance(compile_batch, int) or compile_batch <= 0):
            raise InputError(f"compile batch must be each, none or a positive integer, got {compile_batch!r}")
        groups["one compile"] = list(batch_sizes)
    for b in batch_sizes if not groups else []:
        sched = schedule or reg.target(target).default_schedule(forest, b, None)
        groups.setdefault(sched.to_text() if isinstance(sched, Schedule) else repr(sched), []).append(b)

    gpu = reg.target_kind(target) == "gpu"
    # A GPU target races the GPU peers; CPU peers answer another question.
    wanted = [p for p in (bench_peers.GPU_PEERS if gpu else PEERS)
              if fmt in p[2] and (peers is None or p[0] in peers)]
    timings_per_engine = len(thread_counts) * len(batch_sizes)
    total = len(groups) * len(thread_counts) + len(wanted) + timings_per_engine * (1 + len(wanted))
    done = 0

    def say(what: str) -> None:
        if progress is not None:
            progress(what, done, total)

    def step(what: str) -> None:
        nonlocal done
        say(what)
        done += 1

    compiled: dict[int, dict[int, object]] = {}
    compile_seconds, first = 0.0, None
    for t in thread_counts:
        compiled[t] = {}
        for sizes in groups.values():
            for_size = {"each": max(sizes), "none": None}.get(compile_batch, compile_batch)
            step(f"compiling for batch size {for_size or 'any'}, {t} thread{'s' * (t != 1)}")
            start = time.perf_counter()
            cf = api.compile(forest, target=target, rep=rep, schedule=schedule,
                             batch_size=for_size, threads=t, tile_size=tile_size,
                             profile=profile, reorder=reorder, pad=pad, cpu=cpu)
            # Timed with every form of its plan built (none left to the background while the
            # timings run).
            cf.wait()
            compile_seconds += time.perf_counter() - start
            first = first or cf
            for b in sizes:
                compiled[t][b] = cf
    ours = Ours(compiled)

    report = BenchReport(
        model=model, model_format=fmt, trees=forest.num_trees, max_depth=forest.max_depth(),
        features=forest.num_features, outputs=forest.num_outputs, target=target, rep=first.rep,
        schedule=first.schedule.to_text().replace("\n", "; ") or "none (its representation takes no schedule)", threads=thread_counts,
        repeat=repeat,
        min_time=min_time, batch_sizes=batch_sizes, tile_size=first.tile_size, cpu=first.cpu,
    )
    report.forms = {b: compiled[thread_counts[0]][b].form_for(b).text() for b in batch_sizes}
    report.versions = {"silvanforge": _version("silvanforge") or "?", "numpy": np.__version__}
    if compile_batch != "each":
        report.notes.append(f"silvanforge: compiled once for {'any batch size' if compile_batch == 'none' else f'batch size {compile_batch}'}"
                            f" (plan: {'; '.join(f'{b.text()} rows {first.forms[b.form].options.rep}' for b in first.bands)})")
    n_compiles = len(groups) * len(thread_counts)
    report.builds.append(Build(OURS, f"compile ({n_compiles} compile{'s' * (n_compiles != 1)})",
                               compile_seconds))
    usable = default_threads()
    if max(thread_counts) > usable:
        report.notes.append(f"{max(thread_counts)} threads asked for but only {usable} CPUs are "
                            "usable: those rows are oversubscribed")

    row_bytes = forest.num_features * np.dtype(forest.threshold_dtype).itemsize
    # (rows as users pass them: a model's computed columns are not among them)
    pool = random_rows(forest, pool_rows(batch_sizes[-1], row_bytes), seed, missing)[:, :forest.input_features]
    if missing:
        report.notes.append(f"rows: {missing:.0%} of values missing (NaN)")
    X = pool[:batch_sizes[-1]]  # predictions are compared on these
    expected = ours.predict(X)
    engines: list[tuple[Engine, float | None, bool | None]] = [(ours, None, None)]
    external: dict[str, dict[tuple[int, int], float]] = {}
    with tempfile.TemporaryDirectory(prefix="forge-bench-") as workdir:
        ctx = PeerContext(path=model, fmt=fmt, num_features=forest.num_features, threads=thread_counts,
                          workdir=workdir, cache_dir=cache_dir or bench_peers.cache_root(),
                          lleaves_venv=lleaves_venv, progress=say)
        if cache_dir:
            os.makedirs(cache_dir, exist_ok=True)
        for name, module, _, factory in wanted:
            step(f"preparing {name}")
            if module is not None and not _importable(module):
                hint = bench_peers.PIP.get(module, f"pip install {module}")
                report.notes.append(f"{name}: not installed ({hint}; see requirements-bench.txt)")
                total -= timings_per_engine
                continue
            try:
                engine = factory(ctx)
                if isinstance(engine, ExternalEngine) or getattr(engine, "external", False):
                    got, timings = engine.measure(pool, batch_sizes, thread_counts, repeat, min_time,
                                                  check_rows=len(X))
                    lacking = [k for k in ((t, b) for t in thread_counts for b in batch_sizes)
                               if k not in timings]
                    if lacking:
                        raise RuntimeError(f"no timing for (threads, batch) {lacking[0]}")
                    external[engine.name] = timings
                else:
                    for t in reversed(thread_counts):  # any per-thread-count setup fails here
                        engine.set_threads(t)
                    got = engine.predict(engine.prepare(X))
                diff, agrees = compare(expected, got)
                if not agrees and getattr(engine, "must_agree", False):
                    raise PeerUnavailable(f"{name}: skipped for this model (its predictions differ "
                                          f"from ours by up to {diff:.3g})")
            except PeerUnavailable as exc:
                report.notes.append(" ".join(str(exc).split()))
                total -= timings_per_engine
                continue
            except Exception as exc:  # noqa: BLE001 - a peer that cannot run this model is skipped
                msg = " ".join(str(exc).split())[:300]
                report.notes.append(f"{name}: skipped ({type(exc).__name__}: {msg})")
                total -= timings_per_engine
                continue
            if external.get(engine.name) is not None:
                total -= timings_per_engine  # it timed itself
            if getattr(engine, "note", None):
                report.notes.append(engine.note)
            report.versions.update(getattr(engine, "versions", None) or {})
            if getattr(engine, "build_seconds", None) is not None or getattr(engine, "cached", False):
                report.builds.append(Build(engine.name, getattr(engine, "build_what", "build"),
                                           engine.build_seconds, engine.cached,
                                           getattr(engine, "first_build_seconds", None)))
            engines.append((engine, diff, agrees))

        # Engine by engine (all batch sizes of one before the next), with a pause between them:
        # runtimes whose idle workers spin for a while (OpenMP, ONNX Runtime) then cost the next
        # engine less.
        for t in thread_counts:
            for engine, diff, agrees in engines:
                if engine.name in external:
                    for b in batch_sizes:
                        report.measurements.append(Measurement(engine.name, b, external[engine.name][(t, b)],
                                                               diff, agrees, t))
                    continue
                engine.set_threads(t)
                time.sleep(SETTLE_SECONDS)
                for b in batch_sizes:
                    step(f"timing {engine.name} at batch size {b}, {t} thread{'s' * (t != 1)}")
                    prepared = [engine.prepare(part) for part in rotation(pool, b)]
                    seconds = time_call(engine.predict, prepared, repeat, min_time)
                    report.measurements.append(Measurement(engine.name, b, seconds, diff, agrees, t))
                    if gpu and engine is ours:  # the kernels alone, on the device's clock
                        kernel = ours.kernel_seconds(prepared[0], repeat)
                        report.measurements.append(Measurement(OURS_KERNEL, b, kernel, diff, agrees, t))
    if progress is not None:
        progress("done", total, total)
    return report


def _detect_format(path: str, reg) -> str:
    from silvanforge.errors import ModelFormatError

    if not os.path.isfile(path):
        raise ModelFormatError(f"model file not found: {path}")
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"PK\x03\x04"):
        raise InputError(f"{path}: a compiled artifact; bench needs the original model file "
                         "so the peers can load it")
    fmt = reg.hook.silvanforge_detect_format(path=path, head=head)
    if fmt is None:
        raise ModelFormatError(f"{path}: not a model format any installed importer recognises "
                               f"(known formats: {', '.join(reg.formats()) or 'none'})")
    return fmt

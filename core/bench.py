"""``forge bench``: our compiled model against the peers installed here, on the same inputs.

Every engine (SilvanForge and each peer that applies to the model's format and is importable)
predicts the *same* random rows in this one process, with the same thread count.  For each batch
size the engine is warmed up, then timed best-of-``repeat``; one timing run calls ``predict``
enough times to last at least ``min_time`` seconds, so tiny batches are not lost in timer noise.
Before timing, every peer's predictions are compared with ours (max abs difference) so a fast
but wrong run is visible in the table.

Peers are optional and imported lazily; a missing or failing one becomes a note, never an error:

=================  ==========================  ============================================
engine             models                      how it is called
=================  ==========================  ============================================
xgboost            XGBoost JSON / UBJSON       ``Booster.inplace_predict`` (``nthread``)
lightgbm           LightGBM text               ``Booster.predict`` (``num_threads``)
onnxruntime        ONNX; XGBoost and LightGBM  ``InferenceSession.run`` (``intra_op_num_threads``);
                   converted with onnxmltools  other formats are converted with onnxmltools
treelite-gtil      XGBoost, LightGBM           ``treelite.gtil.predict`` (``nthread``)
tl2cgen            XGBoost, LightGBM           a shared library built by TL2cgen (``nthread``)
lleaves            LightGBM text               ``lleaves.Model.predict`` (``n_jobs``)
=================  ==========================  ============================================

Times include only the ``predict`` call: inputs are converted to each engine's own container
(a DMatrix, a float32 array) beforehand.  Quote ratios from one run; shared machines are noisy.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata

import numpy as np

from .errors import InputError
from .ir import hir

OURS = "silvanforge"
DEFAULT_BATCH_SIZES = (1, 64, 512, 4096)
# Peers are compared with ours at this tolerance; the max abs difference is always reported.
AGREE_RTOL, AGREE_ATOL = 1e-5, 1e-6

ProgressFn = Callable[[str, int, int], None]  # (what is happening, steps done, total steps)


@dataclasses.dataclass
class Measurement:
    """One engine at one batch size."""

    engine: str
    batch_size: int
    seconds: float  # best wall time of one predict call on ``batch_size`` rows
    max_abs_diff: float | None = None  # vs SilvanForge over all bench rows; None for ours
    agrees: bool | None = None

    @property
    def rows_per_second(self) -> float:
        return self.batch_size / self.seconds if self.seconds > 0 else float("inf")


@dataclasses.dataclass
class BenchReport:
    model: str
    model_format: str
    trees: int
    max_depth: int
    features: int
    outputs: int
    target: str
    rep: str
    schedule: str
    threads: int
    repeat: int
    min_time: float
    batch_sizes: list[int]
    measurements: list[Measurement] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    versions: dict[str, str] = dataclasses.field(default_factory=dict)

    def engines(self) -> list[str]:
        seen: list[str] = []
        for m in self.measurements:
            if m.engine not in seen:
                seen.append(m.engine)
        return seen

    def at(self, batch_size: int) -> list[Measurement]:
        return [m for m in self.measurements if m.batch_size == batch_size]

    def speedup(self, batch_size: int) -> tuple[float, str] | None:
        """(our rows/s / the fastest peer's rows/s, that peer) at ``batch_size``; >1: we are faster."""
        rows = self.at(batch_size)
        ours = [m for m in rows if m.engine == OURS]
        peers = [m for m in rows if m.engine != OURS]
        if not ours or not peers:
            return None
        best = max(peers, key=lambda m: m.rows_per_second)
        return ours[0].rows_per_second / best.rows_per_second, best.engine


# --------------------------------------------------------------------------- engines
class Engine:
    """Something that predicts rows; ``prepare`` converts inputs outside the timed region."""

    name = "?"

    def prepare(self, X: np.ndarray):
        return X

    def predict(self, prepared) -> np.ndarray:
        raise NotImplementedError


class Ours(Engine):
    name = OURS

    def __init__(self, compiled: dict[int, object], fallback):
        self.compiled, self.fallback = compiled, fallback

    def predict(self, prepared):
        return self.compiled.get(len(prepared), self.fallback).predict(prepared)


class _Call(Engine):
    def __init__(self, name, predict, prepare=None):
        self.name, self._predict, self._prepare = name, predict, prepare

    def prepare(self, X):
        return X if self._prepare is None else self._prepare(X)

    def predict(self, prepared):
        return self._predict(prepared)


def _xgboost(path, fmt, threads, workdir):
    import xgboost as xgb

    booster = xgb.Booster()
    with open(path, "rb") as f:
        booster.load_model(bytearray(f.read()))  # from a buffer: JSON or UBJSON by content
    booster.set_param({"nthread": threads})
    return _Call("xgboost", lambda X: booster.inplace_predict(X, validate_features=False))


def _lightgbm(path, fmt, threads, workdir):
    import lightgbm as lgb

    booster = lgb.Booster(model_file=path)
    return _Call("lightgbm", lambda X: booster.predict(X, num_threads=threads))


def _onnx_model(path, fmt, num_features):
    """The model as serialized ONNX: the file itself, or converted with onnxmltools."""
    if fmt == "onnx":
        with open(path, "rb") as f:
            return f.read(), None
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    types = [("input", FloatTensorType([None, num_features]))]
    if fmt.startswith("xgboost"):
        import xgboost as xgb

        booster = xgb.Booster()
        with open(path, "rb") as f:
            booster.load_model(bytearray(f.read()))
        model = onnxmltools.convert_xgboost(booster, initial_types=types)
    elif fmt.startswith("lightgbm"):
        import lightgbm as lgb

        model = onnxmltools.convert_lightgbm(lgb.Booster(model_file=path), initial_types=types,
                                             zipmap=False)
    else:
        raise NotImplementedError(f"no ONNX converter for {fmt}")
    return model.SerializeToString(), "converted with onnxmltools"


def _onnxruntime(path, fmt, threads, workdir, num_features):
    import onnxruntime as ort

    blob, how = _onnx_model(path, fmt, num_features)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    session = ort.InferenceSession(blob, sess_options=so, providers=["CPUExecutionProvider"])
    inp = session.get_inputs()[0]
    dtype = np.float64 if "double" in inp.type else np.float32
    outputs = session.get_outputs()
    # Classifiers give (label, probabilities); predict returns the probabilities.
    label_first = len(outputs) > 1 and ("int" in outputs[0].type or "string" in outputs[0].type)
    name = outputs[1 if label_first else 0].name

    def predict(X):
        return session.run([name], {inp.name: X})[0]

    engine = _Call("onnxruntime", predict, lambda X: np.ascontiguousarray(X, dtype=dtype))
    engine.note = f"onnxruntime: model {how}" if how else None
    return engine


def _treelite_model(path, fmt):
    import treelite

    if fmt == "xgboost-json":
        return treelite.frontend.load_xgboost_model(path, format_choice="json")
    if fmt == "xgboost-ubjson":
        return treelite.frontend.load_xgboost_model(path, format_choice="ubjson")
    if fmt == "lightgbm-text":
        return treelite.frontend.load_lightgbm_model(path)
    raise NotImplementedError(f"treelite does not read {fmt}")


def _treelite_gtil(path, fmt, threads, workdir):
    import treelite

    model = _treelite_model(path, fmt)
    return _Call("treelite-gtil", lambda X: treelite.gtil.predict(model, X, nthread=threads),
                 lambda X: np.ascontiguousarray(X, dtype=np.float32 if fmt.startswith("xgboost") else np.float64))


def _tl2cgen(path, fmt, threads, workdir):
    import tl2cgen

    model = _treelite_model(path, fmt)
    libpath = os.path.join(workdir, "tl2cgen_model.so")
    tl2cgen.export_lib(model, toolchain="gcc", libpath=libpath,
                       params={"parallel_comp": max(1, os.cpu_count() or 1)})
    predictor = tl2cgen.Predictor(libpath, nthread=threads)
    dtype = "float32" if fmt.startswith("xgboost") else "float64"
    return _Call("tl2cgen", lambda d: predictor.predict(d),
                 lambda X: tl2cgen.DMatrix(np.ascontiguousarray(X), dtype=dtype))


def _lleaves(path, fmt, threads, workdir):
    import lleaves

    model = lleaves.Model(model_file=path)
    model.compile()
    return _Call("lleaves", lambda X: model.predict(X, n_jobs=threads),
                 lambda X: np.ascontiguousarray(X, dtype=np.float64))


# (engine, module to import, formats it applies to, factory)
PEERS = [
    ("xgboost", "xgboost", ("xgboost-json", "xgboost-ubjson"), _xgboost),
    ("lightgbm", "lightgbm", ("lightgbm-text",), _lightgbm),
    ("onnxruntime", "onnxruntime", ("onnx", "xgboost-json", "xgboost-ubjson", "lightgbm-text"), None),
    ("treelite-gtil", "treelite", ("xgboost-json", "xgboost-ubjson", "lightgbm-text"), _treelite_gtil),
    ("tl2cgen", "tl2cgen", ("xgboost-json", "xgboost-ubjson", "lightgbm-text"), _tl2cgen),
    ("lleaves", "lleaves", ("lightgbm-text",), _lleaves),
]


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------- inputs and checks
def random_rows(forest: hir.Forest, n: int, seed: int = 0) -> np.ndarray:
    """Rows that exercise both sides of the splits: each feature uniform over a little more than
    the range of its thresholds; features with categorical splits get category codes."""
    rng = np.random.default_rng(seed)
    lo = np.full(forest.num_features, np.inf)
    hi = np.full(forest.num_features, -np.inf)
    cat_max = np.full(forest.num_features, -1)
    for t in forest.trees:
        internal = np.flatnonzero(t.left >= 0)
        feats = t.feature[internal]
        thr = np.asarray(t.threshold[internal], dtype=np.float64)
        finite = np.isfinite(thr)
        np.minimum.at(lo, feats[finite], thr[finite])
        np.maximum.at(hi, feats[finite], thr[finite])
        for node, cats in t.categories.items():
            f = int(t.feature[node])
            cat_max[f] = max(cat_max[f], int(cats.max()) if len(cats) else 0)
    unused = ~np.isfinite(lo)
    lo[unused], hi[unused] = 0.0, 1.0
    pad = np.maximum((hi - lo) * 0.1, 1e-3)
    X = rng.uniform(lo - pad, hi + pad, size=(n, forest.num_features))
    for f in np.flatnonzero(cat_max >= 0):
        X[:, f] = rng.integers(0, cat_max[f] + 2, size=n)
    return X.astype(np.float32 if forest.threshold_dtype == "float32" else np.float64)


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


def time_call(fn: Callable, arg, repeat: int, min_time: float) -> float:
    """Best-of-``repeat`` seconds per call, each timing run lasting at least ``min_time``."""
    fn(arg)  # warm up
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn(arg)
        elapsed = time.perf_counter() - start
        if elapsed >= min_time or calls >= 1 << 24:
            break
        calls = min(calls * 10, max(calls * 2, int(calls * min_time / max(elapsed, 1e-9) * 1.2)))
    best = elapsed / calls
    for _ in range(repeat - 1):
        start = time.perf_counter()
        for _ in range(calls):
            fn(arg)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


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


# --------------------------------------------------------------------------- the benchmark
def run_bench(model: str, batch_sizes=DEFAULT_BATCH_SIZES, threads: int | None = None,
              target: str = "cpu", rep: str | None = None, schedule=None, repeat: int = 5,
              min_time: float = 0.1, seed: int = 0, peers: list[str] | None = None,
              progress: ProgressFn | None = None) -> BenchReport:
    """Time SilvanForge and the applicable installed peers on ``model``; see the module doc.

    ``schedule`` is a :class:`Schedule`, its text, or ``None`` for the target's default at each
    batch size.  ``peers`` limits which peers run (names as in :data:`PEERS`); ``None`` runs all.
    """
    from . import api
    from .loading import load_model
    from .plugins import registry
    from .runtime import default_threads
    from .scheduler import CANNED, Schedule, canned, parse_schedule

    batch_sizes = sorted({int(b) for b in batch_sizes})
    if not batch_sizes or batch_sizes[0] <= 0:
        raise InputError(f"batch sizes must be positive integers, got {batch_sizes}")
    if repeat <= 0:
        raise InputError(f"repeat must be a positive integer, got {repeat}")
    if threads is not None and threads <= 0:
        raise InputError(f"threads must be a positive integer, got {threads}")
    threads = threads or default_threads()

    model = os.fspath(model)
    reg = registry()
    fmt = _detect_format(model, reg)
    forest = load_model(model)
    reg.check_target(target)
    if isinstance(schedule, str):  # a canned schedule's name, or schedule text
        schedule = canned(schedule.strip(), forest) if schedule.strip() in CANNED \
            else parse_schedule(schedule)

    # One compile per distinct schedule: the default may depend on the batch size.
    groups: dict[str, list[int]] = {}
    for b in batch_sizes:
        sched = schedule or reg.hook.silvanforge_target_default_schedule(
            target=target, forest=forest, batch_size=b)
        groups.setdefault(sched.to_text() if isinstance(sched, Schedule) else repr(sched), []).append(b)

    wanted = [p for p in PEERS if fmt in p[2] and (peers is None or p[0] in peers)]
    total = len(groups) + len(wanted) + len(batch_sizes) * (1 + len(wanted))
    done = 0

    def step(what: str) -> None:
        nonlocal done, total
        if progress is not None:
            progress(what, done, total)
        done += 1

    compiled: dict[int, object] = {}
    first = None
    for sizes in groups.values():
        step(f"compiling for batch size {', '.join(map(str, sizes))}")
        cf = api.compile(forest, target=target, rep=rep, schedule=schedule,
                         batch_size=max(sizes), threads=threads)
        first = first or cf
        for b in sizes:
            compiled[b] = cf
    ours = Ours(compiled, compiled[batch_sizes[-1]])

    report = BenchReport(
        model=model, model_format=fmt, trees=forest.num_trees, max_depth=forest.max_depth(),
        features=forest.num_features, outputs=forest.num_outputs, target=target, rep=first.rep,
        schedule=first.schedule.to_text().replace("\n", "; "), threads=threads, repeat=repeat,
        min_time=min_time, batch_sizes=batch_sizes,
    )
    report.versions = {"silvanforge": _version("silvanforge") or "?", "numpy": np.__version__}

    X = random_rows(forest, batch_sizes[-1], seed)
    expected = ours.predict(X)
    engines: list[tuple[Engine, float | None, bool | None]] = [(ours, None, None)]
    with tempfile.TemporaryDirectory(prefix="forge-bench-") as workdir:
        for name, module, _, factory in wanted:
            step(f"preparing {name}")
            if not _importable(module):
                report.notes.append(f"{name}: not installed (pip install {module})")
                total -= 1 + len(batch_sizes)
                continue
            try:
                if name == "onnxruntime":
                    engine = _onnxruntime(model, fmt, threads, workdir, forest.num_features)
                else:
                    engine = factory(model, fmt, threads, workdir)
                got = engine.predict(engine.prepare(X))
                diff, agrees = compare(expected, got)
            except Exception as exc:  # a peer that cannot run this model is skipped, not fatal
                msg = " ".join(str(exc).split())[:200]
                report.notes.append(f"{name}: skipped ({type(exc).__name__}: {msg})")
                total -= len(batch_sizes)
                continue
            if getattr(engine, "note", None):
                report.notes.append(engine.note)
            for dist in (module, "onnxmltools" if name == "onnxruntime" and fmt != "onnx" else None):
                if dist and _version(dist):
                    report.versions[dist] = _version(dist)
            engines.append((engine, diff, agrees))

        for b in batch_sizes:
            for engine, diff, agrees in engines:
                step(f"timing {engine.name} at batch size {b}")
                prepared = engine.prepare(X[:b])
                seconds = time_call(engine.predict, prepared, repeat, min_time)
                report.measurements.append(Measurement(engine.name, b, seconds, diff, agrees))
    if progress is not None:
        progress("done", total, total)
    return report


def _detect_format(path: str, reg) -> str:
    from .errors import ModelFormatError

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


# --------------------------------------------------------------------------- reporting
def machine_description() -> str:
    cpus = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{platform.platform()}; {cpu}; {cpus} CPUs ({usable} usable); "
            f"Python {platform.python_version()}")


def table_rows(report: BenchReport) -> list[list[str]]:
    """The table as strings: batch, engine, time per batch, rows/s, max abs diff, agrees, ours/fastest."""
    rows = []
    for b in report.batch_sizes:
        speed = report.speedup(b)
        for m in report.at(b):
            ratio = ""
            if m.engine == OURS and speed is not None:
                ratio = f"{speed[0]:.2f}x vs {speed[1]}"
            rows.append([
                str(b), m.engine, _fmt_time(m.seconds), f"{m.rows_per_second:,.0f}",
                "" if m.max_abs_diff is None else f"{m.max_abs_diff:.3g}",
                "" if m.agrees is None else ("yes" if m.agrees else "NO"),
                ratio,
            ])
    return rows


HEADERS = ["batch", "engine", "time/batch", "rows/s", "max abs diff vs ours", "agrees",
           "ours / fastest peer"]


def _fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def describe(report: BenchReport) -> str:
    return (f"{report.model} ({report.model_format}): {report.trees} trees, max depth "
            f"{report.max_depth}, {report.features} features, {report.outputs} "
            f"output{'s' if report.outputs != 1 else ''}; "
            f"target {report.target}, rep {report.rep}, schedule {report.schedule}; "
            f"{report.threads} threads, best of {report.repeat}")


def to_markdown(report: BenchReport, command: str | None = None) -> str:
    lines = ["# forge bench", ""]
    if command:
        lines += ["Command:", "", "```", command, "```", ""]
    lines += [f"- Model: {describe(report)}",
              f"- Machine: {machine_description()}",
              "- Versions: " + ", ".join(f"{k} {v}" for k, v in report.versions.items()),
              (f"- Each time is the best of {report.repeat} runs of at least {report.min_time} s "
               "each, after a warm-up; inputs are the same random rows for every engine."), ""]
    lines.append("| " + " | ".join(HEADERS) + " |")
    lines.append("|" + "|".join("---:" if h in ("batch", "time/batch", "rows/s") else "---"
                                for h in HEADERS) + "|")
    for row in table_rows(report):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    if report.notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def command_line(argv: list[str] | None = None) -> str:
    import shlex

    argv = sys.argv if argv is None else argv
    return " ".join(shlex.quote(a) for a in ["forge", *argv[1:]])

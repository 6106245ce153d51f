"""A compiled model: ``CompiledForest`` (``predict``, its lean path for a few rows and the
one-row form, ``save``, pickling) and ``load_compiled``, which makes one from an artifact,
running its saved machine code where it is trusted and built for this host."""

from __future__ import annotations

import functools
import os
import threading
import time
import warnings

import numpy as np

from . import __version__, artifacts, codecache, transforms
from .errors import (ArtifactError, ArtifactWarning, InputError, IRVerificationError, PluginError,
                     ScheduleError, UnsupportedModelError)
from .inputs import as_rows
from .ir import hir, hir_io, lir, lir_io, mir
from .kernel import check_kernel
from .options import CompileOptions
from .pipeline import Lowered, _lower, _lower_lir, _lower_program, hir_passes, lir_digest, program_text
from .plugins import registry
from .runtime import check_threads, run_kernel
from .sampling import random_rows
from .scheduler import Schedule, lower_to_mir, parse_schedule
from .tiling import check_tile_size, tile_forest

# Requests of up to this many rows take the lean path of CompiledForest.predict.
SMALL_ROWS = 16
# Compiles for batches of up to this many rows make no one-row form (CompiledForest._one_row_calls):
# theirs is one already.
ONE_ROW_ROWS = 2

class CompiledForest:
    """A forest compiled for one target; ``predict`` behaves like the training library's."""

    def __init__(self, forest, kernel, lir_module, mir_function, options: CompileOptions,
                 compile_seconds: float, tile_ids: list | None = None, relower=None,
                 lir_digest_value: str | None = None, one_row: bool = False, cache=None):
        self.forest: hir.Forest = forest  # the model as imported (HIR passes work on copies)
        # What decided the program (recorded in the artifact): the compile's options, resolved,
        # with the representation, schedule (a Schedule) and padding chosen.
        self.options: CompileOptions = options
        self.tile_ids = tile_ids  # probability-based tiling per tree (model order), or None
        self.kernel = check_kernel(kernel, options.target)
        self._lir_module, self._mir_function = lir_module, mir_function
        # A model loaded from an artifact runs its saved code without being lowered; its
        # program is lowered again only when asked for (show, lir_module).
        self._relower = relower
        self._lir_digest = lir_digest_value
        self.compile_seconds = compile_seconds
        # The lean path of small requests (see predict), where the kernel offers one.
        # transforms.shape_output of this model's margins: (n,) for one column
        self._flat = forest.num_outputs == 1 and forest.output_shape != "matrix"
        self._small = kernel.small_calls(SMALL_ROWS, forest.transform, self._flat)
        self._small_dtype = np.dtype(kernel.input_dtype)
        if forest.hashed_categories:
            # Every input is converted first (its categorical columns hashed): no lean path.
            self._small = None
        self._num_features = forest.num_features
        # The one-row form: compiled on the first 1-row request where the compile chose every
        # option (``one_row``); it then answers requests of up to ``_one_row_rows`` rows.
        self.one_row = bool(one_row and self._small is not None)
        self._one_row = None if self.one_row else self._small
        self._one_row_rows = 1 if self.one_row else 0
        self._one_row_lock = threading.Lock()
        self.one_row_declined = False
        self._cache = cache

    # The options a compiled model is known by (read from ``options``).
    target = property(lambda self: self.options.target, doc="the target compiled for")
    rep = property(lambda self: self.options.rep, doc="the representation chosen")
    schedule = property(lambda self: self.options.schedule, doc="the Schedule chosen")
    batch_size = property(lambda self: self.options.batch_size, doc="the batch size tuned for, or None")
    threads = property(lambda self: self.options.threads, doc="threads predict uses by default, or None: all")
    pad = property(lambda self: self.options.pad, doc="whether the trees were padded")
    tile_size = property(lambda self: self.options.tile_size, doc="nodes a walk step evaluates")
    reorder = property(lambda self: self.options.reorder, doc='trees grouped by "depth" or "peel", or None')

    def _lowered(self) -> None:
        if self._lir_module is None:
            low = self._relower()
            self._lir_module, self._mir_function = low.lir, low.mir

    @property
    def lir_module(self) -> lir.Module:
        self._lowered()
        return self._lir_module

    @property
    def mir_function(self) -> mir.MirFunction:
        self._lowered()
        return self._mir_function

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
        """Predictions for rows ``X``: what the source library's ``predict`` returns (XGBoost's
        and LightGBM's boosters: probabilities for classifiers; scikit-learn: ``predict_proba``
        for classifiers, ``predict`` for regressors).

        ``X``: a NumPy array (n, num_features), or a pandas / polars DataFrame or pyarrow Table,
        whose columns are matched to the model's feature names and whose categorical columns
        are mapped to the model's categories (:mod:`silvanforge.inputs`).
        ``output_margin``: raw margins (XGBoost ``output_margin``, LightGBM ``raw_score``).
        ``missing``: a value treated as missing besides NaN, like XGBoost's DMatrix ``missing``.
        ``threads``: threads for this call (default: the compile option, else all CPUs).

            >>> cf.predict(np.array([[0.5, 1.0, np.nan, 3.0]]))     # doctest: +SKIP
            >>> cf.predict(frame[["b", "a", "d", "c"]])             # matched by name  # doctest: +SKIP
        """
        small = self._small
        # (The conditions are ordered and written for speed: a 1-row call takes 3 us in all.
        # A dtype of the kernel's is NumPy's own instance, so ``is`` tells; any other goes the
        # general way, which converts it.)
        if small is not None and type(X) is np.ndarray and X.dtype is self._small_dtype \
                and missing != missing:
            shape = X.shape
            if len(shape) == 2 and shape[0] <= SMALL_ROWS and shape[1] == self._num_features:
                # Online scoring, a row or a few per call: no thread split, no scratch, no checks
                # the conditions above have not made.
                if threads is not None:
                    check_threads(threads)
                if shape[0] <= self._one_row_rows:
                    small = self._one_row or self._one_row_calls()
                # The kernel applies the transform itself where it can do so exactly (``applied``).
                values, applied = small(X, not output_margin)  # shaped as returned if applied
                if output_margin or applied:
                    return values
                margins = values.reshape(-1, 1) if self._flat else values
                return transforms.shape_output(self.forest, transforms.apply(self.forest, margins))
        rows = as_rows(X, self.forest, self.kernel.input_dtype)
        if missing == missing:  # not NaN (NaN is what the kernels treat as missing already)
            try:
                missing_value = float(missing)
            except (TypeError, ValueError):
                raise InputError(f"missing must be a number, got {missing!r}") from None
            rows = np.where(rows == rows.dtype.type(missing_value), rows.dtype.type(np.nan), rows)
        if small is not None and rows.shape[0] <= SMALL_ROWS and rows.dtype is self._small_dtype \
                and rows.shape[1] == self._num_features:
            # A few rows that arrived otherwise (a data frame, another dtype, a missing value):
            # converted, they are online scoring too, and now meet every condition of the lean
            # path above (so this calls itself once).
            return self.predict(rows, output_margin, threads=threads)
        margins = run_kernel(self.kernel, rows, self.forest.num_outputs,
                             self.threads if threads is None else threads)
        values = margins if output_margin else transforms.apply(self.forest, margins)
        return transforms.shape_output(self.forest, values)

    def _one_row_calls(self):
        """The small calls of the one-row form, built on first use (once, 0.05-0.7 s): the model
        lowered for one row a call (``batch_size=1``: the representations' one-row costs choose,
        trees unpadded) and compiled; the default form's where that is the same program or
        cannot be built.  Why: a block of the default form walks 8-32 rows at once, so one row
        costs what a block does; a one-row walk costs a row's.  The form then answers requests
        of as many rows as it was timed faster for (:func:`_one_row_pays`), none where it lost
        even for one row (it is then dropped, and the default form answers every request).  Both
        forms are exact, so which one answers never changes a prediction."""
        with self._one_row_lock:
            if self._one_row is None:
                try:
                    one = self._build_one_row()
                except (UnsupportedModelError, PluginError):
                    one = self._small
                if one is not self._small:
                    self._one_row_rows = _one_row_pays(one, self._small, self._small_dtype, self.forest)
                    if self._one_row_rows == 0:
                        self._decline_one_row()
                        return self._small
                self._one_row = one
            return self._one_row

    def _decline_one_row(self) -> None:
        """The default form answers every request: the one-row form lost even for one row."""
        self.one_row_rep, self._one_row_kernel = None, None
        self._one_row, self._one_row_rows = self._small, 0
        self.one_row_declined = True

    def _build_one_row(self):
        # The compile's lowering knobs (resolved and recorded when it ran), not today's context.
        low = _lower(self.forest, CompileOptions(target=self.target, batch_size=1, pad=False,
                                                 **self.options.lowering()))
        if low.rep == self.rep and low.schedule.to_text() == self.schedule.to_text() and not self.pad:
            return self._small
        options = {"threads": 1, "batch_size": 1}
        reg = registry()
        kernel = (_cached_kernel(self._cache, self.target, low.lir, options) if self._cache is not None
                  else reg.target(self.target).compile(low.lir, options))
        small = check_kernel(kernel, self.target).small_calls(SMALL_ROWS, self.forest.transform, self._flat)
        if small is None:
            return self._small
        self.one_row_rep = low.rep
        self._one_row_kernel = kernel  # alive as long as its calls (and saved with the model)
        return small

    def _adopt_one_row(self, kernel, rep: str, rows: int) -> None:
        """The one-row form from saved machine code (a trusted artifact that holds it)."""
        if not self.one_row:
            return
        small = check_kernel(kernel, self.target).small_calls(SMALL_ROWS, self.forest.transform, self._flat)
        if small is None:
            return
        self.one_row_rep, self._one_row_kernel = rep, kernel
        self._one_row = small
        self._one_row_rows = max(1, min(int(rows), SMALL_ROWS))

    def show(self, level: str) -> str:
        """The program at ``level``: hir, mir, lir or target."""
        return program_text(level, self.forest, self.tile_ids, self.tile_size, self.target,
                            lambda: self.mir_function, lambda: self.lir_module)

    def summary(self) -> dict:
        f = self.forest
        return {"trees": f.num_trees, "max_depth": f.max_depth(), "features": f.num_features,
                "outputs": f.num_outputs, "target": self.target, "rep": self.rep,
                "schedule": self.schedule.to_text().replace("\n", "; ") or "none (nothing walked)", "padded": self.pad,
                "tile_size": self.tile_size, "reorder": self.reorder,
                "probability_tiled_trees": sum(i is not None for i in self.tile_ids or []),
                "batch_size": self.batch_size, "threads": self.threads,
                # the lowering knobs (None: chosen by the lowering for the model)
                **self.options.lowering(),
                "compile_seconds": round(self.compile_seconds, 3)}

    # ---------------------------------------------------------------- saving
    def save(self, path: str | os.PathLike, key: str | bytes | None = None) -> None:
        """Write a self-contained artifact: the model, the options and the target's machine code
        (:mod:`silvanforge.artifacts`).  With ``key`` (or ``SILVANFORGE_ARTIFACT_KEY`` set) the
        artifact is signed, and a loader holding the same key runs its machine code instead of
        compiling again."""
        artifacts.write(path, *self._artifact_parts(), key)

    def __reduce__(self):
        # pickle, joblib and copy.deepcopy go through the artifact: a pickle is code the
        # unpickler runs anyway, so its machine code is trusted (fast on a matching host).
        return _unpickle, (artifacts.to_bytes(*self._artifact_parts()),)

    def _artifact_parts(self) -> tuple[dict, dict, bytes, dict]:
        meta = {
            "silvanforge": __version__, "target": self.target,
            "rep": self.rep, "schedule": self.schedule.to_text(), "batch_size": self.batch_size,
            "threads": self.threads, "fingerprint": self.forest.fingerprint(), "pad": self.pad,
            "tile_size": self.tile_size, "reorder": self.reorder,
            "probability_tiling": self.tile_ids is not None,
            "lir": self._lir_digest or lir_digest(self.lir_module), "one_row": self.one_row,
            "one_row_declined": self.one_row_declined,
            **self.options.lowering(),  # what else decided the program, to lower it again alike
        }
        arrays = {"forest.npz": hir_io.to_arrays(self.forest)}
        if self.tile_ids is not None:  # the profile-derived tiling, to rebuild the layout
            arrays["tiling.npz"] = _tile_id_arrays(self.tile_ids, self.forest)
        blob = self.kernel.artifact()
        extra = {}
        if blob:
            # What running the code needs, so a trusted load maps it without lowering the model.
            spec, buffers = lir_io.to_parts(self.kernel.module)
            arrays["program.npz"] = buffers
            extra["program.json"] = spec
            # The one-row form where it was built, so a trusted load does not build it again.
            one = getattr(self, "_one_row_kernel", None)
            if one is not None and self._one_row is not self._small:
                spec, buffers = lir_io.to_parts(one.module)
                arrays["one_row_program.npz"] = buffers
                extra.update({"one_row_program.json": spec, "one_row.bin": one.artifact()})
                meta.update(one_row_rows=self._one_row_rows, one_row_rep=self.one_row_rep)
        return meta, arrays, blob, extra


# The forms are timed on this many different rows: a few rows called again and again teach the
# branch predictor their paths, which online scoring never sees (16 rows made the one-row form
# of flight 100x31 look 2x faster than on fresh rows, and faster than the default form, which on
# fresh rows answered one row in 2.9 us against its 6.7).
FRESH_ROWS = 2048
TIMED_CALLS = 128


def _one_row_pays(one, block, dtype, forest: hir.Forest) -> int:
    """The most rows (0 to SMALL_ROWS) up to which a request was answered faster by the one-row
    form ``one`` than by the default form ``block``: each timed per call over up to TIMED_CALLS
    requests, best of three rounds, no row seen twice by one form for one request size (5-60 ms,
    once).  The rows take both sides of the splits (:func:`silvanforge.sampling.random_rows`):
    rows far from the thresholds walk one short path and favour the one-row form (taxi 100x31:
    timed on such rows it took 16-row requests at 9.1 us, against the block's 5.6)."""
    rows = random_rows(forest, FRESH_ROWS).astype(dtype)

    def per_call(fn, n: int) -> float:
        calls = min(TIMED_CALLS, FRESH_ROWS // (3 * n))
        best = float("inf")
        for r in range(3):
            parts = [rows[(r * calls + k) * n:][:n] for k in range(calls)]
            start = time.perf_counter()
            for part in parts:
                fn(part, True)
            best = min(best, (time.perf_counter() - start) / calls)
        return best

    pays = 0
    for n in range(1, SMALL_ROWS + 1):
        if per_call(one, n) >= per_call(block, n):
            break
        pays = n
    return pays


def _unpickle(data: bytes) -> "CompiledForest":
    return _load(data, "the pickled compiled model", None, trust_code=True)


def _cached_kernel(cache, target: str, module: lir.Module, options: dict):
    """The kernel of ``module`` from the code cache, compiled and stored there when absent,
    damaged or built for another host."""
    reg = registry()
    entry = codecache.key(target, lir_digest(module), reg.target(target).host_key())
    blob = codecache.get(cache, entry)
    kernel = None
    if blob is not None:
        try:
            kernel = reg.target(target).load_kernel(module, blob, options)
        except Exception:  # noqa: BLE001 - an entry that will not map: compile again
            kernel = None
    if kernel is None:
        kernel = reg.target(target).compile(module, options)
        blob = check_kernel(kernel, target).artifact()
        if blob:
            codecache.put(cache, entry, blob)
    return kernel


def read_artifact_forest(source) -> hir.Forest:
    """The model stored in an artifact (a path or its bytes), without compiling anything."""
    return artifacts.read(source).forest


def load_compiled(path: str | os.PathLike | bytes, key: str | bytes | None = None,
                  trust_code: bool = False) -> CompiledForest:
    """Load an artifact saved by :meth:`CompiledForest.save` (``forge compile -o``).

    Its machine code runs only when the artifact is signed with ``key`` (or the
    ``SILVANFORGE_ARTIFACT_KEY`` environment variable), or when ``trust_code`` says you trust
    where it came from, as you would a shared library; otherwise the stored model is compiled
    again (a warning says so).  Code built for another host or version is always rebuilt.  A
    damaged or mixed artifact is an ``ArtifactError``.

        >>> cf = sf.compile("examples/model.json"); cf.save("/tmp/model.forge")   # doctest: +SKIP
        >>> sf.load_compiled("/tmp/model.forge").predict(X)                       # doctest: +SKIP
    """
    if isinstance(path, (bytes, bytearray, memoryview)):  # an artifact's bytes
        return _load(bytes(path), "the artifact bytes", key, trust_code)
    path = os.fspath(path)
    return _load(path, path, key, trust_code)


def _load(source, path: str, key, trust_code: bool) -> CompiledForest:
    """load_compiled of a path or artifact bytes (``path``: what messages call it)."""
    art = artifacts.read(source, key)
    meta, forest, tiling = art.meta, art.forest, art.tiling
    blob = art.blob
    if blob and not (art.signed or trust_code):
        warnings.warn(f"{path}: its machine code was not run (the artifact is not signed with your key: "
                      f"set {artifacts.KEY_ENV} when saving and loading, or pass trust_code=True for "
                      "artifacts you trust); compiling its model again", ArtifactWarning, stacklevel=2)
        blob = b""
    start = time.perf_counter()
    registry().check_target(meta["target"])
    relower = functools.partial(_lowered_from_artifact, path, forest, meta, tiling)
    if blob and art.program is not None and meta["silvanforge"] == __version__:
        fast = _mapped(path, art, relower, start)
        if fast is not None:
            return fast
        warnings.warn(f"{path}: its machine code was built for another host (CPU or LLVM); "
                      "compiling its model again", ArtifactWarning, stacklevel=3)
        blob = b""
    return _kernel_for(path, relower(), meta, blob, start)


def _mapped(path: str, art, relower, start: float) -> CompiledForest | None:
    """The compiled forest of a trusted artifact from its saved code and program, lowering
    nothing; None when the code was built for another host."""
    meta = art.meta
    try:
        module = lir_io.from_parts(*art.program)
    except (ValueError, KeyError, TypeError) as exc:
        raise ArtifactError(f"{path}: the stored program is damaged ({exc})") from None
    options = {"threads": meta["threads"], "batch_size": meta["batch_size"]}
    try:
        kernel = registry().target(meta["target"]).load_kernel(module, art.blob, options)
    except Exception as exc:  # noqa: BLE001 - signed or trusted, yet the code will not load
        raise ArtifactError(f"{path}: its machine code does not load ({type(exc).__name__}: "
                            f"{str(exc)[:200]}): damaged") from None
    if kernel is None:
        return None
    try:
        sched = parse_schedule(meta["schedule"])
        tile_ids = None if art.tiling is None else _tile_ids_from_arrays(art.tiling, art.forest)
    except (ScheduleError, ValueError, KeyError) as exc:
        raise ArtifactError(f"{path}: the stored schedule or tiling is damaged ({exc})") from None
    cf = CompiledForest(art.forest, kernel, None, None, CompileOptions.from_meta(meta, sched),
                        time.perf_counter() - start, tile_ids=tile_ids, relower=relower,
                        lir_digest_value=meta["lir"], one_row=meta["one_row"])
    if art.one_row is not None and meta["one_row"] and meta["one_row_rep"]:
        one_code, one_spec, one_buffers = art.one_row
        try:
            one_module = lir_io.from_parts(one_spec, one_buffers)
            one = registry().target(meta["target"]).load_kernel(one_module, one_code,
                                                                {"threads": 1, "batch_size": 1})
        except Exception as exc:  # noqa: BLE001 - signed or trusted, yet the code will not load
            raise ArtifactError(f"{path}: its one-row machine code does not load ({type(exc).__name__}: "
                                f"{str(exc)[:200]}): damaged") from None
        if one is not None:
            cf._adopt_one_row(one, meta["one_row_rep"], meta["one_row_rows"])
    elif meta["one_row"] and meta["one_row_declined"]:
        cf._decline_one_row()
    cf.compile_seconds = time.perf_counter() - start
    return cf


def _lowered_from_artifact(path: str, forest: hir.Forest, meta: dict, tiling) -> Lowered:
    """The model of an artifact lowered again with its stored options."""
    reg = registry()
    target, rep = meta["target"], meta["rep"]
    reg.check_representation(rep)
    if reg.rep_kind(rep) == "program":
        try:
            return _lower_program(forest, rep, reg.target_kind(target), meta.get("batch_size"),
                                  CompileOptions.from_meta(meta, Schedule()))
        except InputError as exc:
            raise ArtifactError(f"{path}: a {rep} artifact of a model it cannot run ({exc}): corrupt") from None
    try:
        sched = parse_schedule(meta["schedule"])
    except ScheduleError as exc:
        raise ArtifactError(f"{path}: the stored schedule is damaged ({exc})") from None
    pad = bool(meta.get("pad", False))
    tile_size = meta.get("tile_size", 1)
    try:
        check_tile_size(tile_size)
    except InputError as exc:
        raise ArtifactError(f"{path}: {exc}") from None
    reorder = meta.get("reorder")
    try:
        if reorder not in (None, "depth", "peel"):
            raise ValueError(f"unknown tree reordering {reorder!r}")
        tile_ids = None if tiling is None else _tile_ids_from_arrays(tiling, forest)
        lowered_forest = hir_passes(forest, pad, reorder, tile_ids)
        if tile_ids is not None:
            tile_forest(lowered_forest, tile_size)  # verifies the stored tiling
    except (ValueError, KeyError, IRVerificationError) as exc:
        raise ArtifactError(f"{path}: the stored tiling or passes are corrupt ({exc})") from None
    # The options it was compiled with, lowering knobs included: the same program again (never
    # the context or environment of this process: they were resolved, and recorded, at compile).
    opts = CompileOptions.from_meta(meta, sched)
    mir_fn = lower_to_mir(lowered_forest, sched)
    module = _lower_lir(reg, lowered_forest, mir_fn, opts)
    return Lowered(forest, pad, lowered_forest, rep, sched, mir_fn, module, tile_size, reorder, tile_ids, opts)


def _kernel_for(path: str, low: Lowered, meta: dict, blob: bytes, start: float) -> CompiledForest:
    """The compiled forest of a loaded artifact: its machine code where it is still the program's."""
    reg, target = registry(), meta["target"]
    options = {"threads": meta.get("threads"), "batch_size": meta.get("batch_size")}
    kernel = None
    # Machine code is reused only for the very program it was built from: the same version can
    # lower a model differently (a new chooser, widths) and old code would misread the buffers.
    if blob and meta.get("silvanforge") == __version__ and meta.get("lir") == lir_digest(low.lir):
        try:
            kernel = reg.target(target).load_kernel(low.lir, blob, options)
        except Exception as exc:  # noqa: BLE001 - signed or trusted, yet the code will not load
            raise ArtifactError(f"{path}: its machine code does not load ({type(exc).__name__}: "
                                f"{str(exc)[:200]}): damaged") from None
    if kernel is None:
        kernel = reg.target(target).compile(low.lir, options)
    cf = CompiledForest(low.forest, kernel, low.lir, low.mir, low.options, time.perf_counter() - start,
                        tile_ids=low.tile_ids, one_row=bool(meta.get("one_row", False)))
    if cf.one_row and meta.get("one_row_declined"):
        cf._decline_one_row()
    return cf


def _tile_id_arrays(tile_ids: list, forest: hir.Forest) -> dict[str, np.ndarray]:
    """Tile ids of every tree as arrays: ``tiled`` (bool per tree) and ``tile_id`` (the tiled
    trees' ids, concatenated in tree order)."""
    tiled = np.array([i is not None for i in tile_ids], dtype=bool)
    ids = [np.asarray(i, np.int32) for i in tile_ids if i is not None]
    return {"tiled": tiled, "tile_id": np.concatenate(ids) if ids else np.zeros(0, np.int32)}


def _tile_ids_from_arrays(arrays: dict, forest: hir.Forest) -> list:
    tiled = arrays["tiled"].astype(bool)
    flat = arrays["tile_id"].astype(np.int32)
    if len(tiled) != forest.num_trees:
        raise ValueError(f"a tiling for {len(tiled)} trees, the model has {forest.num_trees}")
    sizes = [t.num_nodes for t, on in zip(forest.trees, tiled) if on]
    if sum(sizes) != len(flat):
        raise ValueError("tile ids do not match the trees' nodes")
    parts = iter(np.split(flat, np.cumsum(sizes)[:-1]) if sizes else [])
    return [next(parts) if on else None for on in tiled]

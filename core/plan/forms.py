"""A form: one compiled program of a model (its kernel, the options that decided it, and its
program lowered again only when asked for), and the one place forms are built: a compile, a
compiled model's other forms, the tuner's candidates and an artifact compiled again all go
through :func:`build_form`."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import inspect
import os
import threading

import numpy as np

from silvanforge.errors import PluginError, UnsupportedModelError
from silvanforge.ir import hir, lir, mir
from silvanforge.runtime.kernel import check_kernel
from silvanforge.plan.memo import compile_scope, current, in_compile_scope
from silvanforge.options import CompileOptions, kernel_options
from silvanforge.lowering.program import _lower, choose_representation, lir_digest
from silvanforge.plan.bands import MID_BATCH, SMALL_BAND_FACTOR, SMALL_BAND_MIN_NS, SMALL_ROWS, Band, merge_bands, untuned_bands
from silvanforge.plugins import registry
from silvanforge.rep import called_cost_of
from silvanforge.runtime.threads import default_threads
from silvanforge.frontend.tiling import cover_order_ids


class Form:
    """One program of a model compiled for one target."""

    def __init__(self, forest: hir.Forest, kernel, options: CompileOptions, lir_module=None,
                 mir_function=None, digest: str | None = None, tile_ids: list | None = None,
                 relower=None, order_by: str | None = None):
        self.forest = forest  # the model as imported
        self.kernel = check_kernel(kernel, options.target)
        # What decided the program: resolved, with the representation, schedule, padding chosen.
        self.options = options
        self.tile_ids = tile_ids
        # Where a node order (tile ids at a tile size of one) came from: "profile" (rows the
        # user or the tuner profiled) or "cover" (the model file's own counts), for the reader.
        self.order_by = (order_by or "profile") if tile_ids is not None and options.tile_size == 1 else None
        self._lir, self._mir = lir_module, mir_function
        self._digest = digest
        # A form mapped from saved code lowers its program again only when asked (show, save
        # to a new artifact): ``relower`` gives the Lowered.
        self._relower = relower
        flat = forest.num_outputs == 1 and forest.output_shape != "matrix"
        # The lean path of small requests, where the kernel offers one (else None).  It runs
        # every phase on the calling thread: not for a program that splits its trees over
        # threads (orderedReduce: a row's trees in two halves), which the runtime runs.
        self.small = _small_calls(self.kernel, options, forest.transform, flat)
        # Whether the small calls split a row's trees over threads (they take ``threads``).
        self.small_splits = self.small is not None and _splits_trees(self.kernel, options)
        self.input_dtype = np.dtype(self.kernel.input_dtype)

    def _lowered(self) -> None:
        if self._lir is None:
            low = self._relower()
            self._lir, self._mir = low.lir, low.mir

    @property
    def lir_module(self) -> lir.Module:
        self._lowered()
        return self._lir

    @property
    def mir_function(self) -> mir.MirFunction:
        self._lowered()
        return self._mir

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = lir_digest(self.lir_module, self.tile_ids)
        return self._digest

    def text(self) -> str:
        """One line: representation, padding, the batch size it was lowered for, the schedule."""
        o = self.options
        schedule = o.schedule.to_text().replace("\n", "; ") if o.schedule is not None else ""
        batch = "any" if o.batch_size is None else o.batch_size
        laid = ""
        if self.tile_ids is not None:
            laid = {"profile": " nodes=profile order", "cover": " nodes=training order"}.get(
                self.order_by, " tiles=by probability")
        return f"rep={o.rep} pad={o.pad} batch_size={batch}{laid}" + (f" schedule={schedule}" if schedule else "")


def _split_small_requests(spec: list, forms: list) -> list:
    """``spec`` with the one-row band stretched to SMALL_ROWS rows where its form splits each
    row's trees over threads and no form of its own answers 3 to SMALL_ROWS rows: the next
    band's form runs so few rows on one thread (a share needs ``min_share_rows``), while the
    split walks them on two (docs/benchmarks.md, "Measurements behind the defaults")."""
    if len(spec) < 2 or spec[0][2] != 1 or spec[1][1] == SMALL_ROWS or forms[0] is None:
        return spec
    if not _splits_trees(forms[0].kernel, forms[0].options) or spec[1][1] is not None and spec[1][1] <= SMALL_ROWS:
        return spec
    (lo, _hi, batch), (_lo, hi, next_batch) = spec[0], spec[1]
    return [(lo, SMALL_ROWS, batch), (SMALL_ROWS + 1, hi, next_batch)] + list(spec[2:])


def _splits_trees(kernel, options: CompileOptions) -> bool:
    """Whether the kernel splits its trees over threads (a phase looping over trees, run on
    more than one thread)."""
    threads = options.threads or default_threads()
    return threads > 1 and any(getattr(p, "parallel", None) == "loop" for p in getattr(kernel, "phases", ()))


def _small_calls(kernel, options: CompileOptions, transform, flat: bool):
    """The kernel's lean path of small requests, or None.  A program whose trees split over
    threads (a loop phase: orderedReduce) gets it only from a kernel that takes ``threads``
    (the CPU's hands half the trees to a native worker); another's would walk them all on the
    calling thread, so the runtime's general path runs it."""
    if _splits_trees(kernel, options):
        threads = options.threads or default_threads()
        if "threads" not in inspect.signature(kernel.small_calls).parameters:
            return None
        return kernel.small_calls(SMALL_ROWS, transform, flat, threads=threads)
    return kernel.small_calls(SMALL_ROWS, transform, flat)


def build_form(forest: hir.Forest, opts: CompileOptions, tile_ids: list | None = None,
               built: dict[str, Form] | None = None, order_by: str | None = None) -> Form:
    """``forest`` lowered under resolved ``opts`` (choices left open are made) and compiled;
    ``tile_ids``: a tiling or node order already made (``order_by``: "cover" where the model's
    covers made it); ``built``: forms already made, by program digest: one of the same program
    is returned instead of compiling it again (and a new one is added)."""
    low = _lower(forest, opts, tile_ids=tile_ids)
    digest = lir_digest(low.lir, low.tile_ids)
    if built is not None and digest in built:
        return built[digest]
    kernel = registry().target(low.options.target).compile(low.lir, kernel_options(low.options))
    form = Form(low.forest, kernel, low.options, low.lir, low.mir, digest=digest, tile_ids=low.tile_ids,
                order_by=order_by)
    if built is not None:
        built[digest] = form
    return form


def host_key(target: str) -> str | None:
    """What the target's machine code depends on about this host (CPU, features, LLVM): the
    target's ``silvanforge_target_host``."""
    return registry().target(target).host_key()


def _untuned_spec(forest: hir.Forest, opts: CompileOptions, kind: str):
    """:func:`silvanforge.plan.bands.untuned_bands` of the representations' estimates: the cheapest at
    the compile's batch size, and what another representation saves a row at a small band's
    size over the one that is cheapest at the compile's (a block form pays for its whole block
    on a few rows: 8-64 times a row's cost), and whether requests of 3 to SMALL_ROWS rows get a
    form of their own (:data:`silvanforge.plan.bands.SMALL_BAND_FACTOR`)."""
    reg = registry()
    vectors = reg.vectors(opts.target, opts.cpu)

    def costs(batch):
        return {rep: ns for rep, ns, _ in reg.rep_costs(forest, kind, batch, vectors=vectors) if ns is not None}

    top = costs(opts.batch_size)
    if not top:
        return untuned_bands(forest, opts, None)
    main = min(top, key=top.get)
    saving = 0.0
    for batch in (1, MID_BATCH):
        at = costs(batch)
        if main in at:
            saving = max(saving, at[main] - min(at.values()))
    # Small requests' own form, where the mid-size form would answer them at a block's cost.
    mid, small = costs(MID_BATCH), costs(SMALL_ROWS)
    small_band = False
    if mid and small:
        rep = min(mid, key=mid.get)
        called = called_cost_of(reg.rep_class(rep), forest, kind, MID_BATCH, SMALL_ROWS, opts.rep_options,
                                vectors)
        best = min(small.values())
        small_band = isinstance(called, float) and called > SMALL_BAND_FACTOR * best \
            and called - best >= SMALL_BAND_MIN_NS
    return untuned_bands(forest, opts, top[main], saving, small_band)


class Builds:
    """Forms being built or built, by program digest, for the threads of one plan: a program
    two bands lower alike is compiled once (the second waits for the first's form)."""

    def __init__(self, built: dict[str, Form] | None = None):
        self._lock = threading.Lock()
        self._futures: dict[str, concurrent.futures.Future] = {}
        for digest, form in (built or {}).items():
            self._futures[digest] = done = concurrent.futures.Future()
            done.set_result(form)

    def build(self, forest: hir.Forest, opts: CompileOptions, tile_ids: list | None = None,
              order_by: str | None = None) -> Form:
        """:func:`build_form`, sharing the form of a program already built or being built."""
        low = _lower(forest, opts, tile_ids=tile_ids)
        digest = lir_digest(low.lir, low.tile_ids)
        with self._lock:
            future = self._futures.get(digest)
            mine = future is None
            if mine:
                future = self._futures[digest] = concurrent.futures.Future()
        if not mine:
            return future.result()
        try:
            kernel = registry().target(low.options.target).compile(low.lir, kernel_options(low.options))
            form = Form(low.forest, kernel, low.options, low.lir, low.mir, digest=digest, tile_ids=low.tile_ids,
                        order_by=order_by)
        except BaseException as exc:
            future.set_exception(exc)
            raise
        future.set_result(form)
        return form


# Threads building a plan's forms together: Python lowers one form while LLVM (which releases
# the GIL, and runs one call at a time in a process: llvmlite's lock) optimises another.
def plan_threads() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def main_form(forest: hir.Forest, opts: CompileOptions, builds: Builds | None = None) -> Form:
    """The form answering the largest requests (the last band's): lowered for the compile's
    batch size, whatever the other bands turn out to be, so it can be built first."""
    return (builds or Builds()).build(forest, opts)


@in_compile_scope  # the bands' forms ask for the same estimates and statistics
def untuned_plan(forest: hir.Forest, opts: CompileOptions, threads: int | None = None
                 ) -> tuple[list[Form], list[Band]]:
    """The forms and bands of a compile that times nothing: each band's form lowered for its
    batch size (:func:`silvanforge.plan.bands.untuned_bands`), the representations' estimates choosing;
    bands whose form is another's program share it.  The main form (the last band's) is first
    (:func:`main_form`): a small-request form that cannot be built leaves its band to the next
    one.  ``threads``: how many build forms at once (None: :func:`plan_threads`); the forms
    and bands are those of one thread, in the same order."""
    threads = plan_threads() if threads is None else threads
    builds = Builds()
    if threads <= 1:
        return rest_of_plan(forest, opts, main_form(forest, opts, builds), builds, threads)
    # The main form on a thread of its own while this one weighs the bands.
    main = _Task(_scoped, current(), main_form, forest, opts, builds)
    return rest_of_plan(forest, opts, main, builds, threads)


class _Task:
    """``fn(*args)`` on a thread of its own (a daemon: a builder never holds up an exit);
    ``result()`` waits for it and returns its value or raises its error."""

    def __init__(self, fn, *args):
        self._fn, self._args, self._out = fn, args, None
        self._thread = threading.Thread(target=self._run, name="silvanforge-form", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            self._out = (True, self._fn(*self._args))
        except BaseException as exc:  # noqa: BLE001 - handed to result()
            self._out = (False, exc)

    def result(self):
        self._thread.join()
        ok, value = self._out
        if not ok:
            raise value
        return value


def _each(fn, items: list, threads: int) -> list:
    """``[fn(item) for item in items]``, on up to ``threads`` threads (the first error raised)."""
    if threads <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    todo = iter(range(len(items)))
    lock = threading.Lock()
    out: list = [None] * len(items)

    def work():
        while True:
            with lock:
                k = next(todo, None)
            if k is None:
                return
            try:
                out[k] = (True, fn(items[k]))
            except BaseException as exc:  # noqa: BLE001 - raised below, in order
                out[k] = (False, exc)

    workers = [_Task(work) for _ in range(min(threads, len(items)))]
    for w in workers:
        w.result()
    for ok, value in out:
        if not ok:
            raise value
    return [value for _, value in out]


def _scoped(cache, fn, *args):
    with compile_scope(cache):
        return fn(*args)


def rest_of_plan(forest: hir.Forest, opts: CompileOptions, main, builds: Builds, threads: int = 1,
                 step=contextlib.nullcontext) -> tuple[list[Form], list[Band]]:
    """The untuned plan's forms and bands around its ``main`` form (a Form, or a task whose
    ``result()`` gives it): the bands' estimates, then each other band's form (``threads`` at
    once); ``step()``: a context each part is done in (the background builder's guard,
    :mod:`silvanforge.plan.lateforms`)."""
    reg = registry()
    kind = reg.target_kind(opts.target)
    with step():
        # A GPU launch costs more than any form saves on a few rows: GPU targets keep one form.
        spec = _untuned_spec(forest, opts, kind) if kind == "cpu" else [(1, None, opts.batch_size)]
        jobs = [_band_job(forest, opts, batch) for (_lo, _hi, batch) in spec[:-1]]
    cache = current()

    def build(job):
        band_opts, order = job
        with step():
            try:
                return _scoped(cache, builds.build, forest, band_opts, order, None if order is None else "cover")
            except (UnsupportedModelError, PluginError) as exc:
                return exc  # answered by the next band's form

    results = _each(build, jobs, threads)
    forms = [main if isinstance(main, Form) else main.result()]
    indices = [0] * len(spec)
    for k, form in enumerate(results):
        if isinstance(form, Exception):
            indices[k] = -1
            continue
        if form not in forms:
            forms.append(form)
        indices[k] = forms.index(form)
    for k in range(len(spec) - 2, -1, -1):
        if indices[k] < 0:
            indices[k] = indices[k + 1]
    spec = _split_small_requests(spec, [forms[i] if i >= 0 else None for i in indices])
    bands = merge_bands([Band(lo, hi, index) for (lo, hi, _), index in zip(spec, indices)])
    return forms, bands


def _band_job(forest: hir.Forest, opts: CompileOptions, batch) -> tuple[CompileOptions, list | None]:
    """The options (and node order) a small-request band's form is lowered with."""
    reg = registry()
    kind = reg.target_kind(opts.target)
    # A one-row form walks its trees unpadded: padding saves leaf checks of blocks of
    # rows walked together, and a lone row would walk the padding.  (Unless a program
    # representation is cheapest for one row: it walks nothing, and padding is not asked.)
    unpadded = batch == 1 and opts.pad is None and opts.rep is None and \
        reg.rep_kind(choose_representation(forest, kind, batch, vectors=reg.vectors(opts.target, opts.cpu))) == "walk"
    # Its nodes in the order the training rows walked them, where the model file says
    # (a layout that cannot place nodes ignores it): a lone row's likely path then reads
    # consecutive bytes, as with a profile (xgb_100x8, one row: 2.13 -> 1.86 us).
    order = cover_order_ids(forest) if unpadded and opts.profile is None else None
    return dataclasses.replace(opts, batch_size=batch, pad=False if unpadded else opts.pad), order

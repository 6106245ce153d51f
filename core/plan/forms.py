"""A form: one compiled program of a model (its kernel, the options that decided it, and its
program lowered again only when asked for), and the one place forms are built: a compile, a
compiled model's other forms, the tuner's candidates and an artifact compiled again all go
through :func:`build_form`."""

from __future__ import annotations

import concurrent.futures
import inspect
import threading

import numpy as np

from silvanforge.ir import hir, lir, mir
from silvanforge.lowering.program import lir_digest, lower_program, program_text
from silvanforge.options import CompileOptions, kernel_options
from silvanforge.plan.bands import lean_rows
from silvanforge.plugins import registry
from silvanforge.runtime.kernel import check_kernel
from silvanforge.runtime.threads import default_threads


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
        # Up to how many rows: SMALL_ROWS, and calls of more on one thread up to lean_rows
        # (silvanforge.plan.bands).
        self.input_dtype = np.dtype(self.kernel.input_dtype)
        self.lean_rows = lean_rows(self.input_dtype.itemsize * forest.num_features)
        self.small = _small_calls(self.kernel, options, forest.transform, flat, self.lean_rows)
        # Whether the small calls split a row's trees over threads (they take ``threads``).
        self.small_splits = self.small is not None and splits_trees(self.kernel, options)

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

    def show(self, level: str) -> str:
        """This form's program at ``level``: hir, mir, lir or target."""
        return program_text(level, self.forest, self.tile_ids, self.options.tile_size, self.options,
                            lambda: self.mir_function, lambda: self.lir_module)

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


def splits_trees(kernel, options: CompileOptions) -> bool:
    """Whether the kernel splits its trees over threads (a phase looping over trees, run on
    more than one thread)."""
    threads = options.threads or default_threads()
    return threads > 1 and any(getattr(p, "parallel", None) == "loop" for p in getattr(kernel, "phases", ()))


def _small_calls(kernel, options: CompileOptions, transform, flat: bool, rows: int):
    """The kernel's lean path of requests of up to ``rows`` rows, or None.  A program whose
    trees split over threads (a loop phase: orderedReduce) gets it only from a kernel that takes
    ``threads`` (the CPU's hands half the trees to a native worker); another's would walk them
    all on the calling thread, so the runtime's general path runs it."""
    if splits_trees(kernel, options):
        threads = options.threads or default_threads()
        if "threads" not in inspect.signature(kernel.small_calls).parameters:
            return None
        return kernel.small_calls(rows, transform, flat, threads=threads)
    return kernel.small_calls(rows, transform, flat)


def build_form(forest: hir.Forest, opts: CompileOptions, tile_ids: list | None = None,
               built: dict[str, Form] | None = None, order_by: str | None = None) -> Form:
    """``forest`` lowered under resolved ``opts`` (choices left open are made) and compiled;
    ``tile_ids``: a tiling or node order already made (``order_by``: "cover" where the model's
    covers made it); ``built``: forms already made, by program digest: one of the same program
    is returned instead of compiling it again (and a new one is added)."""
    low = lower_program(forest, opts, tile_ids=tile_ids)
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
              order_by: str | None = None, wait: bool = True):
        """:func:`build_form`, sharing the form of a program already built or being built
        (``wait=False``: the future of one being built on another thread, not waited for)."""
        low = lower_program(forest, opts, tile_ids=tile_ids)
        digest = lir_digest(low.lir, low.tile_ids)
        with self._lock:
            future = self._futures.get(digest)
            mine = future is None
            if mine:
                future = self._futures[digest] = concurrent.futures.Future()
        if not mine:
            return future.result() if wait else future
        try:
            kernel = registry().target(low.options.target).compile(low.lir, kernel_options(low.options))
            form = Form(low.forest, kernel, low.options, low.lir, low.mir, digest=digest, tile_ids=low.tile_ids,
                        order_by=order_by)
        except BaseException as exc:
            future.set_exception(exc)
            raise
        future.set_result(form)
        return form



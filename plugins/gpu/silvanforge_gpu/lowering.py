"""MIR -> LIR for GPU targets (the SilvanForge paper draft, sections 'Tahoe Schedules', 'Lowering to
GPU' and 'Caching Implementation'): one kernel per phase.

The cuda and amd targets lower through :func:`lower_gpu` (their ``lower``,
:class:`silvanforge_gpu.target.GpuTarget`).  It is the core's walk generator (:class:`silvanforge.lowering.walkgen.WalkGenerator`) with a
placement of its own, :class:`GpuCodegen`: the walks, split decisions and reductions are the
core's, and where the generator lowers a loop, a cache, a fold, reads an input value or indexes a
partial-sum slot, this module's placement decides what runs on which GPU thread.

Every thread of a launch runs the whole kernel body.  A loop mapped by ``gpuDimension`` is not a
loop there: its index is ``start + (block or thread index) * step`` and threads whose index is
past the loop's end are *inactive* below it.  Loops the schedule left unmapped run in full in
every thread, so each thread covers its own slice of the iteration space; a kernel whose
schedule maps nothing runs its top-level loop over rows one row per thread.

Barriers need every thread of a block, so inactivity is handled two ways:

* below a loop with nothing that synchronises inside, the body is wrapped in ``if (active)``;
* where a barrier lies below (rows or trees cached in shared memory, a fold of tree-parallel
  partial sums), the loop is *predicated*: every thread runs every statement that
  synchronises, and only the walks, reductions and stores are guarded by the active flag.
  Sequential loops there run the same trip count in every thread of a block.

Caching (section 8): ``cacheRows`` copies the rows of one iteration into shared memory with
the block's threads cooperating (coalesced), and walks below read features from there;
``cacheTrees`` copies the element ranges the representation names (its ``cache_trees`` hook)
and loads of those buffers inside the range read the copy.  Either falls back to global memory
(recorded in ``Module.info["gpu_fallbacks"]``) when the copy does not fit in shared memory or
its range differs between the threads of a block.

Reductions (section 6.1.2): a tree loop mapped to block threads writes privatised slices
(global scratch, or shared memory with ``sharedReduce``); after a barrier the slices are
folded with the (row, output) pairs spread over the threads that walked the trees.  A tree loop
mapped to grid blocks cannot meet its siblings at a barrier: its fold becomes its own kernel.
``atomicReduce`` updates the margins atomically.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np

from silvanforge.errors import ScheduleError
from silvanforge.ir import hir, lir, mir
from silvanforge.ir.lir import Assign, Barrier, Bin, Builder, Cast, Cmp, For, GpuIndex, If, Select, Store, Var
from silvanforge.lowering.walksetup import WalkSetup, setup_walks, walk_module
from silvanforge.lowering.walkgen import WalkGenerator

# Static shared memory every CUDA GPU since Fermi gives one block (and OpenCL GPUs at least
# 32 KiB; AMD's give 64 KiB).  Caches and shared reductions that need more fall back.
SHARED_MEMORY_BYTES = 48 * 1024
MAX_THREADS_PER_BLOCK = 1024
# Threads per block for a top-level loop over rows that the schedule did not map.
AUTO_BLOCK = 128
_DIM_AXES = ("x", "y", "z")


def _names(e) -> set:
    """Index names in a MIR index expression."""
    if isinstance(e, tuple):
        return _names(e[1]) | _names(e[2])
    return {e} if isinstance(e, str) else set()


def _lir_vars(e) -> set:
    """Names of the LIR variables an expression reads."""
    if isinstance(e, Var):
        return {e.name}
    out = set()
    for f in dataclasses.fields(e) if dataclasses.is_dataclass(e) else ():
        v = getattr(e, f.name)
        if isinstance(v, tuple):
            for x in v:
                if dataclasses.is_dataclass(x):
                    out |= _lir_vars(x)
        elif dataclasses.is_dataclass(v):
            out |= _lir_vars(v)
    return out


def _mapped(op) -> list:
    """GPU-mapped loops at or below ``op``."""
    return [x for x in mir.walk([op]) if isinstance(x, mir.Loop) and x.gpu]


def _extent(loop: mir.Loop):
    """Iterations of a mapped loop: a number, or ``("rows", step, 1)`` when only a call knows."""
    if loop.max_trip is not None:
        return int(loop.max_trip)
    if loop.dimension == "batch":
        return ("rows", loop.step, 1)
    raise ScheduleError(f"gpuDimension({loop.index}, {loop.gpu}): its trip count is unknown when compiling")


# ----------------------------------------------------------------------------- MIR rewrites
def _hoist_grid_folds(fn: mir.MirFunction) -> list:
    """Top-level operations, with the folds of tree loops spread over grid blocks moved to
    kernels of their own (blocks cannot wait for each other inside one launch)."""
    out = []
    def visit(ops: list, hoisted: list) -> list:
        """``ops`` without the folds to hoist, which are appended to ``hoisted``."""
        kept, prev = [], None
        for op in ops:
            if isinstance(op, mir.Loop):
                op.body = visit(op.body, hoisted)
            if isinstance(op, mir.ReduceDimension) and isinstance(prev, mir.Loop) \
                    and any(x.gpu.startswith("grid") for x in _mapped(prev)):
                if op.inplace:
                    raise ScheduleError(
                        f"parallel tree loops nested inside {prev.index}, which is spread over GPU "
                        "blocks: their partial sums cannot be folded inside one kernel; map the "
                        "inner tree loop to block threads or use atomicReduce")
                row = f"fold{len(out) + len(hoisted)}"
                hoisted.append(mir.Loop(row, "batch", "row_begin", "row_end", 1, [
                    dataclasses.replace(op, rows=(row, ("+", row, 1)))], parallel=True))
            else:
                kept.append(op)
            prev = op
        return kept

    for top in copy.deepcopy(fn.body):  # the MIR function itself stays as printed
        hoisted: list = []
        if isinstance(top, mir.Loop):
            top.body = visit(top.body, hoisted)
        out.append(top)
        out.extend(hoisted)
    return out


def _check_coverage(top, dims: dict) -> None:
    """Every walk must lie under loops mapped to every dimension the kernel uses: otherwise the
    threads of a dimension it is not under would all repeat it (and add its leaf twice)."""

    def visit(op, path: list):
        if isinstance(op, mir.Loop):
            for other in path:
                if other.gpu and other.gpu == op.gpu:
                    raise ScheduleError(f"gpuDimension: {op.index} and {other.index}, one inside the "
                                        f"other, are both mapped to {op.gpu}")
            for x in op.body:
                visit(x, path + [op])
        elif isinstance(op, mir.WalkDecisionTree):
            mine = {p.gpu for p in path if p.gpu}
            missing = sorted(set(dims) - mine)
            if missing:
                loops = ", ".join(p.index for p in path) or "no loop"
                raise ScheduleError(
                    f"gpuDimension: the walk under {loops} is not under a loop mapped to "
                    f"{', '.join(missing)}, so every thread along it would repeat the walk; map a "
                    "loop around it to that dimension")

    visit(top, [])


# ----------------------------------------------------------------------------- lowering
def lower_gpu(forest: hir.Forest, fn: mir.MirFunction, rep: str, tile_size: int = 1, hook=None,
              options=None) -> lir.Module:
    """The GPU lowering of MIR function ``fn`` with walk representation ``rep``: one kernel per
    phase (see the module docstring).  Rows are read where they are (no split rows: those are a
    layout the core's CPU lowering writes per thread); ``hook``: the plugin manager's hook relay
    (None: the process registry's); ``options``: the compile's
    :class:`silvanforge.options.CompileOptions` (node widths; None: defaults)."""
    setup = setup_walks(forest, fn, rep, hook, tile_size, options=options)
    gen = GpuCodegen(setup)
    return walk_module(setup, gen.functions(fn), gen.info)


class GpuCodegen:
    """The placement of the core's walk generator on GPU threads: loops mapped to grid and block
    dimensions, shared memory, barriers and folds across threads (the generator calls its
    ``lower``, ``lower_body``, ``row_value``, ``slot_index`` and ``fold_rows``; see
    :class:`silvanforge.lowering.walkgen.WalkGenerator`)."""

    def __init__(self, setup: WalkSetup):
        if setup.layout.tiles is not None:
            raise ScheduleError("tiled walks (tile_size > 1) are a CPU vectorisation; GPU targets walk "
                                "node by node (tiling does not pay on SIMT GPUs)")
        # The C dialects have no vector types: GPU threads walk one row each.
        self.gen = gen = WalkGenerator(setup, placement=self, vector_walks=False)
        self.forest, self.reps, self.b, self.thr_t = gen.forest, gen.reps, gen.b, gen.thr_t
        self.K, self.private, self.index, self.c, self.expr = gen.K, gen.private, gen.index, gen.c, gen.expr
        self.info = gen.info
        self.info["gpu_fallbacks"] = []
        # Every load the representation methods build goes through the builder: inside a cacheTrees
        # scope a load of a cached buffer must read the shared copy, whoever built it.
        b = self.b
        plain_load = b.load
        b.load = lambda buffer, index, lanes=1: self._redirect(plain_load(buffer, index, lanes))
        self._plain_load = plain_load
        self.tree_cache: dict = {}

    def functions(self, fn: mir.MirFunction) -> list:
        """One kernel per top-level operation (margins initialised, the loop nest, folds across
        blocks, margins finalised), skipping kernels that do nothing (a sum needs no finalising)."""
        functions = []
        self._tree_dims = {x.gpu for x in mir.walk(fn.body)
                           if isinstance(x, mir.Loop) and x.gpu and x.dimension == "tree"}
        for top in _hoist_grid_folds(fn):
            kernel = self.kernel(f"predict_{len(functions)}", top)
            if _writes(kernel.body):
                functions.append(kernel)
        return functions

    # -------------------------------------------------------------- per kernel
    def kernel(self, name: str, top) -> lir.Function:
        b = self.b
        b.begin_function()
        loops = _mapped(top)
        self.auto = None
        dims: dict = {}
        for loop in loops:
            dims.setdefault(loop.gpu, []).append(_extent(loop))
        if not dims and isinstance(top, mir.Loop) and top.dimension == "batch":
            self.auto = top  # rows never share margins: one row per thread is always legal
        _check_coverage(top, dims)
        block = [1, 1, 1]
        grid: list = [1, 1, 1]
        for dim, extents in dims.items():
            kind, axis = dim.split(".")
            if kind == "block":
                if any(isinstance(e, tuple) for e in extents):
                    raise ScheduleError(f"gpuDimension(..., {dim}): a block dimension needs a trip count "
                                        "known when compiling (tile the loop first)")
                block[_DIM_AXES.index(axis)] = max(extents)
            else:
                rows = [e for e in extents if isinstance(e, tuple)]
                if rows and len(rows) != len(extents):
                    raise ScheduleError(f"gpuDimension(..., {dim}) is given loops of different sizes")
                grid[_DIM_AXES.index(axis)] = min(rows, key=lambda e: e[1]) if rows else max(extents)
        if self.auto is not None:
            block[0] = AUTO_BLOCK
            grid[0] = -(-self.auto.max_trip // AUTO_BLOCK) if self.auto.max_trip \
                else ("rows", self.auto.step, AUTO_BLOCK)
        if math.prod(block) > MAX_THREADS_PER_BLOCK:
            raise ScheduleError(f"a GPU block of {' x '.join(map(str, block))} threads is more than "
                                f"{MAX_THREADS_PER_BLOCK}; map fewer iterations to block dimensions")
        self.block = tuple(block)
        self.guard = None  # the active flag of this thread (None: every thread is active here)
        self.variant: set = set()  # LIR variables that differ between threads of one block
        self.no_barriers = False
        self.row_cache = None  # (shared buffer, first cached row) inside a cacheRows scope
        self.tree_cache: dict = {}  # buffer -> [(shared buffer, lo, hi)] inside a cacheTrees scope
        self.shared_bytes = 0
        self.loop_steps: dict = {}  # MIR loop index -> step (what one iteration caches)
        self._plan_shared_reductions(top)
        prologue = self._fill_shared_partials()
        self.lower(top)
        body = prologue + b.block
        return lir.Function(name, body, dict(b.locals), parallel="gpu", row_parallel=False,
                            launch=lir.Launch(tuple(grid), tuple(block)))

    # -------------------------------------------------------------- thread helpers
    def _thread_id(self) -> lir.Expr:
        """The thread's linear index inside its block."""
        bx, by, _ = self.block
        tid = GpuIndex("block.x")
        if by > 1 or self.block[2] > 1:
            tid = Bin("+", tid, Bin("*", GpuIndex("block.y"), self.c(bx, "i64")))
        if self.block[2] > 1:
            tid = Bin("+", tid, Bin("*", GpuIndex("block.z"), self.c(bx * by, "i64")))
        return tid

    def _is_variant(self, e) -> bool:
        return bool(_lir_vars(e) & self.variant)

    def _guarded(self, stmts: list) -> None:
        if self.guard is None:
            self.b.block.extend(stmts)
        elif stmts:
            self.b.emit(If(self.guard, stmts))

    def _has_barrier(self, op) -> bool:
        if isinstance(op, (mir.CacheRows, mir.CacheTrees)):
            return not self.no_barriers
        if isinstance(op, mir.ReduceDimension):
            return op.source in self.synced
        if isinstance(op, mir.Loop):
            return any(self._has_barrier(x) for x in op.body)
        return False

    # -------------------------------------------------------------- operations
    def lower(self, op):
        if isinstance(op, mir.Loop):
            return self._gpu_loop(op)
        if isinstance(op, (mir.CacheRows, mir.CacheTrees)):
            return self._gpu_cache(op)
        if isinstance(op, mir.ReduceDimension):
            return self._reduce_dimension(op)
        self.b.push()
        self.gen.lower(op)
        self._guarded(self.b.pop())

    def lower_body(self, ops) -> list:
        saved = self.row_cache, dict(self.tree_cache)
        out = self.gen.lower_body(ops)
        self.row_cache, self.tree_cache = saved
        return out

    def _gpu_loop(self, op: mir.Loop):
        b, c = self.b, self.c
        self.loop_steps[op.index] = op.step
        start, stop = self.expr(op.start), self.expr(op.stop)
        barrier = self._has_barrier(op)
        saved_guard = self.guard
        if op.gpu or op is self.auto:
            if op is self.auto:
                position = Bin("+", Bin("*", GpuIndex("grid.x"), c(AUTO_BLOCK, "i64")), GpuIndex("block.x"))
            else:
                position = GpuIndex(op.gpu)
            var = b.local(op.index, "i64", Bin("+", start, Bin("*", position, c(op.step, "i64"))))
            self.index[op.index] = var
            if op is self.auto or op.gpu.startswith("block") or self._is_variant(start):
                self.variant.add(var.name)
            active = Cmp("<", var, stop)
            if self.guard is not None:
                active = Bin("&", self.guard, active)
            if barrier:
                self.guard = b.local("active", "i1", active)
                for stmt in self.lower_body(op.body):
                    b.emit(stmt)
            else:
                self.guard = None
                b.emit(If(active, self.lower_body(op.body)))
            self.guard = saved_guard
            return
        if op.interleave or op.unroll or op.specialize or not barrier:
            # Nothing below synchronises: inactive threads skip the whole loop.
            self.guard, self.no_barriers = None, True
            b.push()
            self.gen.loop(op)
            stmts = b.pop()
            self.guard, self.no_barriers = saved_guard, False
            return self._guarded(stmts)
        var = Var(op.index, "i64")
        self.index[op.index] = var
        if not (self._is_variant(start) or self._is_variant(stop)):
            b.emit(For(var, start, stop, op.step, self.lower_body(op.body)))
            return
        # Bounds differ between threads of a block, and a barrier lies below: every thread runs
        # the loop's largest trip count, and iterations past its own end are inactive.
        if op.max_trip is None:
            raise ScheduleError(f"loop {op.index} holds a GPU barrier (cache or shared reduction) but its "
                                "trip count differs between threads and is unknown when compiling")
        self.variant.add(var.name)
        b.push()
        active = Cmp("<", var, stop)
        self.guard = b.local("active", "i1", active if saved_guard is None else Bin("&", saved_guard, active))
        b.block.extend(self.lower_body(op.body))
        body = b.pop()
        self.guard = saved_guard
        b.emit(For(var, start, Bin("+", start, c(op.max_trip * op.step, "i64")), op.step, body))

    # -------------------------------------------------------------- caching
    def _fallback(self, what: str):
        self.info["gpu_fallbacks"].append(what)

    def _gpu_cache(self, op):
        what = "rows" if isinstance(op, mir.CacheRows) else "trees"
        start, stop = self.expr(op.start), self.expr(op.stop)
        # A cache op heads the body of the loop it caches (its start is that loop's index): one
        # iteration's working set is at most the loop's step of rows or trees.
        step = self.loop_steps.get(op.start)
        if self.no_barriers or step is None or self._is_variant(start) or self._is_variant(stop):
            return self._fallback(f"cache {what} at {mir.fmt(op.start)}: the range differs between the "
                                  "threads of a block (or lies in an unrolled or interleaved loop)")
        b = self.b
        first = b.local("cfirst", "i64", start)
        last = b.local("clast", "i64", stop)
        if what == "rows":
            self._cache_rows_shared(first, last, step)
        else:
            self._cache_trees_shared(first, last, step)

    def _shared_buffer(self, hint: str, type_: str, size: int) -> str | None:
        nbytes = size * lir.LIR_TO_NUMPY[type_].itemsize
        if self.shared_bytes + nbytes > SHARED_MEMORY_BYTES:
            return None
        self.shared_bytes += nbytes
        name = f"{hint}_sh{len(self.b.buffers)}"
        self.b.buffers[name] = lir.Buffer(name, type_, "shared", size=int(size))
        return name

    def _copy(self, size_expr, assign) -> list:
        """A loop in which the block's threads share the copy of ``size_expr`` elements:
        thread t copies elements t, t + threads, ... (coalesced)."""
        i = Var(f"cp{len(self.b.locals)}_{len(self.b.block)}", "i64")
        self.b.push()
        assign(i)
        body = self.b.pop()
        return [For(i, self._thread_id(), size_expr, math.prod(self.block), body)]

    def _cache_rows_shared(self, first: Var, last: Var, step: int):
        F = self.forest.num_features
        name = self._shared_buffer("rows", self.thr_t, step * F)
        if name is None:
            return self._fallback(f"cache rows: {step} rows x {F} features do not fit in "
                                  f"{SHARED_MEMORY_BYTES // 1024} KiB of shared memory")
        b, c = self.b, self.c

        def assign(i):
            r = b.local("crow", "i64", Bin("/", i, c(F, "i64")))
            f = Bin("-", i, Bin("*", r, c(F, "i64")))
            row = Bin("+", first, r)
            value = self._plain_load("rows", Bin("+", Bin("*", row, lir.ROW_STRIDE), Bin("*", f, lir.COL_STRIDE)))
            b.emit(If(Cmp("<", row, last), [Store(name, i, value)]))

        count = Bin("*", Bin("-", last, first), c(F, "i64"))
        b.emit(Barrier())  # earlier readers of the buffer are done
        b.block.extend(self._copy(count, assign))
        b.emit(Barrier())
        self.row_cache = (name, first)

    def row_value(self, row, feature, row_at=None) -> lir.Expr:
        if self.row_cache is None:
            return self.gen.row_value(row, feature, row_at)
        name, first = self.row_cache
        F = self.c(self.forest.num_features, "i64")
        return self._plain_load(name, Bin("+", Bin("*", Bin("-", row, first), F), Cast(feature, "i64")))

    def _cache_trees_shared(self, first: Var, last: Var, step: int):
        b = self.b
        regions = self.reps.cache_trees(b=b, first_tree=Cast(first, "i32"),
                                        num_trees=Cast(Bin("-", last, first), "i32"))
        sizes = self._region_sizes(step, len(regions))
        copies, cached = [], {}
        b.emit(Barrier())
        for (buffer, lo, hi), size in zip(regions, sizes):
            name = self._shared_buffer(buffer, b.buffers[buffer].type, max(1, size))
            if name is None:
                self._fallback(f"cache trees: {buffer} ({size} elements) does not fit in shared memory")
                continue
            lo_v = b.local("clo", "i64", Builder.cast(lo, "i64"))
            hi_v = b.local("chi", "i64", Builder.cast(hi, "i64"))

            def assign(i, name=name, buffer=buffer, lo_v=lo_v):
                b.emit(Store(name, i, self._plain_load(buffer, Bin("+", lo_v, i))))

            copies.extend(self._copy(Bin("-", hi_v, lo_v), assign))
            cached.setdefault(buffer, []).append((name, lo_v, hi_v))
        b.block.extend(copies)
        b.emit(Barrier())
        for buffer, regions_of in cached.items():
            self.tree_cache[buffer] = self.tree_cache.get(buffer, []) + regions_of

    def _region_sizes(self, window: int, count: int) -> list[int]:
        """The most elements each region holds for any ``window`` consecutive trees: the hook's
        ranges evaluated on the model's own buffers for every first tree."""
        sizes = [0] * count
        probe = Builder(dict(self.b.buffers))
        n = self.forest.num_trees
        for first in range(max(1, n)):
            num = min(window, n - first)
            regions = self.reps.cache_trees(b=probe, first_tree=self.c(first, "i32"), num_trees=self.c(num, "i32"))
            for j, (_, lo, hi) in enumerate(regions):
                sizes[j] = max(sizes[j], int(_evaluate(hi, self.b.buffers)) - int(_evaluate(lo, self.b.buffers)))
        return sizes

    def _redirect(self, load: lir.Load) -> lir.Expr:
        """A load from a buffer with cached ranges reads the shared copy when inside one."""
        regions = self.tree_cache.get(load.buffer)
        if not regions:
            return load
        idx = Builder.cast(load.index, "i64")
        out: lir.Expr = load
        for name, lo, hi in reversed(regions):
            inside = Bin("&", Cmp(">=", idx, lo), Cmp("<", idx, hi))
            out = Select(inside, lir.Load(name, Bin("-", idx, lo), load.type), out)
        return out

    # -------------------------------------------------------------- reductions
    def _plan_shared_reductions(self, top):
        """Which privatised buffers are folded across block threads (``synced``: a barrier
        first) and which of those live in shared memory (``sharedReduce``, when they fit): a
        block's slices, indexed by row relative to the enclosing loop over rows spread over
        grid blocks."""
        self.synced: set = set()
        self.shared_private: dict = {}
        wanted: dict = {}

        def visit(ops, path):
            prev = None
            for op in ops:
                if isinstance(op, mir.Loop):
                    visit(op.body, path + [op])
                elif isinstance(op, mir.ReduceDimension) and isinstance(prev, mir.Loop):
                    if any(x.gpu.startswith("block") for x in _mapped(prev)):
                        self.synced.add(op.source)
                        grid_rows = [p for p in path if p.gpu and p.gpu.startswith("grid") and p.dimension == "batch"]
                        if op.shared:
                            wanted.setdefault(op.source, []).append(grid_rows[-1] if grid_rows else None)
                    prev = op
                    continue
                prev = op

        visit([top], [])
        for name, bases in wanted.items():
            base = bases[0]
            extents = self.private[name]
            if base is None or any(x is not base for x in bases):
                self._fallback(f"sharedReduce on {name}: no loop over rows mapped to grid blocks around it")
                continue
            size = int(np.prod(extents)) * base.step * self.K
            buf = self.b.buffers[name]
            nbytes = size * lir.LIR_TO_NUMPY[buf.type].itemsize
            if self.shared_bytes + nbytes > SHARED_MEMORY_BYTES:
                self._fallback(f"sharedReduce on {name}: {nbytes} bytes do not fit in shared memory")
                continue
            self.shared_bytes += nbytes
            self.b.buffers[name] = dataclasses.replace(buf, kind="shared", size=size, per_row=0)
            self.shared_private[name] = (base.index, base.step)

    def _fill_shared_partials(self) -> list:
        """Shared partial sums start at the aggregation's identity (folds reset them after)."""
        b = self.b
        b.push()
        for name in self.shared_private:
            buf = b.buffers[name]
            fill = self.c(buf.fill, buf.type)
            b.block.extend(self._copy(self.c(buf.size, "i64"), lambda i, name=name, fill=fill: b.emit(Store(name, i, fill))))
        if self.shared_private:
            b.emit(Barrier())
        return b.pop()

    def slot_index(self, target: str, slots: tuple, row, out) -> lir.Expr:
        if target not in getattr(self, "shared_private", {}):
            return self.gen.slot_index(target, slots, row, out)
        base, rows = self.shared_private[target]
        flat = self.c(0, "i64")
        for extent, s in zip(self.private[target], slots):
            flat = Bin("+", Bin("*", flat, self.c(extent, "i64")), s)
        local_row = Bin("-", row, self.index[base])
        return Bin("+", Bin("*", Bin("+", Bin("*", flat, self.c(rows, "i64")), local_row),
                            self.c(self.K, "i64")), Builder.cast(out, "i64"))

    def _reduce_dimension(self, op: mir.ReduceDimension):
        if op.source not in self.synced:
            self.b.push()
            self.gen.reduce_dimension(op)
            return self._guarded(self.b.pop())
        self.b.emit(Barrier())  # every tree thread has written its slice
        self.gen.reduce_dimension(op)
        self.b.emit(Barrier())  # the slices are reset before they are written again

    def fold_rows(self, op: mir.ReduceDimension, r: Var, k: Var, body: list) -> None:
        if op.source not in self.synced:
            return self.gen.fold_rows(op, r, k, body)
        # The (row, output) pairs of the fold are spread over every thread of the block that
        # shares this thread's rows (the tree threads that just wrote the slices).
        b, c = self.b, self.c
        rows0 = b.local("frow", "i64", self.expr(op.rows[0]))
        count = Bin("*", Bin("-", self.expr(op.rows[1]), rows0), c(self.K, "i64"))
        tree_tid, tree_threads = self._tree_threads()
        it = Var(f"fit{len(b.locals)}", "i64")
        b.locals[r.name] = "i64"
        b.locals[k.name] = "i64"
        stmts = [Assign(r, Bin("+", rows0, Bin("/", it, c(self.K, "i64")))),
                 Assign(k, Bin("%", it, c(self.K, "i64"))), *body]
        self._guarded([For(it, tree_tid, count, tree_threads, stmts)])

    def _tree_threads(self):
        """This thread's index among the block threads mapped to tree loops, and their count."""
        tid, total = self.c(0, "i64"), 1
        for axis, n in zip(_DIM_AXES, self.block):
            if n > 1 and f"block.{axis}" in self._tree_dims:
                tid = Bin("+", tid, Bin("*", GpuIndex(f"block.{axis}"), self.c(total, "i64")))
                total *= n
        return tid, total


def _writes(stmts: list) -> bool:
    for s in stmts:
        if isinstance(s, (Store, lir.AtomicAdd)):
            return True
        if isinstance(s, (For, lir.While)) and _writes(s.body):
            return True
        if isinstance(s, If) and (_writes(s.then) or _writes(s.orelse)):
            return True
    return False


def _evaluate(e, buffers: dict):
    """The value of a constant LIR expression (loads read model buffers)."""
    try:
        return lir.constant_value(e, buffers)
    except (KeyError, TypeError, IndexError):
        raise ScheduleError(f"cacheTrees: the representation's cached range {e} is not a constant "
                            "expression") from None

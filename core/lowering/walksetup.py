"""MIR -> LIR, the shared part: the lowering's choices and a walk's setup.

The walk generator that emits the walks, the split decision and the reduction, and the core's
CPU lowering that drives it, are :mod:`silvanforge.lowering.walkgen`.  The core owns what every
representation shares: the encoding of a split (threshold in the comparison dtype, a flags
byte, category bitsets) in :class:`ForestLayout` (:mod:`silvanforge.lowering.layout`), the decision rule
of the HIR, and the aggregation of margins; the forest's facts the choices here read are
:mod:`silvanforge.lowering.walkcost`.  Where a value lives in memory (which buffer, which
index, how a child is found) is asked of the representation plugin's class, the contract of
:mod:`silvanforge.rep`, so one representation serves every target.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.errors import PluginError, UnsupportedModelError
from silvanforge.lowering.chains import chain_lanes
from silvanforge.lowering.walkcost import (LEAF_LOOPS_STEP_RATIO, SPLIT_ROWS_ANY_WIDTH, SPLIT_ROWS_WALK_SHARE, depth_stats,
                           set_columns_fit, set_columns_pay, split_rows_pay, split_thresholds_exact, walks_exit_early)
from silvanforge.ir import hir, lir, mir
from silvanforge.ir.hir import Op
from silvanforge.ir.lir import Builder
from silvanforge.lowering.layout import (FLAG_CATEGORICAL, FLAG_DEFAULT_LEFT, FLAG_OP_SHIFT, FLAG_ZERO_MISSING, INDEX_DTYPES,
                     ForestLayout, RepBuffers, TreeLayout, build_layout, smallest_int, split_row_categories, split_row_sets,
                     split_row_categories_fit)
from silvanforge.options import (CompileOptions, leaf_self_loops, node_widths, per_tree_walk_depth, set_columns,
                                 split_rows, vector_walks)
from silvanforge.plugins import registry, rep_types
from silvanforge.reduction.legalize import identity
from silvanforge.rep import Representation, instance


# Whether interleaved walks run as vectors where the options leave it open
# (``CompileOptions.vector_walks`` None; ``SILVANFORGE_VECTOR_WALK`` and
# :func:`silvanforge.options.vector_walks` set it for a compile).
VECTOR_WALK_DEFAULT = False
# Interleaved walks of 2 .. this many lanes may run as vectors (PackBits packs up to 31 lanes).
MAX_VECTOR_LANES = 16


# The scratch buffer of split rows (:meth:`WalkGenerator.fill_split_rows`).
SPLIT_ROWS = "split_rows"
# Each feature's largest category a split names, plus one (the split rows' category columns).
SPLIT_TOPS = "split_tops"
TREE_DEPTH = "tree_depth"  # model buffer: each tree's depth, for walks through self-looping leaves


def want_leaf_self_loops(forest: hir.Forest, forced: bool | None = None) -> bool:
    """Whether walks should go through self-looping leaves instead of checking for a leaf
    before each step (given that split rows are read and leaves are inline): always, unless
    ``forced`` off (``CompileOptions.leaf_self_loops``); :func:`walks_exit_early` decides how
    far they go."""
    if forced is not None:
        return forced
    return bool(forest.trees)


def can_split_rows(layout: ForestLayout, per_chunk: bool = False, forced: bool | None = None) -> bool:
    """Whether walks read split rows (:meth:`WalkGenerator.fill_split_rows`): the default-left bit
    rides in the feature field and :func:`split_rows_pay` (or ``forced`` on or off:
    ``CompileOptions.split_rows``).  ``per_chunk``: each chunk's rows are split as the chunk
    starts (:func:`rows_split_per_chunk`), which pays for rows of any width: the walks then read
    rows the split just put in the cache."""
    if forced is False or not layout.packed_default_left:
        return False
    # Thresholds as compiled: a float64 threshold may round to an infinite float32 one.
    if not split_thresholds_exact(_split_thresholds_of(layout), layout.ops):
        return False
    if layout.has_categorical and not split_row_categories_fit(layout):
        return False
    return split_rows_pay(layout.forest, check_width=forced is not True and not per_chunk)


def split_thresholds(layout: ForestLayout) -> None:
    """Rewrite the +inf thresholds of ``x <= +inf`` splits to the dtype's largest finite value
    for walks reading split rows (:func:`split_thresholds_exact`)."""
    if not (_split_thresholds_of(layout) == np.inf).any():
        return
    for t in layout.trees:
        internal = t.feature >= 0
        thr = t.threshold
        thr[internal & (thr == np.inf)] = np.finfo(thr.dtype).max


def _split_thresholds_of(layout: ForestLayout) -> np.ndarray:
    """Every tree's split thresholds as laid out, in one array (a check of them all is then one
    NumPy step, not one a tree)."""
    if not layout.trees:
        return np.zeros(0, layout.threshold_dtype)
    threshold = np.concatenate([t.threshold for t in layout.trees])
    return threshold[np.concatenate([t.feature for t in layout.trees]) >= 0]


def rows_split_per_chunk(fn: mir.MirFunction) -> bool:
    """Whether every walk lies in an iteration of a batch loop that caches its rows (``cache``
    on a row chunk): the rows are then split chunk by chunk, each as its chunk starts, instead
    of all at once before the walks."""
    def covered(ops, cached: bool) -> bool:
        for op in ops:
            if isinstance(op, mir.WalkDecisionTree) and not cached:
                return False
            if isinstance(op, mir.Loop):
                inner = cached or (op.dimension == "batch"
                                   and any(isinstance(o, mir.CacheRows) for o in op.body))
                if not covered(op.body, inner):
                    return False
        return True

    walks = any(isinstance(op, mir.WalkDecisionTree) for op in mir.walk(fn.body))
    return walks and covered(fn.body, False)


def thread_info(steps_per_row: int) -> dict:
    """What a CPU module tells the runtime about splitting rows over threads: its walk steps a
    row (a property of the program; how many rows a thread should get for them is the
    runtime's choice, :func:`silvanforge.runtime.threads.rows_per_thread`, and a target with a faster
    hand-off of its own sets a lower bar from it)."""
    return {"walk_steps_per_row": max(1, int(steps_per_row))}


def float32_thresholds(threshold: np.ndarray, op: int = Op.LE) -> np.ndarray:
    """Float64 thresholds as float32 thresholds that decide every float32 input the same way.

    For ``x <= t`` (LightGBM) each ``t`` is rounded *down*: ``t32`` = the largest float32 that is
    ``<= t`` (``-inf`` below the float32 range).  Proof, for every float32 ``x``: if
    ``x <= t32`` then ``x <= t32 <= t``; conversely if ``x <= t`` then ``x`` is a float32 that is
    ``<= t``, and ``t32`` is the largest of those, so ``x <= t32``.  A NaN ``x`` fails both.
    Widening a float32 ``x`` to float64 is exact, so LightGBM's double comparison of the same
    input agrees too.  For ``x < t`` the threshold is rounded *up* (the smallest float32
    ``>= t``), by the mirror argument.  ``tests/core/lowering/test_node_widths.py`` checks both
    with hypothesis.

    Only float32 *inputs* may use these thresholds: a float64 input between ``t32`` and ``t``
    would be decided differently, so float64 callers need float64 thresholds (DESIGN.md:
    LightGBM widens inputs to float64).  Kernels therefore keep the library's threshold dtype
    (docs/design.md, "Widths and the CPU chooser").
    """
    t = np.asarray(threshold, dtype=np.float64)
    with np.errstate(over="ignore"):
        t32 = t.astype(np.float32)
    if op == Op.LT:
        wrong = t32.astype(np.float64) < t
        t32[wrong] = np.nextafter(t32[wrong], np.float32(np.inf))
    elif op == Op.LE:
        wrong = t32.astype(np.float64) > t
        t32[wrong] = np.nextafter(t32[wrong], np.float32(-np.inf))
    else:
        raise ValueError("only <= and < thresholds can be narrowed exactly")
    return t32


class _Rep:
    """One walk representation for one compile: the instance of its class (the contract of
    :mod:`silvanforge.rep`), whose methods the walk generator calls by name."""

    def __init__(self, hook, rep: str, rep_options=None):
        cls = rep_types(hook).get(rep)
        if cls is None or not issubclass(cls, Representation):
            raise PluginError(f"representation {rep!r} is not a walk representation (no "
                              "silvanforge.rep.Representation class of that name is installed)")
        self.hook, self.rep, self.instance = hook, rep, instance(cls, rep_options)

    def __getattr__(self, op):
        if op == "buffers":
            return self._buffers
        return getattr(self.instance, op)

    def _buffers(self, forest: hir.Forest, layout: ForestLayout) -> RepBuffers:
        if layout.tiles is not None and not type(self.instance).tiles:
            tiling = sorted(name for name, cls in rep_types(self.hook).items() if getattr(cls, "tiles", False))
            raise UnsupportedModelError(
                f"the {self.rep} representation does not lay out tiles (tile size {layout.tile_size}); "
                + (f"use one that does ({', '.join(f'--rep {name}' for name in tiling)})" if tiling
                   else "no installed representation does: use tile size 1"))
        out = self.instance.buffers(forest, layout)
        if not isinstance(out, RepBuffers):
            raise PluginError(f"representation {self.rep!r}: buffers() returned {type(out).__name__}, "
                              "not a RepBuffers")
        return out


@dataclasses.dataclass
class WalkSetup:
    """What every MIR -> LIR lowering of walks starts from (:func:`setup_walks`): the forest's
    node layout, one instance of the representation for this compile (``reps``: its methods,
    the contract of :mod:`silvanforge.rep`, build the loads), the builder holding the module's
    buffers (rows, margins, the representation's, the privatised scratch of ``fn``), the
    threshold and accumulation LIR types, the extents of each privatised buffer's slices, and
    the compile's options (:class:`silvanforge.options.CompileOptions`: the lowering knobs the
    generator reads)."""

    forest: hir.Forest
    fn: mir.MirFunction
    rep: str
    layout: ForestLayout
    reps: object
    rep_info: dict  # RepBuffers.info: facts the representation records in Module.info
    b: Builder
    thr_t: str
    acc_t: str
    private: dict  # privatised buffer -> extents of its slice dimensions
    # Whether walks read split rows (WalkGenerator.fill_split_rows): "before the walks",
    # "per chunk" (as each cached row chunk starts) or None (rows as given).
    split_rows: str | None = None
    options: CompileOptions = dataclasses.field(default_factory=CompileOptions)


def setup_walks(forest: hir.Forest, fn: mir.MirFunction, rep: str, hook=None, tile_size: int = 1,
                split_rows: bool = False, options: CompileOptions | None = None) -> WalkSetup:
    """Lay ``forest`` out for walk representation ``rep`` (``hook``: the plugin manager's hook
    relay; None: the process registry's) and declare the module's buffers.  ``split_rows``: let
    walks read split rows where they pay (:func:`can_split_rows`), a layout of the input the
    core's lowering fills on each thread's rows; a lowering that reads rows where they are
    (a GPU backend's kernels) leaves it off.  ``options``: the compile's options,
    whose lowering knobs decide widths, split rows and self-looping leaves (None: defaults)."""
    if hook is None:
        hook = registry().hook
    options = options or CompileOptions()
    layout = build_layout(forest, tile_size, options)
    # Leaves as fixed points need split rows (column -1 of a split row is NaN: a leaf's compare
    # fails, its step goes right) and leaves inline (the child field is free for the loop).
    # Decided here, once, for the layout and the code generator.
    per_chunk = split_rows and rows_split_per_chunk(fn)
    split = split_rows and can_split_rows(layout, per_chunk, options.split_rows)
    if split:
        split_thresholds(layout)
        if layout.has_categorical and set_columns_fit(forest) and (
                options.set_columns if options.set_columns is not None else set_columns_pay(forest, options.batch_size)):
            split_row_sets(layout)
        else:
            split_row_categories(layout)
    layout.leaf_self_loops = (split and layout.tiles is None and layout.inline_leaves
                              and want_leaf_self_loops(forest, options.leaf_self_loops))
    reps = _Rep(hook, rep, options.rep_options)
    layout.chain_lanes = chain_lanes(fn, layout, type(reps.instance))
    rep_buffers: RepBuffers = reps.buffers(forest=forest, layout=layout)
    thr_t = lir.lir_type(layout.threshold_dtype)
    acc_t = lir.lir_type(layout.leaf_dtype)
    buffers = {
        "rows": lir.Buffer("rows", thr_t, "input"),
        "margins": lir.Buffer("margins", acc_t, "output"),
    }
    b = Builder(buffers)
    for name, data in rep_buffers.buffers.items():
        b.buffer(name, data)
    for buf in fn.buffers:
        slices = int(np.prod(buf.extents))
        b.buffers[buf.name] = lir.Buffer(buf.name, acc_t, "scratch", per_row=slices * forest.num_outputs,
                                         fill=identity(forest.aggregation, buf.ordered))
    private = {p.name: p.extents for p in fn.buffers}
    return WalkSetup(forest, fn, rep, layout, reps, rep_buffers.info, b, thr_t, acc_t, private,
                     split_rows="per chunk" if split and per_chunk else "before the walks" if split else None,
                     options=options)


def walk_module(setup: WalkSetup, functions: list, info: dict) -> lir.Module:
    """The verified LIR module of a lowering's ``functions`` over ``setup``'s buffers;
    ``info`` (the generator's facts) joins the representation's in ``Module.info``."""
    forest, layout, fn = setup.forest, setup.layout, setup.fn
    tiled = f" tile_size={layout.tile_size} tiles={layout.tiles.num_tiles}" if layout.tiles else ""
    module = lir.Module(
        functions=functions,
        buffers=setup.b.buffers, num_features=forest.num_features, num_outputs=forest.num_outputs,
        input_type=setup.thr_t, output_type=setup.acc_t,
        info={"summary": f"rep={setup.rep} trees={forest.num_trees} outputs={forest.num_outputs}{tiled}",
              "rep": setup.rep, **setup.rep_info, **info,
              # GPU-only constructs a CPU target must refuse: (index, gpu dimension or reduction)
              "gpu": [(op.index, op.gpu or f"{op.reduce}Reduce") for op in mir.walk(fn.body)
                      if isinstance(op, mir.Loop) and (op.gpu or op.reduce == "shared")]},
    )
    lir.verify(module)
    return module


__all__ = ["ForestLayout", "TreeLayout", "RepBuffers", "build_layout", "INDEX_DTYPES",
           # the forest's facts (silvanforge.lowering.walkcost), where schedule choosers import them
           "depth_stats", "walks_exit_early", "split_rows_pay", "LEAF_LOOPS_STEP_RATIO",
           "SPLIT_ROWS_ANY_WIDTH", "SPLIT_ROWS_WALK_SHARE",
           "WalkSetup", "setup_walks", "walk_module", "CompileOptions",
           # the options' context managers (silvanforge.options), where tests and benchmarks import them
           "node_widths", "per_tree_walk_depth", "vector_walks", "split_rows", "set_columns", "leaf_self_loops",
           "smallest_int", "float32_thresholds",
           "FLAG_DEFAULT_LEFT", "FLAG_ZERO_MISSING", "FLAG_CATEGORICAL", "FLAG_OP_SHIFT"]


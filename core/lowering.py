"""MIR -> LIR: the walk, the split decision and the reduction, with storage left to a representation.

The core owns what every representation shares: the encoding of a split (threshold in the
comparison dtype, a flags byte, category bitsets) in :class:`ForestLayout`, the decision rule of
the HIR, and the aggregation of margins.  Where a value lives in memory (which buffer, which
index, how a child is found) is asked of the representation plugin's class, the contract of
:mod:`silvanforge.rep`, so one representation serves every target.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .errors import ScheduleError, UnsupportedModelError
from .options import CompileOptions, leaf_self_loops, node_widths, per_tree_walk_depth, split_rows, vector_walks
from .reduction import identity
from .tiling import TiledForest, lane_order_lut, tile_forest
from .ir import hir, lir, mir
from .ir.hir import ZERO_THRESHOLD, Aggregation, CategoryRule, Op
from .ir.lir import Assign, Bin, Builder, Cast, Cmp, For, If, IsNan, Select, Store, Var, While

# Split flags byte (one per node): what the decision needs beyond threshold and feature.
FLAG_DEFAULT_LEFT = 1  # a missing value goes left
FLAG_ZERO_MISSING = 2  # |x| <= 1e-35f is missing too (LightGBM missing type Zero)
FLAG_CATEGORICAL = 4  # the threshold slot holds the offset of the node's category bitset
FLAG_OP_SHIFT = 3  # bits 3-4: the hir.Op of a numerical split


@dataclasses.dataclass
class TreeLayout:
    """Node arrays of one tree in the encoding every representation stores."""

    threshold: np.ndarray  # comparison dtype; category-bitset offset for categorical nodes
    feature: np.ndarray  # int32, -1 at leaves
    flags: np.ndarray  # uint8
    left: np.ndarray  # int32, -1 at leaves
    right: np.ndarray  # int32
    leaf_slot: np.ndarray  # int32 index of the leaf's first value in leaf_values, -1 inside
    depth: int


@dataclasses.dataclass
class ForestLayout:
    """The forest in the shared node encoding, plus facts that let code generation specialise."""

    forest: hir.Forest
    trees: list[TreeLayout]
    leaf_values: np.ndarray  # accumulation dtype; each leaf holds len(tree.outputs) values
    cat_bits: np.ndarray  # int32 words: at each offset, the word count and then the words
    threshold_dtype: np.dtype
    leaf_dtype: np.dtype
    ops: frozenset[int]
    has_categorical: bool
    has_zero_missing: bool
    # The uniform tiling of every tree (:mod:`silvanforge.tiling`) when compiling with a tile
    # size above 1; None for node-at-a-time walks.  Representations that lay out tiles read it.
    tiles: TiledForest | None = None
    # Widths (issue 4): representations store feature indices in ``feature_dtype`` (the smallest
    # of int8/int16/int32 holding -1 .. num_features - 1) and their own index fields (child
    # offsets, leaf slots) in :meth:`index_dtype`; narrower node arrays shrink the working set.
    feature_dtype: np.dtype = np.dtype(np.int32)
    min_index_dtype: np.dtype = np.dtype(np.int8)
    # Whether representations may keep a leaf's value in its threshold slot (one load less at
    # the end of every walk): every tree feeds one output and leaves have the threshold dtype.
    inline_leaves: bool = False
    # Whether the default-left bit rides in the feature field: ``(feature << 1) | default_left``
    # (leaves stay -1).  Chosen when that bit is all a split's flags say (one comparison op, no
    # categorical or zero-as-missing splits): the walk then loads no flags byte, one load less per
    # step.  Representations store ``TreeLayout.feature`` as it is; the core decodes it.
    packed_default_left: bool = False
    # Set by the core when walks read split rows (a leaf's feature, -1, reads a NaN column there):
    # representations may then make a leaf a fixed point of a step (see silvanforge.rep).
    leaf_self_loops: bool = False

    @property
    def tile_size(self) -> int:
        return 1 if self.tiles is None else self.tiles.tile_size

    def index_dtype(self, lo: int, hi: int) -> np.dtype:
        """The narrowest integer dtype (int8, int16, int32; never below ``min_index_dtype``)
        holding every value in ``[lo, hi]``."""
        return smallest_int(lo, hi, self.min_index_dtype)


INDEX_DTYPES = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32))


def smallest_int(lo: int, hi: int, at_least=np.int8) -> np.dtype:
    """The narrowest of int8, int16, int32 (at least ``at_least``) holding ``[lo, hi]``."""
    floor = np.dtype(at_least)
    for dt in INDEX_DTYPES:
        if dt.itemsize >= floor.itemsize and np.iinfo(dt).min <= lo and hi <= np.iinfo(dt).max:
            return dt
    raise UnsupportedModelError(f"node indices {lo}..{hi} do not fit in int32")


# Whether interleaved walks run as vectors where the options leave it open
# (``CompileOptions.vector_walks`` None; ``SILVANFORGE_VECTOR_WALK`` and
# :func:`silvanforge.options.vector_walks` set it for a compile).
VECTOR_WALK_DEFAULT = False
# Interleaved walks of 2 .. this many lanes may run as vectors (PackBits packs up to 31 lanes).
MAX_VECTOR_LANES = 16


def build_layout(forest: hir.Forest, tile_size: int = 1, options: CompileOptions | None = None) -> ForestLayout:
    """``forest`` in the shared node encoding; ``options``: the node widths, inline leaves and
    packed default-left bit it forces (:class:`silvanforge.options.CompileOptions`; None: the
    narrowest exact)."""
    options = options or CompileOptions()
    thr_dt = np.dtype(forest.threshold_dtype)
    leaf_dt = np.dtype(forest.accumulate_dtype)
    cat_words: list[np.ndarray] = []
    cat_size = 0
    leaf_chunks: list[np.ndarray] = []
    leaf_size = 0
    trees, ops = [], set()
    for tree in forest.trees:
        internal = tree.left >= 0
        flags = (tree.default_left.astype(np.uint8) * FLAG_DEFAULT_LEFT
                 | tree.zero_missing.astype(np.uint8) * FLAG_ZERO_MISSING
                 | (tree.op.astype(np.uint8) << FLAG_OP_SHIFT))
        # A threshold converted to the comparison dtype must round the same way the library
        # does: both libraries store thresholds in the dtype they compare in, so this is exact.
        thresholds = tree.threshold.astype(thr_dt)
        for node, cats in sorted(tree.categories.items()):
            nwords = int(cats.max()) // 32 + 1 if len(cats) else 0
            # Offsets live in the threshold slot (exact in float32 below 2**24): check the size
            # before allocating, so a huge category id is refused, not laid out.
            if cat_size + nwords + 1 > 2**24:
                raise UnsupportedModelError(
                    f"categorical splits naming categories up to {int(cats.max())} (feature "
                    f"{int(tree.feature[node])}): their bitsets would pass 2**24 words (64 MiB)")
            words = np.zeros(nwords + 1, dtype=np.uint32)
            words[0] = nwords
            for c in cats.tolist():
                words[1 + c // 32] |= np.uint32(1) << np.uint32(c % 32)
            flags[node] |= FLAG_CATEGORICAL
            thresholds[node] = cat_size
            cat_words.append(words)
            cat_size += len(words)
        ops.update(int(o) for o in np.unique(tree.op[internal & ~tree.categorical_mask()]))
        leaves = np.flatnonzero(~internal)
        n_out = len(tree.outputs)
        slot = np.full(tree.num_nodes, -1, dtype=np.int32)
        slot[leaves] = leaf_size + np.arange(len(leaves), dtype=np.int32) * n_out
        leaf_chunks.append(tree.leaf_value[leaves].astype(leaf_dt).reshape(-1))
        leaf_size += len(leaves) * n_out
        trees.append(TreeLayout(
            threshold=np.where(internal, thresholds, 0).astype(thr_dt),
            feature=np.where(internal, tree.feature, -1).astype(np.int32),
            flags=np.where(internal, flags, 0).astype(np.uint8),
            left=tree.left.astype(np.int32), right=tree.right.astype(np.int32),
            leaf_slot=slot, depth=tree.depth(),
        ))
    # A trailing zero word keeps the first-word load of an empty set (offset + 1) in bounds.
    cat_bits = np.concatenate(cat_words + [np.zeros(1, np.uint32)]).view(np.int32)
    leaf_values = np.concatenate(leaf_chunks) if leaf_chunks else np.zeros(1, leaf_dt)
    has_categorical = forest.has_categorical()
    has_zero_missing = any(bool(t.zero_missing[t.left >= 0].any()) for t in forest.trees)
    packed = (not has_categorical and not has_zero_missing and len(ops) <= 1
              and options.packed_default_left is not False)
    if packed:
        for t in trees:
            internal = t.feature >= 0
            t.feature = np.where(internal, (t.feature << 1) | (t.flags & FLAG_DEFAULT_LEFT), -1).astype(np.int32)
    max_feature = max(forest.num_features - 1, 0)
    inline = (all(len(t.outputs) == 1 for t in forest.trees) and leaf_dt == thr_dt
              and options.inline_leaves is not False)
    return ForestLayout(
        forest=forest, trees=trees, leaf_values=leaf_values, cat_bits=cat_bits,
        threshold_dtype=thr_dt, leaf_dtype=leaf_dt, ops=frozenset(ops) or frozenset({Op.LT}),
        has_categorical=has_categorical, has_zero_missing=has_zero_missing,
        tiles=tile_forest(forest, tile_size) if tile_size > 1 else None,
        feature_dtype=smallest_int(-1, 2 * max_feature + 1 if packed else max_feature,
                                   options.feature_width or np.int8),
        min_index_dtype=np.dtype(options.index_width or np.int8),
        inline_leaves=inline, packed_default_left=packed,
    )


# The scratch buffer of split rows (:meth:`WalkGenerator.fill_split_rows`).
SPLIT_ROWS = "split_rows"
TREE_DEPTH = "tree_depth"  # model buffer: each tree's depth, for walks through self-looping leaves
# Walks through self-looping leaves take each tree's deepest path (a counted loop over the
# tree's depth, the same for every lane, so its branch predicts; or peeled where every tree is
# as deep): that pays while a tree's depth is not far past its leaves' mean depth: 1.5-1.8x on
# 1000 trees of depth 10 (docs/benchmarks.md), not on leaf-wise forests of depths 9 to 23 (walks
# to the forest's depth: 0.66-0.75x).  Walks that check for leaves pay a mispredicted branch
# about every other step instead.
LEAF_LOOPS_STEP_RATIO = 1.5  # sum of tree depths / sum of the trees' mean leaf depths, at most


def want_leaf_self_loops(forest: hir.Forest, forced: bool | None = None) -> bool:
    """Whether walks should go through self-looping leaves instead of checking for a leaf
    before each step (given that split rows are read and leaves are inline): always, unless
    ``forced`` off (``CompileOptions.leaf_self_loops``); :func:`walks_exit_early` decides how
    far they go."""
    if forced is not None:
        return forced
    return bool(forest.trees)


def walks_exit_early(forest: hir.Forest, stats=None) -> tuple[bool, int]:
    """Whether self-looping walks stop once every walk interleaved with them is at a leaf
    (trees deep beside their leaves' mean depth: leaf-wise LightGBM), instead of running each
    tree to its depth; and the steps every walk takes (the shallowest leaf of any tree).

    Early exit: one leaf check a walk a step, the steps themselves unconditional (a leaf stays
    put), so the only branch is the loop's, bounded by the deepest tree's depth.  On 300
    leaf-wise trees of 255 leaves (depth 24.9 on average, a row's path about 6.4, the longest of
    8 rows' paths about 11.5) it ran 1.03x the walks that branch on a leaf check per walk and
    per step (1.2x without the bound, which a lane past its chunk needs: it may read a row not
    its own and step off a leaf), and it keeps the self-looping leaves' layout for all forests.
    ``stats``: :func:`depth_stats` of the forest, if computed already."""
    if not forest.trees:
        return False, 0
    depth, mean_leaf, shallowest = stats or depth_stats(forest)
    return bool(depth.sum() > LEAF_LOOPS_STEP_RATIO * mean_leaf.sum()), shallowest


def depth_stats(forest: hir.Forest) -> tuple[np.ndarray, np.ndarray, int]:
    """Each tree's depth and its leaves' mean depth, and the shallowest leaf of any tree: every
    tree at once, level by level (a per-tree walk took half a second on 1000 deep trees)."""
    if not forest.trees:
        return np.zeros(0, np.int64), np.zeros(0), 0
    offset, left, _, levels = hir.level_order(forest)
    node_depth = np.zeros(len(left), np.int64)
    for depth, level in enumerate(levels):
        node_depth[level] = depth
    sizes = np.diff(offset)
    tree_of = np.repeat(np.arange(len(sizes)), sizes)
    is_leaf = left < 0
    depth = np.maximum.reduceat(node_depth, offset[:-1])
    leaves = np.bincount(tree_of[is_leaf], minlength=len(sizes))
    mean_leaf = np.bincount(tree_of[is_leaf], weights=node_depth[is_leaf], minlength=len(sizes)) / leaves
    return depth, mean_leaf, int(node_depth[is_leaf].min())


# Split rows pay while writing one (2F values) costs little beside walking it: wide rows (2000
# features under 300 trees of depth 8) spend more writing, and more cache, than the walks save.
SPLIT_ROWS_ANY_WIDTH = 128  # columns of a split row that always pay
SPLIT_ROWS_WALK_SHARE = 0.25  # otherwise at most this many columns per walk step of a row


def can_split_rows(layout: ForestLayout, per_chunk: bool = False, forced: bool | None = None) -> bool:
    """Whether walks read split rows (:meth:`WalkGenerator.fill_split_rows`): the default-left bit
    rides in the feature field and :func:`split_rows_pay` (or ``forced`` on or off:
    ``CompileOptions.split_rows``).  ``per_chunk``: each chunk's rows are split as the chunk
    starts (:func:`rows_split_per_chunk`), which pays for rows of any width: the walks then read
    rows the split just put in the cache."""
    if forced is False or not layout.packed_default_left:
        return False
    # Thresholds as compiled: a float64 threshold may round to an infinite float32 one.
    if not all(_split_thresholds_exact(t.threshold[t.feature >= 0], layout.ops) for t in layout.trees):
        return False
    return split_rows_pay(layout.forest, check_width=forced is not True and not per_chunk)


def _split_thresholds_exact(threshold: np.ndarray, ops) -> bool:
    """Whether split rows decide these thresholds (of one dtype) exactly.  Split rows hold
    +-inf inputs as +-MAX (the dtype's largest finite value) and missing values as +-inf, so a
    threshold must not be +-MAX, nor -inf; +inf only under ``<=`` (LightGBM's NaN-or-not split
    ``x <= +inf``), compiled as ``x <= MAX``: every number (+inf too, as MAX) goes left, a
    missing value (+inf, or -inf where missing values go left) where its default sends it.  A
    NaN threshold (no input goes left at it) keeps the NaN test too."""
    top = np.finfo(threshold.dtype).max
    if np.isnan(threshold).any() or (np.abs(threshold) == top).any() or (threshold == -np.inf).any():
        return False
    return not (threshold == np.inf).any() or set(int(o) for o in ops) == {int(Op.LE)}


def split_thresholds(layout: ForestLayout) -> None:
    """Rewrite the +inf thresholds of ``x <= +inf`` splits to the dtype's largest finite value
    for walks reading split rows (:func:`_split_thresholds_exact`)."""
    for t in layout.trees:
        internal = t.feature >= 0
        thr = t.threshold
        thr[internal & (thr == np.inf)] = np.finfo(thr.dtype).max


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


def split_rows_pay(forest: hir.Forest, check_width: bool = True) -> bool:
    """Whether split rows are exact and pay for this forest: every split is numerical and
    compares with ``<`` or with ``<=`` (one of them), none treats zero as missing, every threshold
    is finite (+-inf would meet an infinite threshold on the wrong side), and the split row is
    narrow beside the walk steps of a row (``check_width``).  Also asked by schedule choosers."""
    if forest.has_categorical():
        return False
    ops = set()
    thr_dtype = np.dtype(forest.threshold_dtype)
    for t in forest.trees:
        internal = t.left >= 0
        if t.zero_missing[internal].any():
            return False
        ops.update(int(o) for o in np.unique(t.op[internal]))
        if len(ops) > 1:
            return False
        with np.errstate(over="ignore"):
            if not _split_thresholds_exact(t.threshold[internal].astype(thr_dtype), ops):
                return False
    if not ops <= {int(Op.LT), int(Op.LE)}:
        return False
    if not check_width:
        return True
    steps = int(depth_stats(forest)[0].sum())
    return 2 * forest.num_features <= max(SPLIT_ROWS_ANY_WIDTH, SPLIT_ROWS_WALK_SHARE * steps)


# Walk steps a CPU thread should get before a prediction is split over Python's thread pool:
# below about this much work (~0.2 ms) handing rows to a second thread costs more than it saves (a 100-tree
# depth-6 model at 512 rows ran 1.15x faster on two threads at best, slower on average).
THREAD_STEPS = 500_000


def thread_info(steps_per_row: int) -> dict:
    """What a CPU module tells the runtime about splitting rows over threads: its walk steps a
    row, and the rows a thread should get for :data:`THREAD_STEPS` of them (a target with a
    faster hand-off of its own sets a lower bar from ``walk_steps_per_row``)."""
    steps = max(1, int(steps_per_row))
    return {"walk_steps_per_row": steps, "min_rows_per_thread": -(-THREAD_STEPS // steps)}


def float32_thresholds(threshold: np.ndarray, op: int = Op.LE) -> np.ndarray:
    """Float64 thresholds as float32 thresholds that decide every float32 input the same way.

    For ``x <= t`` (LightGBM) each ``t`` is rounded *down*: ``t32`` = the largest float32 that is
    ``<= t`` (``-inf`` below the float32 range).  Proof, for every float32 ``x``: if
    ``x <= t32`` then ``x <= t32 <= t``; conversely if ``x <= t`` then ``x`` is a float32 that is
    ``<= t``, and ``t32`` is the largest of those, so ``x <= t32``.  A NaN ``x`` fails both.
    Widening a float32 ``x`` to float64 is exact, so LightGBM's double comparison of the same
    input agrees too.  For ``x < t`` the threshold is rounded *up* (the smallest float32
    ``>= t``), by the mirror argument.  ``tests/test_widths.py`` checks both with hypothesis.

    Only float32 *inputs* may use these thresholds: a float64 input between ``t32`` and ``t``
    would be decided differently, so float64 callers need float64 thresholds (DESIGN.md:
    LightGBM widens inputs to float64).  Kernels therefore keep the library's threshold dtype
    (docs/design-choices.md, "Widths").
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


@dataclasses.dataclass
class RepBuffers:
    """What a representation lays out: named model buffers (NumPy arrays) and facts about them."""

    buffers: dict[str, np.ndarray]
    info: dict = dataclasses.field(default_factory=dict)


class _Rep:
    """One walk representation for one compile: the instance of its class (the contract of
    :mod:`silvanforge.rep`), whose methods the walk generator calls by name."""

    def __init__(self, hook, rep: str):
        from .plugins import rep_types

        from .rep import Representation

        cls = rep_types(hook).get(rep)
        if cls is None or not issubclass(cls, Representation):
            from .errors import PluginError

            raise PluginError(f"representation {rep!r} is not a walk representation (no "
                              "silvanforge.rep.Representation class of that name is installed)")
        self.hook, self.rep, self.instance = hook, rep, cls()

    def __getattr__(self, op):
        if op == "buffers":
            return self._buffers
        return getattr(self.instance, op)

    def _buffers(self, forest: hir.Forest, layout: ForestLayout) -> RepBuffers:
        from .errors import UnsupportedModelError

        if layout.tiles is not None and not type(self.instance).tiles:
            from .plugins import rep_types

            tiling = sorted(name for name, cls in rep_types(self.hook).items() if getattr(cls, "tiles", False))
            raise UnsupportedModelError(
                f"the {self.rep} representation does not lay out tiles (tile size {layout.tile_size}); "
                + (f"use one that does ({', '.join(f'--rep {name}' for name in tiling)})" if tiling
                   else "no installed representation does: use tile size 1"))
        out = self.instance.buffers(forest, layout)
        if not isinstance(out, RepBuffers):
            from .errors import PluginError

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
    (GPU kernels: :mod:`silvanforge_gpu`) leaves it off.  ``options``: the compile's options,
    whose lowering knobs decide widths, split rows and self-looping leaves (None: defaults)."""
    if hook is None:
        from .plugins import registry

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
    layout.leaf_self_loops = (split and layout.tiles is None and layout.inline_leaves
                              and want_leaf_self_loops(forest, options.leaf_self_loops))
    reps = _Rep(hook, rep)
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
    fill = identity(forest.aggregation)
    for buf in fn.buffers:
        slices = int(np.prod(buf.extents))
        b.buffers[buf.name] = lir.Buffer(buf.name, acc_t, "scratch", per_row=slices * forest.num_outputs,
                                         fill=fill)
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


def lower_to_lir(forest: hir.Forest, fn: mir.MirFunction, rep: str, hook,
                 tile_size: int = 1, options: CompileOptions | None = None) -> lir.Module:
    """The core's lowering of a MIR function to an LIR module using representation ``rep``: one
    function per phase, each run by threads over row ranges (or tree ranges); with ``tile_size``
    above 1 every walk step evaluates a tile of that many nodes (:mod:`silvanforge.tiling`);
    ``options``: the compile's lowering knobs (None: defaults).
    A target may bring its own (the ``silvanforge_target_lower`` hook), built from the same
    pieces: :func:`setup_walks`, a :class:`WalkGenerator` and :func:`walk_module`."""
    setup = setup_walks(forest, fn, rep, hook, tile_size, split_rows=True, options=options)
    layout, b = setup.layout, setup.b
    gen = WalkGenerator(setup)
    gen.leaf_loops = layout.leaf_self_loops and bool(setup.rep_info.get("leaf_self_loops"))
    if gen.leaf_loops:
        gen.exit_early, gen.shallowest_leaf = walks_exit_early(forest)
    depths = [t.depth for t in layout.trees]
    if (gen.leaf_loops and not gen.exit_early and setup.options.per_tree_walk_depth is not False and depths
            and min(depths) < max(depths)):
        # Walks of trees of several depths loop to each tree's own (see _walk_lanes).
        b.buffer(TREE_DEPTH, np.asarray(depths, np.int32))
    functions = _cpu_functions(gen, fn)
    gen.info.update(thread_info(sum(t.depth for t in layout.trees)))
    return walk_module(setup, functions, gen.info)


def _cpu_functions(gen: "WalkGenerator", fn: mir.MirFunction) -> list:
    """One LIR function per phase (:func:`_phases`), each run split over CPU threads."""
    b = gen.b
    row_parallel = any(op.parallel for op in mir.walk(fn.body)
                       if isinstance(op, mir.Loop) and op.dimension == "batch")
    functions = []
    phases = _phases(fn.body)
    fill = gen.split_rows and not gen.split_per_chunk
    if fill and phases[0][0] != "rows":
        # A phase of its own before a tree-parallel loop (whose calls read every row).
        b.begin_function()
        gen.fill_split_rows()
        functions.append(lir.Function("split_rows", b.block, dict(b.locals), parallel="rows",
                                      row_parallel=True, trip=0))
        fill = False
    for i, (kind, ops) in enumerate(phases):
        b.begin_function()
        if fill:  # each call of the first row phase splits its own rows first (one dispatch)
            gen.fill_split_rows()
            fill = False
        trip = 0
        for op in ops:
            if kind == "loop":
                trip = op.max_trip
                gen.loop_phase = op
            gen.lower(op)
            gen.loop_phase = None
        functions.append(lir.Function(f"predict_{i}", b.block, dict(b.locals), parallel=kind,
                                      row_parallel=row_parallel, trip=trip))
    return functions


def _phases(body: list):
    """Split the top level into phases: a parallel loop over trees runs alone, split over threads
    by iterations; everything else runs split by rows (every row range derives from the rows a
    call is given, and rows never share results)."""
    phases: list[tuple[str, list]] = []
    for op in body:
        if isinstance(op, mir.Loop) and op.dimension == "tree" and op.parallel and op.max_trip:
            phases.append(("loop", [op]))
        elif phases and phases[-1][0] == "rows":
            phases[-1][1].append(op)
        else:
            phases.append(("rows", [op]))
    return phases


class WalkGenerator:
    """MIR operations -> LIR statements: loops, walks (the representation's methods give the
    loads), the split decision and the reduction, emitted into ``setup.b``'s current block.

    The core's lowering (:func:`lower_to_lir`) runs it as is; a target's own lowering (the
    ``silvanforge_target_lower`` hook) uses it by composition, passing a *placement*: an object
    with the five methods below, which the generator calls wherever it lowers a MIR operation,
    a loop body, reads an input value, indexes a partial-sum slot or folds slices over rows.
    Without one the generator is its own placement: sequential code, as one CPU thread runs it
    over a row range.  A placement's method may emit something around, or instead of, what the
    generator's method of the same name emits (``silvanforge_gpu.lowering.GpuCodegen`` maps
    loops to GPU threads and caches rows in shared memory this way):

    - ``lower(op)``: lower one MIR operation (the generator's: :meth:`loop` for loops,
      :meth:`reduce_dimension` for folds, a prefetch for caches, walks and reductions);
    - ``lower_body(ops) -> list``: the statements of a loop's body (each op through ``lower``);
    - ``row_value(row, feature, row_at=None) -> Expr``: feature ``feature`` of row ``row``;
    - ``slot_index(target, slots, row, out) -> Expr``: the element of ``margins`` or of a
      privatised buffer a leaf value adds to;
    - ``fold_rows(op, r, k, body)``: run a fold's ``body`` for each of its rows and outputs.

    Also public: ``forest``, ``layout``, ``reps`` (the representation's instance), ``b`` (the
    :class:`silvanforge.ir.lir.Builder`), ``thr_t`` and ``acc_t``, ``K`` (outputs), ``private``
    (privatised buffer -> slice extents), ``index`` (MIR loop index -> its LIR value), ``info``
    (facts for ``Module.info``), :meth:`c` and :meth:`expr`.  Other members are its own.
    ``vector_walks=False``: interleaved walks never run as SIMD vectors (targets without vector
    types); otherwise ``setup.options.vector_walks`` decides (None: :data:`VECTOR_WALK_DEFAULT`)."""

    def __init__(self, setup: WalkSetup, placement=None, vector_walks: bool = True):
        forest, layout, b = setup.forest, setup.layout, setup.b
        thr_t, acc_t, split_rows = setup.thr_t, setup.acc_t, setup.split_rows
        self.placement = self if placement is None else placement
        self.forest, self.layout, self.reps, self.b = forest, layout, setup.reps, b
        self.private = setup.private  # privatised buffer -> extents of its slice dimensions
        self.tiles = layout.tiles  # None: one node per step
        if self.tiles is None:
            self.max_depth = max((t.depth for t in layout.trees), default=0)
            self.min_depth = min((t.depth for t in layout.trees), default=0)
        else:  # depths count tile steps
            self.max_depth = self.tiles.depth()
            # Indexed [shape, bits] with tile node k's outcome in bit k (see _tile_step).
            b.buffer("tile_lut", lane_order_lut(self.tiles.tile_size).reshape(-1))
        self.loop_phase: mir.Loop | None = None
        self.thr_t, self.acc_t = thr_t, acc_t
        self.K = forest.num_outputs
        self.info: dict = {}  # facts for Module.info (what a placement fell back on, ...)
        self.index: dict[str, Var] = {}  # MIR loop index -> LIR variable
        self.values: dict[str, Var] = {}  # MIR value name -> LIR variable (the leaf node)
        # Whether interleaved walks may run as vectors (gathers).
        forced = setup.options.vector_walks
        self.vector_walks = vector_walks and (VECTOR_WALK_DEFAULT if forced is None else forced)
        # Whether walks read split rows (:meth:`fill_split_rows`), written "before the walks"
        # or "per chunk" (as each cached row chunk starts); None: rows as given.
        self.split_rows = split_rows is not None
        self.split_per_chunk = split_rows == "per chunk"
        # Whether a step from a leaf stays at the leaf (set by lower_to_lir from the layout),
        # and whether such walks stop when all interleaved walks are at leaves (walks_exit_early).
        self.leaf_loops = False
        self.exit_early, self.shallowest_leaf = False, 0
        if self.split_rows:
            b.buffers[SPLIT_ROWS] = lir.Buffer(SPLIT_ROWS, thr_t, "scratch",
                                               per_row=self._split_row_size(), fill=None)
            self.info["split_rows"] = split_rows
        self._outputs_plan()

    # -- how a tree's outputs map to margins
    def _outputs_plan(self):
        b, trees = self.b, self.forest.trees
        if all(len(t.outputs) == 1 for t in trees):
            self.single_output = True
            if self.K > 1:
                b.buffer("tree_output", np.array([t.outputs[0] for t in trees], dtype=np.int32))
        else:
            self.single_output = False
            begin = np.cumsum([0] + [len(t.outputs) for t in trees]).astype(np.int32)
            ids = np.concatenate([np.asarray(t.outputs, dtype=np.int32) for t in trees])
            b.buffer("tree_out_begin", begin)
            b.buffer("tree_out_ids", ids)
        b.buffer("base_score", np.asarray(self.forest.base_score, dtype=self.layout.leaf_dtype))
        if self.layout.has_categorical:
            b.buffer("cat_bits", self.layout.cat_bits)

    def c(self, v, t):
        return Builder.const(v, t)

    def margin_index(self, row: Var, out) -> lir.Expr:
        return Bin("+", Bin("*", row, self.c(self.K, "i64")), Builder.cast(out, "i64"))

    # -- index expressions
    def expr(self, e) -> lir.Expr:
        """A MIR index expression as LIR, folding constants (specialised loops bind constants)."""
        if isinstance(e, int):
            return self.c(e, "i64")
        if isinstance(e, str):
            return {"row_begin": lir.ROW_BEGIN, "row_end": lir.ROW_END}.get(e) or self.index[e]
        op, a, b = e
        return _fold(op, self.expr(a), self.expr(b))

    # -- MIR operations
    def lower(self, op):
        """Emit one MIR operation (a placement's ``lower`` may call this for what it leaves as is)."""
        b = self.b
        if isinstance(op, mir.Loop):
            self.loop(op)
        elif isinstance(op, mir.InitMargins):
            self._for_outputs(lambda k: Store("margins", self.margin_index(self.index[op.row], k),
                                              self._init_value(k)))
        elif isinstance(op, mir.FinalizeMargins):
            self._finalize(self.index[op.row])
        elif isinstance(op, mir.WalkDecisionTree):
            tree, row = self.expr(op.tree), self.expr(op.row)
            if op.expand:
                self.values[op.result] = self._walk_expanded(tree, row)
            else:
                self.values[op.result] = self._walk_lanes([(tree, row)], op.unroll_depth, op.peel_depth)[0]
        elif isinstance(op, mir.Reduce):
            self._reduce(self.expr(op.row), self.expr(op.tree), self.values[op.value],
                         op.target, tuple(self.expr(i) for i in op.private), op.atomic)
        elif isinstance(op, mir.ReduceDimension):
            self.reduce_dimension(op)
        elif isinstance(op, mir.CacheRows):
            self._cache_rows(self.expr(op.start), self.expr(op.stop))
        elif isinstance(op, mir.CacheTrees):
            self._cache_trees(self.expr(op.start), self.expr(op.stop))
        else:  # pragma: no cover - the MIR verifier rejects unknown operations first
            raise TypeError(op)
        del b

    def lower_body(self, ops) -> list:
        """The statements of ``ops`` (each through the placement's ``lower``), emitted nowhere."""
        self.b.push()
        for inner in ops:
            self.placement.lower(inner)
        return self.b.pop()

    def loop(self, op: mir.Loop):
        """A MIR loop as a sequential LIR loop (unrolled, interleaved or specialised as asked)."""
        start, stop = self.expr(op.start), self.expr(op.stop)
        if op is self.loop_phase:
            # This call runs iterations [iter_begin, iter_end) of the parallel loop.
            begin = Bin("+", start, Bin("*", lir.ITER_BEGIN, self.c(op.step, "i64")))
            stop = Bin("min", stop, Bin("+", start, Bin("*", lir.ITER_END, self.c(op.step, "i64"))))
            start = begin
        if op.interleave:
            return self._interleaved_loop(op, start, stop)
        if op.unroll or op.specialize:
            return self._unrolled_loop(op, start, stop)
        var = Var(op.index, "i64")
        self.index[op.index] = var
        body = self.placement.lower_body(op.body)
        self.b.emit(For(var, start, stop, op.step, body, parallel=op.parallel))

    def _unrolled_loop(self, op: mir.Loop, start, stop):
        """One copy of the body per iteration; a constant index where the range is constant, so a
        specialised tree loop walks each tree with code for that tree."""
        for k in range(op.max_trip):
            value = _fold("+", start, self.c(k * op.step, "i64"))
            if isinstance(value, lir.Const) and isinstance(stop, lir.Const):
                if value.value >= stop.value:
                    break
                self.index[op.index] = value
                for stmt in self.placement.lower_body(op.body):
                    self.b.emit(stmt)
                continue
            var = self.b.local(op.index, "i64", value)
            self.index[op.index] = var
            self.b.emit(If(Cmp("<", var, stop), self.placement.lower_body(op.body)))

    def _interleaved_loop(self, op: mir.Loop, start, stop):
        """``interleave`` walks of the innermost loop advance together, one step each in turn, so
        their independent loads overlap instead of waiting on each other."""
        b, lanes = self.b, op.interleave
        base = Var(op.index + "_base", "i64")
        walk = next(o for o in op.body if isinstance(o, mir.WalkDecisionTree))
        reduce = next(o for o in op.body if isinstance(o, mir.Reduce))
        b.push()
        pairs, actives, trees, slots = [], [], [], []
        for j in range(lanes):
            v = b.local(op.index, "i64", Bin("+", base, self.c(j * op.step, "i64")))
            active = b.local("active", "i1", Cmp("<", v, stop)) if j else None
            self.index[op.index] = v
            # Each lane's own partial-sum slot (tree-parallel reductions index it by the lane).
            slots.append(tuple(self.expr(i) for i in reduce.private))
            for other in op.body:
                if isinstance(other, (mir.CacheRows, mir.CacheTrees)):
                    self.placement.lower(other)
            tree, row = self.expr(walk.tree), self.expr(walk.row)
            trees.append(tree)
            if j:  # an inactive lane walks lane 0's (valid) tree and row, and is not reduced
                tree = Select(active, tree, pairs[0][0])
                if self.split_rows:
                    # Split rows have room past the batch's end (``pad_rows``): the lane walks
                    # what lies there, and lanes' rows stay ``base + j``, so one register
                    # addresses every lane's row (constant offsets of the row size).
                    pad = self.b.buffers[SPLIT_ROWS]
                    pad.pad_rows = max(pad.pad_rows, j * op.step + 1)
                else:
                    row = Select(active, row, pairs[0][1])
            pairs.append((b.local("lt", "i64", tree), b.local("lr", "i64", row)))
            actives.append(active)
        shared = all(t == trees[0] for t in trees)  # rows interleaved: every lane walks one tree
        if walk.expand:  # each lane's branches in turn (out-of-order cores overlap them)
            # The lanes' trees as compiled (constants); an idle lane past the last tree expands
            # lane 0's (its result is not reduced).
            n = self.forest.num_trees
            nodes = [self._walk_expanded(t if isinstance(t, lir.Const) and t.value < n else trees[0], r)
                     for t, (_, r) in zip(trees, pairs)]
        elif self._can_walk_vector(lanes):
            # One tree for every lane (rows interleaved): the tree stays a scalar.
            nodes = self._walk_vector(pairs, shared, walk.unroll_depth, walk.peel_depth)
        else:
            nodes = self._walk_lanes(pairs, walk.unroll_depth, walk.peel_depth, same_tree=shared)
        for (tree, row), node, active, lane_slots in zip(pairs, nodes, actives, slots):
            b.push()
            self._reduce(row, tree, node, reduce.target, lane_slots, reduce.atomic)
            stmts = b.pop()
            b.block.extend(stmts) if active is None else b.emit(If(active, stmts))
        b.emit(For(base, start, stop, op.step * lanes, b.pop()))

    def _cache_rows(self, start, stop):
        """CPU caching is prefetching: touch every cache line of the rows of one iteration; with
        rows split per chunk, splitting them (a sequential read the hardware prefetches)."""
        if self.split_per_chunk:
            return self.fill_split_rows(start, stop)
        b = self.b
        r, f = Var(f"cr{len(b.locals)}", "i64"), Var(f"cf{len(b.locals)}", "i64")
        per_line = max(1, 64 // np.dtype(self.layout.threshold_dtype).itemsize)
        if self.split_rows:
            buffer, columns, index = SPLIT_ROWS, 2 * self.forest.num_features, Bin("+", self._row_start(r), f)
        else:
            buffer, columns = "rows", self.forest.num_features
            index = Bin("+", Bin("*", r, lir.ROW_STRIDE), Bin("*", f, lir.COL_STRIDE))
        inner = For(f, self.c(0, "i64"), self.c(columns, "i64"), per_line, [lir.Prefetch(buffer, index)])
        b.emit(For(r, start, stop, 1, [inner]))

    def _cache_trees(self, start, stop):
        b = self.b
        regions = self.reps.cache_trees(b=b, first_tree=Cast(start, "i32"), num_trees=Cast(Bin("-", stop, start), "i32"))
        for buffer, lo, hi in regions:
            i = Var(f"ct{len(b.locals)}_{buffer}", "i64")
            per_line = max(1, 64 // np.dtype(lir.LIR_TO_NUMPY[b.buffers[buffer].type]).itemsize)
            b.emit(For(i, Builder.cast(lo, "i64"), Builder.cast(hi, "i64"), per_line, [lir.Prefetch(buffer, i)]))

    def _for_outputs(self, make_stmt):
        b = self.b
        k = Var(f"k{len(b.locals)}", "i64")
        b.push()
        b.emit(make_stmt(k))
        body = b.pop()
        b.emit(For(k, self.c(0, "i64"), self.c(self.K, "i64"), 1, body))

    def _init_value(self, k):
        agg = self.forest.aggregation
        if agg is Aggregation.SUM:
            return self.b.load("base_score", k)
        if agg is Aggregation.AVERAGE:
            return self.c(0, self.acc_t)
        return self.c(float("nan"), self.acc_t)

    def _finalize(self, row):
        agg, b = self.forest.aggregation, self.b
        if agg is Aggregation.SUM:
            return

        def stmt(k):
            idx = self.margin_index(row, k)
            acc = b.load("margins", idx)
            if agg is Aggregation.AVERAGE:
                val = Bin("/", acc, self.c(self.forest.average_divisor, self.acc_t))
            else:
                val = Select(IsNan(acc), self.c(0, self.acc_t), acc)
            return Store("margins", idx, Bin("+", val, b.load("base_score", k)))

        self._for_outputs(stmt)

    def _depth_bound(self, tree) -> int:
        if isinstance(tree, lir.Const):
            if self.tiles is not None:
                return self.tiles.trees[int(tree.value)].depth
            return self.layout.trees[int(tree.value)].depth
        return self.max_depth

    def _peel_bound(self, tree) -> int:
        """Tile steps every walk of ``tree`` takes at least (peelWalk counts tile steps when
        tiled, and a padded tree of uniform node depth need not have uniform tile depth)."""
        if isinstance(tree, lir.Const):
            return self.tiles.trees[int(tree.value)].min_depth
        return self.tiles.min_depth()

    def _walk_lanes(self, lanes, unroll_depth: int = 0, peel_depth: int = 0, same_tree: bool = False) -> list[Var]:
        """Walk each (tree, row) lane to a leaf; returns the leaf node of each lane.

        ``peel_depth`` steps run without leaf checks (every leaf is at least that deep),
        ``unroll_depth`` more steps are unrolled with checks, and a loop finishes walks that go
        deeper than that.  Several lanes advance in turn inside one loop (interleaving).
        """
        b, reps = self.b, self.reps
        nodes = [b.local("node", "i64", reps.root(b=b, tree=Cast(t, "i32"))) for t, _ in lanes]
        depth = max(self._depth_bound(t) for t, _ in lanes)
        if self.tiles is not None:
            peel_depth = min([peel_depth] + [self._peel_bound(t) for t, _ in lanes])

        def step(j):
            tree, row = lanes[j]
            b.push()
            if self.tiles is None:
                self._step(Cast(tree, "i32"), row, nodes[j])
            else:
                self._tile_step(Cast(tree, "i32"), row, nodes[j])
            return b.pop()

        def not_leaf(j):
            leaf = reps.is_leaf(b=b, tree=Cast(lanes[j][0], "i32"), node=nodes[j])
            return Cmp("==", Cast(leaf, "i32"), self.c(0, "i32"))

        def any_not_leaf():
            out = not_leaf(0)
            for j in range(1, len(lanes)):
                out = Bin("|", out, not_leaf(j))
            return out

        if self.leaf_loops and self.tiles is None and self.exit_early:
            # Steps every walk takes are peeled; then all walks step together, unconditionally
            # (a leaf stays put), until every one is at a leaf.
            for _ in range(min(self.shallowest_leaf, depth)):
                for j in range(len(lanes)):
                    b.block.extend(step(j))
            if self.shallowest_leaf < depth:
                # At most to the deepest tree's depth: a lane past the batch's end reads rows
                # that are not its own and may step off a leaf (see leaf_self_loops); the
                # counted bound keeps its walk finite, as the counted loops' trip count does.
                d = b.local("d", "i64", self.c(min(self.shallowest_leaf, depth), "i64"))
                more = Cmp("<", d, self.c(depth, "i64"))
                b.emit(While(Bin("&", more, any_not_leaf()),
                             [s for j in range(len(lanes)) for s in step(j)]
                             + [Assign(d, Bin("+", d, self.c(1, "i64")))]))
            return nodes
        steps_to = None  # walks through self-looping leaves: a counted loop to the tree's depth
        if self.leaf_loops and self.tiles is None:
            # A step from a leaf stays there: no walk needs a leaf check.  Steps every lane's
            # tree takes are peeled; a counted loop (the same trip count for every lane) takes
            # the rest to the deepest lane tree's own depth.
            peel_depth = depth
            if TREE_DEPTH in b.buffers and not all(isinstance(t, lir.Const) for t, _ in lanes):
                peel_depth = self.min_depth
                trees = lanes[:1] if same_tree else lanes  # rows interleaved: one tree, one load
                steps_to = Cast(b.load(TREE_DEPTH, Cast(trees[0][0], "i32")), "i64")
                for t, _ in trees[1:]:
                    steps_to = Bin("max", steps_to, Cast(b.load(TREE_DEPTH, Cast(t, "i32")), "i64"))
        done = 0
        for _ in range(min(peel_depth, depth)):
            for j in range(len(lanes)):
                b.block.extend(step(j))
            done += 1
        if steps_to is not None:
            d = b.local("d", "i64")
            b.emit(For(d, self.c(done, "i64"), steps_to, 1, [s for j in range(len(lanes)) for s in step(j)]))
            return nodes
        for _ in range(unroll_depth):
            if done >= depth:
                break
            for j in range(len(lanes)):
                b.emit(If(not_leaf(j), step(j)))
            done += 1
        if done < depth:
            if len(lanes) == 1:
                b.emit(While(not_leaf(0), step(0)))
            else:
                b.emit(While(any_not_leaf(), [If(not_leaf(j), step(j)) for j in range(len(lanes))]))
        return nodes

    def _walk_expanded(self, tree, row) -> Var:
        """``expandWalk``: the walk of a tree known at compile time as nested branches, each
        node's feature column, threshold and flags constants (the if-else code lleaves and
        Treelite generate).  Each branch is a separate jump the processor predicts for its node
        alone, so paths that rows mostly share cost a compare and a jump per level; a data walk
        (:meth:`_walk_lanes`) pays its loads on every step whatever the path.  The node values
        come from the representation's own hooks, evaluated while compiling, so every
        representation expands the same way; the leaf's node index then goes to the reduction
        as a walk's would."""
        if not isinstance(tree, lir.Const):
            raise ScheduleError("expandWalk needs each walk's tree known at compile time: specialize "
                                "(or unroll) the loop over trees around the walk")
        if self.tiles is not None:
            raise ScheduleError("expandWalk walks untiled trees (tile size 1)")
        b, reps, c = self.b, self.reps, self.c
        t32 = c(int(tree.value), "i32")
        node = b.local("node", "i64")
        at = b.local("rowat", "i64", self._row_start(row))

        def static(make):
            """The value(s) of the expression(s) ``make`` builds from constants."""
            b.push()
            made = make()
            env = {}
            for s in b.pop():  # what the hooks named on the way (b.local)
                env[s.var.name] = lir.constant_value(s.value, b.buffers, env)
            if isinstance(made, tuple):
                return tuple(lir.constant_value(e, b.buffers, env) for e in made)
            return lir.constant_value(made, b.buffers, env)

        def expand(n: int) -> list:
            nc = c(n, "i64")
            if static(lambda: reps.is_leaf(b=b, tree=t32, node=nc)):
                return [Assign(node, nc)]
            field, flags = static(lambda: self._feature_and_flags(t32, nc, 0))
            thr = static(lambda: reps.load_threshold(b=b, tree=t32, node=nc, lane=0))
            left, right = static(lambda: tuple(reps.child(b=b, tree=t32, node=nc, child=c(k, "i32"))
                                               for k in (0, 1)))
            b.push()
            x = b.local("x", self.thr_t, self.placement.row_value(row, c(field, "i32"), row_at=at))
            decision = self._decision(x, c(thr, self.thr_t), c(flags, "i32"))
            return b.pop() + [If(decision, expand(int(left)), expand(int(right)))]

        b.block.extend(expand(int(static(lambda: reps.root(b=b, tree=t32)))))
        return node

    def _can_walk_vector(self, lanes: int) -> bool:
        """Vector walks: untiled, no categorical splits (decided one node at a time), CPU."""
        return (self.vector_walks and self.tiles is None and not self.layout.has_categorical
                and 2 <= lanes <= MAX_VECTOR_LANES)

    def _walk_vector(self, lanes, shared: bool, unroll_depth: int = 0, peel_depth: int = 0) -> list[Var]:
        """Walk the ``n`` (tree, row) lanes as one SIMD walk; returns the leaf node of each lane.

        The nodes are one ``i64xn`` vector.  Each step gathers every lane's feature index,
        threshold and flags (the representation's hooks, given the vector of nodes, build loads
        at a vector index: :func:`silvanforge.ir.lir.widen` makes them gathers), gathers the
        lanes' feature values from their rows, decides all lanes with one vector
        :meth:`_decision` and moves every lane to its child.  The first ``peel_depth`` steps
        (every leaf is at least that deep: padded trees) need no leaf checks; after them a loop
        runs while any lane is not at a leaf, and lanes at a leaf stay where they are (their
        feature index, -1, is clamped to 0 so the row gather stays in bounds).
        """
        b, reps, n, c = self.b, self.reps, len(lanes), self.c
        widen = lir.widen
        self.info["vector_walk"] = True
        vec = lambda t: lir.vector_type(t, n)  # noqa: E731
        if shared:
            t32 = Cast(lanes[0][0], "i32")
        else:
            t32 = Cast(b.local("tv", vec("i64"), lir.Vector(tuple(t for t, _ in lanes))), vec("i32"))
        rows = b.local("rv", vec("i64"), lir.Vector(tuple(r for _, r in lanes)))
        # Each lane's row start, once per walk (x86 has no 64-bit vector multiply below AVX-512).
        row_at = b.local("rowat", vec("i64"), widen(self._row_start(rows)))
        root = lir.broadcast(Builder.cast(widen(reps.root(b=b, tree=t32)), "i64"), n)
        node = b.local("nodev", vec("i64"), root)
        depth = max(self._depth_bound(t) for t, _ in lanes)

        def not_leaf():
            leaf = widen(reps.is_leaf(b=b, tree=t32, node=node))
            return lir.broadcast(widen(Cmp("==", Cast(leaf, "i32"), c(0, "i32"))), n)

        def step(mask: Var | None):
            feature, flags = self._feature_and_flags(t32, node, 0, widen)
            feature = lir.broadcast(feature, n)
            if mask is not None:  # a lane at a leaf has feature -1: read column 0 instead
                feature = Bin("max", feature, c(0, vec("i32")))
            x = b.local("xv", vec(self.thr_t), widen(self.placement.row_value(rows, feature, row_at)))
            thr = b.local("thrv", x.type, lir.broadcast(
                widen(reps.load_threshold(b=b, tree=t32, node=node, lane=0)), n))
            flags = b.local("flagsv", vec("i32"), lir.broadcast(flags, n))
            left = self._decision(x, thr, flags)
            child = Select(left, c(0, vec("i32")), c(1, vec("i32")))
            moved = lir.broadcast(Builder.cast(widen(reps.child(b=b, tree=t32, node=node, child=child)),
                                               vec("i64")), n)
            b.emit(Assign(node, moved if mask is None else Select(mask, moved, node)))

        done = 0
        for _ in range(min(peel_depth, depth)):
            step(None)
            done += 1
        if done < depth:
            mask = b.local("walking", vec("i1"), not_leaf())
            for _ in range(min(unroll_depth, depth - done)):
                step(mask)
                b.emit(Assign(mask, not_leaf()))
                done += 1
            if done < depth:
                b.push()
                step(mask)
                b.emit(Assign(mask, not_leaf()))
                b.emit(While(Cmp("!=", lir.PackBits(mask), c(0, "i32")), b.pop()))
        return [b.local("node", "i64", lir.Extract(node, j)) for j in range(n)]

    def _step(self, t32, row, node: Var) -> None:
        """One move from ``node`` to the child the row's feature value selects."""
        b, reps = self.b, self.reps
        left = self._node_decision(t32, row, node, 0)
        child = Select(left, self.c(0, "i32"), self.c(1, "i32"))
        b.emit(Assign(node, reps.child(b=b, tree=t32, node=node, child=child)))

    def _node_decision(self, t32, row, node: Var, lane: int) -> lir.Expr:
        """Whether the row goes left at node ``lane`` of ``node`` (lane 0 untiled)."""
        b, reps = self.b, self.reps
        feature, flags = self._feature_and_flags(t32, node, lane)
        x = b.local("x", self.thr_t, self.placement.row_value(row, feature))
        thr = b.local("thr", self.thr_t, reps.load_threshold(b=b, tree=t32, node=node, lane=lane))
        flags = b.local("flags", "i32", flags)
        return self._decision(x, thr, flags)

    def _feature_and_flags(self, t32, node, lane: int, widen=lambda e: e):
        """(feature index, flags) of a node, both i32 (``widen`` maps each load, for vector
        walks).  With ``packed_default_left`` both come from the one feature field."""
        b, reps = self.b, self.reps
        field = widen(Cast(reps.load_feature_index(b=b, tree=t32, node=node, lane=lane), "i32"))
        if not self.layout.packed_default_left:
            return field, widen(Cast(reps.load_split_flags(b=b, tree=t32, node=node, lane=lane), "i32"))
        if self.split_rows:  # the field is the split row's column; the decision needs no flags
            return field, self.c(0, field.type)
        field = b.local("ff", field.type, field)
        one = self.c(1, field.type)
        return Bin(">>", field, one), Bin("&", field, self.c(FLAG_DEFAULT_LEFT, field.type))

    def _tile_step(self, t32, row, node: Var) -> None:
        """One move from tile ``node`` to its child: every node's predicate (true = left) packed
        into ``bits``, then ``LUT[shape, bits]`` names the child slot.  Seed 001 packs node 0 into
        the most significant bit (:func:`silvanforge.tiling.shape_lut`); here node ``k`` is bit
        ``k``, the order a vector compare packs in, and the LUT buffer is permuted to match
        (:func:`silvanforge.tiling.lane_order_lut`).

        Without categorical splits the predicates are one vector computation: the features
        gathered from the row and the tile's thresholds and flags as vectors of ``n`` lanes."""
        b, c, n = self.b, self.c, self.tiles.tile_size
        if self.layout.has_categorical:
            bits = None
            for lane in range(n):
                bit = Select(self._node_decision(t32, row, node, lane), c(1 << lane, "i32"), c(0, "i32"))
                bits = bit if bits is None else Bin("|", bits, bit)
        else:
            reps, lanes = self.reps, range(n)
            xs, fl = [], []
            for lane in lanes:
                feature, flags = self._feature_and_flags(t32, node, lane)
                xs.append(self.placement.row_value(row, feature))
                fl.append(flags)
            x = b.local("xv", lir.vector_type(self.thr_t, n), lir.Vector(tuple(xs)))
            thr = b.local("thrv", x.type, _lanes([
                reps.load_threshold(b=b, tree=t32, node=node, lane=lane) for lane in lanes]))
            if self.layout.packed_default_left:  # the bits came with the feature fields
                flags = lir.Vector(tuple(fl))
            else:  # one vector load where the flag bytes lie side by side
                flags = Cast(_lanes([reps.load_split_flags(b=b, tree=t32, node=node, lane=lane)
                                     for lane in lanes]), lir.vector_type("i32", n))
            flags = b.local("flagsv", lir.vector_type("i32", n), flags)
            bits = lir.PackBits(self._decision(x, thr, flags))
        bits = b.local("bits", "i32", bits)
        shape = Builder.cast(self.reps.load_tile_shape(b=b, tree=t32, node=node), "i32")
        slot = Cast(b.load("tile_lut", Bin("+", Bin("*", shape, c(2**n, "i32")), bits)), "i32")
        b.emit(Assign(node, self.reps.child(b=b, tree=t32, node=node, child=slot)))

    def row_value(self, row, feature, row_at=None) -> lir.Expr:
        """Feature ``feature`` (an int expression) of row ``row``: the one place inputs are read
        (a GPU lowering reads cached rows from shared memory instead).  ``row_at``: the row's
        first element (``row * row_stride``) where the caller has it."""
        at = self._row_start(row) if row_at is None else row_at
        if self.split_rows:  # the feature field is the column of the split row
            return self.b.load(SPLIT_ROWS, Bin("+", at, Cast(feature, "i64")))
        return self.b.load("rows", Bin("+", at, Bin("*", Cast(feature, "i64"), lir.COL_STRIDE)))

    def _row_start(self, row) -> lir.Expr:
        """Index of a row's first value in the buffer :meth:`row_value` reads."""
        if self.split_rows:  # column -1 (NaN) comes first
            return Bin("+", Bin("*", row, self.c(self._split_row_size(), "i64")), self.c(1, "i64"))
        return Bin("*", row, lir.ROW_STRIDE)

    def _split_row_size(self) -> int:
        return 2 * self.forest.num_features + 1

    def fill_split_rows(self, start=lir.ROW_BEGIN, stop=lir.ROW_END) -> None:
        """Write the split rows of rows ``[start, stop)``: column ``2f`` holds feature
        ``f`` with a missing value as +inf, column ``2f + 1`` the same with -inf, and column -1
        (before the row's first) NaN: what a leaf's feature field (-1) reads, so a step from a
        leaf goes right (see ``leaf_self_loops``).

        With one comparison op (``<`` or ``<=``), finite thresholds and the default-left bit in the
        feature field (``(f << 1) | default_left``, :attr:`ForestLayout.packed_default_left`), the
        field is the column to compare: at every finite threshold +inf goes right and -inf left,
        where the default direction sends a missing value, and other values are unchanged.  A
        walk step is then three loads (field, value, threshold) and one compare: no NaN test, no
        flags, no column-stride multiply (docs/benchmarks.md measures 1.1-1.6x)."""
        b, c, t = self.b, self.c, self.thr_t
        r, f = Var(f"sr{len(b.locals)}", "i64"), Var(f"sf{len(b.locals)}", "i64")
        b.push()
        x = b.local("sx", t, b.load("rows", Bin("+", Bin("*", r, lir.ROW_STRIDE),
                                                Bin("*", f, lir.COL_STRIDE))))
        at = b.local("sat", "i64", Bin("+", self._row_start(r), Bin("*", f, c(2, "i64"))))
        nan = b.local("snan", "i1", IsNan(x))
        # +-inf inputs as +-MAX: "x <= +inf" splits compare with MAX (split_thresholds).
        top = float(np.finfo(lir.LIR_TO_NUMPY[t]).max)
        x = b.local("sxc", t, Select(Cmp("==", x, c(float("inf"), t)), c(top, t),
                                     Select(Cmp("==", x, c(float("-inf"), t)), c(-top, t), x)))
        b.emit(Store(SPLIT_ROWS, at, Select(nan, c(float("inf"), t), x)))
        b.emit(Store(SPLIT_ROWS, Bin("+", at, c(1, "i64")), Select(nan, c(float("-inf"), t), x)))
        features = For(f, c(0, "i64"), c(self.forest.num_features, "i64"), 1, b.pop())
        leaf_column = Store(SPLIT_ROWS, Bin("-", self._row_start(r), c(1, "i64")), c(float("nan"), t))
        b.emit(For(r, start, stop, 1, [leaf_column, features]))

    def _flag(self, flags: Var, bit: int) -> lir.Expr:
        n = lir.lanes_of(flags.type)
        return Cmp("!=", Bin("&", flags, self.c(bit, flags.type)), self.c(0, flags.type),
                   lir.vector_type("i1", n))

    def _decision(self, x: Var, thr: Var, flags: Var) -> lir.Expr:
        """The HIR rule: missing -> default direction; categorical -> membership; else compare.

        ``x``, ``thr`` and ``flags`` are scalars, or vectors (``f32x4``...) deciding every node of
        a tile at once (no categorical splits then)."""
        lay, lanes = self.layout, lir.lanes_of(x.type)
        i1, i32, t = lir.vector_type("i1", lanes), lir.vector_type("i32", lanes), x.type

        def c(v, ty):
            return self.c(v, ty)

        def cmp(op, a, b):
            return Cmp(op, a, b, i1)

        symbols = {Op.LT: "<", Op.LE: "<=", Op.EQ: "=="}
        ops = sorted(lay.ops)
        numeric = cmp(symbols[Op(ops[0])], x, thr)
        for op in ops[1:]:
            is_op = cmp("==", Bin("&", Bin(">>", flags, c(FLAG_OP_SHIFT, i32)), c(3, i32)), c(op, i32))
            numeric = Select(is_op, cmp(symbols[Op(op)], x, thr), numeric)
        decision = numeric
        if self.split_rows:  # missing values were made +-inf in the split rows
            return decision
        if lay.has_categorical:
            assert lanes == 1, "categorical splits are decided one node at a time"
            is_cat = self.b.local("iscat", "i1", self._flag(flags, FLAG_CATEGORICAL))
            decision = Select(is_cat, self._in_category_set(x, thr, is_cat), numeric)
        missing = IsNan(x, i1)
        if lay.has_zero_missing:
            near_zero = Bin("&", cmp(">=", x, c(-ZERO_THRESHOLD, t)), cmp("<=", x, c(ZERO_THRESHOLD, t)))
            missing = Bin("|", missing, Bin("&", self._flag(flags, FLAG_ZERO_MISSING), near_zero))
        return Select(missing, self._flag(flags, FLAG_DEFAULT_LEFT), decision)

    def _in_category_set(self, x: Var, thr: Var, is_cat: Var) -> lir.Expr:
        """Membership in the node's bitset.  Targets may evaluate both arms of a Select, so
        every load here stays in bounds on numerical nodes too (offset 0, word 0)."""
        b, c, t = self.b, self.c, self.thr_t
        rule = self.forest.category_rule
        low, low_inside, high = rule.bounds
        valid = Bin("&", Cmp(">=" if low_inside else ">", x, c(low, t)), Cmp("<", x, c(high, t)))
        if rule is CategoryRule.EXACT:
            whole = Cmp("==", Cast(Cast(Select(Cmp("<", x, c(high, t)), x, c(0, t)), "i64"), t), x)
            valid = Bin("&", valid, whole)
        valid_v = b.local("valid", "i1", valid)
        cat = b.local("cat", "i32", Cast(Select(valid_v, x, c(0, t)), "i32"))
        offset = b.local("off", "i32", Select(is_cat, Cast(thr, "i32"), c(0, "i32")))
        word = Bin(">>", cat, c(5, "i32"))
        in_range = b.local("inr", "i1", Bin("&", Bin("&", valid_v, is_cat),
                                             Cmp("<", word, b.load("cat_bits", offset))))
        safe_word = Select(in_range, word, c(0, "i32"))
        bits = b.load("cat_bits", Bin("+", Bin("+", offset, c(1, "i32")), safe_word))
        bit = Bin("&", Bin(">>", bits, Bin("&", cat, c(31, "i32"))), c(1, "i32"))
        return Bin("&", in_range, Cmp("!=", bit, c(0, "i32")))

    def slot_index(self, target: str, slots: tuple, row, out) -> lir.Expr:
        """Element of ``target`` for a row and output: margins are (row, k); a privatised buffer
        is (slice..., row, k): each slice is one contiguous block, so threads that own different
        slices never write to the same cache line."""
        if target == "margins":
            return self.margin_index(row, out)
        flat = self.c(0, "i64")
        for extent, s in zip(self.private[target], slots):
            flat = _fold("+", _fold("*", flat, self.c(extent, "i64")), s)
        return Bin("+", Bin("*", Bin("+", Bin("*", flat, lir.NUM_ROWS), row),
                            self.c(self.K, "i64")), Builder.cast(out, "i64"))

    def _combine(self, acc, value):
        """The aggregation's step: acc (+) value; for min/max a NaN accumulator means 'empty'."""
        agg = self.forest.aggregation
        if agg in (Aggregation.SUM, Aggregation.AVERAGE):
            return Bin("+", acc, value)
        better = Cmp("<" if agg is Aggregation.MIN else ">", value, acc)
        return Select(Bin("|", IsNan(acc), better), value, acc)

    def _reduce(self, row, tree, leaf: Var, target: str = "margins", slots: tuple = (),
                atomic: bool = False):
        b, reps = self.b, self.reps
        t32 = Cast(tree, "i32")

        def accumulate(out_idx, slot):
            idx = b.local("ri", "i64", self.placement.slot_index(target, slots, row, out_idx))
            value = b.local("leaf", self.acc_t, reps.leaf_value(b=b, tree=t32, node=leaf, slot=slot))
            if atomic:
                b.emit(lir.AtomicAdd(target, idx, value))
            else:
                b.emit(Store(target, idx, self._combine(b.load(target, idx), value)))

        if self.single_output:
            out = b.load("tree_output", t32) if self.K > 1 else self.c(0, "i32")
            accumulate(out, self.c(0, "i32"))
            return
        j = Var(f"j{len(b.locals)}", "i64")
        begin = Cast(b.load("tree_out_begin", t32), "i64")
        b.push()
        accumulate(b.load("tree_out_ids", Cast(j, "i32")), Cast(Bin("-", j, begin), "i32"))
        body = b.pop()
        b.emit(For(j, begin, Cast(b.load("tree_out_begin", Bin("+", t32, self.c(1, "i32"))), "i64"), 1, body))

    def reduce_dimension(self, op: mir.ReduceDimension):
        """Fold the slices of dimension ``dim`` for the rows this iteration owns, resetting them."""
        b, c = self.b, self.c
        if op.extent == 0:
            # An empty loop (the empty half of a split) wrote no slice: nothing to fold, and an
            # in-place fold would overwrite slot 0, which a sibling loop's fold may hold.
            return
        extents = self.private[op.source]
        outer = [self.expr(i) for i in op.outer]
        zeros = [c(0, "i64")] * (len(extents) - op.dim - 1)
        fill = c(identity(self.forest.aggregation), self.acc_t)
        r, k = Var(f"rr{len(b.locals)}", "i64"), Var(f"rk{len(b.locals)}", "i64")
        b.push()
        width = max(1, op.vector_width)
        # ``width`` independent partial results (vectorReduce), folded together at the end.
        accs = [b.local("racc", self.acc_t, fill) for _ in range(width)]
        d = Var(f"rd{len(b.locals)}", "i64")
        b.push()
        for lane, acc in enumerate(accs):
            dl = Bin("+", d, c(lane, "i64"))
            idx = b.local("rix", "i64", self.placement.slot_index(op.source, (*outer, dl, *zeros), r, k))
            body = [Assign(acc, self._combine(acc, b.load(op.source, idx))), Store(op.source, idx, fill)]
            if lane == 0:
                b.block.extend(body)
            else:
                b.emit(If(Cmp("<", dl, c(op.extent, "i64")), body))
        b.emit(For(d, c(0, "i64"), c(op.extent, "i64"), width, b.pop()))
        total = accs[0]
        for acc in accs[1:]:
            total = self._combine(total, acc)
        if op.inplace:
            idx = self.placement.slot_index(op.source, (*outer, c(0, "i64"), *zeros), r, k)
            b.emit(Store(op.source, idx, total))
        else:
            idx = b.local("mix", "i64", self.margin_index(r, k))
            b.emit(Store("margins", idx, self._combine(b.load("margins", idx), total)))
        self.placement.fold_rows(op, r, k, b.pop())

    def fold_rows(self, op: mir.ReduceDimension, r: Var, k: Var, body: list) -> None:
        """Run a fold's ``body`` for every row ``r`` the fold covers and every output ``k``."""
        c = self.c
        kloop = For(k, c(0, "i64"), c(self.K, "i64"), 1, body)
        self.b.emit(For(r, self.expr(op.rows[0]), self.expr(op.rows[1]), 1, [kloop]))


__all__ = ["ForestLayout", "TreeLayout", "RepBuffers", "build_layout", "lower_to_lir",
           "WalkSetup", "setup_walks", "WalkGenerator", "walk_module", "CompileOptions",
           # the options' context managers (silvanforge.options), where tests and benchmarks import them
           "node_widths", "per_tree_walk_depth", "vector_walks", "split_rows", "leaf_self_loops",
           "smallest_int", "float32_thresholds",
           "FLAG_DEFAULT_LEFT", "FLAG_ZERO_MISSING", "FLAG_CATEGORICAL", "FLAG_OP_SHIFT"]


def _lanes(loads: list) -> lir.Expr:
    """The vector of the scalars ``loads``: one vector load where they are consecutive elements
    of one buffer (``buf[base + 0]``, ``buf[base + 1]``, ... as a representation laying a tile's
    nodes side by side answers the per-lane hooks), else a vector built lane by lane."""
    first = loads[0]
    if isinstance(first, lir.Load) and isinstance(first.index, Bin) and first.index.op == "+":
        base = first.index.a
        if all(isinstance(ld, lir.Load) and ld.buffer == first.buffer and isinstance(ld.index, Bin)
               and ld.index.op == "+" and ld.index.a == base and isinstance(ld.index.b, lir.Const)
               and ld.index.b.value == k for k, ld in enumerate(loads)):
            return lir.Load(first.buffer, base, lir.vector_type(first.type, len(loads)))
    return lir.Vector(tuple(loads))


def _fold(op: str, a: lir.Expr, b: lir.Expr) -> lir.Expr:
    """Build ``a op b`` for index arithmetic, evaluating it when both sides are constants."""
    if isinstance(a, lir.Const) and isinstance(b, lir.Const):
        x, y = a.value, b.value
        ops = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "/": lambda: x // y,
               "min": lambda: min(x, y)}
        return lir.Const(ops[op](), "i64")
    return Bin(op, a, b)

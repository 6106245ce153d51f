"""MIR -> LIR, the shared part: the forest's layout, the lowering's choices and a walk's setup.

The walk generator that emits the walks, the split decision and the reduction, and the core's
CPU lowering that drives it, are :mod:`silvanforge.walkgen`.  The core owns what every
representation shares: the encoding of a split (threshold in the
comparison dtype, a flags byte, category bitsets) in :class:`ForestLayout`, the decision rule of
the HIR, and the aggregation of margins.  Where a value lives in memory (which buffer, which
index, how a child is found) is asked of the representation plugin's class, the contract of
:mod:`silvanforge.rep`, so one representation serves every target.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .errors import UnsupportedModelError
from .options import CompileOptions, leaf_self_loops, node_widths, per_tree_walk_depth, split_rows, vector_walks
from .reduction.legalize import identity
from .tiling import TiledForest, tile_forest
from .ir import hir, lir, mir
from .ir.hir import Op
from .ir.lir import Builder

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
    # Widths: representations store feature indices in ``feature_dtype`` (the smallest
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
    (a GPU backend's kernels) leaves it off.  ``options``: the compile's options,
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


__all__ = ["ForestLayout", "TreeLayout", "RepBuffers", "build_layout",
           "WalkSetup", "setup_walks", "walk_module", "CompileOptions",
           # the options' context managers (silvanforge.options), where tests and benchmarks import them
           "node_widths", "per_tree_walk_depth", "vector_walks", "split_rows", "leaf_self_loops",
           "smallest_int", "float32_thresholds",
           "FLAG_DEFAULT_LEFT", "FLAG_ZERO_MISSING", "FLAG_CATEGORICAL", "FLAG_OP_SHIFT"]


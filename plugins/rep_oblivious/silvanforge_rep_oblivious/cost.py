"""What the oblivious program costs, ns a row (the CPU default compares it with the walks' and
the bitvectors' estimates), and how many rows a block takes."""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir import hir

from .complete import bins
from .symmetric import alike_groups, bins as symmetric_bins
from .options import DEFAULT, ObliviousOptions

# Rows a block: one 512-bit vector of float32 values (two of float64 ones) a level's compare.
LANES, SMALL_LANES = 16, 8
# Calls of up to this many rows run one row at a time (the plan's one-row form serves 1-2 rows).
SCALAR_ROWS = 2
# ns a row, measured on the AMD Zen 4 of docs/benchmarks.md (CatBoost models of 12-1000 trees of
# depth 4-8, benchmarks/catboost_oblivious.py's among them; 4096-row calls, 1 thread, a shared
# and noisy machine): a level's compare (a vector compare and a masked OR for 16 rows, the
# index stored: 0.035), a single-output tree's leaf added a lane (its index read back and a
# scalar add: 0.3; 1000 trees of depth 8 0.58 ns a tree, 300 of depth 6 0.46), a tree's leaf
# gather a output (Zen 4's vgatherdpd; 0.4-0.6 a tree where the leaf tables stay in L2, more
# where they pass L2: 1.9-2.5 ns a tree; the levelwise form's sums, and the symmetric form's
# before a lane's outputs were one vector: VECTOR_SUM_NS below), and a column's copy
# into the block (scalar loads).  Against the bitvectors' estimates this takes every symmetric
# CatBoost model measured, as the timings do (100 trees of depth 4: 61 against 89 ns a row).
LEVEL_NS, SUM_NS, GATHER_NS, GATHER_FAR_NS, COLUMN_NS = 0.035, 0.3, 0.5, 1.5, 0.3
L2_BYTES = 1 << 20
# What the symmetric program's estimate is multiplied by on another vector unit than AVX-512:
# its AVX2 code ran 1.14x slower on cb_1000x8 at 4096 rows (2.25 against 2.56 M rows/s) and
# 1.08x on cb_300x6 at 16 (benchmarks/forms_by_cpu.py --cpus native,x86-64-v3; the models of
# benchmarks/catboost_oblivious.py).  NEON and SSE not measured: twice AVX2's assumed.
SYMMETRIC_FACTORS = {"avx512": 1.0, "avx2": 1.1, "neon": 2.2, "sse": 2.2}
# One row at a time (calls of 1-2 rows), ns a level of a tree, its leaf load counted as a level:
# 4.5-4.8x faster than the sparse walks of the same rows (fresh rows, 1-row calls, 300 trees of
# depth 6 and 1000 of depth 8), whose estimate is 0.65 ns a step; the level's price set by
# tuning against the sparse walks' estimate on 1000 trees of depth 8 (docs/benchmarks.md, "The
# cost model against tuning"; on 300 trees of depth 6 a call's fixed cost dominates).
SCALAR_LEVEL_NS = 0.22
# Spans (:func:`span`): the most bytes of a span's columns, and the most trees a chunk takes
# (their leaf indices, ob_idx: lanes x 4 bytes a tree, live on the stack).  Rows a span and the
# leaf tables a chunk of trees may hold are options (:mod:`.options`).
SPAN_COLUMN_BYTES, MAX_CHUNK_TREES = 128 << 10, 256

def lanes(forest: hir.Forest, batch_size: int | None) -> int:
    """Rows a block: fewer where a call brings fewer rows (a block's lanes cost the same filled
    or not); calls of one or two rows run scalar code, a row at a time."""
    if batch_size is None or batch_size > SMALL_LANES:
        return LANES
    return 1 if batch_size <= SCALAR_ROWS else SMALL_LANES


def span(facts, lanes_: int, batch_size: int | None, options: ObliviousOptions = DEFAULT) -> tuple[int, int]:
    """Blocks a span and trees a chunk: a span's blocks run a chunk of trees each before the
    next chunk, so a chunk's leaf tables (at most ``options.chunk_bytes``) are read from cache
    by every block of the span, not from L3 by each.  Forests whose tables all fit take one
    chunk."""
    depth = int(facts.depth.max())
    outputs = max(len(g.outputs) for g in facts.groups)
    tree_bytes = 8 * outputs << depth
    chunk = min(max(1, options.chunk_bytes // tree_bytes), MAX_CHUNK_TREES)
    if chunk >= facts.num_trees or lanes_ == 1:
        return 1, facts.num_trees
    blocks = options.span_rows // lanes_
    if batch_size is not None:
        blocks = min(blocks, -(-batch_size // lanes_))
    # The span's columns live on the stack: wide rows take fewer blocks.
    block_bytes = max(1, len(facts.columns)) * lanes_ * facts.threshold.dtype.itemsize
    return max(1, min(blocks, SPAN_COLUMN_BYTES // block_bytes)), chunk


def estimate_ns(facts, batch_size: int | None, vectors=None) -> float:
    """Estimated ns a row of the program for ``facts`` (:class:`.symmetric.Facts`) in calls of
    ``batch_size`` rows (None: large batches) on the vector unit ``vectors``
    (:data:`SYMMETRIC_FACTORS`)."""
    binning = symmetric_binned(facts, batch_size)
    if binning is not None:
        return symmetric_bytes_ns(binning, batch_size, vectors)
    factor = SYMMETRIC_FACTORS.get(getattr(vectors, "isa", "avx512"), SYMMETRIC_FACTORS["neon"])
    return factor * _symmetric_ns(facts, batch_size)


# The symmetric program on bytes (:mod:`.symmetric_bytes`), taken for calls of more than
# BYTES_MIN_ROWS rows: a level's compare for a register of byte bins, ns a row on AVX-512 (64
# rows a register), what its levels cost on narrower registers, and a single-output tree's
# leaf added a lane (the indices read a word of four at a time).  Measured on Zen 4 against
# the float program, in-process, 1 thread, 4096 rows (cb_1000x8: 1.4-1.7x its speed on
# AVX-512, 1.3-1.4x on AVX2 code); NEON and SSE not measured (twice AVX2's levels assumed).
BYTE_LEVEL_NS, BYTE_SUM_NS, BYTES_MIN_ROWS = 0.016, 0.25, 16
BYTE_LEVEL_FACTORS = {"avx512": 1.0, "avx2": 1.5, "neon": 3.0, "sse": 3.0}
# What binning a block costs beside AVX-512's permutes where the search trees' deeper levels
# are gathers: AVX2's 32-row block answering 16-row calls of cb_1000x8 ran 1.1-1.25x slower
# than the float program, 125 ns a row more (in-process, Zen 4), where this estimate had 70.
BYTE_BIN_FACTORS = {"avx512": 1.0, "avx2": 2.5, "neon": 2.5, "sse": 2.5}
# Lanes whose sums run together (:data:`.codegen.SUM_LANES`): a byte block sums only the
# groups of lanes a call's rows fill.
SUM_LANES = 16
# Rows a block of the byte program compiled for calls of more than this many rows, on every
# vector unit: a level's column and threshold then serve two AVX2 registers of rows (four of
# SSE or NEON): cb_1000x8 at 4096 rows, in one process, 1 thread, Zen 4 (load 8): AVX2 code
# 1.05-1.08x faster than a register a block, SSE4.1 code 1.10x (128 rows: no faster).  Calls
# of up to this many keep a register a block (17-32 rows ran 1.05x slower in 64).
BYTE_BLOCK_ROWS = 64


def byte_lanes(batch_size: int | None, vectors=None) -> int:
    """Rows a block of the byte program (:mod:`.symmetric_bytes`) compiled for calls of
    ``batch_size`` rows (None: large batches) on ``vectors``: a register of bytes
    (:func:`shape`), at least :data:`BYTE_BLOCK_ROWS` for calls of more rows."""
    register = shape(vectors).bytes
    return register if batch_size is not None and batch_size <= BYTE_BLOCK_ROWS else max(register, BYTE_BLOCK_ROWS)


def symmetric_binned(facts, batch_size: int | None):
    """The byte columns (:func:`.symmetric.bins`) where the byte program runs calls of
    ``batch_size`` rows (None: large batches), else None: calls of more than BYTES_MIN_ROWS
    rows, trees of up to :data:`.symmetric.BYTE_DEPTH` levels, and forests the plan gives
    forms by request size: one cheaper a row than :data:`silvanforge.plan.policy.PLAN_MIN_NS`
    gets one form for every call, where the float program's blocks of 16 answer one- and
    16-row calls 1.15x faster than the byte program's (cb_300x6, Zen 4)."""
    from silvanforge.plan.policy import PLAN_MIN_NS

    if batch_size is not None and batch_size <= BYTES_MIN_ROWS or _symmetric_ns(facts, None) < PLAN_MIN_NS:
        return None
    found = symmetric_bins(facts)
    return None if isinstance(found, str) else found


def symmetric_bytes_ns(binning, batch_size: int | None, vectors=None, lanes: int | None = None) -> float:
    """Estimated ns a row of the byte program for ``binning`` (:class:`.symmetric.SymmetricBins`)
    in calls of ``batch_size`` rows on ``vectors``' registers (:func:`shape`), in blocks of
    ``lanes`` rows (None: the program compiled for ``batch_size``'s, :func:`byte_lanes`): a call
    pays the binning and compares of whole blocks, and the sums of whole groups of SUM_LANES
    lanes."""
    facts, form = binning.facts, shape(vectors)
    block = lanes or byte_lanes(batch_size, vectors)
    isa = getattr(vectors, "isa", "avx512")
    level = BYTE_LEVEL_NS * BYTE_LEVEL_FACTORS.get(isa, 64 / form.bytes)
    search = max(1, max((len(v) for v in binning.thresholds), default=0)).bit_length()
    blocks = (COLUMN_NS + BIN_LEVEL_NS * search * BYTE_BIN_FACTORS.get(isa, 2.5)) * len(facts.columns)
    sums = 0.0
    for g in facts.groups:
        blocks += len(g.trees) * level * g.depth
        sums += len(g.trees) * vector_sum_ns(len(g.outputs), BYTE_SUM_NS)
    if batch_size is None:
        return float(blocks + sums)
    return float(blocks * -(-batch_size // block) * block / batch_size
                 + sums * -(-batch_size // SUM_LANES) * SUM_LANES / batch_size)


# Trees of several outputs: a lane's leaf values are one vector load and add a tree
# (codegen.SUM_VALUES), priced VECTOR_SUM_NS an output, at least a single output's sum: 300
# trees of depth 6 and 8 outputs, 4096 rows, 1 thread, Zen 4, 2026-11-29 (a loaded machine,
# best of 7): 1.19 ms, 0.97 ns a tree and row, against 2.99 ms gathering an output at a time.
VECTOR_SUM_NS = 0.08


def vector_sum_ns(outputs: int, single_ns: float) -> float:
    """ns a tree and row of the sums of a tree of ``outputs`` outputs (a lane at a time)."""
    return single_ns if outputs == 1 else max(single_ns, VECTOR_SUM_NS * outputs)


def _symmetric_ns(facts, batch_size: int | None) -> float:
    ns = COLUMN_NS * len(facts.columns)
    for g in facts.groups:
        ns += len(g.trees) * (LEVEL_NS * g.depth + vector_sum_ns(len(g.outputs), SUM_NS))
    if batch_size is None:
        return float(ns)
    block = lanes(None, batch_size)
    if block == 1:  # scalar code: a level's compare and OR, a tree's leaf load and add
        return float(COLUMN_NS * len(facts.columns)
                     + sum(len(g.trees) * SCALAR_LEVEL_NS * (g.depth + len(g.outputs)) for g in facts.groups))
    return float(ns * -(-batch_size // block) * block / batch_size)  # a partial block costs a whole one


# The levelwise form (:mod:`.levelwise`), ns a row in the walks' estimate's units (their
# sparse estimate is 0.89 of what the sparse walks measured alongside): a level's lookups,
# compare and bit (LW_LEVEL_NS) plus picking each lane's column value, by how many columns the
# selects choose among (LW_PICK_NS, interpolated) or by a gather past PICK_COLUMNS.  Measured
# on Zen 4, 1 thread, 4096-row calls, XGBoost depth 8, four trees side by side: 2.1, 3.5, 4.8 ns
# a tree and row with 8, 16, 32 columns, 5.5 with 54 (gathers; the sparse walks 5.8-6.6 on all).
# One row at a time (calls of 1-2 rows) a level costs LW_SCALAR_LEVEL_NS: 1.15x the sparse walks.
LW_LEVEL_NS, LW_GATHER_NS, LW_SCALAR_LEVEL_NS = 0.064, 0.52, 0.75
# A level's pick by a gather, levels 1-5 picking by path (:data:`.levelwise.PATH_NODES`): 1.24x
# faster than gathers at every level on the 8-class model (54 columns, 16-row calls).
LW_GATHER_PICK_NS = 0.42
# A tree of several outputs gathers each output's leaf values: 0.87 ns an output (100 trees of
# 5-output vector leaves, depth 8, 20 features: 8.5 ns a tree and row, the sparse walks 13.2).
LW_OUTPUT_NS = 0.87
LW_PICK_NS = ((1, 0.0), (8, 0.136), (16, 0.29), (32, 0.44))
# Most columns a lane's value is picked from by selects (more: a gather; 64 columns by selects
# ran 1.6x slower than the gather: the block's columns no longer fit the registers).
PICK_COLUMNS = 32


@dataclasses.dataclass(frozen=True)
class Shape:
    """The levelwise program for one vector unit (:class:`silvanforge.target.Vectors`): a block
    is one register of values (``bytes`` rows of bins, ``bytes // itemsize`` rows of float
    thresholds), ``interleave`` trees walked side by side, and what its estimate (measured on
    the AVX-512 one) is multiplied by there (``factor``: the float program, ``binned``: the
    byte program, ``gathered``: the float program picking by gathers).  Lowerings for vector
    units without AVX-512's masks and unsigned byte compares: ``signed_bytes``, bins compared
    as signed bytes, a node's missing direction folded into its threshold (one compare a
    level, :meth:`.levelwise.BinnedLowering._goes_right`); ``node_offsets``, picks by path
    read each node's column offset from a table (:meth:`.levelwise.LevelLowering._node_value`);
    ``row_vectors``, the float program's columns copied from vectors of each row's consecutive
    features (:meth:`.codegen._Lowering._feature_runs`; every unit's where the float program
    gathers, :class:`.levelwise.LevelLowering`); ``bin_parts``, registers of a block's
    values the byte programs bin side by side (:meth:`.binning.BinColumns._column_groups`);
    ``machine_scheduler`` False, the levelwise byte program's code keeps the order its
    statements give (module info ``machine_scheduler``: the CPU target compiles it without
    LLVM's machine scheduler, :meth:`.levelwise.BinnedLowering.lower`)."""

    bytes: int = 64
    interleave: int = 4
    factor: float = 1.0
    binned: float = 1.0
    gathered: float = 1.0
    signed_bytes: bool = False
    row_vectors: bool = False
    node_offsets: bool = False
    bin_parts: int = 1
    machine_scheduler: bool = True


# AVX-512 (Zen 4: the estimates' own), with or without VBMI's byte permutes (without, 64-lane
# vpshufb does the byte lookups: xgb_100x8 / xgb_1000x8, 4096 rows, 8.3 / 1.36 M rows/s beside
# VBMI's 8.6 / 1.39 M).  AVX2's 16 registers (AVX-512 has 32) hold half the blocks a level needs
# at 64 lanes of four trees: one 256-bit register a block and two trees side by side ran the
# byte program 1.5x faster on AVX2 code (4.8-5.0 M rows/s and 0.73-0.76 M on those models,
# 4096 rows: 0.53-0.57x AVX-512) and the float program 2.4x (16-row calls); the factors are
# those ratios (benchmarks/forms_by_cpu.py --cpus native,x86-64-v3; docs/benchmarks.md,
# "AVX2-only CPUs").  NEON and SSE (16-byte registers, no lane permutes: lookups by gather)
# were not measured (no such CPU here; qemu times nothing): half AVX2's speed is assumed.
# Where the float program picks by gathers (more than PICK_COLUMNS columns) its AVX2 code is
# nearer its AVX-512 self: 1.3x on xgb_epsilon (100 trees of depth 8, 1,930 columns, 4096
# rows: 0.50 M rows/s against 0.61-0.66 M); 1.46x on 16-row calls of xgb_multiclass_8 (54
# columns), where it ran 1.14x slower than the sparse walks (forms_by_cpu.py).
# AVX2's lowerings (Shape's docstring; AVX-512 code unchanged), measured against the same
# program without them in one process, 1 thread, Zen 4, 2026-11-29: signed_bytes and
# node_offsets 1.05-1.06x on xgb_100x8 (512 and 4096 rows; the byte program: 25% fewer
# instructions a tree), row_vectors and node_offsets 1.06-1.10x on the Bosch-shaped model at 512
# rows, 1.01-1.05x at 4096 (the float program over 966 columns, a quarter of whose time was
# the columns' copy).  SSE takes them too (it has no unsigned byte compare either: an
# unsigned one is a max and an equality); NEON has unsigned byte compares, but the fold also
# drops the missing value's equality, AND and OR a level: taken there unmeasured (no NEON CPU
# here; qemu times nothing), exact under qemu.  bin_parts, against one register at a time
# (same conditions): AVX2's four registers of a 32-row block side by side 1.07-1.08x on
# xgb_100x8's byte program (512 and 4096 rows, where binning its 33 columns had taken a
# quarter of the time; two side by side gained nothing), 1.03x on cb_1000x8 (eight: no
# faster); SSE's eight (of a 64-row block's sixteen) 1.18-1.30x on cb_1000x8, four 1.10x on
# xgb_100x8 (a 16-row block's all) and 1.03x on xgb_1000x8 (sixteen no faster than eight);
# NEON takes SSE's, unmeasured.
_NARROW = {"signed_bytes": True, "node_offsets": True}
# machine_scheduler off on AVX2 (same conditions, one process, 512 and 4096 rows): xgb_100x8
# 1.06-1.08x, xgb_1000x8 1.06-1.07x, xgb_multiclass_8 1.07x (the byte program's loop of two
# trees: 921 instructions, 350 vector loads and 15 spill stores where the scheduled code had
# 994, 396 and 52; Zen 4 loads two vectors a cycle).  AVX-512 code keeps it: off, xgb_100x8
# and xgb_1000x8 ran 1.03-1.05x faster but lgb_1000x31 0.99x (4096 rows).
_SHAPES = {"avx512": Shape(), "avx2": Shape(32, 2, 2.0, 1.8, 1.4, row_vectors=True, bin_parts=4,
                                            machine_scheduler=False, **_NARROW),
           "neon": Shape(16, 2, 4.0, 3.6, 2.8, bin_parts=8, **_NARROW),
           "sse": Shape(16, 2, 4.0, 3.6, 2.8, bin_parts=8, **_NARROW)}


def shape(vectors) -> Shape:
    """The levelwise program's shape for ``vectors`` (None, or an ISA with 512-bit registers:
    the estimates' own AVX-512; an unknown one of narrower registers: as NEON)."""
    if vectors is None:
        return _SHAPES["avx512"]
    if vectors.isa in _SHAPES:
        return _SHAPES[vectors.isa]
    return _SHAPES["avx512"] if vectors.bits >= 512 else _SHAPES["avx2"] if vectors.bits >= 256 else _SHAPES["neon"]


def levelwise_lanes(forest: hir.Forest, batch_size: int | None, vectors=None) -> int:
    """Rows a block: one vector register of thresholds (512-bit: 16 float32, 8 float64;
    :func:`shape`); calls of one or two rows run scalar code."""
    if batch_size is not None and batch_size <= SCALAR_ROWS:
        return 1
    return shape(vectors).bytes // np.dtype(forest.threshold_dtype).itemsize


def levelwise_ns(facts, batch_size: int | None, vectors=None) -> float:
    """Estimated ns a row of the levelwise program for ``facts`` (:class:`.complete.LevelFacts`)
    in calls of ``batch_size`` rows (None: large batches): the byte program's where it runs
    (:func:`levelwise_binned`).  For calls of 1-2 rows, the more of the scalar program's and
    what the large-batch program costs them (a whole block): the plan compares the latter
    with the other forms when it decides whether one form answers every size, and the
    scalar program is never the cheapest for one row (1.15x the sparse walks).  ``vectors``:
    the vector unit (:func:`shape`)."""
    form = shape(vectors)
    if batch_size is not None and batch_size <= SCALAR_ROWS:
        big = levelwise_ns(facts, None, vectors)
        lanes = form.bytes if levelwise_binned(facts, None) is not None else form.bytes // facts.threshold.dtype.itemsize
        return max(_levelwise_ns(facts, batch_size, form), big * lanes / batch_size)
    return _levelwise_ns(facts, batch_size, form)


def _levelwise_ns(facts, batch_size: int | None, form: Shape) -> float:
    binning = levelwise_binned(facts, batch_size)
    if binning is not None:
        return form.binned * binned_ns(facts, binning, batch_size, form.bytes)
    U = max(1, len(facts.columns))
    if U <= PICK_COLUMNS:
        pick = float(np.interp(U, [u for u, _ in LW_PICK_NS], [ns for _, ns in LW_PICK_NS]))
    else:
        pick = LW_GATHER_PICK_NS
    ns = COLUMN_NS * U
    table = 8 * sum(len(g.outputs) * int((1 << facts.depth[g.trees]).sum()) for g in facts.groups)
    far = 1.0 if table <= L2_BYTES else GATHER_FAR_NS / GATHER_NS
    for g in facts.groups:
        sums = SUM_NS if len(g.outputs) == 1 else LW_OUTPUT_NS * far * len(g.outputs)
        # Levels 8 and deeper look their nodes up with gathers (tables of 256 entries and more).
        deep = max(0, g.depth - 8)
        ns += len(g.trees) * ((LW_LEVEL_NS + pick) * g.depth + deep * 2 * LW_GATHER_NS + sums)
    ns *= form.factor if U <= PICK_COLUMNS else form.gathered
    if batch_size is None:
        return float(ns)
    if batch_size <= SCALAR_ROWS:
        return float(COLUMN_NS * U + sum(len(g.trees) * LW_SCALAR_LEVEL_NS * (g.depth + len(g.outputs))
                                         for g in facts.groups))
    block = form.bytes // facts.threshold.dtype.itemsize
    return float(ns * -(-batch_size // block) * block / batch_size)  # a partial block costs a whole one


# The levelwise program on bytes (:class:`.levelwise.BinnedLowering`): 64 rows a block.  A
# level a row, by the columns the selects pick among (interpolated), in the walks' estimate's
# units: measured 0.77, 1.04, 1.59 ns a tree and row with 8, 16, 32 columns (XGBoost depth 8, 100
# trees, 1 thread, 4096 rows, Zen 4), 3.6-7.6x the sparse walks; a column's bins a row,
# BIN_LEVEL_NS a level of its search tree; a tree's output past the first, its leaves gathered.
BINNED_LANES = 64
# Levels 1-5 pick by path (:data:`.levelwise.PATH_NODES`): 1.08x and 1.73x faster at 32 and
# 78 columns than picking among the columns at every level (the 78-column point was 0.34).
BINNED_LEVEL_NS = ((1, 0.025), (8, 0.04), (16, 0.06), (32, 0.097), (78, 0.19))
# Most byte columns picked by selects (bytes have no gather: more take the float program), and
# most byte columns times copies of a group's code (groups not alike each have their own loop
# and selects: 8 groups of 78 columns took 33 s to compile; alike groups share one loop).
BINNED_PICK_COLUMNS, BINNED_CODE_COLUMNS = 128, 128
BIN_LEVEL_NS, BINNED_OUTPUT_NS = 0.1, 0.54


def levelwise_binned(facts, batch_size: int | None):
    """The bins (:func:`.complete.bins`) where the byte program is the levelwise form's choice
    for calls of ``batch_size`` rows, else None: the bins fit bytes, the columns are picked by
    selects (bytes have no gather), and calls bring more rows than a float block."""
    if batch_size is not None and batch_size <= 16:
        return None
    found = bins(facts)
    if isinstance(found, str):
        return None
    U = len(found.facts.columns)
    copies = 1 if alike_groups(facts.groups) else len(facts.groups)  # of the groups' code
    if U > BINNED_PICK_COLUMNS or U * copies > BINNED_CODE_COLUMNS:
        return None
    return found


def binned_ns(facts, binning, batch_size: int | None, lanes: int = BINNED_LANES) -> float:
    """Estimated ns a row of the byte program (``binning``: :func:`.complete.bins`'s) on
    the estimates' AVX-512, in blocks of ``lanes`` rows."""
    U = max(1, len(binning.facts.columns))
    level = float(np.interp(U, [u for u, _ in BINNED_LEVEL_NS], [ns for _, ns in BINNED_LEVEL_NS]))
    search = max(1, max((len(v) for v in binning.thresholds), default=0)).bit_length()
    ns = (COLUMN_NS + BIN_LEVEL_NS * search) * U
    for g in facts.groups:
        sums = SUM_NS if len(g.outputs) == 1 else BINNED_OUTPUT_NS * len(g.outputs)
        ns += len(g.trees) * (level * g.depth + sums)
    if batch_size is None:
        return float(ns)
    return float(ns * -(-batch_size // lanes) * lanes / batch_size)

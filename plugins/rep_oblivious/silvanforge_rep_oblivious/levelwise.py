"""The program of the levelwise form (LIR from :class:`.complete.LevelFacts`).

The symmetric form's program (:mod:`.codegen`: columns copied a block of rows at a time,
trees a chunk at a time, leaf sums in two phases) with another leaf index: at level ``d`` each
lane looks its node's column and threshold up in the tree's level table by its path so far
(:class:`silvanforge.ir.lir.Lookup`: register permutes on AVX-512 up to 128 entries), picks its
value of that column out of the block's columns, compares, and sets bit ``d`` where it goes
right.  Level 0 has one node: a broadcast, as in the symmetric form.

Picking a lane's column: with few columns, a tree of selects on the column index's bits over
the block's column vectors (one vector load a column, ``PICK_COLUMNS - 1`` blends; measured
2x faster than a gather on Zen 4, whose 16-lane gather takes 16 loads); with more, a gather
from the block's columns.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir import lir
from silvanforge.ir.lir import Assign, Bin, Builder, Cast, Cmp, Gather, Load, Lookup, Select, Var, Vector

from . import cost
from .binning import BinColumns, signed_thresholds
from .codegen import _Lowering
from .complete import NAN_RIGHT, LevelFacts
from .options import DEFAULT
from .symmetric import leaf_table

NAME = "levelwise"
PICK_COLUMNS = cost.PICK_COLUMNS
# Levels of at most this many nodes pick a lane's value by its path (:meth:`LevelLowering._path_value`)
# where that takes fewer selects than picking among the block's columns: on XGBoost's depth-8
# trees over 32-78 columns, levels 1-5 take 1-31 selects where the columns took 31-77.
PATH_NODES = 32
# Where the float program gathers (more columns than PICK_COLUMNS), levels of at most
# GATHER_PATH_NODES nodes pick by path, and GATHER_INTERLEAVE trees at least walk side by side
# (a gather's latency is what the levels wait on, so more trees hide more of it; a gather costs
# less than the selects of a level of 32 nodes, whose 32 columns are loaded from the block's
# 966 in L2, not registers).  The Bosch-shaped model, 512 rows, 1 thread, Zen 4, in one
# process: levels 1-4 by path 1.08x on AVX-512 code (levels 1-3: 1.0x); AVX2 code, four trees
# where two had walked 1.14x, and levels 1-4 by path with them 1.18x (eight trees 1.10x).
GATHER_PATH_NODES, GATHER_INTERLEAVE = 16, 4


class LevelLowering(_Lowering):
    name = NAME
    function = "predict_levelwise"
    interleave = 4
    # The level tables a tree's levels read: each node's column entry (the column, and FLAG
    # where missing values go right) and its threshold, compared with the column's values.
    entry_table, entry_t, flag = "lw_column", "i32", NAN_RIGHT
    thr_table = "lw_threshold"
    # Most columns a lane's value is picked from by selects (more: a gather).
    pick_columns = PICK_COLUMNS

    def __init__(self, forest, facts, lanes, options, vectors=None):
        super().__init__(forest, facts, lanes, options)
        self.vectors, self.form = vectors, cost.shape(vectors)
        self.interleave = self.form.interleave
        self.path_nodes = PATH_NODES
        self.row_vectors = self.form.row_vectors
        if len(facts.columns) > self.pick_columns:  # (the float program gathers: see GATHER_PATH_NODES)
            self.interleave = max(self.interleave, GATHER_INTERLEAVE)
            self.path_nodes = GATHER_PATH_NODES
            # Wide float32 rows copy their columns from vectors of each row: the copy is a large
            # share of a block's work there (the Bosch-shaped model's 966 columns, AVX-512 code:
            # half the time of a 512-row call where each column took a load a row).  Measured
            # on AVX2 and AVX-512; 4-lane units (SSE, NEON) take it unmeasured.
            self.row_vectors = self.row_vectors or self.thr_t == "f32"

    def estimate_ns(self, batch_size: int | None) -> float:
        return cost.levelwise_ns(self.facts, batch_size, self.vectors)

    @property
    def nan_right(self) -> bool:
        """Whether any node sends missing values right (else a compare alone decides)."""
        return bool((self.facts.column & NAN_RIGHT).any())

    def _tables(self) -> None:
        """Per tree (in group order) its level tables (:meth:`_level_tables`); per tree the
        first element of its leaf values; the base scores; each column's feature."""
        facts, b = self.facts, self.b
        order = np.concatenate([g.trees for g in facts.groups])
        self.first = np.cumsum([0] + [len(g.trees) for g in facts.groups])
        self.level_base, self.width, at = [], [], 0
        for g, group in enumerate(facts.groups):
            S = (1 << max(group.depth, 1)) - 1
            self.level_base.append(at - int(self.first[g]) * S)
            self.width.append(S)
            at += len(group.trees) * S
        self._level_tables()
        # Leaf tables as deep as each tree's group: a lane's path has a bit for every level the
        # group runs, and where a tree ends (or a branch stops early) the leaf fills every index
        # below it, so a padding node's outcome never matters.
        depth = np.zeros_like(facts.depth)
        for group in facts.groups:
            depth[group.trees] = max(group.depth, 1)
        leaves, base = leaf_table(self.forest, dataclasses.replace(facts, depth=depth), self.forest.accumulate_dtype)
        b.buffer("ob_leaf", leaves)
        b.buffer("ob_leaf_base", base[order].astype(np.int32))
        b.buffer("ob_base", np.asarray(self.forest.base_score, dtype=self.forest.accumulate_dtype))
        b.buffer("ob_feature", np.array([col.feature for col in facts.columns] or [0], np.int32))

    def _group_extra(self) -> list:
        return [self.width]

    def _per_tree(self, name: str, table: np.ndarray) -> None:
        """Buffer ``name``: ``table``'s rows (a tree's entries, level ``d``'s node of path ``p`` at
        ``2**d - 1 + p``) for the trees in group order, each group's trees ``2**depth - 1``
        entries apart, and a vector's worth of padding after the last (a lookup loads whole
        vectors)."""
        parts = [table[group.trees][:, :S].reshape(-1) for group, S in zip(self.facts.groups, self.width)]
        self.b.buffer(name, np.concatenate(parts + [np.zeros(max(self.lanes, 64), table.dtype)]))

    def _level_tables(self) -> None:
        self._per_tree("lw_column", self.facts.column.astype(np.int32))
        self._per_tree("lw_threshold", self.facts.threshold.astype(self.forest.threshold_dtype))
        self._offsets()

    def _offsets(self) -> None:
        """With node_offsets (:class:`.cost.Shape`), buffer lw_offset: each node's column's
        offset in the block (:meth:`_node_value`)."""
        if self.form.node_offsets:
            offset = (self.facts.column & (NAN_RIGHT - 1)).astype(np.int64) * self.lanes
            table = offset.astype(np.uint16 if offset.max(initial=0) < 1 << 16 else np.int32)
            self.offset_t = lir.lir_type(table.dtype)
            self._per_tree("lw_offset", table)

    def _missing(self, x: lir.Expr) -> lir.Expr:
        """Lanes whose picked value is missing."""
        return lir.IsNan(x, lir.vector_type("i1", lir.lanes_of(x.type)))

    def _column_value(self, column: lir.Expr) -> lir.Expr:
        """Each lane's value of its column (``column``: an integer vector of column indices, or
        a scalar: every lane's) from the block's columns in ob_x."""
        c, i64, L = Builder.const, "i64", self.lanes
        if L == 1 or lir.lanes_of(column.type) == 1:
            return Load("ob_x", Bin("+", self.x_base, Bin("*", Cast(column, i64), c(L, i64))), self.x_t)
        U = max(1, len(self.facts.columns))
        if U > self.pick_columns:
            # (i32 indices: the span's columns hold fewer than 2**31 values, and x86 gathers
            # eight or sixteen lanes of them in one instruction where i64 took two)
            base = Cast(self.x_base, "i32")
            lanes = Vector(tuple(Bin("+", base, c(k, "i32")) for k in range(L)))
            index = Bin("+", Bin("*", Cast(column, lir.vector_type("i32", L)), self.splat(L, "i32")), lanes)
            return Gather("ob_x", index, self.x_t)
        span = 1
        while span < U:
            span *= 2
        et = lir.element_type(column.type)

        def pick(lo: int, size: int):
            if lo >= U:
                return None
            if size == 1:
                return Load("ob_x", Bin("+", self.x_base, c(lo * L, i64)), self.x_t)
            low, high = pick(lo, size // 2), pick(lo + size // 2, size // 2)
            if high is None:
                return low
            bit = Cmp("!=", Bin("&", column, self.splat(size // 2, et)), self.splat(0, et), self.mask_t)
            return Select(bit, high, low)

        return pick(0, span)

    def _path_value(self, at: lir.Expr, level: int, idx: Var) -> lir.Expr:
        """Each lane's value of its node's column at ``level`` picked by its path: the level's
        ``2**level`` nodes' columns loaded (their entries are scalars of the tree's table) and
        a tree of selects on the path's bits, ``2**level - 1`` of them, where picking among
        the block's columns takes one fewer than the columns (see PATH_NODES)."""
        c, i64 = Builder.const, "i64"
        values = [self._node_value(Bin("+", at, c(p, i64))) for p in range(1 << level)]
        for bit in reversed(range(level)):
            half = 1 << bit
            on = Cmp("!=", Bin("&", idx, self.splat(half, self.path_t)), self.splat(0, self.path_t), self.mask_t)
            values = [Select(on, values[p + half], values[p]) for p in range(half)]
        return values[0]

    def _node_value(self, where: lir.Expr) -> lir.Expr:
        """Every lane's value of the column of the node at ``where`` in the level tables: its
        entry's column, or (node_offsets, :class:`.cost.Shape`) its column's offset in the
        block read from a table of them, one load where the entry took a load, an AND and a
        shift (picks by path read one a node: 126 scalar instructions of 700 a tree of
        xgb_100x8's byte program on AVX2)."""
        c = Builder.const
        if self.form.node_offsets:
            offset = Cast(Load("lw_offset", where, self.offset_t), "i64")
            return Load("ob_x", Bin("+", self.x_base, offset), self.x_t)
        return self._column_value(Bin("&", Load(self.entry_table, where, self.entry_t), c(self.flag - 1, self.entry_t)))

    def _every_lane(self, x: lir.Expr, entry: lir.Expr) -> lir.Expr:
        """``x``, made from a node's column ``entry``, in each lane: a node shared by the
        block's lanes has one scalar entry, and ``x`` is then the same in all of them."""
        return self.vector((x,) * self.lanes) if self.lanes > 1 and lir.lanes_of(entry.type) == 1 else x

    def _goes_right(self, x: lir.Expr, thr: lir.Expr, entry: lir.Expr) -> lir.Expr:
        """The lanes whose value ``x`` goes right at a node of threshold ``thr`` and column
        entry ``entry`` (a vector, or a scalar: every lane's)."""
        right = Cmp(">=", x, thr, self.mask_t)
        if self.nan_right:
            flag = Cmp("!=", Bin("&", entry, Builder.const(self.flag, entry.type)), Builder.const(0, entry.type),
                       lir.vector_type("i1", lir.lanes_of(entry.type)))
            flag = self._every_lane(flag, entry)
            right = Bin("|", right, Bin("&", self._missing(x), flag))
        return right

    def _leaf_index(self, t: Var, g: int, group, idx: Var) -> list:
        """Statements setting bit ``level`` of ``idx`` where a lane's row goes right at its
        node of that level: the node's column entry and threshold looked up by the path so far."""
        c, i64, L = Builder.const, "i64", self.lanes
        start = Bin("+", Bin("*", t, self._at(self.width, g)), self._at(self.level_base, g))
        cmp_t = lir.element_type(self.x_t)
        body = []
        for level in range(group.depth):
            at = Bin("+", start, c((1 << level) - 1, i64))
            if level == 0 or L == 1:
                where = Bin("+", at, c(0, i64) if level == 0 else Cast(idx, i64))
                entry = Load(self.entry_table, where, self.entry_t)
                thr = self.vector((Load(self.thr_table, where, cmp_t),) * L)
            else:
                size = 1 << level
                index = idx if lir.element_type(idx.type) == self.path_t else Cast(idx, lir.vector_type(self.path_t, L))
                entry = Lookup(self.entry_table, at, index, size, lir.vector_type(self.entry_t, L))
                thr = Lookup(self.thr_table, at, index, size, self.x_t)
            if 0 < level and L > 1 and (1 << level) < min(len(self.facts.columns), self.path_nodes + 1):
                x = self._path_value(at, level, idx)
            elif lir.lanes_of(entry.type) == 1:
                x = self._node_value(where)
            else:
                x = self._column_value(Bin("&", entry, c(self.flag - 1, entry.type)))
            right = self._goes_right(x, thr, entry)
            body.append(Assign(idx, Select(right, Bin("|", idx, self.splat(1 << level, self.path_t)), idx)))
        return body


class BinnedLowering(BinColumns, LevelLowering):
    """The levelwise program on bytes: a block of 64 rows, each column's values replaced by
    their bins (:mod:`.binning`: 1 + the count of the column's thresholds at or below the
    value, 0 missing), each node's threshold by its bin, so a level compares 64 lanes of bytes
    where the float program compares 16 of float32: the lookups (``vpermb``/``vpermi2b``), the
    column picks and the compares each cover four times the rows."""

    entry_table, entry_t, flag = "lw_entry8", "u8", 0x80
    thr_table = "lw_bin8"
    pick_columns = cost.BINNED_PICK_COLUMNS  # (bytes have no gather: every program picks by selects)

    def __init__(self, forest, facts, lanes, options, binning, vectors=None):
        super().__init__(forest, binning.facts, lanes, options, vectors)
        self.thresholds, self.tbin = binning.thresholds, binning.tbin
        # (signed_bytes: bins less 128, see _goes_right)
        self.column_t = "i8" if self.form.signed_bytes else "u8"
        self.bin_bias = -128 if self.form.signed_bytes else 0
        self.x_t = lir.vector_type(self.column_t, lanes)
        self.path_t = "u8"

    def lower(self, batch_size: int | None) -> lir.Module:
        module = super().lower(batch_size)
        if not self.form.machine_scheduler:  # (see cost.Shape)
            module.info["machine_scheduler"] = False
        return module

    def _level_tables(self) -> None:
        column = self.facts.column & (NAN_RIGHT - 1)
        right = (self.facts.column & NAN_RIGHT) != 0
        self._per_tree("lw_entry8", (column | np.where(right, 0x80, 0)).astype(np.uint8))
        if self.form.signed_bytes:
            # goes right iff bin + (-1 where missing values go right) >= t' (see _goes_right),
            # as signed bytes less 128: > t' - 129
            self._per_tree("lw_bin8", signed_thresholds(self.tbin, right))
        else:
            self._per_tree("lw_bin8", self.tbin)
        self._offsets()
        self._search_buffer()

    def _missing(self, x: lir.Expr) -> lir.Expr:
        return Cmp("==", x, self.splat(0, "u8"), self.mask_t)

    def _goes_right(self, x: lir.Expr, thr: lir.Expr, entry: lir.Expr) -> lir.Expr:
        """With signed_bytes (:class:`.cost.Shape`: vector units whose byte compares are signed
        only, AVX2's ``vpcmpgtb``), one compare: a missing value's bin is 0, so where the node
        sends missing values right its bin less 1 wraps to the largest, and every other bin
        less 1 is at or above ``t' - 1`` iff the bin is at or above ``t'`` (the node's threshold
        bin in the table is ``t' - 1`` there): bin plus the entry's top bit shifted down
        (-1 or 0), compared with the table's.  Otherwise an unsigned compare, and missing values
        tested apart (an equality, an AND and an OR)."""
        if not self.form.signed_bytes:
            return super()._goes_right(x, thr, entry)
        if self.nan_right:
            i8 = lir.vector_type("i8", lir.lanes_of(entry.type))
            low = Bin(">>", Cast(entry, i8), Builder.const(7, i8))
            low = self._every_lane(low, entry)
            x = Bin("+", x, low)
        return Cmp(">", x, thr, self.mask_t)


def lower(forest, facts: LevelFacts, batch_size: int | None = None, lanes: int | None = None,
          options=None, vectors=None) -> lir.Module:
    """The LIR module of ``forest`` (:func:`.complete.recognise` gave ``facts``) for
    ``batch_size`` rows a call (None: large batches): on bytes where the bins fit them and the
    cost model prefers it (:func:`.cost.levelwise_binned`), else on the thresholds' type;
    ``lanes`` rows a block (None: the cost model's choice); shaped for the vector unit
    ``vectors`` (:func:`.cost.shape`: a block a register, trees side by side)."""
    form = cost.shape(vectors)
    binning = cost.levelwise_binned(facts, batch_size)
    if binning is not None and lanes is None:
        # One program for every size it takes (a call's rows bound its spans anyway), so the
        # plan's bands above 16 rows share it.
        return BinnedLowering(forest, facts, form.bytes, options or DEFAULT, binning, vectors).lower(None)
    L = lanes or cost.levelwise_lanes(forest, batch_size, vectors)
    return LevelLowering(forest, facts, L, options or DEFAULT, vectors).lower(batch_size)


__all__ = ["NAME", "lower"]

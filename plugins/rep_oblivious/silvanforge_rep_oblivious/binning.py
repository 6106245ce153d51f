"""A block's columns as bins, for the programs that compare bytes (:class:`.levelwise.BinnedLowering`
and :class:`.bytes.ByteLowering`): each value replaced by 1 + its count of the column's sorted
thresholds at or below it, or by the column's bin for missing values.  A node's threshold is then
a bin too (``x >= t'`` iff ``bin(x) >= rank(t') + 2``), and a level compares a register of bytes
(64 rows on AVX-512) where the float programs compare 16 float32 values.

A value's count is found by walking the column's thresholds as a complete search tree (node
``p`` of level ``d`` holds threshold ``(2p + 1) 2**(D - 1 - d) - 1``, NaN past the last), a
register of values at a time (16 float32, 8 float64 on AVX-512), whose path after ``D`` levels,
read most significant level first, is the count: once a block and column, a few percent of a
large forest's time.
"""

from __future__ import annotations

import numpy as np

from silvanforge.ir import lir
from silvanforge.ir.hir import ZERO_THRESHOLD
from silvanforge.ir.lir import Assign, Bin, Builder, Cast, Cmp, For, If, Load, Lookup, Select, Store, Var, Vector

# Rows a group of a block's lanes the sums skip where a call brings none (:data:`.cost.SUM_LANES`):
# binning skips them too (a 64-row block answering one row bins 16).
SUM_LANES = 16
# Thresholds a byte column holds: bins 1-255 (0 is a missing value's bin where they go left;
# 255 where they go right also compares at or above every threshold's bin, 2-255).
MAX_BINS = 254


def signed_thresholds(bins: np.ndarray, less=0) -> np.ndarray:
    """Threshold bins ``t`` (less ``less``, a node's or all nodes') as the signed bytes
    ``t - 129``: with bins less 128, ``bin >= t`` is ``bin - 128 > t - 129``, one signed
    compare (AVX2's and SSE's byte compares are signed only: unsigned ones take a max and an
    equality).  Real nodes' bins are 2-255 (:mod:`.complete`), so it never leaves a byte."""
    return (bins.astype(np.int16) - less - 129).astype(np.int8)


def search_depth(thresholds: list[np.ndarray]) -> int:
    """Levels of the search trees of byte columns of ``thresholds``."""
    return max(1, max((len(v) for v in thresholds), default=0)).bit_length()


def column_depth(values: np.ndarray) -> int:
    """Levels of the search tree of a column of thresholds ``values``."""
    return max(1, len(values)).bit_length()


def search_table(thresholds: list[np.ndarray], dtype) -> np.ndarray:
    """Every column's search tree in ``2**D - 1`` entries (:func:`search_depth`; a column of
    fewer thresholds has a tree of its own depth, :func:`column_depth`, in the first entries),
    NaN past its thresholds, a vector's worth of padding after the last (a lookup loads whole
    vectors)."""
    D = search_depth(thresholds)
    tables = np.full((max(1, len(thresholds)), (1 << D) - 1), np.nan, dtype)
    for u, values in enumerate(thresholds):
        depth = column_depth(values)
        for d in range(depth):
            p = np.arange(1 << d)
            k = (2 * p + 1) * (1 << (depth - 1 - d)) - 1
            inside = k < len(values)
            tables[u, (1 << d) - 1 + p[inside]] = values[k[inside]]
    return np.concatenate([tables.reshape(-1), np.zeros(64, tables.dtype)])


class BinColumns:
    """The byte programs' column step, for a lowering of :mod:`.codegen`'s shape: its
    ``thresholds`` (each byte column's sorted thresholds), ``form`` (:func:`.cost.shape`) and
    ``missing_bin(column)`` (a missing value's bin); the search tables are buffer ``lw_search``."""

    search_table_name = "lw_search"
    # Added to every bin before it is stored as a byte of column_t (u8, or i8 with -128: bins
    # that signed byte compares order, AVX2 having no unsigned one).
    bin_bias = 0

    def missing_bin(self, column) -> int:
        return 0

    def _search_buffer(self) -> None:
        self.b.buffer(self.search_table_name, search_table(self.thresholds, self.forest.threshold_dtype))

    def _columns(self, span0: Var, U: int) -> None:
        """The span's columns as bins, block by block: a register of values at a time, each
        column's bins found by walking its search tree (a loop a kind of column: zero counted
        as missing or not, the missing values' bin)."""
        b, c, i64, i32, L = self.b, Builder.const, "i64", "i32", self.lanes
        # A register of values a step of the search (AVX-512: 16 float32; AVX2: 8).
        V = min(L, self.form.bytes // np.dtype(self.forest.threshold_dtype).itemsize)
        D = search_depth(self.thresholds)
        self.block0 = Var("ob_b", i64)
        self.x_base = Bin("*", Bin("-", self.block0, span0), c(U, i64))
        self.acc_at = Bin("-", self.block0, span0)
        last = Bin("-", lir.ROW_END, c(1, i64))
        u = b.local("ob_u", i64)
        j = Var("ob_j", i64)
        feature = Cast(Load("ob_feature", u, i32), i64)
        xv_t, mv_t, iv_t = lir.vector_type(self.thr_t, V), lir.vector_type("i1", V), lir.vector_type(i32, V)
        # A register of values and its search path a part of the block binned side by side
        # (:meth:`_column_groups`); one pair where the parts go one after the other.
        side = min(L // V, self.form.bin_parts)
        regs = [(b.local("xs", xv_t), b.local("bin", iv_t)) for _ in range(side)]
        kinds: dict[tuple, list[int]] = {}
        for k, col in enumerate(self.facts.columns):
            # (a column walks a search tree of its own depth: CatBoost's CTR columns have a few
            # thresholds where its float features have up to 254)
            kinds.setdefault((col.zero_missing, self.missing_bin(col), column_depth(self.thresholds[k])), []).append(k)
        loops = []
        for (zero_missing, missing_bin, depth), ks in kinds.items():
            # A full block bins every group without a test (a test a group cost large calls
            # about an eighth); a block a call fills in part skips the groups it brings no rows.
            args = (zero_missing, missing_bin, feature, regs, u, V, D, depth, xv_t, mv_t, iv_t, last)
            # (a block a call fills in part: side by side within a group of rows only, so a
            # call of 16 rows bins 16)
            full, part = self._column_groups(*args), self._column_groups(*args, max(1, SUM_LANES // V))
            guarded = part[0][1] + [If(Cmp("<", Bin("+", self.block0, c(k0, i64)), lir.ROW_END), stmts)
                                    for k0, stmts in part[1:]]
            if ks == list(range(ks[0], ks[-1] + 1)):  # consecutive columns: a loop over them
                loops.append(If(Cmp("<=", Bin("+", self.block0, c(L, i64)), lir.ROW_END),
                                [For(u, c(ks[0], i64), c(ks[-1] + 1, i64), 1, [s for _, stmts in full for s in stmts])],
                                [For(u, c(ks[0], i64), c(ks[-1] + 1, i64), 1, guarded)]))
                continue
            # (kinds interleave: a loop over a table of the kind's columns)
            table = f"ob_kind{len(loops)}"
            self.b.buffer(table, np.asarray(ks, dtype=np.int32))
            pick = Assign(u, Cast(Load(table, j, i32), i64))
            loops.append(If(Cmp("<=", Bin("+", self.block0, c(L, i64)), lir.ROW_END),
                            [For(j, c(0, i64), c(len(ks), i64), 1, [pick] + [s for _, stmts in full for s in stmts])],
                            [For(j, c(0, i64), c(len(ks), i64), 1, [pick] + guarded)]))
        b.emit(self._blocks(span0, loops))

    def _column_groups(self, zero_missing, missing_bin, feature, regs, u, V, D, depth, xv_t, mv_t, iv_t,
                       last, most: int | None = None) -> list:
        """One kind of column's binning statements for a block, in groups of :data:`SUM_LANES`
        rows: (the group's first lane, its statements).  The block's registers of values
        (``V`` rows each) are binned ``len(regs)`` (at most ``most``) at a time with their
        search levels interleaved (``form.bin_parts``, :class:`.cost.Shape`), in a group: a
        search is a chain of dependent permutes, compares and gathers, and AVX2's out-of-order
        window overlapped consecutive registers' chains too little."""
        c, i64, L = Builder.const, "i64", self.lanes
        side = min(len(regs), most or len(regs))
        groups: list[tuple[int, list]] = []
        parts = []
        for part in range(L // V):
            x, idx = regs[part % side]
            rows = [Bin("min", Bin("+", self.block0, c(part * V + k, i64)), last) for k in range(V)]
            steps = [Assign(x, Vector(tuple(
                Load("rows", Bin("+", Bin("*", r, lir.ROW_STRIDE), Bin("*", feature, lir.COL_STRIDE)), self.thr_t)
                for r in rows))), Assign(idx, Builder.const(0, iv_t))]
            base = Bin("*", u, c((1 << D) - 1, i64))
            for d in range(depth):
                t = Lookup(self.search_table_name, Bin("+", base, c((1 << d) - 1, i64)), idx, 1 << d, xv_t)
                step = Select(Cmp(">=", x, t, mv_t), Builder.const(1, iv_t), Builder.const(0, iv_t))
                steps.append(Assign(idx, Bin("+", Bin("+", idx, idx), step)))
            missing = lir.IsNan(x, mv_t)
            if zero_missing:
                small = Bin("&", Cmp(">=", x, Builder.const(-ZERO_THRESHOLD, xv_t), mv_t),
                            Cmp("<=", x, Builder.const(ZERO_THRESHOLD, xv_t), mv_t))
                missing = Bin("|", missing, small)
            value = Select(missing, Builder.const(missing_bin + self.bin_bias, iv_t),
                           Bin("+", idx, Builder.const(1 + self.bin_bias, iv_t)))
            steps.append(Store("ob_x", Bin("+", Bin("+", self.x_base, Bin("*", u, c(L, i64))), c(part * V, i64)),
                               Cast(value, lir.vector_type(self.column_t, V))))
            parts.append(steps)
            if len(parts) == side:
                first = (part + 1 - side) * V
                if not groups or first % SUM_LANES == 0:  # a group of 16 rows (or more, side by side)
                    groups.append((first, []))
                groups[-1][1].extend(s for step in zip(*parts) for s in step)
                parts = []
        return groups


__all__ = ["MAX_BINS", "BinColumns", "search_depth", "search_table"]

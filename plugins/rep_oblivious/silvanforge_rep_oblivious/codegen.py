"""The program of the oblivious representation (LIR from :class:`.symmetric.Facts`).

One phase, parallel over rows, in blocks of ``lanes`` rows (one SIMD lane a row):

1. the block's columns: each feature the splits read, copied from the rows into a local array
   of ``lanes`` values (missing values as the column's kind says, :class:`.symmetric.Column`);
2. per group of trees (:class:`.symmetric.Group`), a loop over its trees in model order: per
   level (unrolled to the group's depth) one vector compare of the level's column with its
   threshold, whose lanes set bit ``level`` of the leaf index (a masked OR); then the leaf
   values added to the accumulators: a lane's leaf value (single-output trees) or its vector of
   the tree's outputs (several) loaded and added to the lane's accumulator, in a second pass
   over the chunk's stored leaf indices (SCALAR_SUMS); one-row blocks gather an output each;
3. the accumulators stored to the margins.

Levels past a tree's depth compare with a NaN threshold: false, so their bits stay 0.  Each
output's sum starts from the base score and adds its trees in model order, as the reference
does, so margins are exact (an averaged forest's from zero, divided by its divisor and the base
score added after its trees: CatBoost's bias is added so).
"""

from __future__ import annotations

import numpy as np

from silvanforge.ir import hir, lir
from silvanforge.ir.hir import ZERO_THRESHOLD, Aggregation
from silvanforge.ir.lir import (Assign, Bin, Buffer, Builder, Cast, Cmp, Extract, For, Gather, If, IsNan,
                               Load, Prefetch, Select, Store, Var, Vector)
from silvanforge.lowering.walksetup import thread_info
from silvanforge.lowering.walkcost import WALK_STEP_NS

from . import cost
from .options import DEFAULT, ObliviousOptions
from .symmetric import Facts, alike_groups, leaf_table, leaves_are_indices

NAME = "oblivious"
GATHERS = True
# Single-output trees add each lane's leaf value by a scalar load into a scalar accumulator a
# lane (16 registers) instead of gathering them: 1.1-1.2x faster on Zen 4 (300 trees of depth 6
# and 1000 of depth 8, 4096-row calls, the best of 10-15 rounds on a shared machine); trees of
# several outputs would need a register a lane and output, and gather.  The sums run in two
# phases a chunk of trees: the compares store every tree's leaf indices (ob_idx), then the adds
# read them back as scalars.  Moving each lane of the index vector to a register (vpextrd) was
# the loop's bottleneck (one port); loads are not (three a cycle): 1.3x on both models, with
# chunks whose leaf tables stay in L1 (the oblivious_chunk_bytes option, :mod:`.options`).
SCALAR_SUMS = True
# Lanes whose sums run together (a register accumulator each).
SUM_LANES = cost.SUM_LANES
# Trees of several outputs sum a vector of them a lane, this many values at a time in all
# (8 lanes of 8 outputs: 8 AVX-512 registers, 16 AVX2 ones).
SUM_VALUES = 64
# A forest of leaf indices keeps a span's indices of every tree (stored_indices) up to this size.
STORED_INDEX_BYTES = 256 << 10
# Columns copied from vectors of each row (row_vectors) prefetch the next block's rows at the
# features they read: a block's rows start eight streams the hardware prefetchers take a while
# to follow, and wide rows come from memory (the Bosch-shaped model's 3.9 KB rows, AVX2 code,
# 1 thread, Zen 4, forge bench's rotation of batches: 1.14x at 512 rows, 1.10x at 4,096; one
# batch over and over, from cache: 0.97x at 512, 1.04x at 4,096).
ROW_PREFETCH = True
# Features a vector of each row holds where columns are copied so: eight float32, the CPU
# target's transposes of eight rows (:mod:`silvanforge_target_cpu.transpose`), a block of 16
# rows' columns two of them side by side.
ROW_VECTOR_LANES = 8


class _Lowering:
    name = NAME
    function = "predict_oblivious"
    # Trees a block walks side by side (:meth:`_group`); a symmetric tree's levels do not wait
    # on each other, so one at a time.
    interleave = 1
    # Whether every leaf value is its leaf index (:meth:`_tables`; a subclass's tables, whose
    # indices are other than levels' bits, keep False).
    values_are_indices = False
    # What the two-phase sums store of a tree's leaf index (:meth:`_stored_leaf`): i32 indices
    # already offset to the tree's leaf table, or (a subclass's) the path itself.
    index_t = "i32"
    # A row goes right where ``x right_op t`` (its column's value, the level's threshold).
    right_op = ">="
    # Whether runs of consecutive features are copied from each row's vector (_feature_runs).
    row_vectors = False
    # Lanes of single-output trees whose two-phase sums one vector add makes (their leaves
    # loaded a lane at a time into it); 1: a scalar add a lane (a subclass's sums may differ).
    sum_width = 1

    def __init__(self, forest: hir.Forest, facts: Facts, lanes: int, options: ObliviousOptions = DEFAULT):
        self.forest, self.facts, self.lanes, self.options = forest, facts, lanes, options
        self.thr_t = lir.lir_type(forest.threshold_dtype)
        self.acc_t = lir.lir_type(forest.accumulate_dtype)
        self.buffers = {"rows": Buffer("rows", self.thr_t, "input"),
                        "margins": Buffer("margins", self.acc_t, "output")}
        self.b = Builder(self.buffers)
        # The block's columns hold column_t values (the rows' values; a subclass's bins).
        self.column_t = self.thr_t
        self.x_t = lir.vector_type(self.thr_t, lanes)
        self.mask_t = lir.vector_type("i1", lanes)
        self.idx_t = lir.vector_type("i32", lanes)
        # A tree's leaf index as its levels build it (path_t lanes), then as an i32 index.
        self.path_t = "i32"
        self.acc_v = lir.vector_type(self.acc_t, lanes)
        # An averaged forest sums its trees from zero, then divides and adds the base score
        # (CatBoost's bias, onnxruntime's base values: after the trees, as they add them).
        self.averaged = forest.aggregation is Aggregation.AVERAGE

    def splat(self, value, t: str) -> lir.Expr:
        return Builder.const(value, lir.vector_type(t, self.lanes))

    def vector(self, elems: tuple) -> lir.Expr:
        """Lane ``k`` is ``elems[k]``; one lane is the scalar itself (blocks of one row: scalar
        code, for one-row calls)."""
        return elems[0] if self.lanes == 1 else Vector(elems)

    def lane(self, v: lir.Expr, k: int) -> lir.Expr:
        return v if self.lanes == 1 else Extract(v, k)

    def gather(self, buffer: str, index: lir.Expr) -> lir.Expr:
        return Load(buffer, index, self.acc_t) if self.lanes == 1 else Gather(buffer, index, self.acc_v)

    def lower(self, batch_size: int | None) -> lir.Module:
        forest, facts, b, L = self.forest, self.facts, self.b, self.lanes
        c, i64 = Builder.const, "i64"
        self._tables()
        U = max(1, len(facts.columns))
        B, self.chunk = cost.span(facts, L, batch_size, self.options)
        if all(self._direct(group) for group in facts.groups):
            # (leaf indices: no leaf table to keep in cache for a span's blocks, and a span of
            # one block keeps every tree's indices, :data:`STORED_INDEX_BYTES`)
            B = 1
        self.span_rows = span_rows = B * L
        self.buffers["ob_x"] = Buffer("ob_x", self.column_t, "local", size=U * span_rows)
        K = sum(len(g.outputs) for g in facts.groups)
        self.buffers["ob_acc"] = Buffer("ob_acc", self.acc_t, "local", size=K * span_rows)
        span0 = b.local("s", i64)
        self.span_end = Bin("min", Bin("+", span0, c(span_rows, i64)), lir.ROW_END)
        body = b.push()
        self._columns(span0, U)
        self.slots = np.cumsum([0] + [len(g.outputs) for g in facts.groups])[:-1]
        gv = self._group_loop()
        # Alike groups of one leaf-index tree each (a forest of leaf indices) keep every tree's
        # indices for the span, then store each row's margins tree after tree: a row's are
        # contiguous, where a tree's are an output apart (the writes' bound).
        index_bytes = len(facts.groups) * span_rows * np.dtype(lir.LIR_TO_NUMPY[self.index_t]).itemsize
        self.stored_indices = gv is not None and self._direct(facts.groups[0]) and index_bytes <= STORED_INDEX_BYTES
        if self.stored_indices:
            self.buffers["ob_idx"] = Buffer("ob_idx", self.index_t, "local", size=len(facts.groups) * span_rows)
        if gv is None:
            for g, group in enumerate(facts.groups):
                self._group(g, group, span0)
        else:  # one loop over alike groups: their code once, not once a group
            b.push()
            self._group(gv, facts.groups[0], span0)
            b.emit(For(gv, c(0, i64), c(len(facts.groups), i64), 1, b.pop()))
        if self.stored_indices:
            self._stored_margins(span0)
        self._untouched_outputs(span0)
        b.pop()
        function_body = [For(span0, lir.ROW_BEGIN, lir.ROW_END, span_rows, body)]
        fn = lir.Function(self.function, function_body,
                          dict(b.locals), parallel="rows", row_parallel=True)
        estimate = self.estimate_ns(batch_size)
        module = lir.Module(
            functions=[fn], buffers=self.buffers, num_features=forest.num_features,
            num_outputs=forest.num_outputs, input_type=self.thr_t, output_type=self.acc_t,
            info={"summary": f"rep={self.name} trees={forest.num_trees} depth={int(facts.depth.max())} "
                             f"columns={len(facts.columns)} groups={len(facts.groups)} "
                             f"outputs={forest.num_outputs} lanes={L} span={span_rows} chunk={self.chunk}",
                  # Hardware gathers for the leaf values (the CPU target splits them into
                  # scalar loads on hosts LLVM does not tune as fast-gather, AMD Zen, otherwise).
                  "rep": self.name, "vector_walk": GATHERS, **thread_info(round(estimate / WALK_STEP_NS))})
        lir.verify(module)
        return module

    def estimate_ns(self, batch_size: int | None) -> float:
        return cost.estimate_ns(self.facts, batch_size)

    def _untouched_outputs(self, span0: Var) -> None:
        """Outputs no tree adds to: their margins are the base score."""
        c, i64, L = Builder.const, "i64", self.lanes
        covered = {o for g in self.facts.groups for o in g.outputs}
        C = self.forest.num_outputs
        stores = []
        for o in range(C):
            if o in covered:
                continue
            for k in range(L):
                row = Bin("+", self.block0, c(k, i64))
                stores.append(If(Cmp("<", row, lir.ROW_END), [Store(
                    "margins", Bin("+", Bin("*", row, c(C, i64)), c(o, i64)), Load("ob_base", c(o, i64), self.acc_t))]))
        if stores:
            self.b.emit(self._blocks(span0, stores))

    def _group_loop(self) -> Var | None:
        """A loop variable over the groups where they are alike (one output each, the same
        depth and number of trees, every per-group number a step apart: XGBoost's multi-class
        models, a group a class), so their code is emitted once: 8 groups of 78 columns' selects
        took 33 s to compile.  None: a group's code each."""
        if not alike_groups(self.facts.groups):
            return None
        for values in self._group_values():
            steps = np.diff(np.asarray(values, np.int64))
            if steps.size and (steps != steps[0]).any():
                return None
        return Var("ob_g", "i64")

    def _group_values(self) -> list:
        """The per-group numbers the code of a group reads (:meth:`_at`)."""
        return [self.first[:-1], self.first[1:], self.level_base, self.slots,
                [g.outputs[0] for g in self.facts.groups]] + self._group_extra()

    def _group_extra(self) -> list:
        return []

    @staticmethod
    def _at(values, g) -> lir.Expr:
        """``values[g]``: a constant for a group's own code, else (``g`` the groups' loop
        variable; the values a step apart) ``values[0] + g * step``."""
        c = Builder.const
        if not isinstance(g, Var):
            return c(int(values[g]), "i64")
        step = int(values[1]) - int(values[0])
        return Bin("+", c(int(values[0]), "i64"), Bin("*", g, c(step, "i64")))

    def _tables(self) -> None:
        """Per tree (in group order) and level: the column's offset in ob_x and the threshold;
        per tree the first element of its leaf values; the base scores."""
        facts, b, L = self.facts, self.b, self.lanes
        order = np.concatenate([g.trees for g in facts.groups])
        self.first = np.cumsum([0] + [len(g.trees) for g in facts.groups])  # each group's first position
        self.level_base = []  # each group's first table element, less its first position's levels
        cols, thrs, at = [], [], 0
        for g, group in enumerate(facts.groups):
            D = max(group.depth, 1)
            column = facts.column[group.trees][:, :D]
            cols.append(np.where(column >= 0, column * L, 0).reshape(-1))
            thrs.append(facts.threshold[group.trees][:, :D].reshape(-1))
            self.level_base.append(at - int(self.first[g]) * D)
            at += column.size
        b.buffer("ob_column", np.concatenate(cols).astype(np.int32))
        b.buffer("ob_threshold", np.concatenate(thrs).astype(lir.LIR_TO_NUMPY[self.column_t]))
        leaves, base = leaf_table(self.forest, self._leaf_facts(), self.forest.accumulate_dtype)
        # (a forest of leaf indices, :mod:`silvanforge.frontend.outputs`, whose leaf values are
        # the index its levels build: the sums add the index itself, no table read)
        self.values_are_indices = leaves_are_indices(leaves, base, self._leaf_facts().depth, self.facts.groups)
        b.buffer("ob_leaf", leaves)
        b.buffer("ob_leaf_base", base[order].astype(np.int32))
        b.buffer("ob_base", np.asarray(self.forest.base_score, dtype=self.forest.accumulate_dtype))
        b.buffer("ob_feature", np.array([col.feature for col in facts.columns] or [0], np.int32))

    def _leaf_facts(self) -> Facts:
        """The facts whose depths the leaf tables have: each tree's own (levels past it
        compare false, leaving their bits 0)."""
        return self.facts

    def _blocks(self, span0: Var, body: list) -> For:
        """``body`` for each block of the span (``ob_b``: the block's first row)."""
        return For(self.block0, span0, self.span_end, self.lanes, body)

    def _columns(self, span0: Var, U: int) -> None:
        """The span's columns, block by block (a block's columns are ``U`` runs of ``lanes``
        values), one loop per kind (the columns are sorted by kind)."""
        b, c, i64, L = self.b, Builder.const, "i64", self.lanes
        self.block0 = Var("ob_b", i64)
        # Where the block's columns start in ob_x (and its lanes in ob_acc: a run of the span's rows).
        self.x_base = Bin("*", Bin("-", self.block0, span0), c(U, i64))
        self.acc_at = Bin("-", self.block0, span0)
        last = Bin("-", lir.ROW_END, c(1, i64))
        # Lanes past the batch's end read its last row and are never stored.
        lane_rows = [Bin("min", Bin("+", self.block0, c(k, i64)), last) for k in range(L)]
        u = Var("ob_u", i64)
        feature = Cast(Load("ob_feature", u, "i32"), i64)
        x = b.local("x", self.x_t)
        read = Assign(x, self.vector(tuple(
            Load("rows", Bin("+", Bin("*", r, lir.ROW_STRIDE), Bin("*", feature, lir.COL_STRIDE)), self.thr_t)
            for r in lane_rows)))
        kinds: dict[tuple, list[int]] = {}
        for k, col in enumerate(self.facts.columns):
            kinds.setdefault((col.nan_right, col.zero_missing), []).append(k)
        loops = []
        for (nan_right, zero_missing), ks in kinds.items():
            missing = IsNan(x, self.mask_t)
            if zero_missing:
                small = Bin("&", Cmp(">=", x, self.splat(-ZERO_THRESHOLD, self.thr_t), self.mask_t),
                            Cmp("<=", x, self.splat(ZERO_THRESHOLD, self.thr_t), self.mask_t))
                missing = Bin("|", missing, small)
            value = x
            if nan_right or zero_missing:
                value = Select(missing, self.splat(np.inf if nan_right else np.nan, self.thr_t), x)
            store = Store("ob_x", Bin("+", self.x_base, Bin("*", u, c(L, i64))), value)
            whole = For(u, c(ks[0], i64), c(ks[-1] + 1, i64), 1, [read, store])
            runs = self._feature_runs(ks) if self.row_vectors and L > 1 else []
            if not runs:
                loops.append(whole)
                continue
            W = self.row_width
            row_t = lir.vector_type(self.thr_t, W)
            rows = [b.local("xr", row_t) for _ in range(L)]
            at = [Assign(row, Load("rows", Bin("+", Bin("*", r, lir.ROW_STRIDE), feature), row_t))
                  for row, r in zip(rows, lane_rows)]
            # The next block's rows at the same features asked for meanwhile (see ROW_PREFETCH).
            ahead = [Prefetch("rows", Bin("+", Bin("*", Bin("min", Bin("+", self.block0, c(L + k, i64)), last),
                                                        lir.ROW_STRIDE), feature))
                     for k in range(L)] if ROW_PREFETCH else []
            fast = []
            for lo, hi, vector in runs:
                if not vector:
                    fast.append(For(u, c(lo, i64), c(hi, i64), 1, [read, store]))
                    continue
                body = ahead + at
                for j in range(W):
                    column = Bin("+", u, c(j, i64))
                    body += [Assign(x, Vector(tuple(Extract(row, j) for row in rows))),
                             Store("ob_x", Bin("+", self.x_base, Bin("*", column, c(L, i64))), value)]
                fast.append(For(u, c(lo, i64), c(hi, i64), W, body))
            loops.append(If(Cmp("==", lir.COL_STRIDE, c(1, i64)), fast, [whole]))
        b.emit(self._blocks(span0, loops))

    @property
    def row_width(self) -> int:
        """Features a vector of each row holds where columns are copied from them
        (``row_vectors``): a block's lanes, at most ROW_VECTOR_LANES."""
        return min(self.lanes, ROW_VECTOR_LANES)

    def _feature_runs(self, ks: list) -> list:
        """Columns ``ks`` (consecutive) as ranges ``(lo, hi, vector)``: ``vector`` where the
        range's columns are whole runs of ``row_width`` consecutive features (each row's read
        as vectors, transposed in registers: one load a row where a column took a load a row),
        else read a value at a time.  Empty where no run is that long."""
        L = self.row_width
        features = np.array([self.facts.columns[k].feature for k in ks])
        breaks = np.flatnonzero(np.diff(features) != 1) + 1
        out, start = [], ks[0]
        for seg in np.split(np.asarray(ks), breaks):
            whole = len(seg) // L * L
            if whole:
                if seg[0] > start:
                    out.append((start, int(seg[0]), False))
                out.append((int(seg[0]), int(seg[0]) + whole, True))
                start = int(seg[0]) + whole
        if not out:
            return []
        if start <= ks[-1]:
            out.append((start, ks[-1] + 1, False))
        return out

    def _leaf_index(self, t: Var, g: int, group, idx: Var) -> list:
        """Statements setting bit ``level`` of ``idx`` where a lane's row goes right at tree
        ``t``'s level (its position in group ``g``): one vector compare a level."""
        c, i64, i32, L = Builder.const, "i64", "i32", self.lanes
        D = max(group.depth, 1)
        start = Bin("+", Bin("*", t, c(D, i64)), self._at(self.level_base, g))
        body = []
        for level in range(group.depth):
            at = Bin("+", start, c(level, i64))
            x = Load("ob_x", Bin("+", self.x_base, Cast(Load("ob_column", at, i32), i64)), self.x_t)
            thr = self.vector((Load("ob_threshold", at, self.column_t),) * L)
            body.append(Assign(idx, self._with_bit(idx, Cmp(self.right_op, x, thr, self.mask_t), level)))
        return body

    def _with_bit(self, idx: Var, right: lir.Expr, level: int) -> lir.Expr:
        """``idx`` with bit ``level`` set in the lanes going ``right`` (a masked OR on AVX-512)."""
        return Select(right, Bin("|", idx, self.splat(1 << level, self.path_t)), idx)

    def _direct(self, group) -> bool:
        """Whether ``group`` is one tree whose values are its leaf indices, on a zero base
        score (a forest of leaf indices: an output a tree): each lane's index is then stored
        as its margin, no sums kept."""
        return SCALAR_SUMS and self.lanes > 1 and self.values_are_indices and len(group.trees) == 1 and \
            self.forest.aggregation is Aggregation.SUM and not np.asarray(self.forest.base_score).any()

    def _stored_margins(self, span0: Var, first: int = 0) -> None:
        """The span's margins from every tree's stored index (``stored_indices``), a row at a
        time: tree ``p``'s output the alike groups' ``p``-th (trees from ``first``)."""
        c, i64, L = Builder.const, "i64", self.lanes
        p, C = Var("ob_p", i64), self.forest.num_outputs
        output = self._at([grp.outputs[0] for grp in self.facts.groups], p)
        at = Bin("+", Bin("*", p, c(self.span_rows, i64)), self.acc_at)
        rows = [Bin("+", self.block0, c(k, i64)) for k in range(L)]
        self.b.emit(self._blocks(span0, [If(Cmp("<", row, lir.ROW_END), [For(p, c(first, i64), c(len(self.facts.groups), i64), 1, [
            Store("margins", Bin("+", Bin("*", row, c(C, i64)), output), self._leaf_value(p, at, k, 1, self.acc_t))])])
            for k, row in enumerate(rows)]))

    def _group(self, g: int | Var, group, span0: Var) -> None:
        """The group's trees, in model order, a chunk of trees at a time over the span's blocks
        (a chunk's leaf tables stay in cache while every block reads them); the sums wait in
        ob_acc between chunks (from the group's first output's slot there).  ``g``: the group,
        or the loop variable over alike groups (``group`` then the first of them)."""
        b, c, i64, i32, L = self.b, Builder.const, "i64", "i32", self.lanes
        K = len(group.outputs)
        span_rows = self.span_rows
        slot = self._at(self.slots, g)
        if isinstance(g, Var):
            outputs = [self._at([grp.outputs[0] for grp in self.facts.groups], g)]
        else:
            outputs = [c(o, i64) for o in group.outputs]

        def acc_index(j):
            return Bin("+", Bin("*", Bin("+", slot, c(j, i64)), c(span_rows, i64)), self.acc_at)

        name = "g" if isinstance(g, Var) else g
        t, chunk = Var(f"ob_t{name}", i64), Var(f"ob_c{name}", i64)
        two_phase = SCALAR_SUMS and L > 1
        direct = self._direct(group)
        # where a tree's indices are stored: its chunk's, or the span's (stored_indices)
        idx_at = (lambda tt: Bin("+", Bin("*", tt, c(span_rows, i64)), self.acc_at)) if self.stored_indices else \
            (lambda tt: Bin("*", Bin("-", tt, chunk), c(L, i64)))
        if not direct:
            # A sum starts from the base score; an average from zero, the base added at the end
            # (as the reference does: CatBoost adds its bias after its trees' sum).
            b.emit(self._blocks(span0, [
                Store("ob_acc", acc_index(j), self.vector(
                    (c(0.0, self.acc_t) if self.averaged else Load("ob_base", o, self.acc_t),) * L))
                for j, o in enumerate(outputs)]))
        if two_phase and "ob_idx" not in self.buffers:
            self.buffers["ob_idx"] = Buffer("ob_idx", self.index_t, "local", size=self.chunk * L)
        if two_phase:
            # a lane's sums: a scalar (one output) or a vector of the K outputs, whose leaf
            # values lie side by side in ob_leaf (one load a tree, not a gather an output)
            # (single-output trees: sum_width lanes' sums a vector)
            width = self.sum_width if K == 1 else 1
            lane_t = self.acc_t if K == 1 else lir.vector_type(self.acc_t, K)
            lanes = [b.local("accl", lane_t if width == 1 else lir.vector_type(self.acc_t, width))
                     for _ in range(L // width)]
        else:
            accs = [b.local("acc", self.acc_v) for _ in group.outputs]

        def trees(ts: list) -> list:
            """Trees ``ts``' leaf indices, stored (two phases) or their leaves added: their
            levels interleaved (a levelwise tree's levels wait on each other, so walking trees
            side by side hides that latency), each tree's sums in model order."""
            idxs = [b.local("idx", lir.vector_type(self.path_t, L)) for _ in ts]
            levels = [self._leaf_index(tt, g, group, idx) for tt, idx in zip(ts, idxs)]
            body = [Assign(idx, self.splat(0, self.path_t)) for idx in idxs]
            body += [s for step in zip(*levels) for s in step]
            for tt, idx in zip(ts, idxs):
                if two_phase and self.index_t != i32:
                    body.append(Store("ob_idx", idx_at(tt), idx))
                    continue
                leaf = b.local("leaf", self.idx_t)
                first = self.vector((Load("ob_leaf_base", tt, i32),) * L)
                if self.path_t != i32:
                    idx = Cast(idx, self.idx_t)
                body.append(Assign(leaf, Bin("+", idx if K == 1 else Bin("*", idx, self.splat(K, i32)), first)))
                if two_phase:
                    body.append(Store("ob_idx", idx_at(tt), leaf))
                elif self.values_are_indices:  # (see _leaf_value)
                    body.append(Assign(accs[0], Bin("+", accs[0], Cast(idx, self.acc_v))))
                else:
                    for j, acc in enumerate(accs):
                        at = leaf if j == 0 else Bin("+", leaf, self.splat(j, i32))
                        body.append(Assign(acc, Bin("+", acc, self.gather("ob_leaf", Cast(at, i64) if L == 1 else at))))
            return body

        end = self._at(self.first[1:], g)
        stop = Bin("min", Bin("+", chunk, c(self.chunk, i64)), end)
        W = self.interleave
        if W > 1:
            whole = Bin("+", chunk, Bin("*", Bin("/", Bin("-", stop, chunk), c(W, i64)), c(W, i64)))
            walks = [For(t, chunk, whole, W, trees([t] + [Bin("+", t, c(k, i64)) for k in range(1, W)])),
                     For(t, whole, stop, 1, trees([t]))]
        else:
            walks = [For(t, chunk, stop, 1, trees([t]))]
        if two_phase:
            # Phase one stores each tree's leaf indices (a run of L a tree); phase two adds the
            # leaves a lane, reading the indices back from memory (see SCALAR_SUMS).
            # A register accumulator a lane, SUM_LANES lanes at a time (wider blocks would spill).
            at_idx = idx_at(t)
            block = list(walks)
            # (several outputs: fewer lanes at a time, their vectors in the registers)
            step = SUM_LANES if K == 1 else max(1, min(SUM_LANES, SUM_VALUES // K))
            C = self.forest.num_outputs
            for k in range(L) if direct and not self.stored_indices else ():  # (the row checked once)
                row = Bin("+", self.block0, c(k, i64))
                block.append(If(Cmp("<", row, lir.ROW_END), [For(t, chunk, stop, 1, [
                    Store("margins", Bin("+", Bin("*", row, c(C, i64)), outputs[0]),
                          self._leaf_value(t, at_idx, k, K, self.acc_t))])]))
            for k0 in range(0, L, step) if not direct else ():
                ks = range(k0, min(L, k0 + step))
                if width > 1:  # a vector add of ``width`` lanes' leaves, each lane's sum in model order
                    sets = range(k0 // width, min(L, k0 + step) // width)
                    vt = lir.vector_type(self.acc_t, width)
                    sums = [Assign(lanes[q], Bin("+", lanes[q], Vector(tuple(
                        self._leaf_value(t, at_idx, q * width + j, 1, self.acc_t) for j in range(width)))))
                            for q in sets]
                    load = [Assign(lanes[q], Load("ob_acc", Bin("+", acc_index(0), c(q * width, i64)), vt)) for q in sets]
                    save = [Store("ob_acc", Bin("+", acc_index(0), c(q * width, i64)), lanes[q]) for q in sets]
                elif K == 1:
                    sums = [Assign(lanes[k], Bin("+", lanes[k], self._leaf_value(t, at_idx, k, K, lane_t))) for k in ks]
                    load = [Assign(lanes[k], Load("ob_acc", Bin("+", acc_index(0), c(k, i64)), self.acc_t)) for k in ks]
                    save = [Store("ob_acc", Bin("+", acc_index(0), c(k, i64)), lanes[k]) for k in ks]
                else:
                    sums = [Assign(lanes[k], Bin("+", lanes[k], self._leaf_value(t, at_idx, k, K, lane_t))) for k in ks]
                    load = [Assign(lanes[k], Vector(tuple(Load("ob_acc", Bin("+", acc_index(j), c(k, i64)), self.acc_t)
                                                          for j in range(K)))) for k in ks]
                    save = [Store("ob_acc", Bin("+", acc_index(j), c(k, i64)), Extract(lanes[k], j))
                            for k in ks for j in range(K)]
                part = load + [For(t, chunk, stop, 1, sums)] + save
                # A block wider than SUM_LANES sums only the lanes a call's rows fill (64-row
                # byte blocks answering 17-63 rows).
                block += part if k0 == 0 else [If(Cmp("<", Bin("+", self.block0, c(k0, i64)), lir.ROW_END), part)]
        else:
            load = [Assign(acc, Load("ob_acc", acc_index(j), self.acc_v)) for j, acc in enumerate(accs)]
            save = [Store("ob_acc", acc_index(j), acc) for j, acc in enumerate(accs)]
            block = load + walks + save
        b.emit(For(chunk, self._at(self.first[:-1], g), end, self.chunk, [self._blocks(span0, block)]))
        if direct:
            return
        C = self.forest.num_outputs
        stores = []
        for j, o in enumerate(outputs):
            acc = Load("ob_acc", acc_index(j), self.acc_v)
            for k in range(L):
                row = Bin("+", self.block0, c(k, i64))
                value = self.lane(acc, k)
                if self.averaged:
                    value = Bin("+", Bin("/", value, c(float(self.forest.average_divisor), self.acc_t)),
                                Load("ob_base", o, self.acc_t))
                stores.append(If(Cmp("<", row, lir.ROW_END),
                                 [Store("margins", Bin("+", Bin("*", row, c(C, i64)), o), value)]))
        b.emit(self._blocks(span0, stores))

    def _leaf_value(self, t: Var, at: lir.Expr, lane: int, K: int, lane_t: str) -> lir.Expr:
        """Lane ``lane``'s leaf value (values) of tree ``t``, phase one having stored its leaf
        index from ``at`` of ob_idx: read from ob_leaf, or where every value is its index
        (``values_are_indices``) the index itself."""
        where = self._stored_leaf(t, at, lane, K)
        if self.values_are_indices:
            return Cast(Bin("-", where, Cast(Load("ob_leaf_base", t, "i32"), "i64")), lane_t)
        return Load("ob_leaf", where, lane_t)

    def _stored_leaf(self, t: Var, at: lir.Expr, lane: int, K: int = 1) -> lir.Expr:
        """Where in ob_leaf lane ``lane``'s leaf of tree ``t`` (of ``K`` outputs) is, phase one
        having stored the tree's leaf indices (times K, offset) from ``at`` of ob_idx."""
        return Cast(Load("ob_idx", Bin("+", at, Builder.const(lane, "i64")), "i32"), "i64")


def lower(forest: hir.Forest, facts: Facts, batch_size: int | None = None, lanes: int | None = None,
          options: ObliviousOptions = DEFAULT, vectors=None) -> lir.Module:
    """The LIR module of ``forest`` (symmetric, :func:`.symmetric.recognise` gave ``facts``)
    for ``batch_size`` rows a call (None: large batches); ``lanes`` rows a block (None: the
    cost model's choice, :func:`.cost.lanes`); ``options``: the representation's
    (:mod:`.options`).  One program for every vector unit (``vectors``): its 16-lane blocks
    ran within 1.14x as fast a row on AVX2 code as on AVX-512 (:data:`.cost.SYMMETRIC_FACTORS`)."""
    return _Lowering(forest, facts, lanes or cost.lanes(forest, batch_size), options).lower(batch_size)


__all__ = ["NAME", "lower"]

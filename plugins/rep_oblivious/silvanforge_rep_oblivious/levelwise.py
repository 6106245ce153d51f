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

import numpy as np

from silvanforge.ir import lir
from silvanforge.ir.lir import Assign, Bin, Builder, Cast, Cmp, Gather, Load, Lookup, Select, Var, Vector

from . import cost
from .codegen import _Lowering
from .complete import NAN_RIGHT, LevelFacts
from .options import DEFAULT
from .symmetric import leaf_table

NAME = "levelwise"
PICK_COLUMNS = cost.PICK_COLUMNS


class LevelLowering(_Lowering):
    name = NAME
    function = "predict_levelwise"
    interleave = 4

    def estimate_ns(self, batch_size: int | None) -> float:
        return cost.levelwise_ns(self.facts, batch_size)

    @property
    def nan_right(self) -> bool:
        """Whether any node sends missing values right (else a compare alone decides)."""
        return bool((self.facts.column & NAN_RIGHT).any())

    def _tables(self) -> None:
        """Per tree (in group order) its level tables: ``2**depth - 1`` columns and thresholds
        (the group's depth), a vector's worth of padding after the last (a lookup loads whole
        vectors); per tree the first element of its leaf values; the base scores."""
        facts, b, L = self.facts, self.b, self.lanes
        order = np.concatenate([g.trees for g in facts.groups])
        self.first = np.cumsum([0] + [len(g.trees) for g in facts.groups])
        self.level_base, self.width = [], []
        cols, thrs, at = [], [], 0
        for g, group in enumerate(facts.groups):
            S = (1 << max(group.depth, 1)) - 1
            cols.append(facts.column[group.trees][:, :S].reshape(-1))
            thrs.append(facts.threshold[group.trees][:, :S].reshape(-1))
            self.level_base.append(at - int(self.first[g]) * S)
            self.width.append(S)
            at += len(group.trees) * S
        pad = max(L, 16)
        thr_dtype = np.dtype(self.forest.threshold_dtype)
        b.buffer("lw_column", np.concatenate(cols + [np.zeros(pad, np.int64)]).astype(np.int32))
        b.buffer("lw_threshold", np.concatenate(thrs + [np.zeros(pad, thr_dtype)]).astype(thr_dtype))
        leaves, base = leaf_table(self.forest, facts, self.forest.accumulate_dtype)
        b.buffer("ob_leaf", leaves)
        b.buffer("ob_leaf_base", base[order].astype(np.int32))
        b.buffer("ob_base", np.asarray(self.forest.base_score, dtype=self.forest.accumulate_dtype))
        b.buffer("ob_feature", np.array([col.feature for col in facts.columns] or [0], np.int32))

    def _column_value(self, column: lir.Expr) -> lir.Expr:
        """Each lane's value of its column (``column``: an ``i32`` vector of column indices, or
        a scalar: every lane's) from the block's columns in ob_x."""
        c, i64, i32, L = Builder.const, "i64", "i32", self.lanes
        if L == 1 or lir.lanes_of(column.type) == 1:
            return Load("ob_x", Bin("+", self.x_base, Bin("*", Cast(column, i64), c(L, i64))), self.x_t)
        U = max(1, len(self.facts.columns))
        if U > PICK_COLUMNS:
            lanes = Vector(tuple(Bin("+", self.x_base, c(k, i64)) for k in range(L)))
            index = Bin("+", Bin("*", Cast(column, lir.vector_type(i64, L)), self.splat(L, i64)), lanes)
            return Gather("ob_x", index, self.x_t)
        span = 1
        while span < U:
            span *= 2

        def pick(lo: int, size: int):
            if lo >= U:
                return None
            if size == 1:
                return Load("ob_x", Bin("+", self.x_base, c(lo * L, i64)), self.x_t)
            low, high = pick(lo, size // 2), pick(lo + size // 2, size // 2)
            if high is None:
                return low
            bit = Cmp("!=", Bin("&", column, self.splat(size // 2, i32)), self.splat(0, i32), self.mask_t)
            return Select(bit, high, low)

        return pick(0, span)

    def _leaf_index(self, t: Var, g: int, group, idx: Var) -> list:
        """Statements setting bit ``level`` of ``idx`` where a lane's row goes right at its
        node of that level: the node's column entry and threshold looked up by the path so far."""
        c, i64, i32, L = Builder.const, "i64", "i32", self.lanes
        start = Bin("+", Bin("*", t, c(self.width[g], i64)), c(self.level_base[g], i64))
        body = []
        for level in range(group.depth):
            at = Bin("+", start, c((1 << level) - 1, i64))
            if level == 0 or L == 1:
                where = Bin("+", at, c(0, i64) if level == 0 else Cast(idx, i64))
                entry = Load("lw_column", where, i32)
                thr = self.vector((Load("lw_threshold", where, self.thr_t),) * L)
            else:
                size = 1 << level
                entry = Lookup("lw_column", at, idx, size, lir.vector_type(i32, L))
                thr = Lookup("lw_threshold", at, idx, size, self.x_t)
            x = self._column_value(Bin("&", entry, c(NAN_RIGHT - 1, entry.type)))
            right = Cmp(">=", x, thr, self.mask_t)
            if self.nan_right:
                flag = Cmp("!=", Bin("&", entry, c(NAN_RIGHT, entry.type)), c(0, entry.type),
                           lir.vector_type("i1", lir.lanes_of(entry.type)))
                if L > 1 and lir.lanes_of(entry.type) == 1:
                    flag = self.vector((flag,) * L)
                right = Bin("|", right, Bin("&", lir.IsNan(x, self.mask_t), flag))
            body.append(Assign(idx, Select(right, Bin("|", idx, self.splat(1 << level, i32)), idx)))
        return body

def lower(forest, facts: LevelFacts, batch_size: int | None = None, lanes: int | None = None,
          options=None) -> lir.Module:
    """The LIR module of ``forest`` (:func:`.complete.recognise` gave ``facts``) for
    ``batch_size`` rows a call (None: large batches); ``lanes`` rows a block (None: the cost
    model's choice, :func:`.cost.levelwise_lanes`)."""
    L = lanes or cost.levelwise_lanes(forest, batch_size)
    return LevelLowering(forest, facts, L, options or DEFAULT).lower(batch_size)


__all__ = ["NAME", "lower"]

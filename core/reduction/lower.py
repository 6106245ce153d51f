"""Reductions as LIR: how a leaf's value reaches the margins.  The margins' initial values and
their finalisation (averaging, an empty min/max), ``reduce`` (a leaf value into the margins or
into a privatised buffer, by a plain or atomic add, or the aggregation's min/max), and
``reduce_dimension[_inplace]`` (the slices of a privatised buffer folded into the margins, or
into its first slice); the MIR operations are :mod:`.ops`, their legalisation :mod:`.legalize`.

:class:`ReductionLowering` is a mixin of :class:`silvanforge.lowering.walkgen.WalkGenerator`, which owns
the state it reads: ``b`` (the builder), ``c``, ``expr``, ``forest``, ``layout``, ``reps`` (the
representation's instance), ``acc_t``, ``K`` (outputs), ``private`` (privatised buffer -> slice
extents) and ``placement`` (whose ``slot_index`` and ``fold_rows`` it calls, so a GPU placement
can index slots and spread folds its own way)."""

from __future__ import annotations

import numpy as np

from silvanforge.lowering import linear_leaves
from silvanforge.ir import lir, mir
from silvanforge.ir.hir import Aggregation
from silvanforge.ir.lir import Assign, Bin, Builder, Cast, Cmp, For, If, IsNan, Select, Store, Var, fold_index
from silvanforge.reduction.legalize import identity

# Outputs whose ordered folds (orderedReduce) keep a running sum each in registers.
ORDERED_FOLD_OUTPUTS = 16

__all__ = ["ReductionLowering"]


class ReductionLowering:
    """The margins and the partial-sum buffers: their indexing, initialisation, reductions, folds
    and finalisation."""

    def _outputs_plan(self):
        b, trees = self.b, self.forest.trees
        if all(len(t.outputs) == 1 for t in trees):
            self.single_output = True
            if self.K > 1:
                b.buffer("tree_output", np.array([t.outputs[0] for t in trees], dtype=np.int32))
        else:
            self.single_output = False
            # Every tree adds to every output in order (vector leaves: XGBoost's multi-output
            # trees, random forests' class votes): a loop of constant trip over the outputs,
            # which LLVM unrolls and vectorises, instead of reading each tree's output list
            # (1.12-1.19x on a 10-class random forest and 5-output XGBoost trees, Zen 4).
            self.all_outputs = all(t.outputs == tuple(range(self.K)) for t in trees)
            if self.all_outputs:
                return self._base_score()
            begin = np.cumsum([0] + [len(t.outputs) for t in trees]).astype(np.int32)
            ids = np.concatenate([np.asarray(t.outputs, dtype=np.int32) for t in trees])
            b.buffer("tree_out_begin", begin)
            b.buffer("tree_out_ids", ids)
        self._base_score()

    def _base_score(self) -> None:
        self.b.buffer("base_score", np.asarray(self.forest.base_score, dtype=self.layout.leaf_dtype))

    def margin_index(self, row: Var, out) -> lir.Expr:
        return Bin("+", Bin("*", row, self.c(self.K, "i64")), Builder.cast(out, "i64"))

    def slot_index(self, target: str, slots: tuple, row, out) -> lir.Expr:
        """Element of ``target`` for a row and output: margins are (row, k); a privatised buffer
        is (slice..., row, k): each slice is one contiguous block, so threads that own different
        slices never write to the same cache line."""
        if target == "margins":
            return self.margin_index(row, out)
        flat = self.c(0, "i64")
        for extent, s in zip(self.private[target], slots):
            flat = fold_index("+", fold_index("*", flat, self.c(extent, "i64")), s)
        return Bin("+", Bin("*", Bin("+", Bin("*", flat, lir.NUM_ROWS), row),
                            self.c(self.K, "i64")), Builder.cast(out, "i64"))

    def _combine(self, acc, value):
        """The aggregation's step: acc (+) value; for min/max a NaN accumulator means 'empty'."""
        agg = self.forest.aggregation
        if agg in (Aggregation.SUM, Aggregation.AVERAGE):
            return Bin("+", acc, value)
        better = Cmp("<" if agg is Aggregation.MIN else ">", value, acc)
        return Select(Bin("|", IsNan(acc), better), value, acc)

    def _reduce(self, row, tree, leaf: Var | None, target: str = "margins", slots: tuple = (),
                atomic: bool = False, value: Var | None = None):
        """Tree ``tree``'s leaf ``leaf`` into ``target`` for ``row``; ``value``: its (single
        output's) value, where the walk kept it rather than the leaf (chained walks)."""
        b, reps = self.b, self.reps
        t32 = Cast(tree, "i32")
        kept = value
        assert value is None or self.single_output, "a kept value is a single output's"

        def accumulate(out_idx, slot):
            idx = b.local("ri", "i64", self.placement.slot_index(target, slots, row, out_idx))
            value = kept if kept is not None else \
                b.local("leaf", self.acc_t, reps.leaf_value(b=b, tree=t32, node=leaf, slot=slot))
            if self.layout.linear is not None:  # the value is the leaf's row of linear models
                value = b.local("leaf", self.acc_t, linear_leaves.leaf_output(self, row, value))
            if atomic:
                b.emit(lir.AtomicAdd(target, idx, value))
            else:
                b.emit(Store(target, idx, self._combine(b.load(target, idx), value)))

        if self.single_output:
            out = b.load("tree_output", t32) if self.K > 1 else self.c(0, "i32")
            accumulate(out, self.c(0, "i32"))
            return
        j = Var(f"j{len(b.locals)}", "i64")
        if self.all_outputs:
            b.push()
            accumulate(Cast(j, "i32"), Cast(j, "i32"))
            b.emit(For(j, self.c(0, "i64"), self.c(self.K, "i64"), 1, b.pop()))
            return
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
        fill = c(identity(self.forest.aggregation, op.ordered), self.acc_t)
        if op.ordered:
            return self._ordered_fold(op, fill)
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

    def _ordered_fold(self, op: mir.ReduceDimension, fill) -> None:
        """orderedReduce: each tree's slice added to the margins in tree order (the reference's
        order: the margins start at the initial value, then every tree's value in turn)."""
        b, c = self.b, self.c
        r, k = Var(f"rr{len(b.locals)}", "i64"), Var(f"rk{len(b.locals)}", "i64")
        d = Var(f"rd{len(b.locals)}", "i64")
        if self.placement is self and 1 < self.K <= ORDERED_FOLD_OUTPUTS:
            # A running sum per output in registers, every output's add of a tree in turn: the
            # outputs' chains overlap (a tree at a time per output waits on each add).
            b.push()
            idx = [b.local("mix", "i64", self.margin_index(r, c(j, "i64"))) for j in range(self.K)]
            accs = [b.local("racc", self.acc_t, b.load("margins", i)) for i in idx]
            b.push()
            for j, acc in enumerate(accs):
                slot = b.local("rix", "i64", self.placement.slot_index(op.source, (d,), r, c(j, "i64")))
                b.emit(Assign(acc, self._combine(acc, b.load(op.source, slot))))
                b.emit(Store(op.source, slot, fill))
            b.emit(For(d, c(0, "i64"), c(op.extent, "i64"), 1, b.pop()))
            for i, acc in zip(idx, accs):
                b.emit(Store("margins", i, acc))
            b.emit(For(r, self.expr(op.rows[0]), self.expr(op.rows[1]), 1, b.pop()))
            return
        b.push()
        idx = b.local("mix", "i64", self.margin_index(r, k))
        acc = b.local("racc", self.acc_t, b.load("margins", idx))
        b.push()
        slot = b.local("rix", "i64", self.placement.slot_index(op.source, (d,), r, k))
        b.emit(Assign(acc, self._combine(acc, b.load(op.source, slot))))
        b.emit(Store(op.source, slot, fill))
        b.emit(For(d, c(0, "i64"), c(op.extent, "i64"), 1, b.pop()))
        b.emit(Store("margins", idx, acc))
        self.placement.fold_rows(op, r, k, b.pop())

    def fold_rows(self, op: mir.ReduceDimension, r: Var, k: Var, body: list) -> None:
        """Run a fold's ``body`` for every row ``r`` the fold covers and every output ``k``."""
        c = self.c
        kloop = For(k, c(0, "i64"), c(self.K, "i64"), 1, body)
        self.b.emit(For(r, self.expr(op.rows[0]), self.expr(op.rows[1]), 1, [kloop]))




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

"""The code generator of the node forms of bitvector evaluation (LIR from a :mod:`.plan`): blocks of
rows in SIMD lanes, their features copied into columns (or binned, narrow), each tree's words
cleared by its nodes, expanded as code or looped over node tables, the exit leaves summed in
model order; and :func:`lower`, the representation's program, which picks the form
(:mod:`.choose`), the mask tables' (:mod:`.masktables`) among them."""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir import hir, lir
from silvanforge.ir.hir import Aggregation, CategoryRule
from silvanforge.ir.lir import (Assign, Bin, Buffer, Builder, Cast, Clz, Cmp, Extract, For, Gather, If,
                               Load, Select, Store, Var, Vector)
from silvanforge.lowering.walksetup import thread_info
from silvanforge.lowering.walkcost import WALK_STEP_NS

# The chooser's functions are looked up on their module when lowering: tests force a form by
# replacing them there.
from . import choose, masktables
from .choose import choose_form, estimate_ns, some_trees
from .leafbits import BYTE_WORD, NARROW_WORD, WORD
from .options import DEFAULT, BitvectorOptions
from .plan import GROUP, NARROW_GROUP, Chunk, Plan, layout, looped_chunks, make_plan
from .support import node_count, unsupported

NAME = "bitvector"
# Rows of a block this many blocks ahead are prefetched while the block runs (rows of at most
# PREFETCH_ROW_BYTES: batches cycled from L3 ran 1.25x slower without it on lgb_cancer).
PREFETCH_AHEAD, PREFETCH_ROW_BYTES = 2, 1024


class _Lowering:
    """Builds the one phase: blocks of ``lanes`` rows, their used features copied into per-call
    columns (twice: as they are, and with NaN as +inf; NaN indicators after them), then each
    output's trees."""

    def __init__(self, forest: hir.Forest, lanes: int, batch_size: int | None = None, narrow: bool = False,
                 options: BitvectorOptions = DEFAULT, narrow_word: int = NARROW_WORD):
        self.forest = forest
        self.options = options
        self.lanes = lanes
        self.batch_size = batch_size
        self.narrow = narrow
        self.thr_t = lir.lir_type(forest.threshold_dtype)
        self.acc_t = lir.lir_type(forest.accumulate_dtype)
        self.buffers = {"rows": Buffer("rows", self.thr_t, "input"),
                        "margins": Buffer("margins", self.acc_t, "output")}
        self.b = Builder(self.buffers)
        # What nodes compare (the block's columns: bins when narrow) and the words they clear.
        self.node_e = "i16" if narrow else self.thr_t
        self.word_bits = narrow_word if narrow else WORD
        self.word_e = f"i{self.word_bits}"
        self.row_t = lir.vector_type(self.thr_t, self.lanes)
        self.x_t = lir.vector_type(self.node_e, self.lanes)
        self.mask_t = lir.vector_type("i1", self.lanes)
        self.word_t = lir.vector_type(self.word_e, self.lanes)
        self.i64_t = lir.vector_type("i64", self.lanes)  # table rows, exit leaves
        self.cat_e = "i32" if narrow else "i64"
        # Exit leaves within a tree: as wide as the words (narrow: half the vectors to select);
        # byte words count up to 255 leaves, unsigned.
        self.ex_e = {32: "i32", BYTE_WORD: "u8"}.get(self.word_bits, "i64") if narrow else "i64"
        self.ex_t = lir.vector_type(self.ex_e, self.lanes)
        self.cat_t = lir.vector_type(self.cat_e, self.lanes)  # decision words

    def splat(self, value, t: str) -> lir.Expr:
        return Builder.const(value, lir.vector_type(t, self.lanes))

    def apply(self, w: Var, x: lir.Expr, thr: lir.Expr, mask: lir.Expr) -> Assign:
        """A node: where the row goes right (``x >= t``; false for NaN), clear its left leaves."""
        return Assign(w, Select(Cmp(">=", x, thr, self.mask_t), Bin("&", w, mask), w))

    def apply_categorical(self, w: Var, word: lir.Expr, bit: lir.Expr, mask: lir.Expr) -> Assign:
        """A categorical node: where its bit of the decision word is clear (the row goes
        right), clear its left leaves."""
        right = Cmp("==", Bin("&", word, bit), self.splat(0, self.cat_e), self.mask_t)
        return Assign(w, Select(right, Bin("&", w, mask), w))

    def leading_zeros(self, w: Var) -> lir.Expr:
        return Clz(w) if self.word_e == self.ex_e else Cast(Clz(w), self.ex_t)

    def exit_index(self, ex: Var, leaf_base: lir.Expr) -> lir.Expr:
        """A tree's exit leaf in the forest's leaf array (64-bit, for the gathers of the sum)."""
        return Bin("+", ex if self.ex_e == "i64" else Cast(ex, self.i64_t), leaf_base)

    def exit_leaf(self, ex: Var, w: Var, word_first: lir.Expr) -> Assign:
        """Words come last to first: the leftmost word with a bit set decides."""
        return Assign(ex, Select(Cmp("!=", w, self.splat(0, self.word_e), self.mask_t),
                                 Bin("+", self.leading_zeros(w), word_first), ex))

    def lower(self, expanded: np.ndarray, tabled: np.ndarray | None = None,
              estimate: float | None = None) -> lir.Module:
        """``tabled`` (model order): trees a first phase evaluates by mask tables
        (:func:`.masktables.function`), their exit leaves summed here with the others';
        ``estimate``: :func:`estimate_ns` where the caller has it."""
        forest, b = self.forest, self.b
        c = Builder.const
        i64, i32 = "i64", "i32"
        tabled = np.zeros(forest.num_trees, bool) if tabled is None else tabled
        looped = ~expanded & ~tabled
        plan = make_plan(forest, expanded, self.lanes, self.narrow, tabled, self.options.decision_chunk_bytes,
                         self.word_bits)
        used, trees, nan_used = plan.used, plan.trees, plan.nan_used
        for name, data in layout(forest, looped, plan, self.lanes).items():
            b.buffer(name, data)
        functions = []
        if tabled.any():
            by_slot = {tree.slot: (pos, tree) for pos, tree in enumerate(trees)}
            picked = np.flatnonzero(tabled)
            part = dataclasses.replace(forest, trees=[forest.trees[k] for k in picked])
            functions.append(masktables.function(part, self.buffers, [by_slot[k][1].leaf_base for k in picked],
                                                 self.options.block_rows))
            b.buffer("bv_tabled_position", np.array([by_slot[k][0] for k in picked], np.int32))
        U, N = len(used), len(nan_used)
        columns = 2 * U + N
        if self.narrow:  # bins of up to 255 thresholds are bytes
            self.node_e = lir.lir_type(plan.node_dtype)
            self.x_t = lir.vector_type(self.node_e, self.lanes)
        self.buffers["bv_x"] = Buffer("bv_x", self.node_e, "local", size=max(1, columns) * self.lanes)
        if plan.cat_features:
            self.buffers["bv_cw"] = Buffer("bv_cw", self.cat_e, "local", size=max(1, plan.cat_words) * self.lanes)
            self.buffers["bv_crow"] = Buffer("bv_crow", "i64", "local", size=len(plan.cat_features) * self.lanes)
        self.buffers["bv_exit"] = Buffer("bv_exit", "i64", "local", size=forest.num_trees * self.lanes)
        self.plan = plan
        C = forest.num_outputs
        row0 = b.local("r", i64)
        last = Bin("-", lir.ROW_END, c(1, i64))
        # Lanes past the batch's end read its last row and are never stored.
        lane_rows = [Bin("min", Bin("+", row0, c(k, i64)), last) for k in range(self.lanes)]
        body = b.push()
        self._prefetch(row0, last)
        u = Var("bv_u", i64)
        feature = Cast(Load("bv_used", u, i32), i64)
        x = b.local("x", self.row_t)
        read = Assign(x, Vector(tuple(
            Load("rows", Bin("+", Bin("*", r, lir.ROW_STRIDE), Bin("*", feature, lir.COL_STRIDE)), self.thr_t)
            for r in lane_rows)))
        is_number = Cmp("==", x, x, self.mask_t)
        if self.narrow:
            self._bins(u, read, x, is_number, U, N)
        else:
            b.emit(For(u, c(0, i64), c(U, i64), 1, [
                read,
                Store("bv_x", Bin("*", u, c(self.lanes, i64)), x),
                Store("bv_x", Bin("*", Bin("+", u, c(U, i64)), c(self.lanes, i64)),
                      Select(is_number, x, self.splat(np.inf, self.thr_t))),
            ]))
        if N and not self.narrow:  # NaN indicators (bv_used lists their features after the others)
            b.emit(For(u, c(U, i64), c(U + N, i64), 1, [
                read,
                Store("bv_x", Bin("*", Bin("+", u, c(U, i64)), c(self.lanes, i64)),
                      Select(is_number, self.splat(0.0, self.thr_t), self.splat(np.inf, self.thr_t))),
            ]))
        self.categorical = bool(plan.cat_features)
        self._decision_words(plan, lane_rows)
        acc = b.local("acc", lir.vector_type(self.acc_t, self.lanes))
        w = b.local("w", self.word_t)
        # Narrow nodes alternate between two words, ANDed at the end of a word's nodes: one
        # chain of dependent ANDs held 16-bit nodes to 1.5x their throughput.
        self.w2 = b.local("w2", self.word_t) if self.narrow else None
        ex = b.local("ex", self.ex_t)
        self._expanded([(p, t) for p, t in enumerate(trees) if expanded[t.slot]], columns, w, ex)
        self._looped(w, ex, int(looped.sum()))
        if tabled.any():
            self._tabled_exits(lane_rows, int(tabled.sum()))
        self._sum(acc, row0)
        b.pop()
        fn = lir.Function("predict_bitvector", [For(row0, lir.ROW_BEGIN, lir.ROW_END, self.lanes, body)],
                          dict(b.locals), parallel="rows", row_parallel=True)
        module = lir.Module(
            functions=functions + [fn], buffers=self.buffers, num_features=forest.num_features, num_outputs=C,
            input_type=self.thr_t, output_type=self.acc_t,
            info={"summary": f"rep={NAME} trees={forest.num_trees} nodes={node_count(forest)} outputs={C} "
                             f"lanes={self.lanes} words={self.word_bits}-bit expanded={int(expanded.sum())} "
                                f"looped={int(looped.sum())} tabled={int(tabled.sum())}",
                  "rep": NAME, "light_optimisation": bool(expanded.any()),
                  **thread_info(round((estimate or estimate_ns(forest, self.batch_size, self.options)) / WALK_STEP_NS))})
        lir.verify(module)
        return module

    def _bins(self, u: Var, read: Assign, x: Var, is_number: lir.Expr, U: int, N: int) -> None:
        """Narrow columns: each used feature's bin (thresholds ``<= x``, by a branchless binary
        search of its NaN-padded row of bv_bins; NaN is in bin 0), then the copy where NaN is
        +inf (every threshold below it), then the NaN indicators (0 or 1)."""
        b, c, i64 = self.b, Builder.const, "i64"
        steps = self.plan.bin_steps
        width = 2**steps - 1
        pos = b.local("bin", self.i64_t)
        search = [Assign(pos, self.splat(0, i64))]
        for k in reversed(range(steps)):
            probe = Gather("bv_bins", Bin("+", pos, Vector((Bin("+", Bin("*", u, c(width, i64)), c(2**k - 1, i64)),)
                                                          * self.lanes)), self.row_t)
            search.append(Assign(pos, Select(Cmp("<=", probe, x, self.mask_t), Bin("+", pos, self.splat(2**k, i64)), pos)))
        binned = Cast(pos, self.x_t)
        count = Vector((Load("bv_bin_count", u, self.node_e),) * self.lanes)
        b.emit(For(u, c(0, i64), c(U, i64), 1, [
            read, *search,
            Store("bv_x", Bin("*", u, c(self.lanes, i64)), binned),
            Store("bv_x", Bin("*", Bin("+", u, c(U, i64)), c(self.lanes, i64)), Select(is_number, binned, count)),
        ]))
        if N:
            b.emit(For(u, c(U, i64), c(U + N, i64), 1, [
                read,
                Store("bv_x", Bin("*", Bin("+", u, c(U, i64)), c(self.lanes, i64)),
                      Select(is_number, self.splat(0, self.node_e), self.splat(1, self.node_e))),
            ]))

    def _tabled_exits(self, lane_rows: list, count: int) -> None:
        """The mask-table phase's exit leaves of the block's rows (``mt_exits``, a row's tabled
        trees in model order) into bv_exit at their trees' places in the sum."""
        c, i64 = Builder.const, "i64"
        j = Var("bv_j", i64)
        rows = self.b.local("tab_rows", self.i64_t, Vector(tuple(Bin("*", r, c(count, i64)) for r in lane_rows)))
        self.b.emit(For(j, c(0, i64), c(count, i64), 1, [
            Store("bv_exit", Bin("*", Cast(Load("bv_tabled_position", j, "i32"), i64), c(self.lanes, i64)),
                  Cast(Gather("mt_exits", Bin("+", rows, Vector((j,) * self.lanes)), lir.vector_type("i32", self.lanes)),
                       self.i64_t))]))

    def _decision_words(self, plan: Plan, lane_rows: list) -> None:
        """Each categorical feature's table row for the block's lanes (its category, the NaN
        row, or the no-category row, as the forest's category rule says), as the element where
        the row starts in bv_cat_table: bv_crow.  The words are gathered per chunk
        (:meth:`_gather_chunk`)."""
        b, c = self.b, Builder.const
        i64 = "i64"
        rule = self.forest.category_rule
        idx_t = lir.vector_type(i64, self.lanes)
        for q, cf in enumerate(plan.cat_features):
            x = b.local("xc", self.row_t, Vector(tuple(
                Load("rows", Bin("+", Bin("*", r, lir.ROW_STRIDE), Bin("*", c(cf.feature, i64), lir.COL_STRIDE)),
                     self.thr_t)
                for r in lane_rows)))
            low, low_inside, high = rule.bounds  # LightGBM truncates: (-1, 0) is category 0
            valid = Bin("&", Cmp(">=" if low_inside else ">", x, self.splat(low, self.thr_t), self.mask_t),
                        Cmp("<", x, self.splat(high, self.thr_t), self.mask_t))
            cat = b.local("cat", idx_t, Cast(Select(valid, x, self.splat(0.0, self.thr_t)), idx_t))
            if rule is CategoryRule.EXACT:
                valid = Bin("&", valid, Cmp("==", Cast(cat, self.row_t), x, self.mask_t))
            named = Bin("&", valid, Cmp("<", cat, self.splat(cf.rows, i64), self.mask_t))
            row = Select(named, cat, self.splat(cf.rows + 1, i64))
            row = Select(Cmp("!=", x, x, self.mask_t), self.splat(cf.rows, i64), row)  # NaN
            b.emit(Store("bv_crow", c(q * self.lanes, i64),
                         Bin("+", Bin("*", row, self.splat(cf.words, i64)), self.splat(cf.table_base, i64))))

    def _gather(self, row_offset: lir.Expr, table_column: lir.Expr, column_offset: lir.Expr,
                words: lir.Expr) -> For:
        """``words`` decision words of one feature into bv_cw from ``column_offset`` on: one
        gather each, of the lanes' rows from ``table_column`` on."""
        c, i64 = Builder.const, "i64"
        k = Var("bv_k", i64)
        start = Bin("+", Load("bv_crow", row_offset, self.i64_t), Vector((Bin("+", table_column, k),) * self.lanes))
        return For(k, c(0, i64), words, 1, [
            Store("bv_cw", Bin("+", column_offset, Bin("*", k, c(self.lanes, i64))),
                  Gather("bv_cat_table", start, self.cat_t))])

    def _gather_chunk(self, chunk: Chunk) -> None:
        c, i64 = Builder.const, "i64"
        for q, table_column, column, words in chunk.entries:
            self.b.emit(self._gather(c(q * self.lanes, i64), c(table_column, i64),
                                     c(column * self.lanes, i64), c(words, i64)))

    def _prefetch(self, row0: Var, last: lir.Expr) -> None:
        """Touch every cache line of the rows ``PREFETCH_AHEAD`` blocks on (the last row past the
        batch's end)."""
        item = np.dtype(self.forest.threshold_dtype).itemsize
        F = self.forest.num_features
        if F * item > PREFETCH_ROW_BYTES:
            return
        c = Builder.const
        f = Var("bv_pf", "i64")
        for k in range(self.lanes):
            row = Bin("min", Bin("+", row0, c(PREFETCH_AHEAD * self.lanes + k, "i64")), last)
            self.b.emit(For(f, c(0, "i64"), c(F, "i64"), max(1, 64 // item), [
                lir.Prefetch("rows", Bin("+", Bin("*", row, lir.ROW_STRIDE), Bin("*", f, lir.COL_STRIDE)))]))

    def _store(self, acc: Var, row0: Var, out) -> None:
        C = self.forest.num_outputs
        for k in range(self.lanes):
            row = Bin("+", row0, Builder.const(k, "i64"))
            self.b.emit(If(Cmp("<", row, lir.ROW_END),
                           [Store("margins", Bin("+", Bin("*", row, Builder.const(C, "i64")), out), Extract(acc, k))]))

    def _sum(self, acc: Var, row0: Var) -> None:
        """Each output's margins: its trees' exit leaves added in model order from the base
        score.  They are summed after every tree is done: a gather waiting on a tree's words
        inside the tree loop stalls it (measured 1.8x slower on xgb_cancer, Zen 4)."""
        b, c = self.b, Builder.const
        i64 = "i64"
        out, t = Var("bv_o", i64), Var("bv_t", i64)
        out_body = b.push()
        base = Vector((Load("bv_base", out, self.acc_t),) * self.lanes)
        # An averaged forest (random forests) sums its trees from zero, then divides by its
        # divisor and adds the base score, as the reference does, each rounded in acc_t.
        average = self.forest.aggregation is Aggregation.AVERAGE
        b.emit(Assign(acc, self.splat(0.0, self.acc_t) if average else base))
        b.emit(For(t, Cast(Load("bv_output", out, "i32"), i64), Cast(Load("bv_output", Bin("+", out, c(1, i64)), "i32"), i64), 1, [
            Assign(acc, Bin("+", acc, Gather("bv_leaf", Load("bv_exit", Bin("*", t, c(self.lanes, i64)), self.i64_t),
                                             lir.vector_type(self.acc_t, self.lanes))))]))
        if average:
            b.emit(Assign(acc, Bin("+", Bin("/", acc, self.splat(float(self.forest.average_divisor), self.acc_t)), base)))
        self._store(acc, row0, out)
        b.pop()
        b.emit(For(out, c(0, i64), c(self.forest.num_outputs, i64), 1, out_body))

    def _expanded(self, trees: list, columns: int, w: Var, ex: Var) -> None:
        """Every node of these (position in the sum, tree) as code: its threshold and mask are
        constants, its feature's column a local loaded once a block."""
        if not trees:
            return
        b = self.b
        xs = [b.local("x", self.x_t, Load("bv_x", Builder.const(k * self.lanes, "i64"), self.x_t))
              for k in range(columns)]
        starts = {}  # position in ``trees`` -> the chunk starting there
        at = 0
        for chunk in self.plan.chunks:
            if at >= len(trees):
                break
            starts[at] = chunk
            at += chunk.trees
        for index, (pos, tree) in enumerate(trees):
            if index in starts:
                self._gather_chunk(starts[index])
            for k in reversed(range(len(tree.words))):
                words = [w, self.w2] if self.narrow else [w]
                for v in words:
                    b.emit(Assign(v, self.splat(-1, self.word_e)))
                for j, n in enumerate(tree.words[k].nodes()):
                    v = words[j % len(words)]
                    if n.categorical:
                        word = Load("bv_cw", Builder.const(n.column * self.lanes, "i64"), self.cat_t)
                        b.emit(self.apply_categorical(v, word, self.splat(n.bit, self.cat_e), self.splat(n.mask, self.word_e)))
                    else:
                        b.emit(self.apply(v, xs[n.column], self.splat(n.threshold, self.node_e),
                                          self.splat(n.mask, self.word_e)))
                if self.narrow:
                    b.emit(Assign(w, Bin("&", w, self.w2)))
                if k == len(tree.words) - 1:
                    b.emit(Assign(ex, Bin("+", self.leading_zeros(w), self.splat(k * self.word_bits, self.ex_e))))
                else:
                    b.emit(self.exit_leaf(ex, w, self.splat(k * self.word_bits, self.ex_e)))
            b.emit(Store("bv_exit", Builder.const(pos * self.lanes, "i64"),
                         self.exit_index(ex, self.splat(tree.leaf_base, "i64"))))

    def _looped(self, w: Var, ex: Var, count: int) -> None:
        """Loops over the node tables of :func:`layout` (``count`` trees)."""
        if not count:
            return
        b = self.b
        c = Builder.const
        i64, i32 = "i64", "i32"

        def at(buffer, index):
            return Cast(Load(buffer, index, i32), i64)

        def splat_of(e):
            return Vector((e,) * self.lanes)

        t, s, i = Var("bv_t", i64), Var("bv_s", i64), Var("bv_i", i64)

        words = [w, self.w2] if self.narrow else [w]

        def node(k):
            j = Bin("+", i, c(k, i64))
            return self.apply(words[k % len(words)], Load("bv_x", at("bv_column", j), self.x_t),
                              splat_of(Load("bv_threshold", j, self.node_e)), splat_of(Load("bv_mask", j, self.word_e)))

        def cat_node(k):
            j = Bin("+", i, c(k, i64))
            return self.apply_categorical(words[k % len(words)], Load("bv_cw", at("bv_cat_column", j), self.cat_t),
                                          splat_of(Load("bv_cat_bit", j, self.cat_e)),
                                          splat_of(Load("bv_cat_mask", j, self.word_e)))

        segment = [Assign(v, self.splat(-1, self.word_e)) for v in words]
        group = NARROW_GROUP if self.narrow else GROUP
        segment.append(For(i, at("bv_seg_start", s), at("bv_seg_start", Bin("+", s, c(1, i64))), group,
                           [node(k) for k in range(group)]))
        if self.categorical:
            segment.append(For(i, at("bv_cat_seg_start", s), at("bv_cat_seg_start", Bin("+", s, c(1, i64))),
                               group, [cat_node(k) for k in range(group)]))
        if self.narrow:
            segment.append(Assign(w, Bin("&", w, self.w2)))
        word_first = Load("bv_seg_word", s, i32)
        word_first = word_first if self.ex_e == i32 else Cast(word_first, self.ex_e)
        segment.append(self.exit_leaf(ex, w, splat_of(word_first)))
        tree = [
            Assign(ex, self.splat(0, self.ex_e)),
            For(s, at("bv_tree_seg", t), at("bv_tree_seg", Bin("+", t, c(1, i64))), 1, segment),
            Store("bv_exit", Bin("*", at("bv_position", t), c(self.lanes, i64)), self.exit_index(ex, splat_of(at("bv_leaf_base", t)))),
        ]
        if not self.categorical:
            b.emit(For(t, c(0, i64), c(count, i64), 1, tree))
            return
        # Chunk by chunk: its decision words, then its trees.
        ch, e = Var("bv_ch", i64), Var("bv_e", i64)
        gather = self._gather(at("bv_entry_row", e), at("bv_entry_table", e), at("bv_entry_column", e),
                              at("bv_entry_words", e))
        b.emit(For(ch, c(0, i64), c(looped_chunks(self.plan, np.ones(count, bool)), i64), 1, [
            For(e, at("bv_chunk_entry", ch), at("bv_chunk_entry", Bin("+", ch, c(1, i64))), 1, [gather]),
            For(t, at("bv_chunk_tree", ch), at("bv_chunk_tree", Bin("+", ch, c(1, i64))), 1, tree),
        ]))


def lower(forest: hir.Forest, expand: bool | None = None, batch_size: int | None = None,
          narrow: bool | None = None, checked: bool = False, options: BitvectorOptions = DEFAULT,
          vectors=None) -> lir.Module:
    """The LIR module of bitvector evaluation.  ``expand``: emit every node as code (True),
    loop over node tables for every tree (False), or expand the trees :func:`expanded_trees`
    picks (None).  ``batch_size``: the batch size compiled for, if known (:func:`choose_form`).
    ``narrow``: the narrow form (True), the float form (False) or the cheaper (None).
    ``checked``: the caller has found :func:`unsupported` None (a pass over every node).
    ``options``: the representation's options (:mod:`.options`).  ``vectors``: the vector unit
    the code is for (:class:`silvanforge.target.Vectors`; None: AVX-512), which with the blocks'
    lanes and the trees sets the narrow form's words (:func:`.choose.narrow_word`)."""
    why = None if checked else unsupported(forest)
    if why is not None:
        raise ValueError(f"bitvector evaluation cannot run this model: {why}")
    tabled, estimate = np.zeros(forest.num_trees, bool), None
    if expand is None and narrow is None:
        tabled, estimate = choose.choice(forest, batch_size, options)
        if tabled.all():
            return masktables.lower(forest, batch_size, options.block_rows)
    nodes_part = some_trees(forest, ~tabled) if tabled.any() else forest
    lanes, chosen = choose_form(nodes_part, batch_size, options)
    expanded = np.zeros(forest.num_trees, bool)  # the node trees' choice, in model order again
    expanded[np.flatnonzero(~tabled)] = chosen
    if narrow is None:
        narrow = choose.narrow_form(forest, lanes, options)
    if expand is not None:
        expanded = np.full(forest.num_trees, bool(expand))
    return _Lowering(forest, lanes, batch_size, bool(narrow), options,
                     choose.narrow_word(nodes_part, lanes, vectors, options)).lower(expanded, tabled, estimate)


__all__ = ["NAME", "lower"]

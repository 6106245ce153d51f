"""A walk step's split as LIR: how generated code reads a row's feature, and the decision rule.

Reads (:class:`RowReads`): as the caller gave the row (row and column strides), or from *split
rows*, a scratch copy written first in which a missing value is already +-inf, so a walk step
needs no NaN test and no flags (:meth:`RowReads.fill_split_rows`).

The decision (:class:`SplitDecision`): the HIR's rule (a missing value takes the default
direction, a categorical split tests membership in the node's bitset, any other compares with
the threshold) for one node or, as vectors, for every node of a tile or every lane of a vector
walk.

Both are mixins of :class:`silvanforge.lowering.walkgen.WalkGenerator`, which owns the state they
read: ``b`` (the builder), ``c``, ``layout``, ``forest``, ``reps`` (the representation's
instance), ``thr_t``, ``split_rows`` (whether walks read split rows; missing values made +-inf
there, so no test for them is emitted), ``branch_categorical`` and ``placement``."""

from __future__ import annotations

import numpy as np

from silvanforge.ir import lir
from silvanforge.ir.hir import ZERO_THRESHOLD, CategoryRule, Op
from silvanforge.ir.lir import Assign, Bin, Cast, Cmp, For, If, IsNan, Select, Store, Var
from silvanforge.lowering.layout import FLAG_CATEGORICAL, FLAG_DEFAULT_LEFT, FLAG_OP_SHIFT, FLAG_ZERO_MISSING
from silvanforge.lowering.walksetup import SPLIT_ROWS, SPLIT_TOPS

__all__ = ["RowReads", "SplitDecision"]


class RowReads:
    """Where a row's feature value is read from, and the split rows' fill."""

    def row_value(self, row, feature, row_at=None) -> lir.Expr:
        """Feature ``feature`` (an int expression) of row ``row``: the one place inputs are read
        (a GPU lowering reads cached rows from shared memory instead).  ``row_at``: the row's
        first element (``row * row_stride``) where the caller has it."""
        at = self._row_start(row) if row_at is None else row_at
        if self.split_rows:  # the feature field is the column of the split row
            return self.b.load(SPLIT_ROWS, Bin("+", at, Cast(feature, "i64")))
        return self.b.load("rows", Bin("+", at, Bin("*", Cast(feature, "i64"), lir.COL_STRIDE)))

    def input_value(self, row, feature) -> lir.Expr:
        """Feature ``feature`` of row ``row`` as the caller gave it, NaN and infinities as they
        are, also where walks read split rows (which hold a missing value as an infinity and an
        infinity as the largest finite value): what a leaf's linear model reads."""
        if not self.split_rows:
            return self.placement.row_value(row, Cast(feature, "i32"))
        return self.b.load("rows", Bin("+", Bin("*", row, lir.ROW_STRIDE), Bin("*", Cast(feature, "i64"), lir.COL_STRIDE)))

    def _row_start(self, row) -> lir.Expr:
        """Index of a row's first value in the buffer :meth:`row_value` reads."""
        if self.split_rows:  # column -1 (NaN) comes first
            return Bin("+", Bin("*", row, self.c(self._split_row_size(), "i64")), self.c(1, "i64"))
        return Bin("*", row, lir.ROW_STRIDE)

    def _split_row_size(self) -> int:
        # Categorical splits read two category columns a feature after the two value columns,
        # or set columns (split_row_sets) after them.
        sets = self.layout.set_columns
        return ((4 if self.layout.has_categorical else 2) * self.forest.num_features + 1
                + (0 if sets is None else sets.columns))

    def _split_row_buffers(self) -> None:
        """The model buffers the split rows' fill reads: each feature's largest category plus
        one (category columns), or the set columns' tables."""
        layout = self.layout
        if layout.category_tops is not None:
            self.b.buffer(SPLIT_TOPS, layout.category_tops)
        if layout.set_columns is not None:
            for name in ("features", "starts", "counts", "words_at", "tops", "words"):
                self.b.buffer(f"set_{name}", getattr(layout.set_columns, name))

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
        if self.layout.has_categorical:
            self._fill_category_columns(x, nan, f, Bin("+", at, c(2 * self.forest.num_features, "i64")))
        features = For(f, c(0, "i64"), c(self.forest.num_features, "i64"), 1, b.pop())
        leaf_column = Store(SPLIT_ROWS, Bin("-", self._row_start(r), c(1, "i64")), c(float("nan"), t))
        sets = [] if self.layout.set_columns is None else self._fill_set_columns(r)
        b.emit(For(r, start, stop, 1, [leaf_column, features] + sets))

    def _fill_set_columns(self, r: Var) -> list:
        """Row ``r``'s set columns (:func:`silvanforge.lowering.layout.split_row_sets`): for each
        feature split by category sets, its category decided (as :meth:`_fill_category_columns`
        does, a missing value ``top + 2``), then each set's bit of it as 0 (in: left) or 1.  The
        sets of one feature read consecutive words and write consecutive columns: a loop
        LLVM makes vector code of."""
        b, c, t = self.b, self.c, self.thr_t
        g, s = Var(f"sg{len(b.locals)}", "i64"), Var(f"ss{len(b.locals)}", "i64")
        b.push()
        f = b.local("sgf", "i64", Cast(b.load("set_features", g), "i64"))
        x = b.local("sgx", t, b.load("rows", Bin("+", Bin("*", r, lir.ROW_STRIDE), Bin("*", f, lir.COL_STRIDE))))
        none = b.local("sgnone", t, Cast(b.load("set_tops", g), t))  # top + 1
        cat = self._category_of(x, none, "sgwhole")
        v = b.local("sgv", "i32", Cast(Select(IsNan(x), Bin("+", none, c(1.0, t)), cat), "i32"))
        count = b.local("sgn", "i64", Cast(b.load("set_counts", g), "i64"))
        words = b.local("sgw", "i64", Bin("+", Cast(b.load("set_words_at", g), "i64"),
                                          Bin("*", Cast(Bin(">>", v, c(5, "i32")), "i64"), count)))
        out = b.local("sgo", "i64", Bin("+", Bin("+", self._row_start(r), c(2 * self.forest.num_features, "i64")),
                                        Cast(b.load("set_starts", g), "i64")))
        shift = b.local("sgb", "i32", Bin("&", v, c(31, "i32")))
        bit = Bin("&", Bin(">>", b.load("set_words", Bin("+", words, s)), shift), c(1, "i32"))
        b.emit(For(s, c(0, "i64"), count, 1, [
            Store(SPLIT_ROWS, Bin("+", out, s), Select(Cmp("!=", bit, c(0, "i32")), c(0.0, t), c(1.0, t)))]))
        groups = len(self.layout.set_columns.features)
        return [For(g, c(0, "i64"), c(groups, "i64"), 1, b.pop())]


    def _fill_category_columns(self, x: Var, nan: Var, f: Var, at) -> None:
        """Feature ``f``'s category columns at ``at`` and ``at + 1`` (its value ``x``, +-inf
        inputs as +-MAX, ``nan`` whether it was missing): the category the forest's rule makes of
        the value where it is one a split names, else ``top + 1``, and a missing value ``top + 1``
        then ``top + 2`` (``top``: the feature's largest named category,
        :func:`silvanforge.lowering.layout.split_row_categories`)."""
        b, c, t = self.b, self.c, self.thr_t
        none = b.local("snone", t, Cast(b.load(SPLIT_TOPS, f), t))  # top + 1
        cat = self._category_of(x, none, "swhole")
        b.emit(Store(SPLIT_ROWS, at, cat))
        b.emit(Store(SPLIT_ROWS, Bin("+", at, c(1, "i64")), Select(nan, Bin("+", none, c(1.0, t)), cat)))

    def _category_of(self, x, none: Var, name: str) -> lir.Expr:
        """The category the forest's rule makes of value ``x`` where it is one below ``none``
        (``top + 1``, a local), else ``none``: what category and set columns hold (``name``:
        the local of the value's whole part)."""
        b, c, t = self.b, self.c, self.thr_t
        rule = self.forest.category_rule
        low, low_inside, high = rule.bounds
        valid = Bin("&", Cmp(">=" if low_inside else ">", x, c(low, t)), Cmp("<", x, c(high, t)))
        whole = b.local(name, t, Cast(Cast(Select(valid, x, c(0, t)), "i64"), t))  # toward zero
        if rule is CategoryRule.EXACT:
            valid = Bin("&", valid, Cmp("==", whole, x))
        return Select(Bin("&", valid, Cmp("<", whole, none)), whole, none)


class SplitDecision:
    """Whether a row goes left at a node: the loads of a node's feature and flags, and the rule."""

    def _category_buffers(self):
        """The categorical splits' bitsets, where the model has any (:meth:`_in_category_set`)."""
        if self.layout.has_categorical:
            self.b.buffer("cat_bits", self.layout.cat_bits)

    def _flag(self, flags: Var, bit: int) -> lir.Expr:
        n = lir.lanes_of(flags.type)
        return Cmp("!=", Bin("&", flags, self.c(bit, flags.type)), self.c(0, flags.type),
                   lir.vector_type("i1", n))

    def _decision(self, x: Var, thr: Var, flags: Var, categorical: bool | None = None) -> lir.Expr:
        """The HIR rule: missing -> default direction; categorical -> membership; else compare.

        ``x``, ``thr`` and ``flags`` are scalars, or vectors (``f32x4``...) deciding every node of
        a tile at once (no categorical splits then).  ``categorical``: the rule of a node known
        to be a categorical split (True) or a numerical one (False); None: either, as its flags
        say."""
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
        if lay.has_categorical and categorical is not False:
            assert lanes == 1, "categorical splits are decided one node at a time"
            is_cat = (c(1, "i1") if categorical else
                      self.b.local("iscat", "i1", self._flag(flags, FLAG_CATEGORICAL)))
            member = (self._in_split_category(x, thr, is_cat) if self.split_rows
                      else self._in_category_set(x, thr, is_cat))
            decision = member if categorical else Select(is_cat, member, numeric)
        if self.split_rows:  # missing values were made +-inf in the split rows
            return decision
        missing = IsNan(x, i1)
        if lay.has_zero_missing:
            near_zero = Bin("&", cmp(">=", x, c(-ZERO_THRESHOLD, t)), cmp("<=", x, c(ZERO_THRESHOLD, t)))
            missing = Bin("|", missing, Bin("&", self._flag(flags, FLAG_ZERO_MISSING), near_zero))
        return Select(missing, self._flag(flags, FLAG_DEFAULT_LEFT), decision)

    def _node_decision(self, t32, row, node: Var, lane: int) -> lir.Expr:
        """Whether the row goes left at node ``lane`` of ``node`` (lane 0 untiled)."""
        b, reps = self.b, self.reps
        feature, flags = self._feature_and_flags(t32, node, lane)
        x = b.local("x", self.thr_t, self.placement.row_value(row, feature))
        thr = b.local("thr", self.thr_t, reps.load_threshold(b=b, tree=t32, node=node, lane=lane))
        flags = b.local("flags", "i32", flags)
        if not (self.layout.has_categorical and self.branch_categorical):
            return self._decision(x, thr, flags)
        # A branch to the split's own test: a numerical step then computes no membership and a
        # categorical one no compare (a Select of both ran 0.78x as fast, one row of a 1000-tree
        # categorical LightGBM model with the bitsets' word counts; about as fast without them).
        is_cat = b.local("iscat", "i1", self._flag(flags, FLAG_CATEGORICAL))
        left = b.local("left", "i1")
        arms = []
        for categorical in (True, False):
            b.push()
            decision = self._decision(x, thr, flags, categorical)
            arms.append(b.pop() + [Assign(left, decision)])
        b.emit(If(is_cat, *arms))
        return left

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

    def _in_split_category(self, x: Var, thr: Var, is_cat) -> lir.Expr:
        """Membership of a split row's category column value (decided as the row was split:
        :func:`silvanforge.lowering.layout.split_row_categories`) in the node's bitset: one word,
        one bit.  In bounds on numerical nodes too (word 0 at offset 0), and on a walk past its
        batch's end, which reads a split row no row was split into: the value is clamped to
        the categories the columns hold (the bitsets are followed by enough zero words)."""
        c, t = self.c, x.type
        most = float(self.layout.category_tops.max() + 1)
        inside = Bin("&", Cmp(">=", x, c(0.0, t)), Cmp("<=", x, c(most, t)))
        cat = self.b.local("cat", "i32", Cast(Select(inside, x, c(0.0, t)), "i32"))
        offset = Select(is_cat, Cast(thr, "i32"), c(0, "i32"))
        word = self.b.load("cat_bits", Bin("+", offset, Bin(">>", cat, c(5, "i32"))))
        return Cmp("!=", Bin("&", Bin(">>", word, Bin("&", cat, c(31, "i32"))), c(1, "i32")), c(0, "i32"))

    def _feature_and_flags(self, t32, node, lane: int, widen=lambda e: e):
        """(feature index, flags) of a node, both i32 (``widen`` maps each load, for vector
        walks).  With ``packed_default_left`` both come from the one feature field."""
        b, reps = self.b, self.reps
        field = widen(Cast(reps.load_feature_index(b=b, tree=t32, node=node, lane=lane), "i32"))
        if not self.layout.packed_default_left:
            return field, widen(Cast(reps.load_split_flags(b=b, tree=t32, node=node, lane=lane), "i32"))
        if self.split_rows:  # the field is the split row's column; numerical splits need no flags
            if not self.layout.has_categorical:
                return field, self.c(0, field.type)
            # Categorical splits read the category columns, after the 2F value columns: their
            # field says what they are (no flags byte to load).
            field = b.local("ff", field.type, field)
            is_cat = Cmp(">=", field, self.c(2 * self.forest.num_features, field.type))
            return field, Select(is_cat, self.c(FLAG_CATEGORICAL, field.type), self.c(0, field.type))
        # Categorical splits: the flags byte says which they are (and holds the default-left bit).
        flags = (widen(Cast(reps.load_split_flags(b=b, tree=t32, node=node, lane=lane), "i32"))
                 if self.layout.has_categorical else None)
        field = b.local("ff", field.type, field)
        one = self.c(1, field.type)
        return Bin(">>", field, one), Bin("&", field, self.c(FLAG_DEFAULT_LEFT, field.type)) if flags is None else flags

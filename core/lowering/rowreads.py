"""How generated code reads a row's features: as the caller gave them (row and column strides),
or from *split rows*, a scratch copy written first in which a missing value is already +-inf,
so a walk step needs no NaN test and no flags (:meth:`RowReads.fill_split_rows`).

:class:`RowReads` is a mixin of :class:`silvanforge.lowering.walkgen.WalkGenerator`, which owns the state
it reads: ``b`` (the builder), ``c``, ``forest``, ``thr_t``, ``split_rows`` (whether walks
read split rows) and ``placement``."""

from __future__ import annotations

import numpy as np

from silvanforge.ir import lir
from silvanforge.ir.lir import Bin, Cast, Cmp, For, IsNan, Select, Store, Var
from silvanforge.lowering.walksetup import SPLIT_ROWS

__all__ = ["RowReads"]


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

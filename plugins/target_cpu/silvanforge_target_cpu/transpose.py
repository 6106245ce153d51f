"""LIR vectors (:class:`silvanforge.ir.lir.Vector`, lanes of other values) in LLVM IR, and
eight registers of eight float32 transposed on AVX2 in 24 shuffles LLVM cannot rewrite.

Where a program builds vectors from lanes of other vectors (the oblivious float program's
columns copied from vectors of each row's consecutive features: a column's vector is lane ``j``
of eight rows' vectors, :meth:`silvanforge_rep_oblivious.codegen._Lowering._feature_runs`), the
eight columns are the eight rows' transpose.  LLVM, given that transpose as shufflevectors of the
rows' loads, folds it back into a broadcast load and a blend a value (about 90 instructions an
8x8, no faster than building each column lane by lane); as inline assembly its 24 shuffles stay
(``vunpcklps``/``vunpckhps``, ``vshufps``, ``vperm2f128``: 8 loads, 24 shuffles and 8 stores a
tile).  Measured on the Bosch-shaped model (966 columns, AVX2 code, 1 thread, Zen 4): the copy
took 83 -> 53 us of a 512-row call's kernel (1.07-1.13x the kernel), 818 -> 680 us at 4096
(1.05-1.09x), where it is bound by reading the rows.  AVX-512 code copies wide rows' columns so
too (the float program's 16-row blocks: a column two transposes' side by side, joined by one
``vinsertf64x4``): the same model's copy 120 -> 72 us of a 512-row call, where a column had
taken 16 scalar loads and inserts a block.  Only AVX2 and AVX-512 code take it, the only code
whose programs copy columns so, and only where it is built on an x86-64 host (LLVM parses the
inline assembly of the host's architecture alone, :data:`BUILT_HERE`).
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir

from silvanforge.ir import lir

# The vectors transposed: ROWS of ROWS float32 lanes (one 256-bit register each).
ROWS = 8
_TYPE = lir.vector_type("f32", ROWS)
# Whether this host's LLVM parses the transpose's (x86) inline assembly (llvm_host.init).
BUILT_HERE = llvm.get_process_triple().startswith(("x86_64", "amd64"))


def vector(b: ir.IRBuilder, e: lir.Vector, vt: ir.VectorType, expr, columns: Columns | None):
    """``e`` (of LLVM type ``vt``; ``expr``: a LIR expression's value): a column of eight rows
    (or sixteen: two such side by side) taken from their transposes where ``columns`` (AVX2 or
    AVX-512 code built here, else None) makes them;
    one value in every lane a splat; else its lanes inserted in order."""
    if columns is not None and (column := column_of_rows(e)) is not None:
        return columns.column(b, tuple(expr(row) for row in column[0]), column[1])
    if columns is not None and len(e.elems) == 2 * ROWS:
        # (sixteen rows, AVX-512's blocks: two transposes' columns side by side)
        halves = [column_of_rows(lir.Vector(e.elems[h * ROWS:(h + 1) * ROWS])) for h in range(2)]
        if None not in halves and halves[0][1] == halves[1][1]:
            low, high = (columns.column(b, tuple(expr(row) for row in rows), j) for rows, j in halves)
            return b.shuffle_vector(low, high, ir.Constant(ir.VectorType(ir.IntType(32), 2 * ROWS),
                                                           list(range(2 * ROWS))))
    v = ir.Constant(vt, ir.Undefined)
    if all(x == e.elems[0] for x in e.elems[1:]):  # one value in every lane: a splat
        one = b.insert_element(v, expr(e.elems[0]), ir.Constant(ir.IntType(32), 0))
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), len(e.elems)), [0] * len(e.elems))
        return b.shuffle_vector(one, v, zeros)
    for k, x in enumerate(e.elems):
        v = b.insert_element(v, expr(x), ir.Constant(ir.IntType(32), k))
    return v


def column_of_rows(e: lir.Vector) -> tuple[tuple, int] | None:
    """``(rows, j)`` where lane ``k`` of ``e`` is lane ``j`` of ``rows[k]``, eight distinct vectors
    of eight float32 (``e`` is column ``j`` of their transpose); else None."""
    elems = e.elems
    if len(elems) != ROWS or not all(isinstance(x, lir.Extract) and x.a.type == _TYPE for x in elems):
        return None
    rows = tuple(x.a for x in elems)
    if len({x.lane for x in elems}) != 1 or len(set(rows)) != ROWS:
        return None
    return rows, elems[0].lane


def transposed(b: ir.IRBuilder, rows: list) -> list:
    """The eight columns of the eight registers ``rows`` (``<8 x float>`` values): column ``j``'s
    lane ``k`` is ``rows[k]``'s lane ``j``.  Pairs of rows interleaved (lanes 0-1 and 4-5 of two
    rows, then 2-3 and 6-7), pairs of pairs joined by ``vshufps`` (four rows' lane ``j`` in each
    128-bit half), then the halves of rows 0-3 and 4-7 joined by ``vperm2f128``."""
    pairs = [_shuffle(b, op, rows[2 * p], rows[2 * p + 1]) for p in range(ROWS // 2)
             for op in ("vunpcklps", "vunpckhps")]
    # quads[(q, h, s)]: rows 4q..4q+3, lanes 2h+s and 2h+s+4 (h: low or high pair, s: its lane)
    quads = {(q, h, s): _shuffle(b, "vshufps", pairs[4 * q + h], pairs[4 * q + 2 + h], (0x44, 0xEE)[s])
             for q in range(2) for h in range(2) for s in range(2)}
    columns = [None] * ROWS
    for h in range(2):
        for s in range(2):
            columns[2 * h + s] = _shuffle(b, "vperm2f128", quads[(0, h, s)], quads[(1, h, s)], 0x20)
            columns[2 * h + s + 4] = _shuffle(b, "vperm2f128", quads[(0, h, s)], quads[(1, h, s)], 0x31)
    return columns


class Columns:
    """The transposes a function's code has made, by basic block and rows: each made once for
    its eight columns, and taken again only in its own block (where it precedes what follows)."""

    def __init__(self):
        self._made: dict[tuple, list] = {}

    def column(self, b: ir.IRBuilder, rows: tuple, j: int):
        """Column ``j`` of the eight registers ``rows`` (``<8 x float>`` values) transposed, in
        ``b``'s block."""
        key = (b.block, rows)
        columns = self._made.get(key)
        if columns is None:
            columns = self._made[key] = transposed(b, list(rows))
        return columns[j]


def _shuffle(b: ir.IRBuilder, op: str, first, second, imm: int | None = None):
    """``op`` (AT&T syntax: its sources reversed) of ``first`` and ``second``, as inline assembly
    LLVM keeps as written."""
    ft = ir.FunctionType(first.type, [first.type, second.type])
    text = f"{op} " + ("" if imm is None else f"$${imm}, ") + "$2, $1, $0"
    return b.asm(ft, text, "=x,x,x", [first, second], False)


__all__ = ["BUILT_HERE", "ROWS", "Columns", "column_of_rows", "transposed", "vector"]

"""Eight registers of eight float32 transposed on AVX2, in 24 shuffles LLVM cannot rewrite.

Where a program builds vectors from lanes of other vectors (the oblivious float program's
columns copied from vectors of each row's consecutive features: a column's vector is lane ``j``
of eight rows' vectors, :meth:`silvanforge_rep_oblivious.codegen._Lowering._feature_runs`), the
eight columns are the eight rows' transpose.  LLVM, given that transpose as shufflevectors of the
rows' loads, folds it back into a broadcast load and a blend a value (about 90 instructions an
8x8, no faster than building each column lane by lane); as inline assembly its 24 shuffles stay
(``vunpcklps``/``vunpckhps``, ``vshufps``, ``vperm2f128``: 8 loads, 24 shuffles and 8 stores a
tile).  Measured on the Bosch-shaped model (966 columns, AVX2 code, 1 thread, Zen 4): the copy
took 83 -> 53 us of a 512-row call's kernel (1.07-1.13x the kernel), 818 -> 680 us at 4096
(1.05-1.09x), where it is bound by reading the rows; only AVX2 code (no AVX-512) takes it, the
only code whose programs copy columns so.
"""

from __future__ import annotations

from llvmlite import ir

from silvanforge.ir import lir

# The vectors transposed: ROWS of ROWS float32 lanes (one 256-bit register each).
ROWS = 8
_TYPE = lir.vector_type("f32", ROWS)


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


def _shuffle(b: ir.IRBuilder, op: str, first, second, imm: int | None = None):
    """``op`` (AT&T syntax: its sources reversed) of ``first`` and ``second``, as inline assembly
    LLVM keeps as written."""
    ft = ir.FunctionType(first.type, [first.type, second.type])
    text = f"{op} " + ("" if imm is None else f"$${imm}, ") + "$2, $1, $0"
    return b.asm(ft, text, "=x,x,x", [first, second], False)


__all__ = ["ROWS", "column_of_rows", "transposed"]

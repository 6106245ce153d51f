"""Selects on one bit of a byte vector, as AVX2 code makes them: the bit shifted to each byte's
top (``vpsllw``: a byte's top bit comes from its own bits) and ``vpblendvb``, which reads the
top bits only.  LLVM made most such selects an AND with the bit, an equality with zero and an
inversion (three operations and a constant's load, where this is one): the levelwise byte
program tests a path or column bit a select of its picks and a chunk bit of its node tables'
lookups, about 30 tests a tree of depth 8 (xgb_1000x8 1.05-1.07x on AVX2 code, Zen 4)."""

from __future__ import annotations

from llvmlite import ir

from silvanforge.ir import lir

BIT_BLENDS = True
# The blend's intrinsic by lanes.
BLEND_LANES = {16: "llvm.x86.sse41.pblendvb", 32: "llvm.x86.avx2.pblendvb"}


def takes(lanes: int, bit: int) -> bool:
    """Whether a select on ``bit`` of a vector of ``lanes`` bytes is a shift and a blend."""
    return BIT_BLENDS and lanes in BLEND_LANES and isinstance(bit, int) and 0 < bit <= 0x80 and not bit & (bit - 1)


def bit_select(b: ir.IRBuilder, e: lir.Select, expr, intrinsic) -> ir.Value | None:
    """The LIR select ``e`` by :func:`select` where it picks among bytes by one bit of a byte
    vector (``value & bit`` compared with 0) that :func:`takes` allows, else None; ``expr``:
    an LIR expression's value."""
    cond = e.cond
    if not (lir.element_type(e.type) in ("i8", "u8") and isinstance(cond, lir.Cmp) and cond.op in ("==", "!=")
            and isinstance(cond.a, lir.Bin) and cond.a.op == "&" and isinstance(cond.a.b, lir.Const)
            and isinstance(cond.b, lir.Const) and cond.b.value == 0 and lir.element_type(cond.a.type) in ("i8", "u8")):
        return None
    if not takes(lir.lanes_of(cond.a.type), cond.a.b.value):
        return None
    on, off = (e.a, e.b) if cond.op == "!=" else (e.b, e.a)
    return select(b, expr(cond.a.a), cond.a.b.value, expr(on), expr(off), intrinsic)


def select(b: ir.IRBuilder, value: ir.Value, bit: int, on: ir.Value, off: ir.Value, intrinsic) -> ir.Value:
    """``value & bit != 0 ? on : off`` for byte vectors ``value``, ``on`` and ``off``;
    ``intrinsic(name, result type, argument types)``: the declared intrinsic."""
    n = value.type.count
    words = ir.VectorType(ir.IntType(16), n // 2)
    shift = 7 - (bit.bit_length() - 1)
    mask = value if shift == 0 else b.bitcast(
        b.shl(b.bitcast(value, words), ir.Constant(words, [shift] * (n // 2))), value.type)
    return b.call(intrinsic(BLEND_LANES[n], value.type, [value.type] * 3), [off, on, mask])


def pairs(b: ir.IRBuilder, value: ir.Value, bit: int, values: list, intrinsic) -> list:
    """Of each pair of ``values``, the second where ``value & bit != 0``, else the first
    (a lookup's chunks picked by a bit of its index)."""
    return [select(b, value, bit, values[k + 1], values[k], intrinsic) for k in range(0, len(values), 2)]

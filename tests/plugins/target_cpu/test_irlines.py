"""Instructions the CPU target's code generator writes as text (silvanforge_target_cpu.irlines)
print, line by line, as llvmlite's IRBuilder prints the same operations, and name their values
in the same sequence."""

from __future__ import annotations

from llvmlite import ir
from silvanforge_target_cpu import irlines

I32, F64 = ir.IntType(32), ir.DoubleType()
V8I32, V4F64 = ir.VectorType(I32, 8), ir.VectorType(F64, 4)


def _body(mod: ir.Module, name: str, ours: bool) -> list[str]:
    signature = ir.FunctionType(ir.VoidType(), [ir.PointerType(I32), V8I32, V8I32, V4F64, V4F64, I32, I32])
    fn = ir.Function(mod, signature, name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    p, a, c, x, y, s, t = fn.args
    for op, predicate in (("<", "slt"), (">=", "sge"), ("==", "eq"), ("!=", "ne")):
        irlines.compare(b, "icmp", predicate, a, c) if ours else b.icmp_signed(op, a, c)
    irlines.compare(b, "icmp", "uge", a, c) if ours else b.icmp_unsigned(">=", a, c)
    for op in (">=", "<", "=="):
        irlines.compare(b, "fcmp", "o" + irlines.PREDICATE[op], x, y) if ours else b.fcmp_ordered(op, x, y)
    irlines.compare(b, "fcmp", "une", x, y) if ours else b.fcmp_unordered("!=", x, y)
    mask = irlines.compare(b, "icmp", "sgt", a, c) if ours else b.icmp_signed(">", a, c)
    irlines.select(b, mask, a, c) if ours else b.select(mask, a, c)
    one = irlines.compare(b, "icmp", "eq", s, t) if ours else b.icmp_signed("==", s, t)
    irlines.select(b, one, s, ir.Constant(I32, -3)) if ours else b.select(one, s, ir.Constant(I32, -3))
    for opname, made in (("and", b.and_), ("ashr", b.ashr), ("udiv", b.udiv), ("add", b.add)):
        irlines.arithmetic(b, opname, a, c) if ours else made(a, c)
    irlines.arithmetic(b, "fmul", x, y) if ours else b.fmul(x, y)
    at = irlines.element(b, p, s) if ours else b.gep(p, [s])
    irlines.load(b, at) if ours else b.load(at)
    wide = irlines.bitcast(b, at, ir.PointerType(V8I32)) if ours else b.bitcast(at, ir.PointerType(V8I32))
    irlines.load(b, wide, 4) if ours else b.load(wide, align=4)
    b.ret_void()
    return str(fn).split("\n")[1:]


def test_lines_print_as_the_builders_instructions():
    mod = ir.Module()
    ours, builders = _body(mod, "ours", True), _body(mod, "builders", False)
    assert len(ours) > 20 and ours == builders

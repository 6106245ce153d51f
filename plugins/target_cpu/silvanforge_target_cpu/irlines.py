"""LLVM IR instructions made as their text, for the code generator (:mod:`.codegen`).

An expanded form holds tens of thousands of compares, selects, bitwise operations and loads;
llvmlite's IRBuilder makes each an instruction object (its operands checked, a formatter run
when the module prints), a third of the Python of such a form's machine code, on the thread
whose Python the plan's other forms wait for.  Here each is a :class:`Line`: the text llvmlite
prints for the same instruction (the tests compare them line by line), named in the function's
scope as llvmlite names its own, inserted where the builder stands.  Operands are any llvmlite
values (typed pointers, as the generator makes)."""

from __future__ import annotations

from llvmlite import ir
from llvmlite.ir.values import NamedValue

__all__ = ["FLOAT_OPS", "INT_OPS", "PREDICATE", "Line", "arithmetic", "bitcast", "compare", "element", "load",
           "select"]

# llvmlite's predicates of compares (its builder's icmp_signed/unsigned, fcmp_ordered/unordered)
PREDICATE = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
FLOAT_OPS = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv", "%": "frem"}
# (by operator, and by operator and unsignedness where the instruction depends on it)
INT_OPS = {"+": "add", "-": "sub", "*": "mul", "&": "and", "|": "or", "^": "xor", "<<": "shl",
           ("/", True): "udiv", ("/", False): "sdiv", ("%", True): "urem", ("%", False): "srem",
           (">>", True): "lshr", (">>", False): "ashr"}


class Line(NamedValue):
    """An instruction given as its text after ``%name = ``."""

    def __init__(self, block: ir.Block, typ: ir.Type, text: str):
        super().__init__(block, typ, "")
        self.metadata: dict = {}
        self._text = text

    def descr(self, buf) -> None:
        buf.append(self._text)


def _line(b: ir.IRBuilder, typ: ir.Type, text: str) -> Line:
    line = Line(b.block, typ, text)
    b._insert(line)  # (where the builder's own instructions go)
    return line


def select(b: ir.IRBuilder, cond: ir.Value, x: ir.Value, y: ir.Value) -> Line:
    """``cond ? x : y``."""
    if x.type != y.type:
        raise TypeError(f"select of {x.type} and {y.type}")
    return _line(b, x.type, f"select  {cond.type} {cond.get_reference()}, {x.type} {x.get_reference()}, "
                            f"{y.type} {y.get_reference()}")


def compare(b: ir.IRBuilder, kind: str, predicate: str, x: ir.Value, y: ir.Value) -> Line:
    """``kind`` ("icmp" or "fcmp") ``predicate`` ("slt", "oge", "eq"...) of x and y: i1, or a
    vector of i1 as wide as x."""
    typ = ir.VectorType(ir.IntType(1), x.type.count) if isinstance(x.type, ir.VectorType) else ir.IntType(1)
    return _line(b, typ, f"{kind} {predicate} {x.type} {x.get_reference()}, {y.get_reference()}")


def arithmetic(b: ir.IRBuilder, opname: str, x: ir.Value, y: ir.Value) -> Line:
    """``opname`` ("add", "and", "fmul"...) of two values of one type."""
    if x.type != y.type:
        raise ValueError(f"Operands must be the same type, got ({x.type}, {y.type})")
    return _line(b, x.type, f"{opname} {x.type} {x.get_reference()}, {y.get_reference()}")


def element(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value) -> Line:
    """The address of element ``index`` of the pointer ``ptr`` (a GEP)."""
    return _line(b, ptr.type, f"getelementptr {ptr.type.pointee}, {ptr.type} {ptr.get_reference()}, "
                              f"{index.type} {index.get_reference()}")


def bitcast(b: ir.IRBuilder, ptr: ir.Value, typ: ir.PointerType) -> Line:
    """The pointer ``ptr`` as a pointer of type ``typ``."""
    return _line(b, typ, f"bitcast {ptr.type} {ptr.get_reference()} to {typ}")


def load(b: ir.IRBuilder, ptr: ir.Value, align: int | None = None) -> Line:
    """The value at the pointer ``ptr``, aligned to ``align`` bytes if given."""
    return _line(b, ptr.type.pointee, f"load {ptr.type.pointee}, {ptr.type} {ptr.get_reference()}"
                                      + ("" if align is None else f", align {align}"))

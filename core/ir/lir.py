"""LIR: explicit buffers, loads, arithmetic and structured control flow.

This is where the in-memory layout of the model is explicit.  Representation plugins build LIR
expressions through a :class:`Builder`; target plugins translate a :class:`Module` to their
language (LLVM IR, CUDA C, OpenCL C).  The IR is small and typed:

* types are strings: ``i1 i8 i16 i32 i64 u8 u32 f32 f64``, and short vectors of them written
  ``f32x4`` (:func:`vector_type`): arithmetic, comparisons, selects and casts apply lane by lane,
  a vector constant is one value in every lane, ``Vector`` builds one from scalars,
  ``PackBits`` packs an ``i1xN`` into an integer, lane ``k`` as bit ``k`` (tiled walks),
  ``Gather`` loads one element per lane at a vector of indices (``Lookup`` where the indices
  stay in a small table: register permutes on the CPU) and ``Extract`` takes one lane
  (vector walks: :func:`widen` turns a scalar expression of vector operands into one);
* expressions are frozen dataclasses (``Const``, ``Var``, ``Load``, ``Bin``, ``Cmp``, ``Select``,
  ``Cast``, ``IsNan``), so they can be shared and printed;
* statements are ``Assign`` (to a mutable local), ``Store``, ``For``, ``While``, ``If``.

Floating comparisons are *ordered*: any comparison with NaN is false, as in C.

The node classes live in :mod:`~silvanforge.ir.lir_nodes` (types, expressions, statements,
buffers, functions, modules, the :class:`Builder`); every name is imported from here, which also
holds the functions over them: :func:`widen`, :func:`constant_value`, :func:`fold_index`,
:func:`vector_of` (expressions), :func:`verify` and :func:`format_module` (the printer).
"""

from __future__ import annotations

from typing import Iterable

from silvanforge.errors import IRVerificationError
from silvanforge.ir.lir_nodes import (
    BIN_OPS,
    CMP_OPS,
    CODEGEN_INFO,
    COL_STRIDE,
    FLOAT_TYPES,
    GPU_DIMS,
    INT_TYPES,
    ITER_BEGIN,
    ITER_END,
    LIR_TO_NUMPY,
    NUM_ROWS,
    NUMPY_TO_LIR,
    ROW_BEGIN,
    ROW_END,
    ROW_STRIDE,
    SCALAR_PARAMS,
    TYPES,
    Assign,
    AtomicAdd,
    Barrier,
    Bin,
    Buffer,
    Builder,
    Cast,
    Clz,
    Cmp,
    Const,
    Expr,
    Extract,
    For,
    Function,
    Gather,
    GpuIndex,
    If,
    IsNan,
    Launch,
    Load,
    Lookup,
    Module,
    PackBits,
    Prefetch,
    Select,
    Stmt,
    Store,
    Var,
    Vector,
    While,
    element_type,
    is_type,
    lanes_of,
    lir_type,
    vector_type,
)

__all__ = ["INT_TYPES", "FLOAT_TYPES", "TYPES", "NUMPY_TO_LIR", "LIR_TO_NUMPY", "lir_type", "vector_type", "element_type", "lanes_of", "is_type", "Const", "Var", "Load", "Bin", "Cmp", "Select", "Cast", "IsNan", "Vector", "PackBits", "Gather", "Lookup", "Extract", "Clz", "GpuIndex", "GPU_DIMS", "Expr", "BIN_OPS", "CMP_OPS", "CODEGEN_INFO", "Assign", "Store", "For", "While", "If", "AtomicAdd", "Prefetch", "Barrier", "Stmt", "Buffer", "Function", "Launch", "Module", "ROW_STRIDE", "COL_STRIDE", "ROW_BEGIN", "ROW_END", "ITER_BEGIN", "ITER_END", "NUM_ROWS", "SCALAR_PARAMS", "Builder", "broadcast", "widen", "constant_value", "fold_index", "first_load", "vector_of", "verify", "format_module"]


def broadcast(e: Expr, lanes: int) -> Expr:
    """The scalar ``e`` in each of ``lanes`` lanes (a vector constant for a constant)."""
    if lanes_of(e.type) == lanes:
        return e
    if isinstance(e, Const):
        return Const(e.value, vector_type(e.type, lanes))
    return Vector((e,) * lanes)


def vector_of(loads: list) -> Expr:
    """The vector of the scalars ``loads``: one vector load where they are consecutive elements
    of one buffer (``buf[base + 0]``, ``buf[base + 1]``, ... as a representation laying a tile's
    nodes side by side answers the per-lane hooks), else a vector built lane by lane."""
    first = loads[0]
    if isinstance(first, Load) and isinstance(first.index, Bin) and first.index.op == "+":
        base = first.index.a
        if all(isinstance(ld, Load) and ld.buffer == first.buffer and isinstance(ld.index, Bin)
               and ld.index.op == "+" and ld.index.a == base and isinstance(ld.index.b, Const)
               and ld.index.b.value == k for k, ld in enumerate(loads)):
            return Load(first.buffer, base, vector_type(first.type, len(loads)))
    return Vector(tuple(loads))


def fold_index(op: str, a: Expr, b: Expr) -> Expr:
    """Build ``a op b`` for index arithmetic, evaluating it when both sides are constants."""
    if isinstance(a, Const) and isinstance(b, Const):
        x, y = a.value, b.value
        ops = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "/": lambda: x // y,
               "min": lambda: min(x, y)}
        return Const(ops[op](), "i64")
    return Bin(op, a, b)


def first_load(e: Expr) -> Load | None:
    """The first load in expression ``e``, depth first (None if it loads nothing)."""
    if isinstance(e, Load):
        return e
    for part in (getattr(e, name, None) for name in ("cond", "a", "b", "index")):
        if part is not None and not isinstance(part, (str, int, float)):
            found = first_load(part)
            if found is not None:
                return found
    return None


def widen(e: Expr) -> Expr:
    """``e`` with every operation applied lane by lane where an operand is a vector.

    Representation hooks build expressions for one node (``node * 2``, ``i64(load(...))``); given
    a vector of nodes they mix vector and scalar operands.  This types the result as a vector:
    scalar operands of a vector operation are broadcast, casts and comparisons take the vector's
    lanes and a load at a vector index becomes a :class:`Gather`.  Scalar expressions come back
    unchanged."""
    if isinstance(e, Load):
        index = widen(e.index)
        n = lanes_of(index.type)
        if n > 1:
            return Gather(e.buffer, index, vector_type(e.type, n))
        return e if index is e.index else Load(e.buffer, index, e.type)
    if isinstance(e, Bin):
        a, b = widen(e.a), widen(e.b)
        n = max(lanes_of(a.type), lanes_of(b.type))
        return Bin(e.op, broadcast(a, n), broadcast(b, n)) if n > 1 else Bin(e.op, a, b)
    if isinstance(e, Cmp):
        a, b = widen(e.a), widen(e.b)
        n = max(lanes_of(a.type), lanes_of(b.type))
        return Cmp(e.op, broadcast(a, n), broadcast(b, n), vector_type("i1", n))
    if isinstance(e, Select):
        c, a, b = widen(e.cond), widen(e.a), widen(e.b)
        n = max(lanes_of(c.type), lanes_of(a.type), lanes_of(b.type))
        return Select(broadcast(c, n), broadcast(a, n), broadcast(b, n))
    if isinstance(e, Cast):
        a = widen(e.a)
        return Cast(a, vector_type(element_type(e.type), lanes_of(a.type)))
    if isinstance(e, IsNan):
        a = widen(e.a)
        return IsNan(a, vector_type("i1", lanes_of(a.type)))
    if isinstance(e, Gather):
        return Gather(e.buffer, widen(e.index), e.type)
    return e


# ----------------------------------------------------------------------------- constants
def constant_value(e: Expr, buffers: dict, env: dict | None = None):
    """The value of ``e`` where every input is known while compiling: constants, loads from
    model buffers (their data) at constant indices, and variables bound in ``env`` (name ->
    value).  Raises ``KeyError`` / ``TypeError`` on anything else."""
    def ev(x):
        return constant_value(x, buffers, env)

    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return (env or {})[e.name]
    if isinstance(e, Load):
        return buffers[e.buffer].data[int(ev(e.index))].item()
    if isinstance(e, Cast):
        v, t = ev(e.a), element_type(e.type)
        return float(v) if t in FLOAT_TYPES else bool(v) if t == "i1" else int(v)
    if isinstance(e, IsNan):
        return ev(e.a) != ev(e.a)
    if isinstance(e, Select):
        return ev(e.a) if ev(e.cond) else ev(e.b)
    if isinstance(e, Cmp):
        x, y = ev(e.a), ev(e.b)
        return {"<": x < y, "<=": x <= y, "==": x == y, "!=": x != y, ">": x > y, ">=": x >= y}[e.op]
    if isinstance(e, Bin):
        x, y = ev(e.a), ev(e.b)
        if e.op == "/":
            return int(x / y) if isinstance(x, int) and isinstance(y, int) else x / y
        ops = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "min": lambda: min(x, y),
               "max": lambda: max(x, y), "&": lambda: x & y, "|": lambda: x | y, "^": lambda: x ^ y,
               ">>": lambda: x >> y, "<<": lambda: x << y}
        return ops[e.op]()
    raise TypeError(f"{e} is not a constant expression")


def format_module(module: Module) -> str:
    lines = [f"; LIR module: {module.info.get('summary', '')}".rstrip()]
    for buf in module.buffers.values():
        size = "" if buf.data is None else f"[{buf.data.size}]"
        if buf.kind == "scratch":
            rows = f"(rows + {buf.pad_rows})" if buf.pad_rows else "rows"
            size = f"[{rows} x {buf.per_row}]" + ("" if buf.fill is None else f" = {buf.fill}")
        if buf.kind == "shared":
            size = f"[{buf.size}] per block"
        if buf.kind == "local":
            size = f"[{buf.size}] per call"
        lines.append(f"buffer {buf.kind} {buf.name}: {buf.type}{size}")
    params = ", ".join(f"%{p.name}: {p.type}" for p in SCALAR_PARAMS)
    for fn in module.functions:
        split = f"loop x{fn.trip}" if fn.parallel == "loop" else ("rows" if fn.row_parallel else "none")
        if fn.launch is not None:
            split = f"gpu {fn.launch}"
        lines.append(f"func @{fn.name}({params}) <parallel: {split}> {{")
        for name, t in fn.locals.items():
            lines.append(f"  local %{name}: {t}")
        _format_block(fn.body, "  ", lines)
        lines.append("}")
    return "\n".join(lines)


def _format_block(stmts: Iterable, pad: str, out: list) -> None:
    for s in stmts:
        if isinstance(s, Assign):
            out.append(f"{pad}%{s.var.name} = {s.value}")
        elif isinstance(s, Store):
            out.append(f"{pad}{s.buffer}[{s.index}] = {s.value}")
        elif isinstance(s, AtomicAdd):
            out.append(f"{pad}atomic {s.buffer}[{s.index}] += {s.value}")
        elif isinstance(s, For):
            kw = "par.for" if s.parallel else "for"
            extra = f" unroll({s.unroll})" if s.unroll > 1 else ""
            out.append(f"{pad}{kw} %{s.var.name} = {s.start} to {s.stop} step {s.step}{extra} {{")
            _format_block(s.body, pad + "  ", out)
            out.append(f"{pad}}}")
        elif isinstance(s, While):
            out.append(f"{pad}while {s.cond} {{")
            _format_block(s.body, pad + "  ", out)
            out.append(f"{pad}}}")
        elif isinstance(s, Prefetch):
            out.append(f"{pad}prefetch {s.buffer}[{s.index}]")
        elif isinstance(s, Barrier):
            out.append(f"{pad}barrier")
        elif isinstance(s, If):
            out.append(f"{pad}if {s.cond} {{")
            _format_block(s.then, pad + "  ", out)
            if s.orelse:
                out.append(f"{pad}}} else {{")
                _format_block(s.orelse, pad + "  ", out)
            out.append(f"{pad}}}")


def verify(module: Module) -> None:
    """Type-check every expression and check every buffer and local is declared."""
    params = {p.name: p.type for p in SCALAR_PARAMS}

    def fail(msg):
        raise IRVerificationError(f"LIR verification failed: {msg}")

    def check_expr(e, scope):
        if isinstance(e, Const):
            if not is_type(e.type):
                fail(f"constant of unknown type {e.type}")
        elif isinstance(e, Var):
            t = scope.get(e.name)
            if t is not None and not is_type(t):
                fail(f"%{e.name} has unknown type {t}")
            if t is None:
                fail(f"use of undeclared variable %{e.name}")
            if t != e.type:
                fail(f"%{e.name} used as {e.type} but declared {t}")
        elif isinstance(e, Load):
            buf = module.buffers.get(e.buffer)
            if buf is None:
                fail(f"load from undeclared buffer {e.buffer}")
            if buf.type != element_type(e.type) or not is_type(e.type):
                fail(f"load from {e.buffer} typed {e.type}, buffer is {buf.type}")
            check_expr(e.index, scope)
            if e.index.type not in INT_TYPES:
                fail(f"index into {e.buffer} is {e.index.type}")
        elif isinstance(e, Bin):
            check_expr(e.a, scope), check_expr(e.b, scope)
            if e.op not in BIN_OPS:
                fail(f"unknown operator {e.op}")
            if e.a.type != e.b.type:
                fail(f"operands of {e.op} differ: {e.a.type} vs {e.b.type} in {e}")
        elif isinstance(e, Cmp):
            check_expr(e.a, scope), check_expr(e.b, scope)
            if e.op not in CMP_OPS or e.a.type != e.b.type:
                fail(f"bad comparison {e}")
            if e.type != vector_type("i1", lanes_of(e.a.type)):
                fail(f"comparison of {e.a.type} typed {e.type}")
        elif isinstance(e, Select):
            check_expr(e.cond, scope), check_expr(e.a, scope), check_expr(e.b, scope)
            if e.cond.type != vector_type("i1", lanes_of(e.a.type)) or e.a.type != e.b.type:
                fail(f"bad select {e}")
        elif isinstance(e, (Cast, IsNan)):
            check_expr(e.a, scope)
            if isinstance(e, IsNan) and element_type(e.a.type) not in FLOAT_TYPES:
                fail(f"isnan of {e.a.type}")
            if isinstance(e, IsNan) and e.type != vector_type("i1", lanes_of(e.a.type)):
                fail(f"isnan of {e.a.type} typed {e.type}")
            if isinstance(e, Cast) and (not is_type(e.type) or lanes_of(e.type) != lanes_of(e.a.type)):
                fail(f"cast of {e.a.type} to {e.type}")
        elif isinstance(e, Vector):
            for x in e.elems:
                check_expr(x, scope)
            if len(e.elems) < 2 or lanes_of(e.elems[0].type) != 1 \
                    or any(x.type != e.elems[0].type for x in e.elems):
                fail(f"a vector needs 2 or more scalars of one type: {e}")
        elif isinstance(e, Gather):
            buf = module.buffers.get(e.buffer)
            if buf is None:
                fail(f"gather from undeclared buffer {e.buffer}")
            check_expr(e.index, scope)
            n = lanes_of(e.index.type)
            if n < 2 or element_type(e.index.type) not in INT_TYPES:
                fail(f"gather from {e.buffer} with index of type {e.index.type}")
            if e.type != vector_type(buf.type, n):
                fail(f"gather from {e.buffer} typed {e.type}, buffer is {buf.type}, {n} lanes")
        elif isinstance(e, Lookup):
            buf = module.buffers.get(e.buffer)
            if buf is None:
                fail(f"lookup in undeclared buffer {e.buffer}")
            check_expr(e.at, scope)
            check_expr(e.index, scope)
            n = lanes_of(e.index.type)
            if e.at.type != "i64":
                fail(f"lookup in {e.buffer} at an offset of type {e.at.type}")
            if n < 2 or element_type(e.index.type) not in INT_TYPES:
                fail(f"lookup in {e.buffer} with index of type {e.index.type}")
            if e.type != vector_type(buf.type, n):
                fail(f"lookup in {e.buffer} typed {e.type}, buffer is {buf.type}, {n} lanes")
            if not isinstance(e.size, int) or e.size < 1 or e.size & (e.size - 1):
                fail(f"lookup in {e.buffer} of size {e.size} (a power of two)")
        elif isinstance(e, Extract):
            check_expr(e.a, scope)
            if not 0 <= e.lane < lanes_of(e.a.type) or lanes_of(e.a.type) < 2:
                fail(f"lane {e.lane} of {e.a.type}")
        elif isinstance(e, GpuIndex):
            if e.dim not in GPU_DIMS or e.type != "i64":
                fail(f"unknown GPU index {e.dim}")
        elif isinstance(e, Clz):
            check_expr(e.a, scope)
            if element_type(e.a.type) not in INT_TYPES or element_type(e.a.type) == "i1":
                fail(f"clz of {e.a.type}")
        elif isinstance(e, PackBits):
            check_expr(e.a, scope)
            if element_type(e.a.type) != "i1" or not 2 <= lanes_of(e.a.type) <= 31 or e.type != "i32":
                fail(f"packbits of {e.a.type}")
        else:
            fail(f"unknown expression {e!r}")

    def check_block(stmts, scope):
        for s in stmts:
            if isinstance(s, Assign):
                check_expr(s.value, scope)
                if s.var.name not in scope or scope[s.var.name] != s.value.type:
                    fail(f"assignment of {s.value.type} to %{s.var.name}")
            elif isinstance(s, (Store, AtomicAdd)):
                check_expr(s.index, scope), check_expr(s.value, scope)
                buf = module.buffers.get(s.buffer)
                if buf is None or buf.kind in ("model", "input"):
                    fail(f"store into {s.buffer}, which is not a writable buffer")
                if buf.type != element_type(s.value.type) or (isinstance(s, AtomicAdd) and lanes_of(s.value.type) > 1):
                    fail(f"store of {s.value.type} into {s.buffer} of {buf.type}")
            elif isinstance(s, For):
                check_expr(s.start, scope), check_expr(s.stop, scope)
                inner = dict(scope)
                inner[s.var.name] = s.var.type
                check_block(s.body, inner)
            elif isinstance(s, While):
                check_expr(s.cond, scope)
                check_block(s.body, scope)
            elif isinstance(s, If):
                check_expr(s.cond, scope)
                check_block(s.then, scope), check_block(s.orelse, scope)
            elif isinstance(s, Prefetch):
                check_expr(s.index, scope)
                if s.buffer not in module.buffers:
                    fail(f"prefetch of undeclared buffer {s.buffer}")
            elif isinstance(s, Barrier):
                pass
            else:
                fail(f"unknown statement {s!r}")

    for fn in module.functions:
        check_block(fn.body, {**params, **fn.locals})

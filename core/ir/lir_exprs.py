"""Rewriting and evaluating LIR expressions: :func:`widen` (a scalar expression of vector
operands as a vector expression, for vector walks), :func:`constant_value` (an expression
whose inputs are known while compiling, for walks of compile-time trees), :func:`fold_index`
(index arithmetic folded where it is constant) and :func:`vector_of` (scalars as one vector)."""

from __future__ import annotations

from silvanforge.ir.lir_nodes import (FLOAT_TYPES, Bin, Cast, Cmp, Const, Expr, Gather, IsNan, Load, Select, Var, Vector,
                        element_type, lanes_of, vector_type)


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

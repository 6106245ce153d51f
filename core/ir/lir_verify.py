"""The LIR verifier: every expression type-checked, every buffer and local declared."""

from __future__ import annotations

from silvanforge.errors import IRVerificationError
from silvanforge.ir.lir_nodes import (BIN_OPS, CMP_OPS, FLOAT_TYPES, GPU_DIMS, INT_TYPES, SCALAR_PARAMS, Assign, AtomicAdd,
                        Barrier, Bin, Cast, Clz, Cmp, Const, Extract, For, Gather, GpuIndex, If, IsNan, Load, Lookup,
                        Module, PackBits, Prefetch, Select, Store, Var, Vector, While, element_type, is_type,
                        lanes_of, vector_type)


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

"""LIR: explicit buffers, loads, arithmetic and structured control flow.

This is where the in-memory layout of the model is explicit.  Representation plugins build LIR
expressions through a :class:`Builder`; target plugins translate a :class:`Module` to their
language (LLVM IR, CUDA C, OpenCL C).  The IR is small and typed:

* types are strings: ``i1 i8 i16 i32 i64 u8 u32 f32 f64``, and short vectors of them written
  ``f32x4`` (:func:`vector_type`): arithmetic, comparisons, selects and casts apply lane by lane,
  a vector constant is one value in every lane, ``Vector`` builds one from scalars,
  ``PackBits`` packs an ``i1xN`` into an integer, lane ``k`` as bit ``k`` (tiled walks),
  ``Gather`` loads one element per lane at a vector of indices and ``Extract`` takes one lane
  (vector walks: :func:`widen` turns a scalar expression of vector operands into one);
* expressions are frozen dataclasses (``Const``, ``Var``, ``Load``, ``Bin``, ``Cmp``, ``Select``,
  ``Cast``, ``IsNan``), so they can be shared and printed;
* statements are ``Assign`` (to a mutable local), ``Store``, ``For``, ``While``, ``If``.

Floating comparisons are *ordered*: any comparison with NaN is false, as in C.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Union

import numpy as np

from ..errors import IRVerificationError

INT_TYPES = ("i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32")
FLOAT_TYPES = ("f32", "f64")
TYPES = INT_TYPES + FLOAT_TYPES
NUMPY_TO_LIR = {
    np.dtype(np.bool_): "i1", np.dtype(np.int8): "i8", np.dtype(np.int16): "i16",
    np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8",
    np.dtype(np.uint16): "u16", np.dtype(np.uint32): "u32", np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
}
LIR_TO_NUMPY = {v: k for k, v in NUMPY_TO_LIR.items()}


def lir_type(dtype) -> str:
    return NUMPY_TO_LIR[np.dtype(dtype)]


def vector_type(t: str, lanes: int) -> str:
    """The type of ``lanes`` values of scalar type ``t`` (``t`` itself for one lane)."""
    return t if lanes <= 1 else f"{t}x{lanes}"


def element_type(t: str) -> str:
    """The scalar type of the lanes of ``t`` (``t`` itself for scalars)."""
    return t.split("x", 1)[0]


def lanes_of(t: str) -> int:
    """Lanes of a vector type; 1 for scalars."""
    return int(t.split("x", 1)[1]) if "x" in t else 1


def is_type(t: str) -> bool:
    if "x" not in t:
        return t in TYPES
    elem, n = t.split("x", 1)
    return elem in TYPES and n.isdigit() and int(n) >= 2


# ----------------------------------------------------------------------------- expressions
@dataclasses.dataclass(frozen=True)
class Const:
    value: Union[int, float]
    type: str

    def __str__(self):
        return f"{self.value}:{self.type}"


@dataclasses.dataclass(frozen=True)
class Var:
    name: str
    type: str

    def __str__(self):
        return f"%{self.name}"


@dataclasses.dataclass(frozen=True)
class Load:
    """``buffer[index]``; typed as a vector of N lanes, elements ``index .. index + N - 1``."""

    buffer: str
    index: "Expr"
    type: str

    def __str__(self):
        lanes = lanes_of(self.type)
        return f"{self.buffer}[{self.index}]" if lanes == 1 else f"{self.buffer}[{self.index} +: {lanes}]"


@dataclasses.dataclass(frozen=True)
class Bin:
    """Arithmetic and bit operations: + - * / % & | ^ << >> min max (both operands one type)."""

    op: str
    a: "Expr"
    b: "Expr"

    @property
    def type(self) -> str:
        return self.a.type

    def __str__(self):
        return f"({self.a} {self.op} {self.b})"


@dataclasses.dataclass(frozen=True)
class Cmp:
    op: str  # < <= == != > >=
    a: "Expr"
    b: "Expr"
    type: str = "i1"

    def __str__(self):
        return f"({self.a} {self.op} {self.b})"


@dataclasses.dataclass(frozen=True)
class Select:
    cond: "Expr"
    a: "Expr"
    b: "Expr"

    @property
    def type(self) -> str:
        return self.a.type

    def __str__(self):
        return f"({self.cond} ? {self.a} : {self.b})"


@dataclasses.dataclass(frozen=True)
class Cast:
    """Numeric conversion; float -> int truncates toward zero (callers range-check first)."""

    a: "Expr"
    type: str

    def __str__(self):
        return f"{self.type}({self.a})"


@dataclasses.dataclass(frozen=True)
class IsNan:
    a: "Expr"
    type: str = "i1"

    def __str__(self):
        return f"isnan({self.a})"


@dataclasses.dataclass(frozen=True)
class Vector:
    """A vector whose lane ``k`` is the scalar ``elems[k]`` (all of one type)."""

    elems: tuple

    @property
    def type(self) -> str:
        return vector_type(self.elems[0].type, len(self.elems))

    def __str__(self):
        return "<" + ", ".join(map(str, self.elems)) + ">"


@dataclasses.dataclass(frozen=True)
class PackBits:
    """The lanes of an ``i1xN`` vector as an ``i32``: lane ``k`` is bit ``k`` (lane 0 the least
    significant), the other bits 0."""

    a: "Expr"
    type: str = "i32"

    def __str__(self):
        return f"packbits({self.a})"


@dataclasses.dataclass(frozen=True)
class Gather:
    """``buffer[index[k]]`` in lane ``k``: ``index`` is an integer vector, the result a vector
    of the buffer's element type with as many lanes (CPU vector walks: one gather per field)."""

    buffer: str
    index: "Expr"
    type: str

    def __str__(self):
        return f"gather {self.buffer}[{self.index}]"


@dataclasses.dataclass(frozen=True)
class Extract:
    """Lane ``lane`` (a constant) of the vector ``a``, as a scalar."""

    a: "Expr"
    lane: int

    @property
    def type(self) -> str:
        return element_type(self.a.type)

    def __str__(self):
        return f"{self.a}[lane {self.lane}]"


@dataclasses.dataclass(frozen=True)
class Clz:
    """Leading zero bits of an integer (lane by lane for vectors); the width for zero
    (QuickScorer-style bitvectors: the leftmost leaf still standing is the highest set bit)."""

    a: "Expr"

    @property
    def type(self) -> str:
        return self.a.type

    def __str__(self):
        return f"clz({self.a})"


@dataclasses.dataclass(frozen=True)
class GpuIndex:
    """A GPU thread's coordinate: ``grid.x|y|z`` is the index of its block in the grid,
    ``block.x|y|z`` its index inside the block (CUDA blockIdx / threadIdx, OpenCL
    get_group_id / get_local_id)."""

    dim: str
    type: str = "i64"

    def __str__(self):
        return f"gpu.{self.dim}"


GPU_DIMS = ("grid.x", "grid.y", "grid.z", "block.x", "block.y", "block.z")

Expr = Union[Const, Var, Load, Bin, Cmp, Select, Cast, IsNan, Vector, PackBits, Gather, Extract,
             Clz, GpuIndex]
BIN_OPS = ("+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", "min", "max")
CMP_OPS = ("<", "<=", "==", "!=", ">", ">=")


# ----------------------------------------------------------------------------- statements
@dataclasses.dataclass
class Assign:
    var: Var
    value: Expr


@dataclasses.dataclass
class Store:
    buffer: str
    index: Expr
    value: Expr


@dataclasses.dataclass
class For:
    var: Var
    start: Expr
    stop: Expr
    step: int
    body: list
    parallel: bool = False  # iterations independent: a target may run them on threads / GPU lanes
    unroll: int = 1


@dataclasses.dataclass
class While:
    cond: Expr
    body: list


@dataclasses.dataclass
class If:
    cond: Expr
    then: list
    orelse: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class AtomicAdd:
    """``buffer[index] += value`` as one atomic update (parallel iterations share the element)."""

    buffer: str
    index: Expr
    value: Expr


@dataclasses.dataclass
class Prefetch:
    """A hint to bring ``buffer[index]`` into cache; has no effect on results."""

    buffer: str
    index: Expr


@dataclasses.dataclass
class Barrier:
    """Every thread of a GPU block waits here; memory written before it (shared and global) is
    visible to the block's threads after it.  Every thread of the block must reach it."""


Stmt = Union[Assign, Store, AtomicAdd, For, While, If, Prefetch, Barrier]


# ----------------------------------------------------------------------------- module
@dataclasses.dataclass
class Buffer:
    """A buffer the function reads or writes.

    kind ``model``: constant data built at compile time (``data`` holds it);
    kind ``input``: the rows, indexed ``row * row_stride + feature * col_stride``;
    kind ``output``: the margins, ``num_outputs`` per row;
    kind ``scratch``: working memory the runtime allocates per call, ``per_row`` elements for each
      row of the batch, every element starting at ``fill`` (privatised reductions), or left
      unset where ``fill`` is None (buffers a phase writes before any reads: split rows), with
      ``pad_rows`` rows more than the batch (walks of lanes past the batch's end read there);
    kind ``shared``: GPU shared (CUDA) / local (OpenCL) memory of ``size`` elements, one copy per
      thread block, declared by the kernel (GPU lowering only);
    kind ``local``: ``size`` elements private to one call of a function, unset at its start (CPU:
      on the stack; a program representation's per-tree bits).
    """

    name: str
    type: str
    kind: str
    data: np.ndarray | None = None
    per_row: int = 0
    fill: float | None = 0.0
    pad_rows: int = 0
    size: int = 0


@dataclasses.dataclass
class Function:
    """``name(rows, row_stride, col_stride, row_begin, row_end, iter_begin, iter_end, num_rows,
    margins, buffers)``: one phase of a prediction.

    ``parallel`` says how the runtime may split the phase over threads: ``rows`` (by row
    ranges, when ``row_parallel``), or ``loop`` (the outermost loop is a parallel loop over trees
    with ``trip`` iterations; each call runs iterations ``iter_begin`` to ``iter_end`` for all
    rows).  Phases run one after another.
    """

    name: str
    body: list
    locals: dict = dataclasses.field(default_factory=dict)  # name -> type of mutable locals
    parallel: str = "rows"
    row_parallel: bool = True
    trip: int = 0
    launch: "Launch | None" = None  # GPU kernels: the grid and block they are launched with


@dataclasses.dataclass
class Launch:
    """How a GPU kernel is launched.  ``block``: threads per block in x, y, z.  ``grid``: blocks
    in x, y, z, each an ``int`` or ``("rows", step, per)``: ``ceil(ceil(num_rows / step) / per)``
    (a loop over the batch whose trip count is known only when called)."""

    grid: tuple
    block: tuple

    def grid_for(self, num_rows: int) -> tuple:
        out = []
        for g in self.grid:
            if isinstance(g, tuple):
                _, step, per = g
                g = -(-(-(-num_rows // step)) // per)
            out.append(max(1, int(g)))
        return tuple(out)

    @property
    def threads_per_block(self) -> int:
        return int(np.prod(self.block))

    def __str__(self):
        def fmt(g):
            return f"ceil(rows/{g[1]}/{g[2]})" if isinstance(g, tuple) else str(g)
        return f"grid({', '.join(map(fmt, self.grid))}) block({', '.join(map(str, self.block))})"


@dataclasses.dataclass
class Module:
    functions: list  # of Function, run in order
    buffers: dict  # name -> Buffer, in argument order
    num_features: int
    num_outputs: int
    input_type: str
    output_type: str
    info: dict = dataclasses.field(default_factory=dict)  # free-form facts for printers

    def model_buffers(self) -> list[Buffer]:
        return [b for b in self.buffers.values() if b.kind == "model"]

    def scratch_buffers(self) -> list[Buffer]:
        return [b for b in self.buffers.values() if b.kind == "scratch"]

    def local_buffers(self) -> list[Buffer]:
        return [b for b in self.buffers.values() if b.kind == "local"]

    def shared_buffers(self) -> list[Buffer]:
        return [b for b in self.buffers.values() if b.kind == "shared"]

    def table_buffers(self) -> list[Buffer]:
        """The buffers passed through the pointer table: model buffers, then scratch."""
        return self.model_buffers() + self.scratch_buffers()


# Parameters every predict function has, in order (after the buffers named in Module.buffers
# of kind input/output come the model buffers).
ROW_STRIDE = Var("row_stride", "i64")
COL_STRIDE = Var("col_stride", "i64")
ROW_BEGIN = Var("row_begin", "i64")
ROW_END = Var("row_end", "i64")
ITER_BEGIN = Var("iter_begin", "i64")
ITER_END = Var("iter_end", "i64")
NUM_ROWS = Var("num_rows", "i64")  # rows in the whole batch (sizes the scratch buffers)
SCALAR_PARAMS = (ROW_STRIDE, COL_STRIDE, ROW_BEGIN, ROW_END, ITER_BEGIN, ITER_END, NUM_ROWS)


class Builder:
    """Emits statements into the current block and makes typed expressions.

    Representation plugins receive one and call ``b.load(...)``, ``b.add(...)`` and so on; they
    may declare model buffers with :meth:`buffer`.
    """

    def __init__(self, module_buffers: dict | None = None):
        self.buffers: dict[str, Buffer] = module_buffers if module_buffers is not None else {}
        self.locals: dict[str, str] = {}
        self._blocks: list[list] = [[]]
        self._counter = 0

    # blocks
    @property
    def block(self) -> list:
        return self._blocks[-1]

    def emit(self, stmt) -> None:
        self.block.append(stmt)

    def push(self) -> list:
        self._blocks.append([])
        return self._blocks[-1]

    def pop(self) -> list:
        return self._blocks.pop()

    def begin_function(self) -> None:
        """Start the body of a new function: no locals, one empty block (buffers are the
        module's and stay)."""
        self.locals, self._blocks = {}, [[]]

    # declarations
    def buffer(self, name: str, data: np.ndarray) -> str:
        """Declare (or re-use) a model buffer holding ``data``; returns its name."""
        if name not in self.buffers:
            self.buffers[name] = Buffer(name, lir_type(data.dtype), "model", np.ascontiguousarray(data))
        return name

    def local(self, hint: str, type_: str, init: Expr | None = None) -> Var:
        self._counter += 1
        v = Var(f"{hint}{self._counter}", type_)
        self.locals[v.name] = type_
        if init is not None:
            self.emit(Assign(v, init))
        return v

    # expressions
    @staticmethod
    def const(value, type_: str) -> Const:
        return Const(float(value) if element_type(type_) in FLOAT_TYPES else int(value), type_)

    def load(self, buffer: str, index: Expr, lanes: int = 1) -> Expr:
        """``buffer[index]``, or with ``lanes`` > 1 the vector of that many elements from there.
        A vector ``index`` gathers one element per lane (:class:`Gather`), so representation
        hooks written for one node serve a vector of nodes unchanged."""
        n = lanes_of(index.type)
        if n > 1:
            if lanes > 1:
                raise ValueError("a gather loads one element per lane")
            return Gather(buffer, index, vector_type(self.buffers[buffer].type, n))
        return Load(buffer, index, vector_type(self.buffers[buffer].type, lanes))

    @staticmethod
    def cast(a: Expr, type_: str) -> Expr:
        """``a`` as ``type_``; a vector ``a`` cast to a scalar type keeps its lanes."""
        if lanes_of(a.type) > 1 and lanes_of(type_) == 1:
            type_ = vector_type(type_, lanes_of(a.type))
        return a if a.type == type_ else Cast(a, type_)

    def add(self, a, b):
        return Bin("+", a, b)

    def mul(self, a, b):
        return Bin("*", a, b)


# ----------------------------------------------------------------------------- widening
def broadcast(e: Expr, lanes: int) -> Expr:
    """The scalar ``e`` in each of ``lanes`` lanes (a vector constant for a constant)."""
    if lanes_of(e.type) == lanes:
        return e
    if isinstance(e, Const):
        return Const(e.value, vector_type(e.type, lanes))
    return Vector((e,) * lanes)


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


# ----------------------------------------------------------------------------- verifier
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


# ----------------------------------------------------------------------------- printer
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

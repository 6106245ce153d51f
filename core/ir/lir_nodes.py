"""LIR nodes: the types, expressions, statements, buffers, functions and modules of the LIR,
and the :class:`Builder` representations write them with (:mod:`silvanforge.ir.lir` is the
place to import them from)."""

from __future__ import annotations

import dataclasses
from typing import Union

import numpy as np


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
class Lookup:
    """``buffer[at + index[k]]`` in lane ``k``, every ``index[k]`` below ``size`` (a power of two):
    a lookup in a small table of the buffer (the levelwise walks' node tables).  Its meaning is
    a :class:`Gather`'s; a CPU target whose vectors hold the table in a few registers does it
    with register permutes instead (AVX-512's ``vpermps``/``vpermi2ps``: a cycle or two where a
    16-lane gather takes 16 loads), and the buffer must then hold a vector's elements past
    ``at + size`` (whatever their values)."""

    buffer: str
    at: "Expr"  # scalar, i64
    index: "Expr"  # integer vector
    size: int
    type: str

    def __str__(self):
        return f"lookup {self.buffer}[{self.at} + {self.index}] size {self.size}"


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

Expr = Union[Const, Var, Load, Bin, Cmp, Select, Cast, IsNan, Vector, PackBits, Gather, Lookup,
             Extract, Clz, GpuIndex]
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


# Module info a target reads to generate code, beside the statements themselves: vector
# walks (gathers wanted of the target machine), a light optimisation pipeline, and LLVM's
# machine scheduler off (absent: False, False, True).  Two modules that print alike but differ
# here compile differently (:func:`silvanforge.lowering.program.lir_digest` tells them apart).
CODEGEN_INFO = ("vector_walk", "light_optimisation", "machine_scheduler")


@dataclasses.dataclass
class Module:
    functions: list  # of Function, run in order
    buffers: dict  # name -> Buffer, in argument order
    num_features: int
    num_outputs: int
    input_type: str
    output_type: str
    # Free-form facts for printers; the keys in CODEGEN_INFO also steer how a target generates
    # machine code from the same statements (so they are part of the program's digest).
    info: dict = dataclasses.field(default_factory=dict)

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

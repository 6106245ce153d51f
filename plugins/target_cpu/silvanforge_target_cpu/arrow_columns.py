"""The CPU's kernel of arrow number columns: a function in LLVM IR, compiled once a process (no
model is compiled: the columns are data), that copies number columns of a record batch
exported through the Arrow C data interface into rows, a null made NaN.

``arrow_columns_f32(args)`` (and ``_f64``, for rows of float64) reads the int64 block of
:data:`ARG_LAYOUT`: ``batch``, the address of the batch's ``struct ArrowArray`` (a struct
array: its children are the columns); ``count`` columns, the k-th the batch's child
``columns[k]`` of type ``kinds[k]`` (:data:`KINDS`) written to ``out + features[k] *
column_stride``, its row r (the batch's row, after its own and the batch's offsets) to ``out +
r * row_stride`` from there (strides in elements, so rows in either order).  A value goes
through float64 to the rows' type, as NumPy converts a 64-bit integer for rows of float32
(rounded twice); where the column has a validity bitmap, a value whose bit is 0 is NaN.  The
batch is released (its ``release`` callback) before the function returns, so a caller exports
a batch and hands it over.  Why: arrow's own conversions cost a call a column and a copy of
it (4096 rows of 28 float32 columns with nulls: 140 us, this kernel 23 us with the export, rows
in column order; in row order its stores do not vectorise: 61 us).  Compiled once a process (0.3-0.9 s),
on a thread of its own from the first large table (:func:`silvanforge.inputs.arrow_frames.columns_kernel`).
"""

from __future__ import annotations

import ctypes
import functools

import llvmlite.binding as llvm
import llvmlite.ir as ir

from .llvm_host import optimise
from .treeshap import _Vars

i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
f32, f64 = ir.FloatType(), ir.DoubleType()

ARG_LAYOUT = ("batch", "count", "columns", "features", "kinds", "out", "row_stride", "column_stride")

# An arrow type (its name) -> its kind code (the signed integers before the unsigned).
KINDS = {name: k for k, name in enumerate(("float", "double", "int8", "int16", "int32", "int64",
                                           "uint8", "uint16", "uint32", "uint64"))}
_TYPES = (f32, f64, i8, i16, i32, i64, i8, i16, i32, i64)

# struct ArrowArray, in int64 words: length, null_count, offset, n_buffers, n_children,
# buffers, children, dictionary, release, private_data.
LENGTH, OFFSET, BUFFERS, CHILDREN, RELEASE = 0, 2, 5, 6, 8


def _function(module, out_type) -> None:
    name = "arrow_columns_" + ("f32" if out_type is f32 else "f64")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64.as_pointer()]), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    v = _Vars(fn, b)
    word = {arg: b.load(b.gep(fn.args[0], [ir.Constant(i64, k)]), name=arg) for k, arg in enumerate(ARG_LAYOUT)}
    array = b.inttoptr(word["batch"], i64.as_pointer(), name="batch")
    columns = b.inttoptr(word["columns"], i64.as_pointer())
    features = b.inttoptr(word["features"], i64.as_pointer())
    kinds = b.inttoptr(word["kinds"], i8.as_pointer())
    out = b.inttoptr(word["out"], out_type.as_pointer())
    row_stride, column_stride = word["row_stride"], word["column_stride"]

    def field(struct, k):
        return b.load(b.gep(struct, [ir.Constant(i64, k)]))

    rows = field(array, LENGTH)
    batch_offset = field(array, OFFSET)
    children = b.inttoptr(field(array, CHILDREN), i64.as_pointer())
    with v.loop(ir.Constant(i64, 0), word["count"], "k") as k:
        child = b.inttoptr(b.load(b.gep(children, [b.load(b.gep(columns, [k]))])), i64.as_pointer())
        first = b.add(batch_offset, field(child, OFFSET))
        buffers = b.inttoptr(field(child, BUFFERS), i64.as_pointer())
        validity = b.inttoptr(field(buffers, 0), i8.as_pointer(), name="validity")
        values = field(buffers, 1)
        dest = b.gep(out, [b.mul(b.load(b.gep(features, [k])), column_stride)])
        kind = b.load(b.gep(kinds, [k]))
        done = fn.append_basic_block("column.done")
        switch = b.switch(kind, done)
        for code, ty in enumerate(_TYPES):
            block = fn.append_basic_block(f"kind{code}")
            switch.add_case(ir.Constant(i8, code), block)
            b.position_at_end(block)
            _copy(b, v, ty, code, b.inttoptr(values, ty.as_pointer()), validity, first, rows, dest, row_stride,
                  out_type)
            b.branch(done)
        b.position_at_end(done)
    release = b.inttoptr(field(array, RELEASE), ir.FunctionType(ir.VoidType(), [i64.as_pointer()]).as_pointer())
    b.call(release, [array])
    b.ret_void()


def _copy(b, v, ty, code, values, validity, first, rows, dest, row_stride, out_type) -> None:
    """One kind of column: every value copied (a loop LLVM vectorises where the rows are in
    column order), then, where the column has a validity bitmap, NaN written where a byte of
    it has a bit 0 (a loop by bit within the column's rows would not vectorise: 5x slower)."""
    with v.loop(ir.Constant(i64, 0), rows, "r") as r:
        x = b.load(b.gep(values, [b.add(first, r)]))
        if ty is f32:
            x = b.fpext(x, f64)
        elif ty is not f64:
            x = (b.uitofp if code >= KINDS["uint8"] else b.sitofp)(x, f64)
        b.store(b.fptrunc(x, f32) if out_type is f32 else x, b.gep(dest, [b.mul(r, row_stride)]))
    nulls = b.icmp_unsigned("!=", b.ptrtoint(validity, i64), ir.Constant(i64, 0))
    with b.if_then(nulls):
        end = b.add(first, rows)
        three, nan = ir.Constant(i64, 3), ir.Constant(out_type, float("nan"))
        with v.loop(b.lshr(first, three), b.lshr(b.add(end, ir.Constant(i64, 7)), three), "byte") as j:
            byte = b.load(b.gep(validity, [j]))
            with b.if_then(b.icmp_unsigned("!=", byte, ir.Constant(i8, 0xFF))), \
                    v.loop(ir.Constant(i8, 0), ir.Constant(i8, 8), "bit") as bit:
                i = b.add(b.shl(j, three), b.zext(bit, i64))
                cleared = b.icmp_unsigned("==", b.and_(b.lshr(byte, bit), ir.Constant(i8, 1)), ir.Constant(i8, 0))
                null = b.and_(cleared, b.and_(b.icmp_signed(">=", i, first), b.icmp_signed("<", i, end)))
                with b.if_then(null):
                    b.store(nan, b.gep(dest, [b.mul(b.sub(i, first), row_stride)]))


def build_ir() -> str:
    module = ir.Module("arrow_columns")
    _function(module, f32)
    _function(module, f64)
    return str(module)


_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class ArrowColumnsKernel:
    """The compiled kernel (one a process); :meth:`run` calls it through ctypes (the GIL
    released)."""

    arg_layout = ARG_LAYOUT
    kinds = KINDS

    def __init__(self):
        mod, tm = optimise(build_ir())
        self._engine = llvm.create_mcjit_compiler(mod, tm)
        self._engine.finalize_object()
        self._fns = {4: _CALL(self._engine.get_function_address("arrow_columns_f32")),
                     8: _CALL(self._engine.get_function_address("arrow_columns_f64"))}

    def run(self, args: int, row_bytes: int) -> None:
        """One batch into rows of float32 (``row_bytes`` 4) or float64 (8); ``args``: the
        address of the block."""
        self._fns[row_bytes](args)


@functools.cache
def kernel() -> ArrowColumnsKernel:
    """The process's kernel, compiled at its first request (two threads asking at once may
    both compile it: one is kept)."""
    return ArrowColumnsKernel()

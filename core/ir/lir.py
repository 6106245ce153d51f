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

The LIR is written in four modules, every name imported from here:
:mod:`~silvanforge.ir.lir_nodes` (types, expressions, statements, buffers, functions, modules,
the :class:`Builder`), :mod:`~silvanforge.ir.lir_exprs` (:func:`widen`, :func:`constant_value`,
:func:`fold_index`, :func:`vector_of`), :mod:`~silvanforge.ir.lir_verify` (:func:`verify`) and
:mod:`~silvanforge.ir.lir_print` (:func:`format_module`).
"""

from __future__ import annotations

from silvanforge.ir.lir_exprs import broadcast, constant_value, fold_index, vector_of, widen
from silvanforge.ir.lir_nodes import (BIN_OPS, CMP_OPS, COL_STRIDE, FLOAT_TYPES, GPU_DIMS, INT_TYPES, ITER_BEGIN, ITER_END,
                        LIR_TO_NUMPY, NUMPY_TO_LIR, NUM_ROWS, ROW_BEGIN, ROW_END, ROW_STRIDE, SCALAR_PARAMS,
                        TYPES, Assign, AtomicAdd, Barrier, Bin, Buffer, Builder, Cast, Clz, Cmp, Const, Expr,
                        Extract, For, Function, Gather, GpuIndex, If, IsNan, Launch, Load, Lookup, Module, PackBits,
                        Prefetch, Select, Stmt, Store, Var, Vector, While, element_type, is_type, lanes_of,
                        lir_type, vector_type)
from silvanforge.ir.lir_print import format_module
from silvanforge.ir.lir_verify import verify

__all__ = ["INT_TYPES", "FLOAT_TYPES", "TYPES", "NUMPY_TO_LIR", "LIR_TO_NUMPY", "lir_type", "vector_type",
           "element_type", "lanes_of", "is_type", "Const", "Var", "Load", "Bin", "Cmp", "Select", "Cast",
           "IsNan", "Vector", "PackBits", "Gather", "Lookup", "Extract", "Clz", "GpuIndex", "GPU_DIMS", "Expr",
           "BIN_OPS", "CMP_OPS", "Assign", "Store", "For", "While", "If", "AtomicAdd", "Prefetch", "Barrier",
           "Stmt", "Buffer", "Function", "Launch", "Module", "ROW_STRIDE", "COL_STRIDE", "ROW_BEGIN",
           "ROW_END", "ITER_BEGIN", "ITER_END", "NUM_ROWS", "SCALAR_PARAMS", "Builder", "broadcast", "widen",
           "constant_value", "fold_index", "vector_of", "verify", "format_module"]

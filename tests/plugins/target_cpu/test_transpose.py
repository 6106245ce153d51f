"""AVX2 code's transpose of eight registers of float32 (silvanforge_target_cpu.transpose): run
alone it equals numpy's transpose, NaN and signed zeros kept bit for bit; the code generator
takes it for exactly the vectors that are a column of eight rows (two side by side: sixteen), in
AVX2 code and, for wide rows, AVX-512 code; the levelwise float program that copies its columns
so equals the reference evaluator."""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

import silvanforge as sf
from silvanforge.ir import lir
from silvanforge.runtime import reference
from silvanforge.testing import random_forest
from silvanforge_target_cpu import cpus, llvm_host, transpose

V3 = "x86-64-v3"
# (inline assembly is parsed for the host's architecture: AVX2 code built elsewhere goes without)
X86 = llvm.get_process_triple().startswith(("x86_64", "amd64"))
x86 = pytest.mark.skipif(not X86, reason="the transpose is built on x86-64 hosts")
needs_v3 = pytest.mark.skipif(not X86 or bool(cpus.missing_here(V3)), reason="this host cannot run x86-64-v3 code")


def _transpose_function():
    """``void t(float *in, float *out)``: out's eight rows the transpose of in's (8x8)."""
    v8 = ir.VectorType(ir.FloatType(), 8)
    mod = ir.Module(name="t")
    fp = ir.PointerType(ir.FloatType())
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [fp, fp]), name="t")
    b = ir.IRBuilder(fn.append_basic_block())
    src, dst = fn.args
    rows = [b.load(b.bitcast(b.gep(src, [ir.Constant(ir.IntType(64), 8 * k)]), ir.PointerType(v8)), align=4)
            for k in range(8)]
    for j, column in enumerate(transpose.transposed(b, rows)):
        b.store(column, b.bitcast(b.gep(dst, [ir.Constant(ir.IntType(64), 8 * j)]), ir.PointerType(v8)), align=4)
    b.ret_void()
    return str(mod)


@needs_v3
def test_eight_registers_transposed_equal_numpys_transpose_bit_for_bit():
    mod, tm = llvm_host.optimise(_transpose_function(), cpu=V3)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(engine.get_function_address("t"))
    assert "vperm2f128" in tm.emit_assembly(mod)  # the shuffles as written
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.normal(size=(8, 8)).astype(np.float32)
        x[rng.random(x.shape) < 0.2] = np.nan
        x[rng.random(x.shape) < 0.1] = -0.0
        out = np.empty_like(x)
        t(x.ctypes.data, out.ctypes.data)
        np.testing.assert_array_equal(out.view(np.uint32), x.T.view(np.uint32))


def test_only_a_column_of_eight_distinct_rows_of_float32_is_a_transpose():
    rows = [lir.Var(f"r{k}", "f32x8") for k in range(8)]
    assert transpose.column_of_rows(lir.Vector(tuple(lir.Extract(r, 3) for r in rows))) == (tuple(rows), 3)
    mixed = tuple(lir.Extract(r, k % 2) for k, r in enumerate(rows))  # lanes differ
    repeated = tuple(lir.Extract(rows[k % 4], 0) for k in range(8))  # rows repeat
    wide = tuple(lir.Extract(lir.Var(f"w{k}", "f32x16"), 0) for k in range(8))  # not 8-lane rows
    doubles = tuple(lir.Extract(lir.Var(f"d{k}", "f64x8"), 0) for k in range(8))
    four = tuple(lir.Extract(r, 0) for r in rows[:4])
    for elems in (mixed, repeated, wide, doubles, four):
        assert transpose.column_of_rows(lir.Vector(elems)) is None


@x86
def test_avx2_code_alone_transposes_rows_and_equals_the_reference():
    """The levelwise float program's columns copied from vectors of eight consecutive features
    (AVX2 code) are transposed by the shuffles; AVX-512 code over these few columns and SSE code
    never carry them."""
    found = 0
    for seed in range(20):
        forest = random_forest(seed, max_trees=8, max_depth=7, max_features=16, plain=True, summed=True)
        if forest.num_features < 9 or np.dtype(forest.threshold_dtype) != np.float32:
            continue
        text = sf.show(forest, "target", rep="levelwise", cpu=V3, batch_size=16)
        if "vperm2f128" not in text:
            continue
        found += 1
        assert text.count("vperm2f128") % 8 == 0  # whole transposes
        for cpu in ("x86-64-v4", "x86-64"):
            assert "vperm2f128" not in sf.show(forest, "target", rep="levelwise", cpu=cpu, batch_size=16)
        if cpus.missing_here(V3):
            continue
        _exact_in_either_order(forest, V3, seed, nan=0.15, sizes=(8, 16, 13, 40))
    assert found >= 3


def _exact_in_either_order(forest, cpu: str, seed: int, nan: float, sizes: tuple) -> None:
    """The levelwise program for 16-row calls compiled for ``cpu`` equals the reference on rows
    with a ``nan`` share missing, C- and Fortran-ordered, ``sizes`` rows a call."""
    cf = sf.compile(forest, rep="levelwise", cpu=cpu, batch_size=16, threads=1)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(max(sizes), forest.num_features)).astype(np.float32)
    X[rng.random(X.shape) < nan] = np.nan
    for n in sizes:
        for rows in (X[:n], np.asfortranarray(X[:n])):
            np.testing.assert_array_equal(cf.predict(rows, output_margin=True),
                                          reference.predict(forest, rows, output_margin=True))


@x86
@pytest.mark.parametrize("cpu", ["x86-64-v4", V3])
def test_wide_rows_are_transposed_on_avx512_and_avx2_code_and_equal_the_reference(cpu):
    """Rows of more columns than the levelwise float program picks by selects (it gathers) copy
    their columns from vectors of eight consecutive features on AVX-512 code too, a 16-row
    block's column two transposes side by side: exact on NaN, C- and Fortran-ordered rows,
    partial and whole blocks and spans, runs broken by features no split reads."""
    from silvanforge_rep_oblivious import complete, cost

    found = 0
    for seed in range(12):
        forest = random_forest(seed, max_trees=40, max_depth=6, max_features=90, plain=True, summed=True)
        facts = complete.recognise(forest)
        if np.dtype(forest.threshold_dtype) != np.float32 or isinstance(facts, str) \
                or len(facts.columns) <= cost.PICK_COLUMNS:
            continue
        text = sf.show(forest, "target", rep="levelwise", cpu=cpu, batch_size=16)
        assert text.count("vperm2f128") % 8 == 0 and "vperm2f128" in text
        found += 1
        if cpus.missing_here(cpu):
            continue
        _exact_in_either_order(forest, cpu, seed, nan=0.6, sizes=(3, 16, 21, 45))
    assert found >= 2

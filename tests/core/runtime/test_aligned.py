"""Buffers the compiled code reads start on a cache line (:mod:`silvanforge.runtime.aligned`):
model tables, the scratch of a call and the small calls' staging, whatever the allocator's
state; the arrays are what ``np.zeros`` / ``np.empty`` give otherwise."""

from __future__ import annotations

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.ir.hir import Forest
from silvanforge.runtime import aligned, reference, threads
from silvanforge.testing import random_tree


@pytest.mark.parametrize("shape,dtype", [(0, np.float32), (1, np.uint8), (7, np.float64), ((3, 5), np.float32),
                                         ((64, 3), np.int16)])
def test_arrays_start_on_a_line(shape, dtype):
    junk = [np.empty(k, np.uint8) for k in (1, 17, 33, 4099)]  # (the allocator's state moved)
    z, e = aligned.zeros(shape, dtype), aligned.empty(shape, dtype)
    for a in (z, e):
        assert a.shape == np.zeros(shape).shape and a.dtype == np.dtype(dtype) and a.flags["C_CONTIGUOUS"]
        assert a.ctypes.data % aligned.LINE == 0 or a.size == 0
    assert not z.any()
    del junk


def test_model_tables_scratch_and_outputs_start_on_lines():
    from silvanforge_target_cpu import jit

    rng = np.random.default_rng(2)
    forest = Forest(trees=[random_tree(rng, 6, (0,), 5, [0, 1], False, True) for _ in range(12)], num_features=6)
    X = rng.normal(size=(300, 6))
    with_scratch = 0
    # (trees' sums kept apart and folded in order: a form with scratch; and a lone row's staging)
    ordered = "tile(tree, t0, t1, 4)\nreorder(t0, batch, t1)\ninterleave(t1)\nparallel(t0)\norderedReduce(t0)"
    for kw in ({"rep": "sparse", "schedule": ordered}, {"rep": "array"}):
        cf = sf.compile(forest, threads=2, **kw).wait()
        np.testing.assert_allclose(cf.predict(X), reference.predict(forest, X), rtol=1e-12)
        np.testing.assert_allclose(cf.predict(X[:1]), reference.predict(forest, X[:1]), rtol=1e-12)
        kernels = [f.kernel for f in cf._plan[0] if isinstance(f.kernel, jit.CpuKernel)]
        assert kernels
        for kernel in kernels:
            assert all(b.ctypes.data % aligned.LINE == 0 for b in kernel._buffers)
            scratch = [a for a in threads._scratch(kernel, 37) if a.size]
            with_scratch += bool(scratch)
            assert all(a.ctypes.data % aligned.LINE == 0 for a in scratch)
            rows = np.tile(X, (4, 1))  # (outputs of 4 KiB and more: on lines, threads.OUTPUT_ON_LINE_BYTES)
            out = threads.run_phases(kernel, rows.astype(kernel.input_dtype), forest.num_outputs, 1)
            assert out.nbytes >= threads.OUTPUT_ON_LINE_BYTES
            assert out.ctypes.data % aligned.LINE == 0
    assert with_scratch


def test_object_dtypes_and_negative_shapes_are_refused():
    with pytest.raises(ValueError):
        aligned.zeros(3, object)
    with pytest.raises(ValueError):
        aligned.empty((2, -1), np.float32)

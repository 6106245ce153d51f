"""Vector walks (interleaved rows walked as one SIMD walk with gathers) equal the reference
evaluator to the last bit: every representation, padded and unpadded, NaNs and every flag,
float64 forests, multi-output forests, batches not divisible by the interleave factor."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, rows_for

import silvanforge as sf
from silvanforge.ir import lir
from silvanforge.lowering.walksetup import vector_walks
from silvanforge.runtime import reference

REPS = ["sparse", "array", "reorg"]


def _check(forest, X, **kw):
    with vector_walks(True):
        cf = sf.compile(forest, **kw)
    for margin in (True, False):
        got = cf.predict(X, output_margin=margin)
        want = reference.predict(forest, X, output_margin=margin)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=8), rep=st.sampled_from(REPS), pad=st.booleans(),
       seed=st.integers(0, 2**16), n=st.sampled_from([1, 13, 203]))
def test_vector_walk_matches_reference(forest, rep, pad, seed, n):
    X = rows_for(forest, np.random.default_rng(seed), n)
    _check(forest, X, rep=rep, pad=pad, batch_size=max(16, n), threads=1)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=6, max_depth=5), seed=st.integers(0, 2**16))
def test_vector_walk_float32_inputs_fortran_order(forest, seed):
    X = np.asfortranarray(rows_for(forest, np.random.default_rng(seed), 77).astype(np.float32))
    _check(forest, X, rep="sparse", batch_size=64, threads=1)


@pytest.mark.parametrize("rep", REPS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_vector_walk_is_used_and_exact(rep, dtype):
    """A forest without categorical splits walks as vectors (gathers in the LIR)."""
    from hypothesis import find

    forest = find(forests(max_trees=6, max_depth=5),
                  lambda f: not f.has_categorical() and f.threshold_dtype == np.dtype(dtype)
                  and f.num_outputs > 1 and min(t.depth() for t in f.trees) >= 2)
    with vector_walks(True):
        low = sf.lower(forest, rep=rep, batch_size=256)
    text = lir.format_module(low.lir)
    assert "gather" in text and low.lir.info.get("vector_walk")
    with vector_walks(False):
        assert "gather" not in lir.format_module(sf.lower(forest, rep=rep, batch_size=256).lir)
    X = rows_for(forest, np.random.default_rng(1), 250)
    _check(forest, X, rep=rep, batch_size=256, threads=1)


def test_gpu_lowering_never_walks_vectors():
    from hypothesis import find

    forest = find(forests(max_trees=4, max_depth=4), lambda f: not f.has_categorical() and f.trees[0].depth() >= 2)
    with vector_walks(True):
        low = sf.lower(forest, target="amd", rep="sparse", batch_size=256)
    assert "gather" not in lir.format_module(low.lir)


def test_widen_types_hook_expressions_lane_by_lane():
    node = lir.Var("n", "i64x8")
    b = lir.Builder({"f": lir.Buffer("f", "i8", "model", np.zeros(4, np.int8))})
    e = lir.widen(lir.Bin("+", node, lir.Builder.cast(lir.Bin("+", b.load("f", node), lir.Const(1, "i8")), "i64")))
    assert e.type == "i64x8"
    assert isinstance(e.b.a.a, lir.Gather) and e.b.a.b == lir.Const(1, "i8x8")
    assert lir.widen(lir.Bin("*", lir.Var("s", "i64"), lir.Const(2, "i64"))).type == "i64"

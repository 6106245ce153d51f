"""The compiled CPU code equals the reference evaluator on random forests and random rows."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, rows_for

import silvanforge as sf
from silvanforge.runtime import reference
from silvanforge.scheduler import Schedule

ORDERS = [("batch", "tree"), ("tree", "batch")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(), rep=st.sampled_from(["array", "sparse"]), order=st.sampled_from(ORDERS),
       seed=st.integers(0, 2**16), n=st.sampled_from([0, 1, 7, 300, 1100]))
def test_random_forest_matches_reference(forest, rep, order, seed, n):
    X = rows_for(forest, np.random.default_rng(seed), n)
    cf = sf.compile(forest, rep=rep, schedule=Schedule().reorder(*order))
    for margin in (True, False):
        got = cf.predict(X, output_margin=margin)
        want = reference.predict(forest, X, output_margin=margin)
        assert got.shape == want.shape
        # Same operations in the same order in the same precision: equal to the last bit.
        np.testing.assert_array_equal(got, want)

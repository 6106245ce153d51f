"""``expandWalk``: walks of compile-time trees as nested branches with the nodes' columns,
thresholds and flags as constants.  Every representation x loop order x thread count equals the
reference evaluator on random forests (NaNs, categorical splits, zero-as-missing, several
outputs, every aggregation), the code holds no walk loop, and the directive says what it needs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, make_forest, rows_for

import silvanforge as sf
from silvanforge import ScheduleError
from silvanforge.runtime import reference

SCHEDULES = {
    "rows-outer": "specialize(tree)\nexpandWalk(tree)",
    "trees-outer": "reorder(tree, batch)\nspecialize(tree)\nexpandWalk(batch)",
    "chunked": "tile(batch, b0, b1, 8)\nreorder(b0, tree, b1)\nspecialize(tree)\nparallel(b0)\nexpandWalk(b1)",
    "interleaved": "tile(batch, b0, b1, 8)\nreorder(b0, tree, b1)\nspecialize(tree)\ntile(b1, c0, c1, 4)\n"
                   "interleave(c1)\nparallel(b0)\nexpandWalk(c1)",
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=st.one_of(forests(max_trees=8, max_depth=5), forests(max_trees=8, max_depth=5, plain=True)),
       rep=st.sampled_from(["array", "sparse", "reorg"]), name=st.sampled_from(sorted(SCHEDULES)),
       n=st.sampled_from([1, 7, 61]), threads=st.sampled_from([1, 2]))
def test_expanded_walks_match_reference(forest, rep, name, n, threads):
    X = rows_for(forest, np.random.default_rng(n), n)
    cf = sf.compile(forest, rep=rep, schedule=SCHEDULES[name], threads=threads)
    want = reference.predict(forest, X, output_margin=True)
    tol = 1e-5 if forest.accumulate_dtype == "float32" else 1e-12
    np.testing.assert_allclose(cf.predict(X, output_margin=True), want, rtol=tol, atol=tol)
    assert "while" not in cf.show("lir")  # every walk is branches, none a loop


def test_expanded_walks_of_trained_models(tmp_path):
    """A LightGBM model with NaNs and a categorical feature, and an XGBoost multi-class one."""
    from support_gpu import gpu_models

    for path, X in gpu_models(tmp_path).values():
        forest = sf.load_model(path)
        cf = sf.compile(forest, schedule=SCHEDULES["chunked"], threads=2)
        tol = 1e-5 if forest.accumulate_dtype == "float32" else 1e-12
        np.testing.assert_allclose(cf.predict(X), reference.predict(forest, X), rtol=tol, atol=tol)


def test_expand_walk_needs_constant_trees():
    forest = make_forest(num_outputs=1)
    with pytest.raises(ScheduleError, match="specialize"):
        sf.compile(forest, schedule="expandWalk(batch)")
    with pytest.raises(ScheduleError, match="untiled"):
        sf.compile(forest, schedule="specialize(tree)\nexpandWalk(tree)", tile_size=2)

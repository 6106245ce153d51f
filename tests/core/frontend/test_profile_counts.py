"""Profiles count the reference evaluator's walks; reordering trees into depth / peel-depth groups
keeps every prediction (test_profile.py, beside this file, compiles profiled and reordered
models)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, rows_for

import silvanforge as sf
from silvanforge.frontend import hir_passes
from silvanforge.runtime import reference

pytestmark = pytest.mark.core_alone  # needs no target and no shipped representation


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_depth=7), seed=st.integers(0, 2**16), rows=st.sampled_from([0, 1, 50, 400]))
def test_hits_are_the_reference_walks(forest, seed, rows):
    X = rows_for(forest, np.random.default_rng(seed), rows)
    p = sf.profile(forest, X)
    assert p.num_rows == rows and p.num_trees == forest.num_trees
    Xc = np.asarray(X, dtype=forest.threshold_dtype)
    for tree, hits in zip(forest.trees, p.hits):
        leaves = tree.left < 0
        reached = reference.leaf_indices(tree, Xc, forest.category_rule)
        np.testing.assert_array_equal(hits[leaves], np.bincount(reached, minlength=tree.num_nodes)[leaves])
        inner = np.flatnonzero(~leaves)
        np.testing.assert_array_equal(hits[inner], hits[tree.left[inner]] + hits[tree.right[inner]])
        assert hits[0] == rows


def _integer_leaves(forest: sf.Forest, rng) -> sf.Forest:
    """The forest with small integer leaf values and base score: every sum is exact in any order."""
    import dataclasses

    trees = [dataclasses.replace(t, leaf_value=rng.integers(-8, 9, t.leaf_value.shape).astype(float))
             for t in forest.trees]
    return dataclasses.replace(forest, trees=trees, base_score=np.round(forest.base_score))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=16), key=st.sampled_from(["depth", "peel"]), seed=st.integers(0, 2**16))
def test_reordering_is_exact(forest, key, seed):
    rng = np.random.default_rng(seed)
    forest = _integer_leaves(forest, rng)
    new, groups, order = hir_passes.reorder_trees(forest, key)
    assert sorted(order.tolist()) == list(range(forest.num_trees))
    assert all(new.trees[i] is forest.trees[int(o)] for i, o in enumerate(order))
    keys = [t.depth() if key == "depth" else hir_passes.min_leaf_depth(t) for t in new.trees]
    assert keys == sorted(keys)
    assert [g.start for g in groups] == [0] + [g.stop for g in groups[:-1]] and groups[-1].stop == new.num_trees
    for g in groups:
        assert set(keys[g.start:g.stop]) == {g.key}
        assert g.peel == min(hir_passes.min_leaf_depth(t) for t in new.trees[g.start:g.stop])
    # Trees of one output keep their order inside a group (stable).
    for g in groups:
        assert list(order[g.start:g.stop]) == sorted(order[g.start:g.stop])
    X = rows_for(forest, rng, 200)
    np.testing.assert_array_equal(reference.predict(new, X, output_margin=True),
                                  reference.predict(forest, X, output_margin=True))

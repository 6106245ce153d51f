"""A compile's memo (silvanforge.plan.memo): statistics of a model computed once within a compile, never
kept past it, and shared results that cannot be changed by one of their users."""

from __future__ import annotations

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.api import compile_options
from silvanforge.plan.memo import compile_scope, memoised
from silvanforge.plan.policy import untuned_plan
from silvanforge.runtime import reference
from silvanforge.testing import random_forest, rows_for


def test_memoised_within_a_scope_only():
    calls = []
    owner = object()

    def compute():
        calls.append(1)
        return len(calls)

    assert memoised(owner, "k", compute) == 1 and memoised(owner, "k", compute) == 2  # no scope
    with compile_scope():
        first = memoised(owner, "k", compute)
        assert memoised(owner, "k", compute) == first  # kept
        assert memoised(owner, "other", compute) == first + 1  # another key
        assert memoised(object(), "k", compute) == first + 2  # another owner
        with compile_scope():  # nested scopes share the outer one's cache
            assert memoised(owner, "k", compute) == first
    assert memoised(owner, "k", compute) == first + 3  # the scope closed: computed again


def test_tree_depths_are_shared_read_only_and_follow_a_changed_model():
    forest = random_forest(3, max_trees=4, max_depth=5)
    tree = max(forest.trees, key=lambda t: t.num_nodes)
    with compile_scope():
        depths = tree.node_depths()
        assert tree.node_depths() is depths
        with pytest.raises(ValueError):
            depths[0] = 7  # shared with every other caller of the compile
    # After the scope, a tree changed in place is seen afresh.
    leaf = int(np.flatnonzero(tree.left < 0)[0])
    parent_depth = int(depths[leaf])
    new = len(tree.left)
    tree.left = np.concatenate([tree.left, [-1, -1]]).astype(np.int32)
    tree.right = np.concatenate([tree.right, [-1, -1]]).astype(np.int32)
    tree.left[leaf], tree.right[leaf] = new, new + 1
    assert int(tree.node_depths()[new]) == parent_depth + 1


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_a_compile_chooses_as_without_the_memo(seed):
    """The memo changes how often statistics are computed, never what is chosen: the untuned
    plan made in a compile scope equals the one made with nothing kept, and predictions equal
    the reference at every band."""
    forest = random_forest(seed, max_trees=30, max_depth=6, summed=True)
    opts = compile_options(None)
    kept_forms, kept_bands = untuned_plan(forest, opts)
    plain_forms, plain_bands = untuned_plan.__wrapped__(forest, opts)  # outside any scope
    assert [f.text() for f in kept_forms] == [f.text() for f in plain_forms]
    assert [f.digest for f in kept_forms] == [f.digest for f in plain_forms]
    assert kept_bands == plain_bands
    cf = sf.compile(forest)
    X = rows_for(forest, np.random.default_rng(seed), 300)
    expected = reference.predict(forest, X, output_margin=True)
    for n in (1, 2, 17, 300):
        np.testing.assert_allclose(cf.predict(X[:n], output_margin=True), expected[:n], rtol=1e-6, atol=1e-6)

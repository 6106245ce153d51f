"""The reorg representation (trees interleaved level by level, RAPIDS FIL's layout): its buffers
are laid out as the representations draft describes, and compiled code using it predicts what the reference
evaluator and the training libraries do."""

from __future__ import annotations

import numpy as np
import pytest
import silvanforge_rep_reorg as reorg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, rows_for
from support_common import assert_close

import silvanforge as sf
from silvanforge.ir.hir import Aggregation, Forest, Transform, Tree
from silvanforge.lowering.walksetup import build_layout
from silvanforge.options import CompileOptions
from silvanforge.plugins import registry
from silvanforge.runtime import reference

SCHEDULES = {
    "default": None,
    "trees-outer": "reorder(tree, batch)",
    "interleaved": "interleaved",
    "xgboost": "xgboost",
    "cached": "tile(tree, t0, t1, 4)\nreorder(t0, batch, t1)\ncache(t0)",
    "tree-parallel": "tile(tree, t0, t1, 3)\nparallel(t0)",
}
# Schedules that add the leaf values in another order than the reference (privatised margins).
REORDERING = {"tree-parallel"}


def test_listed_as_a_representation():
    assert "reorg" in registry().representations()
    registry().check_representation("reorg")  # does not raise
    assert not getattr(reorg, "STATUS", "").startswith("not implemented")


def _chain(depth: int, feature: int = 0) -> Tree:
    """A tree whose right spine is ``depth`` splits long (leaves on the left)."""
    left, right, feat, thr = [], [], [], []
    for d in range(depth):
        node = len(left)
        left += [node + 1, -1]
        right += [node + 2, -1]
        feat += [feature, -1]
        thr += [float(d), 0.0]  # split `node`: its left leaf at node + 1, the rest at node + 2
    left.append(-1), right.append(-1), feat.append(-1), thr.append(0.0)  # the last leaf
    n = len(left)
    return Tree.from_nodes(left, right, feat, thr, np.arange(n, dtype=float))


def _forest(trees, num_features=2) -> Forest:
    return Forest(trees=trees, num_features=num_features, num_outputs=1, base_score=np.zeros(1),
                  aggregation=Aggregation.SUM, transform=Transform("identity"),
                  threshold_dtype="float64", accumulate_dtype="float64")


def test_layout_interleaves_the_trees_level_by_level():
    forest = _forest([_chain(2, 0), _chain(0), _chain(1, 1)])
    # plain feature indices, as stored unpacked
    layout = build_layout(forest, options=CompileOptions(packed_default_left=False))
    laid = reorg.ReorgLayout().buffers(forest, layout)
    bufs = laid.buffers
    T, D = 3, 2
    assert (laid.info["trees"], laid.info["padded_depth"]) == (T, D)
    feature, threshold = bufs["reorg_feature"], bufs["reorg_threshold"]
    assert len(feature) == (2 ** (D + 1) - 1) * T
    # Slot n * T + t holds local node n (level order of the complete tree) of tree t.
    assert feature[:T].tolist() == [0, -1, 1]  # the three roots first
    assert feature[T:3 * T].tolist() == [-1, -1, -1, 0, -1, -1]  # then their left, right children
    assert threshold[2 * T + 0] == 1.0  # tree 0's right child splits at 1.0
    assert (feature[3 * T:] == -1).all()  # level 2: leaves and filler only
    # Every leaf slot points at its leaf's values.
    leaf = bufs["reorg_leaf"]
    for t, tl in enumerate(layout.trees):
        stack = [(0, 0)]
        while stack:
            node, local = stack.pop()
            if tl.left[node] < 0:
                assert leaf[local * T + t] == tl.leaf_slot[node]
            else:
                stack += [(int(tl.left[node]), 2 * local + 1), (int(tl.right[node]), 2 * local + 2)]


def test_compiled_layout_predicts_small_forest():
    forest = _forest([_chain(3, 0), _chain(0), _chain(2, 1)])
    X = np.array([[-5.0, -5.0], [0.5, 0.5], [1.5, 3.0], [9.0, 9.0], [np.nan, 1.0]])
    for name, schedule in SCHEDULES.items():
        got = sf.compile(forest, rep="reorg", schedule=schedule).predict(X, output_margin=True)
        np.testing.assert_array_equal(got, reference.predict(forest, X, output_margin=True), err_msg=name)


def test_too_deep_forests_are_refused_naming_sparse():
    forest = _forest([_chain(27), _chain(1)])  # (2**28 - 1) * 2 slots
    with pytest.raises(sf.UnsupportedModelError, match=r"--rep sparse"):
        sf.compile(forest, rep="reorg")
    X = np.array([[3.5, 0.0], [np.nan, 1.0], [100.0, 0.0]])
    got = sf.compile(forest, rep="sparse").predict(X, output_margin=True)
    np.testing.assert_array_equal(got, reference.predict(forest, X, output_margin=True))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(), schedule=st.sampled_from(list(SCHEDULES)), seed=st.integers(0, 2**16),
       n=st.sampled_from([0, 1, 7, 300]), threads=st.sampled_from([1, 2]))
def test_random_forest_matches_reference(forest, schedule, seed, n, threads):
    X = rows_for(forest, np.random.default_rng(seed), n)
    cf = sf.compile(forest, rep="reorg", schedule=SCHEDULES[schedule], threads=threads)
    for margin in (True, False):
        got = cf.predict(X, output_margin=margin)
        want = reference.predict(forest, X, output_margin=margin)
        assert got.shape == want.shape
        if schedule in REORDERING:
            tol = 1e-5 if forest.accumulate_dtype == "float32" else 1e-12
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        else:
            # Same operations in the same order in the same precision: equal to the last bit.
            np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="module", params=["xgboost", "lightgbm", "onnx"])
def library_cases(request, model_cases):
    return model_cases[request.param].all(quick=True)


@pytest.mark.parametrize("schedule", ["default", "xgboost", "interleaved"])
def test_compiled_equals_library(library_cases, schedule):
    assert library_cases, "the factory returned no models"
    for case in library_cases:
        try:
            cf = sf.compile(case.path, rep="reorg", schedule=SCHEDULES[schedule])
        except sf.UnsupportedModelError as exc:
            # Only trees too deep to pad may be refused, pointing at the sparse layout.
            assert "sparse" in str(exc), f"{case.name}: {exc}"
            continue
        assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)
        if case.expected_margin is not None:
            assert_close(cf.predict(case.X, output_margin=True, **case.predict_kwargs),
                         case.expected_margin, case, "margins")


def test_saved_artifact_reloads(tmp_path):
    forest = _forest([_chain(3, 0), _chain(2, 1), _chain(1, 0)])
    X = np.array([[-5.0, -5.0], [0.5, 0.5], [1.5, 3.0], [9.0, 9.0], [np.nan, 1.0]])
    sf.compile(forest, rep="reorg", schedule="interleaved").save(tmp_path / "m.forge")
    got = sf.load_compiled(tmp_path / "m.forge").predict(X, output_margin=True)
    np.testing.assert_array_equal(got, reference.predict(forest, X, output_margin=True))

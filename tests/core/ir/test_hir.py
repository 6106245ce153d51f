"""The HIR's verifier, printer and serialisation, and the reference evaluator's rules by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import forests, rows_for

from silvanforge.errors import IRVerificationError
from silvanforge.ir import hir, hir_io
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, Op, Tree
from silvanforge.runtime import reference

pytestmark = pytest.mark.core_alone  # needs no target and no shipped representation


def stump(feature=0, threshold=0.5, op=Op.LT, default_left=False, zero_missing=False, cats=None):
    return Tree.from_nodes([1, -1, -1], [2, -1, -1], [feature, -1, -1], [threshold, 0, 0],
                           [0.0, 1.0, 2.0], op=op, default_left=[default_left, False, False],
                           zero_missing=[zero_missing, False, False],
                           categories={0: cats} if cats is not None else None)


def leaf_of(tree, x, rule=CategoryRule.XGBOOST, dtype=np.float64):
    return reference.leaf_indices(tree, np.array([[x]], dtype=dtype), rule)[0]


@pytest.mark.parametrize("op, x, left", [
    (Op.LT, 0.5, False), (Op.LT, 0.4, True), (Op.LE, 0.5, True), (Op.LE, 0.6, False),
    (Op.EQ, 0.5, True), (Op.EQ, 0.4, False), (Op.LT, np.inf, False), (Op.LT, -np.inf, True),
])
def test_numerical_rule(op, x, left):
    assert leaf_of(stump(op=op), x) == (1 if left else 2)


@pytest.mark.parametrize("default_left", [True, False])
def test_missing_follows_default(default_left):
    assert leaf_of(stump(default_left=default_left), np.nan) == (1 if default_left else 2)


@pytest.mark.parametrize("x, missing", [
    (0.0, True), (1e-35, True), (-1e-35, True), (-0.0, True), (float(np.float32(1e-35)), True),
    (float(np.nextafter(np.float32(1e-35), 1, dtype=np.float64)), False), (1e-34, False), (-2e-35, False),
    (np.nan, True)])
def test_zero_missing(x, missing):
    # default_left=True and threshold -1: a missing value goes left, a present one right.
    tree = stump(threshold=-1.0, op=Op.LE, default_left=True, zero_missing=True)
    assert leaf_of(tree, x) == (1 if missing else 2)


@pytest.mark.parametrize("rule, x, left", [
    (CategoryRule.XGBOOST, 3.0, True), (CategoryRule.XGBOOST, 3.9, True), (CategoryRule.XGBOOST, -0.5, False),
    (CategoryRule.XGBOOST, 0.0, True), (CategoryRule.XGBOOST, 2.0**24, False), (CategoryRule.XGBOOST, 70.0, True),
    (CategoryRule.LIGHTGBM, -0.5, True), (CategoryRule.LIGHTGBM, -1.0, False), (CategoryRule.LIGHTGBM, 70.9, True),
    (CategoryRule.EXACT, 3.0, True), (CategoryRule.EXACT, 3.5, False), (CategoryRule.EXACT, 4.0, False),
])
def test_category_rules(rule, x, left):
    tree = stump(cats=[0, 3, 70])
    assert leaf_of(tree, x, rule) == (1 if left else 2)


def test_verifier_rejects_broken_trees():
    forest = Forest([stump()], num_features=1)
    hir.verify(forest)
    cyclic = stump()
    cyclic.left[0] = 0
    with pytest.raises(IRVerificationError, match="reached twice"):
        hir.verify(Forest([cyclic], num_features=1))
    with pytest.raises(IRVerificationError, match="feature index"):
        hir.verify(Forest([stump(feature=3)], num_features=2))
    with pytest.raises(IRVerificationError, match="outputs"):
        hir.verify(Forest([Tree.from_nodes([-1], [-1], [-1], [0], [1.0], outputs=(2,))], num_features=1))
    orphan = Tree.from_nodes([1, -1, -1, -1], [2, -1, -1, -1], [0, -1, -1, -1], [0, 0, 0, 0], [0, 1, 2, 3])
    with pytest.raises(IRVerificationError, match="unreachable"):
        hir.verify(Forest([orphan], num_features=1))


def test_min_max_average_aggregation():
    trees = [stump(threshold=t) for t in (0.0, 1.0, 2.0)]
    X = np.array([[0.5], [1.5], [3.0]])
    leaves = np.array([[2, 1, 1], [2, 2, 1], [2, 2, 2]], dtype=float)
    for agg, expect in [(Aggregation.MIN, leaves.min(1)), (Aggregation.MAX, leaves.max(1)),
                        (Aggregation.AVERAGE, leaves.sum(1) / 3)]:
        f = Forest(trees, num_features=1, base_score=np.array([10.0]), aggregation=agg,
                   average_divisor=3.0, accumulate_dtype="float64", threshold_dtype="float64")
        np.testing.assert_allclose(reference.predict(f, X), expect + 10)


@settings(max_examples=25, deadline=None)
@given(forest=forests())
def test_serialisation_roundtrip(forest):
    back = hir_io.from_arrays(hir_io.to_arrays(forest))
    assert back.fingerprint() == forest.fingerprint()
    X = rows_for(forest, np.random.default_rng(0), 50)
    np.testing.assert_array_equal(reference.predict(back, X), reference.predict(forest, X))
    assert "forest source=random" in hir.format_forest(back)


def test_verify_over_all_trees_finds_what_tree_by_tree_finds():
    """Each breach put into one tree of a random forest is found by the whole-forest check and
    named, with its tree, by verify; a sound forest passes both."""
    from silvanforge.testing import random_forest

    forest = random_forest(7, max_trees=12, max_depth=5, categorical=False)
    assert hir._trees_sound(forest)
    hir.verify(forest)
    i = next(k for k, t in enumerate(forest.trees) if t.num_nodes >= 5)

    def broken(change):
        trees = list(forest.trees)
        t = trees[i]
        arrays = {name: getattr(t, name).copy() for name in ("left", "right", "feature", "op")}
        change(arrays, t)
        trees[i] = Tree(arrays["left"], arrays["right"], arrays["feature"], t.threshold, arrays["op"],
                        t.default_left, t.zero_missing, t.leaf_value, t.outputs)
        return Forest(trees=trees, num_features=forest.num_features, num_outputs=forest.num_outputs,
                      base_score=forest.base_score, aggregation=forest.aggregation)

    def node(a):
        return int(np.flatnonzero(a["left"] >= 0)[0])

    breaches = {
        "reached twice": lambda a, t: a["right"].__setitem__(node(a), a["left"][node(a)]),
        "out of range": lambda a, t: a["left"].__setitem__(node(a), t.num_nodes + 3),
        "exactly one child": lambda a, t: a["right"].__setitem__(node(a), -1),
        "feature index": lambda a, t: a["feature"].__setitem__(node(a), forest.num_features),
        "unknown comparison": lambda a, t: a["op"].__setitem__(node(a), 9),
        "reached twice|unreachable": lambda a, t: a["left"].__setitem__(node(a), 0),  # a cycle to the root
    }
    for message, change in breaches.items():
        bad = broken(change)
        assert not hir._trees_sound(bad), message
        with pytest.raises(IRVerificationError, match=f"tree {i}: .*({message})"):
            hir.verify(bad)


def test_verify_leaves_children_of_other_dtypes_to_the_tree_by_tree_checks():
    """Unsigned children (2**64 - 1 is no leaf's -1) are refused as out of range."""
    t = Tree(np.array([2**64 - 1], np.uint64), np.array([2**64 - 1], np.uint64), np.array([0], np.int32),
             np.zeros(1), np.zeros(1, np.uint8), np.zeros(1, bool), np.zeros(1, bool), np.zeros((1, 1)), (0,))
    forest = Forest(trees=[t], num_features=1, num_outputs=1, base_score=np.zeros(1))
    assert not hir._trees_sound(forest)
    with pytest.raises(IRVerificationError):
        hir.verify(forest)

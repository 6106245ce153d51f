"""Splitting a row's trees over threads exactly: ``orderedReduce`` (each tree's value in a slot of
its own, added in tree order after the walks) and the ``split-trees`` schedule that the CPU
target's one-row form takes for long walks on two or more threads."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest

import silvanforge as sf
from silvanforge import testing
from silvanforge.api import lower
from silvanforge.errors import ScheduleError
from silvanforge.ir.hir import Aggregation
from silvanforge.plugins import registry
from silvanforge.runtime import reference

SPLIT = "tile(tree, t0, t1, 4)\nreorder(t0, batch, t1)\ninterleave(t1)\nparallel(t0)\norderedReduce(t0)"


def _summed_forest(seed: int):
    """A random forest whose trees' values are summed or averaged (orderedReduce's models)."""
    for s in range(seed, seed + 200):
        forest = testing.random_forest(s, max_trees=40, max_depth=7)
        if forest.aggregation in (Aggregation.SUM, Aggregation.AVERAGE) and forest.num_trees >= 6:
            return forest
    raise AssertionError("no summed forest drawn")


@pytest.mark.parametrize("seed", [0, 40, 80, 120])
@pytest.mark.parametrize("rep", ["sparse", "array"])
def test_ordered_reduce_on_two_threads_is_the_reference_to_the_bit(seed, rep):
    forest = _summed_forest(seed)
    X = testing.rows_for(forest, np.random.default_rng(seed), 64).astype(forest.threshold_dtype)
    want = reference.predict_margin(forest, X)
    try:
        cf = sf.compile(forest, rep=rep, schedule=SPLIT, threads=2)
    except sf.UnsupportedModelError:
        pytest.skip(f"{rep} refuses this forest")
    # share_steps=1: the runtime splits the tree loop of every call, however few its rows.
    with sf.config_context(share_steps=1):
        for n in (1, 2, 3, 17, 64):
            got = np.concatenate([cf.predict(X[i:i + n], output_margin=True, threads=2)
                                  for i in range(0, 64, n)][:64 // n])
            np.testing.assert_array_equal(got.reshape(want[:len(got)].shape), want[:len(got)])


@pytest.fixture
def grows(monkeypatch):
    """The worker counts the native pool is asked to grow to (the small-call entry asks for one
    before it hands half a tree loop over)."""
    from silvanforge_target_cpu import pool

    native = pool.native_pool()
    if native is None:
        pytest.skip("no native pool on this host")
    asked = []
    real_grow = type(native).grow

    def grow(self, workers):
        asked.append(workers)
        return real_grow(self, workers)

    monkeypatch.setattr(type(native), "grow", grow)
    return asked


def test_a_one_row_call_hands_half_the_trees_to_a_native_worker(grows):
    forest = _summed_forest(7)
    X = testing.rows_for(forest, np.random.default_rng(7), 32).astype(forest.threshold_dtype)
    cf = sf.compile(forest, rep="sparse", schedule=SPLIT, threads=2, batch_size=1)
    assert cf.main.small is not None, "the one-row form keeps the small-call entry"
    got = np.concatenate([cf.predict(X[i:i + 1], output_margin=True) for i in range(32)])
    assert grows and set(grows) == {1}
    np.testing.assert_array_equal(got.reshape(-1, forest.num_outputs),
                                  reference.predict_margin(forest, X).reshape(-1, forest.num_outputs))


def test_min_and_max_forests_split_without_an_ordered_fold():
    for seed in range(200):
        forest = testing.random_forest(seed, max_trees=20)
        if forest.aggregation in (Aggregation.MIN, Aggregation.MAX) and forest.num_trees > 4:
            break
    text = lower(forest, rep="sparse", schedule="split-trees").show("mir")
    assert "orderedReduce" not in text and "<ordered>" not in text
    X = testing.rows_for(forest, np.random.default_rng(1), 40).astype(forest.threshold_dtype)
    cf = sf.compile(forest, rep="sparse", schedule="split-trees", threads=2)
    with sf.config_context(share_steps=1):
        np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict_margin(forest, X))


@pytest.mark.parametrize("schedule, message", [
    ("tile(tree, t0, t1, 4)\norderedReduce(t0)", "parallel"),
    ("tile(tree, t0, t1, 4)\nreorder(t0, batch, t1)\ngpuDimension(t0, grid.x)\norderedReduce(t0)", "GPU"),
    ("tile(tree, t0, t1, 4)\ntile(t1, t2, t3, 2)\nreorder(t0, t2, batch, t3)\nparallel(t0)\nparallel(t2)\n"
     "orderedReduce(t0)", "other parallel loops"),
    ("orderedReduce(batch)", "loops over trees"),
])
def test_illegal_ordered_reduces_are_refused_by_name(schedule, message):
    forest = _summed_forest(3)
    with pytest.raises(ScheduleError, match=message):
        lower(forest, rep="sparse", schedule=schedule)


def test_ordered_reduce_refuses_a_max_forest():
    for seed in range(200):
        forest = testing.random_forest(seed, max_trees=20)
        if forest.aggregation is Aggregation.MAX and forest.num_trees > 4:
            break
    with pytest.raises(ScheduleError, match="orderedReduce.*max"):
        lower(forest, rep="sparse", schedule=SPLIT)


def test_the_one_row_form_splits_long_walks_on_two_threads_only(monkeypatch):
    import silvanforge_target_cpu as cpu

    forest = _summed_forest(11)
    monkeypatch.setattr(cpu, "SPLIT_HANDOFF_NS", 0)  # every walk counts as long
    monkeypatch.setattr(cpu, "SPLIT_FOLD_NS", 0)
    monkeypatch.setattr(cpu, "SPLIT_FOLD_OUTPUT_NS", 0)
    two = sf.compile(forest, threads=2).wait()  # (every form built while the constants are set)
    one = sf.compile(forest, threads=1).wait()
    assert "orderedReduce(t0)" in two.plan_text() and "orderedReduce" not in one.plan_text()
    # The split form answers up to 16 rows, unless 3-16 rows have a form of their own.
    split = two.form_for(1)
    assert two.form_for(16) is split or two.form_for(3).options.batch_size == 16
    assert two.form_for(17) is not split
    X = testing.rows_for(forest, np.random.default_rng(5), 20).astype(forest.threshold_dtype)
    want = reference.predict_margin(forest, X)
    for cf in (one, two):
        got = np.concatenate([cf.predict(X[i:i + 1], output_margin=True) for i in range(20)])
        np.testing.assert_array_equal(got.reshape(want.shape), want)


def _child_calls_one_row(cf, X, queue):
    queue.put(np.concatenate([cf.predict(X[i:i + 1], output_margin=True) for i in range(len(X))]))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_splits_one_row_calls_on_workers_of_its_own():
    # The child inherits the parent's compiled model and staging, not its worker threads: its
    # one-row calls must grow a pool of their own, not wait on the parent's mailboxes.
    forest = _summed_forest(21)
    X = testing.rows_for(forest, np.random.default_rng(21), 16).astype(forest.threshold_dtype)
    cf = sf.compile(forest, rep="sparse", schedule=SPLIT, threads=2, batch_size=1)
    want = np.concatenate([cf.predict(X[i:i + 1], output_margin=True) for i in range(16)])  # workers up
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_calls_one_row, args=(cf, X, queue))
    child.start()
    got = queue.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    np.testing.assert_array_equal(got, want)


def test_the_tuner_times_a_one_row_split_on_two_threads():
    forest = _summed_forest(31)
    tuned = sf.tune(forest, threads=2, budget_s=6, sizes=(1, 16))
    forms = [c["form"] for c in tuned.tuning["candidates"]]
    assert any("orderedReduce(t0)" in f and "batch_size=1" in f for f in forms), forms
    X = testing.rows_for(forest, np.random.default_rng(3), 20).astype(forest.threshold_dtype)
    got = np.concatenate([tuned.predict(X[i:i + 1], output_margin=True) for i in range(20)])
    want = reference.predict_margin(forest, X)
    np.testing.assert_array_equal(got.reshape(want.shape), want)
    one = sf.tune(forest, threads=1, budget_s=3, sizes=(1,))
    assert not any("orderedReduce" in c["form"] for c in one.tuning["candidates"])


def test_threads_1_keeps_a_one_row_split_call_on_the_calling_thread(grows):
    forest = _summed_forest(13)
    X = testing.rows_for(forest, np.random.default_rng(13), 8).astype(forest.threshold_dtype)
    cf = sf.compile(forest, rep="sparse", schedule=SPLIT, threads=2, batch_size=1)
    alone = np.concatenate([cf.predict(X[i:i + 1], output_margin=True, threads=1) for i in range(8)])
    assert grows == []  # no worker was asked for
    shared = np.concatenate([cf.predict(X[i:i + 1], output_margin=True) for i in range(8)])
    assert grows
    np.testing.assert_array_equal(alone, shared)


def test_threads_1_on_a_form_with_a_tree_loop_too_short_to_split():
    # One tree: the loop has one iteration, so the small call never splits; it still takes the
    # thread count the compiled model hands every call of a splitting form.
    forest = testing.random_forest(0, max_trees=1, summed=True)
    X = testing.rows_for(forest, np.random.default_rng(0), 4).astype(forest.threshold_dtype)
    cf = sf.compile(forest, rep="sparse", schedule="split-trees", threads=2, batch_size=1)
    got = np.concatenate([cf.predict(X[i:i + 1], output_margin=True, threads=1) for i in range(4)])
    np.testing.assert_array_equal(got.reshape(-1, forest.num_outputs),
                                  reference.predict_margin(forest, X).reshape(-1, forest.num_outputs))


def _leaf_ids_forest(seed: int):
    """A float64 random forest of several trees and the forest of its leaf ids, whose trees
    own their outputs (:mod:`silvanforge.frontend.outputs`)."""
    from silvanforge.frontend import outputs

    for s in range(seed, seed + 200):
        forest = testing.random_forest(s, max_trees=24, max_depth=7)
        if forest.threshold_dtype == "float64" and forest.num_trees >= 6:
            return forest, outputs.leaf_forest(forest)
    raise AssertionError("no float64 forest drawn")


@pytest.mark.parametrize("seed", [0, 50])
@pytest.mark.parametrize("rep", ["sparse", "array"])
def test_trees_owning_their_outputs_split_with_nothing_to_fold(seed, rep):
    forest, leaves = _leaf_ids_forest(seed)
    assert leaves.trees_own_outputs() and not forest.trees_own_outputs() or forest.num_trees == 1
    text = lower(leaves, rep="sparse", schedule="split-trees").show("mir")
    assert "orderedReduce" not in text and "partial" not in text and "reduce_dimension" not in text
    try:
        cf = sf.compile(leaves, rep=rep, schedule="split-trees", threads=2)
    except sf.UnsupportedModelError:
        pytest.skip(f"{rep} refuses this forest")
    # The ids (float32) sit in the float64 threshold slots of their leaves.
    assert "leaves inline" in cf.lir_module.info.get("widths", "leaves inline")
    X = testing.rows_for(forest, np.random.default_rng(seed), 40)
    want = reference.predict_leaf(forest, X)
    with sf.config_context(share_steps=1):
        for n in (1, 3, 40):
            got = np.concatenate([cf.predict(X[i:i + n], output_margin=True, threads=2) for i in range(0, 40, n)])
            np.testing.assert_array_equal(got, want)


def test_the_one_row_leaf_ids_form_splits_long_walks_without_a_fold(monkeypatch, grows):
    import silvanforge_target_cpu as cpu

    forest, _ = _leaf_ids_forest(5)
    from silvanforge.plan import policy

    monkeypatch.setattr(cpu, "SPLIT_HANDOFF_NS", 0)  # every walk counts as long
    monkeypatch.setattr(policy, "PLAN_MIN_NS", 0.0)  # and worth a one-row form
    cf = sf.compile(forest, threads=2).wait()
    leaf_model = cf.output_model("pred_leaf").wait()
    one_row = leaf_model.form_for(1).text()
    assert "parallel(t0)" in one_row and "orderedReduce" not in one_row
    X = testing.rows_for(forest, np.random.default_rng(5), 12)
    got = np.concatenate([cf.predict(X[i:i + 1], pred_leaf=True) for i in range(12)])
    assert grows  # half the trees handed to a worker
    np.testing.assert_array_equal(got, reference.predict_leaf(forest, X).astype(got.dtype))


@pytest.mark.parametrize("schedule", ["tahoe-shared-data", "tree-parallel"])
def test_trees_owning_their_outputs_on_the_opencl_target(schedule):
    """GPU schedules that map trees to threads (a block's threads, or parallel groups) write
    each tree's own output directly: nothing folded, equal to the reference's leaf ids."""
    from support_common import without_opencl

    ok, why = registry().target_available("amd")
    if not ok:
        without_opencl(why)
    forest, leaves = _leaf_ids_forest(60)
    cf = sf.compile(leaves, target="amd", schedule=schedule)
    X = testing.rows_for(forest, np.random.default_rng(60), 50)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict_leaf(forest, X))

"""Each directive of the scheduling language (silvanforge.scheduler.schedule.SIGNATURES) checked by
the MIR it must produce: the loops, their ranges and attributes, the walk's attributes and the
reduction dialect's operations after legalisation.  The language is the SilvanForge paper draft's,
section 'Scheduling Language'; its reductions are section 'Reductions'.
tests/core/lowering/test_directives_lir.py checks what the core's lowering makes of the same MIR."""

from __future__ import annotations

import pytest

from silvanforge.errors import ScheduleError
from silvanforge.ir import mir
from silvanforge.scheduler.schedule import SIGNATURES

from support_directives import DEPTH, NUM_TREES, child_loops, loops, ops_of, schedule_roots, to_mir

pytestmark = pytest.mark.core_alone  # needs no target and no shipped representation

# Every directive the parser knows has a test below: a new one fails here until it has its own.
TESTED = {"tile", "split", "reorder", "unroll", "specialize", "gpuDimension", "cache", "parallel",
          "interleave", "unrollWalk", "peelWalk", "expandWalk", "chainWalks", "atomicReduce", "sharedReduce",
          "vectorReduce", "orderedReduce"}


def test_every_directive_has_a_structural_test():
    assert set(SIGNATURES) == TESTED


def test_no_directive_is_one_parallel_row_loop_around_a_tree_loop():
    fn = to_mir("")
    (batch,) = schedule_roots(fn)
    (tree,) = child_loops(batch)
    assert (batch.index, batch.start, batch.stop, batch.step) == ("batch", "row_begin", "row_end", 1)
    assert (tree.index, tree.start, tree.stop, tree.max_trip) == ("tree", 0, NUM_TREES, NUM_TREES)
    assert not batch.parallel and not tree.parallel
    (walk,) = ops_of(fn, mir.WalkDecisionTree)
    assert (walk.tree, walk.row) == ("tree", "batch")


# ----------------------------------------------------------------------------- loop modifiers
def test_tile_rows_makes_a_chunk_loop_around_a_loop_over_one_chunk():
    fn = to_mir("tile(batch, b0, b1, 8)")
    (b0,) = schedule_roots(fn)
    (b1,) = child_loops(b0)
    assert (b0.index, b0.start, b0.stop, b0.step) == ("b0", "row_begin", "row_end", 8)
    # The inner loop covers one chunk and stops at the batch's end (the remainder chunk).
    assert (b1.index, b1.start, b1.stop, b1.step) == ("b1", "b0", ("min", ("+", "b0", 8), "row_end"), 1)
    assert b1.max_trip == 8 and b0.max_trip is None  # rows are known only when predicting
    assert [loop.index for loop in child_loops(b1)] == ["tree"]
    assert ops_of(fn, mir.WalkDecisionTree)[0].row == "b1"


def test_tile_trees_gives_the_extents_of_the_tiles():
    fn = to_mir("tile(tree, t0, t1, 4)")
    t0, t1 = loops(fn)["t0"], loops(fn)["t1"]
    assert child_loops(t0) == [t1]
    assert (t0.start, t0.stop, t0.step, t0.max_trip) == (0, NUM_TREES, 4, 3)  # 10 trees: 4 + 4 + 2
    assert (t1.start, t1.stop, t1.step, t1.max_trip) == ("t0", ("min", ("+", "t0", 4), NUM_TREES), 1, 4)
    assert ops_of(fn, mir.WalkDecisionTree)[0].tree == "t1"


def test_split_makes_two_sibling_loops_with_a_walk_each():
    fn = to_mir("split(tree, ta, tb, 3)")
    (batch,) = schedule_roots(fn)
    ta, tb = child_loops(batch)
    assert (ta.index, ta.start, ta.stop, ta.max_trip) == ("ta", 0, 3, 3)
    assert (tb.index, tb.start, tb.stop, tb.max_trip) == ("tb", 3, NUM_TREES, NUM_TREES - 3)
    assert [w.tree for w in ops_of(fn, mir.WalkDecisionTree)] == ["ta", "tb"]
    assert [r.tree for r in ops_of(fn, mir.Reduce)] == ["ta", "tb"]


def test_split_rows_covers_the_first_rows_then_the_rest():
    fn = to_mir("split(batch, head, rest, 16)")
    head, rest = schedule_roots(fn)
    assert (head.start, head.stop) == ("row_begin", ("min", ("+", "row_begin", 16), "row_end"))
    assert (rest.start, rest.stop) == (("+", "row_begin", 16), "row_end")
    assert [loop.index for loop in child_loops(head) + child_loops(rest)] == ["tree", "tree"]


def test_reorder_swaps_the_nest():
    fn = to_mir("reorder(tree, batch)")
    (tree,) = schedule_roots(fn)
    assert tree.index == "tree" and [loop.index for loop in child_loops(tree)] == ["batch"]


def test_reorder_of_tiles_gives_xgboosts_order():
    # The SilvanForge paper draft, section 'The XBoost Schedule': a chunk of rows walks one tree
    # before the next tree.
    fn = to_mir("tile(batch, b0, b1, 64); reorder(b0, tree, b1)")
    (b0,) = schedule_roots(fn)
    (tree,) = child_loops(b0)
    assert [loop.index for loop in child_loops(tree)] == ["b1"]


def test_unroll_marks_a_loop_of_known_trip_count():
    fn = to_mir("tile(tree, t0, t1, 5); unroll(t1)")
    assert loops(fn)["t1"].unroll and loops(fn)["t1"].max_trip == 5
    assert not loops(fn)["t0"].unroll
    with pytest.raises(ScheduleError, match="trip count"):
        to_mir("unroll(batch)")  # rows are known only when predicting


def test_specialize_marks_a_tree_loop_only():
    fn = to_mir("specialize(tree)")
    assert loops(fn)["tree"].specialize and loops(fn)["tree"].max_trip == NUM_TREES
    with pytest.raises(ScheduleError, match="batch index"):
        to_mir("tile(batch, b0, b1, 4); specialize(b1)")


def test_gpu_dimension_maps_a_loop_and_makes_it_parallel():
    fn = to_mir("tile(batch, b0, b1, 32); gpuDimension(b0, grid.x); gpuDimension(b1, block.x)")
    assert (loops(fn)["b0"].gpu, loops(fn)["b1"].gpu) == ("grid.x", "block.x")
    assert loops(fn)["b0"].parallel and loops(fn)["b1"].parallel
    with pytest.raises(ScheduleError, match="already mapped"):
        to_mir("tile(batch, b0, b1, 32); gpuDimension(b0, grid.x); gpuDimension(b1, grid.x)")


# ----------------------------------------------------------------------------- optimisations
def test_parallel_rows_needs_no_reduction_rewrite():
    fn = to_mir("parallel(batch)")
    assert loops(fn)["batch"].parallel
    # The margins' own row loops run in parallel with it.
    assert all(op.parallel for op in fn.body if isinstance(op, mir.Loop) and op.index == "row")
    assert fn.buffers == [] and ops_of(fn, mir.ReduceDimension) == []
    assert [r.target for r in ops_of(fn, mir.Reduce)] == ["margins"]


def test_parallel_trees_privatises_the_margins_and_folds_after_the_loop():
    fn = to_mir("tile(tree, t0, t1, 4); parallel(t0)")
    (buffer,) = fn.buffers
    assert buffer.extents == (3,)  # one slice per iteration of t0
    (reduce,) = ops_of(fn, mir.Reduce)
    assert reduce.target == buffer.name and reduce.private == (("/", "t0", 4),)
    (batch,) = schedule_roots(fn)
    t0, fold = batch.body  # the fold comes right after the conflicting loop
    assert t0.index == "t0" and isinstance(fold, mir.ReduceDimension)
    assert (fold.source, fold.target, fold.dim, fold.extent, fold.inplace) == (buffer.name, "margins", 0, 3, False)
    assert fold.rows == ("batch", ("min", ("+", "batch", 1), "row_end"))


def test_nested_parallel_tree_loops_fold_in_place_then_into_the_margins():
    fn = to_mir("tile(tree, t0, t1, 5); tile(t1, u0, u1, 2); parallel(t0); parallel(u0)")
    (buffer,) = fn.buffers
    assert buffer.extents == (2, 3)  # t0: 2 tiles of 5 trees; u0: 3 pairs in a tile of 5
    inner, outer = ops_of(fn, mir.ReduceDimension)
    assert (inner.dim, inner.inplace, inner.target) == (1, True, buffer.name)
    assert (outer.dim, outer.inplace, outer.target) == (0, False, "margins")


def test_cache_inserts_the_working_set_of_one_iteration():
    fn = to_mir("tile(batch, b0, b1, 8); cache(b0); tile(tree, t0, t1, 5); cache(t0)")
    rows = loops(fn)["b0"].body[0]
    trees = loops(fn)["t0"].body[0]
    assert isinstance(rows, mir.CacheRows) and isinstance(trees, mir.CacheTrees)
    assert (rows.start, rows.stop) == ("b0", ("min", ("+", "b0", 8), "row_end"))
    assert (trees.start, trees.stop) == ("t0", ("min", ("+", "t0", 5), NUM_TREES))
    assert len(ops_of(fn, mir.CacheRows)) == len(ops_of(fn, mir.CacheTrees)) == 1


@pytest.mark.parametrize("factor, lanes", [(None, 4), (2, 2), (16, 4)])
def test_interleave_puts_walks_of_the_innermost_loop_in_flight_together(factor, lanes):
    extra = "" if factor is None else f", {factor}"
    fn = to_mir(f"tile(batch, b0, b1, 4); reorder(b0, tree, b1); interleave(b1{extra})")
    assert loops(fn)["b1"].interleave == lanes  # at most the loop's trip count
    assert child_loops(loops(fn)["b1"]) == []


def test_interleave_refuses_a_loop_that_is_not_innermost():
    with pytest.raises(ScheduleError, match="innermost"):
        to_mir("tile(batch, b0, b1, 4); interleave(b1)")


def test_unroll_walk_and_peel_walk_set_the_walks_depths():
    fn = to_mir(f"unrollWalk(tree, {DEPTH - 1}); peelWalk(batch, 2)")
    (walk,) = ops_of(fn, mir.WalkDecisionTree)
    assert (walk.unroll_depth, walk.peel_depth, walk.expand) == (DEPTH - 1, 2, False)


def test_peel_walk_refuses_steps_past_the_shallowest_leaf():
    with pytest.raises(ScheduleError, match="cannot peel"):
        to_mir(f"peelWalk(tree, {DEPTH + 1})")


def test_expand_walk_marks_the_walk():
    fn = to_mir("specialize(tree); expandWalk(tree)")
    (walk,) = ops_of(fn, mir.WalkDecisionTree)
    assert walk.expand


def test_chain_walks_marks_the_walks_of_the_interleaved_loop_over_every_tree():
    # (interleave with a factor takes a loop of any trip: its body is copied factor times)
    fn = to_mir("interleave(tree, 4); chainWalks(tree)")
    (walk,) = ops_of(fn, mir.WalkDecisionTree)
    tree = loops(fn)["tree"]
    assert walk.chain and tree.interleave == 4 and (tree.start, tree.stop, tree.step) == (0, NUM_TREES, 1)
    assert not ops_of(to_mir("interleave(tree, 4)"), mir.WalkDecisionTree)[0].chain


@pytest.mark.parametrize("text, match", [
    ("chainWalks(batch)", "batch index"),
    ("tile(tree, t0, t1, 4); interleave(t1); chainWalks(t1)", "derived from tree"),
    ("chainWalks(tree)", "interleave"),
    ("interleave(tree, 4); chainWalks(tree); tile(tree, t0, t1, 4)", "before tiling"),
])
def test_chain_walks_refuses_what_it_cannot_chain(text, match):
    with pytest.raises(ScheduleError, match=match):
        to_mir(text)


# ----------------------------------------------------------------------------- reductions
def test_atomic_reduce_updates_the_margins_without_privatising():
    fn = to_mir("tile(tree, t0, t1, 5); parallel(t0); atomicReduce(t0)")
    assert loops(fn)["t0"].reduce == "atomic"
    (reduce,) = ops_of(fn, mir.Reduce)
    assert (reduce.target, reduce.private, reduce.atomic) == ("margins", (), True)
    assert fn.buffers == [] and ops_of(fn, mir.ReduceDimension) == []


def test_vector_reduce_folds_with_the_width_asked():
    fn = to_mir("tile(tree, t0, t1, 2); parallel(t0); vectorReduce(t0, 4)")
    (fold,) = ops_of(fn, mir.ReduceDimension)
    assert (fold.vector_width, fold.extent, fold.shared) == (4, 5, False)


def test_shared_reduce_marks_the_fold_for_shared_memory():
    fn = to_mir("tile(tree, t0, t1, 2); gpuDimension(t0, block.y); sharedReduce(t0)")
    (fold,) = ops_of(fn, mir.ReduceDimension)
    assert fold.shared and fold.vector_width == 0


def test_ordered_reduce_privatises_per_tree_and_folds_in_tree_order():
    fn = to_mir("tile(tree, t0, t1, 2); parallel(t0); orderedReduce(t0)")
    assert loops(fn)["t0"].reduce == "ordered"
    (reduce,) = ops_of(fn, mir.Reduce)
    (buffer,) = fn.buffers
    # A slot per tree (the walk's tree index), not per iteration of t0.
    assert (reduce.target, reduce.private) == (buffer.name, (reduce.tree,))
    assert buffer.ordered and buffer.extents == (NUM_TREES,)
    (fold,) = ops_of(fn, mir.ReduceDimension)
    assert (fold.ordered, fold.extent, fold.target, fold.inplace) == (True, NUM_TREES, "margins", False)


def test_ordered_reduce_refuses_nested_parallel_tree_loops_and_gpu_loops():
    with pytest.raises(ScheduleError, match="other parallel loops"):
        to_mir("tile(tree, t0, t1, 4); tile(t1, t2, t3, 2); parallel(t0); parallel(t2); orderedReduce(t0)")
    with pytest.raises(ScheduleError, match="GPU"):
        to_mir("tile(tree, t0, t1, 4); gpuDimension(t0, block.y); orderedReduce(t0)")


@pytest.mark.parametrize("directive", ["atomicReduce", "sharedReduce", "vectorReduce", "orderedReduce"])
def test_reductions_need_a_parallel_tree_loop(directive):
    args = ", 4" if directive == "vectorReduce" else ""
    with pytest.raises(ScheduleError, match="parallel"):
        to_mir(f"tile(tree, t0, t1, 2); {directive}(t0{args})")
    with pytest.raises(ScheduleError, match="batch index"):
        to_mir(f"parallel(batch); {directive}(batch{args})")

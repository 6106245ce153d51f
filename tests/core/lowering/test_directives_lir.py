"""What the core's CPU lowering makes of each directive, checked on the LIR's statements: loops and
their steps, walk steps with and without leaf checks, unrolled copies, atomic updates, prefetches
and folds.  The representation is the out-of-tree example ``linked`` (the core alone has no
other); GPU-only directives (gpuDimension, sharedReduce) lower in the GPU plugin, so their MIR
(tests/core/scheduler/test_directives_mir.py) is what the core answers for."""

from __future__ import annotations

import pytest

from silvanforge.ir import lir

from support_directives import DEPTH, NUM_TREES, for_loop, loads_in, module_statements, statements, to_lir

pytestmark = pytest.mark.core_alone  # needs no target and no shipped representation

pytest.importorskip("silvanforge_rep_linked", reason="the example representation is not installed")


def of_kind(stmts, kind) -> list:
    return [s for s in statements(stmts) if isinstance(s, kind)]


def walk_body(module: lir.Module, loop_var: str) -> list:
    return for_loop(module, loop_var).body


def leaf_checked_steps(stmts: list) -> list[lir.If]:
    """The unrolled walk steps: an ``If`` (not at a leaf) around a step that moves the node."""
    return [s for s in stmts if isinstance(s, lir.If) and loads_in([s], "linked_feature")]


def test_parallel_loops_become_parallel_lir_loops():
    module = to_lir("tile(tree, t0, t1, 5); parallel(t0)")
    assert for_loop(module, "t0").parallel
    assert not for_loop(module, "t1").parallel and not for_loop(module, "batch").parallel


def test_split_lowers_to_two_loops_of_constant_ranges():
    module = to_lir("split(tree, ta, tb, 3)")
    ta, tb = for_loop(module, "ta"), for_loop(module, "tb")
    assert (ta.start.value, ta.stop.value, tb.start.value, tb.stop.value) == (0, 3, 3, NUM_TREES)
    assert of_kind(ta.body, lir.While) and of_kind(tb.body, lir.While)  # a walk in each


def test_tile_steps_the_outer_loop_by_the_tile():
    module = to_lir("tile(batch, b0, b1, 8)")
    assert for_loop(module, "b0").step == 8 and for_loop(module, "b1").step == 1
    assert for_loop(module, "b1") in for_loop(module, "b0").body


def test_interleave_walks_k_rows_together():
    module = to_lir("tile(batch, b0, b1, 4); reorder(b0, tree, b1); interleave(b1)")
    base = for_loop(module, "b1_base")
    assert base.step == 4  # one iteration takes the four rows of the chunk
    (walk,) = [s for s in base.body if isinstance(s, lir.While)]
    # One loop steps all four walks, each guarded by its own leaf test.
    assert len(walk.body) == 4 and all(isinstance(s, lir.If) for s in walk.body)
    # Four roots loaded, four leaf values added; lanes past the chunk's end are not reduced.
    assert len(loads_in(base.body, "linked_root")) == 4
    assert len([s for s in statements(base.body) if isinstance(s, lir.Store) and s.buffer == "margins"]) == 4
    assert len([s for s in base.body if isinstance(s, lir.If)]) == 3


@pytest.mark.parametrize("depth", [1, DEPTH - 1])
def test_unroll_walk_unrolls_steps_with_leaf_checks_then_loops(depth):
    body = walk_body(to_lir(f"unrollWalk(tree, {depth})"), "tree")
    assert len(leaf_checked_steps(body)) == depth
    assert len([s for s in body if isinstance(s, lir.While)]) == 1  # walks deeper than that


def test_unroll_walk_to_the_depth_needs_no_loop():
    body = walk_body(to_lir(f"unrollWalk(tree, {DEPTH})"), "tree")
    assert len(leaf_checked_steps(body)) == DEPTH and not of_kind(body, lir.While)


def test_peel_walk_steps_without_leaf_checks():
    body = walk_body(to_lir("peelWalk(tree, 2)"), "tree")
    # Two steps straight in the loop body: the node is reassigned twice before any branch.
    steps = [s for s in body if isinstance(s, lir.Assign) and s.var.name.startswith("node")]
    assert len(steps) == 1 + 2  # the root, then two peeled steps
    assert leaf_checked_steps(body) == [] and len(of_kind(body, lir.While)) == 1


@pytest.mark.parametrize("directive", ["specialize", "unroll"])
def test_specialize_and_unroll_copy_the_body_per_tree(directive):
    module = to_lir(f"{directive}(tree)")
    assert not [s for s in module_statements(module) if isinstance(s, lir.For) and s.var.name == "tree"]
    batch = for_loop(module, "batch")
    roots = loads_in(batch.body, "linked_root")
    # One walk per tree, each reading its root at a constant tree number.
    assert all(isinstance(r.index, lir.Cast) and isinstance(r.index.a, lir.Const) for r in roots)
    assert sorted(r.index.a.value for r in roots) == list(range(NUM_TREES))


def test_unroll_of_a_tile_guards_the_remainder():
    module = to_lir("tile(tree, t0, t1, 4); unroll(t1)")
    copies = [s for s in for_loop(module, "t0").body if isinstance(s, lir.If)]
    assert len(copies) == 4  # the last tile holds 2 trees: each copy tests its tree is in range


def test_expand_walk_has_no_walk_loop_and_constant_thresholds():
    module = to_lir("specialize(tree); expandWalk(tree)")
    body = for_loop(module, "batch").body
    assert not of_kind(body, lir.While)
    assert not loads_in(body, "linked_threshold")  # the thresholds are constants in the code
    leaves_per_tree = 2 ** DEPTH
    assignments = [s for s in statements(body) if isinstance(s, lir.Assign) and isinstance(s.value, lir.Const)
                   and s.var.name.startswith("node")]
    assert len(assignments) == NUM_TREES * leaves_per_tree  # one branch ends at each leaf


def test_cache_prefetches_the_rows_and_the_trees_of_an_iteration():
    module = to_lir("tile(batch, b0, b1, 8); cache(b0); tile(tree, t0, t1, 5); cache(t0)")
    rows = [s for s in statements(for_loop(module, "b0").body) if isinstance(s, lir.Prefetch)]
    assert {p.buffer for p in rows} >= {"rows"}
    trees = [s for s in for_loop(module, "t0").body if isinstance(s, lir.For)
             and any(isinstance(p, lir.Prefetch) for p in s.body)]
    # Over the ranges the representation's cache_trees hook names for the tile's trees.
    assert {s.body[0].buffer for s in trees} >= {"linked_threshold", "linked_left"}
    assert not [s for s in module_statements(module) if isinstance(s, lir.Prefetch) and s not in rows
                and all(s is not t.body[0] for t in trees)]


def test_atomic_reduce_adds_atomically_into_the_margins():
    module = to_lir("tile(tree, t0, t1, 5); parallel(t0); atomicReduce(t0)")
    t1 = for_loop(module, "t1")
    (add,) = [s for s in statements(t1.body) if isinstance(s, lir.AtomicAdd)]
    assert add.buffer == "margins"
    assert not [s for s in statements(t1.body) if isinstance(s, lir.Store) and s.buffer == "margins"]
    assert not module.scratch_buffers()


def test_vector_reduce_folds_the_slices_width_at_a_time():
    module = to_lir("tile(tree, t0, t1, 2); parallel(t0); vectorReduce(t0, 4)")
    (scratch,) = module.scratch_buffers()
    folds = [s for s in module_statements(module) if isinstance(s, lir.For) and s.var.name.startswith("rd")]
    (fold,) = folds
    assert (fold.start.value, fold.stop.value, fold.step) == (0, NUM_TREES // 2, 4)
    # Four independent partial sums, the last three guarded past the slices' end.
    assert len(loads_in(fold.body, scratch.name)) == 4
    assert len([s for s in fold.body if isinstance(s, lir.If)]) == 3


def test_ordered_reduce_folds_every_tree_into_the_margins_in_order():
    module = to_lir("tile(tree, t0, t1, 2); parallel(t0); orderedReduce(t0)")
    (scratch,) = module.scratch_buffers()
    assert scratch.fill == 0.0 and str(scratch.fill) == "-0.0"  # adds nothing, -0.0 included
    (fold,) = [s for s in module_statements(module) if isinstance(s, lir.For) and s.var.name.startswith("rd")]
    assert (fold.start.value, fold.stop.value, fold.step) == (0, NUM_TREES, 1)
    # One running sum, started from the margins before the loop and stored after it: inside,
    # each tree's slot is read once and reset.
    assert len(loads_in(fold.body, scratch.name)) == 1
    assert not [s for s in statements(fold.body) if isinstance(s, lir.Store) and s.buffer == "margins"]
    assert [s for s in statements(fold.body) if isinstance(s, lir.Store) and s.buffer == scratch.name]


def test_a_plain_parallel_tree_loop_folds_one_slice_at_a_time():
    module = to_lir("tile(tree, t0, t1, 2); parallel(t0)")
    (fold,) = [s for s in module_statements(module) if isinstance(s, lir.For) and s.var.name.startswith("rd")]
    assert fold.step == 1

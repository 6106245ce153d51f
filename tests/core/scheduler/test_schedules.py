"""The scheduling language: random legal schedules predict what the reference evaluator does,
every legality error is a clear message, canned schedules run (CPU) or print (GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, make_forest, rows_for
from support_common import Draws

import silvanforge as sf
from silvanforge import ScheduleError
from silvanforge.ir import mir
from silvanforge.ir.hir import Aggregation
from silvanforge.options import leaf_self_loops
from silvanforge.runtime import reference
from silvanforge.scheduler import CANNED, GPU_CANNED, Schedule, canned, lower_to_mir, parse_schedule


def _indices(schedule: Schedule) -> list[str]:
    names = ["batch", "tree"]
    for d in schedule.directives:
        if d.name in ("tile", "split"):
            names += [d.args[1], d.args[2]]
    return names


@st.composite
def legal_schedules(draw, forest, draws: Draws | None = None):
    """Compose directives at random, keeping each one the compiler accepts for this forest
    (``draws`` counts the directives kept and those refused)."""
    s = Schedule()
    fresh = iter(f"i{k}" for k in range(100))
    for _ in range(draw(st.integers(0, 14))):
        names = _indices(s)
        # Newer indices are likelier: directives compose on what earlier ones derived.
        pick = st.sampled_from(names[::-1]) if draw(st.booleans()) else st.sampled_from(names[-2:])
        kind = draw(st.sampled_from(["tile", "tile", "split", "reorder", "reorder", "parallel",
                                     "parallel", "unroll", "specialize", "interleave", "interleave",
                                     "unrollWalk", "peelWalk", "cache", "atomicReduce",
                                     "vectorReduce", "vectorReduce"]))
        if kind in ("tile", "split"):
            args = (draw(pick), next(fresh), next(fresh), draw(st.integers(1, 9)))
        elif kind == "reorder":
            args = tuple(draw(st.permutations(names))[:draw(st.integers(2, max(2, min(4, len(names)))))])
        elif kind in ("unrollWalk", "peelWalk", "vectorReduce"):
            args = (draw(pick), draw(st.integers(1, 4)))
        elif kind == "interleave":
            args = (draw(pick),) + ((draw(st.integers(2, 4)),) if draw(st.booleans()) else ())
        else:
            args = (draw(pick),)
        candidate = Schedule(s.directives + Schedule().add(kind, *args).directives)
        if kind in ("atomicReduce", "vectorReduce"):  # these need a parallel tree loop first
            candidate = Schedule(s.directives + Schedule().parallel(args[0]).directives
                                 + candidate.directives[len(s.directives):])
        try:
            lower_to_mir(forest, candidate)
        except ScheduleError:
            if draws is not None:
                draws.count("illegal")
            continue
        if draws is not None:
            draws.count("kept")
        s = candidate
    return s


def _reorders_sums(fn: mir.MirFunction) -> bool:
    """Privatised or atomic reductions add leaf values in another order than the reference."""
    return bool(fn.buffers) or any(isinstance(op, mir.Reduce) and op.atomic for op in mir.walk(fn.body))


def test_random_legal_schedules_match_reference():
    """Random legal schedules predict what the reference does.  The strategy drops each
    directive the compiler refuses, so enough of the directives drawn must be kept for the
    schedules to be more than the default."""
    draws = Draws()

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data(), forest=forests(max_trees=10, max_depth=5),
           rep=st.sampled_from(["array", "sparse"]), n=st.sampled_from([0, 1, 5, 13, 300, 613]),
           threads=st.sampled_from([1, 2, 3]))
    def check(data, forest, rep, n, threads):
        schedule = data.draw(legal_schedules(forest, draws), label="schedule")
        X = rows_for(forest, np.random.default_rng(n), n)
        cf = sf.compile(forest, rep=rep, schedule=schedule, threads=threads)
        got = cf.predict(X, output_margin=True)
        want = reference.predict(forest, X, output_margin=True)
        if _reorders_sums(cf.mir_function):
            tol = 1e-5 if forest.accumulate_dtype == "float32" else 1e-12
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        else:
            # The same additions in the same order: equal to the last bit.
            np.testing.assert_array_equal(got, want)
        # The schedule survives its text form.
        assert parse_schedule(schedule.to_text()) == schedule

    check()
    draws.assert_share("kept", 0.25)


@pytest.fixture(scope="module")
def forest():
    return make_forest(num_outputs=3)


@pytest.mark.parametrize("name", [n for n in CANNED if n not in GPU_CANNED])
def test_canned_cpu_schedules(forest, name):
    X = rows_for(forest, np.random.default_rng(1), 777)
    cf = sf.compile(forest, schedule=name, threads=2)
    np.testing.assert_allclose(cf.predict(X), reference.predict(forest, X), rtol=1e-6, atol=1e-6)
    assert cf.schedule == canned(name, forest)


@pytest.mark.parametrize("name", GPU_CANNED)
def test_canned_gpu_schedules_lower_and_print_but_do_not_run_on_cpu(forest, name):
    text = sf.show(forest, "mir", schedule=name)
    assert "<grid.x>" in text
    with pytest.raises(ScheduleError, match="maps loop .* to a GPU; the cpu target"):
        sf.compile(forest, schedule=name)


def test_seed_example_loop_nest(forest):
    # the SilvanForge paper draft, section 'Use in SILVANFORGE': tile both loops, parallel outer
    # batch and tree loops -> a privatised buffer with one slice per t0 iteration, folded into the
    # margins after t0.
    text = sf.show(forest, "mir", schedule="tile(batch, i0, i1, 8)\ntile(tree, t0, t1, 15)\n"
                                           "reorder(i0, t0, t1, i1)\nparallel(t0)\nparallel(i0)")
    assert "partial0 = alloc<2xbatchxoutputs>" in text
    assert "reduce(partial0[(t0 / 15)][i1, outputs(t1)], treePred)" in text
    assert "margins[i0:min((i0 + 8), row_end)] = reduce_dimension(partial0, dim=0)" in text


def test_remainder_tiles_cover_every_row_and_tree(forest):
    # 7 and 4 divide neither the 30 trees nor the 1001 rows.
    s = "tile(batch, b0, b1, 7)\ntile(tree, t0, t1, 4)\nreorder(b0, t0, b1, t1)\nunroll(t1)\ninterleave(t1)"
    X = rows_for(forest, np.random.default_rng(2), 1001)
    np.testing.assert_array_equal(sf.compile(forest, schedule=s).predict(X), reference.predict(forest, X))


def _min_forest(forest):
    import dataclasses

    return dataclasses.replace(forest, aggregation=Aggregation.MIN)


@pytest.mark.parametrize("text, message", [
    ("reorder(batch, batch)", "an index is named twice"),
    ("tile(batch, b0, b1, 4)\nreorder(tree, b0)", "not successive loops|not perfectly nested"),
    ("split(tree, t0, t1, 5)\nreorder(t0, batch)", "not perfectly nested|not successive"),
    ("interleave(batch)", "interleave applies to an innermost loop; batch contains tree"),
    ("interleave(tree)\ninterleave(tree, 1)", "at least 2 walks"),
    ("gpuDimension(batch, grid.x)", "maps loop batch to a GPU; the cpu target"),
    ("atomicReduce(batch)", "applies to loops over trees; batch is a batch index"),
    ("vectorReduce(batch, 4)", "applies to loops over trees; batch is a batch index"),
    ("atomicReduce(tree)", "needs tree to be parallel"),
    ("tile(tree, t0, t1, 4)\nparallel(t0)\nsharedReduce(t0)", "sharedReduce maps loop t0 to a GPU"),
    ("tile(batch, b0, b1, 4)\nreorder(b1, b0)", "b1 is the inner index of a tile of batch and must stay inside"),
    ("unroll(batch)", "trip count is known when compiling; batch runs over the rows"),
    ("specialize(batch)", "specialize generates code per tree"),
    ("peelWalk(tree, 99)", "cannot peel 99 steps: the forest has a leaf at depth"),
    ("tile(batch, b0, b1, 4)\ntile(batch, c0, c1, 2)", "batch was tiled or split"),
    ("tile(tree, t0, t0, 4)", "index 't0' is already defined"),
    ("parallel(nope)", "unknown index 'nope'"),
    ("tile(batch, b0, b1, 0)", "needs a positive whole number, got '0'"),
    ("tile(batch, b0, b1)", "tile takes 4 arguments, got 3"),
    ("frobnicate(batch)", "unknown directive 'frobnicate'"),
    ("tile(batch b0 b1 4", "cannot parse"),
    ("gpuDimension(batch, warp.x)", "not a GPU dimension"),
    ("parallel(batch)\ntile(batch, b0, b1, 4)", "set parallel on batch before tiling it"),
    ("unroll(tree)", "would copy its body 30 times|"),
])
def test_legality_errors_name_the_problem(forest, text, message):
    if message == "would copy its body 30 times|":
        # 30 trees is within the unroll limit: legal, and it really unrolls.
        cf = sf.compile(forest, schedule=text)
        assert "for %tree" not in cf.show("lir")
        return
    with pytest.raises(ScheduleError, match=message):
        sf.compile(forest, schedule=text)


def test_errors_carry_the_line_number(forest):
    with pytest.raises(ScheduleError, match="line 3: interleave"):
        sf.compile(forest, schedule="tile(batch, b0, b1, 4)\n\ninterleave(b0)")


def test_atomic_reduce_needs_an_additive_model(forest):
    with pytest.raises(ScheduleError, match="atomic updates add, but this model takes the min"):
        sf.compile(_min_forest(forest), schedule="tile(tree, t0, t1, 4)\nparallel(t0)\natomicReduce(t0)")


def test_every_directive_changes_the_code(forest):
    """Nothing is a no-op: each directive shows in the MIR or LIR it produces (walks with leaf
    checks: where leaves loop to themselves every step is peeled already, and the walk
    directives leave the code as it is, docs/design.md)."""
    with leaf_self_loops(False):
        _every_directive_changes_the_code(forest)


def _every_directive_changes_the_code(forest):
    base = sf.show(forest, "lir", schedule="")
    for text in ["tile(batch, b0, b1, 4)", "split(tree, t0, t1, 3)", "reorder(tree, batch)",
                 "tile(tree, t0, t1, 3)\nunroll(t1)", "tile(tree, t0, t1, 3)\nspecialize(t1)",
                 "interleave(tree, 2)", "unrollWalk(tree, 2)", "peelWalk(tree, 1)", "cache(batch)",
                 "cache(tree)", "parallel(tree)", "tile(tree, t0, t1, 3)\nparallel(t0)\natomicReduce(t0)",
                 "tile(tree, t0, t1, 3)\nparallel(t0)\nvectorReduce(t0, 4)"]:
        assert sf.show(forest, "lir", schedule=text) != base, text


@pytest.mark.parametrize("text", [
    # a conflicting loop inside a sequential tree loop: its slices are folded and reset each time
    "tile(tree, t0, t1, 3)\nparallel(t1)",
    # two levels of conflicting loops with rows in between (reduce_dimension_inplace, then into margins)
    "tile(tree, t0, t1, 8)\nreorder(t0, batch, t1)\nparallel(t0)\ntile(t1, u0, u1, 2)\nparallel(u0)",
    # the same, with the outer level threaded by iterations and vector folding
    "tile(tree, t0, t1, 7)\nreorder(t0, batch, t1)\nparallel(t0)\nvectorReduce(t0, 4)",
    "tile(tree, t0, t1, 4)\nreorder(t0, batch, t1)\nparallel(t0)\natomicReduce(t0)",
])
@pytest.mark.parametrize("aggregation", [Aggregation.SUM, Aggregation.MIN, Aggregation.MAX, Aggregation.AVERAGE])
def test_legalised_reductions(forest, text, aggregation):
    import dataclasses

    f = dataclasses.replace(forest, aggregation=aggregation, average_divisor=10.0)
    if "atomic" in text and aggregation in (Aggregation.MIN, Aggregation.MAX):
        pytest.skip("atomic updates only add (tested in test_atomic_reduce_needs_an_additive_model)")
    X = rows_for(f, np.random.default_rng(3), 900)
    cf = sf.compile(f, schedule=text, threads=3)
    np.testing.assert_allclose(cf.predict(X, output_margin=True),
                               reference.predict(f, X, output_margin=True), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("rep", ["array", "sparse"])
def test_empty_split_half_keeps_the_other_halfs_fold(rep):
    # Found by hypothesis: split(i7, ..., 1) of a 1-tree range leaves an empty second half whose
    # in-place fold must not overwrite the slot the first half folded into.
    from silvanforge.ir.hir import Forest, Tree

    f = Forest(trees=[Tree.from_nodes([-1], [-1], [-1], [0.0], [[0.126]])], num_features=1,
               base_score=np.array([-0.13]))
    text = ("tile(tree, i0, i1, 1)\ntile(i0, i2, i3, 1)\ntile(i2, i4, i5, 1)\ntile(i4, i6, i7, 1)\n"
            "parallel(i6)\nsplit(i7, i14, i15, 1)\nparallel(i14)\nparallel(i15)\nvectorReduce(i15, 1)")
    X = np.zeros((3, 1))
    for threads in (1, 2):
        cf = sf.compile(f, rep=rep, schedule=text, threads=threads)
        np.testing.assert_allclose(cf.predict(X, output_margin=True),
                                   reference.predict(f, X, output_margin=True), rtol=1e-6)


def test_an_index_derived_from_an_inner_tile_stays_inside_its_outer():
    with pytest.raises(ScheduleError, match="derived from i1"):
        lower_to_mir(make_forest(), parse_schedule("tile(batch, i0, i1, 1)\ntile(i1, i2, i3, 1)\nreorder(i2, i0)"))


@pytest.mark.parametrize("rep", ["sparse", "array", "reorg"])
def test_tiny_batches_walk_each_rows_trees_together(forest, rep):
    """Under 16 rows the CPU default walks a row's trees ``row_tree_lanes`` at a time (the
    representation's; reorg's walks gain nothing from it and take them in turn), exactly."""
    from silvanforge.plugins import registry
    from silvanforge.scheduler.canned import interleaved_trees

    lanes = registry().rep_class(rep).row_tree_lanes
    assert (lanes == 1) == (rep == "reorg")
    X = rows_for(forest, np.random.default_rng(2), 40)
    for batch in (1, 5):
        cf = sf.compile(forest, rep=rep, batch_size=batch, threads=1)
        assert cf.schedule == interleaved_trees(forest, batch, lanes)
        assert ("interleave(t1)" in cf.schedule.to_text()) == (lanes > 1)
        for k in (1, 3, 40):
            np.testing.assert_array_equal(cf.predict(X[:k], output_margin=True),
                                          reference.predict(forest, X[:k], output_margin=True))


def test_tiles_and_splits_past_the_index_range_are_schedule_errors():
    """A tile of 2**63 rows, tiles whose sizes multiply past 2**31, a split at 2**63: each a
    ScheduleError (the generated loops' 64-bit steps overflowed: a crash or an endless loop)."""
    forest = make_forest()
    for text in ("tile(batch, b0, b1, 9223372036854775808)\nparallel(b0)",
                 "\n".join(["tile(batch, a0, a1, 65536)"] + ["tile(a0, b0, b1, 65536)"]),
                 "split(tree, t0, t1, 9223372036854775808)"):
        with pytest.raises(ScheduleError, match="at most 2147483648"):
            lower_to_mir(forest, parse_schedule(text))
    lower_to_mir(forest, parse_schedule("tile(batch, a0, a1, 65536)\ntile(a1, b0, b1, 2)"))  # (inside a tile: fine)

"""Split rows: CPU walks read each row as 2F columns, a missing value as +inf in
column 2f and as -inf in column 2f + 1, and the feature field ``(f << 1) | default_left`` picks
the column, so a step needs no NaN test and no flags.  Checked against the reference evaluator
on random forests (NaN, +-inf and exact ties in the rows) for every representation, schedule
family, tile size and vector walks, and that it is used only where it is exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import _tree, categorical_forest, category_rows, forests, rows_for
from support_common import Draws

import silvanforge as sf
from silvanforge import api
from silvanforge.artifact import store
from silvanforge.frontend.hir_passes import pad_trees
from silvanforge.ir.hir import CategoryRule, Forest, Op, Tree
from silvanforge.lowering import walkcost
from silvanforge.lowering.walksetup import (
    SPLIT_ROWS,
    SPLIT_TOPS,
    build_layout,
    can_split_rows,
    leaf_self_loops,
    set_columns,
    split_rows,
    vector_walks,
    walks_exit_early,
    want_leaf_self_loops,
)
from silvanforge.runtime import reference

SCHEDULES = ["interleaved", "default", "xgboost", "tree-parallel", "one-tree-at-a-time"]


def uses_split_rows(cf) -> bool:
    return SPLIT_ROWS in cf.lir_module.buffers


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=8, max_depth=6, max_features=40, plain=True),
       rep=st.sampled_from(["sparse", "array", "reorg"]), schedule=st.sampled_from(SCHEDULES),
       seed=st.integers(0, 2**16))
def test_split_rows_match_reference(forest, rep, schedule, seed):
    X = rows_for(forest, np.random.default_rng(seed), 200)
    cf = sf.compile(forest, rep=rep, schedule=schedule)
    assert uses_split_rows(cf)
    # Tree-parallel sums partial margins in another order (float rounding), the rest bit-exact.
    tol = 1e-5 if schedule == "tree-parallel" else 0
    for threads in (1, 2):
        np.testing.assert_allclose(cf.predict(X, output_margin=True, threads=threads),
                                   reference.predict(forest, X, output_margin=True), rtol=tol, atol=tol)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=6, max_depth=5, max_features=20, plain=True),
       tile=st.sampled_from([2, 4]), seed=st.integers(0, 2**16))
def test_split_rows_tiled_and_vector_walks(forest, tile, seed):
    X = rows_for(forest, np.random.default_rng(seed), 120)
    want = reference.predict(forest, X, output_margin=True)
    tiled = sf.compile(forest, tile_size=tile)
    with vector_walks(True):
        vector = sf.compile(forest, schedule="interleaved")
    for cf in (tiled, vector):
        assert uses_split_rows(cf)
        np.testing.assert_array_equal(cf.predict(X, output_margin=True), want)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=6, max_depth=5, max_features=20), seed=st.integers(0, 2**16))
def test_split_rows_only_where_exact(forest, seed):
    """Any forest: split rows exactly when one op of < / <= decides every numerical split and
    none treats zero as missing; the predictions equal the reference either way, and with split
    rows turned off."""
    layout = build_layout(forest)
    plain = (len(layout.ops) == 1 and layout.ops <= {Op.LT, Op.LE}
             and not any(t.zero_missing[t.left >= 0].any() for t in forest.trees))
    X = rows_for(forest, np.random.default_rng(seed), 100)
    cf = sf.compile(forest, schedule="interleaved")
    assert uses_split_rows(cf) == plain
    with split_rows(False):
        off = sf.compile(forest, schedule="interleaved")
    assert not uses_split_rows(off)
    want = reference.predict(forest, X, output_margin=True)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), want)
    np.testing.assert_array_equal(off.predict(X, output_margin=True), want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), features=st.integers(1, 12), rule=st.sampled_from(list(CategoryRule)),
       op=st.sampled_from([Op.LT, Op.LE]), dtype=st.sampled_from(["float32", "float64"]),
       rep=st.sampled_from(["sparse", "array", "reorg"]), schedule=st.sampled_from(SCHEDULES))
def test_categorical_splits_read_category_columns(seed, features, rule, op, dtype, rep, schedule):
    """Categorical splits read split rows' category columns (layout.split_row_categories): every
    representation and schedule family equals the reference on missing values going either way,
    +-inf, and categories no split names, fractional, negative or past the rule's bounds."""
    forest = categorical_forest(seed, features, rule, op, dtype)
    assume(forest.has_categorical())
    X = category_rows(forest, seed, 200)
    with set_columns(False):  # (set columns: test_set_columns.py)
        cf = sf.compile(forest, rep=rep, schedule=schedule)
    assert uses_split_rows(cf) and SPLIT_TOPS in cf.lir_module.buffers
    tol = 1e-5 if schedule == "tree-parallel" else 0
    for threads in (1, 2):
        np.testing.assert_allclose(cf.predict(X, output_margin=True, threads=threads),
                                   reference.predict(forest, X, output_margin=True), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype, top, everywhere, split", [
    ("float32", 2**24 - 2, True, True),  # top + 2 = 2**24: still a whole float32
    ("float32", 2**24 - 1, True, False),  # top + 2 rounds in float32: a missing value would read a category
    ("float64", 2**27, False, False),  # every split's bitset spanning one split's 2**27 categories
])
def test_categorical_splits_read_split_rows_only_where_their_columns_are_exact_and_small(dtype, top, everywhere,
                                                                                       split):
    """A feature's category columns hold ``top + 1`` and ``top + 2`` (layout.split_row_categories):
    split rows are not taken where the rows' dtype cannot hold them exactly, nor where the
    splits' bitsets, each spanning the feature's categories, would be many times their own;
    every missing value still goes where the reference sends it."""
    forest = categorical_forest(3, 4, CategoryRule.LIGHTGBM, Op.LT, dtype)
    on = [(t, node) for t in forest.trees for node in sorted(t.categories) if t.feature[node] == 0]
    assert len(on) > 4  # (the forest splits feature 0 by category often)
    for t, node in on if everywhere else on[:1]:
        t.categories[node] = np.append(t.categories[node], top)
    X = category_rows(forest, 5, 300)
    X[::7] = np.nan
    X[1::7, 0] = top
    with set_columns(False):  # (the category columns' bounds; set columns': test_set_columns.py)
        cf = sf.compile(forest, rep="sparse")
    assert uses_split_rows(cf) == split
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), features=st.integers(1, 12), rule=st.sampled_from(list(CategoryRule)),
       dtype=st.sampled_from(["float32", "float64"]))
def test_categorical_splits_in_every_band_tiled_and_in_leaf_ids(seed, features, rule, dtype):
    """The plan's forms at every request size (a lone row's walks through self-looping leaves),
    tiled walks and leaf ids, on categorical forests read through split rows."""
    forest = categorical_forest(seed, features, rule, Op.LE, dtype, trees=20)
    assume(forest.has_categorical())
    X = category_rows(forest, seed, 300)
    want, leaves = reference.predict(forest, X, output_margin=True), reference.predict_leaf(forest, X)
    with set_columns(False):  # (the category columns in every band; set columns: test_set_columns.py)
        plan, tiled = sf.compile(forest), sf.compile(forest, tile_size=4)
        one = sf.compile(forest, batch_size=1, rep="sparse")
    assert uses_split_rows(one) and one.lir_module.info.get("leaf_self_loops")
    for n in (1, 2, 3, 16, 17, 300):
        parts = range(0, len(X), n)
        for cf in (plan, tiled, one):
            got = np.concatenate([cf.predict(X[i:i + n], output_margin=True) for i in parts])
            np.testing.assert_array_equal(got, want)
        got = np.concatenate([plan.predict(X[i:i + n], pred_leaf=True) for i in parts])
        np.testing.assert_array_equal(got, leaves)


@pytest.mark.parametrize("categorical", [False, True])
def test_walks_that_prefetch_children_match_reference(categorical, monkeypatch):
    """One row's walks of several trees at once prefetch each node's children where the forest's
    nodes pass the L2 cache (walkcost.walks_prefetch; here every forest): self-looping leaves,
    categorical splits and rows past the batch's end in the tiny bands alike."""
    monkeypatch.setattr(walkcost, "WALK_PREFETCH_BYTES", 0)
    forest = categorical_forest(7, 9, CategoryRule.LIGHTGBM, Op.LE, "float64", trees=21)
    if not categorical:
        forest = Forest(trees=[_tree(np.random.default_rng(t), 9, (0,), 6, [int(Op.LE)], False, False)
                               for t in range(21)], num_features=9, source="random")
    X = category_rows(forest, 3, 64)
    with vector_walks(False), set_columns(False):
        cf = sf.compile(forest, batch_size=1, rep="sparse", threads=1)
    assert "prefetch" in cf.show("lir") and uses_split_rows(cf)
    want = reference.predict(forest, X, output_margin=True)
    for n in (1, 2, 3, 64):
        got = np.concatenate([cf.predict(X[i:i + n], output_margin=True) for i in range(0, len(X), n)])
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("default_left", [True, False])
@pytest.mark.parametrize("op, threshold, split", [
    (Op.LE, np.inf, True),  # LightGBM's NaN-or-not split: compiled as x <= MAX
    (Op.LT, np.inf, False), (Op.LT, -np.inf, False), (Op.LE, -np.inf, False),
    (Op.LE, "max", False), (Op.LT, "max", False), (Op.LE, "-max", False), (Op.LT, "-max", False),
])
def test_infinite_and_largest_thresholds(op, threshold, split, default_left, dtype):
    """Split rows hold +-inf inputs as +-MAX and missing values as +-inf: a threshold of +inf
    under <= reads as MAX and stays exact; -inf, +inf under <, and +-MAX themselves turn split
    rows off (a default-left NaN at x < -inf would otherwise go right).  Rows on every edge."""
    top = float(np.finfo(dtype).max)
    value = {"max": top, "-max": -top}.get(threshold, threshold)
    tree = Tree.from_nodes([1, -1, -1], [2, -1, -1], [0, 0, 0], [value, 0, 0],
                           np.array([[0.0], [1.0], [2.0]]), op=[int(op)] * 3,
                           default_left=[default_left, False, False])
    forest = Forest(trees=[tree], num_features=1, threshold_dtype=dtype, accumulate_dtype=dtype)
    assert can_split_rows(build_layout(forest)) == split
    cf = sf.compile(forest, rep="sparse")
    assert uses_split_rows(cf) == split
    X = np.array([[np.nan], [np.inf], [-np.inf], [top], [-top], [np.nextafter(top, 0)], [0.0], [-0.0]])
    np.testing.assert_array_equal(cf.predict(X, output_margin=True),
                                  reference.predict(forest, X, output_margin=True))


@pytest.mark.parametrize("op", [Op.LT, Op.LE])
def test_nan_thresholds_keep_the_nan_test(op):
    """No input goes left at a NaN threshold, a missing one included where its default is left:
    split rows (missing values as +-inf, compared) would send it right."""
    tree = Tree.from_nodes([1, -1, -1], [2, -1, -1], [0, -1, -1], [np.nan, 0, 0],
                           np.array([[0.0], [1.0], [2.0]]), op=int(op), default_left=True)
    forest = Forest(trees=[tree], num_features=1)
    assert not can_split_rows(build_layout(forest))
    cf = sf.compile(forest, rep="sparse")
    assert not uses_split_rows(cf)
    X = np.array([[np.nan], [1.0], [np.inf], [-np.inf]])
    np.testing.assert_array_equal(cf.predict(X, output_margin=True),
                                  reference.predict(forest, X, output_margin=True))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=6, max_depth=6, max_features=5, plain=True), seed=st.integers(0, 2**16),
       schedule=st.sampled_from(SCHEDULES))
def test_nan_or_not_splits_read_split_rows(forest, seed, schedule):
    """Forests of <= splits, a third of them x <= +inf (missing values left or right), on rows with
    NaN, +-inf and +-MAX: split rows and self-looping leaves stay on and exact."""
    rng = np.random.default_rng(seed)
    for t in forest.trees:
        t.op[:] = int(Op.LE)
        internal = np.flatnonzero(t.left >= 0)
        t.threshold[internal[rng.random(len(internal)) < 0.3]] = np.inf
    top = float(np.finfo(forest.threshold_dtype).max)
    X = rows_for(forest, rng, 300)
    edge = rng.random(X.shape) < 0.2
    X[edge] = rng.choice([top, -top, np.inf, -np.inf, np.nan], int(edge.sum()))
    cf = sf.compile(forest, rep="sparse", schedule=schedule, pad=False)
    assert uses_split_rows(cf)
    tol = 1e-5 if schedule == "tree-parallel" else 0
    np.testing.assert_allclose(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True),
                               rtol=tol, atol=tol)


def test_gpu_lowering_reads_rows_as_given():
    forest = Forest(trees=[Tree.from_nodes([1, -1, -1], [2, -1, -1], [0, 0, 0], [0.5, 0, 0],
                                           np.array([[0.0], [1.0], [2.0]]))], num_features=1)
    # Walks (rep= named): the default chooser takes a program representation for this one stump.
    assert SPLIT_ROWS in api.lower(forest, target="cpu", rep="sparse").lir.buffers
    for target in ("amd", "cuda"):
        assert SPLIT_ROWS not in api.lower(forest, target=target, rep="sparse").lir.buffers


def test_split_rows_before_a_tree_parallel_loop():
    """A tree-parallel loop phase reads every row: the row phase before it splits them all."""
    forest = Forest(trees=[Tree.from_nodes([1, -1, -1], [2, -1, -1], [0, 0, 0], [0.5, 0, 0],
                                           np.array([[0.0], [1.0], [2.0]]), default_left=[True, False, False]),
                           Tree.from_nodes([1, -1, -1], [2, -1, -1], [0, 0, 0], [0.5, 0, 0],
                                           np.array([[0.0], [3.0], [5.0]]))] * 2, num_features=1)
    cf = sf.compile(forest, schedule="reorder(tree, batch)\nparallel(tree)")
    kinds = [f.parallel for f in cf.lir_module.functions]
    assert uses_split_rows(cf) and kinds == ["rows", "loop", "rows"], kinds
    X = np.array([[np.nan], [0.4], [0.6], [np.inf], [-np.inf]] * 200)
    for threads in (1, 2):
        np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads),
                                      reference.predict(forest, X, output_margin=True))


def test_large_batches_run_in_blocks_of_rows():
    """Scratch grows with the rows: past the ``scratch_bytes`` setting a batch runs block by
    block, same values."""
    rng = np.random.default_rng(3)
    trees = [_tree(rng, 30, (0,), 5, [int(Op.LT)], categorical=False, zero_missing=False) for _ in range(6)]
    forest = Forest(trees=trees, num_features=30)
    X = rows_for(forest, np.random.default_rng(0), 3000)
    cf = sf.compile(forest)
    want = cf.predict(X, output_margin=True)
    with sf.config_context(scratch_bytes=1):  # the smallest blocks
        for threads in (1, 2):
            np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads), want)
    np.testing.assert_array_equal(want, reference.predict(forest, X, output_margin=True))


def test_padding_keeps_the_forest_op():
    """Dummy splits take the tree's op: a padded <= forest still compiles to one compare."""
    tree = Tree.from_nodes([1, 3, -1, -1, -1], [2, 4, -1, -1, -1], [0, 1, 0, 0, 0], [0.5, 1.5, 0, 0, 0],
                           np.array([[0.0], [0.0], [2.0], [3.0], [4.0]]), op=[int(Op.LE)] * 5)
    padded = pad_trees(Forest(trees=[tree], num_features=2))
    assert build_layout(padded).ops == {Op.LE}
    assert can_split_rows(build_layout(padded))


def test_artifact_code_is_reused_only_for_the_same_program(tmp_path):
    """Machine code saved from a different lowering of the same model (here: without split rows,
    in an artifact whose options do not say so, as one saved by a version that lowered it so)
    is rebuilt on load, never run against the new program's buffers."""
    from silvanforge.artifact import archive

    rng = np.random.default_rng(5)
    trees = [_tree(rng, 6, (0,), 4, [int(Op.LT)], categorical=False, zero_missing=False) for _ in range(5)]
    forest = Forest(trees=trees, num_features=6)
    X = rows_for(forest, rng, 300)
    with split_rows(False):
        old = sf.compile(forest, rep="sparse")
    assert not uses_split_rows(old) and old.options.split_rows is False
    meta, arrays, blob, extra = store._parts(old)
    archive.write(tmp_path / "old.forge", {**meta, "split_rows": None}, arrays, blob, extra)
    loaded = sf.load_compiled(tmp_path / "old.forge")  # lowered anew: split rows, a new digest
    assert uses_split_rows(loaded)
    np.testing.assert_array_equal(loaded.predict(X, output_margin=True),
                                  reference.predict(forest, X, output_margin=True))
    loaded.save(tmp_path / "new.forge")
    again = sf.load_compiled(tmp_path / "new.forge")
    np.testing.assert_array_equal(again.predict(X, output_margin=True),
                                  loaded.predict(X, output_margin=True))


def test_wide_rows_are_split_only_per_chunk():
    """2000 features under a few shallow trees: splitting every row before the walks costs more
    than the walks save; a schedule without cached row chunks then reads the rows as they are
    (still exact), and forcing split rows splits them."""
    rng = np.random.default_rng(9)
    trees = [_tree(rng, 2000, (0,), 4, [int(Op.LT)], categorical=False, zero_missing=False) for _ in range(3)]
    forest = Forest(trees=trees, num_features=2000)
    X = rows_for(forest, rng, 50)
    want = reference.predict(forest, X, output_margin=True)
    plain = sf.compile(forest, schedule="interleaved")
    with split_rows(True):
        forced = sf.compile(forest, schedule="interleaved")
    assert not uses_split_rows(plain) and uses_split_rows(forced)
    for cf in (plain, forced):
        np.testing.assert_array_equal(cf.predict(X, output_margin=True), want)


# ----------------------------------------------------------------------------- self-looping leaves
def uses_leaf_loops(cf) -> bool:
    return bool(cf.lir_module.info.get("leaf_self_loops"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=8, max_depth=7, max_features=30, plain=True),
       schedule=st.sampled_from(SCHEDULES), n=st.sampled_from([1, 7, 203, 600]),
       seed=st.integers(0, 2**16))
def test_self_looping_leaves_match_reference(forest, schedule, n, seed):
    """Unpadded trees walked to the forest's depth without leaf checks: a step from a leaf
    stays at the leaf.  Row counts that leave interleaved lanes idle, and two threads."""
    X = rows_for(forest, np.random.default_rng(seed), n)
    with leaf_self_loops(True):
        cf = sf.compile(forest, rep="sparse", schedule=schedule, pad=False)
    inline = all(len(t.outputs) == 1 for t in forest.trees)
    assert uses_leaf_loops(cf) == inline  # leaves apart keep their checks
    tol = 1e-5 if schedule == "tree-parallel" else 0
    for threads in (1, 2):
        np.testing.assert_allclose(cf.predict(X, output_margin=True, threads=threads),
                                   reference.predict(forest, X, output_margin=True), rtol=tol, atol=tol)


def test_a_single_leaf_first_tree_and_idle_lanes():
    """The first tree is one leaf (slot 0 in a plain layout): idle lanes walking rows past the
    batch stay inside the node arrays (a spare slot 0), and every row is exact."""
    leaf = Tree.from_nodes([-1], [-1], [-1], [0.0], np.array([[0.25]]))
    rng = np.random.default_rng(11)
    trees = [leaf] + [_tree(rng, 5, (0,), 6, [int(Op.LE)], categorical=False, zero_missing=False)
                      for _ in range(6)]
    forest = Forest(trees=trees, num_features=5)
    with leaf_self_loops(True):
        cf = sf.compile(forest, pad=False, schedule="interleaved")
    assert uses_leaf_loops(cf)
    for n in (1, 5, 9, 77, 515):
        X = rows_for(forest, rng, n)
        for threads in (1, 2):
            np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads),
                                          reference.predict(forest, X, output_margin=True))


def _chain(rng, depth):
    """One leaf per level, down the right children: the mean leaf depth is about half the
    tree's depth (a leaf-wise LightGBM tree's shape, exaggerated)."""
    n = 2 * depth + 1
    order = [0] + [i for k in range(depth) for i in (2 * k + 1, 2 * k + 2)]
    ranks = {node: r for r, node in enumerate(order)}
    lefts, rights = np.full(n, -1), np.full(n, -1)
    for k in range(depth):
        node = 0 if k == 0 else 2 * k
        lefts[ranks[node]], rights[ranks[node]] = ranks[2 * k + 1], ranks[2 * k + 2]
    grid = np.array([-1.0, 0.0, 0.5, 1.0, 2.0])
    return Tree.from_nodes(lefts, rights, rng.integers(0, 4, n), rng.choice(grid, n), rng.normal(size=(n, 1)),
                           default_left=rng.random(n) < 0.5)


def test_leaf_loops_follow_the_depths():
    """Leaves loop to themselves wherever split rows are read.  While the trees' depths sum to
    at most 1.5x their leaves' mean depths, each tree walks to its own depth (a counted loop
    where the depths differ); deeper trees (leaf-wise chains) stop once every interleaved walk
    is at a leaf (a while loop, no per-walk branch)."""
    rng = np.random.default_rng(2)

    def forest_of(depths):
        trees = [_tree(rng, 4, (0,), d, [int(Op.LT)], categorical=False, zero_missing=False) for d in depths]
        return Forest(trees=trees, num_features=4)

    cases = {"even": forest_of([8, 8, 8, 7]), "mixed": forest_of([2, 2, 2, 8]),
             "chains": Forest(trees=[_chain(rng, 8), _chain(rng, 6)], num_features=4)}
    early = {}
    for name, forest in cases.items():
        steps = sum(t.depth() for t in forest.trees)
        paths = sum(t.node_depths()[t.left < 0].mean() for t in forest.trees)
        assert want_leaf_self_loops(forest)
        early[name] = walks_exit_early(forest)[0]
        assert early[name] == (steps > 1.5 * paths), name
        X = rows_for(forest, rng, 100)
        cf = sf.compile(forest, pad=False, rep="sparse")
        assert uses_leaf_loops(cf)
        lir_text = cf.show("lir")
        depths = {t.depth() for t in forest.trees}
        assert ("tree_depth" in lir_text) == (not early[name] and len(depths) > 1)
        assert ("while" in lir_text) == early[name]
        np.testing.assert_array_equal(cf.predict(X, output_margin=True),
                                      reference.predict(forest, X, output_margin=True))
    assert not early["even"] and early["chains"]


def test_walks_that_exit_early_match_reference():
    """Deep chains among ordinary trees: walks through self-looping leaves that stop when every
    interleaved walk is at a leaf, for every schedule, idle lanes and two threads.  Forests
    whose walks do not exit early are checked too, but enough of the draws must exit early."""
    draws = Draws()

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(seed=st.integers(0, 2**16), chains=st.lists(st.integers(1, 12), min_size=1, max_size=5),
           others=st.integers(0, 4), schedule=st.sampled_from(SCHEDULES), n=st.sampled_from([1, 7, 203, 600]))
    def check(seed, chains, others, schedule, n):
        rng = np.random.default_rng(seed)
        trees = [_chain(rng, d) for d in chains] + [
            _tree(rng, 4, (0,), int(rng.integers(0, 4)), [int(Op.LT)], categorical=False, zero_missing=False)
            for _ in range(others)]
        forest = Forest(trees=trees, num_features=4, base_score=np.array([0.5]))
        X = rows_for(forest, rng, n)
        cf = sf.compile(forest, rep="sparse", schedule=schedule, pad=False)
        if walks_exit_early(forest)[0]:
            assert uses_leaf_loops(cf) and "while" in cf.show("lir")
            draws.count("exits early")
        else:
            draws.count("runs every tree to its depth")
        tol = 1e-5 if schedule == "tree-parallel" else 0
        for threads in (1, 2):
            np.testing.assert_allclose(cf.predict(X, output_margin=True, threads=threads),
                                       reference.predict(forest, X, output_margin=True), rtol=tol, atol=tol)

    check()
    draws.assert_share("exits early", 0.1)


def _counted_shares(monkeypatch, kernel) -> list:
    """Record each phase call's row ranges, whichever pool runs them."""
    calls = []
    run = kernel.run
    monkeypatch.setattr(kernel, "run", lambda *a: (calls.append([a[4:6]]), run(*a))[1])
    if kernel.run_shares is not None:
        run_shares = kernel.run_shares
        monkeypatch.setattr(kernel, "run_shares",
                            lambda *a: (calls.append([s[:2] for s in a[4]]), run_shares(*a))[1])
    return calls


def test_cheap_models_keep_small_batches_on_one_thread(monkeypatch):
    """Without native workers a kernel asks for enough rows per thread that a hand-off through
    Python's pool pays (the ``thread_steps`` setting, read at each call); the runtime splits a
    batch only into shares that large, and the values do not change."""
    rng = np.random.default_rng(4)
    trees = [_tree(rng, 6, (0,), 5, [int(Op.LT)], categorical=False, zero_missing=False) for _ in range(20)]
    forest = Forest(trees=trees, num_features=6)
    cf = sf.compile(forest, pad=False)  # compiled under the suite's settings, called under others
    monkeypatch.setattr(cf.kernel, "run_shares", None)
    steps = sum(t.depth() for t in forest.trees)
    calls = _counted_shares(monkeypatch, cf.kernel)
    with sf.config_context(thread_steps=500_000):
        assert cf.kernel.min_rows_per_thread == -(-500_000 // steps)
        for n, shares in ((cf.kernel.min_rows_per_thread, 1), (2 * cf.kernel.min_rows_per_thread + 3, 2)):
            calls.clear()
            X = rows_for(forest, rng, n)
            np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=2),
                                          reference.predict(forest, X, output_margin=True))
            assert len(calls) == shares * len(cf.kernel.phases), (n, calls)
    assert cf.kernel.min_rows_per_thread == 1  # the suite's thread_steps=1 again


def test_native_workers_split_batches_by_walk_steps(monkeypatch):
    """With native workers (target_cpu's pool) a share needs only ``share_steps`` walk steps:
    small batches split too, into shares of at least that many rows, with the same values."""
    from silvanforge_target_cpu import pool

    if pool.native_pool() is None:
        pytest.skip("no native worker pool on this host")
    rng = np.random.default_rng(5)
    trees = [_tree(rng, 6, (0,), 5, [int(Op.LT)], categorical=False, zero_missing=False) for _ in range(20)]
    forest = Forest(trees=trees, num_features=6)
    cf = sf.compile(forest, pad=False)
    steps = sum(t.depth() for t in forest.trees)
    per_share = max(16, -(-2000 // steps))
    calls = _counted_shares(monkeypatch, cf.kernel)
    with sf.config_context(share_steps=2000, min_share_rows=16):
        assert cf.kernel.min_rows_per_share == per_share
        for n, threads, shares in ((per_share, 2, 1), (2 * per_share + 1, 2, 2), (5 * per_share, 4, 4),
                                   (3 * per_share, 8, 3)):
            calls.clear()
            X = rows_for(forest, rng, n)
            np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads),
                                          reference.predict(forest, X, output_margin=True))
            assert [len(c) for c in calls] == [shares] * len(cf.kernel.phases), (n, calls)
            covered = sorted(r for c in calls for r in c)
            assert covered[0][0] == 0 and covered[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))


# ----------------------------------------------------------------------------- rows split per chunk
def test_rows_split_per_chunk_only_where_every_walk_is_cached():
    from silvanforge.lowering.walksetup import rows_split_per_chunk
    from silvanforge.scheduler import lower_to_mir, parse_schedule

    rng = np.random.default_rng(6)
    forest = Forest(trees=[_tree(rng, 4, (0,), 4, [int(Op.LT)], categorical=False, zero_missing=False)
                           for _ in range(3)], num_features=4)
    chunked = "tile(batch, b0, b1, 32)\nreorder(b0, tree, b1)\ncache(b0)"
    assert rows_split_per_chunk(lower_to_mir(forest, parse_schedule(chunked)))
    for text in ("tile(batch, b0, b1, 32)\nreorder(b0, tree, b1)", "reorder(tree, batch)\ncache(tree)"):
        assert not rows_split_per_chunk(lower_to_mir(forest, parse_schedule(text)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=8, max_depth=6, max_features=30, plain=True),
       chunk=st.sampled_from([16, 24, 64]), lanes=st.sampled_from([4, 8, 16]),
       loops=st.booleans(), n=st.sampled_from([1, 13, 100, 700]), seed=st.integers(0, 2**16))
def test_rows_split_per_chunk_match_reference(forest, chunk, lanes, loops, n, seed):
    """Each cached chunk splits its own rows as it starts; lanes past a chunk read rows split
    later (or never): their walks stay in the arrays and their results are dropped."""
    lanes = min(lanes, chunk)
    text = (f"tile(batch, b0, b1, {chunk})\nreorder(b0, tree, b1)\ntile(b1, c0, c1, {lanes})\n"
            "interleave(c1)\nparallel(b0)\ncache(b0)")
    X = rows_for(forest, np.random.default_rng(seed), n)
    with leaf_self_loops(loops):
        cf = sf.compile(forest, schedule=text, pad=False)
    assert cf.lir_module.info.get("split_rows") == "per chunk"
    for threads in (1, 2):
        np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads),
                                      reference.predict(forest, X, output_margin=True))


def test_wide_rows_are_split_per_chunk_by_the_chooser():
    rng = np.random.default_rng(8)
    trees = [_tree(rng, 1500, (0,), 5, [int(Op.LT)], categorical=False, zero_missing=False) for _ in range(4)]
    forest = Forest(trees=trees, num_features=1500)
    cf = sf.compile(forest, rep="sparse")
    assert "cache(b0)" in cf.schedule.to_text() and cf.lir_module.info.get("split_rows") == "per chunk"
    X = rows_for(forest, rng, 150)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=2),
                                  reference.predict(forest, X, output_margin=True))


@pytest.mark.parametrize("features,dtype,rep", [(128, "float32", "sparse"), (300, "float32", "array"),
                                                (64, "float64", "sparse"), (968, "float32", "sparse"),
                                                (127, "float32", "sparse")])
@pytest.mark.parametrize("cpu", [None, "x86-64-v3"])
def test_rows_of_512_bytes_and_more_are_cached_per_chunk(features, dtype, rep, cpu):
    """Rows of WIDE_ROW_BYTES (512) bytes and more are cached a chunk at a time and split there,
    narrower ones are not; exact either way (NaN, +-inf and ties in the rows), 1 and 2 threads,
    AVX-512 and AVX2 code."""
    from silvanforge_target_cpu import WIDE_ROW_BYTES

    rng = np.random.default_rng(features)
    trees = [_tree(rng, features, (0,), 6, [int(Op.LT)], categorical=False, zero_missing=False) for _ in range(6)]
    forest = Forest(trees=trees, num_features=features, threshold_dtype=dtype, accumulate_dtype=dtype)
    cf = sf.compile(forest, rep=rep, batch_size=256, cpu=cpu)
    wide = features * np.dtype(dtype).itemsize >= WIDE_ROW_BYTES
    assert ("cache(b0)" in cf.schedule.to_text()) == wide
    if wide:
        assert cf.lir_module.info.get("split_rows") == "per chunk"
    X = rows_for(forest, rng, 300)
    for threads in (1, 2):
        np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads),
                                      reference.predict(forest, X, output_margin=True))

"""Uniform tiling (seed 001, 3.2-3.8): shapes, the look-up table, tiled trees, and tiled walks
compiled with the sparse representation against the reference evaluator and the libraries."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import silvanforge as sf
from silvanforge import reference, tiling
from silvanforge.errors import IRVerificationError
from silvanforge.ir.hir import Tree
from strategies import forests, rows_for
from support_common import assert_close

CATALAN = [1, 1, 2, 5, 14, 42, 132, 429, 1430]


# ----------------------------------------------------------------------------- shapes and LUT
def test_number_of_tile_shapes():
    assert [tiling.num_tile_shapes(n) for n in range(9)] == CATALAN
    for n in range(1, 9):
        shapes = tiling.tile_shapes(n)
        assert len(shapes) == CATALAN[n] == len(set(shapes))
        assert all(_size(s) == n for s in shapes)


def _size(shape) -> int:
    return 0 if shape is None else 1 + _size(shape[0]) + _size(shape[1])


def _paths(shape, prefix=""):
    """(node paths, exit paths) of a shape, a path spelling the moves from the tile root."""
    nodes, exits = [prefix], []
    for move, side in zip("LR", shape):
        if side is None:
            exits.append(prefix + move)
        else:
            n, e = _paths(side, prefix + move)
            nodes += n
            exits += e
    return nodes, exits


@pytest.mark.parametrize("n", range(1, 9))
def test_lut_matches_brute_force_walk(n):
    lut = tiling.shape_lut(n)
    assert lut.shape == (CATALAN[n], 2**n) and lut.dtype == np.int8
    for sid, shape in enumerate(tiling.tile_shapes(n)):
        nodes, exits = _paths(shape)
        # Level order, left to right in a level ('L' < 'R'); exits left to right.
        position = {p: k for k, p in enumerate(sorted(nodes, key=lambda p: (len(p), p)))}
        slot = {p: k for k, p in enumerate(sorted(exits))}
        want = np.empty(2**n, np.int64)
        for bits in range(2**n):
            path = ""
            while path in position:
                path += "L" if bits >> (n - 1 - position[path]) & 1 else "R"
            want[bits] = slot[path]
        np.testing.assert_array_equal(lut[sid], want, err_msg=f"shape {sid} of size {n}")


def test_lut_examples_from_the_seed():
    # The balanced shape of size 3: 110 and 111 go to the first child, 100 and 101 to the second.
    balanced = tiling.tile_shapes(3).index(((None, None), (None, None)))
    assert [tiling.shape_lut(3)[balanced, b] for b in (0b111, 0b110, 0b101, 0b100, 0b011, 0b010, 0b000)] \
        == [0, 0, 1, 1, 2, 3, 3]


@pytest.mark.parametrize("n", range(1, 9))
def test_lane_order_lut_is_the_lut_with_bits_reversed(n):
    lut, lanes = tiling.shape_lut(n), tiling.lane_order_lut(n)
    for bits in range(2**n):
        reverse = int(format(bits, f"0{n}b")[::-1], 2)
        np.testing.assert_array_equal(lanes[:, reverse], lut[:, bits])


@pytest.mark.parametrize("bad", [0, 9, -1, 2.5, True, "4"])
def test_tile_size_is_checked(bad):
    with pytest.raises(sf.InputError, match="tile_size"):
        tiling.tile_shapes(bad)
    forest = _stump_forest()
    with pytest.raises(sf.InputError, match="tile_size"):
        sf.lower(forest, tile_size=bad)


# ----------------------------------------------------------------------------- tiled trees
def _walk_tiles(tree: Tree, tiled: tiling.TiledTree, n: int, decide: np.ndarray, dummy: np.ndarray) -> int:
    """The leaf a tiled walk reaches when node ``v`` goes left iff ``decide[v]`` (dummies: any)."""
    if tiled.root_leaf >= 0:
        return tiled.root_leaf
    lut, tile = tiling.shape_lut(n), 0
    while True:
        bits = 0
        for k, v in enumerate(tiled.nodes[tile]):
            bits = bits << 1 | int(decide[v] if v >= 0 else dummy[k])
        slot = lut[tiled.shape[tile], bits]
        if tiled.child_tile[tile, slot] < 0:
            return int(tiled.child_node[tile, slot])
        tile = int(tiled.child_tile[tile, slot])


def _walk_nodes(tree: Tree, decide: np.ndarray) -> int:
    node = 0
    while tree.left[node] >= 0:
        node = int(tree.left[node] if decide[node] else tree.right[node])
    return node


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_depth=8), n=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_tiling_is_valid_and_walks_to_the_same_leaf(forest, n, seed):
    rng = np.random.default_rng(seed)
    tiled = tiling.tile_forest(forest, n)
    tiling.verify_tiled_forest(forest, tiled)
    for tree, tt in zip(forest.trees, tiled.trees):
        internal = int(np.count_nonzero(tree.left >= 0))
        assert tt.nodes.shape == (tt.num_tiles, n)
        assert int(np.count_nonzero(tt.nodes >= 0)) == internal
        depths = tree.node_depths()[tree.left < 0]
        # A tile step passes at least one node and at most n on any path.
        assert -(-int(depths.max()) // n) <= tt.depth <= tree.depth()
        assert tt.min_depth <= tt.depth and (tt.min_depth == 0) == (internal == 0)
        for _ in range(20):
            decide = rng.random(tree.num_nodes) < 0.5
            dummy = rng.random(n) < 0.5
            assert _walk_tiles(tree, tt, n, decide, dummy) == _walk_nodes(tree, decide)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_depth=8), n=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_probability_tiling_is_valid_and_walks_to_the_same_leaf(forest, n, seed):
    # Greedy tiles (seed 000) from random visit counts: leaf counts at random, parents the sums.
    rng = np.random.default_rng(seed)
    for tree in forest.trees:
        hits = np.where(tree.left < 0, rng.integers(0, 5, tree.num_nodes) ** 3, 0)
        for node in np.argsort(-tree.node_depths(), kind="stable"):
            if tree.left[node] >= 0:
                hits[node] = hits[tree.left[node]] + hits[tree.right[node]]
        tt = tiling.tile_tree_by_probability(tree, n, hits)
        tiling.verify_tiled_tree(tree, tt, n)
        # The tile ids rebuild the same tree of tiles.
        again = tiling.tile_by_ids(tree, n, tiling.tile_ids(tt, tree.num_nodes))
        for field in ("nodes", "shape", "child_tile", "child_node"):
            np.testing.assert_array_equal(getattr(again, field), getattr(tt, field))
        if tt.num_tiles:
            # The root tile grows towards the heaviest frontier node first.
            frontier = [int(c) for c in (tree.left[0], tree.right[0]) if tree.left[c] >= 0]
            if n > 1 and frontier:  # ties go to the left child (max keeps the first)
                assert max(frontier, key=lambda c: hits[c]) in tt.nodes[0]
        for _ in range(10):
            decide = rng.random(tree.num_nodes) < 0.5
            dummy = rng.random(n) < 0.5
            assert _walk_tiles(tree, tt, n, decide, dummy) == _walk_nodes(tree, decide)


def test_uniform_tile_ids_rebuild_the_uniform_tiling():
    forest = _seeded_forest(11)
    ids = [tiling.tile_ids(tiling.tile_tree(t, 4), t.num_nodes) for t in forest.trees]
    annotated = tiling.with_tile_ids(forest, ids)
    for a, b in zip(tiling.tile_forest(annotated, 4).trees, tiling.tile_forest(forest, 4).trees):
        np.testing.assert_array_equal(a.nodes, b.nodes)
        np.testing.assert_array_equal(a.child_node, b.child_node)
        assert (a.depth, a.min_depth) == (b.depth, b.min_depth)
    # Ids chosen for tiles of 4 are no tiling with tiles of 2 (too many nodes) or 8 (not maximal).
    deep = next(i for i, t in enumerate(forest.trees) if t.depth() >= 3)
    for n in (2, 8):
        with pytest.raises(IRVerificationError, match=f"tree {deep}|tiling verification"):
            tiling.tile_forest(annotated, n)
    # A padded tree is a new tree: the ids do not follow it.
    from silvanforge.hir_passes import pad_trees

    assert all(t.tile_id is None for t in pad_trees(annotated).trees)


def test_short_tiles_are_padded_with_dummies():
    stump = _stump_forest().trees[0]
    tt = tiling.tile_tree(stump, 4)
    assert tt.num_tiles == 1 and tt.depth == tt.min_depth == 1
    assert tt.nodes[0, 0] == 0 and (tt.nodes[0, 1:] == -1).all()
    assert sorted(set(tt.child_node[0].tolist())) == [1, 2] and (tt.child_tile[0] == -1).all()
    # Whatever the dummies say, the root's predicate alone picks the leaf.
    lut = tiling.shape_lut(4)[tt.shape[0]]
    for bits in range(16):
        assert tt.child_node[0, lut[bits]] == (1 if bits & 0b1000 else 2)


def test_full_tree_tiles_grow_level_by_level():
    # A complete tree of depth 3 (nodes in array order) with tiles of 3: the root tile is the
    # balanced shape {0, 1, 2}; each of its 4 children roots a tile of one real node + 2 dummies.
    size = 15
    k = np.arange(size)
    inner = 2 * k + 2 < size
    tree = Tree.from_nodes(np.where(inner, 2 * k + 1, -1), np.where(inner, 2 * k + 2, -1),
                           np.where(inner, 0, -1), np.zeros(size), np.arange(size, dtype=float))
    tt = tiling.tile_tree(tree, 3)
    assert tt.nodes[0].tolist() == [0, 1, 2]
    assert tt.shape[0] == tiling.tile_shapes(3).index(((None, None), (None, None)))
    assert tt.child_node[0].tolist() == [3, 4, 5, 6] and tt.child_tile[0].tolist() == [1, 2, 3, 4]
    assert tt.num_tiles == 5 and tt.depth == tt.min_depth == 2


def test_verifier_rejects_a_broken_tiling():
    forest = _stump_forest(depth=3)
    tiled = tiling.tile_forest(forest, 2)
    tiling.verify_tiled_forest(forest, tiled)
    tt = tiled.trees[0]
    tt.child_node[0, [0, 1]] = tt.child_node[0, [1, 0]]
    with pytest.raises(IRVerificationError, match="slot"):
        tiling.verify_tiled_forest(forest, tiled)


def _stump_forest(depth: int = 1) -> sf.Forest:
    """A complete tree of ``depth`` levels of splits on feature 0 (thresholds 0, 1, 2, ...)."""
    size = 2 ** (depth + 1) - 1
    k = np.arange(size)
    inner = 2 * k + 2 < size
    tree = Tree.from_nodes(np.where(inner, 2 * k + 1, -1), np.where(inner, 2 * k + 2, -1),
                           np.where(inner, 0, -1), k.astype(float), k * 0.5 + 1)
    return sf.Forest(trees=[tree], num_features=1)


# ----------------------------------------------------------------------------- compiled walks
SCHEDULES = [None, "reorder(tree, batch)", "interleaved", "tile(tree, t0, t1, 3)\nparallel(t0)"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(), n=st.integers(2, 8), schedule=st.sampled_from(SCHEDULES),
       seed=st.integers(0, 2**16), rows=st.sampled_from([0, 1, 9, 300]))
def test_tiled_walks_match_reference(forest, n, schedule, seed, rows):
    X = rows_for(forest, np.random.default_rng(seed), rows)
    cf = sf.compile(forest, rep="sparse", schedule=schedule, tile_size=n)
    assert cf.tile_size == n
    for margin in (True, False):
        got = cf.predict(X, output_margin=margin)
        want = reference.predict(forest, X, output_margin=margin)
        assert got.shape == want.shape
        if schedule is not None and "parallel(t0)" in schedule:
            # Trees summed in parts, then the parts: another order of the same additions.
            rtol = 1e-5 if forest.accumulate_dtype == "float32" else 1e-12
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [3, 5])
def test_padded_forest_with_peeled_tile_steps(n, rng):
    # Padding makes node depths uniform but not tile depths: peeled steps are capped at the
    # shallowest tile leaf, so the target's peeled default stays exact.
    forest = _seeded_forest(7)
    X = rows_for(forest, rng, 200)
    want = reference.predict(forest, X)
    low = sf.lower(forest, pad=True, tile_size=n)
    assert "peelWalk" in low.schedule.to_text()
    for schedule in (None, "tile(batch, b0, b1, 4)\nreorder(b0, tree, b1)\ninterleave(b1)\nunrollWalk(b1, 2)"):
        cf = sf.compile(forest, pad=True, tile_size=n, schedule=schedule)
        np.testing.assert_array_equal(cf.predict(X), want)


def _seeded_forest(seed: int, categorical: bool = True) -> sf.Forest:
    from strategies import _tree

    rng = np.random.default_rng(seed)
    trees = [_tree(rng, 4, (0,), int(rng.integers(1, 7)), [0, 1], categorical, True) for _ in range(10)]
    return sf.Forest(trees=trees, num_features=4, threshold_dtype="float32", accumulate_dtype="float32")


def test_defaults_do_not_tile():
    forest = _seeded_forest(3)
    cf = sf.compile(forest)
    assert cf.tile_size == 1 and cf.summary()["tile_size"] == 1
    assert "tile_lut" not in cf.lir_module.buffers and "tile_size" not in cf.show("lir").splitlines()[0]
    low = sf.lower(forest, tile_size=4)
    assert not low.pad  # padding never chosen for tiled walks
    assert "tile_lut" in low.lir.buffers and "tile_size=4" in sf.show(forest, "lir", tile_size=4)


def test_tile_steps_are_vector_code_without_categorical_splits():
    numeric = _seeded_forest(3, categorical=False)
    text = sf.show(numeric, "lir", tile_size=4, schedule="default")
    assert "packbits(" in text and "f32x4" in text and "i32x4" in text
    # The tile's thresholds and flags are one load each (consecutive elements).
    assert "= sparse_threshold[(%node" in text and " +: 4]" in text
    categorical = _seeded_forest(3, categorical=True)
    assert categorical.has_categorical()
    text = sf.show(categorical, "lir", tile_size=4, schedule="default")
    assert "packbits(" not in text and "x4" not in text


def test_lir_vector_types_are_checked():
    from silvanforge.ir import lir

    assert lir.vector_type("f32", 4) == "f32x4" and lir.vector_type("f32", 1) == "f32"
    assert lir.element_type("u8x8") == "u8" and lir.lanes_of("u8x8") == 8 and lir.lanes_of("i64") == 1
    v = lir.Var("v", "f32x4")
    ok = [lir.Assign(lir.Var("m", "i32"), lir.PackBits(lir.Cmp("<", v, lir.Const(0.0, "f32x4"), "i1x4")))]
    bad = [
        lir.Assign(lir.Var("m", "i32"), lir.PackBits(lir.Cmp("<", v, lir.Const(0.0, "f32x4")))),  # i1 result
        lir.Assign(lir.Var("m", "i32"), lir.PackBits(lir.IsNan(v))),  # i1 result of a vector isnan
        lir.Assign(lir.Var("w", "f32x4"), lir.Select(lir.Const(1, "i1"), v, v)),  # scalar condition
        lir.Assign(lir.Var("w", "f32x4"), lir.Cast(lir.Var("m", "i32"), "f32x4")),  # lanes change
        lir.Assign(lir.Var("w", "f32x4"), lir.Vector((lir.Const(1.0, "f32"), lir.Const(1, "i32")))),
    ]

    def module(body):
        fn = lir.Function("f", body, {"v": "f32x4", "w": "f32x4", "m": "i32"})
        return lir.Module([fn], {}, 1, 1, "f32", "f32")

    lir.verify(module(ok))
    for stmt in bad:
        with pytest.raises(IRVerificationError):
            lir.verify(module([stmt]))


@pytest.mark.parametrize("rep", ["array", "reorg"])
def test_other_representations_refuse_tiles(rep):
    with pytest.raises(sf.UnsupportedModelError, match="sparse"):
        sf.compile(_seeded_forest(1), rep=rep, tile_size=4)


def test_tiled_artifact_round_trip(tmp_path, rng):
    forest = _seeded_forest(5)
    cf = sf.compile(forest, tile_size=4)
    path = tmp_path / "tiled.sfc"
    cf.save(path)
    back = sf.load_compiled(path)
    assert back.tile_size == 4 and "tile_lut" in back.lir_module.buffers
    X = rows_for(forest, rng, 100)
    np.testing.assert_array_equal(back.predict(X), reference.predict(forest, X))
    assert "tiling tile_size=4" in back.show("hir")


def test_show_hir_prints_tiles():
    text = sf.show(_stump_forest(depth=2), "hir", tile_size=2)
    assert "tiling tile_size=2 shapes=2" in text and "tile 0 shape=" in text
    assert "tiling" not in sf.show(_stump_forest(depth=2), "hir")


# ----------------------------------------------------------------------------- library models
@pytest.fixture(scope="module", params=["xgboost", "lightgbm", "onnx"])
def quick_cases(request, tmp_path_factory):
    module = importlib.import_module(f"support_{request.param}")
    return module.cases(tmp_path_factory.mktemp(f"tiled_{request.param}"), quick=True)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_tiled_library_models(quick_cases, n):
    assert quick_cases
    for case in quick_cases:
        cf = sf.compile(case.path, tile_size=n)
        assert cf.rep == "sparse"
        assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)
        if case.expected_margin is not None:
            assert_close(cf.predict(case.X, output_margin=True, **case.predict_kwargs),
                         case.expected_margin, case, "margins")


# ----------------------------------------------------------------------------- command line
def test_cli_tile_size(tmp_path, capsys, monkeypatch):
    from silvanforge import cli
    from silvanforge_bench import bench

    monkeypatch.setenv("COLUMNS", "200")
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 4))
    y = X[:, 0] - X[:, 1]
    X[rng.random(X.shape) < 0.1] = np.nan
    booster = xgb.train({"max_depth": 4, "nthread": 1}, xgb.DMatrix(X, label=y), 5)
    model, art, rows, out = (tmp_path / name for name in ("m.json", "m.sfc", "X.npy", "y.npy"))
    booster.save_model(model)
    np.save(rows, X)

    def forge(*args):
        code = cli.main([str(a) for a in args])
        return code, *capsys.readouterr()

    code, text, _ = forge("compile", model, "--tile-size", 4, "-o", art)
    assert code == 0 and "tile size" in text
    code, _, _ = forge("predict", art, "-i", rows, "-o", out)
    assert code == 0
    want = booster.predict(xgb.DMatrix(X))
    np.testing.assert_allclose(np.load(out), want, rtol=1e-6, atol=1e-6)
    code, _, err = forge("predict", art, "-i", rows, "--tile-size", 2)
    assert code != 0 and "tile-size" in err
    code, text, _ = forge("show", model, "--level", "hir", "--tile-size", 3)
    assert code == 0 and "tiling tile_size=3" in text
    code, text, _ = forge("show", model, "--level", "lir", "--tile-size", 3)
    assert code == 0 and "tile_lut" in text
    code, _, err = forge("show", model, "--level", "lir", "--tile-size", 3, "--rep", "array")
    assert code != 0 and "sparse" in err
    report = bench.run_bench(model, [16], threads=1, repeat=1, min_time=0.0, peers=[], tile_size=4)
    assert report.tile_size == 4 and "tile size 4" in bench.describe(report)

"""Uniform and probability-based tiling (the Treebeard paper draft, sections 'Tiling' to 'In Memory
Representation of Tiled Trees'; the probability-based tiling draft): tile shapes, the look-up
table, tiled trees and their verifier, and LIR's vector types (test_tiling.py, beside this file,
compiles tiled walks)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import silvanforge as sf
from silvanforge.frontend import tiling
from silvanforge.errors import IRVerificationError
from silvanforge.ir.hir import Tree
from strategies import forests, seeded_forest, stump_forest

pytestmark = pytest.mark.core_alone  # needs no target and no shipped representation

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
    with pytest.raises(sf.InputError, match="tile_size"):
        tiling.check_tile_size(bad)


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
    # Greedy tiles (the probability-based tiling draft) from random visit counts: leaf counts at
    # random, parents the sums.
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
    forest = seeded_forest(11)
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
    from silvanforge.frontend.hir_passes import pad_trees

    assert all(t.tile_id is None for t in pad_trees(annotated).trees)


def test_short_tiles_are_padded_with_dummies():
    stump = stump_forest().trees[0]
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
    forest = stump_forest(depth=3)
    tiled = tiling.tile_forest(forest, 2)
    tiling.verify_tiled_forest(forest, tiled)
    tt = tiled.trees[0]
    tt.child_node[0, [0, 1]] = tt.child_node[0, [1, 0]]
    with pytest.raises(IRVerificationError, match="slot"):
        tiling.verify_tiled_forest(forest, tiled)


# ----------------------------------------------------------------------------- LIR vector types
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

"""The sparse representation (the Treebeard representations note, section 'Sparse Representation'):
child pointers, children stored side by side.

Every node of every tree sits in one set of flat arrays.  An internal node stores the index of
its left child; the right child is the next slot, so the child move is ``child[node] + c``.  A
leaf stores, in the same ``child`` slot, the position of its values in the shared leaves array,
so a leaf costs one entry and no space is wasted on incomplete trees.

Tiled (tile size ``n > 1``, the Treebeard paper draft, section 'Sparse Representation', and the
representations note, 'Vector (Tile Size > 1)'): a handle is a tile slot.
Slot ``s`` holds ``n`` thresholds, feature indices and flag bytes at ``s*n .. s*n + n - 1`` (so a
tile's fields load as vectors), its shape id and the slot of its first child; its ``n + 1``
children sit side by side.  A leaf is a leaf tile: feature ``-1`` in every lane, the ``child``
field holding the position of its values (leaves stay in the one tile array, so the leaf check
is the untiled one).

Widths: feature indices are stored in the layout's ``feature_dtype`` (int8 up to 127
features) and ``child`` holds *relative* offsets (first child slot minus the node's slot: a
breadth-first tree keeps them below its own size), in the narrowest integer type holding them.
Where the layout allows it (``inline_leaves``: one output per tree, leaf dtype = threshold dtype)
a leaf keeps its value in its threshold slot, so no leaf slot is stored (the child field of a
leaf is 0) and the walk ends with one load instead of two; otherwise a leaf's child field holds
the absolute position of its values in the leaves array.
"""

from __future__ import annotations

import numpy as np

from silvanforge import hookimpl
from silvanforge.errors import IRVerificationError
from silvanforge.rep import Bin, Builder, Cast, Cmp, RepBuffers, Representation

NAME = "sparse"


# The core's walks priced as they are: sparse is the default walk layout (benchmarks/suite.py).
WALK_COST_FACTOR = 1.0


def _buffers(layout) -> RepBuffers:
    inline = layout.inline_leaves
    # Leaves as fixed points (see silvanforge.rep): a leaf's step goes right, so its child
    # offset is -1.  A walk past its row's end (an inactive interleaved lane reading rows that
    # are not its own) may go left from a leaf, to the slot before it: slot 0 is a spare leaf
    # whose offset is 0, so such a walk never leaves the arrays, and its result is discarded.
    loops = inline and layout.leaf_self_loops
    trees = layout.trees
    sizes = np.array([len(t.feature) for t in trees], np.int64)
    chain = layout.chain_lanes if loops else 0
    # Tree t spans slots roots[t] .. roots[t] + sizes[t] - 1 (the last entry is the end): in
    # tree order, or chained (silvanforge.rep.Representation.chains) lane by lane, each lane's
    # trees then its sink.
    starts, sinks = _starts(sizes, int(loops), chain)
    total = int(sizes.sum()) + int(loops) + len(sinks)
    roots = np.append(starts, total).astype(np.int32)
    feature = np.empty(total, np.int32)
    threshold = np.empty(total, layout.threshold_dtype)
    flags = np.empty(total, np.uint8)
    child = np.empty(total, np.int64)
    if loops:
        feature[0], threshold[0], flags[0], child[0] = -1, 0, 0, 0
    # A sink is a split whose step stays put whatever the row: no compare with a NaN threshold
    # holds, so the step goes right, child + 1, to itself.
    feature[sinks], threshold[sinks], flags[sinks], child[sinks] = 0, np.nan, 0, -1
    # Every tree's nodes in one numbering (tree t's node n is offset[t] + n), so that the walk
    # below takes a level of every tree at once (a node at a time in Python took 0.65 s of a
    # 1000-tree 255-leaf model's compile).
    offset = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    def joined(name, shift=False):
        parts = [getattr(t, name) for t in trees]
        if not parts:
            return np.zeros(0, np.int64)
        if shift:  # child numbers into the joined numbering, leaves' -1 kept
            child = np.concatenate(parts).astype(np.int64)
            return np.where(child >= 0, child + np.repeat(offset, sizes), -1)
        return np.concatenate(parts)

    left, right, leaf_slot = joined("left", True), joined("right", True), joined("leaf_slot")
    node_feature, node_threshold, node_flags = joined("feature"), joined("threshold"), joined("flags")
    # Each node's slot (by the joined numbering); both children of a node get adjacent slots.
    slot_of = np.empty(len(left), np.int64)
    # A tree whose nodes a profile ordered (``Tree.tile_id`` at a tile size of one: ranks,
    # silvanforge.frontend.tiling.hot_first_order) puts the children of its node of rank k at pair k, so
    # the more visited child's children follow their parent's.
    ranked = [t for t, tree in enumerate(layout.forest.trees) if tree.tile_id is not None]
    for t in ranked:
        rank = layout.forest.trees[t].tile_id.astype(np.int64)
        inner = np.flatnonzero(trees[t].left >= 0)
        if not np.array_equal(np.sort(rank[inner]), np.arange(len(inner))):
            raise IRVerificationError(f"tree {t}: a node order that does not rank its internal nodes "
                                      f"0..{len(inner) - 1}")
        slot_of[offset[t]] = roots[t]
        slot_of[left[offset[t] + inner]] = roots[t] + 1 + 2 * rank[inner]
        slot_of[right[offset[t] + inner]] = roots[t] + 2 + 2 * rank[inner]
    # The others breadth first: a level of every tree at a time, each tree's nodes of the level
    # in slot order, each split's children the tree's next two free slots.
    owner = np.setdiff1d(np.arange(len(trees)), ranked)
    nodes, slots = offset[owner], roots[:-1][owner].astype(np.int64)
    free = roots[:-1].astype(np.int64) + 1  # each tree's next free slot
    while nodes.size:
        slot_of[nodes] = slots
        split = left[nodes] >= 0
        nodes, tree = nodes[split], owner[split]
        # A split's rank among its tree's splits of this level (they are grouped by tree).
        starts = np.flatnonzero(np.r_[True, tree[1:] != tree[:-1]]) if tree.size else np.zeros(0, np.int64)
        rank = np.arange(tree.size) - np.repeat(starts, np.diff(np.r_[starts, tree.size]))
        first = free[tree] + 2 * rank  # the split's left child
        free += 2 * np.bincount(tree, minlength=len(trees))
        nodes = np.stack([left[nodes], right[nodes]], axis=1).reshape(-1)
        slots = np.stack([first, first + 1], axis=1).reshape(-1)
        owner = np.repeat(tree, 2)
    feature[slot_of], threshold[slot_of], flags[slot_of] = node_feature, node_threshold, node_flags
    leaf = left < 0
    if inline:
        threshold[slot_of[leaf]] = layout.leaf_values[leaf_slot[leaf]]
        child[slot_of[leaf]] = -1 if loops else 0
    else:
        child[slot_of[leaf]] = leaf_slot[leaf]
    if chain:  # a leaf steps to its lane's next tree's root, the last tree's to the lane's sink
        tree = np.repeat(np.arange(len(trees)), sizes)[leaf]
        after = tree + chain
        to = np.where(after < len(trees), roots[np.minimum(after, len(trees) - 1)], sinks[tree % chain])
        child[slot_of[leaf]] = to - slot_of[leaf] - 1
    child[slot_of[~leaf]] = slot_of[left[~leaf]] - slot_of[~leaf]
    return RepBuffers(
        buffers={"sparse_roots": roots,
                 "sparse_feature": feature.astype(layout.feature_dtype),
                 "sparse_threshold": threshold, "sparse_flags": flags,
                 "sparse_child": _narrow(layout, child), "leaf_values": layout.leaf_values},
        info={"nodes": total, "leaf_self_loops": loops, **({"chains": chain} if chain else {}),
              **_widths_info(layout, feature, child)},
    )


def _starts(sizes: np.ndarray, first: int, chain: int) -> tuple[np.ndarray, np.ndarray]:
    """Each tree's first slot from slot ``first`` on, and the chains' sinks: in tree order
    (no sinks), or ``chain`` lanes' trees (j, j + chain, ...) lane by lane, each lane's sink
    after its last tree."""
    if not chain:
        return first + np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(np.int64), np.zeros(0, np.int64)
    starts, sinks, pos = np.empty(len(sizes), np.int64), [], first
    for j in range(min(chain, len(sizes))):
        lane = np.arange(j, len(sizes), chain)
        starts[lane] = pos + np.concatenate([[0], np.cumsum(sizes[lane])[:-1]])
        pos += int(sizes[lane].sum())
        sinks.append(pos)
        pos += 1
    return starts, np.array(sinks, np.int64)


def _narrow(layout, values: np.ndarray) -> np.ndarray:
    if len(values) == 0:
        return values.astype(np.int32)
    return values.astype(layout.index_dtype(int(values.min()), int(values.max())))


def _widths_info(layout, feature, child) -> dict:
    return {"widths": f"threshold {np.dtype(layout.threshold_dtype).name}, feature "
                      f"{np.dtype(layout.feature_dtype).name}, child {_narrow(layout, child).dtype.name}"
                      f"{', leaves inline' if layout.inline_leaves else ''}"}


def _tiled_buffers(layout) -> RepBuffers:
    n = layout.tile_size
    # Slots: per tree one for the root, then n + 1 per tile (its children).
    total = sum(1 + tt.num_tiles * (n + 1) for tt in layout.tiles.trees)
    feature = np.full(total * n, -1, np.int32)
    threshold = np.zeros(total * n, layout.threshold_dtype)
    flags = np.zeros(total * n, np.uint8)
    shape = np.zeros(total, np.int16)
    child = np.zeros(total, np.int64)
    roots = np.empty(len(layout.trees) + 1, np.int32)
    inline = layout.inline_leaves
    pos = 0
    lanes = np.arange(n)

    def leaf(slots, leaf_slots):
        if inline:  # the value in lane 0 of the leaf tile's thresholds
            threshold[slots * n] = layout.leaf_values[leaf_slots]
            child[slots] = 0
        else:
            child[slots] = leaf_slots

    for i, (t, tt) in enumerate(zip(layout.trees, layout.tiles.trees)):
        roots[i] = pos
        if tt.num_tiles == 0:  # a single leaf
            leaf(np.array([pos]), np.array([t.leaf_slot[tt.root_leaf]]))
            pos += 1
            continue
        slot_of = np.empty(tt.num_tiles, np.int64)
        slot_of[0] = pos
        pos += 1
        for k in range(tt.num_tiles):  # breadth first: a tile's slot is known before its turn
            s = slot_of[k]
            nodes = tt.nodes[k]
            real = nodes >= 0
            lane_at = s * n + lanes
            # Dummies compare x[0] < 0 (their outcome never matters); real nodes as encoded.
            feature[lane_at] = np.where(real, t.feature[nodes], 0)
            threshold[lane_at] = np.where(real, t.threshold[nodes], 0)
            flags[lane_at] = np.where(real, t.flags[nodes], 0)
            shape[s] = tt.shape[k]
            child[s] = pos - s
            kids = tt.child_tile[k]
            is_tile = kids >= 0
            slot_of[kids[is_tile]] = pos + np.flatnonzero(is_tile)
            leaf(pos + np.flatnonzero(~is_tile), t.leaf_slot[tt.child_node[k][~is_tile]])
            pos += n + 1
    roots[-1] = pos
    return RepBuffers(
        buffers={"sparse_roots": roots,
                 "sparse_feature": feature.astype(layout.feature_dtype),
                 "sparse_threshold": threshold, "sparse_flags": flags,
                 "sparse_shape": shape, "sparse_child": _narrow(layout, child),
                 "leaf_values": layout.leaf_values},
        info={"tiles": int(total), "tile_size": n, **_widths_info(layout, feature, child)},
    )


def _i64(e):
    return Builder.cast(e, "i64")


def _i32(e):
    return Builder.cast(e, "i32")


class SparseLayout(Representation):
    """Written against :mod:`silvanforge.rep`: the tile size and whether leaves are inline are
    this compile's (set by :meth:`buffers`), read as the walk's code is generated."""

    name = NAME
    tiles = True
    node_order = True
    chains = True

    walk_cost_factor = WALK_COST_FACTOR
    # leaf_value returns layout.leaf_values entries as laid out (inline or from the leaves
    # array), so the core evaluates linear leaves after its walks (silvanforge.lowering.linear_leaves).
    linear_leaves = True

    def buffers(self, forest, layout):
        self.n, self.inline, self.chained = layout.tile_size, layout.inline_leaves, bool(layout.chain_lanes)
        return _buffers(layout) if layout.tiles is None else _tiled_buffers(layout)

    def _lane(self, node, lane):
        """Element of a node field: the node itself untiled, lane ``lane`` of tile ``node`` tiled."""
        if self.n == 1:
            return node
        return Bin("+", Bin("*", node, Builder.const(self.n, "i64")), Builder.const(lane, "i64"))

    def root(self, b, tree):
        return _i64(b.load("sparse_roots", tree))

    def load_threshold(self, b, tree, node, lane=0):
        return b.load("sparse_threshold", self._lane(node, lane))

    def load_feature_index(self, b, tree, node, lane=0):
        return _i32(b.load("sparse_feature", self._lane(node, lane)))

    def load_split_flags(self, b, tree, node, lane=0):
        return b.load("sparse_flags", self._lane(node, lane))

    def load_tile_shape(self, b, tree, node):
        if self.n == 1:
            return Builder.const(0, "i32")
        return Cast(b.load("sparse_shape", node), "i32")

    def is_leaf(self, b, tree, node):
        feature = b.load("sparse_feature", self._lane(node, 0))
        return Cmp("<", feature, Builder.const(0, feature.type))

    def leaf_value(self, b, tree, node, slot):
        if self.inline:  # one output per tree: slot is always 0
            return Builder.cast(b.load("sparse_threshold", self._lane(node, 0)), b.buffers["leaf_values"].type)
        return b.load("leaf_values", Bin("+", _i32(b.load("sparse_child", node)), Cast(slot, "i32")))

    def child(self, b, tree, node, child):
        # Children are stored relative to their parent's slot.
        return Bin("+", node, _i64(Bin("+", _i32(b.load("sparse_child", node)), child)))

    def cache_trees(self, b, first_tree, num_trees):
        # The trees' nodes are one contiguous slice of every node array (n elements a tile tiled),
        # except where chained (a lane's trees side by side): nothing is prefetched then.
        if getattr(self, "chained", False):
            return []
        lo = b.load("sparse_roots", first_tree)
        hi = b.load("sparse_roots", Bin("+", first_tree, num_trees))
        n = self.n
        if n == 1:
            return [(name, lo, hi) for name in ("sparse_feature", "sparse_threshold", "sparse_flags", "sparse_child")]
        lanes = (Bin("*", lo, Builder.const(n, "i32")), Bin("*", hi, Builder.const(n, "i32")))
        return ([(name, *lanes) for name in ("sparse_feature", "sparse_threshold", "sparse_flags")]
                + [(name, lo, hi) for name in ("sparse_shape", "sparse_child")])


@hookimpl
def silvanforge_representation_types():
    return [SparseLayout]

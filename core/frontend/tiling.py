"""Uniform tiling of decision trees (the Treebeard paper draft, sections 'Tiling' to 'In Memory
Representation of Tiled Trees').

A *tile* is a connected group of internal nodes of one tree, evaluated together: every node's
predicate is computed, the outcomes are packed into an integer (node 0 of the tile is the most
significant bit, a true predicate goes left), and a look-up table indexed by the tile's *shape*
and that integer names the child slot to move to.  With tile size ``n``:

* a tile shape is a binary tree of ``n`` nodes; there are ``NTS(n)`` (Catalan) of them, numbered
  by :func:`tile_shapes`.  Nodes of a tile are numbered in level order, left to right within a
  level; the ``n + 1`` exits (edges leaving the tile) are the child slots, numbered left to
  right;
* :func:`shape_lut` is ``LUT[shape, outcome bits] -> child slot``;
* :func:`tile_tree` tiles a HIR tree uniformly: each tile grows from its root in level order
  (breadth first inside the subtree) until it holds ``n`` internal nodes or no internal node
  is left next to it.  A tile short of ``n`` nodes (all its exits lead to leaves) is padded with
  *dummy* nodes placed on an exit edge: both sides of a dummy lead to the leaf the edge led to,
  so the dummy's outcome never matters.  Every tile then has exactly ``n`` nodes.

Leaves are not part of tiles; a child slot names either another tile or a leaf.

Probability-based tiling, as its draft in the specification has it, grows each tile of a *skewed*
tree greedily towards the nodes most profiled rows reach (:func:`tile_tree_by_probability`); the
chosen tiling travels with the HIR as ``Tree.tile_id`` and :func:`tile_forest` builds the same
:class:`TiledForest` from it, so representations and walks take either kind unchanged.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from functools import lru_cache

import numpy as np

from silvanforge.errors import InputError, IRVerificationError
from silvanforge.ir import hir

# LUT sizes grow as NTS(n) * 2**n (1430 * 256 bytes at 8); larger tiles gain nothing on CPUs.
MAX_TILE_SIZE = 8

# A shape is a nested tuple (left, right), each side a shape or None (an exit).
Shape = tuple


def num_tile_shapes(n: int) -> int:
    """NTS(n) = sum_k NTS(k) NTS(n-k-1), NTS(0) = NTS(1) = 1 (the Catalan numbers)."""
    counts = [1]
    for m in range(1, n + 1):
        counts.append(sum(counts[k] * counts[m - 1 - k] for k in range(m)))
    return counts[n]


@lru_cache(maxsize=None)
def _shapes(n: int) -> tuple:
    if n == 0:
        return (None,)
    out = []
    for k in range(n):
        for left in _shapes(k):
            for right in _shapes(n - 1 - k):
                out.append((left, right))
    return tuple(out)


def tile_shapes(n: int) -> list[Shape]:
    """Every tile shape of ``n`` nodes; a shape's id is its position in this list."""
    check_tile_size(n)
    return list(_shapes(n))


@lru_cache(maxsize=None)
def shape_ids(n: int) -> dict:
    return {s: i for i, s in enumerate(_shapes(n))}


@dataclasses.dataclass(frozen=True)
class ShapeInfo:
    """One shape in level order: ``child[k, d]`` (d 0 = left, 1 = right) is the tile position of
    the child of position ``k``, or ``-1 - slot`` when that edge is the exit to child slot ``slot``."""

    child: np.ndarray  # int32 (n, 2)


def shape_info(shape: Shape) -> ShapeInfo:
    """Level-order positions and left-to-right exit slots of a shape."""
    # Equal subtrees may be one shared tuple, so positions follow the queue, not object identity.
    sides: list[list] = []  # per position: [left, right], each a position or None (an exit)
    queue = deque([(shape, 0)])
    count = 1
    while queue:
        s, k = queue.popleft()
        sides.append([None, None])
        for d, c in enumerate(s):
            if c is not None:
                sides[k][d] = count
                queue.append((c, count))
                count += 1
    child = np.zeros((len(sides), 2), np.int32)
    slot = 0

    def visit(k):  # exits numbered in depth-first, left-first order: left to right
        nonlocal slot
        for d in (0, 1):
            c = sides[k][d]
            if c is None:
                child[k, d] = -1 - slot
                slot += 1
            else:
                child[k, d] = c
                visit(c)

    visit(0)
    return ShapeInfo(child)


@lru_cache(maxsize=None)
def _shape_infos(n: int) -> tuple:
    return tuple(shape_info(s) for s in _shapes(n))


def shape_lut(n: int) -> np.ndarray:
    """``LUT[shape id, bits]`` (int8): the child slot a tile of that shape moves to when the
    predicate outcome of tile node ``k`` is bit ``n - 1 - k`` of ``bits`` (1 = true = left)."""
    return _lut(n).copy()


def lane_order_lut(n: int) -> np.ndarray:
    """The LUT indexed with the outcome of tile node ``k`` in bit ``k`` (node 0 the least
    significant bit): the order in which a vector comparison's lanes pack into an integer
    (x86 ``movmsk``).  ``lane_order_lut(n)[s, b] == shape_lut(n)[s, reverse_n_bits(b)]``."""
    bits = np.arange(2**n)
    reverse = np.zeros_like(bits)
    for k in range(n):
        reverse |= ((bits >> k) & 1) << (n - 1 - k)
    return np.ascontiguousarray(_lut(n)[:, reverse])


@lru_cache(maxsize=None)
def _lut(n: int) -> np.ndarray:
    check_tile_size(n)
    infos = _shape_infos(n)
    bits = np.arange(2**n)
    lut = np.empty((len(infos), 2**n), np.int8)
    for sid, info in enumerate(infos):
        # Walk every outcome at once: position per outcome until all have left the tile.
        pos = np.zeros(2**n, np.int64)
        slot = np.full(2**n, -1, np.int64)
        for _ in range(n):
            active = slot < 0
            if not active.any():
                break
            go_left = (bits >> (n - 1 - pos)) & 1
            nxt = info.child[pos, 1 - go_left]
            exits = active & (nxt < 0)
            slot[exits] = -1 - nxt[exits]
            moving = active & (nxt >= 0)
            pos[moving] = nxt[moving]
        lut[sid] = slot
    return lut


def check_tile_size(n) -> None:
    """Raise InputError unless ``n`` is a tile size this compiler supports (1 .. MAX_TILE_SIZE)."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or not 1 <= n <= MAX_TILE_SIZE:
        raise InputError(f"tile_size must be an integer from 1 to {MAX_TILE_SIZE}, got {n!r}")


# ----------------------------------------------------------------------------- tiled trees
@dataclasses.dataclass
class TiledTree:
    """One tree as a tree of tiles.  Tile 0 holds the root (absent when the root is a leaf).

    ``nodes[i, k]``: the HIR node at position ``k`` (level order) of tile ``i``, ``-1`` for a dummy;
    ``shape[i]``: its shape id; ``child_tile[i, s]``: the tile behind child slot ``s``, or ``-1``
    when the slot is a leaf, whose HIR node is ``child_node[i, s]`` (for a tile: its root node).
    """

    nodes: np.ndarray  # int32 (tiles, n)
    shape: np.ndarray  # int32 (tiles,)
    child_tile: np.ndarray  # int32 (tiles, n + 1)
    child_node: np.ndarray  # int32 (tiles, n + 1)
    root_leaf: int  # the HIR node of the root when the tree is a single leaf, else -1
    depth: int  # most tile steps from the root to a leaf
    min_depth: int  # fewest tile steps from the root to a leaf

    @property
    def num_tiles(self) -> int:
        return len(self.shape)


@dataclasses.dataclass
class TiledForest:
    tile_size: int
    trees: list[TiledTree]

    @property
    def num_tiles(self) -> int:
        return sum(t.num_tiles for t in self.trees)

    def depth(self) -> int:
        return max((t.depth for t in self.trees), default=0)

    def min_depth(self) -> int:
        return min((t.min_depth for t in self.trees), default=0)

    def lut(self) -> np.ndarray:
        return shape_lut(self.tile_size)


def _uniform_members(tree: hir.Tree, root: int, n: int) -> set[int]:
    """The internal nodes of a uniform tile from ``root``: level order inside its subtree."""
    left, right = tree.left, tree.right
    members: set[int] = set()
    queue = deque([root])
    while queue and len(members) < n:
        node = queue.popleft()
        members.add(node)
        for c in (int(left[node]), int(right[node])):
            if left[c] >= 0:
                queue.append(c)
    return members


def _grow(tree: hir.Tree, root: int, n: int, members: set[int]) -> tuple[Shape, list[int], list[int]]:
    """The tile of ``members`` (connected internal nodes under ``root``): its shape, its nodes
    in level order (-1 = dummy) and the HIR node behind each child slot, left to right."""
    left, right = tree.left, tree.right
    # The tile as a small mutable tree: entries [hir node or -1, left, right], where a side is
    # an entry index (inside the tile) or ("exit", hir node).
    entries: list[list] = []

    def build(node: int) -> int:
        e = len(entries)
        entries.append([node, None, None])
        for d, c in ((1, int(left[node])), (2, int(right[node]))):
            entries[e][d] = build(c) if c in members else ("exit", c)
        return e

    build(root)
    while len(entries) < n:  # pad: a dummy on the first exit in level order
        for e in _level_order(entries):
            d = next((d for d in (1, 2) if isinstance(entries[e][d], tuple)), None)
            if d is not None:
                target = entries[e][d]
                entries[e][d] = len(entries)
                entries.append([-1, target, target])
                break
    order = _level_order(entries)

    def shape_of(e: int) -> Shape:
        return tuple(None if isinstance(entries[e][d], tuple) else shape_of(entries[e][d]) for d in (1, 2))

    slots: list[int] = []

    def exits(e: int) -> None:
        for d in (1, 2):
            side = entries[e][d]
            if isinstance(side, tuple):
                slots.append(side[1])
            else:
                exits(side)

    exits(0)
    return shape_of(0), [entries[e][0] for e in order], slots


def _level_order(entries: list[list]) -> list[int]:
    order, queue = [], deque([0])
    while queue:
        e = queue.popleft()
        order.append(e)
        queue.extend(entries[e][d] for d in (1, 2) if not isinstance(entries[e][d], tuple))
    return order


def tile_tree(tree: hir.Tree, n: int) -> TiledTree:
    """Uniform tiling of one tree with tile size ``n`` (see the module docstring)."""
    check_tile_size(n)
    return _tile_tree_with(tree, n, lambda root: _uniform_members(tree, root, n))


def _tile_tree_with(tree: hir.Tree, n: int, members_of) -> TiledTree:
    """The tree of tiles whose tile rooted at internal node ``r`` holds ``members_of(r)``."""
    ids = shape_ids(n)
    if tree.left[0] < 0:
        empty = np.zeros((0, n), np.int32)
        return TiledTree(empty, np.zeros(0, np.int32), np.zeros((0, n + 1), np.int32),
                         np.zeros((0, n + 1), np.int32), root_leaf=0, depth=0, min_depth=0)
    nodes, shapes, slot_nodes = [], [], []
    queue = deque([0])
    tile_of: dict[int, int] = {0: 0}
    while queue:
        root = queue.popleft()
        shape, members, slots = _grow(tree, root, n, members_of(root))
        nodes.append(members)
        shapes.append(ids[shape])
        slot_nodes.append(slots)
        for c in slots:
            if tree.left[c] >= 0 and c not in tile_of:
                tile_of[c] = len(tile_of)
                queue.append(c)
    child_node = np.array(slot_nodes, np.int32)
    is_tile = tree.left[child_node] >= 0
    child_tile = np.where(is_tile, np.vectorize(lambda c: tile_of.get(int(c), -1), otypes=[np.int32])(child_node), -1)
    # Tile depths: tiles are numbered breadth first, so children come after parents.
    num = len(shapes)
    deepest = np.zeros(num, np.int64)
    shallowest = np.zeros(num, np.int64)
    for i in range(num - 1, -1, -1):
        sub = child_tile[i][child_tile[i] >= 0]
        deepest[i] = 1 + (deepest[sub].max() if len(sub) else 0)
        shallowest[i] = 1 + (shallowest[sub].min() if len(sub) == n + 1 else 0)
    return TiledTree(np.array(nodes, np.int32), np.array(shapes, np.int32), child_tile.astype(np.int32),
                     child_node, root_leaf=-1, depth=int(deepest[0]), min_depth=int(shallowest[0]))


def tile_forest(forest: hir.Forest, n: int) -> TiledForest:
    """The tiling of every tree: the one its ``tile_id`` names when a HIR pass chose one
    (:func:`tile_by_ids`, checked by the verifier), else uniform."""
    check_tile_size(n)
    trees = []
    for i, t in enumerate(forest.trees):
        if t.tile_id is None:
            trees.append(tile_tree(t, n))
            continue
        tiled = tile_by_ids(t, n, t.tile_id)
        try:
            verify_tiled_tree(t, tiled, n)
        except IRVerificationError as exc:
            raise IRVerificationError(f"tree {i}: its tile ids are no valid tiling for tile size {n} "
                                      f"({exc})") from None
        trees.append(tiled)
    return TiledForest(n, trees)


def tile_by_ids(tree: hir.Tree, n: int, tile_id: np.ndarray) -> TiledTree:
    """The tree of tiles a tile id per node describes (ids of internal nodes; leaves ignored).
    Raises IRVerificationError when a tile holds more than ``n`` nodes."""
    check_tile_size(n)
    tile_id = np.asarray(tile_id)
    internal = tree.left >= 0
    ids, counts = np.unique(tile_id[internal], return_counts=True)
    if len(counts) and counts.max() > n:
        raise IRVerificationError(f"tiling verification failed: tile {ids[counts.argmax()]} holds "
                                  f"{counts.max()} nodes, more than the tile size {n}")
    groups: dict[int, set[int]] = {}
    for node in np.flatnonzero(internal).tolist():
        groups.setdefault(int(tile_id[node]), set()).add(node)
    return _tile_tree_with(tree, n, lambda root: groups[int(tile_id[root])])


def tile_ids(tiled: TiledTree, num_nodes: int) -> np.ndarray:
    """The tile id of every node of a tiled tree (-1 on leaves): what ``Tree.tile_id`` holds."""
    out = np.full(num_nodes, -1, np.int32)
    for i in range(tiled.num_tiles):
        real = tiled.nodes[i][tiled.nodes[i] >= 0]
        out[real] = i
    return out


# ----------------------------------------------------------------------------- probability-based
# Only skewed trees (is_skewed, ALPHA and BETA) are tiled by probability: others keep uniform
# tiles, so the number of distinct tile shapes, and with it the LUT, stays small.  A tree is
# *skewed* when a fraction ALPHA of its leaves covers a fraction BETA of the profiled rows; the
# profile (:mod:`silvanforge.frontend.profiling`) counts the rows, tiling owns the rule.
ALPHA = 0.05
BETA = 0.9


def leaves_covering(leaf_hits: np.ndarray, beta: float) -> int:
    """The fewest leaves (most visited first) that together take at least ``beta`` of the rows."""
    total = int(leaf_hits.sum())
    if total == 0:
        return 0
    cum = np.cumsum(np.sort(leaf_hits)[::-1])
    return int(np.argmax(cum >= beta * total)) + 1


def is_skewed(tree: hir.Tree, hits: np.ndarray, alpha: float, beta: float) -> bool:
    """The probability-based tiling draft's skew test: a fraction ``alpha`` of the leaves covers a
    fraction ``beta`` of the profiled rows.  With few leaves ``alpha * leaves`` is below one; one
    leaf is then allowed, so a small tree is skewed when a single leaf takes ``beta`` of the rows.
    Trees that are a single leaf, or that no row reached, are not skewed."""
    leaves = np.asarray(hits)[tree.left < 0]
    if len(leaves) < 2 or leaves.sum() == 0:
        return False
    return leaves_covering(leaves, beta) <= max(1.0, alpha * len(leaves))


def greedy_members(tree: hir.Tree, root: int, n: int, weight: np.ndarray) -> set[int]:
    """The probability-based tiling draft's greedy tile from ``root``: add the heaviest internal
    node on an edge leaving the tile until it holds ``n`` nodes or no internal node is next to it.
    Ties go to the node that joined the frontier first (level order), so unvisited parts tile as
    uniform tiles do."""
    left, right = tree.left, tree.right
    members = {root}
    frontier = [int(c) for c in (left[root], right[root]) if left[c] >= 0]
    while frontier and len(members) < n:
        best = max(range(len(frontier)), key=lambda k: (weight[frontier[k]], -k))
        node = frontier.pop(best)
        members.add(node)
        frontier += [int(c) for c in (left[node], right[node]) if left[c] >= 0]
    return members


def tile_tree_by_probability(tree: hir.Tree, n: int, hits: np.ndarray) -> TiledTree:
    """Probability-based tiling of one tree (the probability-based tiling draft, its greedy
    algorithm): ``hits[v]`` is how many profiled rows reached node ``v`` (proportional to its
    probability ``p_v``)."""
    check_tile_size(n)
    weight = np.asarray(hits, dtype=np.float64)
    return _tile_tree_with(tree, n, lambda root: greedy_members(tree, root, n, weight))


def probability_tile_ids(forest: hir.Forest, hits: list[np.ndarray], n: int,
                         alpha: float = ALPHA, beta: float = BETA) -> list[np.ndarray | None]:
    """Per tree: tile ids of the probability-based tiling for skewed trees (``hits`` per node,
    from a profile), ``None`` (uniform tiling) for the others."""
    out: list[np.ndarray | None] = []
    for t, h in zip(forest.trees, hits):
        if is_skewed(t, h, alpha, beta):
            out.append(tile_ids(tile_tree_by_probability(t, n, h), t.num_nodes))
        else:
            out.append(None)
    return out


def hot_first_order(tree: hir.Tree, hits: np.ndarray) -> np.ndarray:
    """Tile ids of a tile size of one, where every internal node is a tile of its own: the
    node's rank in a depth-first walk of the tree that enters the more visited child first
    (``hits`` per node; ties go left), -1 on leaves.

    A layout placing nodes by these ranks (the sparse representation's children of the node of
    rank k at pair k) puts a node's more visited child's children right after its own, so a row
    on its likely path reads the next bytes of each array rather than another cache line."""
    internal = tree.left >= 0
    if not internal[0]:
        return np.full(tree.num_nodes, -1, np.int32)
    depth = tree.node_depths()
    levels = [np.flatnonzero(internal & (depth == d)) for d in range(int(depth.max()) + 1)]
    return _hot_first_ranks(tree.left, tree.right, levels, np.asarray(hits))


def _hot_first_ranks(left, right, levels: list[np.ndarray], hits: np.ndarray) -> np.ndarray:
    """:func:`hot_first_order` of the trees whose internal nodes are ``levels`` (by depth):
    one tree's, or every tree's in one numbering (each root's rank is 0)."""
    internal = left >= 0
    inside = internal.astype(np.int64)  # internal nodes in each node's subtree
    for nodes in reversed(levels):
        inside[nodes] += inside[left[nodes]] + inside[right[nodes]]
    rank = np.zeros(len(left), np.int64)
    for nodes in levels:  # a parent's rank is known before its children's
        right_first = hits[right[nodes]] > hits[left[nodes]]
        first = np.where(right_first, right[nodes], left[nodes])
        second = np.where(right_first, left[nodes], right[nodes])
        rank[first] = rank[nodes] + 1
        rank[second] = rank[nodes] + 1 + inside[first]
    return np.where(internal, rank, -1).astype(np.int32)


def probability_order_ids(forest: hir.Forest, hits: list[np.ndarray]) -> list[np.ndarray | None]:
    """:func:`hot_first_order` of every tree but single leaves (``None``)."""
    return [hot_first_order(t, h) if t.left[0] >= 0 else None for t, h in zip(forest.trees, hits)]


def cover_order_ids(forest: hir.Forest) -> list[np.ndarray | None] | None:
    """:func:`probability_order_ids` of the model's own covers (how much of the training data
    reached each node, ``Tree.cover``), or None where a tree with splits has none: a model file
    records where its training rows went, the profile a user has not taken."""
    covers = [t.cover for t in forest.trees]
    if any(c is None and t.left[0] >= 0 for c, t in zip(covers, forest.trees)):
        return None
    if not forest.trees:
        return None
    # A tree whose covers tell nothing (not finite, no rows at the root, or no two children
    # apart: a converter's zeros) keeps breadth first: ties would make a fixed left-first order.
    # Every tree at once, a level of all trees a step (a tree at a time: seconds of 100,000).
    offset, left, right, levels = hir.level_order(forest)
    starts = offset[:-1]
    cover = np.concatenate([np.zeros(len(t.left)) if c is None else np.asarray(c) for t, c in zip(forest.trees, covers)])
    internal = left >= 0
    inner = np.flatnonzero(internal)
    tree_of = np.repeat(np.arange(len(starts)), np.diff(offset))
    differ = np.bincount(tree_of[inner], weights=cover[left[inner]] != cover[right[inner]], minlength=len(starts)) > 0
    telling = internal[starts] & np.logical_and.reduceat(np.isfinite(cover), starts) & (cover[starts] > 0) & differ
    if not telling.any():
        return None
    ranks = _hot_first_ranks(left, right, [nodes[internal[nodes]] for nodes in levels], cover)
    bounds = offset.tolist()
    return [ranks[bounds[k]:bounds[k + 1]].copy() if telling[k] else None for k in range(len(starts))]


def with_tile_ids(forest: hir.Forest, ids: list[np.ndarray | None]) -> hir.Forest:
    """A copy of the forest whose trees carry ``ids`` (``None``: uniform tiling); arrays are
    shared, trees are new objects."""
    if len(ids) != forest.num_trees:
        raise IRVerificationError(f"{len(ids)} tilings for {forest.num_trees} trees")
    trees = [dataclasses.replace(t, tile_id=None if i is None else np.asarray(i, np.int32))
             for t, i in zip(forest.trees, ids)]
    return dataclasses.replace(forest, trees=trees)


# ----------------------------------------------------------------------------- verifier
def verify_tiled_tree(tree: hir.Tree, tiled: TiledTree, n: int) -> None:
    """Check that ``tiled`` is a valid uniform tiling of ``tree``: every internal node in exactly
    one tile, tiles connected and shaped as their shape id says, dummies only where the edge
    they sit on leads to the same child both ways, slots leading where the tree's edges lead,
    and tiles short of real nodes only where no internal node is next to them (maximal)."""

    def fail(msg):
        raise IRVerificationError(f"tiling verification failed: {msg}")

    internal = np.flatnonzero(tree.left >= 0)
    if len(internal) == 0:
        if tiled.num_tiles or tiled.root_leaf != 0:
            fail("a single-leaf tree has tiles")
        return
    if tiled.nodes.shape != (tiled.num_tiles, n) or tiled.child_node.shape != (tiled.num_tiles, n + 1):
        fail(f"arrays do not have {n} nodes and {n + 1} slots per tile")
    real = tiled.nodes[tiled.nodes >= 0]
    if sorted(real.tolist()) != internal.tolist():
        fail("internal nodes are not partitioned among the tiles")
    if tiled.nodes[0, 0] != 0:
        fail("tile 0 does not start at the root")
    shapes = _shape_infos(n)
    roots = {int(tiled.nodes[i, 0]): i for i in range(tiled.num_tiles)}
    for i in range(tiled.num_tiles):
        if not 0 <= tiled.shape[i] < len(shapes):
            fail(f"tile {i}: shape id {tiled.shape[i]} out of range")
        info = shapes[int(tiled.shape[i])]
        members = tiled.nodes[i]
        if members[0] < 0:
            fail(f"tile {i}: its root is a dummy")
        # What each position stands for: a real node, or a dummy standing on an edge to `target`.
        target = {}
        for k in range(n):
            node = int(members[k])
            for d in (0, 1):
                c = int(info.child[k, d])
                want = target[k] if node < 0 else int((tree.left if d == 0 else tree.right)[node])
                if c < 0:
                    slot = -1 - c
                    if tiled.child_node[i, slot] != want:
                        fail(f"tile {i}: slot {slot} leads to {tiled.child_node[i, slot]}, the edge to {want}")
                    if tree.left[want] >= 0:
                        if roots.get(want) != tiled.child_tile[i, slot]:
                            fail(f"tile {i}: slot {slot} does not name the tile rooted at {want}")
                    elif tiled.child_tile[i, slot] != -1:
                        fail(f"tile {i}: slot {slot} leads to leaf {want} but names a tile")
                elif members[c] < 0:
                    target[c] = want  # a dummy on this edge: both its sides lead to `want`
                elif members[c] != want:
                    fail(f"tile {i}: position {c} holds node {members[c]}, not the child {want}")
        if (members < 0).any():
            if any(tree.left[int(c)] >= 0 for c in tiled.child_node[i]):
                fail(f"tile {i} is padded although an internal node is next to it (not maximal)")
        for k in range(n):
            if members[k] < 0 and tree.left[target[k]] >= 0:
                fail(f"tile {i}: a dummy stands before internal node {target[k]}")


def verify_tiled_forest(forest: hir.Forest, tiled: TiledForest) -> None:
    if len(tiled.trees) != forest.num_trees:
        fail = f"{len(tiled.trees)} tiled trees for {forest.num_trees} trees"
        raise IRVerificationError(f"tiling verification failed: {fail}")
    for t, tt in zip(forest.trees, tiled.trees):
        verify_tiled_tree(t, tt, tiled.tile_size)


def format_tiled_forest(tiled: TiledForest, max_trees: int | None = 3) -> str:
    """Tiles per tree (``forge show --level hir --tile-size N``)."""
    n = tiled.tile_size
    lines = [f"tiling tile_size={n} shapes={num_tile_shapes(n)} tiles={tiled.num_tiles} "
             f"tile_depth={tiled.depth()} (shallowest leaf at {tiled.min_depth()} tile steps)"]
    shown = tiled.trees if max_trees is None else tiled.trees[:max_trees]
    for ti, t in enumerate(shown):
        lines.append(f"  tree {ti} tiles={t.num_tiles} tile_depth={t.depth}")
        if t.root_leaf >= 0:
            lines.append(f"    leaf %{t.root_leaf}")
        for i in range(t.num_tiles):
            nodes = ", ".join("dummy" if v < 0 else f"%{v}" for v in t.nodes[i])
            slots = ", ".join(f"tile {c}" if c >= 0 else f"leaf %{v}"
                              for c, v in zip(t.child_tile[i], t.child_node[i]))
            lines.append(f"    tile {i} shape={t.shape[i]} nodes=[{nodes}] children=[{slots}]")
    if max_trees is not None and len(tiled.trees) > max_trees:
        lines.append(f"  ... {len(tiled.trees) - max_trees} more trees")
    return "\n".join(lines)


def format_hir(forest: hir.Forest, tile_size: int = 1, max_trees: int | None = 3) -> str:
    """The HIR as ``forge show --level hir`` prints it, with the tiles when ``tile_size > 1``."""
    text = hir.format_forest(forest, max_trees=max_trees)
    if tile_size > 1:
        text += "\n" + format_tiled_forest(tile_forest(forest, tile_size), max_trees=max_trees)
        guided = sum(t.tile_id is not None for t in forest.trees)
        if guided:
            text += f"\n  ({guided} of {forest.num_trees} trees tiled by probability from a profile)"
    return text

"""A forest's node arrays joined: every tree's field in one array, tree ``k``'s node ``n`` at
``offsets(forest)[k] + n`` (the numbering of :func:`silvanforge.ir.hir.level_order`).

Passes that ask a question of every node (a layout, a fact a choice reads) take a few NumPy
steps over these instead of a loop a tree: on a 100,000-tree model each step a tree costs a
few microseconds, seconds in all, and several passes of a compile ask.  Each array is built
once a compile and forest (:mod:`silvanforge.plan.memo`) and is read-only: slices of it (a
tree's part, :func:`per_tree`) are views.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from silvanforge.ir import hir
from silvanforge.plan.memo import memoised

__all__ = ["offsets", "joined", "node_depths", "tree_depths", "per_tree"]

# The fields a tree holds one entry a node of (``leaf_value`` is one row a node).
FIELDS = ("left", "right", "feature", "threshold", "op", "default_left", "zero_missing", "leaf_value")


def offsets(forest: hir.Forest) -> np.ndarray:
    """Where each tree's nodes start in the joined numbering, and the node count last
    (``trees + 1`` entries, int64)."""
    def compute():
        sizes = np.fromiter(map(len, map(attrgetter("left"), forest.trees)), np.int64, len(forest.trees))
        return _frozen(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    return memoised(forest, "joined offsets", compute)


def joined(forest: hir.Forest, field: str) -> np.ndarray:
    """Every tree's ``field`` (one of :data:`FIELDS`) in one array, in its own dtype (child
    indices stay each tree's own numbering)."""
    if field not in FIELDS:
        raise ValueError(f"no joined field {field!r}")

    def compute():
        parts = list(map(attrgetter(field), forest.trees))
        if not parts:
            empty = {"threshold": np.float64, "default_left": np.bool_, "zero_missing": np.bool_,
                     "op": np.uint8}.get(field, np.int32)
            return _frozen(np.zeros((0, 1) if field == "leaf_value" else 0, empty))
        return _frozen(np.concatenate(parts))
    return memoised(forest, ("joined", field), compute)


def node_depths(forest: hir.Forest) -> np.ndarray:
    """The depth of every node (root 0) in the joined numbering, level by level over all trees."""
    def compute():
        _, _, _, levels = hir.level_order(forest)
        depth = np.zeros(int(offsets(forest)[-1]), np.int64)
        for level, nodes in enumerate(levels):
            depth[nodes] = level
        return _frozen(depth)
    return memoised(forest, "joined node depths", compute)


def tree_depths(forest: hir.Forest) -> np.ndarray:
    """Each tree's depth (edges on its longest root-to-leaf path)."""
    def compute():
        if not forest.trees:
            return _frozen(np.zeros(0, np.int64))
        return _frozen(np.maximum.reduceat(node_depths(forest), offsets(forest)[:-1]))
    return memoised(forest, "joined tree depths", compute)


def per_tree(forest: hir.Forest, values: np.ndarray) -> list[np.ndarray]:
    """``values`` (one entry a node, joined numbering) cut into each tree's part: views."""
    bounds = offsets(forest).tolist()
    return [values[a:z] for a, z in zip(bounds[:-1], bounds[1:])]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a

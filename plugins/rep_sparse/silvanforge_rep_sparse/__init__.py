"""The sparse representation (seed 002): child pointers, children stored side by side.

Every node of every tree sits in one set of flat arrays.  An internal node stores the index of
its left child; the right child is the next slot, so the child move is ``child[node] + c``.  A
leaf stores, in the same ``child`` slot, the position of its values in the shared leaves array,
so a leaf costs one entry and no space is wasted on incomplete trees.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from silvanforge import hookimpl
from silvanforge.ir.lir import Bin, Builder, Cast, Cmp
from silvanforge.lowering import RepBuffers

NAME = "sparse"


@hookimpl
def silvanforge_representations():
    return [NAME]


@hookimpl
def silvanforge_rep_buffers(rep, forest, layout):
    if rep != NAME:
        return None
    total = sum(len(t.feature) for t in layout.trees)
    feature = np.empty(total, np.int32)
    threshold = np.empty(total, layout.threshold_dtype)
    flags = np.empty(total, np.uint8)
    child = np.empty(total, np.int32)
    roots = np.empty(len(layout.trees) + 1, np.int32)  # + the end, so tree t spans roots[t:t+2]
    pos = 0
    for i, t in enumerate(layout.trees):
        # Breadth-first, giving both children of a node adjacent slots.
        roots[i] = pos
        slot_of = {0: pos}
        pos += 1
        queue = deque([0])
        while queue:
            node = queue.popleft()
            s = slot_of[node]
            feature[s], threshold[s], flags[s] = t.feature[node], t.threshold[node], t.flags[node]
            if t.left[node] < 0:
                child[s] = t.leaf_slot[node]
                continue
            child[s] = pos
            slot_of[int(t.left[node])], slot_of[int(t.right[node])] = pos, pos + 1
            pos += 2
            queue.extend((int(t.left[node]), int(t.right[node])))
    roots[-1] = pos
    return RepBuffers(
        buffers={"sparse_roots": roots, "sparse_feature": feature, "sparse_threshold": threshold,
                 "sparse_flags": flags, "sparse_child": child, "leaf_values": layout.leaf_values},
        info={"nodes": total},
    )


def _i64(e):
    return Builder.cast(e, "i64")


@hookimpl
def silvanforge_rep_root(rep, b, tree):
    return None if rep != NAME else _i64(b.load("sparse_roots", tree))


@hookimpl
def silvanforge_rep_load_threshold(rep, b, tree, node):
    return None if rep != NAME else b.load("sparse_threshold", node)


@hookimpl
def silvanforge_rep_load_feature_index(rep, b, tree, node):
    return None if rep != NAME else b.load("sparse_feature", node)


@hookimpl
def silvanforge_rep_load_split_flags(rep, b, tree, node):
    return None if rep != NAME else b.load("sparse_flags", node)


@hookimpl
def silvanforge_rep_load_tile_shape(rep, b, tree, node):
    return None if rep != NAME else Builder.const(0, "i32")


@hookimpl
def silvanforge_rep_is_leaf(rep, b, tree, node):
    if rep != NAME:
        return None
    return Cmp("<", b.load("sparse_feature", node), Builder.const(0, "i32"))


@hookimpl
def silvanforge_rep_leaf_value(rep, b, tree, node, slot):
    if rep != NAME:
        return None
    return b.load("leaf_values", Bin("+", b.load("sparse_child", node), Cast(slot, "i32")))


@hookimpl
def silvanforge_rep_child(rep, b, tree, node, child):
    if rep != NAME:
        return None
    return _i64(Bin("+", b.load("sparse_child", node), child))


@hookimpl
def silvanforge_rep_cache_trees(rep, b, first_tree, num_trees):
    if rep != NAME:
        return None
    # The trees' nodes are one contiguous slice of every node array.
    lo = b.load("sparse_roots", first_tree)
    hi = b.load("sparse_roots", Bin("+", first_tree, num_trees))
    return [(name, lo, hi) for name in ("sparse_feature", "sparse_threshold", "sparse_flags", "sparse_child")]

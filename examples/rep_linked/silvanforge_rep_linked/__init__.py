"""``linked``: an example representation written against the public contract only
(:mod:`silvanforge.rep`), as a third party would; docs/writing-a-representation.md walks
through it.

Every node of the forest gets one slot in flat arrays (threshold, feature field, flags, the
global slots of its two children, its leaf slot), trees one after another; a node handle is its
slot.  Simple and complete (categorical and zero-as-missing splits, several outputs a tree,
every schedule), but a walk step loads a child link the sparse representation does not, so it
is never the default: only ``rep="linked"`` takes it.
"""

from __future__ import annotations

import numpy as np

from silvanforge import hookimpl
from silvanforge.rep import Bin, Builder, Cast, Cmp, RepBuffers, Representation, Select


class Linked(Representation):
    name = "linked"

    def buffers(self, forest, layout):
        sizes = [len(t.left) for t in layout.trees]
        start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)  # each tree's first slot
        left, right = [], []
        for t, first in zip(layout.trees, start):
            inner = t.left >= 0
            # Children are tree-local in the layout: make them global slots (-1 stays at leaves).
            left.append(np.where(inner, t.left + first, -1))
            right.append(np.where(inner, t.right + first, -1))
        total = int(start[-1])
        index = layout.index_dtype(-1, max(total - 1, 0))  # the narrowest type the slots fit
        return RepBuffers(buffers={
            "linked_root": start[:-1].astype(np.int32),
            "linked_threshold": np.concatenate([t.threshold for t in layout.trees]).astype(layout.threshold_dtype),
            "linked_feature": np.concatenate([t.feature for t in layout.trees]).astype(layout.feature_dtype),
            "linked_flags": np.concatenate([t.flags for t in layout.trees]).astype(np.uint8),
            "linked_left": np.concatenate(left).astype(index),
            "linked_right": np.concatenate(right).astype(index),
            "linked_leaf": np.concatenate([t.leaf_slot for t in layout.trees]).astype(np.int32),
            "leaf_values": layout.leaf_values,
        }, info={"slots": total})

    def root(self, b, tree):
        return Builder.cast(b.load("linked_root", tree), "i64")

    def load_threshold(self, b, tree, node, lane=0):
        return b.load("linked_threshold", node)

    def load_feature_index(self, b, tree, node, lane=0):
        return b.load("linked_feature", node)

    def load_split_flags(self, b, tree, node, lane=0):
        return b.load("linked_flags", node)

    def is_leaf(self, b, tree, node):
        left = b.load("linked_left", node)
        return Cmp("<", left, Builder.const(0, left.type))

    def leaf_value(self, b, tree, node, slot):
        return b.load("leaf_values", Bin("+", b.load("linked_leaf", node), Cast(slot, "i32")))

    def child(self, b, tree, node, child):
        goes_left = Cmp("==", child, Builder.const(0, "i32"))
        return Builder.cast(Select(goes_left, b.load("linked_left", node), b.load("linked_right", node)), "i64")

    def cache_trees(self, b, first_tree, num_trees):
        lo = b.load("linked_root", first_tree)
        # The slot after the range: the next tree's root, or the end for the last tree.
        hi = Select(Cmp("<", Bin("+", first_tree, num_trees), Builder.const(len(b.buffers["linked_root"].data), "i32")),
                    b.load("linked_root", Bin("+", first_tree, num_trees)),
                    Builder.const(len(b.buffers["linked_left"].data), "i32"))
        return [(name, lo, hi) for name in ("linked_threshold", "linked_feature", "linked_flags",
                                            "linked_left", "linked_right")]


@hookimpl
def silvanforge_representation_types():
    return [Linked]

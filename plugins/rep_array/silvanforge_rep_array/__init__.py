"""The array representation (the Treebeard paper draft and its representations note, section
'Array Based Representation'): each tree is a complete binary tree in an array.

Children are implicit: the children of local node ``n`` are ``2n + 1`` and ``2n + 2``, so no
child pointer is stored or loaded.  Slots under a leaf are never visited and hold filler.  The
price is space: a tree of depth ``d`` takes ``2**(d+1) - 1`` slots however few nodes it has,
so deep unbalanced trees (LightGBM) belong in the sparse representation.  With one output per
tree (``layout.inline_leaves``) a leaf keeps its value in its threshold slot and no leaf-slot
array is stored.  Leaves cannot loop back to themselves (children are implicit), so this
representation ignores ``layout.leaf_self_loops`` and its walks keep their leaf checks.
"""

from __future__ import annotations

import numpy as np

from silvanforge import UnsupportedModelError, hookimpl
from silvanforge.rep import Bin, Builder, Cast, FieldArrays, RepBuffers

NAME = "array"
# Refuse layouts beyond this many slots (about 1.5 GB of node data): use sparse instead.
MAX_SLOTS = 2**27


def array_slots(layout) -> int:
    return sum(2 ** (t.depth + 1) - 1 for t in layout.trees)


# The array layout walks like sparse with more padding for incomplete trees: the chooser
# preferred sparse over it before costs (benchmarks/suite.py), kept as 10% more a row; tuning
# measured it at 1.24-1.51x the sparse layout's for 16-row calls and 0.8-1.24x for one row
# (relative to each one's estimate, benchmarks/cost_model_check.py): 20%.
WALK_COST_FACTOR = 1.2


class ArrayLayout(FieldArrays):
    """Written against :mod:`silvanforge.rep` (the class contract)."""

    name = NAME
    prefix = NAME  # array_threshold, array_feature, array_flags: FieldArrays loads them

    walk_cost_factor = WALK_COST_FACTOR
    # leaf_value returns layout.leaf_values entries as laid out (inline or from the leaves
    # array), so the core evaluates linear leaves after its walks (silvanforge.lowering.linear_leaves).
    linear_leaves = True

    def buffers(self, forest, layout):
        total = array_slots(layout)
        if total > MAX_SLOTS:
            raise UnsupportedModelError(
                f"the array representation needs {total} node slots for trees up to depth "
                f"{max(t.depth for t in layout.trees)}; use the sparse representation (--rep sparse)"
            )
        feature = np.full(total, -1, np.int32)
        threshold = np.zeros(total, layout.threshold_dtype)
        flags = np.zeros(total, np.uint8)
        leaf_slot = np.zeros(total, np.int32)
        inline = layout.inline_leaves
        offsets = np.empty(len(layout.trees) + 1, np.int32)  # + the end: tree t spans offsets[t:t+2]
        pos = 0
        for i, t in enumerate(layout.trees):
            offsets[i] = pos
            stack = [(0, 0)]  # (node, local array index)
            while stack:
                node, local = stack.pop()
                s = pos + local
                feature[s], threshold[s], flags[s] = t.feature[node], t.threshold[node], t.flags[node]
                if t.left[node] < 0:
                    if inline:  # the leaf's value in its threshold slot: one load to end a walk
                        threshold[s] = layout.leaf_values[t.leaf_slot[node]]
                    leaf_slot[s] = t.leaf_slot[node]
                else:
                    stack += [(int(t.left[node]), 2 * local + 1), (int(t.right[node]), 2 * local + 2)]
            pos += 2 ** (t.depth + 1) - 1
        offsets[-1] = pos
        buffers = {"array_offset": offsets, "array_feature": feature.astype(layout.feature_dtype),
                   "array_threshold": threshold, "array_flags": flags, "leaf_values": layout.leaf_values}
        # Leaves inline (one output per tree): slot is always 0 and the value is the threshold.
        self.inline = inline
        if not inline:
            buffers["array_leaf"] = leaf_slot.astype(layout.index_dtype(0, int(leaf_slot.max(initial=0))))
        return RepBuffers(buffers=buffers, info={"slots": total})

    def root(self, b, tree):
        return Builder.cast(b.load("array_offset", tree), "i64")

    def leaf_value(self, b, tree, node, slot):
        if self.inline:
            return Builder.cast(b.load("array_threshold", node), b.buffers["leaf_values"].type)
        return b.load("leaf_values", Bin("+", Builder.cast(b.load("array_leaf", node), "i32"), Cast(slot, "i32")))

    def child(self, b, tree, node, child):
        # global = offset + 2 * (node - offset) + 1 + child  ==  2 * node - offset + 1 + child
        offset = Builder.cast(b.load("array_offset", tree), "i64")
        two_node = Bin("*", node, Builder.const(2, "i64"))
        return Bin("+", Bin("-", two_node, offset), Builder.cast(Bin("+", child, Builder.const(1, "i32")), "i64"))

    def cache_trees(self, b, first_tree, num_trees):
        lo = b.load("array_offset", first_tree)
        hi = b.load("array_offset", Bin("+", first_tree, num_trees))
        return [(name, lo, hi) for name in ("array_feature", "array_threshold", "array_flags")]


@hookimpl
def silvanforge_representation_types():
    return [ArrayLayout]

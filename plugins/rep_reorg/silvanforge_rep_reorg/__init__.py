"""The reorg representation (the representations draft, section 'Model Representations';
the SilvanForge paper draft, section 'Representations'): trees interleaved level by level.

This is RAPIDS FIL's layout.  Every tree is padded (conceptually) to a complete binary tree of
the forest's largest depth ``D`` and numbered in level order, children of local node ``n`` at
``2n + 1`` and ``2n + 2`` as in the array representation.  The trees are then interleaved: node
``n`` of tree ``t`` (of ``T`` trees) sits in slot ``n * T + t``, so all the roots come first, then
all the left children of the roots, and so on.  Threads (GPU) or interleaved walks (CPU) that
visit the same level of neighbouring trees load neighbouring elements.

A node handle is the global slot ``s`` (an i64), so each field is one load at ``s``.  With
``n = (s - t) / T`` the child ``c`` (0 = left) of ``s`` is ``(2n + 1 + c) * T + t``, which is
``2s - t + (1 + c) * T``: no division, and ``T`` is a compile-time constant.

Slots under a leaf (and whole levels below a shallow tree) are filler, never visited: feature
``-1``.  The price is the array representation's, made worse by padding every tree to the
*forest's* depth: ``(2**(D+1) - 1) * T`` slots.  Forests needing more than :data:`MAX_SLOTS` are
refused with a pointer to the sparse representation.
"""

from __future__ import annotations

import numpy as np

from silvanforge import UnsupportedModelError, hookimpl
from silvanforge.rep import Bin, Builder, Cast, FieldArrays, RepBuffers

NAME = "reorg"
# Refuse layouts beyond this many slots (about 1.5 GB of node data): use sparse instead.
MAX_SLOTS = 2**27
# cache_trees names each node's range separately for the top levels only (where every walk goes);
# this many nodes per tree at most (levels 0..2), so the prefetch code stays small.
CACHED_NODES = 7


def reorg_slots(layout) -> tuple[int, int, int]:
    """``(trees, padded depth, slots)`` of a layout: slots = (2**(depth+1) - 1) * trees."""
    num_trees = len(layout.trees)
    depth = max((t.depth for t in layout.trees), default=0)
    return num_trees, depth, (2 ** (depth + 1) - 1) * num_trees


# The walks' estimate times this: tuning measured this layout's walks at 3.9-4.3x the sparse
# layout's for blocks of rows (16 rows a call, relative to each one's estimate: XGBoost 100
# trees of depth 8 and an 8-class model; benchmarks/cost_model_check.py, docs/benchmarks.md "The
# cost model against tuning").
WALK_COST_FACTOR = 4.2
# One row a call (batch_size 1, and the one-row form of small requests): a walk here computes
# its child from the slot (no child load), which made it look 0.35x the sparse layout's time on
# 16 repeated rows, but those walks were learnt by the branch predictor.  On fresh rows its
# one-row walks took 1.5-2.5x the sparse layout's walking 8 trees together (XGBoost 100 trees
# depth 8: 5.5 against 2.2 us; taxi 100x31 4.3 against 2.2; x100 2.8 against 1.9): its leaf
# checks are a branch a level on where each walk is.  Tuning measured 1.7-2.0x the sparse
# layout's, relative to the estimates: priced at 2.4 times the walks' estimate.
ONE_ROW_FACTOR = 2.4


def _i64(e):
    return Builder.cast(e, "i64")


class ReorgLayout(FieldArrays):
    """Written against :mod:`silvanforge.rep`: the tree count ``T`` and padded depth ``D`` are
    this compile's (set by :meth:`buffers`) and become constants of the generated code."""

    name = NAME
    prefix = NAME  # reorg_threshold, reorg_feature, reorg_flags: FieldArrays loads them

    walk_cost_factor = WALK_COST_FACTOR
    # leaf_value returns layout.leaf_values entries as laid out (inline or from the leaves
    # array), so the core evaluates linear leaves after its walks (silvanforge.lowering.linear_leaves).
    linear_leaves = True
    # A row's walks computing children from the slot gain little from walking trees together
    # (1-row calls, 4 / 8 trees interleaved: taxi 100x31 0.92x / 0.84x, flight 100x31 1.0x / 0.91x;
    # on fresh rows 8 trees: x100 0.88x, taxi 0.87x, flight 0.94x, lgb_100x8 1.22x).
    row_tree_lanes = 1

    @classmethod
    def refuses(cls, forest, target_kind, options=None):
        depth = forest.max_depth()
        slots = (2 ** (depth + 1) - 1) * forest.num_trees
        if slots > MAX_SLOTS:
            return f"{slots} node slots for {forest.num_trees} trees padded to depth {depth}: too many"
        return None

    @classmethod
    def cost(cls, forest, target_kind, batch_size):
        ns = super().cost(forest, target_kind, batch_size)
        if isinstance(ns, float) and batch_size is not None and batch_size <= 2:
            ns *= ONE_ROW_FACTOR / WALK_COST_FACTOR
        return ns

    def buffers(self, forest, layout):
        T, D, total = reorg_slots(layout)
        if total > MAX_SLOTS:
            raise UnsupportedModelError(
                f"the reorg representation needs {total} node slots for {T} trees padded to depth {D}; "
                f"use the sparse representation (--rep sparse)"
            )
        self.T, self.D = T, D
        feature = np.full(total, -1, np.int32)
        threshold = np.zeros(total, layout.threshold_dtype)
        flags = np.zeros(total, np.uint8)
        leaf_slot = np.zeros(total, np.int32)
        for i, t in enumerate(layout.trees):
            stack = [(0, 0)]  # (node, local level-order index)
            while stack:
                node, local = stack.pop()
                s = local * T + i
                feature[s], threshold[s], flags[s] = t.feature[node], t.threshold[node], t.flags[node]
                if t.left[node] < 0:
                    leaf_slot[s] = t.leaf_slot[node]
                else:
                    stack += [(int(t.left[node]), 2 * local + 1), (int(t.right[node]), 2 * local + 2)]
        return RepBuffers(
            buffers={"reorg_feature": feature.astype(layout.feature_dtype), "reorg_threshold": threshold,
                     "reorg_flags": flags,
                     "reorg_leaf": leaf_slot.astype(layout.index_dtype(0, int(leaf_slot.max(initial=0)))),
                     "leaf_values": layout.leaf_values},
            info={"slots": total, "padded_depth": D, "trees": T},
        )

    def root(self, b, tree):
        # Root of tree t: local node 0, slot 0 * T + t.
        return _i64(tree)

    def leaf_value(self, b, tree, node, slot):
        return b.load("leaf_values", Bin("+", Builder.cast(b.load("reorg_leaf", node), "i32"), Cast(slot, "i32")))

    def child(self, b, tree, node, child):
        # slot s = n*T + t  ->  child slot (2n + 1 + c)*T + t  ==  2s - t + (1 + c)*T
        two_node = Bin("*", node, Builder.const(2, "i64"))
        step = Bin("*", _i64(Bin("+", child, Builder.const(1, "i32"))), Builder.const(self.T, "i64"))
        return Bin("+", Bin("-", two_node, _i64(tree)), step)

    def cache_trees(self, b, first_tree, num_trees):
        # The nodes of trees first..first+num are strided: local node n of them is the contiguous
        # run [n*T + first, n*T + first + num).  One range per node for the top levels, which every
        # walk visits; deeper levels are left to the hardware (naming them all would emit a
        # prefetch loop per node of the padded tree).
        first, num = _i64(first_tree), _i64(num_trees)
        regions = []
        for n in range(min(CACHED_NODES, 2 ** (self.D + 1) - 1)):
            lo = Bin("+", Builder.const(n * self.T, "i64"), first) if n else first
            regions += [(name, lo, Bin("+", lo, num))
                        for name in ("reorg_feature", "reorg_threshold", "reorg_flags")]
        return regions


@hookimpl
def silvanforge_representation_types():
    return [ReorgLayout]

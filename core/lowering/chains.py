"""Chained walks (``chainWalks``): the interleaved lanes of a row's walk over every tree each walk
their own trees back to back, so no lane idles at a leaf while the others finish longer paths.

Interleaved walks of ``L`` trees step all lanes until the last one reaches its leaf; on deep
leaf-wise trees a row's paths are short beside the longest of eight (a 1000-tree 31-leaf
LightGBM model: 2.3 steps a tree on average, the longest of eight trees' paths 5.6), so most
lanes step in place at their leaves.  Chained, lane ``j`` walks trees ``j, j + L, j + 2L, ...``:
the representation links each leaf to the root of its lane's next tree (its step from the leaf
goes there, as a self-looping leaf's goes back to itself) and the lane's last tree's leaves to
the lane's *sink*, a split whose step stays put whatever the row.  Each step stores the node's
value slot (the leaf value where leaves are inline) at the lane's tree's place in a local
buffer and moves the lane's tree on where the node was a leaf, so the last store for a tree is
its leaf's value; the walk ends when every lane is past its last tree, and the trees' values are
then added in tree order, the reference's sums exactly.

Where it applies (:func:`chain_lanes`): every walk of the function chained over all trees, split
rows read through self-looping inline leaves of untiled trees without linear leaves, a plain
or min/max reduction into the margins, and a representation that lays chains out
(:attr:`silvanforge.rep.Representation.chains`); elsewhere the loop lowers as a plain interleaved
one.  Whether it pays is :func:`silvanforge.lowering.walkcost.chains_pay`'s to say.
"""

from __future__ import annotations

from silvanforge.ir import lir, mir
from silvanforge.ir.lir import Assign, Bin, Builder, Cast, Cmp, For, Select, Store, Var, While

__all__ = ["CHAIN_VALUES", "ChainedWalks", "MAX_CHAINED_TREES", "chain_lanes"]

# The local buffer of each tree's value (one slot a tree, and one a lane past the last tree,
# where a lane's stores go once its chain has ended).
CHAIN_VALUES = "chain_values"
# Trees a chained walk keeps values for on the stack (8 bytes each): 128 KB at most.
MAX_CHAINED_TREES = 16384


def chain_lanes(fn: mir.MirFunction, layout, rep_cls) -> int:
    """The lanes of ``fn``'s chained walks where the layout can chain them, else 0: every walk
    in an interleaved loop over all trees asking for chains (one lane count), with no other
    walk in the function, ``layout`` (a :class:`silvanforge.lowering.layout.ForestLayout`) of
    self-looping inline leaves, untiled, without linear leaves, its reductions into the margins
    themselves, and ``rep_cls`` laying chains out."""
    forest = layout.forest
    if not (getattr(rep_cls, "chains", False) and layout.leaf_self_loops and layout.inline_leaves
            and layout.tiles is None and layout.linear is None and 0 < forest.num_trees <= MAX_CHAINED_TREES):
        return 0
    ops = list(mir.walk(fn.body))
    loops = [op for op in ops if isinstance(op, mir.Loop) and any(isinstance(o, mir.WalkDecisionTree) for o in op.body)]
    if not loops or sum(isinstance(op, mir.WalkDecisionTree) for op in ops) != len(loops):
        return 0
    lanes = set()
    for op in loops:
        walk = next(o for o in op.body if isinstance(o, mir.WalkDecisionTree))
        reduce = next((o for o in op.body if isinstance(o, mir.Reduce)), None)
        if not (walk.chain and not walk.expand and op.interleave >= 2 and op.dimension == "tree"
                and op.start == 0 and op.stop == forest.num_trees and op.step == 1
                and reduce is not None and reduce.target == "margins" and not reduce.private
                and not reduce.atomic):
            return 0
        lanes.add(op.interleave)
    return lanes.pop() if len(lanes) == 1 else 0


class ChainedWalks:
    """Mixin of :class:`silvanforge.lowering.walkgen.WalkGenerator`: the chained lowering of an
    interleaved loop over every tree (where ``layout.chain_lanes`` is set)."""

    def _chained_loop(self, op: mir.Loop, start, stop) -> None:
        b, c, reps, lanes = self.b, self.c, self.reps, op.interleave
        walk = next(o for o in op.body if isinstance(o, mir.WalkDecisionTree))
        reduce = next(o for o in op.body if isinstance(o, mir.Reduce))
        trees = self.forest.num_trees
        if CHAIN_VALUES not in b.buffers:
            b.buffers[CHAIN_VALUES] = lir.Buffer(CHAIN_VALUES, self.acc_t, "local", size=trees + lanes)
        # The walk's row, which does not depend on the tree (the loop's index bound to anything).
        # The loop body's other operations are not lowered: a cache of its trees prefetches a
        # range of consecutive trees, which chains do not keep, and walk unrolling or peeling
        # shapes leaf checks, which chained steps do not make.
        self.index[op.index] = start
        row = self.expr(walk.row)
        tree_of, nodes = [], []
        for j in range(min(lanes, trees)):
            tree_of.append(b.local("ct", "i64", c(j, "i64")))
            nodes.append(b.local("cn", "i64", reps.root(b=b, tree=c(j, "i32"))))
        b.push()
        for t, node in zip(tree_of, nodes):
            t32 = Cast(t, "i32")
            leaf = b.local("cleaf", "i1", reps.is_leaf(b=b, tree=t32, node=node))
            # (unconditional: a split's store is overwritten by its tree's later ones; the sink's
            # lane has moved past the last tree, into the spare slots)
            value = reps.leaf_value(b=b, tree=t32, node=node, slot=c(0, "i32"))
            b.emit(Store(CHAIN_VALUES, t, Builder.cast(value, self.acc_t)))
            self._step(t32, row, node, self.prefetch_children)
            # (a select of constants: a flag times the lanes, no branch on the leaf)
            b.emit(Assign(t, Bin("+", t, Select(leaf, c(lanes, "i64"), c(0, "i64")))))
        body = b.pop()
        # Every lane past its last tree (at its sink, where its tree stays): a lane's tree only
        # grows, to the first past the last of its lane, so the lanes' trees add up to those
        # exactly when all are there (a count of finished trees ran 1.2x slower on a 1000-tree
        # 31-leaf model, one row; this is as fast as the lanes' nodes OR'd against one sink).
        ends = sum(j + lanes * -(-(trees - j) // lanes) for j in range(len(tree_of)))
        total = tree_of[0]
        for t in tree_of[1:]:
            total = Bin("+", total, t)
        b.emit(While(Cmp("!=", total, c(ends, "i64")), body))
        # The trees' values added in tree order (the reduction of each, as unchained walks).
        k = Var(f"ck{len(b.locals)}", "i64")
        b.push()
        value = b.local("cv", self.acc_t, b.load(CHAIN_VALUES, k))
        self._reduce(row, k, None, reduce.target, (), False, value=value)
        b.emit(For(k, c(0, "i64"), c(trees, "i64"), 1, b.pop()))
        self.info["chained_walks"] = lanes

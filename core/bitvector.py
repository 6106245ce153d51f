"""Bitvector evaluation (QuickScorer, Lucchese et al., SIGIR 2015; its SIMD form V-QuickScorer,
2016): the ``bitvector`` representation.

Instead of walking each tree node by node, every tree keeps a word with one bit per leaf (leaf
``k`` from the left is bit ``63 - k``), all set at the start.  A split the row does *not* take
to the left (a "false" node) clears the bits of the leaves in its left subtree; once every
false node of every tree has been applied, a tree's exit leaf is the leftmost leaf whose bit is
still set: its leading-zero count.  The false nodes of one feature are found without walking:
nodes sorted by threshold, a row leaves them at the first node it goes left at.  Eight rows are
evaluated together, lane by lane in vectors (``LANES``), so a node costs one vector compare and
one masked AND of its tree's eight words, whatever the trees' depths: this pays where trees are
small beside their depth (real data's leaf-wise and mixed-depth trees, :func:`pays`), and is
what the CPU default chooses there.

Exact like the walks: every node becomes "goes right iff ``x >= t``" with ``t`` the threshold
(``x < t`` splits) or the next representable value above it (``x <= t`` splits, exact for every
``x`` of the comparison dtype); a node whose missing values go right tests ``!(x < t)``, true
for NaN, and keeps its own list, so NaN rows never stop a scan early.  Margins add each output's
trees in model order from the base score, as the reference does.

Limits (:func:`unsupported`, the walk then runs): at most ``MAX_LEAVES`` leaves a tree, numeric
``<`` / ``<=`` splits with finite thresholds, no zero-as-missing, summed single-output trees.
"""

from __future__ import annotations

import numpy as np

from .ir import hir, lir
from .lowering import thread_info
from .ir.hir import Aggregation, Op
from .ir.lir import (Assign, Bin, Buffer, Builder, Cast, Clz, Cmp, Extract, For, Gather, If,
                     Load, Select, Store, Var, Vector, While)

NAME = "bitvector"
MAX_LEAVES = 64
LANES = 8
# Per-call words of bits: one 8-lane vector of 64-bit words per tree, on the stack.
MAX_TREES = 16384
# Cost model from measured kernels (AMD Zen 4, avx512; docs/benchmarks.md "Bitvector
# evaluation"): about 0.13 ns per node and 0.3 ns per tree a row against 0.76 ns per walk step.
# It is chosen when its nodes plus trees weigh at most this many walk steps (a safety margin).
NODE_COST, TREE_COST, STEP_COST = 1.0, 2.5, 5.0


def unsupported(forest: hir.Forest) -> str | None:
    """Why bitvector evaluation cannot run this forest, or None if it can."""
    if forest.aggregation is not Aggregation.SUM:
        return f"it sums trees ({forest.aggregation.value} aggregation)"
    if not 0 < forest.num_trees <= MAX_TREES:
        return f"it takes 1 to {MAX_TREES} trees"
    for k, t in enumerate(forest.trees):
        internal = t.left >= 0
        if int((~internal).sum()) > MAX_LEAVES:
            return f"tree {k} has more than {MAX_LEAVES} leaves"
        if len(t.outputs) != 1:
            return f"tree {k} adds to several outputs"
        if t.categories:
            return f"tree {k} has categorical splits"
        if not np.isin(t.op[internal], (int(Op.LT), int(Op.LE))).all():
            return f"tree {k} has splits other than < and <="
        if t.zero_missing[internal].any():
            return f"tree {k} treats zero as missing"
        if not np.isfinite(t.threshold[internal]).all():
            return f"tree {k} has infinite or NaN thresholds"
    return None


# Whether the CPU default may choose it (the walk tests switch it off to test walks by default).
AUTO_CHOOSE = True


def pays(forest: hir.Forest) -> bool:
    """Whether bitvector evaluation should beat the walks on this forest (see the costs above);
    always False while :data:`AUTO_CHOOSE` is off."""
    if not AUTO_CHOOSE or unsupported(forest) is not None:
        return False
    nodes = sum(int((t.left >= 0).sum()) for t in forest.trees)
    steps = sum(t.depth() for t in forest.trees)
    return NODE_COST * nodes + TREE_COST * forest.num_trees <= STEP_COST * steps


def _leaf_order(t: hir.Tree) -> tuple[list[int], dict[int, tuple[int, int]]]:
    """Leaves from left to right, and each node's range of leaf positions [first, last)."""
    leaves: list[int] = []
    span: dict[int, tuple[int, int]] = {}
    stack = [(0, False)]
    while stack:
        node, done = stack.pop()
        if t.left[node] < 0:
            span[node] = (len(leaves), len(leaves) + 1)
            leaves.append(node)
        elif done:
            span[node] = (span[int(t.left[node])][0], span[int(t.right[node])][1])
        else:
            stack += [(node, True), (int(t.right[node]), False), (int(t.left[node]), False)]
    return leaves, span


def layout(forest: hir.Forest) -> dict[str, np.ndarray]:
    """The model buffers: nodes by (feature, missing side, threshold) with their tree's slot and
    mask, each list's start, the leaves in order and each tree's first leaf, trees grouped by
    output (model order inside each output)."""
    thr_dtype = np.dtype(forest.threshold_dtype)
    acc_dtype = np.dtype(forest.accumulate_dtype)
    order = sorted(range(forest.num_trees), key=lambda k: forest.trees[k].outputs[0])  # stable
    keys, thresholds, slots, masks, leaf_values, leaf_base = [], [], [], [], [], []
    for slot, k in enumerate(order):
        t = forest.trees[k]
        leaves, span = _leaf_order(t)
        leaf_base.append(len(leaf_values))
        leaf_values += [t.leaf_value[n, 0] for n in leaves]
        for node in np.flatnonzero(t.left >= 0):
            first, last = span[int(t.left[node])]
            bits = ((1 << (last - first)) - 1) << (MAX_LEAVES - last)  # the left subtree's leaves
            thr = thr_dtype.type(t.threshold[node])
            if t.op[node] == Op.LE:  # x > t  <=>  x >= the next value up, for every x of the dtype
                thr = np.nextafter(thr, thr_dtype.type(np.inf))
            side = 0 if t.default_left[node] else 1
            keys.append((int(t.feature[node]), side))
            thresholds.append(thr)
            slots.append(slot)
            masks.append(~bits & ((1 << 64) - 1))
    n = len(thresholds)
    feats = np.array([k[0] for k in keys], np.int64).reshape(n)
    sides = np.array([k[1] for k in keys], np.int64).reshape(n)
    thr = np.array(thresholds, thr_dtype).reshape(n)
    by = np.lexsort((thr, sides, feats))
    lists = feats[by] * 2 + sides[by]
    starts = np.searchsorted(lists, np.arange(2 * forest.num_features + 1)).astype(np.int32)
    per_output = np.bincount([forest.trees[k].outputs[0] for k in order], minlength=forest.num_outputs)
    return {
        "bv_threshold": thr[by],
        "bv_slot": (np.array(slots, np.int32).reshape(n)[by] * LANES).astype(np.int32),
        "bv_mask": np.array(masks, np.uint64).reshape(n)[by].view(np.int64),
        "bv_list": starts,
        "bv_leaf": np.array(leaf_values, acc_dtype),
        "bv_leaf_base": np.array(leaf_base, np.int32),
        "bv_output": np.concatenate([[0], np.cumsum(per_output)]).astype(np.int32),
        "bv_base": np.asarray(forest.base_score, acc_dtype).reshape(forest.num_outputs),
    }


def lower(forest: hir.Forest) -> lir.Module:
    """The LIR module of bitvector evaluation: one phase, blocks of ``LANES`` rows, rows split
    over threads."""
    why = unsupported(forest)
    if why is not None:
        raise ValueError(f"bitvector evaluation cannot run this model: {why}")
    thr_t = lir.lir_type(forest.threshold_dtype)
    acc_t = lir.lir_type(forest.accumulate_dtype)
    buffers = {"rows": Buffer("rows", thr_t, "input"), "margins": Buffer("margins", acc_t, "output")}
    b = Builder(buffers)
    for name, data in layout(forest).items():
        b.buffer(name, data)
    T, F, C = forest.num_trees, forest.num_features, forest.num_outputs
    buffers["bv_bits"] = Buffer("bv_bits", "i64", "local", size=T * LANES)
    i64, i32 = "i64", "i32"
    v = lir.vector_type
    c = Builder.const

    row0 = b.local("r", i64)
    last = Bin("-", lir.ROW_END, c(1, i64))
    # Lanes past the batch's end read its last row and are never stored.
    lane_rows = [Bin("min", Bin("+", row0, c(k, i64)), last) for k in range(LANES)]
    body = b.push()
    # Every tree's bits set.
    t = Var("bv_t", i64)
    b.emit(For(t, c(0, i64), c(T, i64), 1, [Store("bv_bits", Bin("*", t, c(LANES, i64)), c(-1, v(i64, LANES)))]))
    f = Var("bv_f", i64)
    feature_body = b.push()
    x = b.local("x", v(thr_t, LANES))
    b.emit(Assign(x, Vector(tuple(
        Load("rows", Bin("+", Bin("*", r, lir.ROW_STRIDE), Bin("*", f, lir.COL_STRIDE)), thr_t)
        for r in lane_rows))))
    for side in (0, 1):
        lst = Bin("+", Bin("*", f, c(2, i64)), c(side, i64))
        i = b.local("i", i64, Cast(Load("bv_list", lst, i32), i64))
        end = b.local("e", i64, Cast(Load("bv_list", Bin("+", lst, c(1, i64)), i32), i64))
        going = b.local("go", "i1", Cmp("<", i, end))
        thr = Vector((Load("bv_threshold", i, thr_t),) * LANES)
        # Goes right: x >= t, false for NaN; where missing values go right, !(x < t).
        mask_t = v("i1", LANES)
        right = Cmp(">=", x, thr, mask_t) if side == 0 else Bin("^", Cmp("<", x, thr, mask_t), c(1, mask_t))
        m = b.local("m", v("i1", LANES))
        slot = Cast(Load("bv_slot", i, i32), i64)
        words = Load("bv_bits", slot, v(i64, LANES))
        cleared = Bin("&", words, Vector((Load("bv_mask", i, i64),) * LANES))
        b.emit(While(going, [
            Assign(m, right),
            If(Cmp("!=", lir.PackBits(m), c(0, i32)), [
                Store("bv_bits", slot, Select(m, cleared, words)),
                Assign(i, Bin("+", i, c(1, i64))),
                Assign(going, Cmp("<", i, end)),
            ], [Assign(going, c(0, "i1"))]),
        ]))
    b.pop()
    b.emit(For(f, c(0, i64), c(F, i64), 1, feature_body))
    # Exit leaves, output by output, each from its base score in model order.
    out = Var("bv_o", i64)
    out_body = b.push()
    acc = b.local("acc", v(acc_t, LANES), Vector((Load("bv_base", out, acc_t),) * LANES))
    leaf_body = [Assign(acc, Bin("+", acc, Gather("bv_leaf", Bin(
        "+", Clz(Load("bv_bits", Bin("*", t, c(LANES, i64)), v(i64, LANES))),
        Vector((Cast(Load("bv_leaf_base", t, i32), i64),) * LANES)), v(acc_t, LANES))))]
    b.emit(For(t, Cast(Load("bv_output", out, i32), i64), Cast(Load("bv_output", Bin("+", out, c(1, i64)), i32), i64),
               1, leaf_body))
    for k in range(LANES):
        row = Bin("+", row0, c(k, i64))
        b.emit(If(Cmp("<", row, lir.ROW_END),
                  [Store("margins", Bin("+", Bin("*", row, c(C, i64)), out), Extract(acc, k))]))
    b.pop()
    b.emit(For(out, c(0, i64), c(C, i64), 1, out_body))
    b.pop()
    fn = lir.Function("predict_bitvector", [For(row0, lir.ROW_BEGIN, lir.ROW_END, LANES, body)],
                      dict(b.locals), parallel="rows", row_parallel=True)
    nodes = len(buffers["bv_threshold"].data)
    module = lir.Module(
        functions=[fn], buffers=buffers, num_features=F, num_outputs=C, input_type=thr_t,
        output_type=acc_t,
        info={"summary": f"rep={NAME} trees={T} nodes={nodes} outputs={C} lanes={LANES}", "rep": NAME,
              **thread_info(max(1, nodes // LANES))})
    lir.verify(module)
    return module

"""Which forests are symmetric (oblivious) and what the program needs to know of them.

A tree is symmetric when every node of a level is internal and tests the same split (feature,
threshold in the comparison dtype, comparison op, missing-value direction, zero-as-missing, no
categorical set), down to a level of leaves only: its leaf is then fixed by one bit a level
(1 where the row goes right), ``leaf = sum(bit_i << i)``, so no walk is needed.

Each level becomes "goes right iff ``x' >= t'``", an ordered compare (false for NaN):
``x < t`` keeps ``t``; ``x <= t`` takes the next value above ``t`` in the comparison dtype
(exact for every input of that dtype).  ``x'`` is the feature's *column*: the value itself, or
with missing values (NaN, and for zero-as-missing splits ``|x| <= ZERO_THRESHOLD``) replaced
by +inf where they go right (above every ``t'``) and NaN where they go left.  Refused, with the
reason (the walks run instead): categorical and ``==`` splits, NaN thresholds, ``x <= +inf``
splits (every number goes left: no ``t'`` says so), a minimum or maximum of the trees, outputs
that trees of different output sets add to (their sums could not keep model order), and more
groups of several outputs than :data:`MAX_GROUP_PROGRAMS` (a program each: compile time).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from silvanforge.ir import hir
from silvanforge.ir.hir import Aggregation, Op
from silvanforge.plan.memo import memoised

from .binning import MAX_BINS


@dataclasses.dataclass(frozen=True)
class Column:
    """A block's copy of one feature: missing values as +inf (``nan_right``) or NaN, zero
    counted as missing where ``zero_missing``."""

    feature: int
    nan_right: bool
    zero_missing: bool


@dataclasses.dataclass
class Group:
    """Trees adding to the same outputs, in model order: their sums are independent of the
    other groups', so each group is one loop over its trees."""

    outputs: tuple[int, ...]
    trees: np.ndarray  # model indices, ascending
    depth: int  # levels the loop runs: the group's deepest tree (shallower ones padded)


@dataclasses.dataclass
class Facts:
    """A symmetric forest as the program reads it: per tree and level the column (index into
    ``columns``) and threshold ``t'`` of :mod:`this module <.symmetric>`'s rule, -1 past the
    tree's depth."""

    depth: np.ndarray  # (trees,) levels of each tree
    column: np.ndarray  # (trees, max depth) int64, -1 past a tree's depth
    threshold: np.ndarray  # (trees, max depth) in the comparison dtype, NaN past a tree's depth
    columns: list[Column]
    groups: list[Group]
    binned: dict = dataclasses.field(default_factory=dict)  # bins() (memo: every estimate asks)

    @property
    def num_trees(self) -> int:
        return len(self.depth)


def remembered(recognise):
    """``recognise`` computed once per forest in a compile (:func:`silvanforge.plan.memo.memoised`):
    cost() is asked for several batch sizes per compile and the tuner ranks every size, each a
    pass over every node.  Kept for that compile alone: the facts hold the levelwise tables
    (``binned``), hundreds of MB for a 100,000-tree forest."""
    key = f"{recognise.__module__}.{recognise.__qualname__}"

    @functools.wraps(recognise)
    def remembering(forest: hir.Forest):
        return memoised(forest, key, lambda: recognise(forest))

    return remembering


@dataclasses.dataclass
class Nodes:
    """Every tree's node arrays in one numbering (:func:`silvanforge.ir.hir.level_order`),
    thresholds in the comparison dtype."""

    offset: np.ndarray
    left: np.ndarray
    right: np.ndarray
    levels: list
    tree_of: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    op: np.ndarray
    nan_left: np.ndarray
    zero: np.ndarray
    categorical: np.ndarray


def summed_groups(forest: hir.Forest) -> list[Group] | str:
    """The forest's groups (:func:`_groups`), or why a level-at-a-time form cannot sum it."""
    if forest.aggregation not in (Aggregation.SUM, Aggregation.AVERAGE):  # (an average: the sum divided at the end)
        return f"it sums trees ({forest.aggregation.value} aggregation)"
    if not forest.trees:
        return "it has no trees"
    return _groups(forest)


def nodes_of(forest: hir.Forest) -> Nodes:
    trees = forest.trees
    offset, left, right, levels = hir.level_order(forest)
    with np.errstate(over="ignore"):
        threshold = np.concatenate([t.threshold for t in trees]).astype(np.dtype(forest.threshold_dtype))
    return Nodes(offset, left, right, levels, np.repeat(np.arange(len(trees)), np.diff(offset)),
                 np.concatenate([t.feature for t in trees]).astype(np.int64), threshold,
                 np.concatenate([t.op for t in trees]).astype(np.int64),
                 np.concatenate([t.default_left for t in trees]),
                 np.concatenate([t.zero_missing for t in trees]),
                 np.concatenate([t.categorical_mask() for t in trees]))


def split_checks(n: Nodes, at, inner: np.ndarray) -> list[tuple[np.ndarray, str]]:
    """The splits among nodes ``at`` (``inner``: which are splits) that neither form runs, by
    rule: (which nodes break it, the reason)."""
    op, threshold = n.op[at], n.threshold[at]
    return [(inner & n.categorical[at], "has categorical splits"),
            (inner & (op == int(Op.EQ)), "has == splits"),
            (inner & np.isnan(threshold), "has NaN thresholds"),
            (inner & (op == int(Op.LE)) & (threshold == np.inf), "has x <= +inf splits (every number goes left)")]


def first_broken(checks: list, owner: np.ndarray) -> str | None:
    """The first tree breaking a rule of ``checks`` (``owner``: each node's tree), and its
    first rule broken, as a reason; None where none is."""
    bad = [(int(owner[np.argmax(hit)]), n) for n, (hit, _) in enumerate(checks) if hit.any()]
    if not bad:
        return None
    tree, n = min(bad)
    return f"tree {tree} {checks[n][1]}"


@remembered
def recognise(forest: hir.Forest) -> Facts | str:
    """The :class:`Facts` of a symmetric forest, or why it is not one (a string naming the
    first tree that breaks a rule)."""
    groups = summed_groups(forest)
    if isinstance(groups, str):
        return groups
    n = nodes_of(forest)
    left, tree_of = n.left, n.tree_of
    feature, threshold, op, nan_left, zero = n.feature, n.threshold, n.op, n.nan_left, n.zero
    depth = np.zeros(len(forest.trees), np.int64)
    per_level = []  # (trees with a split at this level, their first node of the level)
    for level, nodes in enumerate(n.levels):
        # By tree, a tree's splits before its leaves (so each tree's first node of the level is
        # a split where it has one); node numbers grow with the tree.
        nodes = nodes[np.lexsort((nodes, left[nodes] < 0, tree_of[nodes]))]
        owner = tree_of[nodes]
        inner = left[nodes] >= 0
        starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        counts = np.diff(np.r_[starts, len(nodes)])
        first = np.repeat(nodes[starts], counts)
        inner_count = np.add.reduceat(inner.astype(np.int64), starts)
        # A level may mix splits and leaves (a branch that stopped early): the tree is padded
        # to be symmetric, each early leaf's value filling every leaf below it
        # (:func:`leaf_table`), which is exact whatever the deeper levels' bits are.
        same = ((feature[nodes] == feature[first]) & (op[nodes] == op[first])
                & (nan_left[nodes] == nan_left[first]) & (zero[nodes] == zero[first])
                & (threshold[nodes] == threshold[first])) | ~inner
        checks = split_checks(n, nodes, inner) + [(~same, f"is not symmetric (level {level} has different splits)")]
        why = first_broken(checks, owner)
        if why is not None:
            return why
        split = nodes[starts][inner_count > 0]
        depth[tree_of[split]] = level + 1
        per_level.append((tree_of[split], split))
    facts = _facts(forest, depth, per_level, feature, threshold, op, nan_left, zero, groups)
    return group_programs_refused(facts.groups) or facts


def _groups(forest: hir.Forest) -> list[Group] | str:
    """Trees by the outputs they add to; an output added to by trees of two output sets is
    refused (one loop per set keeps each output's sum in model order only when its trees are
    all in one set)."""
    by_outputs: dict[tuple, list[int]] = {}
    for k, t in enumerate(forest.trees):
        by_outputs.setdefault(tuple(t.outputs), []).append(k)
    owner: dict[int, tuple] = {}
    for outputs in by_outputs:
        for o in outputs:
            if owner.setdefault(o, outputs) != outputs:
                return (f"output {o} is added to by trees of different output sets "
                        f"({list(owner[o])} and {list(outputs)})")
    return [Group(outputs, np.array(trees, np.int64), 0) for outputs, trees in by_outputs.items()]


# Most groups of several outputs each whose program is emitted a group at a time (never alike:
# :func:`alike_groups`).  Why a limit: a group's program compiles in about 0.3 s (a tree of depth 6
# on 6 features; more with more columns), and the per-tree values of multi-output trees (a
# 3-class random forest's ``per_tree``: a group of 3 outputs a tree) made 50 of them, 17-39 s of
# compile for a form the walks answer as fast as needed.  Groups of one output each (a model's
# classes) keep the form: their program's speed is paid for once.
MAX_GROUP_PROGRAMS = 8


def group_programs_refused(groups: list[Group]) -> str | None:
    """Why a level-at-a-time form refuses ``groups`` (their depths known): more than
    :data:`MAX_GROUP_PROGRAMS` groups of several outputs each, a program each; else None."""
    if len(groups) > MAX_GROUP_PROGRAMS and any(len(g.outputs) > 1 for g in groups):
        return (f"it has {len(groups)} groups of trees adding to several outputs of their own (a program "
                f"each: its compile would take seconds; at most {MAX_GROUP_PROGRAMS})")
    return None


def alike_groups(groups: list[Group]) -> bool:
    """Whether the groups are alike (two or more, one output each, the same depth and number of
    trees): their program is one loop over them (:meth:`.codegen._Lowering._group_loop`)."""
    return len(groups) > 1 and all(len(g.outputs) == 1 and g.depth == groups[0].depth
                                   and len(g.trees) == len(groups[0].trees) for g in groups)


def _facts(forest, depth, per_level, feature, threshold, op, nan_left, zero, groups) -> Facts:
    thr_dtype = np.dtype(forest.threshold_dtype)
    T, D = len(forest.trees), max(1, int(depth.max()))
    column = np.full((T, D), -1, np.int64)
    thr = np.full((T, D), np.nan, thr_dtype)
    index: dict[Column, int] = {}
    keys = []
    for level, (trees, nodes) in enumerate(per_level):
        for t, n in zip(trees.tolist(), nodes.tolist()):
            c = Column(int(feature[n]), not bool(nan_left[n]), bool(zero[n]))
            keys.append((t, level, c))
            t_prime = threshold[n]
            if op[n] == int(Op.LE):  # x <= t iff not x >= next(t): right iff x >= next(t)
                with np.errstate(over="ignore"):  # the largest finite threshold: next is +inf
                    t_prime = np.nextafter(t_prime, thr_dtype.type(np.inf))
            thr[t, level] = t_prime
    # Columns by kind (each kind one copying loop), then feature.
    for c in sorted({c for _, _, c in keys}, key=lambda c: (c.zero_missing, c.nan_right, c.feature)):
        index[c] = len(index)
    for t, level, c in keys:
        column[t, level] = index[c]
    for g in groups:
        g.depth = int(depth[g.trees].max())
    return Facts(depth, column, thr, list(index), groups)


# Deepest trees on byte columns: a leaf index is a byte.
BYTE_DEPTH = 8


@dataclasses.dataclass
class SymmetricBins:
    """A symmetric forest's facts on byte columns (:func:`bins`): ``facts.column`` names byte
    columns, ``facts.threshold`` holds each level's threshold bin (uint8)."""

    facts: Facts
    thresholds: list[np.ndarray]  # each byte column's thresholds, sorted


def bins(facts: Facts) -> SymmetricBins | str:
    """The forest on byte columns (:mod:`.symmetric_bytes` runs it), or why it does not fit
    them (trees deeper than :data:`BYTE_DEPTH`).  Each column (a feature and its missing values'
    direction) becomes a byte column a run of :data:`.binning.MAX_BINS` of its thresholds
    ``t'``: a value's bin is 1 + its count of the run's thresholds at or below it, a missing
    value's 0 where missing values go left (below every threshold's bin, 2-255) or 255 where
    they go right (at or above every one), so ``x' >= t'`` iff ``bin(x) >= rank(t') + 2``.
    Made once a forest's facts (every cost estimate asks)."""
    if "bytes" not in facts.binned:
        facts.binned["bytes"] = _bins(facts)
    return facts.binned["bytes"]


def _bins(facts: Facts) -> SymmetricBins | str:
    if int(facts.depth.max()) > BYTE_DEPTH:
        return f"trees deeper than {BYTE_DEPTH} levels"
    column = np.full(facts.column.shape, -1, np.int64)
    tbin = np.full(facts.column.shape, 255, np.uint8)
    thresholds, columns = [], []
    for u, col in enumerate(facts.columns):
        at = facts.column == u
        values = np.unique(facts.threshold[at])
        rank = np.searchsorted(values, facts.threshold[at])
        first = len(columns)
        for lo in range(0, max(1, len(values)), MAX_BINS):
            thresholds.append(values[lo:lo + MAX_BINS])
            columns.append(col)
        tbin[at] = rank % MAX_BINS + 2
        column[at] = first + rank // MAX_BINS
    # Padding levels (past a tree's depth, within its group's) read column 0: their bits do
    # not matter (the leaf tables are as deep as the group).
    depth = np.zeros_like(facts.depth)
    for group in facts.groups:
        depth[group.trees] = max(group.depth, 1)
    inside = np.arange(facts.column.shape[1])[None, :] < depth[:, None]
    column[(column < 0) & inside] = 0
    binned = Facts(facts.depth, column, tbin, columns, facts.groups)
    return SymmetricBins(binned, thresholds)


def path_bits(left: np.ndarray, right: np.ndarray, levels: list) -> tuple[np.ndarray, np.ndarray]:
    """(each node's path bits, its level) of :func:`silvanforge.ir.hir.level_order`'s numbering:
    bit ``l`` set where the path goes right at level ``l`` (a symmetric tree's leaf index), a
    level of every tree at a time."""
    bits, level_of = np.zeros(len(left), np.int64), np.zeros(len(left), np.int64)
    for level, nodes in enumerate(levels):
        level_of[nodes] = level
        inner = nodes[left[nodes] >= 0]
        bits[left[inner]] = bits[inner]
        bits[right[inner]] = bits[inner] | (1 << level)
    return bits, level_of


def leaf_table(forest: hir.Forest, facts: Facts, acc_dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every tree's leaf values by leaf index (``sum(bit_i << i)``, bit 1 going right), the
    values of its outputs together (``leaf * len(outputs) + j``), trees one after another: the
    values and each tree's first element.  A leaf above the tree's last level (a padded tree)
    fills every index whose first bits are its path.  Made once a compile for the same trees
    and depths (a plan's forms ask for it again): the arrays are read-only."""
    key = ("oblivious.leaf_table", np.asarray(facts.depth, np.int64).tobytes(), np.dtype(acc_dtype).str)
    return memoised(forest, key, lambda: _leaf_table(forest, facts, acc_dtype))


def _leaf_table(forest: hir.Forest, facts: Facts, acc_dtype) -> tuple[np.ndarray, np.ndarray]:
    if len({len(t.outputs) for t in forest.trees}) > 1:
        return _leaf_table_by_tree(forest, facts, acc_dtype)
    # Every tree at once, level by level (a loop over trees and levels took a tenth of a
    # second of a 1000-tree model's compile): each node's path bits, then each leaf's indices.
    offset, left, right, levels = hir.level_order(forest)
    P = len(forest.trees[0].outputs) if forest.trees else 1
    bits, depth_at = path_bits(left, right, levels)
    sizes = np.diff(offset)
    D = np.asarray(facts.depth, np.int64)
    base = np.concatenate([[0], np.cumsum((np.int64(1) << D) * P)])[:-1].astype(np.int64)
    leaf = np.flatnonzero(left < 0)
    tree = np.repeat(np.arange(forest.num_trees), sizes)[leaf]
    # index = path bits + any deeper bits: path + m << level for every m below the leaf
    count = np.int64(1) << (D[tree] - depth_at[leaf])
    each = np.repeat(np.arange(len(leaf)), count)
    m = np.arange(len(each)) - np.repeat(np.cumsum(count) - count, count)
    index = base[tree][each] + (bits[leaf][each] + (m << depth_at[leaf][each])) * P
    values = np.concatenate([t.leaf_value for t in forest.trees] or [np.zeros((0, P))])[leaf]
    table = np.zeros(int(base[-1] + (1 << int(D[-1])) * P) if len(D) else 0, np.float64)
    for j in range(P):
        table[index + j] = values[each, j]
    table = table.astype(acc_dtype)
    table.flags.writeable = base.flags.writeable = False
    return table, base


def leaves_are_indices(table: np.ndarray, base: np.ndarray, depth: np.ndarray, groups: list[Group]) -> bool:
    """Whether every tree has one output and each of its :func:`leaf_table` values is its own
    index (the leaf numbers of a forest of leaf indices, where the levels number the leaves as
    the library does): the program may then add the index and read no table."""
    if any(len(g.outputs) != 1 for g in groups) or not len(base):
        return False
    size = np.int64(1) << np.asarray(depth, np.int64)
    if int(base[-1] + size[-1]) != table.size:
        return False
    index = np.arange(table.size, dtype=np.int64) - np.repeat(np.asarray(base, np.int64), size)
    return bool((table == index).all())


def _leaf_table_by_tree(forest: hir.Forest, facts: Facts, acc_dtype) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_leaf_table` a tree at a time (trees of different output counts)."""
    parts, base, at = [], np.zeros(forest.num_trees, np.int64), 0
    for k, t in enumerate(forest.trees):
        D = int(facts.depth[k])
        values = np.zeros((1 << D, len(t.outputs)), np.float64)
        bits = np.zeros(t.num_nodes, np.int64)
        frontier, level = np.array([0]), 0
        while frontier.size:
            leaves = frontier[t.left[frontier] < 0]
            # index = path bits + any deeper bits: path + m << level for every m
            below = np.arange(1 << (D - level), dtype=np.int64) << level
            if leaves.size:
                values[(bits[leaves][:, None] + below).reshape(-1)] = np.repeat(t.leaf_value[leaves], below.size, axis=0)
            inner = frontier[t.left[frontier] >= 0]
            bits[t.left[inner]] = bits[inner]
            bits[t.right[inner]] = bits[inner] | (1 << level)
            frontier, level = np.concatenate([t.left[inner], t.right[inner]]), level + 1
        base[k] = at
        parts.append(values.reshape(-1))
        at += values.size
    table = np.concatenate(parts).astype(acc_dtype)
    table.flags.writeable = base.flags.writeable = False
    return table, base

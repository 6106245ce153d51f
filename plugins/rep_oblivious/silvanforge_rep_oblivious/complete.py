"""Which forests the levelwise form runs and what its program needs to know of them.

The levelwise form walks a block of rows through a tree a level at a time, one SIMD lane a
row, every tree padded to a complete binary tree: at level ``d`` a lane's node is named by its
path so far, the bits ``b_0 .. b_{d-1}`` (1 where the row went right), so the node's column and
threshold are entry ``p = sum(b_i << i)`` of the level's table of ``2**d`` entries, a register
permute for the block (:class:`silvanforge.ir.lir.Lookup`), and after the last level ``p`` is the
leaf index, as in the symmetric form (:func:`.symmetric.leaf_table` fills it).  Symmetric trees
are the case of one distinct entry a level.

Each split becomes "goes right iff ``x' >= t'``, or ``x'`` is missing and the node sends
missing values right" on a column ``x'``: the feature, NaN where missing (zero-as-missing
columns too), ``t'`` by the rule of :mod:`.symmetric`.  Nodes
below an early leaf or past a tree's depth (padding) hold a NaN threshold, and the leaf's
value fills every leaf index below it (the leaf tables are as deep as the tree's group), so
whichever way a padding node sends a row, it reaches that leaf's value.  Refused, with the reason: what the symmetric form refuses
(categorical and ``==`` splits, NaN thresholds, ``x <= +inf``, a minimum or maximum of the trees,
outputs added to by trees of different output sets, more groups of several outputs than
:data:`.symmetric.MAX_GROUP_PROGRAMS`) and trees deeper than :data:`MAX_DEPTH` (the
tables double a level).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir import hir
from silvanforge.ir.hir import Op

from .symmetric import (Column, Group, first_broken, group_programs_refused, nodes_of, path_bits, remembered,
                        split_checks, summed_groups)

# Deepest tree taken: a tree's tables hold 2**depth - 1 entries of each field.
MAX_DEPTH = 10
# The bit of a node's column entry saying missing values go right (the column in the bits below).
NAN_RIGHT = 1 << 30


@dataclasses.dataclass
class LevelFacts:
    """A forest as the levelwise program reads it: per tree, the column entry (index into
    ``columns``, with :data:`NAN_RIGHT` where missing values go right) and threshold ``t'`` of
    each node, level ``d``'s node of path ``p`` at
    ``2**d - 1 + p`` (column 0 and a NaN threshold where the tree has no node)."""

    depth: np.ndarray  # (trees,) levels of each tree
    column: np.ndarray  # (trees, 2**max depth - 1) int32 (a table of every tree: kept narrow)
    threshold: np.ndarray  # (trees, 2**max depth - 1) in the comparison dtype
    columns: list[Column]
    groups: list[Group]
    binned: dict = dataclasses.field(default_factory=dict)  # bins() by its arguments

    @property
    def num_trees(self) -> int:
        return len(self.depth)


@remembered
def recognise(forest: hir.Forest) -> LevelFacts | str:
    """The :class:`LevelFacts` of ``forest``, or why the levelwise form cannot run it (a string
    naming the first tree that breaks a rule)."""
    groups = summed_groups(forest)
    if isinstance(groups, str):
        return groups
    trees = forest.trees
    thr_dtype = np.dtype(forest.threshold_dtype)
    n = nodes_of(forest)
    left, right, levels, tree_of = n.left, n.right, n.levels, n.tree_of
    if len(levels) - 1 > MAX_DEPTH:
        return f"tree {int(tree_of[levels[MAX_DEPTH + 1][0]])} is deeper than {MAX_DEPTH} levels"
    feature, threshold, op, nan_left, zero = n.feature, n.threshold, n.op, n.nan_left, n.zero
    inner = left >= 0
    why = first_broken(split_checks(n, slice(None), inner), tree_of)
    if why is not None:
        return why
    path, level_of = path_bits(left, right, levels)
    splits = np.flatnonzero(inner)
    depth = np.zeros(len(trees), np.int64)
    np.maximum.at(depth, tree_of[splits], level_of[splits] + 1)
    # x <= t iff not x >= next(t): right iff x >= next(t) (the largest finite t: next is +inf).
    t_prime = threshold[splits]
    le = op[splits] == int(Op.LE)
    with np.errstate(over="ignore"):
        t_prime[le] = np.nextafter(t_prime[le], thr_dtype.type(np.inf))
    # Columns by kind (each kind one copying loop), then feature, as the symmetric form's, but
    # missing values stay NaN in every column: a node's direction for them is its own (the
    # NAN_RIGHT bit of its column entry), so a feature is one column, not one a direction,
    # and a lane picks its value from half as many.
    keys = np.stack([zero[splits].astype(np.int64), feature[splits]], 1)
    kinds, column_of = np.unique(keys, axis=0, return_inverse=True)
    columns = [Column(int(f), False, bool(z)) for z, f in kinds.tolist()]
    entry = column_of.reshape(-1) | np.where(nan_left[splits], 0, NAN_RIGHT)
    D = max(1, int(depth.max()))
    width = (1 << D) - 1
    column = np.zeros((len(trees), width), np.int32)
    thr = np.full((len(trees), width), np.nan, thr_dtype)
    slot = (1 << level_of[splits]) - 1 + path[splits]
    column[tree_of[splits], slot] = entry
    thr[tree_of[splits], slot] = t_prime
    for g in groups:
        g.depth = int(depth[g.trees].max())
    return group_programs_refused(groups) or LevelFacts(depth, column, thr, columns, groups)


@dataclasses.dataclass
class Binning:
    """A forest's levelwise facts on byte columns (:func:`bins`)."""

    facts: LevelFacts  # its columns byte columns, node entries naming them
    thresholds: list[np.ndarray]  # each byte column's thresholds, sorted
    tbin: np.ndarray  # each node's threshold as a bin (as facts.column)


def bins(facts: LevelFacts, max_depth: int = 8, max_bins: int = 254) -> Binning | str:
    """The forest on byte columns, or why its paths do not fit a byte.  A value's bin in a byte
    column is 1 + its count of the column's thresholds at or below it (0: missing), so
    ``x >= t'`` iff ``bin(x) >= rank(t') + 2``: bins 1-255 for at most ``max_bins`` thresholds.
    A feature with more is several byte columns, its thresholds in runs of ``max_bins`` (a node
    reads the run holding its threshold).  Paths fit a byte where trees have at most
    ``max_depth`` levels.  Padding nodes (NaN thresholds) get bin 255: their outcome does not
    matter (the leaf tables fill every index below a leaf)."""
    key = (max_depth, max_bins)
    if key not in facts.binned:  # asked by every cost estimate of a compile
        facts.binned[key] = _bins(facts, max_depth, max_bins)
    return facts.binned[key]


def _bins(facts: LevelFacts, max_depth: int, max_bins: int) -> Binning | str:
    if int(facts.depth.max()) > max_depth:
        return f"trees deeper than {max_depth} levels"
    # The real nodes' entries, grouped by column (the tables' copies and masks, a column at a
    # time, were most of a large forest's compile memory).
    real = np.flatnonzero(~np.isnan(facts.threshold).reshape(-1))
    column = facts.column.reshape(-1)[real] & (NAN_RIGHT - 1)
    order = np.argsort(column, kind="stable")
    bounds = np.searchsorted(column[order], np.arange(len(facts.columns) + 1))
    entry = np.zeros_like(facts.column)
    thresholds, columns = [], []
    tbin = np.full(facts.threshold.shape, 255, np.uint8)
    for u, col in enumerate(facts.columns):
        at = real[order[bounds[u]:bounds[u + 1]]]
        t = facts.threshold.reshape(-1)[at]
        values = np.unique(t)
        rank = np.searchsorted(values, t)
        first = len(columns)
        for lo in range(0, max(1, len(values)), max_bins):
            thresholds.append(values[lo:lo + max_bins])
            columns.append(col)
        tbin.reshape(-1)[at] = rank % max_bins + 2
        entry.reshape(-1)[at] = (first + rank // max_bins) | (facts.column.reshape(-1)[at] & NAN_RIGHT)
    binned = LevelFacts(facts.depth, entry, facts.threshold, columns, facts.groups)
    return Binning(binned, thresholds, tbin)


__all__ = ["LevelFacts", "Binning", "recognise", "bins", "MAX_DEPTH", "NAN_RIGHT"]

"""The mask-table form of bitvector evaluation: for large trees over few features (LightGBM's
leaf-wise trees of 255 leaves on taxi-like data: 5 features), one row at a time.

A tree's node outcomes on one feature depend only on that feature's value, and only through its
*key*: how many of the feature's distinct thresholds (over the whole forest) are ``<= x``, or
``K + 1`` for NaN.  So the bits a row leaves standing are, per tree, the AND over the tree's
features of a mask looked up by the key: ``mask[cmap[entry, key(x_f)]]``, where an entry is a
(tree, feature) pair, ``cmap`` sends each key to the prefix AND of the masks of the feature's
nodes with thresholds at or below it (nodes sorted by threshold: the first ``j`` of them are
the ones that row goes right at), and NaN to the AND over the nodes whose missing values go
right.  The exit leaf is the leftmost bit still set, as in :mod:`.bitvector` (leaf ``k`` from
the left is bit ``63 - k % 64`` of word ``k // 64``).

A row costs a few loads and one AND of a 256-bit mask a feature the tree uses, whatever its
node count: measured 1.6-2x cheaper than the narrow looped form on 255-leaf trees over 5
features, and dearer on small trees or trees over many features (:func:`estimate_ns`).  Rows
are taken in blocks of up to ``block_rows`` (an option, :mod:`.options`; tree by tree, rows inner), so a tree's tables
(about 11 KiB at 255 leaves) are read once a block, and the next tree's are prefetched a cache
line a row: on taxi 1000x255 (tables from L3) blocks of 512 rows ran 1.2x slower than blocks
of 4096, and blocks of 32 rows 2x slower than 512 (C prototype, Zen 4).  The keys of a block's
rows are found once, by a branchless binary search of the feature's sorted thresholds.

Exact as the other forms: ``x >= g`` (``g`` the threshold of ``x < t`` splits, or the next
value above ``t`` for ``x <= t``) holds iff more than the index of ``g`` thresholds are ``<= x``;
LightGBM's NaN-or-not splits (``x <= +inf``) send every number left (no key reaches them) and
NaN as missing values go.  Categorical splits are entries of their own: the key of
a categorical feature is its category (as the forest's rule makes one of ``x``) below the
feature's rows, ``rows`` for NaN and ``rows + 1`` for no category, and its masks are one a key,
the AND over the entry's nodes that key goes right at (not in the node's set; NaN as missing
values go); a feature split both ways has both keys.  Features with more than
:data:`MAX_KEYS` thresholds or categories use the other forms.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir import hir, lir
from silvanforge.ir.hir import Op
from silvanforge.ir.lir import (Assign, Bin, Buffer, Builder, Cast, Clz, Cmp, For, IsNan, Load, PackBits, Prefetch,
                               Select, Store)
from silvanforge.lowering.walksetup import thread_info
from silvanforge.plan.memo import memoised
from silvanforge.lowering.walkcost import WALK_STEP_NS

from .leafbits import MAX_WORDS, WORD, all_left_masks, leaf_spans
from .options import DEFAULT
from .support import tree_nodes

# Keys are 16-bit (K + 2 of them a feature); features with more thresholds than this keep the
# other forms (LightGBM's max_bin is 255, XGBoost's 256).
MAX_KEYS = 1024
MIN_BLOCK_ROWS = 256
# The block's keys and sums live on the stack: at most this many bytes of each.
MAX_BLOCK_BYTES = 64 * 1024
# Cost, ns a tree a row (Zen 4, 1 thread; taxi-shaped LightGBM models of 255 leaves over 5
# features, 100 and 1000 trees, 256 to 4096 rows; 31 leaves cost about as much): a tree, an
# entry, a cache line of a tree's tables for each row sharing it (the
# tables are read once a block: 1000 trees' do not fit L2), at most MISS_CAP; a binary-search
# step of one feature's key, a row.
TREE_NS, ENTRY_NS, LINE_NS, MISS_CAP_NS, KEY_STEP_NS = 1.0, 0.6, 9.0, 3.2, 0.6
# A call of fewer rows than a block shares a tree's lines among fewer rows: a row then pays up to
# a line of the key map and one of the masks an entry (missed: ROW_LINE_NS each) rather than
# MISS_CAP_NS.  Calls of 16-256 rows on 1000-tree, 255-leaf categorical LightGBM models
# (flight- and taxizone-shaped, 8.7-29 MB of masks) cost 30-77 ns a tree a row, 2-6x the node
# forms, where the capped estimate had them cheaper.
ROW_LINE_NS = 4.5
# ... unless the forest's tables stay in the last-level cache between calls (at most
# RESIDENT_TABLE_BYTES, half of the 32 MiB L3 these were measured on): then a call pays about
# RESIDENT_ENTRY_NS an entry of each tree, shared by its rows, over what the block's rows pay.
# Measured (1 thread, this form against the node forms lowered for 16 and 64 rows, rows of the
# training data's distribution, a 2-vCPU Zen 4 VM): taxi 1000x255 (13 MB of tables, 5 entries a
# tree) 13.5 / 10.5 / 6.6 ns a tree a row at 8 / 16 / 64 rows against the node forms' best
# 21.2 / 10.6 / 10.0; taxiclean 100x255 (1.3 MB) 16.1 / 9.3 / 5.9 against 31.1 / 11.5 / 8.6;
# insurance 100x255 (2 MB, 14.8 entries) 23.5 / 14.1 at 16 / 64 rows against 14.4 / 10.4 (the
# node forms, as estimated); flight 1000x255 (38 MB) 35-43 at 16-64 rows: not resident.
RESIDENT_TABLE_BYTES = 16 << 20
RESIDENT_ENTRY_NS = 16.0


@dataclasses.dataclass
class _Shape:
    """What the choice needs, from one pass over the nodes: per used feature (sorted) its
    distinct ``x >= g`` thresholds; the most features a tree reads; internal nodes."""

    thresholds: dict[int, np.ndarray]
    entries: int
    nodes: int
    tree_entries: np.ndarray  # features each tree reads
    # Categorical features: their rows (1 + the largest category a split names); a feature
    # split both ways has a numeric and a categorical key.
    categories: dict[int, int] = dataclasses.field(default_factory=dict)
    # The bytes of the tables :func:`tables` builds (found without building them): each tree's
    # entries' feature slots and key maps (every tree as many entries as the most a tree has),
    # the masks and the leaves (the features' search rows and the trees' offsets, a few KiB, left out)
    table_bytes: int = 0

    @property
    def counts(self) -> np.ndarray:
        return np.array([len(v) for v in self.thresholds.values()], np.int64)

    @property
    def keys(self) -> int:
        """Keys a feature's map has at most: K + 2 (numeric), rows + 2 (categorical)."""
        return max(int(self.counts.max(initial=0)), max(self.categories.values(), default=0)) + 2


def _shape(forest: hir.Forest) -> _Shape:
    """The forest's mask-table shape, made once a forest within a compile."""
    return memoised(forest, "masktables.shape", lambda: _make_shape(forest))


def _make_shape(forest: hir.Forest) -> _Shape:
    dtype = np.dtype(forest.threshold_dtype)
    every = [t.left >= 0 for t in forest.trees]
    all_features = np.concatenate([t.feature[m] for t, m in zip(forest.trees, every)] or [np.zeros(0, np.int32)])
    all_trees = np.repeat(np.arange(forest.num_trees), [int(m.sum()) for m in every])
    # an entry is (tree, feature, categorical or not): a feature split both ways has two keys
    all_kinds = np.concatenate([t.categorical_mask()[m] for t, m in zip(forest.trees, every)] or [np.zeros(0, bool)])
    categories: dict[int, int] = {}
    for t in forest.trees:
        for node, cats in t.categories.items():
            f = int(t.feature[node])
            categories[f] = max(categories.get(f, 1), int(cats.max(initial=-1)) + 1)
    internal = [(t.left >= 0) & ~t.categorical_mask() if t.categories else t.left >= 0 for t in forest.trees]
    feature = np.concatenate([t.feature[m] for t, m in zip(forest.trees, internal)] or [np.zeros(0, np.int32)])
    thr = np.concatenate([t.threshold[m] for t, m in zip(forest.trees, internal)] or [np.zeros(0)]).astype(dtype)
    op = np.concatenate([t.op[m] for t, m in zip(forest.trees, internal)] or [np.zeros(0, np.uint8)])
    g, never = _as_ge(thr, op, dtype)
    f, v = feature[~never].astype(np.int64), g[~never]
    order = np.lexsort((v, f))
    f, v = f[order], v[order]
    new = np.ones(len(f), bool)
    new[1:] = (f[1:] != f[:-1]) | (v[1:] != v[:-1])
    used, starts = np.unique(f[new], return_index=True)
    distinct = v[new]
    bounds = list(starts) + [len(distinct)]
    found = {int(u): distinct[bounds[k]:bounds[k + 1]] for k, u in enumerate(used)}
    # A feature split only at ``<= +inf`` has no thresholds, but a key still: NaN's.
    thresholds = {int(u): found.get(int(u), distinct[:0]) for u in np.unique(feature)}
    pairs = np.unique((all_trees.astype(np.int64) * (forest.num_features + 1) + all_features) * 2 + all_kinds)
    tree_entries = np.bincount(pairs // (2 * (forest.num_features + 1)), minlength=forest.num_trees)
    # The rows of masks :func:`tables` builds: a tree's padding row; a numeric entry's, one a node
    # and two; a categorical entry's, one a key (its feature's rows and two more)
    keyed = pairs[pairs % 2 == 1] // 2 % (forest.num_features + 1)
    masks = forest.num_trees + int((~all_kinds).sum()) + 2 * int((pairs % 2 == 0).sum()) + \
        sum(categories.get(int(f), 1) + 2 for f in keyed.tolist())
    shape = _Shape(thresholds, int(tree_entries.max(initial=0)), len(all_features), tree_entries, categories)
    leaves = sum(t.num_leaves for t in forest.trees) * np.dtype(forest.accumulate_dtype).itemsize
    shape.table_bytes = forest.num_trees * shape.entries * (shape.keys * 2 + 4) + masks * words(forest) * 8 + leaves
    return shape


def _as_ge(thr: np.ndarray, op: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Thresholds (of ``dtype``) as ``x >= g`` (goes right), and which nodes no number reaches
    (``x <= +inf``)."""
    g = thr.astype(dtype)
    le = op == int(Op.LE)
    never = le & (g == np.inf)
    with np.errstate(over="ignore"):
        g[le] = np.nextafter(g[le], dtype.type(np.inf))
    return g, never


def unsupported(forest: hir.Forest, shape: _Shape | None = None, most: int = DEFAULT.block_rows) -> str | None:
    """Why this form cannot run the forest (beyond :func:`.bitvector.unsupported`), or None."""
    if forest.aggregation is not hir.Aggregation.SUM:
        return "its trees are averaged (the node forms divide the sum; the tables' blocks do not)"
    shape = shape or _shape(forest)
    counts = shape.counts
    if not len(counts) and not shape.categories:
        return "it has no splits"
    if counts.max(initial=0) > MAX_KEYS:
        return f"a feature has more than {MAX_KEYS} distinct thresholds"
    if max(shape.categories.values(), default=0) > MAX_KEYS:
        return f"a categorical feature has categories past {MAX_KEYS}"
    if block_rows(forest, shape, most) < MIN_BLOCK_ROWS:
        return "its features or outputs are too many for blocks of rows on the stack"
    return None


def block_rows(forest: hir.Forest, shape: _Shape | None = None, most: int = DEFAULT.block_rows) -> int:
    """Rows a block: ``most`` (the ``block_rows`` option), fewer where their keys (2 bytes a used
    feature) or sums would pass :data:`MAX_BLOCK_BYTES`."""
    shape = shape or _shape(forest)
    used = max(1, len(shape.thresholds) + len(shape.categories))
    sums = forest.num_outputs * np.dtype(forest.accumulate_dtype).itemsize
    fit = min(most, MAX_BLOCK_BYTES // (2 * used), MAX_BLOCK_BYTES // sums)
    return 1 << (max(1, fit).bit_length() - 1)


def words(forest: hir.Forest) -> int:
    leaves = max((t.num_leaves for t in forest.trees), default=1)
    w = -(-leaves // WORD)
    return 1 << (w - 1).bit_length()  # a power of two: one vector


def choose(forest: hir.Forest, batch_size: int | None = None, most: int = DEFAULT.block_rows) -> float | None:
    """:func:`estimate_ns`, or None where the form cannot run: one pass over the nodes."""
    shape = _shape(forest)
    return None if unsupported(forest, shape, most) is not None else estimate_ns(forest, batch_size, shape, most)


def tree_costs_ns(forest: hir.Forest, batch_size: int | None = None, most: int = DEFAULT.block_rows) -> np.ndarray:
    """Each tree's share of :func:`estimate_ns` (as if it were padded to no other tree's
    entries): what the per-tree choice of :func:`.bitvector.choice` compares."""
    shape = _shape(forest)
    keys = shape.keys
    nodes = tree_nodes(forest)
    lines = (shape.tree_entries * keys * 2 + (nodes + 2 * shape.tree_entries) * words(forest) * 8) / 64
    block = block_rows(forest, shape, most)
    rows = min(block, batch_size or most)
    missed = np.minimum(miss_cap_ns(shape.tree_entries, rows, block), LINE_NS * lines / rows)
    if shape.table_bytes <= RESIDENT_TABLE_BYTES:
        missed = np.minimum(missed, resident_ns(shape.tree_entries, lines, rows, block))
    return TREE_NS + ENTRY_NS * shape.tree_entries + missed


def miss_cap_ns(entries, rows: int, block: int):
    """The most a row pays a tree for the lines of its tables (``entries``: the tree's, or
    trees'): :data:`MISS_CAP_NS` where calls fill a block (the lines are read once a block),
    up to two missed lines an entry as a call has fewer rows than a block (a few rows share
    almost nothing)."""
    short = max(0.0, 1.0 - rows / block)
    return np.maximum(MISS_CAP_NS, ROW_LINE_NS * 2 * np.asarray(entries, np.float64) * short)


def resident_ns(entries, lines, rows: int, block: int):
    """What a row pays a tree for the lines of its tables where the forest's tables stay in the
    last-level cache between calls (:data:`RESIDENT_TABLE_BYTES`): a block's share of them, and
    :data:`RESIDENT_ENTRY_NS` an entry a call, shared by the call's rows, where it fills no block."""
    return LINE_NS * np.asarray(lines, np.float64) / block + \
        RESIDENT_ENTRY_NS * np.asarray(entries, np.float64) * max(0.0, 1.0 / rows - 1.0 / block)


def estimate_ns(forest: hir.Forest, batch_size: int | None = None, shape: _Shape | None = None,
                most: int = DEFAULT.block_rows) -> float:
    """Estimated ns a row of this form's kernel (:data:`TREE_NS` and the others)."""
    shape = shape or _shape(forest)
    counts = shape.counts
    steps = int(counts.max(initial=0) + 1).bit_length()
    W, F = words(forest), shape.entries
    keys = shape.keys
    lines = (F * keys * 2 + (shape.nodes / forest.num_trees + 2 * F) * W * 8) / 64
    block = block_rows(forest, shape, most)
    rows = min(block, batch_size or most)
    missed = min(float(miss_cap_ns(F, rows, block)), LINE_NS * lines / rows)
    if shape.table_bytes <= RESIDENT_TABLE_BYTES:
        missed = min(missed, float(resident_ns(F, lines, rows, block)))
    per_tree = TREE_NS + ENTRY_NS * F + missed
    # a categorical key: a range check and a select, about two search steps
    return forest.num_trees * per_tree + KEY_STEP_NS * (steps * len(counts) + 2 * len(shape.categories))


def tables(forest: hir.Forest) -> dict[str, np.ndarray]:
    """The model buffers: each used feature's thresholds (NaN-padded rows for the search) and
    NaN key; per tree, ``F`` entries (its features, padded with entries whose every key maps to
    the all-ones mask) of feature slot and key map; the masks (row 0 all ones), the leaves in
    leaf order, each tree's first leaf and output, the base scores.  Every tree at once, in
    numpy steps over all nodes (a loop over trees and their entries took half a second of a
    1000-tree categorical model's compile)."""
    shape = _shape(forest)
    by_feature = shape.thresholds
    if not by_feature and not shape.categories:  # stumps only: one feature without thresholds,
        by_feature = {0: np.empty(0, forest.threshold_dtype)}  # so padding entries' keys are set
    # Numeric features first (keys by search), then categorical ones (keys by category).
    cats = sorted(shape.categories)
    used = list(by_feature) + cats
    # a categorical feature's "count": its rows (keys 0..rows-1 its categories, rows NaN's,
    # rows + 1 no category's)
    counts = np.array([len(by_feature[f]) for f in by_feature] + [shape.categories[f] for f in cats], np.int64)
    numeric = len(by_feature)
    steps = max(1, int(counts[:numeric].max(initial=0)).bit_length())
    width = 2**steps - 1
    search = np.full((max(1, len(used)), width), np.nan, forest.threshold_dtype)
    for u, f in enumerate(used[:numeric]):
        search[u, :counts[u]] = by_feature[f]
    keys = shape.keys
    T, F, W = forest.num_trees, max(1, shape.entries), words(forest)
    spans = leaf_spans(forest)
    leaf_values = [t.leaf_value[spans[k][0], 0] for k, t in enumerate(forest.trees)]
    leaf_base = np.concatenate([[0], np.cumsum([len(v) for v in leaf_values])])[:-1]

    # Every internal node of every tree: its tree, feature, kind, and the mask clearing its left
    # leaves' bits (the nodes in tree order, each tree's in node order).
    trees = forest.trees
    internal = [np.flatnonzero(t.left >= 0) for t in trees]
    tree = np.repeat(np.arange(T), [len(i) for i in internal])
    cat_of = [t.categorical_mask()[i] if t.categories else np.zeros(len(i), bool) for t, i in zip(trees, internal)]
    kind = np.concatenate(cat_of or [np.zeros(0, bool)])
    feature = np.concatenate([t.feature[i] for t, i in zip(trees, internal)] or [np.zeros(0, np.int32)]).astype(np.int64)
    first = np.concatenate([spans[k][1][t.left[i]] for k, (t, i) in enumerate(zip(trees, internal))] or [np.zeros(0, np.int64)])
    last = np.concatenate([spans[k][2][t.left[i]] for k, (t, i) in enumerate(zip(trees, internal))] or [np.zeros(0, np.int64)])
    default_left = np.concatenate([t.default_left[i] for t, i in zip(trees, internal)] or [np.zeros(0, bool)])
    hits, masks_w = all_left_masks(first, last, W)
    clear = np.where(hits, masks_w, -1).T  # (nodes, words)
    # Each numeric node's index among its feature's thresholds, plus one: a key reaches it (the
    # row goes right) iff key >= index; never-reached nodes get K + 1.
    slot = np.zeros((2, max(used, default=0) + 1), np.int64)
    slot[0, list(by_feature)] = np.arange(numeric)
    slot[1, cats] = numeric + np.arange(len(cats))
    u = slot[kind.astype(np.int64), feature]
    index = np.zeros(len(tree), np.int64)
    num = np.flatnonzero(~kind)
    thr = np.concatenate([t.threshold[i] for t, i in zip(trees, internal)] or [np.zeros(0)])[num]
    op = np.concatenate([t.op[i] for t, i in zip(trees, internal)] or [np.zeros(0, np.uint8)])[num]
    with np.errstate(invalid="ignore"):
        g, never = _as_ge(thr, op, np.dtype(forest.threshold_dtype))
    for f in np.unique(feature[num]).tolist():
        on = feature[num] == f
        index[num[on]] = np.searchsorted(by_feature[f], g[on]) + 1
    index[num[never]] = counts[u[num[never]]] + 1

    # Entries: a tree's (feature, kind) pairs in order; their nodes by threshold index (ties
    # in node order), as the prefix masks take them.
    order = np.lexsort((np.arange(len(tree)), np.where(kind, 0, index), kind, feature, tree))
    local_node = np.concatenate(internal or [np.zeros(0, np.int64)])[order]
    tree, kind, feature, u, index, clear, default_left = (a[order] for a in (tree, kind, feature, u, index, clear,
                                                                             default_left))
    new = np.ones(len(tree), bool)
    new[1:] = (tree[1:] != tree[:-1]) | (feature[1:] != feature[:-1]) | (kind[1:] != kind[:-1])
    starts = np.flatnonzero(new)
    entry = np.cumsum(new) - 1  # each node's entry
    m = np.diff(np.append(starts, len(tree)))  # nodes an entry
    e_tree, e_kind, e_u = tree[starts], kind[starts], u[starts]
    tree_first_entry = np.searchsorted(e_tree, np.arange(T))
    e_j = np.arange(len(starts)) - tree_first_entry[e_tree]
    # Rows of masks: a tree's padding row (all ones), then an entry's: numeric, its prefix ANDs
    # (all ones, then one a node) and its NaN mask; categorical, one a key.
    e_rows = np.where(e_kind, counts[e_u] + 2, m + 2)
    tree_rows = 1 + np.bincount(e_tree, weights=e_rows, minlength=T).astype(np.int64)
    tree_start = np.concatenate([[0], np.cumsum(tree_rows)])
    rows = int(tree_start[-1])
    within = np.cumsum(e_rows) - e_rows - np.concatenate([[0], np.cumsum(e_rows)])[tree_first_entry[e_tree]]
    at = 1 + within  # an entry's first row, from its tree's
    e_start = tree_start[e_tree] + at
    masks = np.full((rows, W), -1, np.int64)
    feat = np.zeros((T, F), np.int32)
    feat[e_tree, e_j] = e_u
    cmap = np.zeros((T, F, keys), np.int16)  # padding entries: the tree's row 0
    pos = np.arange(len(tree)) - starts[entry]  # a node's place in its entry

    numeric_entries = np.flatnonzero(~e_kind)
    if len(numeric_entries):
        nodes = np.flatnonzero(~kind)
        row = e_start[entry[nodes]] + 1 + pos[nodes]
        # The prefix ANDs of every entry's rows at once, in doubling steps (each row ANDs the row
        # ``step`` back in its entry, as the last step left them): as many steps as the bits of
        # an entry's node count, not one a node's place.  The nodes lie entry by entry, in place
        # order, so the node ``step`` back in its entry is ``step`` back here: whole-array slices
        # rather than gathers and scatters of the mask rows (those took about a tenth of the
        # tables' time on 1000 categorical trees of 255 leaves).
        place = pos[nodes]
        prefix = clear[nodes]
        step, top = 1, int(place.max(initial=0))
        while step <= top:
            prefix[step:] &= np.where(place[step:, None] >= step, prefix[:-step], -1)
            step *= 2
        masks[row] = prefix
        nan = np.where(~default_left[nodes, None], clear[nodes], -1)
        nan_starts = np.searchsorted(entry[nodes], numeric_entries)
        masks[e_start[numeric_entries] + m[numeric_entries] + 1] = np.bitwise_and.reduceat(nan, nan_starts, axis=0)
        # key -> the prefix row of the nodes with index <= key; NaN's key -> the NaN mask
        local = np.searchsorted(numeric_entries, entry[nodes])
        reached = np.zeros((len(numeric_entries), keys + 1), np.int64)
        np.add.at(reached, (local, np.minimum(index[nodes], keys)), 1)
        reached = np.cumsum(reached, axis=1)[:, :keys]
        k_count = counts[e_u[numeric_entries]]
        key = np.arange(keys)
        at_n = at[numeric_entries][:, None]
        table = np.where(key <= k_count[:, None], (at_n + reached) * W, 0)
        table = np.where(key == k_count[:, None] + 1, (at_n + m[numeric_entries][:, None] + 1) * W, table)
        cmap[e_tree[numeric_entries], e_j[numeric_entries]] = table

    cat_entries = np.flatnonzero(e_kind)
    if len(cat_entries):
        # A mask a key: the AND over the entry's nodes that key goes right at (not in the node's
        # set; NaN (key R) as missing values go; no category (R + 1) right), a feature at a
        # time, a word at a time, a node's place at a time; only the words a node clears bits
        # of (its left leaves': one or two of a 255-leaf tree's four), the rest all ones.
        nodes = np.flatnonzero(kind)
        sets = [trees[t].categories[n] for t, n in zip(tree[nodes].tolist(), local_node[nodes].tolist())]
        for cu in np.unique(e_u[cat_entries]).tolist():
            R = int(counts[cu])
            mine = nodes[u[nodes] == cu]
            mine_sets = [sets[i] for i in np.flatnonzero(u[nodes] == cu).tolist()]
            ents = entry[mine]
            first_e = np.unique(ents)
            table = np.full((W, len(first_e), R + 2), -1, np.int64)
            local = np.searchsorted(first_e, ents)
            place = pos[mine]
            right = np.ones((len(mine), R + 2), bool)
            right[np.repeat(np.arange(len(mine)), [len(c) for c in mine_sets]),
                  np.concatenate(mine_sets + [np.zeros(0, np.int64)]).astype(np.int64)] = False
            right[:, R] = ~default_left[mine]
            mine_clear = clear[mine]
            for w in range(W):
                clears = np.flatnonzero(mine_clear[:, w] != -1)
                for p in np.unique(place[clears]).tolist():
                    here = clears[place[clears] == p]
                    table[w, local[here]] &= np.where(right[here], mine_clear[here, w, None], -1)
            rows_of = e_start[first_e][:, None] + np.arange(R + 2)
            masks[rows_of] = table.transpose(1, 2, 0)
            cmap[e_tree[first_e][:, None], e_j[first_e][:, None], np.arange(R + 2)] = \
                (at[first_e][:, None] + np.arange(R + 2)) * W
    per_output = np.array([t.outputs[0] for t in forest.trees], np.int32)
    return {
        "mt_used": np.array(used, np.int32).reshape(len(used)),
        "mt_search": search.reshape(-1),
        "mt_nan_key": np.concatenate([counts[:numeric] + 1, counts[numeric:]]).astype(np.int16).reshape(len(used)),
        "mt_numeric": np.array([numeric], np.int32),
        "mt_feat": feat.reshape(-1),
        "mt_cmap": cmap.reshape(-1),
        "mt_mask": masks.reshape(-1),
        "mt_leaf": np.concatenate(leaf_values).astype(forest.accumulate_dtype),
        "mt_leaf_base": leaf_base.astype(np.int32),
        "mt_mask_start": (tree_start * W).astype(np.int32),
        "mt_output": per_output,
        "mt_base": np.asarray(forest.base_score, forest.accumulate_dtype).reshape(forest.num_outputs),
        "_steps": np.array([steps, width, keys, F, W], np.int64),
    }


def lower(forest: hir.Forest, batch_size: int | None = None, most: int = DEFAULT.block_rows) -> lir.Module:
    """The LIR module of the mask-table form (see the module's docstring): every tree, summed."""
    thr_t = lir.lir_type(forest.threshold_dtype)
    acc_t = lir.lir_type(forest.accumulate_dtype)
    buffers = {"rows": Buffer("rows", thr_t, "input"), "margins": Buffer("margins", acc_t, "output")}
    fn = function(forest, buffers, most=most)
    module = lir.Module(
        functions=[fn], buffers=buffers, num_features=forest.num_features, num_outputs=forest.num_outputs,
        input_type=thr_t, output_type=acc_t,
        info={"summary": f"rep=bitvector form=mask-tables trees={forest.num_trees} outputs={forest.num_outputs} "
                         f"entries={_shape(forest).entries} words={words(forest)}x{WORD}-bit "
                         f"block={block_rows(forest, most=most)}",
              "rep": "bitvector", "light_optimisation": False,
              **thread_info(round(estimate_ns(forest, batch_size, most=most) / WALK_STEP_NS))})
    lir.verify(module)
    return module


def function(forest: hir.Forest, buffers: dict, exits: np.ndarray | None = None,
             most: int = DEFAULT.block_rows) -> lir.Function:
    """The phase evaluating every tree of ``forest`` (its model buffers and locals are added to
    ``buffers``).  ``exits`` None: each row's margins, summed in model order from the base
    scores.  Else the trees are some of a larger forest's (:func:`.bitvector.lower`'s mixed
    form): ``exits[k]`` is tree ``k``'s first leaf in that forest's leaf array, and the phase
    writes each tree's exit leaf there, as an i32, to the scratch buffer ``mt_exits`` (a row's
    trees in order), for the other phase to sum with its own trees'."""
    c, i64, i32, i16 = Builder.const, "i64", "i32", "i16"
    thr_t = lir.lir_type(forest.threshold_dtype)
    acc_t = lir.lir_type(forest.accumulate_dtype)
    b = Builder(buffers)
    data = tables(forest)
    steps, width, keys, F, W = (int(v) for v in data.pop("_steps"))
    numeric = int(data.pop("mt_numeric")[0])  # used features searched; the rest categorical
    if exits is not None:
        data["mt_leaf_base"] = np.asarray(exits, np.int32).reshape(forest.num_trees)
        for unused in ("mt_leaf", "mt_output", "mt_base"):
            del data[unused]
    for name, array in data.items():
        b.buffer(name, array)
    U, C, T, R = len(data["mt_used"]), forest.num_outputs, forest.num_trees, block_rows(forest, most=most)
    buffers["mt_key"] = Buffer("mt_key", i16, "local", size=max(1, U) * R)
    if exits is None:
        buffers["mt_acc"] = Buffer("mt_acc", acc_t, "local", size=R * C)
    else:
        buffers["mt_exits"] = Buffer("mt_exits", i32, "scratch", per_row=T, fill=None)
    buffers["mt_exit"] = Buffer("mt_exit", i64, "local", size=MAX_WORDS)
    row0, r, u, t, o = (b.local(n, i64) for n in ("r0", "r", "u", "t", "o"))
    n = b.local("n", i64)
    body = [Assign(n, Bin("-", Bin("min", Bin("+", row0, c(R, i64)), lir.ROW_END), row0))]

    # Keys: the count of the feature's thresholds <= x (NaN-padded rows: NaN probes never
    # count), NaN's key after them.
    x = b.local("x", thr_t)
    pos = b.local("pos", i64)
    feature = b.local("f", i64)
    search = [Assign(x, Load("rows", Bin("+", Bin("*", Bin("+", row0, r), lir.ROW_STRIDE),
                                         Bin("*", feature, lir.COL_STRIDE)), thr_t)),
              Assign(pos, c(0, i64))]
    for k in reversed(range(steps)):
        probe = Load("mt_search", Bin("+", Bin("+", Bin("*", u, c(width, i64)), pos), c(2**k - 1, i64)), thr_t)
        search.append(Assign(pos, Select(Cmp("<=", probe, x), Bin("+", pos, c(2**k, i64)), pos)))
    key = Select(IsNan(x), Load("mt_nan_key", u, i16), Cast(pos, i16))
    search.append(Store("mt_key", Bin("+", Bin("*", r, c(U, i64)), u), key))
    body.append(For(u, c(0, i64), c(numeric, i64), 1, [
        Assign(feature, Cast(Load("mt_used", u, i32), i64)),
        For(r, c(0, i64), n, 1, search)]))
    if numeric < U:
        # A categorical feature's key: its category where the forest's rule makes x one below
        # the feature's rows, NaN's key (rows) for NaN, rows + 1 for no category (every split
        # sends it right), as the bitvector form's decision tables pick their rows.
        rule = forest.category_rule
        low, low_inside, high = rule.bounds
        rows_u = b.local("cr", i64)
        cat = b.local("cat", i64)
        at_x = Load("rows", Bin("+", Bin("*", Bin("+", row0, r), lir.ROW_STRIDE), Bin("*", feature, lir.COL_STRIDE)), thr_t)
        valid = Bin("&", Cmp(">=" if low_inside else ">", x, Builder.const(low, thr_t)), Cmp("<", x, Builder.const(high, thr_t)))
        keyed = [Assign(x, at_x),
                 Assign(cat, Cast(Select(valid, x, Builder.const(0.0, thr_t)), i64))]
        if rule is hir.CategoryRule.EXACT:
            valid = Bin("&", valid, Cmp("==", Cast(cat, thr_t), x))
        named = Bin("&", valid, Cmp("<", cat, rows_u))
        key = Select(IsNan(x), rows_u, Select(named, cat, Bin("+", rows_u, c(1, i64))))
        keyed.append(Store("mt_key", Bin("+", Bin("*", r, c(U, i64)), u), Cast(key, i16)))
        body.append(For(u, c(numeric, i64), c(U, i64), 1, [
            Assign(feature, Cast(Load("mt_used", u, i32), i64)),
            Assign(rows_u, Cast(Load("mt_nan_key", u, i16), i64)),
            For(r, c(0, i64), n, 1, keyed)]))

    if exits is None:
        body.append(For(r, c(0, i64), n, 1, [
            For(o, c(0, i64), c(C, i64), 1, [Store("mt_acc", Bin("+", Bin("*", r, c(C, i64)), o), Load("mt_base", o, acc_t))])]))

    # Trees, rows inner: each entry's key row and key-map start are hoisted out of the rows.
    vec_t = lir.vector_type(i64, W) if W > 1 else i64
    # Entries of a tree are consecutive: their key-map starts are the first's plus constants
    # (address offsets, not registers: 5 pointers a row spilled otherwise).  Where every tree
    # reads every key (its entries then in one order: feature, kind), an entry's key column is
    # a constant too: the row loop keeps its pointers in registers, not spilled (taxi 1000x255
    # reloaded 8 of them from the stack a row).
    feat = data["mt_feat"].reshape(T, F)
    fixed = bool((feat == feat[:1]).all())
    key_at = [c(int(feat[0, j]), i64) if fixed else b.local("kf", i64) for j in range(F)]
    map0 = b.local("km", i64)
    leaf0, out = b.local("lb", i64), b.local("out", i64)
    tree_head = [Assign(map0, Bin("*", Bin("*", t, c(F, i64)), c(keys, i64)))]
    for j in range(F if not fixed else 0):
        tree_head.append(Assign(key_at[j], Cast(Load("mt_feat", Bin("+", Bin("*", t, c(F, i64)), c(j, i64)), i32), i64)))
    mask0 = b.local("mb", i64)
    tree_head += [Assign(mask0, Cast(Load("mt_mask_start", t, i32), i64)),
                  Assign(leaf0, Cast(Load("mt_leaf_base", t, i32), i64))]
    if exits is None:
        tree_head.append(Assign(out, Cast(Load("mt_output", t, i32), i64)))
    # The next tree's tables, a cache line a row (measured 1.25-1.45x faster on 256-512 rows of
    # taxi 1000x255): its rows pick lines at random, which no
    # hardware prefetcher follows (the tables of 1000 trees are read from L3).
    next_map, next_mask, mask_last = b.local("pm", i64), b.local("pk", i64), b.local("pl", i64)
    nxt = Bin("min", Bin("+", t, c(1, i64)), c(T - 1, i64))
    tree_head += [Assign(next_map, Bin("*", Bin("*", nxt, c(F, i64)), c(keys, i64))),
                  Assign(next_mask, Cast(Load("mt_mask_start", nxt, i32), i64)),
                  Assign(mask_last, Bin("-", Cast(Load("mt_mask_start", Bin("+", nxt, c(1, i64)), i32), i64), c(1, i64)))]
    m = b.local("m", vec_t)

    def mask(j):
        k = Cast(Load("mt_key", Bin("+", key_at[j], Bin("*", r, c(U, i64))), i16), i64)
        row_at = Cast(Load("mt_cmap", Bin("+", Bin("+", map0, k), c(j * keys, i64)), i16), i64)
        return Load("mt_mask", Bin("+", mask0, row_at), vec_t)

    prefetch = [Prefetch("mt_mask", Bin("min", Bin("+", next_mask, Bin("*", r, c(8, i64))), mask_last)),
                Prefetch("mt_cmap", Bin("+", next_map, Bin("min", Bin("*", r, c(32, i64)), c(F * keys - 1, i64))))]
    row = [Assign(m, mask(0))] + [Assign(m, Bin("&", m, mask(j))) for j in range(1, F)]
    # The exit leaf: the leftmost word with a bit set, its leading zeros.
    ex = b.local("ex", i64)
    if W == 1:
        row.append(Assign(ex, Clz(m)))
    else:
        # The first word with a bit set: the lowest set bit of the lanes' "non-zero" bits; its
        # lane of (leading zeros + the word's first leaf) read back through the stack (half
        # the instructions of extracting every word, C prototype).
        nonzero = b.local("nz", i32)
        row.append(Assign(nonzero, PackBits(Cmp("!=", m, Builder.const(0, vec_t), lir.vector_type("i1", W)))))
        lowest = Bin("&", nonzero, Bin("-", c(0, i32), nonzero))
        first = Cast(Bin("-", c(31, i32), Clz(lowest)), i64)
        starts = lir.Vector(tuple(c(WORD * w, i64) for w in range(W)))
        row.append(Store("mt_exit", c(0, i64), Bin("+", Clz(m), starts)))
        row.append(Assign(ex, Load("mt_exit", first, i64)))
    if exits is None:
        at = Bin("+", Bin("*", r, c(C, i64)), out)
        row.append(Store("mt_acc", at, Bin("+", Load("mt_acc", at, acc_t), Load("mt_leaf", Bin("+", leaf0, ex), acc_t))))
    else:
        row.append(Store("mt_exits", Bin("+", Bin("*", Bin("+", row0, r), c(T, i64)), t), Cast(Bin("+", leaf0, ex), i32)))
    # Rows past the next tree's last line (its masks' and key maps', a line a row) prefetch
    # nothing: a second loop leaves the prefetches and their address arithmetic out.
    tree_elements = int(np.diff(data["mt_mask_start"].astype(np.int64)).max(initial=1))
    lines = max(-(-tree_elements // 8), -(-F * keys // 32))
    ahead = Bin("min", n, c(lines, i64))
    body.append(For(t, c(0, i64), c(T, i64), 1, tree_head + [For(r, c(0, i64), ahead, 1, prefetch + row),
                                                               For(r, ahead, n, 1, row)]))

    if exits is None:
        body.append(For(r, c(0, i64), n, 1, [
            For(o, c(0, i64), c(C, i64), 1, [
                Store("margins", Bin("+", Bin("*", Bin("+", row0, r), c(C, i64)), o),
                      Load("mt_acc", Bin("+", Bin("*", r, c(C, i64)), o), acc_t))])]))
    return lir.Function("predict_mask_tables", [For(row0, lir.ROW_BEGIN, lir.ROW_END, R, body)],
                        dict(b.locals), parallel="rows", row_parallel=True)

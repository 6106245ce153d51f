"""The plan of the node forms of bitvector evaluation: every tree's nodes per word (threshold,
mask, the column they read), the categorical splits' decision tables and the chunks their words
are gathered in, the narrow form's bins, and the model buffers laid out from it (:func:`layout`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir import hir
from silvanforge.ir import hir_joined
from silvanforge.ir.hir import Op
from silvanforge.plan.memo import memoised

from .choose import LANES
from .leafbits import NARROW_WORD, WORD, all_left_masks, leaf_spans
from .options import DEFAULT
from .support import category_counts, nan_or_not_splits, nan_split_features, used_features

NARROW_BYTE_BINS = 255
NARROW_CAT_WORD = 32  # categorical decision words: two vectors of 32 lanes, not four
# The looped form applies nodes in groups of this many (segments padded with no-op nodes), so
# its inner loop has no remainder to finish.
GROUP = 8
# Narrow segments are short (a 32-bit word's nodes, about 35 on a 255-leaf tree): groups of 4
# pad less (3-5% faster on insurance 100x255 and taxi 1000x255).
NARROW_GROUP = 4
# A block's decision words (:class:`Chunk`) are gathered a chunk of trees at a time, at most
# ``decision_chunk_bytes`` (an option, :mod:`.options`; a word a lane).
CHUNK_BYTES = DEFAULT.decision_chunk_bytes


@dataclasses.dataclass
class Node:
    """One node's test as applied to one word of its tree, then ``word &= mask``.  Numeric: goes
    right iff ``x >= threshold``, ``column`` its feature's column in the block (the copy with
    NaN as +inf where missing values go right).  Categorical (``bit`` non-zero): goes right iff
    ``decision_word & bit`` is 0, ``column`` the decision word's column (:class:`CatFeature`)."""
    column: int
    threshold: float
    mask: int  # signed 64-bit
    bit: int = 0  # signed 64-bit; 0 for numeric nodes

    @property
    def categorical(self) -> bool:
        return self.bit != 0


@dataclasses.dataclass
class Word:
    """The nodes applied to one word of a tree, as arrays (one entry a node, see :class:`Node`;
    ``bit`` 0 marks numeric nodes).  Arrays, not objects: a 1000-tree model of 255 leaves has a
    quarter of a million nodes, planned in numpy in a fraction of a second."""
    column: np.ndarray  # int64
    threshold: np.ndarray  # the comparison dtype
    mask: np.ndarray  # int64
    bit: np.ndarray  # int64

    @property
    def categorical(self) -> np.ndarray:
        return self.bit != 0

    def nodes(self) -> list[Node]:
        return [Node(*n) for n in zip(self.column.tolist(), self.threshold.tolist(),
                                       self.mask.tolist(), self.bit.tolist())]


@dataclasses.dataclass
class PlanTree:
    slot: int  # model index
    output: int
    leaf_base: int  # first of its leaves in the leaf array
    words: list  # per word: its nodes (Word)


@dataclasses.dataclass
class CatFeature:
    """A feature of categorical splits and its decision table: one row of ``words`` words per
    category ``0 .. rows - 1``, then the row for NaN (each node's default direction) and the
    row for values that are no category, or a category no split names (all zero: right).  Each
    of the feature's categorical nodes owns one bit of one column (:class:`Chunk`), set in the
    rows of the categories it sends left.  A block looks up each lane's row once; every
    categorical node is then one AND and one compare, like a numeric one, whatever the size of
    its bitset."""
    feature: int
    rows: int
    words: int
    table_base: int  # first element of its table in bv_cat_table


@dataclasses.dataclass
class Chunk:
    """Consecutive trees (in evaluation order: expanded trees, then looped ones) whose decision
    words are gathered together, just before they run, so that a block's words stay in L1
    (:data:`CHUNK_BYTES`).  ``entries``: per feature with nodes in these trees, (its index in
    ``Plan.cat_features``, first table column, first column in the block's bv_cw, words)."""
    trees: int
    entries: list


@dataclasses.dataclass
class Plan:
    used: list  # features of numeric nodes, in column order
    trees: list  # PlanTree, grouped by output, model order inside each
    leaf_values: np.ndarray  # leaf order
    nan_used: list  # features of NaN-or-not splits (:func:`nan_split_features`)
    cat_features: list  # CatFeature
    cat_table: np.ndarray  # int64, every feature's decision table
    chunks: list  # Chunk, covering every tree when there are categorical splits, else empty
    word_bits: int = WORD  # leaves a word: NARROW_WORD in the narrow form
    node_dtype: np.dtype = np.dtype(np.float64)  # nodes' thresholds: bins (uint8 or int16) when narrow
    bins: np.ndarray | None = None  # narrow: per used feature, its thresholds, NaN-padded (_Bins)
    bin_counts: np.ndarray | None = None  # narrow: per used feature, how many thresholds
    bin_steps: int = 0  # narrow: binary search steps (rows of bins are 2**steps - 1 long)

    @property
    def cat_words(self) -> int:
        """Columns of bv_cw: the most words a chunk gathers."""
        return max((sum(e[3] for e in ch.entries) for ch in self.chunks), default=0)

def _cat_features(forest: hir.Forest, evaluation: list[int], looped_from: int,
                  chunk_words: int, bits: int = WORD) -> tuple[list[CatFeature], np.ndarray, dict, list[Chunk]]:
    """The decision tables (:class:`CatFeature`), each tree's categorical nodes with their
    bv_cw column and bit (arrays, by tree), and the chunks (:class:`Chunk`) of the trees in
    ``evaluation`` order (``evaluation[looped_from:]`` are looped: a chunk never spans both
    forms), each gathering at most ``chunk_words`` words unless one tree needs more."""
    counts = category_counts(forest)
    if not counts:
        return [], np.zeros(1, np.int64), {}, []
    q_of = {f: q for q, f in enumerate(sorted(counts))}
    Q = len(q_of)
    q_lookup = np.zeros(max(q_of) + 1, np.int64)
    q_lookup[list(q_of)] = np.arange(Q)
    # Every categorical node of the trees in evaluation order (a tree's by node): its place in
    # the evaluation, tree, node and feature index q; and each tree's nodes per q.
    place, tree, node = [], [], []
    for i, k in enumerate(evaluation):
        cats = forest.trees[k].categories
        if cats:
            nodes = sorted(cats)
            place.append(np.full(len(nodes), i, np.int64))
            tree.append(np.full(len(nodes), k, np.int64))
            node.append(np.array(nodes, np.int64))
    place, tree, node = (np.concatenate(a) if a else np.zeros(0, np.int64) for a in (place, tree, node))
    q = q_lookup[np.asarray(hir_joined.joined(forest, "feature"), np.int64)[hir_joined.offsets(forest)[tree] + node]]
    per_tree = np.zeros((len(evaluation), Q), np.int64)
    np.add.at(per_tree, (place, q), 1)
    # Chunks: greedy over the evaluation order.
    chunks, bounds, start = [], [], 0
    while start < len(evaluation):
        end, need = start, np.zeros(Q, np.int64)
        while end < len(evaluation) and not (end == looped_from and end > start):
            trial = need + per_tree[end]
            if end > start and int((-(-trial // bits)).sum()) > chunk_words:
                break
            need, end = trial, end + 1
        bounds.append((start, end))
        start = end
    # Columns: per chunk and feature (a group), its nodes' table columns and bv_cw columns, a
    # bit each: the group's j-th node has bit j % bits of its (j // bits)-th word.
    chunk = np.searchsorted([hi for _, hi in bounds], place, side="right")
    order = np.argsort(chunk * Q + q, kind="stable")  # by chunk, feature, tree, node
    key = (chunk * Q + q)[order]
    groups, first, sizes = np.unique(key, return_index=True, return_counts=True)
    j = np.arange(len(order)) - np.repeat(first, sizes)
    words = -(-sizes // bits)
    g_chunk, g_q = groups // Q, groups % Q
    by_q = np.lexsort((g_chunk, g_q))  # a feature's groups in chunk order: its table columns
    table_col = np.zeros(len(groups), np.int64)
    for f_q in range(Q):
        mine = by_q[g_q[by_q] == f_q]
        table_col[mine] = np.cumsum(words[mine]) - words[mine]
    chunk_first = np.searchsorted(g_chunk, g_chunk)  # the chunk's first group
    local = np.cumsum(words) - words
    local -= local[chunk_first]
    for c in range(len(bounds)):
        lo, hi = np.searchsorted(g_chunk, [c, c + 1])
        chunks.append(Chunk(bounds[c][1] - bounds[c][0],
                            [(int(g_q[g]), int(table_col[g]), int(local[g]), int(words[g])) for g in range(lo, hi)]))
    group = np.repeat(np.arange(len(groups)), sizes)
    k_all, node_all, col_all = tree[order], node[order], table_col[group] + j // bits
    bit_all, local_all = j % bits, local[group] + j // bits
    features, tables, base = [], [], 0
    default_left = hir_joined.joined(forest, "default_left")
    for f, f_q in q_of.items():
        rows, width = counts[f][1], int(words[g_q == f_q].sum())
        table = np.zeros((rows + 2, width), np.uint64)
        mine = np.flatnonzero(q[order] == f_q)  # (in chunk order, then tree and node)
        k_, node_, col_ = k_all[mine], node_all[mine], col_all[mine]
        bit = np.uint64(1) << bit_all[mine].astype(np.uint64)
        sets = [forest.trees[k].categories[n] for k, n in zip(k_.tolist(), node_.tolist())]
        set_sizes = np.array([len(c) for c in sets], np.int64)
        if set_sizes.sum():
            np.bitwise_or.at(table, (np.concatenate(sets), np.repeat(col_, set_sizes)), np.repeat(bit, set_sizes))
        left = default_left[hir_joined.offsets(forest)[k_] + node_]
        np.bitwise_or.at(table, (np.full(int(left.sum()), rows), col_[left]), bit[left])
        features.append(CatFeature(f, rows, width, base))
        tables.append(table.reshape(-1))
        base += table.size
    # Each tree's categorical nodes by feature, then node: its bv_cw column and bit (as a signed word).
    signed = np.int64 if bits == WORD else np.int32
    by_tree_order = np.argsort(k_all, kind="stable")
    trees_, tree_first, tree_sizes = np.unique(k_all[by_tree_order], return_index=True, return_counts=True)
    bit_words = (np.uint64(1) << bit_all.astype(np.uint64)).astype(f"uint{bits}").view(signed).astype(np.int64)
    by_tree = {}
    for k, a, n in zip(trees_.tolist(), tree_first.tolist(), tree_sizes.tolist()):
        at = by_tree_order[a:a + n]
        by_tree[k] = (node_all[at], local_all[at], bit_words[at])
    table = np.concatenate(tables)
    return features, (table.view(np.int64) if bits == WORD else table.astype(np.uint32).view(np.int32)), by_tree, chunks


def make_plan(forest: hir.Forest, expanded: np.ndarray | None = None, lanes: int = LANES,
              narrow: bool = False, tabled: np.ndarray | None = None, chunk_bytes: int = CHUNK_BYTES,
              narrow_word: int = NARROW_WORD) -> Plan:
    """Every tree's nodes per word, the columns they read and the leaf values in leaf order;
    ``expanded`` (model order; default none), ``lanes`` and ``chunk_bytes`` (the most bytes of a
    chunk's words) decide the chunks of categorical
    decision words (:class:`Chunk`); ``narrow``: the narrow form (words of ``narrow_word`` bits,
    thresholds as bin indices: :func:`_narrowed`).  Made once a compile for the same arguments (a
    plan's forms for several request sizes often lower the same program); read-only."""
    key = ("bitvector.plan", None if expanded is None else np.asarray(expanded, bool).tobytes(), lanes, narrow,
           None if tabled is None else np.asarray(tabled, bool).tobytes(), chunk_bytes, narrow and narrow_word)
    return memoised(forest, key, lambda: _make_plan(forest, expanded, lanes, narrow, tabled, chunk_bytes, narrow_word))


def _make_plan(forest: hir.Forest, expanded: np.ndarray | None, lanes: int, narrow: bool,
               tabled: np.ndarray | None, chunk_bytes: int, narrow_word: int) -> Plan:
    word_bits = narrow_word if narrow else WORD
    used = used_features(forest)
    nan_used = nan_split_features(forest)
    order = sorted(range(forest.num_trees), key=lambda k: forest.trees[k].outputs[0])  # stable
    if expanded is None:
        expanded = np.zeros(forest.num_trees, bool)
    if tabled is None:
        tabled = np.zeros(forest.num_trees, bool)
    # Trees of the mask-table phase (``tabled``) keep their leaves and place in the sum only.
    evaluation = [k for k in order if expanded[k]] + [k for k in order if not expanded[k] and not tabled[k]]
    cat_bits = NARROW_CAT_WORD if narrow else WORD
    cat_features, cat_table, cat_nodes, chunks = _cat_features(
        forest, evaluation, int(expanded.sum()), max(1, chunk_bytes // (cat_bits // 8 * lanes)), cat_bits)
    spans = leaf_spans(forest)
    trees, leaf_values, leaf_count = [], [], 0
    for k in order:
        t = forest.trees[k]
        trees.append(PlanTree(k, t.outputs[0], leaf_count, []))
        leaf_values.append(t.leaf_value[spans[k][0], 0])
        leaf_count += len(spans[k][0])
    planned = [tree for tree in trees if not tabled[tree.slot]]
    nodes = _node_words(forest, planned, tabled, word_bits, narrow)
    _plan_words(planned, nodes, cat_nodes)
    leaf_values = np.concatenate(leaf_values) if leaf_values else np.zeros(0)
    plan = Plan(used, trees, leaf_values.astype(forest.accumulate_dtype), nan_used,
                cat_features, cat_table, chunks, word_bits, nodes.node_dtype)
    if nodes.bins is not None:
        plan.bins, plan.bin_counts, plan.bin_steps = nodes.bins
    return plan


@dataclasses.dataclass
class _NodeWords:
    """The planned trees' nodes as their words apply them, what every plan of the same trees and
    word size shares whatever its expanded trees and chunks (a compile's forms for 16 and 64 rows
    plan the same nodes twice): the nodes in application order (each tree's numeric nodes, then
    its categorical ones by feature, then node), their columns (categorical nodes' left to each
    plan: their decision words' columns depend on its chunks) and thresholds (bins when narrow),
    and per word the nodes it applies, where each tree's start among them, and their masks."""
    column: np.ndarray  # int64, per node; categorical nodes' filled in by each plan
    threshold: np.ndarray  # per node, the comparison dtype (narrow: bin indices)
    cat_at: np.ndarray  # the categorical nodes' places, tree by tree, each tree's as _cat_features lists them
    words: list  # per tree, its words
    applied: list  # per word: (nodes it applies, each tree's first among them, their masks)
    node_dtype: np.dtype
    bins: tuple | None  # narrow: (bins, counts, steps) (:func:`_narrowed`)


def _node_words(forest: hir.Forest, trees: list[PlanTree], tabled: np.ndarray, word_bits: int,
                narrow: bool) -> _NodeWords:
    """:class:`_NodeWords` of ``trees`` (the plan's untabled trees, ``tabled`` in model order);
    made once a compile for the same trees, word size and form."""
    key = ("bitvector.node words", np.asarray(tabled, bool).tobytes(), word_bits, narrow)
    return memoised(forest, key, lambda: _make_node_words(forest, trees, word_bits, narrow))


def _make_node_words(forest: hir.Forest, trees: list[PlanTree], word_bits: int, narrow: bool) -> _NodeWords:
    """Every tree's nodes in one numpy pass (a pass a tree took a tenth of a second on 1000 trees
    of 255 leaves): its numeric nodes (the NaN-or-not splits that are no-ops dropped), then its
    categorical ones."""
    thr_dtype = np.dtype(forest.threshold_dtype)
    # A feature's column is its place among the (sorted) features read, found by search: a
    # table as wide as num_features would cost memory for features no split reads.
    used = np.asarray(used_features(forest), np.int64)
    nan_used = np.asarray(nan_split_features(forest), np.int64)
    spans = leaf_spans(forest)
    model = [forest.trees[tree.slot] for tree in trees]
    internal = [np.flatnonzero((t.left >= 0) & ~t.categorical_mask()) for t in model]

    def joined(parts, dtype):
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)

    tree_of = np.repeat(np.arange(len(model)), [len(i) for i in internal])
    feature = joined([t.feature[i] for t, i in zip(model, internal)], np.int64)
    threshold = joined([t.threshold[i] for t, i in zip(model, internal)], np.float64)
    op = joined([t.op[i] for t, i in zip(model, internal)], np.uint8)
    default_left = joined([t.default_left[i] for t, i in zip(model, internal)], bool)
    thr = threshold.astype(thr_dtype)
    le = op == int(Op.LE)
    # "x <= +inf" (LightGBM's NaN-or-not splits) sends every number left: with missing
    # values left it is a no-op, dropped; with them right it reads the NaN indicator copy.
    nan_split = nan_or_not_splits(op, thr)
    # x > t  <=>  x >= the next value up, for every x of the dtype
    thr[le] = np.nextafter(thr[le], thr_dtype.type(np.inf))
    # Missing values go right: read the copy where NaN is +inf, greater than any threshold.
    cols = np.searchsorted(used, feature) + np.where(default_left, 0, len(used))
    cols[nan_split] = 2 * len(used) + np.searchsorted(nan_used, feature[nan_split])
    keep = ~(nan_split & default_left)
    # Each tree's numeric nodes, then its categorical ones (by feature, then node: the order
    # of _cat_features' nodes of a tree).
    cat_node = []
    for t in model:
        nodes = np.array(sorted(t.categories), np.int64) if t.categories else np.zeros(0, np.int64)
        cat_node.append(nodes[np.argsort(t.feature[nodes], kind="stable")])
    n_cat = np.array([len(c) for c in cat_node], np.int64)
    n_num = np.bincount(tree_of[keep], minlength=len(model)).astype(np.int64)
    place = np.argsort(np.concatenate([tree_of[keep] * 2, np.repeat(np.arange(len(model)), n_cat) * 2 + 1]),
                       kind="stable")
    node = np.concatenate([joined([i for i in internal], np.int64)[keep], joined(cat_node, np.int64)])[place]
    column = np.concatenate([cols[keep], np.zeros(int(n_cat.sum()), np.int64)])[place]
    thresholds = np.concatenate([thr[keep], np.zeros(int(n_cat.sum()), thr_dtype)])[place]
    numeric = np.concatenate([np.ones(int(n_num.sum()), bool), np.zeros(int(n_cat.sum()), bool)])[place]
    rank = np.empty(len(place), np.int64)
    rank[place] = np.arange(len(place))
    cat_at = rank[int(n_num.sum()):]
    bins = None
    node_dtype = thr_dtype
    if narrow:
        thresholds, bins, node_dtype = _narrowed(column, thresholds, numeric, len(used))
    owner = np.repeat(np.arange(len(model)), n_num + n_cat)
    lefts = joined([t.left for t in model], np.int64)
    offset = np.concatenate([[0], np.cumsum([len(t.left) for t in model])]).astype(np.int64)
    child = offset[owner] + lefts[offset[owner] + node]
    first = joined([spans[tree.slot][1] for tree in trees], np.int64)
    last = joined([spans[tree.slot][2] for tree in trees], np.int64)
    words = [-(-len(spans[tree.slot][0]) // word_bits) for tree in trees]
    hits, masks = all_left_masks(first[child], last[child], max(words, default=0), word_bits)
    bounds = np.concatenate([[0], np.cumsum(n_num + n_cat)]).tolist()
    applied = []
    for w in range(max(words, default=0)):
        picked = np.flatnonzero(hits[w])
        applied.append((picked, np.searchsorted(picked, bounds).tolist(), masks[w][picked]))
    return _NodeWords(column, thresholds, cat_at, words, applied, node_dtype, bins)


def _plan_words(trees: list[PlanTree], nodes: _NodeWords, cat_nodes: dict) -> None:
    """Each of ``trees``' words (:class:`Word`), in place: the shared ``nodes`` with this plan's
    categorical nodes' decision word columns and bits (``cat_nodes``, :func:`_cat_features`)."""
    column, bits = nodes.column, np.zeros(len(nodes.column), np.int64)
    if len(nodes.cat_at):
        mine = [cat_nodes[tree.slot] for tree in trees if tree.slot in cat_nodes]
        column = column.copy()
        column[nodes.cat_at] = np.concatenate([c[1] for c in mine])
        bits[nodes.cat_at] = np.concatenate([c[2] for c in mine])
    for w, (picked, cut, mask_w) in enumerate(nodes.applied):
        col_w, thr_w, bit_w = column[picked], nodes.threshold[picked], bits[picked]
        for j, tree in enumerate(trees):
            if w < nodes.words[j]:
                a, b = cut[j], cut[j + 1]
                tree.words.append(Word(col_w[a:b], thr_w[a:b], mask_w[a:b], bit_w[a:b]))


def _narrowed(column: np.ndarray, threshold: np.ndarray, numeric: np.ndarray, U: int
              ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, int], np.dtype]:
    """The narrow form's thresholds of nodes reading ``column`` at ``threshold`` (``numeric``:
    which are numeric; ``U`` used features): per used feature, the sorted distinct thresholds its
    nodes compare with (either copy), and every numeric node's threshold replaced by its index there
    plus one, so that ``x >= t`` becomes ``bin(x) >= index`` with ``bin(x)`` the count of the
    feature's thresholds ``<= x`` (0 for NaN; the copy with NaN as +inf counts them all).  NaN
    indicator columns hold 0 or 1 and compare with 1.  Returns (the nodes' bin indices, (bins:
    each used feature's thresholds, NaN-padded; their counts; binary search steps), their dtype)."""
    binned = numeric & (column < 2 * U)
    feature = column[binned] % U if U else column[binned]
    value = threshold[binned]
    order = np.lexsort((value, feature))
    fs, vs = feature[order], value[order]
    new = np.ones(len(fs), bool)
    new[1:] = (fs[1:] != fs[:-1]) | (vs[1:] != vs[:-1])
    distinct = np.cumsum(new) - 1  # index among every feature's distinct thresholds
    counts = np.bincount(fs[new], minlength=U).astype(np.int64)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]) if U else np.zeros(0, np.int64)
    index = np.empty(len(fs), np.int64)
    index[order] = distinct - first[fs] + 1
    narrowed = np.zeros(len(column), np.int16)
    narrowed[binned] = index
    narrowed[numeric & ~binned] = 1  # NaN indicators: 1 for NaN, 0 for numbers
    steps = max(1, int(counts.max(initial=0)).bit_length())
    table = np.full((max(U, 1), 2**steps - 1), np.nan, threshold.dtype)
    table[fs[new], np.arange(int(new.sum())) - first[fs[new]]] = vs[new]
    # Bins of at most 255 thresholds compare as bytes (LightGBM's default max_bin is 255).
    node_dtype = np.dtype(np.uint8 if counts.max(initial=0) <= NARROW_BYTE_BINS else np.int16)
    return narrowed.astype(node_dtype), (table.reshape(-1), counts, steps), node_dtype

def layout(forest: hir.Forest, looped: np.ndarray, plan: Plan | None = None, lanes: int = 8) -> dict[str, np.ndarray]:
    """The model buffers: the leaves, in leaf order, each output's trees, the base scores, the
    categorical decision tables; for the ``looped`` trees (a mask in model order), node tables
    in segments of one word each, a tree's words last to first: numeric nodes (threshold, mask,
    column offset) and categorical ones (bit, mask, column offset), each segment's starts in
    both and its word's first leaf position, each tree's first segment, first leaf and position
    in the sum.  ``plan``: :func:`make_plan`'s result, if made already."""
    plan = plan or make_plan(forest, ~looped, lanes)
    # Every looped tree's words last to first, each a segment; the nodes' arrays joined once
    # and placed by numpy (a few steps a word took a tenth of a second on 1000 trees of 255 leaves).
    trees = [(pos, tree) for pos, tree in enumerate(plan.trees) if looped[tree.slot]]
    words = [(w, tree.words[w]) for _, tree in trees for w in reversed(range(len(tree.words)))]
    position = [pos for pos, _ in trees]
    leaf_base = [tree.leaf_base for _, tree in trees]
    tree_seg = np.concatenate([[0], np.cumsum([len(tree.words) for _, tree in trees])])
    seg_word = [w * plan.word_bits for w, _ in words]
    i64 = np.int64
    sizes = [len(word.column) for _, word in words]
    seg = np.repeat(np.arange(len(words)), sizes)
    column = np.concatenate([word.column for _, word in words]) if words else np.zeros(0, i64)
    threshold = np.concatenate([word.threshold for _, word in words]) if words else np.zeros(0, plan.node_dtype)
    mask = np.concatenate([word.mask for _, word in words]) if words else np.zeros(0, i64)
    bit = np.concatenate([word.bit for _, word in words]) if words else np.zeros(0, i64)
    # segments padded to GROUP nodes with no-ops (mask -1; categorical: bit 0)
    group = GROUP if plan.word_bits == WORD else NARROW_GROUP

    def padded(kind: np.ndarray, *fields):
        """The ``kind`` nodes' ``(values, filler)`` fields, each segment's padded to ``group``,
        and each segment's first node."""
        counts = np.bincount(seg[kind], minlength=len(words)).astype(i64)
        lengths = counts + -counts % group
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(i64)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(i64)
        at = starts[seg[kind]] + np.arange(int(kind.sum())) - first[seg[kind]]
        out = []
        for values, filler in fields:
            full = np.full(int(starts[-1]), filler, values.dtype)
            full[at] = values[kind]
            out.append(full)
        return starts, out

    cat = bit != 0
    seg_start, (thr, node_mask, col) = padded(~cat, (threshold, 0), (mask, -1), (column * lanes, 0))
    cseg_start, (cbit, cmask, ccol) = padded(cat, (bit, 0), (mask, -1), (column * lanes, 0))

    per_output = np.bincount([t.output for t in plan.trees], minlength=forest.num_outputs)
    i32 = np.int32
    cats = plan.cat_features
    buffers = {
        "bv_used": np.array(plan.used + plan.nan_used, i32).reshape(len(plan.used) + len(plan.nan_used)),
        "bv_threshold": thr.astype(plan.node_dtype),
        "bv_mask": node_mask.astype(f"int{plan.word_bits}"),
        "bv_column": col.astype(i32),
        "bv_seg_start": np.array(seg_start, i32),
        "bv_seg_word": np.array(seg_word, i32),
        "bv_tree_seg": np.array(tree_seg, i32),
        "bv_position": np.array(position, i32),
        "bv_leaf": plan.leaf_values,
        "bv_leaf_base": np.array(leaf_base, i32),
        "bv_output": np.concatenate([[0], np.cumsum(per_output)]).astype(i32),
        "bv_base": np.asarray(forest.base_score, forest.accumulate_dtype).reshape(forest.num_outputs),
        "bv_cat_bit": cbit.astype(np.int64 if plan.word_bits == WORD else np.int32),
        "bv_cat_mask": cmask.astype(f"int{plan.word_bits}"),
        "bv_cat_column": ccol.astype(i32),
        "bv_cat_seg_start": np.array(cseg_start, i32),
        "bv_cat_feature": np.array([c.feature for c in cats], i32).reshape(len(cats)),
        "bv_cat_table": plan.cat_table,
        **_chunk_tables(plan, looped, lanes),
    }
    if plan.bins is not None:
        buffers["bv_bins"] = plan.bins
        buffers["bv_bin_count"] = plan.bin_counts.astype(plan.node_dtype).reshape(len(plan.bin_counts))
    return buffers if cats else {k: v for k, v in buffers.items() if not k.startswith("bv_cat")}


def _chunk_tables(plan: Plan, looped: np.ndarray, lanes: int) -> dict[str, np.ndarray]:
    """The looped trees' chunks (:class:`Chunk`): each chunk's first looped tree and first
    entry, and the entries (feature's bv_crow offset, table column, bv_cw offset, words)."""
    first = len(plan.chunks) - looped_chunks(plan, looped)
    tree_start, entry_start, entries = [0], [0], []
    for ch in plan.chunks[first:]:
        tree_start.append(tree_start[-1] + ch.trees)
        entries += ch.entries
        entry_start.append(len(entries))
    e = np.array(entries, np.int64).reshape(len(entries), 4)
    i32 = np.int32
    return {"bv_chunk_tree": np.array(tree_start, i32), "bv_chunk_entry": np.array(entry_start, i32),
            "bv_entry_row": (e[:, 0] * lanes).astype(i32), "bv_entry_table": e[:, 1].astype(i32),
            "bv_entry_column": (e[:, 2] * lanes).astype(i32), "bv_entry_words": e[:, 3].astype(i32)}


def looped_chunks(plan: Plan, looped: np.ndarray) -> int:
    """How many of the plan's chunks (the last ones) hold looped trees."""
    remaining, count = int(looped.sum()), 0
    for ch in reversed(plan.chunks):
        if remaining <= 0:
            break
        remaining -= ch.trees
        count += 1
    return count


__all__ = ["GROUP", "NARROW_GROUP", "CHUNK_BYTES", "Node", "Word", "PlanTree", "CatFeature", "Chunk", "Plan",
           "make_plan", "layout", "looped_chunks"]

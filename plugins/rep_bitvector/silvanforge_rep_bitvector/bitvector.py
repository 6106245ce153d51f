"""Bitvector evaluation (QuickScorer, Lucchese et al., SIGIR 2015, applied tree by tree to a
block of rows in SIMD lanes): the ``bitvector`` representation.

Instead of walking each tree node by node, every tree keeps words of bits, one bit per leaf
(leaf ``k`` from the left is bit ``63 - k % 64`` of word ``k // 64``), all set at the start.  A
split the row does *not* take to the left (a "false" node) clears the bits of the leaves in its
left subtree; once every node of the tree has been applied, its exit leaf is the leftmost leaf
whose bit is still set: a leading-zero count.  ``LANES`` (or ``WIDE_LANES``) rows are evaluated
together, one per vector lane, and a tree's word stays in a register while its nodes are
applied, so a node costs one vector compare and one masked AND, with no branch and no memory
write, whatever the tree's shape: this pays where trees are small beside their depth (real
data's leaf-wise and mixed-depth trees, :func:`pays`), and is what the CPU default chooses
there.  Each tree's exit leaf is kept and the leaf values are summed after all trees: in model
order, as the reference does.

Two forms of one program (:func:`lower`): *expanded* trees have every node's compare and AND
emitted with its threshold and mask as constants; *looped* trees are applied by loops over node
tables, which compile in constant time and run about 1.5x slower a node (docs/design-choices.md,
"Bitvector evaluation").  The smallest trees are expanded, up to ``EXPAND_NODES`` nodes in all
(compile time grows with them), and the rest looped.

Exact like the walks: every node becomes "goes right iff ``x >= t``" with ``t`` the threshold
(``x < t`` splits) or the next representable value above it (``x <= t`` splits, exact for every
``x`` of the comparison dtype).  ``x >= t`` is false for NaN, so missing values go left; a node
whose missing values go right reads a copy of its feature where NaN is +inf, above every
other threshold.  LightGBM's NaN-or-not splits (``x <= +inf``) send every number left:
dropped where missing values go left too, else read from a NaN indicator copy (+inf for NaN,
0 for numbers).

Limits (:func:`unsupported`, the walk then runs): at most ``MAX_LEAVES`` leaves a tree, categorical
splits (decision tables, :class:`_CatFeature`) of at most ``MAX_CATEGORY_TABLE_BYTES``, numeric
``<`` / ``<=`` splits with non-NaN thresholds, no zero-as-missing, summed single-output trees.

Over 600 lines (the mask-table form is :mod:`.masktables`): the form chooser and its cost model,
the plan (words, chunks, categorical decision tables) and the code generator share this
module's tuning constants and private plan classes, and the tests and benchmarks set those
constants and choosers as this module's attributes (``AUTO_CHOOSE``, ``MASK_TABLES``,
``EXPAND_NODES``, ``NARROW_MAX_BINS``, ``_choice``, ``narrow_form``, ...), which a split would
have to carry to every module that reads them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir import hir, lir
from silvanforge.ir.hir import Aggregation, CategoryRule, Op
from silvanforge.lowering import thread_info
from silvanforge.walkcost import WALK_STEP_NS, walk_estimate_ns
from silvanforge.ir.lir import (Assign, Bin, Buffer, Builder, Cast, Clz, Cmp, Extract, For, Gather, If,
                     Load, Select, Store, Var, Vector)

from . import masktables

NAME = "bitvector"
WORD = 64
MAX_WORDS = 4
MAX_LEAVES = WORD * MAX_WORDS
# The narrow form (:func:`narrow_pays`): each used feature's value becomes its bin once a block
# (how many of the feature's thresholds are <= it: a binary search), every threshold its bin's
# index, so a node compares 16-bit integers and clears bits of 16-bit words: 32 lanes in one
# 512-bit vector, where 64-bit words over float64 values take four (node applications measured
# 2.5-3x cheaper, 16 against 50 ps a row, Zen 4; 16-bit words need 1.2-1.35x the applications
# of 64-bit ones on 255-leaf trees).  Exact: x >= t[j] iff more than j thresholds are <= x.
NARROW_WORD = 32
NARROW_MAX_BINS = 2**15 - 1
NARROW_BYTE_BINS = 255
NARROW_MAX_BIN_BYTES = 16 << 20  # the bins' search table (a row a used feature)
NARROW_CAT_WORD = 32  # categorical decision words: two vectors of 32 lanes, not four
# Narrow looped nodes cost this much a row, the trees' overhead included, whatever the threshold
# dtype (`forge bench`, 1 thread, 4096 rows, Zen 4, taxi-shaped LightGBM models of 255 leaves:
# 100 trees 0.037, 300 trees 0.042, 1000 trees 0.039-0.042), categorical ones this much more
# (insurance 100x255, 26% categorical nodes: 0.047 a node in all), and each used feature's
# binary search this much a step.
NARROW_LOOPED_NODE_NS, NARROW_CATEGORICAL_EXTRA_NS, BIN_STEP_NS = 0.036, 0.025, 0.2
# Rows a block: 8 (one 512-bit vector of 64-bit words), or 32 where most nodes are looped: a
# looped node's loads (column, threshold, mask, the rows' values) then serve four times the rows
# (measured 1.5-1.7x faster on lgb_digits and lgb_500x8_f64, Zen 4; 64 lanes gained nothing
# more), while expanded nodes gain little and compile longer, so wide blocks expand
# proportionally fewer nodes.  A batch size known to be small (under 4 blocks) halves the lanes.
LANES, WIDE_LANES = 8, 32
# Wide blocks whose feature columns (two copies of each used feature a lane) would pass this
# many bytes take 16 lanes: the columns then stay in L2 (2000-feature models: 16 lanes ran
# 1.05-1.19x faster than 32, Zen 4; lgb_1000x10_f200's 200 features, 100 KiB, keep 32).
WIDE_COLUMN_BYTES = 256 * 1024
# float32 models take wide blocks from this many nodes even when they could all be expanded: a
# float32 compare fills half a vector of 64-bit words, so looped nodes over 32 rows beat expanded
# ones over 8 (xgb_100x6_f8 1.27x, xgb_diabetes 1.41x, xgb_digits 1.17x; xgb_cancer's 645 nodes
# ran 0.72x; float64 lgb_cancer 0.86x: float64 keeps the rule "most nodes looped").
WIDE_FLOAT32_NODES = 3000
# The looped form applies nodes in groups of this many (segments padded with no-op nodes), so
# its inner loop has no remainder to finish.
GROUP = 8
# Narrow segments are short (a 32-bit word's nodes, about 35 on a 255-leaf tree): groups of 4
# pad less (3-5% faster on insurance 100x255 and taxi 1000x255).
NARROW_GROUP = 4
# Expanded code compiles in about 0.4 ms a node: at most this many nodes are expanded (about
# 2.5 s), the smallest trees first (they gain the most a node: the loops' cost a tree is larger).
EXPAND_NODES = 6000
# Rows of a block this many blocks ahead are prefetched while the block runs (rows of at most
# PREFETCH_ROW_BYTES: batches cycled from L3 ran 1.25x slower without it on lgb_cancer).
PREFETCH_AHEAD, PREFETCH_ROW_BYTES = 2, 1024
# Per-call stack for the trees' exit leaves (a block's lanes of words each).
MAX_TREES = 16384
MARGIN = 1.1
# Cost model, ns a row on the AMD Zen 4 these were measured on (docs/design-choices.md,
# "Bitvector evaluation"): nodes and trees of each form, and the copy of each used feature into
# the block's columns, against the walks' estimate (:mod:`silvanforge.walkcost`).  Bitvectors are chosen when
# estimated at least MARGIN times faster than the walks: their cost is offered as MARGIN times
# the estimate (:func:`cost_ns`).
EXPANDED_NODE_NS, EXPANDED_TREE_NS = 0.047, 0.2
LOOPED_NODE_NS, LOOPED_TREE_NS = 0.068, 0.7  # 8 lanes
WIDE_LOOPED_NODE_NS = {16: 0.05, 32: 0.045}
COLUMN_NS = 0.4
# Wide blocks of float64 rows compare twice the vectors of float32 ones: 0.0185 ns a looped node
# more than WIDE_LOOPED_NODE_NS (fitted on float32 and float64 models together) on three
# LightGBM models of 255 leaves (insurance 100 trees, taxi 300 and 1000 trees: 0.016-0.019).
WIDE_LOOPED_FLOAT64_EXTRA_NS = 0.0185
MARGIN = 1.1


def unsupported(forest: hir.Forest) -> str | None:
    """Why bitvector evaluation cannot run this forest, or None if it can."""
    if forest.aggregation is not Aggregation.SUM:
        return f"it sums trees ({forest.aggregation.value} aggregation)"
    if not 0 < forest.num_trees <= MAX_TREES:
        return f"it takes 1 to {MAX_TREES} trees"
    # Every tree's nodes at once (a loop of numpy calls a tree took 0.13 s on 1000 trees of 255
    # leaves, and the check runs thrice a compile); the first offending tree is named.
    trees = forest.trees
    sizes = np.array([t.num_nodes for t in trees], np.int64)
    tree_of = np.repeat(np.arange(len(trees)), sizes)
    left = np.concatenate([t.left for t in trees])
    internal = left >= 0
    categorical = np.concatenate([t.categorical_mask() if t.categories else np.zeros(t.num_nodes, bool)
                                  for t in trees])
    numeric = internal & ~categorical
    op = np.concatenate([t.op for t in trees])
    checks = [
        (np.bincount(tree_of[~internal], minlength=len(trees)) > MAX_LEAVES,
         f"has more than {MAX_LEAVES} leaves"),
        (np.array([len(t.outputs) != 1 for t in trees]), "adds to several outputs"),
        (np.bincount(tree_of[numeric & (op != int(Op.LT)) & (op != int(Op.LE))], minlength=len(trees)) > 0,
         "has splits other than < and <="),
        (np.bincount(tree_of[internal & np.concatenate([t.zero_missing for t in trees])], minlength=len(trees)) > 0,
         "treats zero as missing"),
        (np.bincount(tree_of[numeric & np.isnan(np.concatenate([t.threshold for t in trees]))],
                     minlength=len(trees)) > 0, "has NaN thresholds"),
    ]
    first = min(((int(np.argmax(bad)), n) for n, (bad, _) in enumerate(checks) if bad.any()), default=None)
    if first is not None:
        return f"tree {first[0]} {checks[first[1]][1]}"
    table = _category_table_bytes(forest)
    if table > MAX_CATEGORY_TABLE_BYTES:
        return (f"its categorical splits would need {table / 2**20:.0f} MiB of decision tables "
                f"(categories up to {_largest_category(forest)}; at most "
                f"{MAX_CATEGORY_TABLE_BYTES // 2**20} MiB)")
    return None


def _category_counts(forest: hir.Forest) -> dict[int, list[int]]:
    """Per feature of categorical splits: [categorical nodes, 1 + the largest category named,
    trees with such a node]."""
    # Every tree's categorical nodes at once (a 1000-tree flight-shaped model has 230k of them;
    # a loop of numpy calls a tree took 60 ms, and this runs four times a compile).
    trees = [(k, t) for k, t in enumerate(forest.trees) if t.categories]
    if not trees:
        return {}
    sets = [c for _, t in trees for c in t.categories.values()]
    feature = np.concatenate([t.feature[np.fromiter(t.categories, np.int64, len(t.categories))]
                              for _, t in trees]).astype(np.int64)
    tree = np.repeat(np.array([k for k, _ in trees], np.int64), [len(t.categories) for _, t in trees])
    sizes = np.fromiter((len(c) for c in sets), np.int64, len(sets))
    top = np.zeros(len(sets), np.int64)
    full = sizes > 0
    if full.any():
        values = np.concatenate([c for c in sets if len(c)]).astype(np.int64)
        top[full] = np.maximum.reduceat(values, np.concatenate([[0], np.cumsum(sizes[full])[:-1]])) + 1
    used = np.unique(feature)
    nodes = np.bincount(feature)[used]
    rows = np.zeros(int(used[-1]) + 1, np.int64)
    np.maximum.at(rows, feature, top)
    pairs = np.unique(tree * (int(used[-1]) + 1) + feature)
    users = np.bincount(pairs % (int(used[-1]) + 1))[used]
    return {int(f): [int(n), int(r), int(u)] for f, n, r, u in zip(used, nodes, rows[used], users)}


def _category_table_bytes(forest: hir.Forest) -> int:
    """At most the bytes of the decision tables (:class:`_CatFeature`): a row of words per
    category, plus the NaN and no-category rows; every chunk (:class:`_Chunk`) gives a feature
    words of its own, so a feature has at most a word more than its nodes need per tree using it."""
    return sum(8 * (rows + 2) * (-(-nodes // WORD) + trees)
               for nodes, rows, trees in _category_counts(forest).values())


def _largest_category(forest: hir.Forest) -> int:
    return max((rows - 1 for _, rows, _ in _category_counts(forest).values()), default=-1)


# A block's decision words (:class:`_Chunk`) are gathered a chunk of trees at a time, at most
# this many bytes (a word a lane), so that they stay in L1 beside the columns: gathering every
# tree's words first took 26 KiB a block on a 100-tree insurance-shaped model of 255 leaves and
# 845 KiB on a 1000-tree flight-shaped one.
CHUNK_BYTES = 8 * 1024
# Categorical splits read decision tables (:class:`_CatFeature`) of one row per category: models
# whose tables would pass this size (category ids in the millions) are walked instead.
MAX_CATEGORY_TABLE_BYTES = 64 * 2**20

# Whether the CPU default may choose it (the walk tests switch it off to test walks by default).
AUTO_CHOOSE = True
# The mask-table form (:mod:`.masktables`): None takes it where estimated cheaper, True wherever
# it can run, False never (tests force each).
MASK_TABLES: bool | None = None


def node_count(forest: hir.Forest) -> int:
    return sum(int((t.left >= 0).sum()) for t in forest.trees)


def _tree_nodes(forest: hir.Forest) -> np.ndarray:
    return np.array([int((t.left >= 0).sum()) for t in forest.trees], np.int64).reshape(forest.num_trees)


def _smallest_up_to(nodes: np.ndarray, budget: int) -> np.ndarray:
    order = np.argsort(nodes, kind="stable")
    chosen = np.zeros(len(nodes), bool)
    chosen[order[np.cumsum(nodes[order]) <= budget]] = True
    return chosen


def _used_features(forest: hir.Forest) -> list[int]:
    """Features of numeric splits (categorical ones read decision tables, :class:`_CatFeature`)."""
    parts = [t.feature[(t.left >= 0) & ~t.categorical_mask()] for t in forest.trees]
    return np.unique(np.concatenate(parts)).tolist() if parts else []


def _bin_counts(forest: hir.Forest) -> np.ndarray:
    """Per used feature (:func:`_used_features`), how many distinct thresholds its numeric
    nodes have (an upper bound of the narrow form's bins: ``<=`` splits move to the next value)."""
    numeric = [(t.left >= 0) & ~t.categorical_mask() for t in forest.trees]
    feature = np.concatenate([t.feature[m] for t, m in zip(forest.trees, numeric)] or [np.zeros(0, np.int64)])
    value = np.concatenate([t.threshold[m].astype(forest.threshold_dtype) for t, m in zip(forest.trees, numeric)]
                           or [np.zeros(0)])
    order = np.lexsort((value, feature))  # a sort, not np.unique(axis=1): 10x faster on 250k nodes
    f, v = feature[order], value[order]
    distinct = np.ones(len(f), bool)
    distinct[1:] = (f[1:] != f[:-1]) | (v[1:] != v[:-1])
    return np.unique(f[distinct], return_counts=True)[1]


def narrow_form(forest: hir.Forest, lanes: int) -> bool:
    """Whether :func:`lower` takes the narrow form (:data:`NARROW_WORD`): for wide blocks (most
    nodes looped; expanded 8-lane blocks gained nothing), where every feature's thresholds
    fit 16-bit bins."""
    return _narrow_bins(forest, lanes) is not None


def _narrow_bins(forest: hir.Forest, lanes: int) -> np.ndarray | None:
    """:func:`_bin_counts` where the narrow form is taken (:func:`narrow_form`), else None."""
    if lanes <= LANES:
        return None
    counts = _bin_counts(forest)
    # ``<=`` and ``<`` splits at one value make two bins: twice the distinct values bounds them.
    most = 2 * int(counts.max(initial=0))
    table = len(counts) * 2**most.bit_length() * np.dtype(forest.threshold_dtype).itemsize
    return counts if most <= NARROW_MAX_BINS and table <= NARROW_MAX_BIN_BYTES else None


def choose_form(forest: hir.Forest, batch_size: int | None = None) -> tuple[int, np.ndarray]:
    """Lanes a block and which trees (model order) are expanded: the smallest ones, up to
    :data:`EXPAND_NODES` nodes in all at 8 lanes; where that leaves most nodes looped, wider
    blocks (:data:`WIDE_LANES`, fewer for small batches and wide feature columns) expanding
    proportionally fewer."""
    nodes = _tree_nodes(forest)
    expanded = _smallest_up_to(nodes, EXPAND_NODES)
    lanes = WIDE_LANES
    while batch_size is not None and lanes > LANES and batch_size < 4 * lanes:
        lanes //= 2
    column_bytes = 2 * len(_used_features(forest)) * np.dtype(forest.threshold_dtype).itemsize
    while lanes > 2 * LANES and lanes * column_bytes > WIDE_COLUMN_BYTES:
        lanes //= 2
    wide_float32 = np.dtype(forest.threshold_dtype) == np.float32 and nodes.sum() >= WIDE_FLOAT32_NODES
    if lanes == LANES or (nodes[~expanded].sum() <= nodes[expanded].sum() and not wide_float32):
        return LANES, expanded
    return lanes, _smallest_up_to(nodes, EXPAND_NODES * LANES // lanes)


def expanded_trees(forest: hir.Forest, batch_size: int | None = None) -> np.ndarray:
    """Which trees (model order) :func:`lower` expands by default (:func:`choose_form`)."""
    return choose_form(forest, batch_size)[1]


def mask_tables_form(forest: hir.Forest, batch_size: int | None = None) -> bool:
    """Whether :func:`lower` takes the mask-table form (:mod:`.masktables`) for every tree."""
    return bool(tabled_trees(forest, batch_size).all())


# A tree evaluated by mask tables beside node-form trees also writes its exit leaf to scratch,
# which the node phase reads back: ns a row.
MIXED_TREE_NS = 0.2
# The mix is kept only where estimated this much cheaper than the node forms alone: measured at
# 4096 rows, xgb_flight_100 (estimated 800 -> 569 ns) ran 1.16x faster mixed, xgb_abalone
# (5700 -> 5597) 1.36x slower (a second phase, its exits through memory).
MIXED_MARGIN = 1.15


def tabled_trees(forest: hir.Forest, batch_size: int | None = None) -> np.ndarray:
    """Which trees (model order) :func:`lower` evaluates by mask tables: every tree (the
    mask-table form), some (a mask-table phase, then the node forms for the rest, summed
    together in model order) or none, by :func:`_choice`'s estimates; :data:`MASK_TABLES` True
    forces every tree where the form can run, False none."""
    return _choice(forest, batch_size)[0]


def _part(forest: hir.Forest, trees: np.ndarray) -> hir.Forest:
    return dataclasses.replace(forest, trees=[forest.trees[k] for k in np.flatnonzero(trees)])


def _choice(forest: hir.Forest, batch_size: int | None) -> tuple[np.ndarray, float]:
    """(the trees to evaluate by mask tables, the estimated ns a row).  A tree goes to the
    tables where its share of their cost (:func:`.masktables.tree_costs_ns`, plus
    :data:`MIXED_TREE_NS` unless every tree does) is below its narrow looped nodes' cost; the
    result is kept if estimated cheaper than the node forms for every tree.  Categorical trees
    are candidates too (their categorical features are entries keyed by category)."""
    none = np.zeros(forest.num_trees, bool)
    nodes_ns = _node_forms_ns(forest, batch_size)
    if MASK_TABLES is False:
        return none, nodes_ns
    if MASK_TABLES:
        tables_ns = masktables.choose(forest, batch_size)
        return (none, nodes_ns) if tables_ns is None else (~none, tables_ns)
    cost = masktables.tree_costs_ns(forest, batch_size)
    node_cost = NARROW_LOOPED_NODE_NS * _tree_nodes(forest)
    tabled = cost + MIXED_TREE_NS < node_cost
    if (cost < node_cost).all():  # every tree: one phase, no hand-over
        tables_ns = masktables.choose(forest, batch_size)
        return (~none, tables_ns) if tables_ns is not None and tables_ns < nodes_ns else (none, nodes_ns)
    if not tabled.any():
        return none, nodes_ns
    part = _part(forest, tabled)
    part_ns = masktables.choose(part, batch_size)
    if part_ns is None:
        return none, nodes_ns
    mixed_ns = part_ns + MIXED_TREE_NS * part.num_trees + _node_forms_ns(_part(forest, ~tabled), batch_size)
    return (tabled, mixed_ns) if MIXED_MARGIN * mixed_ns < nodes_ns else (none, nodes_ns)


def estimate_ns(forest: hir.Forest, batch_size: int | None = None) -> float:
    """Estimated ns a row of this forest's bitvector kernel (as :func:`lower` builds it)."""
    return _choice(forest, batch_size)[1]


def _node_forms_ns(forest: hir.Forest, batch_size: int | None = None) -> float:
    """Estimated ns a row of the node forms (expanded, looped, narrow); a batch smaller than a
    block pays for the whole block."""
    nodes = _tree_nodes(forest)
    lanes, expanded = choose_form(forest, batch_size)
    looped_ns = LOOPED_NODE_NS if lanes == LANES else WIDE_LOOPED_NODE_NS[lanes]
    used = len(_used_features(forest)) + len(_nan_split_features(forest))
    looped = looped_ns * nodes[~expanded].sum() + LOOPED_TREE_NS * (~expanded).sum()
    counts = _narrow_bins(forest, lanes)
    if counts is not None:
        categorical = sum(int(forest.trees[k].categorical_mask().sum()) for k in np.flatnonzero(~expanded))
        looped = (NARROW_LOOPED_NODE_NS * nodes[~expanded].sum() + NARROW_CATEGORICAL_EXTRA_NS * categorical
                  + BIN_STEP_NS * len(counts) * int(counts.max(initial=0)).bit_length())
    elif lanes != LANES and np.dtype(forest.threshold_dtype) == np.float64:
        looped += WIDE_LOOPED_FLOAT64_EXTRA_NS * nodes[~expanded].sum()
    per_row = (EXPANDED_NODE_NS * nodes[expanded].sum() + EXPANDED_TREE_NS * expanded.sum()
               + looped + COLUMN_NS * used)
    return per_row * (lanes / min(lanes, batch_size) if batch_size else 1)


def pays(forest: hir.Forest, batch_size: int | None = None) -> bool:
    """Whether bitvector evaluation should beat the walks on this forest at this batch size
    (None: large batches; see the costs above); always False while :data:`AUTO_CHOOSE` is off."""
    if not AUTO_CHOOSE or unsupported(forest) is not None:
        return False
    return cost_ns(forest, batch_size) <= walk_estimate_ns(forest)


def cost_ns(forest: hir.Forest, batch_size: int | None = None) -> float:
    """What the representation chooser compares with the other representations' costs: the
    estimate, charged :data:`MARGIN` so that walks keep models where bitvectors would gain less."""
    return MARGIN * estimate_ns(forest, batch_size)


@dataclasses.dataclass
class _Node:
    """One node's test as applied to one word of its tree, then ``word &= mask``.  Numeric: goes
    right iff ``x >= threshold``, ``column`` its feature's column in the block (the copy with
    NaN as +inf where missing values go right).  Categorical (``bit`` non-zero): goes right iff
    ``decision_word & bit`` is 0, ``column`` the decision word's column (:class:`_CatFeature`)."""
    column: int
    threshold: float
    mask: int  # signed 64-bit
    bit: int = 0  # signed 64-bit; 0 for numeric nodes

    @property
    def categorical(self) -> bool:
        return self.bit != 0


@dataclasses.dataclass
class _Word:
    """The nodes applied to one word of a tree, as arrays (one entry a node, see :class:`_Node`;
    ``bit`` 0 marks numeric nodes).  Arrays, not objects: a 1000-tree model of 255 leaves has a
    quarter of a million nodes, planned in numpy in a fraction of a second."""
    column: np.ndarray  # int64
    threshold: np.ndarray  # the comparison dtype
    mask: np.ndarray  # int64
    bit: np.ndarray  # int64

    @property
    def categorical(self) -> np.ndarray:
        return self.bit != 0

    def nodes(self) -> list[_Node]:
        return [_Node(*n) for n in zip(self.column.tolist(), self.threshold.tolist(),
                                       self.mask.tolist(), self.bit.tolist())]


@dataclasses.dataclass
class _Tree:
    slot: int  # model index
    output: int
    leaf_base: int  # first of its leaves in the leaf array
    words: list  # per word: its nodes (_Word)


@dataclasses.dataclass
class _CatFeature:
    """A feature of categorical splits and its decision table: one row of ``words`` words per
    category ``0 .. rows - 1``, then the row for NaN (each node's default direction) and the
    row for values that are no category, or a category no split names (all zero: right).  Each
    of the feature's categorical nodes owns one bit of one column (:class:`_Chunk`), set in the
    rows of the categories it sends left.  A block looks up each lane's row once; every
    categorical node is then one AND and one compare, like a numeric one, whatever the size of
    its bitset."""
    feature: int
    rows: int
    words: int
    table_base: int  # first element of its table in bv_cat_table


@dataclasses.dataclass
class _Chunk:
    """Consecutive trees (in evaluation order: expanded trees, then looped ones) whose decision
    words are gathered together, just before they run, so that a block's words stay in L1
    (:data:`CHUNK_BYTES`).  ``entries``: per feature with nodes in these trees, (its index in
    ``_Plan.cat_features``, first table column, first column in the block's bv_cw, words)."""
    trees: int
    entries: list


@dataclasses.dataclass
class _Plan:
    used: list  # features of numeric nodes, in column order
    trees: list  # _Tree, grouped by output, model order inside each
    leaf_values: np.ndarray  # leaf order
    nan_used: list  # features of NaN-or-not splits (:func:`_nan_split_features`)
    cat_features: list  # _CatFeature
    cat_table: np.ndarray  # int64, every feature's decision table
    chunks: list  # _Chunk, covering every tree when there are categorical splits, else empty
    word_bits: int = WORD  # leaves a word: NARROW_WORD in the narrow form
    node_dtype: np.dtype = np.dtype(np.float64)  # nodes' thresholds: bins (uint8 or int16) when narrow
    bins: np.ndarray | None = None  # narrow: per used feature, its thresholds, NaN-padded (_Bins)
    bin_counts: np.ndarray | None = None  # narrow: per used feature, how many thresholds
    bin_steps: int = 0  # narrow: binary search steps (rows of bins are 2**steps - 1 long)

    @property
    def cat_words(self) -> int:
        """Columns of bv_cw: the most words a chunk gathers."""
        return max((sum(e[3] for e in ch.entries) for ch in self.chunks), default=0)


def _leaf_spans(forest: hir.Forest) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per tree: its leaves from left to right (node ids), and each node's range of leaf
    positions [first, last).  Every tree at once, level by level in numpy (a level loop per tree
    took a third of a second on 1000 leaf-wise trees 37 deep)."""
    offset, left, right, levels = hir.level_order(forest)
    levels = [level[left[level] >= 0] for level in levels]  # the internal nodes
    count = np.ones(len(left), np.int64)  # leaves under each node, deepest level first
    for inner in reversed(levels):
        count[inner] = count[left[inner]] + count[right[inner]]
    first = np.zeros(len(left), np.int64)
    for inner in levels:
        first[left[inner]] = first[inner]
        first[right[inner]] = first[inner] + count[left[inner]]
    spans = []
    for k, t in enumerate(forest.trees):
        f = first[offset[k]:offset[k + 1]]
        is_leaf = t.left < 0
        leaves = np.flatnonzero(is_leaf)[np.argsort(f[is_leaf], kind="stable")]
        spans.append((leaves, f, f + count[offset[k]:offset[k + 1]]))
    return spans


def _all_left_masks(first: np.ndarray, last: np.ndarray, words: int, bits: int = WORD) -> tuple[np.ndarray, np.ndarray]:
    """For nodes whose left leaves are positions [first, last), per word of ``bits`` bits (0 to
    ``words - 1``): which have leaves in it (``hit``) and the mask clearing those (signed,
    ``bits`` wide, as int64; -1 where not hit).  (words, nodes) arrays, every word in one numpy
    pass (a pass a word took a sixth of a 1000-tree model's lowering)."""
    starts = np.arange(words, dtype=np.int64)[:, None] * bits
    lo, hi = np.maximum(first[None, :], starts), np.minimum(last[None, :], starts + bits)
    hit = lo < hi
    hi = np.where(hit, hi, starts + bits)
    width = np.where(hit, hi - lo, 0).astype(np.uint64)
    with np.errstate(over="ignore"):
        ones = np.where(width == WORD, ~np.uint64(0), (np.uint64(1) << (width % np.uint64(WORD))) - np.uint64(1))
    cleared = ~(ones << (starts + bits - hi).astype(np.uint64))
    if bits == WORD:
        return hit, cleared.view(np.int64)
    cleared = (cleared & np.uint64((1 << bits) - 1)).astype(np.int64)
    return hit, np.where(cleared >= 1 << (bits - 1), cleared - (1 << bits), cleared)


def _cat_features(forest: hir.Forest, evaluation: list[int], looped_from: int,
                  chunk_words: int, bits: int = WORD) -> tuple[list[_CatFeature], np.ndarray, dict, list[_Chunk]]:
    """The decision tables (:class:`_CatFeature`), each tree's categorical nodes with their
    bv_cw column and bit (arrays, by tree), and the chunks (:class:`_Chunk`) of the trees in
    ``evaluation`` order (``evaluation[looped_from:]`` are looped: a chunk never spans both
    forms), each gathering at most ``chunk_words`` words unless one tree needs more."""
    counts = _category_counts(forest)
    if not counts:
        return [], np.zeros(1, np.int64), {}, []
    q_of = {f: q for q, f in enumerate(sorted(counts))}
    per_tree = []  # evaluation order: {q: [nodes]}
    for k in evaluation:
        t = forest.trees[k]
        mine: dict[int, list] = {}
        for node in sorted(t.categories):
            mine.setdefault(q_of[int(t.feature[node])], []).append(node)
        per_tree.append(mine)
    # Chunks: greedy over the evaluation order.
    chunks, bounds, start = [], [], 0
    while start < len(evaluation):
        end, need = start, {}
        while end < len(evaluation) and not (end == looped_from and end > start):
            trial = dict(need)
            for q, nodes in per_tree[end].items():
                trial[q] = trial.get(q, 0) + len(nodes)
            if end > start and sum(-(-n // bits) for n in trial.values()) > chunk_words:
                break
            need, end = trial, end + 1
        bounds.append((start, end))
        start = end
    # Columns: per chunk and feature, the feature's table columns and the chunk's bv_cw columns.
    table_cols = [0] * len(q_of)
    members: list[list] = [[] for _ in q_of]  # per feature: (tree, node, table column, bit)
    where: dict[int, list] = {}
    for lo, hi in bounds:
        entries, local = [], 0
        for q in range(len(q_of)):
            nodes = [(evaluation[i], node) for i in range(lo, hi) for node in per_tree[i].get(q, [])]
            if not nodes:
                continue
            words = -(-len(nodes) // bits)
            entries.append((q, table_cols[q], local, words))
            for j, (k, node) in enumerate(nodes):
                members[q].append((k, node, table_cols[q] + j // bits, j % bits))
                where.setdefault(k, []).append((node, local + j // bits, 1 << (j % bits)))
            table_cols[q] += words
            local += words
        chunks.append(_Chunk(hi - lo, entries))
    features, tables, base = [], [], 0
    for f, q in q_of.items():
        rows, words = counts[f][1], table_cols[q]
        table = np.zeros((rows + 2, words), np.uint64)
        k_, node_, col_, bit_ = (np.array(a, np.int64) for a in zip(*members[q]))
        bit = np.uint64(1) << bit_.astype(np.uint64)
        sets = [forest.trees[k].categories[node] for k, node in zip(k_.tolist(), node_.tolist())]
        sizes = np.array([len(c) for c in sets], np.int64)
        if sizes.sum():
            np.bitwise_or.at(table, (np.concatenate(sets), np.repeat(col_, sizes)), np.repeat(bit, sizes))
        left = np.array([bool(forest.trees[k].default_left[node]) for k, node in zip(k_.tolist(), node_.tolist())])
        np.bitwise_or.at(table, (np.full(int(left.sum()), rows), col_[left]), bit[left])
        features.append(_CatFeature(f, rows, words, base))
        tables.append(table.reshape(-1))
        base += table.size
    signed = np.int64 if bits == WORD else np.int32
    by_tree = {k: (np.array([e[0] for e in entries], np.int64), np.array([e[1] for e in entries], np.int64),
                   np.array([e[2] for e in entries], np.uint64).astype(f"uint{bits}").view(signed).astype(np.int64))
               for k, entries in where.items()}
    table = np.concatenate(tables)
    return features, (table.view(np.int64) if bits == WORD else table.astype(np.uint32).view(np.int32)), by_tree, chunks


def _plan(forest: hir.Forest, expanded: np.ndarray | None = None, lanes: int = LANES,
          narrow: bool = False, tabled: np.ndarray | None = None) -> _Plan:
    """Every tree's nodes per word, the columns they read and the leaf values in leaf order;
    ``expanded`` (model order; default none) and ``lanes`` decide the chunks of categorical
    decision words (:class:`_Chunk`); ``narrow``: the narrow form (16-bit words, thresholds as
    bin indices: :func:`_narrow_thresholds`)."""
    word_bits = NARROW_WORD if narrow else WORD
    thr_dtype = np.dtype(forest.threshold_dtype)
    # A feature's column is its place among the (sorted) features read, found by search: a
    # table as wide as num_features would cost memory for features no split reads.
    used = _used_features(forest)
    nan_used = _nan_split_features(forest)
    used_sorted, nan_sorted = np.asarray(used, np.int64), np.asarray(nan_used, np.int64)
    order = sorted(range(forest.num_trees), key=lambda k: forest.trees[k].outputs[0])  # stable
    if expanded is None:
        expanded = np.zeros(forest.num_trees, bool)
    if tabled is None:
        tabled = np.zeros(forest.num_trees, bool)
    # Trees of the mask-table phase (``tabled``) keep their leaves and place in the sum only.
    evaluation = [k for k in order if expanded[k]] + [k for k in order if not expanded[k] and not tabled[k]]
    cat_bits = NARROW_CAT_WORD if narrow else WORD
    cat_features, cat_table, cat_nodes, chunks = _cat_features(
        forest, evaluation, int(expanded.sum()), max(1, CHUNK_BYTES // (cat_bits // 8 * lanes)), cat_bits)
    no_cats = (np.zeros(0, np.int64),) * 3
    trees, leaf_values, leaf_count = [], [], 0
    spans = _leaf_spans(forest)
    for k in order:
        t = forest.trees[k]
        leaves, first, last = spans[k]
        tree = _Tree(k, t.outputs[0], leaf_count, [])
        leaf_values.append(t.leaf_value[leaves, 0])
        leaf_count += len(leaves)
        if tabled[k]:
            trees.append(tree)
            continue
        internal = np.flatnonzero((t.left >= 0) & ~t.categorical_mask())
        thr = t.threshold[internal].astype(thr_dtype)
        le = t.op[internal] == int(Op.LE)
        # "x <= +inf" (LightGBM's NaN-or-not splits) sends every number left: with missing
        # values left it is a no-op, dropped; with them right it reads the NaN indicator copy.
        nan_split = _nan_or_not(t, internal, thr_dtype)
        # x > t  <=>  x >= the next value up, for every x of the dtype
        thr[le] = np.nextafter(thr[le], thr_dtype.type(np.inf))
        # Missing values go right: read the copy where NaN is +inf, greater than any threshold.
        cols = np.searchsorted(used_sorted, t.feature[internal]) + np.where(t.default_left[internal], 0, len(used))
        cols[nan_split] = 2 * len(used) + np.searchsorted(nan_sorted, t.feature[internal][nan_split])
        keep = ~(nan_split & t.default_left[internal])
        internal, thr, cols = internal[keep], thr[keep], cols[keep]
        cnodes, ccols, cbits = cat_nodes.get(k, no_cats)
        nodes = np.concatenate([internal, cnodes])
        columns = np.concatenate([cols, ccols])
        thresholds = np.concatenate([thr, np.zeros(len(cnodes), thr_dtype)])
        bits = np.concatenate([np.zeros(len(internal), np.int64), cbits])
        hits, masks = _all_left_masks(first[t.left[nodes]], last[t.left[nodes]], -(-len(leaves) // word_bits), word_bits)
        for hit, mask in zip(hits, masks):
            tree.words.append(_Word(columns[hit], thresholds[hit], mask[hit], bits[hit]))
        trees.append(tree)
    leaf_values = np.concatenate(leaf_values) if leaf_values else np.zeros(0)
    plan = _Plan(used, trees, leaf_values.astype(forest.accumulate_dtype), nan_used,
                 cat_features, cat_table, chunks, word_bits, thr_dtype)
    if narrow:
        _narrow_thresholds(plan)
    return plan


def _narrow_thresholds(plan: _Plan) -> None:
    """The narrow form's bins: per used feature, the sorted distinct thresholds its nodes
    compare with (either copy), and every numeric node's threshold replaced by its index there
    plus one, so that ``x >= t`` becomes ``bin(x) >= index`` with ``bin(x)`` the count of the
    feature's thresholds ``<= x`` (0 for NaN; the copy with NaN as +inf counts them all).  NaN
    indicator columns hold 0 or 1 and compare with 1."""
    U = len(plan.used)
    words = [w for tree in plan.trees for w in tree.words]
    sizes = [len(w.column) for w in words]
    column = np.concatenate([w.column for w in words]) if words else np.zeros(0, np.int64)
    threshold = np.concatenate([w.threshold for w in words]) if words else np.zeros(0)
    numeric = np.concatenate([w.bit == 0 for w in words]) if words else np.zeros(0, bool)
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
    table = np.full((max(U, 1), 2**steps - 1), np.nan, plan.node_dtype)
    table[fs[new], np.arange(int(new.sum())) - first[fs[new]]] = vs[new]
    # Bins of at most 255 thresholds compare as bytes (LightGBM's default max_bin is 255).
    plan.node_dtype = np.dtype(np.uint8 if counts.max(initial=0) <= NARROW_BYTE_BINS else np.int16)
    narrowed = narrowed.astype(plan.node_dtype)
    for w, part in zip(words, np.split(narrowed, np.cumsum(sizes)[:-1]) if words else []):
        w.threshold = part
    plan.bins, plan.bin_counts, plan.bin_steps = table.reshape(-1), counts, steps


def _nan_split_features(forest: hir.Forest) -> list[int]:
    """Features of "x <= +inf" splits whose missing values go right (true iff x is NaN): they
    get a third copy in the block, +inf where NaN and 0 elsewhere."""
    found = set()
    for t in forest.trees:
        internal = np.flatnonzero((t.left >= 0) & ~t.categorical_mask())
        hit = _nan_or_not(t, internal, np.dtype(forest.threshold_dtype)) & ~t.default_left[internal]
        found.update(int(f) for f in t.feature[internal[hit]])
    return sorted(found)


def _nan_or_not(t: hir.Tree, internal: np.ndarray, thr_dtype: np.dtype) -> np.ndarray:
    """Which of the ``internal`` nodes are "x <= +inf" splits, thresholds as compiled."""
    return (t.op[internal] == int(Op.LE)) & (t.threshold[internal].astype(thr_dtype) == np.inf)


def layout(forest: hir.Forest, looped: np.ndarray, plan: _Plan | None = None, lanes: int = 8) -> dict[str, np.ndarray]:
    """The model buffers: the leaves, in leaf order, each output's trees, the base scores, the
    categorical decision tables; for the ``looped`` trees (a mask in model order), node tables
    in segments of one word each, a tree's words last to first: numeric nodes (threshold, mask,
    column offset) and categorical ones (bit, mask, column offset), each segment's starts in
    both and its word's first leaf position, each tree's first segment, first leaf and position
    in the sum.  ``plan``: :func:`_plan`'s result, if made already."""
    plan = plan or _plan(forest, ~looped, lanes)
    thr, mask, col, seg_start, seg_word, tree_seg, leaf_base, position = [], [], [], [], [], [], [], []
    cbit, cmask, ccol, cseg_start = [], [], [], []
    count = ccount = 0  # nodes in the numeric and categorical tables so far
    for pos, tree in enumerate(plan.trees):
        if not looped[tree.slot]:
            continue
        position.append(pos)
        leaf_base.append(tree.leaf_base)
        tree_seg.append(len(seg_start))
        for w in reversed(range(len(tree.words))):
            word = tree.words[w]
            num, cat = ~word.categorical, word.categorical
            seg_start.append(count)
            cseg_start.append(ccount)
            seg_word.append(w * plan.word_bits)
            # segments padded to GROUP nodes with no-ops (mask -1; categorical: bit 0)
            group = GROUP if plan.word_bits == WORD else NARROW_GROUP
            pad, cpad = -int(num.sum()) % group, -int(cat.sum()) % group
            thr += [word.threshold[num], np.zeros(pad, word.threshold.dtype)]
            mask += [word.mask[num], np.full(pad, -1, np.int64)]
            col += [word.column[num] * lanes, np.zeros(pad, np.int64)]
            cbit += [word.bit[cat], np.zeros(cpad, np.int64)]
            cmask += [word.mask[cat], np.full(cpad, -1, np.int64)]
            ccol += [word.column[cat] * lanes, np.zeros(cpad, np.int64)]
            count += int(num.sum()) + pad
            ccount += int(cat.sum()) + cpad
    tree_seg.append(len(seg_start))
    seg_start.append(count)
    cseg_start.append(ccount)

    def joined(parts, dtype):
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

    per_output = np.bincount([t.output for t in plan.trees], minlength=forest.num_outputs)
    i32 = np.int32
    cats = plan.cat_features
    buffers = {
        "bv_used": np.array(plan.used + plan.nan_used, i32).reshape(len(plan.used) + len(plan.nan_used)),
        "bv_threshold": joined(thr, plan.node_dtype),
        "bv_mask": joined(mask, f"int{plan.word_bits}"),
        "bv_column": joined(col, i32),
        "bv_seg_start": np.array(seg_start, i32),
        "bv_seg_word": np.array(seg_word, i32),
        "bv_tree_seg": np.array(tree_seg, i32),
        "bv_position": np.array(position, i32),
        "bv_leaf": plan.leaf_values,
        "bv_leaf_base": np.array(leaf_base, i32),
        "bv_output": np.concatenate([[0], np.cumsum(per_output)]).astype(i32),
        "bv_base": np.asarray(forest.base_score, forest.accumulate_dtype).reshape(forest.num_outputs),
        "bv_cat_bit": joined(cbit, np.int64 if plan.word_bits == WORD else np.int32),
        "bv_cat_mask": joined(cmask, f"int{plan.word_bits}"),
        "bv_cat_column": joined(ccol, i32),
        "bv_cat_seg_start": np.array(cseg_start, i32),
        "bv_cat_feature": np.array([c.feature for c in cats], i32).reshape(len(cats)),
        "bv_cat_table": plan.cat_table,
        **_chunk_tables(plan, looped, lanes),
    }
    if plan.bins is not None:
        buffers["bv_bins"] = plan.bins
        buffers["bv_bin_count"] = plan.bin_counts.astype(plan.node_dtype).reshape(len(plan.bin_counts))
    return buffers if cats else {k: v for k, v in buffers.items() if not k.startswith("bv_cat")}


def _chunk_tables(plan: _Plan, looped: np.ndarray, lanes: int) -> dict[str, np.ndarray]:
    """The looped trees' chunks (:class:`_Chunk`): each chunk's first looped tree and first
    entry, and the entries (feature's bv_crow offset, table column, bv_cw offset, words)."""
    first = len(plan.chunks) - _looped_chunks(plan, looped)
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


def _looped_chunks(plan: _Plan, looped: np.ndarray) -> int:
    """How many of the plan's chunks (the last ones) hold looped trees."""
    remaining, count = int(looped.sum()), 0
    for ch in reversed(plan.chunks):
        if remaining <= 0:
            break
        remaining -= ch.trees
        count += 1
    return count


class _Lowering:
    """Builds the one phase: blocks of ``lanes`` rows, their used features copied into per-call
    columns (twice: as they are, and with NaN as +inf; NaN indicators after them), then each
    output's trees."""

    def __init__(self, forest: hir.Forest, lanes: int, batch_size: int | None = None, narrow: bool = False):
        self.forest = forest
        self.lanes = lanes
        self.batch_size = batch_size
        self.narrow = narrow
        self.thr_t = lir.lir_type(forest.threshold_dtype)
        self.acc_t = lir.lir_type(forest.accumulate_dtype)
        self.buffers = {"rows": Buffer("rows", self.thr_t, "input"),
                        "margins": Buffer("margins", self.acc_t, "output")}
        self.b = Builder(self.buffers)
        # What nodes compare (the block's columns: bins when narrow) and the words they clear.
        self.node_e = "i16" if narrow else self.thr_t
        self.word_e = f"i{NARROW_WORD}" if narrow else "i64"
        self.word_bits = NARROW_WORD if narrow else WORD
        self.row_t = lir.vector_type(self.thr_t, self.lanes)
        self.x_t = lir.vector_type(self.node_e, self.lanes)
        self.mask_t = lir.vector_type("i1", self.lanes)
        self.word_t = lir.vector_type(self.word_e, self.lanes)
        self.i64_t = lir.vector_type("i64", self.lanes)  # table rows, exit leaves
        self.cat_e = "i32" if narrow else "i64"
        # Exit leaves within a tree: as wide as the words (narrow: half the vectors to select).
        self.ex_e = self.word_e if narrow and self.word_e != "i16" else "i64"
        self.ex_t = lir.vector_type(self.ex_e, self.lanes)
        self.cat_t = lir.vector_type(self.cat_e, self.lanes)  # decision words

    def splat(self, value, t: str) -> lir.Expr:
        return Builder.const(value, lir.vector_type(t, self.lanes))

    def apply(self, w: Var, x: lir.Expr, thr: lir.Expr, mask: lir.Expr) -> Assign:
        """A node: where the row goes right (``x >= t``; false for NaN), clear its left leaves."""
        return Assign(w, Select(Cmp(">=", x, thr, self.mask_t), Bin("&", w, mask), w))

    def apply_categorical(self, w: Var, word: lir.Expr, bit: lir.Expr, mask: lir.Expr) -> Assign:
        """A categorical node: where its bit of the decision word is clear (the row goes
        right), clear its left leaves."""
        right = Cmp("==", Bin("&", word, bit), self.splat(0, self.cat_e), self.mask_t)
        return Assign(w, Select(right, Bin("&", w, mask), w))

    def leading_zeros(self, w: Var) -> lir.Expr:
        return Clz(w) if self.word_e == self.ex_e else Cast(Clz(w), self.ex_t)

    def exit_index(self, ex: Var, leaf_base: lir.Expr) -> lir.Expr:
        """A tree's exit leaf in the forest's leaf array (64-bit, for the gathers of the sum)."""
        return Bin("+", ex if self.ex_e == "i64" else Cast(ex, self.i64_t), leaf_base)

    def exit_leaf(self, ex: Var, w: Var, word_first: lir.Expr) -> Assign:
        """Words come last to first: the leftmost word with a bit set decides."""
        return Assign(ex, Select(Cmp("!=", w, self.splat(0, self.word_e), self.mask_t),
                                 Bin("+", self.leading_zeros(w), word_first), ex))

    def lower(self, expanded: np.ndarray, tabled: np.ndarray | None = None,
              estimate: float | None = None) -> lir.Module:
        """``tabled`` (model order): trees a first phase evaluates by mask tables
        (:func:`.masktables.function`), their exit leaves summed here with the others';
        ``estimate``: :func:`estimate_ns` where the caller has it."""
        forest, b = self.forest, self.b
        c = Builder.const
        i64, i32 = "i64", "i32"
        tabled = np.zeros(forest.num_trees, bool) if tabled is None else tabled
        looped = ~expanded & ~tabled
        plan = _plan(forest, expanded, self.lanes, self.narrow, tabled)
        used, trees, nan_used = plan.used, plan.trees, plan.nan_used
        for name, data in layout(forest, looped, plan, self.lanes).items():
            b.buffer(name, data)
        functions = []
        if tabled.any():
            by_slot = {tree.slot: (pos, tree) for pos, tree in enumerate(trees)}
            picked = np.flatnonzero(tabled)
            part = dataclasses.replace(forest, trees=[forest.trees[k] for k in picked])
            functions.append(masktables.function(part, self.buffers, [by_slot[k][1].leaf_base for k in picked]))
            b.buffer("bv_tabled_position", np.array([by_slot[k][0] for k in picked], np.int32))
        U, N = len(used), len(nan_used)
        columns = 2 * U + N
        if self.narrow:  # bins of up to 255 thresholds are bytes
            self.node_e = lir.lir_type(plan.node_dtype)
            self.x_t = lir.vector_type(self.node_e, self.lanes)
        self.buffers["bv_x"] = Buffer("bv_x", self.node_e, "local", size=max(1, columns) * self.lanes)
        if plan.cat_features:
            self.buffers["bv_cw"] = Buffer("bv_cw", self.cat_e, "local", size=max(1, plan.cat_words) * self.lanes)
            self.buffers["bv_crow"] = Buffer("bv_crow", "i64", "local", size=len(plan.cat_features) * self.lanes)
        self.buffers["bv_exit"] = Buffer("bv_exit", "i64", "local", size=forest.num_trees * self.lanes)
        self.plan = plan
        C = forest.num_outputs
        row0 = b.local("r", i64)
        last = Bin("-", lir.ROW_END, c(1, i64))
        # Lanes past the batch's end read its last row and are never stored.
        lane_rows = [Bin("min", Bin("+", row0, c(k, i64)), last) for k in range(self.lanes)]
        body = b.push()
        self._prefetch(row0, last)
        u = Var("bv_u", i64)
        feature = Cast(Load("bv_used", u, i32), i64)
        x = b.local("x", self.row_t)
        read = Assign(x, Vector(tuple(
            Load("rows", Bin("+", Bin("*", r, lir.ROW_STRIDE), Bin("*", feature, lir.COL_STRIDE)), self.thr_t)
            for r in lane_rows)))
        is_number = Cmp("==", x, x, self.mask_t)
        if self.narrow:
            self._bins(u, read, x, is_number, U, N)
        else:
            b.emit(For(u, c(0, i64), c(U, i64), 1, [
                read,
                Store("bv_x", Bin("*", u, c(self.lanes, i64)), x),
                Store("bv_x", Bin("*", Bin("+", u, c(U, i64)), c(self.lanes, i64)),
                      Select(is_number, x, self.splat(np.inf, self.thr_t))),
            ]))
        if N and not self.narrow:  # NaN indicators (bv_used lists their features after the others)
            b.emit(For(u, c(U, i64), c(U + N, i64), 1, [
                read,
                Store("bv_x", Bin("*", Bin("+", u, c(U, i64)), c(self.lanes, i64)),
                      Select(is_number, self.splat(0.0, self.thr_t), self.splat(np.inf, self.thr_t))),
            ]))
        self.categorical = bool(plan.cat_features)
        self._decision_words(plan, lane_rows)
        acc = b.local("acc", lir.vector_type(self.acc_t, self.lanes))
        w = b.local("w", self.word_t)
        # Narrow nodes alternate between two words, ANDed at the end of a word's nodes: one
        # chain of dependent ANDs held 16-bit nodes to 1.5x their throughput.
        self.w2 = b.local("w2", self.word_t) if self.narrow else None
        ex = b.local("ex", self.ex_t)
        self._expanded([(p, t) for p, t in enumerate(trees) if expanded[t.slot]], columns, w, ex)
        self._looped(w, ex, int(looped.sum()))
        if tabled.any():
            self._tabled_exits(lane_rows, int(tabled.sum()))
        self._sum(acc, row0)
        b.pop()
        fn = lir.Function("predict_bitvector", [For(row0, lir.ROW_BEGIN, lir.ROW_END, self.lanes, body)],
                          dict(b.locals), parallel="rows", row_parallel=True)
        module = lir.Module(
            functions=functions + [fn], buffers=self.buffers, num_features=forest.num_features, num_outputs=C,
            input_type=self.thr_t, output_type=self.acc_t,
            info={"summary": f"rep={NAME} trees={forest.num_trees} nodes={node_count(forest)} outputs={C} "
                             f"lanes={self.lanes} words={self.word_bits}-bit expanded={int(expanded.sum())} "
                                f"looped={int(looped.sum())} tabled={int(tabled.sum())}",
                  "rep": NAME, "light_optimisation": bool(expanded.any()),
                  **thread_info(round((estimate or estimate_ns(forest, self.batch_size)) / WALK_STEP_NS))})
        lir.verify(module)
        return module

    def _bins(self, u: Var, read: Assign, x: Var, is_number: lir.Expr, U: int, N: int) -> None:
        """Narrow columns: each used feature's bin (thresholds ``<= x``, by a branchless binary
        search of its NaN-padded row of bv_bins; NaN is in bin 0), then the copy where NaN is
        +inf (every threshold below it), then the NaN indicators (0 or 1)."""
        b, c, i64 = self.b, Builder.const, "i64"
        steps = self.plan.bin_steps
        width = 2**steps - 1
        pos = b.local("bin", self.i64_t)
        search = [Assign(pos, self.splat(0, i64))]
        for k in reversed(range(steps)):
            probe = Gather("bv_bins", Bin("+", pos, Vector((Bin("+", Bin("*", u, c(width, i64)), c(2**k - 1, i64)),)
                                                          * self.lanes)), self.row_t)
            search.append(Assign(pos, Select(Cmp("<=", probe, x, self.mask_t), Bin("+", pos, self.splat(2**k, i64)), pos)))
        binned = Cast(pos, self.x_t)
        count = Vector((Load("bv_bin_count", u, self.node_e),) * self.lanes)
        b.emit(For(u, c(0, i64), c(U, i64), 1, [
            read, *search,
            Store("bv_x", Bin("*", u, c(self.lanes, i64)), binned),
            Store("bv_x", Bin("*", Bin("+", u, c(U, i64)), c(self.lanes, i64)), Select(is_number, binned, count)),
        ]))
        if N:
            b.emit(For(u, c(U, i64), c(U + N, i64), 1, [
                read,
                Store("bv_x", Bin("*", Bin("+", u, c(U, i64)), c(self.lanes, i64)),
                      Select(is_number, self.splat(0, self.node_e), self.splat(1, self.node_e))),
            ]))

    def _tabled_exits(self, lane_rows: list, count: int) -> None:
        """The mask-table phase's exit leaves of the block's rows (``mt_exits``, a row's tabled
        trees in model order) into bv_exit at their trees' places in the sum."""
        c, i64 = Builder.const, "i64"
        j = Var("bv_j", i64)
        rows = self.b.local("tab_rows", self.i64_t, Vector(tuple(Bin("*", r, c(count, i64)) for r in lane_rows)))
        self.b.emit(For(j, c(0, i64), c(count, i64), 1, [
            Store("bv_exit", Bin("*", Cast(Load("bv_tabled_position", j, "i32"), i64), c(self.lanes, i64)),
                  Cast(Gather("mt_exits", Bin("+", rows, Vector((j,) * self.lanes)), lir.vector_type("i32", self.lanes)),
                       self.i64_t))]))

    def _decision_words(self, plan: _Plan, lane_rows: list) -> None:
        """Each categorical feature's table row for the block's lanes (its category, the NaN
        row, or the no-category row, as the forest's category rule says), as the element where
        the row starts in bv_cat_table: bv_crow.  The words are gathered per chunk
        (:meth:`_gather_chunk`)."""
        b, c = self.b, Builder.const
        i64 = "i64"
        rule = self.forest.category_rule
        idx_t = lir.vector_type(i64, self.lanes)
        for q, cf in enumerate(plan.cat_features):
            x = b.local("xc", self.row_t, Vector(tuple(
                Load("rows", Bin("+", Bin("*", r, lir.ROW_STRIDE), Bin("*", c(cf.feature, i64), lir.COL_STRIDE)),
                     self.thr_t)
                for r in lane_rows)))
            low, low_inside, high = rule.bounds  # LightGBM truncates: (-1, 0) is category 0
            valid = Bin("&", Cmp(">=" if low_inside else ">", x, self.splat(low, self.thr_t), self.mask_t),
                        Cmp("<", x, self.splat(high, self.thr_t), self.mask_t))
            cat = b.local("cat", idx_t, Cast(Select(valid, x, self.splat(0.0, self.thr_t)), idx_t))
            if rule is CategoryRule.EXACT:
                valid = Bin("&", valid, Cmp("==", Cast(cat, self.row_t), x, self.mask_t))
            named = Bin("&", valid, Cmp("<", cat, self.splat(cf.rows, i64), self.mask_t))
            row = Select(named, cat, self.splat(cf.rows + 1, i64))
            row = Select(Cmp("!=", x, x, self.mask_t), self.splat(cf.rows, i64), row)  # NaN
            b.emit(Store("bv_crow", c(q * self.lanes, i64),
                         Bin("+", Bin("*", row, self.splat(cf.words, i64)), self.splat(cf.table_base, i64))))

    def _gather(self, row_offset: lir.Expr, table_column: lir.Expr, column_offset: lir.Expr,
                words: lir.Expr) -> For:
        """``words`` decision words of one feature into bv_cw from ``column_offset`` on: one
        gather each, of the lanes' rows from ``table_column`` on."""
        c, i64 = Builder.const, "i64"
        k = Var("bv_k", i64)
        start = Bin("+", Load("bv_crow", row_offset, self.i64_t), Vector((Bin("+", table_column, k),) * self.lanes))
        return For(k, c(0, i64), words, 1, [
            Store("bv_cw", Bin("+", column_offset, Bin("*", k, c(self.lanes, i64))),
                  Gather("bv_cat_table", start, self.cat_t))])

    def _gather_chunk(self, chunk: _Chunk) -> None:
        c, i64 = Builder.const, "i64"
        for q, table_column, column, words in chunk.entries:
            self.b.emit(self._gather(c(q * self.lanes, i64), c(table_column, i64),
                                     c(column * self.lanes, i64), c(words, i64)))

    def _prefetch(self, row0: Var, last: lir.Expr) -> None:
        """Touch every cache line of the rows ``PREFETCH_AHEAD`` blocks on (the last row past the
        batch's end)."""
        item = np.dtype(self.forest.threshold_dtype).itemsize
        F = self.forest.num_features
        if F * item > PREFETCH_ROW_BYTES:
            return
        c = Builder.const
        f = Var("bv_pf", "i64")
        for k in range(self.lanes):
            row = Bin("min", Bin("+", row0, c(PREFETCH_AHEAD * self.lanes + k, "i64")), last)
            self.b.emit(For(f, c(0, "i64"), c(F, "i64"), max(1, 64 // item), [
                lir.Prefetch("rows", Bin("+", Bin("*", row, lir.ROW_STRIDE), Bin("*", f, lir.COL_STRIDE)))]))

    def _store(self, acc: Var, row0: Var, out) -> None:
        C = self.forest.num_outputs
        for k in range(self.lanes):
            row = Bin("+", row0, Builder.const(k, "i64"))
            self.b.emit(If(Cmp("<", row, lir.ROW_END),
                           [Store("margins", Bin("+", Bin("*", row, Builder.const(C, "i64")), out), Extract(acc, k))]))

    def _sum(self, acc: Var, row0: Var) -> None:
        """Each output's margins: its trees' exit leaves added in model order from the base
        score.  They are summed after every tree is done: a gather waiting on a tree's words
        inside the tree loop stalls it (measured 1.8x slower on xgb_cancer, Zen 4)."""
        b, c = self.b, Builder.const
        i64 = "i64"
        out, t = Var("bv_o", i64), Var("bv_t", i64)
        out_body = b.push()
        b.emit(Assign(acc, Vector((Load("bv_base", out, self.acc_t),) * self.lanes)))
        b.emit(For(t, Cast(Load("bv_output", out, "i32"), i64), Cast(Load("bv_output", Bin("+", out, c(1, i64)), "i32"), i64), 1, [
            Assign(acc, Bin("+", acc, Gather("bv_leaf", Load("bv_exit", Bin("*", t, c(self.lanes, i64)), self.i64_t),
                                             lir.vector_type(self.acc_t, self.lanes))))]))
        self._store(acc, row0, out)
        b.pop()
        b.emit(For(out, c(0, i64), c(self.forest.num_outputs, i64), 1, out_body))

    def _expanded(self, trees: list, columns: int, w: Var, ex: Var) -> None:
        """Every node of these (position in the sum, tree) as code: its threshold and mask are
        constants, its feature's column a local loaded once a block."""
        if not trees:
            return
        b = self.b
        xs = [b.local("x", self.x_t, Load("bv_x", Builder.const(k * self.lanes, "i64"), self.x_t))
              for k in range(columns)]
        starts = {}  # position in ``trees`` -> the chunk starting there
        at = 0
        for chunk in self.plan.chunks:
            if at >= len(trees):
                break
            starts[at] = chunk
            at += chunk.trees
        for index, (pos, tree) in enumerate(trees):
            if index in starts:
                self._gather_chunk(starts[index])
            for k in reversed(range(len(tree.words))):
                words = [w, self.w2] if self.narrow else [w]
                for v in words:
                    b.emit(Assign(v, self.splat(-1, self.word_e)))
                for j, n in enumerate(tree.words[k].nodes()):
                    v = words[j % len(words)]
                    if n.categorical:
                        word = Load("bv_cw", Builder.const(n.column * self.lanes, "i64"), self.cat_t)
                        b.emit(self.apply_categorical(v, word, self.splat(n.bit, self.cat_e), self.splat(n.mask, self.word_e)))
                    else:
                        b.emit(self.apply(v, xs[n.column], self.splat(n.threshold, self.node_e),
                                          self.splat(n.mask, self.word_e)))
                if self.narrow:
                    b.emit(Assign(w, Bin("&", w, self.w2)))
                if k == len(tree.words) - 1:
                    b.emit(Assign(ex, Bin("+", self.leading_zeros(w), self.splat(k * self.word_bits, self.ex_e))))
                else:
                    b.emit(self.exit_leaf(ex, w, self.splat(k * self.word_bits, self.ex_e)))
            b.emit(Store("bv_exit", Builder.const(pos * self.lanes, "i64"),
                         self.exit_index(ex, self.splat(tree.leaf_base, "i64"))))

    def _looped(self, w: Var, ex: Var, count: int) -> None:
        """Loops over the node tables of :func:`layout` (``count`` trees)."""
        if not count:
            return
        b = self.b
        c = Builder.const
        i64, i32 = "i64", "i32"

        def at(buffer, index):
            return Cast(Load(buffer, index, i32), i64)

        def splat_of(e):
            return Vector((e,) * self.lanes)

        t, s, i = Var("bv_t", i64), Var("bv_s", i64), Var("bv_i", i64)

        words = [w, self.w2] if self.narrow else [w]

        def node(k):
            j = Bin("+", i, c(k, i64))
            return self.apply(words[k % len(words)], Load("bv_x", at("bv_column", j), self.x_t),
                              splat_of(Load("bv_threshold", j, self.node_e)), splat_of(Load("bv_mask", j, self.word_e)))

        def cat_node(k):
            j = Bin("+", i, c(k, i64))
            return self.apply_categorical(words[k % len(words)], Load("bv_cw", at("bv_cat_column", j), self.cat_t),
                                          splat_of(Load("bv_cat_bit", j, self.cat_e)),
                                          splat_of(Load("bv_cat_mask", j, self.word_e)))

        segment = [Assign(v, self.splat(-1, self.word_e)) for v in words]
        group = NARROW_GROUP if self.narrow else GROUP
        segment.append(For(i, at("bv_seg_start", s), at("bv_seg_start", Bin("+", s, c(1, i64))), group,
                           [node(k) for k in range(group)]))
        if self.categorical:
            segment.append(For(i, at("bv_cat_seg_start", s), at("bv_cat_seg_start", Bin("+", s, c(1, i64))),
                               group, [cat_node(k) for k in range(group)]))
        if self.narrow:
            segment.append(Assign(w, Bin("&", w, self.w2)))
        word_first = Load("bv_seg_word", s, i32) if self.ex_e == i32 else at("bv_seg_word", s)
        segment.append(self.exit_leaf(ex, w, splat_of(word_first)))
        tree = [
            Assign(ex, self.splat(0, self.ex_e)),
            For(s, at("bv_tree_seg", t), at("bv_tree_seg", Bin("+", t, c(1, i64))), 1, segment),
            Store("bv_exit", Bin("*", at("bv_position", t), c(self.lanes, i64)), self.exit_index(ex, splat_of(at("bv_leaf_base", t)))),
        ]
        if not self.categorical:
            b.emit(For(t, c(0, i64), c(count, i64), 1, tree))
            return
        # Chunk by chunk: its decision words, then its trees.
        ch, e = Var("bv_ch", i64), Var("bv_e", i64)
        gather = self._gather(at("bv_entry_row", e), at("bv_entry_table", e), at("bv_entry_column", e),
                              at("bv_entry_words", e))
        b.emit(For(ch, c(0, i64), c(_looped_chunks(self.plan, np.ones(count, bool)), i64), 1, [
            For(e, at("bv_chunk_entry", ch), at("bv_chunk_entry", Bin("+", ch, c(1, i64))), 1, [gather]),
            For(t, at("bv_chunk_tree", ch), at("bv_chunk_tree", Bin("+", ch, c(1, i64))), 1, tree),
        ]))


def lower(forest: hir.Forest, expand: bool | None = None, batch_size: int | None = None,
          narrow: bool | None = None, checked: bool = False) -> lir.Module:
    """The LIR module of bitvector evaluation.  ``expand``: emit every node as code (True),
    loop over node tables for every tree (False), or expand the trees :func:`expanded_trees`
    picks (None).  ``batch_size``: the batch size compiled for, if known (:func:`choose_form`).
    ``narrow``: the narrow form (True), the float form (False) or the cheaper (None).
    ``checked``: the caller has found :func:`unsupported` None (a pass over every node)."""
    why = None if checked else unsupported(forest)
    if why is not None:
        raise ValueError(f"bitvector evaluation cannot run this model: {why}")
    tabled, estimate = np.zeros(forest.num_trees, bool), None
    if expand is None and narrow is None:
        tabled, estimate = _choice(forest, batch_size)
        if tabled.all():
            return masktables.lower(forest, batch_size)
    nodes_part = _part(forest, ~tabled) if tabled.any() else forest
    lanes, chosen = choose_form(nodes_part, batch_size)
    expanded = np.zeros(forest.num_trees, bool)  # the node trees' choice, in model order again
    expanded[np.flatnonzero(~tabled)] = chosen
    if narrow is None:
        narrow = narrow_form(forest, lanes)
    if expand is not None:
        expanded = np.full(forest.num_trees, bool(expand))
    return _Lowering(forest, lanes, batch_size, bool(narrow)).lower(expanded, tabled, estimate)

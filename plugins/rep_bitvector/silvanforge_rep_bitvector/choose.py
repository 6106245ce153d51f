"""Which form of bitvector evaluation a forest gets, and what it is estimated to cost: the cost
model the CPU default compares with the walks' (:func:`cost_ns`, :func:`pays`), the choice of
lanes and expanded trees (:func:`choose_form`), of the narrow form (:func:`narrow_form`) and of
the trees the mask tables take (:func:`tabled_trees`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.errors import InputError
from silvanforge.ir import hir
from silvanforge.plan.memo import memoised
from silvanforge.lowering.walkcost import walk_estimate_ns

from . import masktables
from .leafbits import BYTE_WORD, NARROW_WORD, word_applications
from .options import DEFAULT, BitvectorOptions
from .support import (bin_counts, nan_split_features, tree_categorical_nodes, tree_nodes, unsupported,
                      used_features)

# The narrow form (:func:`narrow_form`): each used feature's value becomes its bin once a block
# (how many of the feature's thresholds are <= it: a binary search), every threshold its bin's
# index, so a node compares 16-bit integers and clears bits of 16-bit words: 32 lanes in one
# 512-bit vector, where 64-bit words over float64 values take four (node applications measured
# 2.5-3x cheaper, 16 against 50 ps a row, Zen 4; 16-bit words need 1.2-1.35x the applications
# of 64-bit ones on 255-leaf trees).  Exact: x >= t[j] iff more than j thresholds are <= x.
# Taken for wide blocks where every feature's thresholds make at most ``narrow_max_bins`` bins
# and their search table at most ``narrow_max_bin_bytes`` (options, :mod:`.options`).
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
# proportionally fewer nodes.  A batch size known to be smaller than a block halves the lanes
# (halving them under 4 blocks, as before, ran 1.2-2.3x slower at 16 and 64 rows on XGBoost,
# LightGBM and CatBoost models of 100-1000 trees, Zen 4, 1 thread: a block's loads serve its
# lanes, so a block of 16 rows beats two of 8).
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
# Cost model, ns a row on the AMD Zen 4 these were measured on (plugins/rep_bitvector/README.md,
# "Bitvector evaluation"): nodes and trees of each form, and the copy of each used feature into
# the block's columns, against the walks' estimate (:mod:`silvanforge.lowering.walkcost`).  Bitvectors are chosen when
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


def _smallest_up_to(nodes: np.ndarray, budget: int) -> np.ndarray:
    order = np.argsort(nodes, kind="stable")
    chosen = np.zeros(len(nodes), bool)
    chosen[order[np.cumsum(nodes[order]) <= budget]] = True
    return chosen

def narrow_form(forest: hir.Forest, lanes: int, options: BitvectorOptions = DEFAULT) -> bool:
    """Whether :func:`.codegen.lower` takes the narrow form (:data:`.leafbits.NARROW_WORD`): for
    wide blocks (most nodes looped; expanded 8-lane blocks gained nothing), where every feature's
    thresholds fit 16-bit bins; the ``narrow`` option forces it for every block or for none."""
    return narrow_bins(forest, lanes, options) is not None


def narrow_bins(forest: hir.Forest, lanes: int, options: BitvectorOptions = DEFAULT) -> np.ndarray | None:
    """:func:`bin_counts` where the narrow form is taken (:func:`narrow_form`), else None."""
    if options.narrow is False or (lanes <= LANES and not options.narrow):
        return None
    counts = bin_counts(forest)
    # ``<=`` and ``<`` splits at one value make two bins: twice the distinct values bounds them.
    most = 2 * int(counts.max(initial=0))
    table = len(counts) * 2**most.bit_length() * np.dtype(forest.threshold_dtype).itemsize
    return counts if most <= options.narrow_max_bins and table <= options.narrow_max_bin_bytes else None


def choose_form(forest: hir.Forest, batch_size: int | None = None,
                options: BitvectorOptions = DEFAULT) -> tuple[int, np.ndarray]:
    """Lanes a block and which trees (model order) are expanded: the smallest ones, up to
    ``options.expand_nodes`` nodes in all at 8 lanes; where that leaves most nodes looped, wider
    blocks (:data:`WIDE_LANES`, fewer for small batches and wide feature columns) expanding
    proportionally fewer, or none where the narrow form's looped nodes run them."""
    nodes = tree_nodes(forest)
    expanded = _smallest_up_to(nodes, options.expand_nodes)
    lanes = WIDE_LANES
    while batch_size is not None and lanes > LANES and batch_size < lanes:
        lanes //= 2
    column_bytes = 2 * len(used_features(forest)) * np.dtype(forest.threshold_dtype).itemsize
    while lanes > 2 * LANES and lanes * column_bytes > WIDE_COLUMN_BYTES:
        lanes //= 2
    wide_float32 = np.dtype(forest.threshold_dtype) == np.float32 and nodes.sum() >= WIDE_FLOAT32_NODES
    if lanes == LANES:
        return LANES, expanded
    wide = _smallest_up_to(nodes, options.expand_nodes * LANES // lanes)
    if nodes[~expanded].sum() <= nodes[expanded].sum() and not wide_float32:
        # Most nodes expanded: 8 lanes, unless wide blocks of the narrow form are estimated
        # cheaper (looped 16-bit bins over 32 lanes against expanded float64 compares over 8):
        # lgb_taxi_100x31 (3000 splits, 100 leaf-wise trees 16-39 deep) ran 1.3-1.6x faster so
        # at 64-4096 rows on AVX-512, 1.7-2x on AVX2; synthetic float64 forests of 31-128
        # leaves and random thresholds 1.5-1.8x (Zen 4, 1 thread, in one process, loaded).
        if narrow_bins(forest, lanes, options) is not None and \
                _form_ns(forest, lanes, wide, None, options) < _form_ns(forest, LANES, expanded, None, options):
            return lanes, wide
        return LANES, expanded
    if lanes == WIDE_LANES and not wide_float32 and narrow_bins(forest, lanes, options) is not None:
        # Mostly looped narrow blocks expand none: a module with expanded trees gets the light
        # pipeline (the CPU target's), which leaves its loops slower, and a narrow looped node
        # costs less than an expanded one anyway (NARROW_LOOPED_NODE_NS).  Measured alternately
        # in one process, 1 thread, 512 and 4096 rows, LightGBM: insurance 100x255 (5 trees
        # expanded) 1.07-1.08x, lgb_1000x31 (50) 1.06-1.11x, lgb_leafwise (24) 1.08-1.10x.
        # (float32 models of WIDE_FLOAT32_NODES, not measured so, keep their expanded trees.)
        return lanes, np.zeros(len(nodes), bool)
    return lanes, wide


def expanded_trees(forest: hir.Forest, batch_size: int | None = None,
                   options: BitvectorOptions = DEFAULT) -> np.ndarray:
    """Which trees (model order) :func:`.codegen.lower` expands by default (:func:`choose_form`)."""
    return choose_form(forest, batch_size, options)[1]


def mask_tables_form(forest: hir.Forest, batch_size: int | None = None,
                     options: BitvectorOptions = DEFAULT) -> bool:
    """Whether :func:`.codegen.lower` takes the mask-table form (:mod:`.masktables`) for every tree."""
    return bool(tabled_trees(forest, batch_size, options).all())


# A tree evaluated by mask tables beside node-form trees also writes its exit leaf to scratch,
# which the node phase reads back: ns a row.
MIXED_TREE_NS = 0.2
# The mix is kept only where estimated this much cheaper than the node forms alone: measured at
# 4096 rows, xgb_flight_100 (estimated 800 -> 569 ns) ran 1.16x faster mixed, xgb_abalone
# (5700 -> 5597) 1.36x slower (a second phase, its exits through memory).
MIXED_MARGIN = 1.15


def tabled_trees(forest: hir.Forest, batch_size: int | None = None,
                 options: BitvectorOptions = DEFAULT) -> np.ndarray:
    """Which trees (model order) :func:`.codegen.lower` evaluates by mask tables: every tree (the
    mask-table form), some (a mask-table phase, then the node forms for the rest, summed
    together in model order) or none, by :func:`choice`'s estimates; ``options.mask_tables`` True
    forces every tree where the form can run, False none; ``options.tabled_trees`` names them."""
    return choice(forest, batch_size, options)[0]


def some_trees(forest: hir.Forest, trees: np.ndarray) -> hir.Forest:
    """The forest of the ``trees`` (a mask in model order) alone."""
    return dataclasses.replace(forest, trees=[forest.trees[k] for k in np.flatnonzero(trees)])


def choice(forest: hir.Forest, batch_size: int | None,
           options: BitvectorOptions = DEFAULT) -> tuple[np.ndarray, float]:
    """(the trees to evaluate by mask tables, the estimated ns a row).  A tree goes to the
    tables where its share of their cost (:func:`.masktables.tree_costs_ns`, plus
    :data:`MIXED_TREE_NS` unless every tree does) is below its narrow looped nodes' cost; the
    result is kept if estimated cheaper than the node forms for every tree.  Categorical trees
    are candidates too (their categorical features are entries keyed by category).  Made once
    a forest, batch size and options within a compile (the cost, the chooser and the code
    generator all ask)."""
    return memoised(forest, ("bitvector.choice", batch_size, options),
                    lambda: _frozen(_choice(forest, batch_size, options)))


def _frozen(choice_: tuple[np.ndarray, float]) -> tuple[np.ndarray, float]:
    choice_[0].flags.writeable = False  # shared by every caller in the compile
    return choice_


def _choice(forest: hir.Forest, batch_size: int | None, options: BitvectorOptions) -> tuple[np.ndarray, float]:
    none = np.zeros(forest.num_trees, bool)
    nodes_ns = node_forms_ns(forest, batch_size, options)
    rows = options.block_rows
    if options.tabled_trees is not None:
        return _listed(forest, batch_size, options, nodes_ns)
    if options.mask_tables is False:
        return none, nodes_ns
    if options.mask_tables:
        tables_ns = masktables.choose(forest, batch_size, rows)
        return (none, nodes_ns) if tables_ns is None else (~none, tables_ns)
    cost = masktables.tree_costs_ns(forest, batch_size, rows)
    node_cost = NARROW_LOOPED_NODE_NS * tree_nodes(forest)
    tabled = cost + MIXED_TREE_NS < node_cost
    if (cost < node_cost).all():  # every tree: one phase, no hand-over
        tables_ns = masktables.choose(forest, batch_size, rows)
        return (~none, tables_ns) if tables_ns is not None and tables_ns < nodes_ns else (none, nodes_ns)
    if not tabled.any():
        return none, nodes_ns
    part = some_trees(forest, tabled)
    part_ns = masktables.choose(part, batch_size, rows)
    if part_ns is None:
        return none, nodes_ns
    mixed_ns = part_ns + MIXED_TREE_NS * part.num_trees + node_forms_ns(some_trees(forest, ~tabled), batch_size, options)
    return (tabled, mixed_ns) if MIXED_MARGIN * mixed_ns < nodes_ns else (none, nodes_ns)


def _listed(forest: hir.Forest, batch_size: int | None, options: BitvectorOptions,
            nodes_ns: float) -> tuple[np.ndarray, float]:
    """:func:`choice` of the trees the ``tabled_trees`` option names: an InputError where one is
    not a tree of the forest or the mask tables cannot run them."""
    tabled = np.zeros(forest.num_trees, bool)
    for k in options.tabled():
        if k >= forest.num_trees:
            raise InputError(f"bitvector option tabled_trees names tree {k}; the forest has {forest.num_trees}")
        tabled[k] = True
    if not tabled.any():
        return tabled, nodes_ns
    part = some_trees(forest, tabled)
    why = masktables.unsupported(part, most=options.block_rows)
    if why is not None:
        raise InputError(f"bitvector option tabled_trees: the mask tables cannot run those trees: {why}")
    tables_ns = masktables.estimate_ns(part, batch_size, most=options.block_rows)
    if tabled.all():
        return tabled, tables_ns
    return tabled, (tables_ns + MIXED_TREE_NS * part.num_trees
                    + node_forms_ns(some_trees(forest, ~tabled), batch_size, options))


# What the estimates (measured on AVX-512 code, Zen 4) are multiplied by for code on another
# vector unit: a block's 32 lanes of masks are four AVX2 registers, not one.  AVX2 code on the
# same Zen 4 (benchmarks/forms_by_cpu.py --cpus native,x86-64-v3, 1 thread): 1.9x slower on
# the leaf-wise LightGBM model at 4096 rows, 1.7x and 1.5x on xgb_1000x8 at 4096 and 16 rows,
# 2.2x on xgb_100x8 (16 lanes a block on AVX2 ran 1.1-1.2x slower than 32).  NEON and SSE
# (16-byte registers) were not measured here: twice AVX2's is assumed.
ISA_FACTORS = {"avx512": 1.0, "avx2": 1.9, "neon": 3.8, "sse": 3.8}
# The narrow form's wide blocks on AVX2 take byte words (:func:`narrow_word`): 1.17-1.36x
# slower than their AVX-512 self (the 32-bit words of the factor above had been 1.9-2.3x),
# measured alternately in one process, 1 thread, Zen 4, 512-4096 rows: xgb_100x8 1.17,
# xgb_1000x8 1.19, lgb_leafwise 1.2-1.27, lgb_1000x31 1.33-1.36, lgb_taxi_100x31 1.05 (load
# 2-4).  Blocks of 16 lanes fill half a register of bytes: their rows cost 2.5x a 32-lane
# block's on either ISA, which the AVX-512 estimates leave out (the chooser takes other forms
# there) and the factor above covers (xgb_100x8, 16 rows: 1.94x the estimate as AVX2 code).
# 16-byte registers take byte words too: SSE4.1 code (x86-64-v2, on the same Zen 4) ran them
# 2.1-3.4x faster than 32-bit words, at 1.9-2.7x the AVX-512 form's time (lgb_leafwise,
# lgb_taxi_100x31, 512 and 4096 rows, load 5-6); NEON was not measured: twice AVX2's assumed.
NARROW_ISA_FACTORS = {**ISA_FACTORS, "avx2": 1.2, "sse": 2.3, "neon": 2.4}
# The mask-table form ANDs one mask of up to 256 bits an entry (one AVX2 register) and finds its
# keys in scalar code: as AVX2 code 1.02-1.25x its AVX-512 self at 4096 rows (1 thread, Zen 4,
# in turns in one process, rows as each model's training data: taxi 1000x255 1.24-1.25,
# taxizone 1000x255 1.1, insurance 100x255 1.02, flight 1000x255 1.13, taxiclean 100x255
# 0.93-1.55), where the node forms' factor had it at 1.9.  SSE and NEON were not measured.
MASK_TABLE_ISA_FACTORS = {**ISA_FACTORS, "avx2": 1.25}
# Blocks whose bytes fill less than a register (16 lanes of AVX2 code: half of one) take the
# word this model prices cheaper (:func:`narrow_word`): ns a block of 16 rows for a numeric
# node application, a categorical one, and a word of a forest with categorical splits (its
# categorical loop).  A byte word applies a numeric node in half a register where 32-bit words
# sign-extend the compare into two and AND and blend both, but spreads a node over more words
# (1.4-1.5 applications a node against 1.1), each categorical compare of 32-bit decision words
# is narrowed to bytes, and four times the words each run their categorical loop.  Fitted on
# 16 LightGBM models of 31-255 leaves, 0-67% of their nodes categorical, every tree looped
# (AVX2 code, Zen 4, 1 thread, both words alternately in one process, load 3-4): bytes took
# 0.81-0.89 of 32-bit words' time on every numeric one, 1.25-1.62x on every categorical one
# (lgb_flight_1000x255, 9% categorical: 1.25x); the model's ratios are within 0.85-1.1 of those.
HALF_REGISTER_NS = {BYTE_WORD: (0.61, 0.94, 2.9), NARROW_WORD: (0.98, 0.97, 0.0)}


def narrow_word(forest: hir.Forest, lanes: int, vectors=None, options: BitvectorOptions = DEFAULT) -> int:
    """Bits of the narrow form's words in blocks of ``lanes`` rows of ``forest``'s node trees,
    for code on the vector unit ``vectors`` (None: AVX-512); ``options.narrow_word`` where given.
    AVX-512: 32 (:data:`.leafbits.NARROW_WORD`).  Narrower units (AVX2, SSE, NEON), where a
    register holds the block's bytes: bytes (:data:`.leafbits.BYTE_WORD`).  There a node's
    compare of byte bins is a byte mask over the block's lanes: 32-bit words took it
    sign-extended into four AVX2 registers for 32 lanes (eight of 16 bytes), an AND and a blend
    each (AVX-512 masks the AND), byte words one AND and one blend a register of bytes, for 1.41
    node applications where 32-bit words need 1.06 (lgb_leafwise; 1.5 and 1.1 on 255-leaf
    trees).  Blocks of fewer lanes: the word :func:`half_register_ns` prices cheaper."""
    if options.narrow_word is not None:
        return options.narrow_word
    if vectors is None or vectors.bits >= 512:
        return NARROW_WORD
    if lanes * BYTE_WORD >= vectors.bits:
        return BYTE_WORD
    return min((BYTE_WORD, NARROW_WORD), key=lambda bits: half_register_ns(forest, bits))


def half_register_ns(forest: hir.Forest, bits: int) -> float:
    """Estimated ns a block of ``forest``'s node trees in the narrow form, words of ``bits``
    bits, blocks whose bytes fill half a register (:data:`HALF_REGISTER_NS`)."""
    numeric, categorical, words = word_applications(forest, bits)
    node_ns, categorical_ns, word_ns = HALF_REGISTER_NS[bits]
    return node_ns * numeric + categorical_ns * categorical + (word_ns * words if categorical else 0.0)


def isa_factor(vectors, narrow: bool = False) -> float:
    """:data:`ISA_FACTORS` (``narrow``: the narrow form's wide blocks, :data:`NARROW_ISA_FACTORS`)
    for the vector unit ``vectors`` (None: AVX-512, the estimates' own; an ISA not listed: by
    its registers' width)."""
    factors = NARROW_ISA_FACTORS if narrow else ISA_FACTORS
    if vectors is None:
        return 1.0
    if vectors.isa in factors:
        return factors[vectors.isa]
    return 1.0 if vectors.bits >= 512 else factors["avx2"] if vectors.bits >= 256 else factors["neon"]


def vector_factor(forest: hir.Forest, batch_size: int | None = None, options: BitvectorOptions = DEFAULT,
                  vectors=None) -> float:
    """What :func:`estimate_ns` is multiplied by for the program :func:`.codegen.lower` builds
    for ``batch_size`` as code on ``vectors`` (None: AVX-512, 1): the mask tables'
    :data:`MASK_TABLE_ISA_FACTORS`; the narrow form's byte words in blocks of :data:`WIDE_LANES`
    rows :data:`NARROW_ISA_FACTORS`; its blocks whose bytes fill less than a register
    :data:`ISA_FACTORS` (measured with byte words there) times the :func:`narrow_word`'s price
    over that of bytes (:func:`half_register_ns`); the rest :data:`ISA_FACTORS`.  A forest whose
    trees go to both: each part's factor, weighed by its share of the estimate."""
    if vectors is None:
        return 1.0
    tabled = tabled_trees(forest, batch_size, options)
    tables = MASK_TABLE_ISA_FACTORS.get(vectors.isa) or isa_factor(vectors)
    if tabled.all():
        return tables
    nodes_part = some_trees(forest, ~tabled) if tabled.any() else forest
    nodes = _node_forms_factor(forest, nodes_part, batch_size, options, vectors)
    if not tabled.any():
        return nodes
    part = some_trees(forest, tabled)
    part_ns = (masktables.choose(part, batch_size, options.block_rows) or 0.0) + MIXED_TREE_NS * part.num_trees
    rest_ns = node_forms_ns(nodes_part, batch_size, options)
    return (tables * part_ns + nodes * rest_ns) / (part_ns + rest_ns) if part_ns + rest_ns > 0 else nodes


def _node_forms_factor(forest: hir.Forest, nodes_part: hir.Forest, batch_size: int | None,
                       options: BitvectorOptions, vectors) -> float:
    """:func:`vector_factor` of the node forms running ``nodes_part`` (the trees of ``forest``
    that no mask table takes)."""
    lanes = choose_form(nodes_part, batch_size, options)[0]
    if not narrow_form(forest, lanes, options):
        return isa_factor(vectors)
    word = narrow_word(nodes_part, lanes, vectors, options)
    if lanes * BYTE_WORD < vectors.bits < 512:
        in_bytes = half_register_ns(nodes_part, BYTE_WORD)  # (0 for a forest of leaves only)
        return isa_factor(vectors) * (half_register_ns(nodes_part, word) / in_bytes if in_bytes else 1.0)
    return isa_factor(vectors, lanes == WIDE_LANES and word == BYTE_WORD)


def estimate_ns(forest: hir.Forest, batch_size: int | None = None, options: BitvectorOptions = DEFAULT) -> float:
    """Estimated ns a row of this forest's bitvector kernel (as :func:`.codegen.lower` builds it)."""
    return choice(forest, batch_size, options)[1]


def node_forms_ns(forest: hir.Forest, batch_size: int | None = None,
                  options: BitvectorOptions = DEFAULT) -> float:
    """Estimated ns a row of the node forms (expanded, looped, narrow); a batch smaller than a
    block pays for the whole block."""
    lanes, expanded = choose_form(forest, batch_size, options)
    return _form_ns(forest, lanes, expanded, batch_size, options)


def _form_ns(forest: hir.Forest, lanes: int, expanded: np.ndarray, batch_size: int | None,
             options: BitvectorOptions = DEFAULT) -> float:
    """Estimated ns a row of the node forms in blocks of ``lanes`` rows, trees ``expanded``
    expanded and the rest looped (narrow where :func:`narrow_bins` takes them)."""
    nodes = tree_nodes(forest)
    looped_ns = LOOPED_NODE_NS if lanes == LANES else WIDE_LOOPED_NODE_NS[lanes]
    used = len(used_features(forest)) + len(nan_split_features(forest))
    looped = looped_ns * nodes[~expanded].sum() + LOOPED_TREE_NS * (~expanded).sum()
    counts = narrow_bins(forest, lanes, options)
    if counts is not None:
        categorical = int(tree_categorical_nodes(forest)[~expanded].sum())
        looped = (NARROW_LOOPED_NODE_NS * nodes[~expanded].sum() + NARROW_CATEGORICAL_EXTRA_NS * categorical
                  + BIN_STEP_NS * len(counts) * int(counts.max(initial=0)).bit_length())
    elif lanes != LANES and np.dtype(forest.threshold_dtype) == np.float64:
        looped += WIDE_LOOPED_FLOAT64_EXTRA_NS * nodes[~expanded].sum()
    per_row = (EXPANDED_NODE_NS * nodes[expanded].sum() + EXPANDED_TREE_NS * expanded.sum()
               + looped + COLUMN_NS * used)
    return per_row * (lanes / min(lanes, batch_size) if batch_size else 1)


def pays(forest: hir.Forest, batch_size: int | None = None, options: BitvectorOptions = DEFAULT) -> bool:
    """Whether bitvector evaluation should beat the walks on this forest at this batch size
    (None: large batches; see the costs above); always False where ``options.auto_choose`` is off."""
    if not options.auto_choose or unsupported(forest) is not None:
        return False
    return cost_ns(forest, batch_size, options) <= walk_estimate_ns(forest, batch_size)


def cost_ns(forest: hir.Forest, batch_size: int | None = None, options: BitvectorOptions = DEFAULT) -> float:
    """What the representation chooser compares with the other representations' costs: the
    estimate, charged :data:`MARGIN` so that walks keep models where bitvectors would gain less."""
    return MARGIN * estimate_ns(forest, batch_size, options)


__all__ = ["LANES", "WIDE_LANES", "MARGIN",
           "narrow_form", "narrow_bins", "choose_form", "expanded_trees", "mask_tables_form", "tabled_trees",
           "some_trees", "choice", "estimate_ns", "node_forms_ns", "pays", "cost_ns", "ISA_FACTORS",
           "NARROW_ISA_FACTORS", "MASK_TABLE_ISA_FACTORS", "HALF_REGISTER_NS", "narrow_word", "half_register_ns", "isa_factor",
           "vector_factor"]

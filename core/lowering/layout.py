"""The shared node encoding every walk representation starts from: the types of the
representation contract (:class:`ForestLayout`, :class:`TreeLayout`, :class:`RepBuffers`, the
split flags ``FLAG_*``) and :func:`build_layout`, which lays a forest out in it.

They live apart from the lowering that uses them so that the contract (:mod:`silvanforge.rep`),
and the plugins implementing it, depend on the encoding alone and not on the walk generator;
:mod:`silvanforge.rep` and :mod:`silvanforge.lowering.walksetup` re-export these names.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.errors import UnsupportedModelError
from silvanforge.ir import hir
from silvanforge.ir.hir import Op
from silvanforge.ir.hir_joined import joined, offsets, per_tree, tree_depths
from silvanforge.lowering.linear_leaves import LinearTables, exact_rows, tables
from silvanforge.options import CompileOptions
from silvanforge.frontend.tiling import TiledForest, tile_forest

# Split flags byte (one per node): what the decision needs beyond threshold and feature.
FLAG_DEFAULT_LEFT = 1  # a missing value goes left
FLAG_ZERO_MISSING = 2  # |x| <= 1e-35f is missing too (LightGBM missing type Zero)
FLAG_CATEGORICAL = 4  # the threshold slot holds the offset of the node's category bitset
FLAG_OP_SHIFT = 3  # bits 3-4: the hir.Op of a numerical split


@dataclasses.dataclass
class TreeLayout:
    """Node arrays of one tree in the encoding every representation stores."""

    threshold: np.ndarray  # comparison dtype; category-bitset offset for categorical nodes
    feature: np.ndarray  # int32, -1 at leaves
    flags: np.ndarray  # uint8
    left: np.ndarray  # int32, -1 at leaves
    right: np.ndarray  # int32
    leaf_slot: np.ndarray  # int32 index of the leaf's first value in leaf_values, -1 inside
    depth: int


def _slice_of(k: int) -> property:
    def read(self) -> np.ndarray:
        return self._nodes[k][self._lo:self._hi]

    def write(self, value) -> None:
        self._nodes[k][self._lo:self._hi] = value
    return property(read, write)


class _TreeSlice(TreeLayout):
    """A :class:`TreeLayout` whose arrays are its slices of the whole forest's (``nodes``: the
    six arrays in field order, every tree's nodes joined), sliced when read and written through:
    a view held a tree and array cost more than a 100,000-tree forest's nodes themselves
    (six views of about 150 bytes a tree)."""

    threshold, feature, flags, left, right, leaf_slot = (_slice_of(k) for k in range(6))

    def __init__(self, nodes: tuple, lo: int, hi: int, depth: int):  # noqa: D107 - not the dataclass's
        self._nodes, self._lo, self._hi, self.depth = nodes, lo, hi, depth


@dataclasses.dataclass
class ForestLayout:
    """The forest in the shared node encoding, plus facts that let code generation specialise."""

    forest: hir.Forest
    trees: list[TreeLayout]
    leaf_values: np.ndarray  # accumulation dtype; each leaf holds len(tree.outputs) values
    cat_bits: np.ndarray  # int32 words: at each offset, the word count and then the words
    threshold_dtype: np.dtype
    leaf_dtype: np.dtype
    ops: frozenset[int]
    has_categorical: bool
    has_zero_missing: bool
    # The uniform tiling of every tree (:mod:`silvanforge.frontend.tiling`) when compiling with a tile
    # size above 1; None for node-at-a-time walks.  Representations that lay out tiles read it.
    tiles: TiledForest | None = None
    # Widths: representations store feature indices in ``feature_dtype`` (the smallest
    # of int8/int16/int32 holding -1 .. num_features - 1) and their own index fields (child
    # offsets, leaf slots) in :meth:`index_dtype`; narrower node arrays shrink the working set.
    feature_dtype: np.dtype = np.dtype(np.int32)
    min_index_dtype: np.dtype = np.dtype(np.int8)
    # Whether representations may keep a leaf's value in its threshold slot (one load less at
    # the end of every walk): every tree feeds one output and leaves have the threshold dtype.
    inline_leaves: bool = False
    # Whether the default-left bit rides in the feature field: ``(feature << 1) | default_left``
    # (leaves stay -1).  Chosen where one comparison op decides every numerical split and none
    # treats zero as missing: without categorical splits the walk then loads no flags byte, one
    # load less per step; with them the field is the column of a split row all the same (the
    # flags byte then says only which splits are categorical), so their walks read split rows
    # too.  Representations store ``TreeLayout.feature`` as it is; the core decodes it.
    packed_default_left: bool = False
    # Set by the core when walks read split rows (a leaf's feature, -1, reads a NaN column there):
    # representations may then make a leaf a fixed point of a step (see silvanforge.rep).
    leaf_self_loops: bool = False
    # Set by the core where every walk is chained (``chainWalks``, with self-looping leaves): the
    # lanes L, whose chains (trees j, j + L, ...) a representation with ``chains`` lays out
    # (silvanforge.rep.Representation.chains); 0 otherwise.
    chain_lanes: int = 0
    # Set with split rows on a forest with categorical splits: each feature's largest category a
    # split names, plus one (:func:`split_row_categories`); None otherwise.
    category_tops: np.ndarray | None = None
    # Set with split rows whose categorical splits read *set columns* (:func:`split_row_sets`):
    # each distinct set's membership decided as the row is split; None otherwise.
    set_columns: "SetColumns | None" = None
    # A forest with linear leaves: their tables, one row a leaf slot, and ``leaf_values`` holds
    # each slot's row number, not its value (silvanforge.lowering.linear_leaves); None otherwise.
    linear: LinearTables | None = None

    @property
    def tile_size(self) -> int:
        return 1 if self.tiles is None else self.tiles.tile_size

    def index_dtype(self, lo: int, hi: int) -> np.dtype:
        """The narrowest integer dtype (int8, int16, int32; never below ``min_index_dtype``)
        holding every value in ``[lo, hi]``."""
        return smallest_int(lo, hi, self.min_index_dtype)


INDEX_DTYPES = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32))


def smallest_int(lo: int, hi: int, at_least=np.int8) -> np.dtype:
    """The narrowest of int8, int16, int32 (at least ``at_least``) holding ``[lo, hi]``."""
    floor = np.dtype(at_least)
    for dt in INDEX_DTYPES:
        if dt.itemsize >= floor.itemsize and np.iinfo(dt).min <= lo and hi <= np.iinfo(dt).max:
            return dt
    raise UnsupportedModelError(f"node indices {lo}..{hi} do not fit in int32")


def build_layout(forest: hir.Forest, tile_size: int = 1, options: CompileOptions | None = None) -> ForestLayout:
    """``forest`` in the shared node encoding; ``options``: the node widths, inline leaves and
    packed default-left bit it forces (:class:`silvanforge.options.CompileOptions`; None: the
    narrowest exact).  Every tree's nodes are encoded at once (:mod:`silvanforge.ir.hir_joined`);
    each tree's arrays are its slices of the forest's."""
    options = options or CompileOptions()
    thr_dt = np.dtype(forest.threshold_dtype)
    leaf_dt = np.dtype(forest.accumulate_dtype)
    linear_leaves = forest.has_linear()
    left, right = joined(forest, "left"), joined(forest, "right")
    internal = left >= 0
    flags = (joined(forest, "default_left").astype(np.uint8) * FLAG_DEFAULT_LEFT
             | joined(forest, "zero_missing").astype(np.uint8) * FLAG_ZERO_MISSING
             | (joined(forest, "op").astype(np.uint8) << FLAG_OP_SHIFT))
    # A threshold converted to the comparison dtype must round the same way the library
    # does: both libraries store thresholds in the dtype they compare in, so this is exact.
    thresholds = joined(forest, "threshold").astype(thr_dt)
    categorical = np.zeros(len(left), bool)
    cat_bits = _category_bitsets(forest, flags, thresholds, categorical)
    op = joined(forest, "op")
    ops = set(int(o) for o in np.unique(op[internal & ~categorical]))
    leaf_slot, leaf_values = _leaf_slots(forest, internal, leaf_dt, linear_leaves)
    linear = None
    if linear_leaves:
        linear = tables(forest, leaf_dt)
        if not exact_rows(linear.rows, leaf_dt):
            raise UnsupportedModelError(f"{linear.rows} leaves with linear models: too many to number "
                                        f"exactly in {leaf_dt.name}")
        leaf_values = np.arange(max(linear.rows, 1), dtype=leaf_dt)
    has_categorical = forest.has_categorical()
    has_zero_missing = bool(joined(forest, "zero_missing")[internal].any())
    packed = not has_zero_missing and len(ops) <= 1 and options.packed_default_left is not False
    feature = np.where(internal, joined(forest, "feature"), -1).astype(np.int32)
    flags = np.where(internal, flags, 0).astype(np.uint8)
    if packed:
        feature = np.where(internal, (feature << 1) | (flags & FLAG_DEFAULT_LEFT), -1).astype(np.int32)
    nodes = (np.where(internal, thresholds, 0).astype(thr_dt), feature, flags,
             left.astype(np.int32), right.astype(np.int32), leaf_slot)
    bounds = offsets(forest).tolist()
    trees = [_TreeSlice(nodes, lo, hi, d) for lo, hi, d in zip(bounds[:-1], bounds[1:], tree_depths(forest).tolist())]
    max_feature = max(forest.num_features - 1, 0)
    # A leaf's value sits in its threshold slot where that dtype holds it exactly: the same
    # dtype, or a float widened (the leaf ids of a float64 model, float32 values: the walk
    # of a row's leaf ids then ends as a prediction's does, on the leaf's own node).
    inline = (all(len(t.outputs) == 1 for t in forest.trees)
              and (leaf_dt == thr_dt or leaf_dt.kind == thr_dt.kind == "f" and leaf_dt.itemsize < thr_dt.itemsize)
              and options.inline_leaves is not False)
    return ForestLayout(
        forest=forest, trees=trees, leaf_values=leaf_values, cat_bits=cat_bits,
        threshold_dtype=thr_dt, leaf_dtype=leaf_dt, ops=frozenset(ops) or frozenset({Op.LT}),
        has_categorical=has_categorical, has_zero_missing=has_zero_missing,
        tiles=tile_forest(forest, tile_size) if tile_size > 1 else None,
        feature_dtype=smallest_int(-1, 2 * max_feature + 1 if packed else max_feature,
                                   options.feature_width or np.int8),
        min_index_dtype=np.dtype(options.index_width or np.int8),
        inline_leaves=inline, packed_default_left=packed, linear=linear,
    )


def _categorical_splits(forest: hir.Forest) -> tuple[list, list]:
    """(tree, node) of every categorical split, tree by tree and node by node, and its
    categories."""
    split, sets = [], []
    for k in [k for k, tree in enumerate(forest.trees) if tree.categories]:
        for node, cats in sorted(forest.trees[k].categories.items()):
            split.append((k, node))
            sets.append(np.asarray(cats, dtype=np.int64))
    return split, sets


def _category_bitsets(forest: hir.Forest, flags: np.ndarray, thresholds: np.ndarray,
                      categorical: np.ndarray) -> np.ndarray:
    """The category bitsets of every categorical split, tree by tree and node by node: each
    node's offset written to its threshold slot, its flag set and ``categorical`` marked
    (joined numbering)."""
    starts = offsets(forest).tolist()
    split, sets = _categorical_splits(forest)
    # Every node's bitset at once (a loop of NumPy calls a node took a tenth of a second on
    # 1000 trees of 255 leaves): its word count, then its words; the offsets follow.  The word
    # counts from one maximum a set over all ids (a max call a set cost 30 ms on flight's trees).
    sizes = np.array([len(c) for c in sets], np.int64)
    ids = np.concatenate(sets + [np.zeros(0, np.int64)])
    nwords = np.zeros(len(sets), np.int64)
    filled = sizes > 0
    if filled.any():
        nwords[filled] = np.maximum.reduceat(ids, (np.cumsum(sizes) - sizes)[filled]) // 32 + 1
    ends = np.cumsum(nwords + 1)
    # Offsets live in the threshold slot (exact in float32 below 2**24): check the size before
    # allocating, so a huge category id is refused, not laid out.
    if len(ends) and ends[-1] > 2**24:
        i = int(np.argmax(ends > 2**24))
        k, node = split[i]
        raise UnsupportedModelError(
            f"categorical splits naming categories up to {int(sets[i].max())} (feature "
            f"{int(forest.trees[k].feature[node])}): their bitsets would pass 2**24 words (64 MiB)")
    first = ends - nwords - 1
    # (a trailing zero word keeps the first-word load of an empty set (offset + 1) in bounds)
    words = np.zeros(int(ends[-1]) + 1 if len(ends) else 1, dtype=np.uint32)
    words[first] = nwords
    np.bitwise_or.at(words, np.repeat(first + 1, sizes) + ids // 32,
                     np.left_shift(np.uint32(1), (ids % 32).astype(np.uint32)))
    at = np.array([starts[k] + node for k, node in split], np.int64)
    flags[at] |= FLAG_CATEGORICAL
    thresholds[at] = first
    categorical[at] = True
    return words.view(np.int32)


def category_top(forest: hir.Forest) -> np.ndarray:
    """Each feature's largest category that a categorical split names (-1: none names any)."""
    top = np.full(forest.num_features, -1, np.int64)
    starts = offsets(forest)
    split, sets = _categorical_splits(forest)
    if split:
        feature = joined(forest, "feature")[[starts[k] + node for k, node in split]]
        # (each set's largest at once: a max call a set took 60 ms on flight's 22,000 splits)
        sizes = np.array([len(c) for c in sets], np.int64)
        largest = np.full(len(sets), -1, np.int64)
        filled = sizes > 0
        if filled.any():
            ids = np.concatenate(sets)
            largest[filled] = np.maximum.reduceat(ids, (np.cumsum(sizes) - sizes)[filled])
        np.maximum.at(top, feature, largest)
    return top


def _split_row_words(forest: hir.Forest) -> tuple[list, list, np.ndarray, np.ndarray, np.ndarray]:
    """(the categorical splits, their categories, each split's feature, each feature's largest
    named category (:func:`category_top`), each split's word count) as
    :func:`split_row_categories` lays them out: a split's bitset spans its feature's categories
    up to ``top + 2``."""
    split, sets = _categorical_splits(forest)
    starts = offsets(forest)
    at = np.array([starts[k] + node for k, node in split], np.int64)
    column = joined(forest, "feature")[at].astype(np.int64) if split else np.zeros(0, np.int64)
    top = category_top(forest)
    return split, sets, column, top, (top[column] + 2) // 32 + 1


def split_row_categories_fit(layout: ForestLayout) -> bool:
    """Whether :func:`split_row_categories` can re-encode the categorical splits: every
    feature's ``top + 2`` a whole number the rows' dtype holds exactly (float32 holds whole
    numbers up to 2**24 only: past it a missing value's column would read a named category),
    and the bitsets, each spanning its feature's categories, not many times the splits' own (a
    feature of many categories split often multiplies them; the walks test the splits' own)."""
    split, sets, _, top, nwords = _split_row_words(layout.forest)
    if not split:
        return True
    if int(top.max()) + 2 > 2 ** (np.finfo(layout.threshold_dtype).nmant + 1):
        return False
    own = sum(int(c.max()) // 32 + 1 if len(c) else 1 for c in sets)
    return int(nwords.sum()) <= max(4 * own, 2**16)


def split_row_categories(layout: ForestLayout) -> None:
    """Re-encode the categorical splits for walks reading split rows, whose *category columns*
    hold each feature's category already decided (:meth:`WalkGenerator.fill_split_rows`), so
    a categorical step is one bitset word's load and a bit test: no validity test, no word
    count, no NaN test.

    Feature ``f``'s columns hold its category where the value is one up to ``top[f]``
    (:func:`category_top`), else ``top[f] + 1`` (no category: right); a missing value reads
    ``top[f] + 1`` in the first column and ``top[f] + 2`` in the second.  Each split's bitset
    spans bits ``0 .. top[f] + 2`` with bit ``top[f] + 2`` set (a missing value goes left in the
    second column); its field is ``((F + f) << 1) | default_left`` (``F`` features), so it reads
    the column its default direction names, as a numerical split does."""
    forest = layout.forest
    split, sets, column, top, nwords = _split_row_words(forest)
    if not split or not layout.trees:
        return
    threshold, feature = layout.trees[0]._nodes[:2]  # every tree's nodes, joined
    starts = offsets(forest)
    at = np.array([starts[k] + node for k, node in split], np.int64)
    layout.category_tops = (top + 1).astype(np.int32)
    left = top[column] + 2  # each split's bit of a missing value going left
    first = np.cumsum(nwords) - nwords
    if len(first) and first[-1] + nwords[-1] > 2**24:
        raise UnsupportedModelError("categorical splits whose bitsets would pass 2**24 words (64 MiB)")
    # Zero words after the last bitset: a walk past its batch's end reads a split row that is no
    # row's, clamped to a category up to the largest ``top + 2`` (see _in_split_category).
    words = np.zeros(int(nwords.sum()) + int(top.max() + 2) // 32 + 1, np.uint32)
    ids = np.concatenate(sets + [np.zeros(0, np.int64)])
    np.bitwise_or.at(words, np.repeat(first, [len(c) for c in sets]) + ids // 32,
                     np.left_shift(np.uint32(1), (ids % 32).astype(np.uint32)))
    words[first + left // 32] |= np.left_shift(np.uint32(1), (left % 32).astype(np.uint32))
    threshold[at] = first
    feature[at] = ((forest.num_features + column) << 1) | (feature[at] & FLAG_DEFAULT_LEFT)
    layout.cat_bits = words.view(np.int32)
    layout.feature_dtype = np.promote_types(layout.feature_dtype,
                                            smallest_int(-1, 4 * forest.num_features - 1))


@dataclasses.dataclass
class SetColumns:
    """The set columns of split rows (:func:`split_row_sets`): the distinct category sets of
    the categorical splits, grouped by feature.  Group ``g`` reads feature ``features[g]``, whose
    category the row's split decides as :func:`split_row_categories` does (``tops[g]``: no
    category; ``tops[g] + 1``: missing); its ``counts[g]`` sets are columns ``starts[g]`` on
    (after the ``2F`` value columns), and their bitsets lie word-major at ``words_at[g]`` in
    ``words``: word ``w`` of set ``s`` at ``words_at[g] + w * counts[g] + s`` (a row's sets of
    one feature then read consecutive words)."""

    features: np.ndarray  # int32
    starts: np.ndarray  # int32
    counts: np.ndarray  # int32
    words_at: np.ndarray  # int32
    tops: np.ndarray  # int32
    words: np.ndarray  # int32

    @property
    def columns(self) -> int:
        return int(self.counts.sum())


def split_row_sets(layout: ForestLayout) -> None:
    """Re-encode the categorical splits as numerical splits of *set columns*: each distinct
    (feature, category set, missing direction) is a column of the split rows that holds 0 where
    the row's category is in the set (left) and 1 where not, written as the row is split
    (:meth:`WalkGenerator.fill_split_rows`); its splits compare that column with 0.5.  A walk
    then has no categorical step at all: no branch to a bitset test (a fresh row's branch
    mispredicted about a third of one-row time on a 1000-tree categorical LightGBM model) and
    no select of both tests, and vector and tiled walks take categorical forests too.

    The price is every set's bit written once a row (the walks read a few of them):
    :func:`silvanforge.lowering.walkcost.set_columns_pay` bounds it.  Each set's bitset spans its
    feature's categories up to ``top + 2`` as in :func:`split_row_categories`; a missing value
    reads category ``top + 2``, whose bit is set where the split sends it left."""
    forest = layout.forest
    split, sets, column, top, _ = _split_row_words(forest)
    if not split or not layout.trees:
        return
    threshold, feature, flags = layout.trees[0]._nodes[:3]  # every tree's nodes, joined
    starts = offsets(forest)
    at = np.array([starts[k] + node for k, node in split], np.int64)
    default_left = (feature[at] & FLAG_DEFAULT_LEFT).astype(bool)
    sizes = np.array([len(c) for c in sets], np.int64)
    ids = np.concatenate(sets + [np.zeros(0, np.int64)])
    of_id = np.repeat(np.arange(len(split)), sizes)  # each category's split
    features = np.unique(column)
    counts, tables = [], []
    column_of = np.empty(len(split), np.int64)
    for f in features.tolist():  # (a feature at a time: its splits' bitsets are of one length)
        mine = np.flatnonzero(column == f)
        local = np.full(len(split), -1, np.int64)
        local[mine] = np.arange(len(mine))
        bits = np.zeros((len(mine), int(top[f] + 2) // 32 + 1), np.uint32)
        named = column[of_id] == f
        np.bitwise_or.at(bits, (local[of_id[named]], ids[named] // 32),
                         np.left_shift(np.uint32(1), (ids[named] % 32).astype(np.uint32)))
        missing = int(top[f] + 2)  # its bit: where the split sends a missing value left
        bits[default_left[mine], missing // 32] |= np.uint32(1 << (missing % 32))
        distinct, inverse = np.unique(bits, axis=0, return_inverse=True)
        column_of[mine] = sum(counts) + inverse.reshape(-1)
        counts.append(len(distinct))
        tables.append(distinct.T.reshape(-1))  # word-major
    counts = np.array(counts, np.int32)
    first = np.cumsum(counts) - counts
    sizes = np.array([len(w) for w in tables], np.int64)
    threshold[at] = 0.5
    feature[at] = 2 * forest.num_features + column_of
    flags[at] &= ~np.uint8(FLAG_CATEGORICAL)
    layout.set_columns = SetColumns(
        features=np.array(features, np.int32), starts=first.astype(np.int32), counts=counts,
        words_at=(np.cumsum(sizes) - sizes).astype(np.int32), tops=(top[features] + 1).astype(np.int32),
        words=np.concatenate(tables).view(np.int32))
    layout.has_categorical = False
    layout.cat_bits = np.zeros(1, np.int32)
    layout.feature_dtype = np.promote_types(layout.feature_dtype, smallest_int(
        -1, 2 * forest.num_features + int(counts.sum()) - 1))


def _leaf_slots(forest: hir.Forest, internal: np.ndarray, leaf_dt: np.dtype, linear_leaves: bool
                ) -> tuple[np.ndarray, np.ndarray]:
    """Each node's leaf slot (the index of its first value in the leaf values; -1 inside), joined
    numbering, and the leaf values: a leaf's values follow the previous leaf's, except vector
    leaves, stored once per distinct vector."""
    slot = np.full(len(internal), -1, dtype=np.int32)
    widths = np.fromiter((len(t.outputs) for t in forest.trees), np.int64, len(forest.trees))
    if forest.trees and (widths == 1).all():
        # One value a leaf, in node order: its slot the count of leaves before it.
        leaves = np.flatnonzero(~internal)
        slot[leaves] = np.arange(len(leaves), dtype=np.int32)
        return slot, joined(forest, "leaf_value")[leaves].astype(leaf_dt).reshape(-1)
    leaf_chunks: list[np.ndarray] = []
    leaf_size = 0
    vector_slots: dict[tuple[int, bytes], int] = {}  # (outputs, a vector's bytes) -> its slot
    for tree, tree_slot in zip(forest.trees, per_tree(forest, slot)):
        leaves = np.flatnonzero(tree.left < 0)
        n_out = len(tree.outputs)
        values = tree.leaf_value[leaves].astype(leaf_dt)
        if n_out > 1 and not linear_leaves:
            # Vector leaves are stored once per distinct vector: a fully grown random forest's
            # leaves are its classes' one-hot votes (240,686 leaves of 10 classes, 10 distinct
            # vectors), whose 9.6 MB of copies missed the cache on every walk's last step
            # (39 of 54 ns a tree and row at 4096 rows).  Equal bits, so exact.
            kinds, which = np.unique(values.view(np.dtype((np.void, values.itemsize * n_out))).reshape(-1),
                                     return_inverse=True)
            at = np.empty(len(kinds), np.int32)
            for k, kind in enumerate(kinds.tolist()):
                key = (n_out, kind)
                if key not in vector_slots:
                    vector_slots[key] = leaf_size
                    leaf_chunks.append(np.frombuffer(kind, leaf_dt))
                    leaf_size += n_out
                at[k] = vector_slots[key]
            tree_slot[leaves] = at[which.reshape(-1)]
        else:
            tree_slot[leaves] = leaf_size + np.arange(len(leaves), dtype=np.int32) * n_out
            leaf_chunks.append(values.reshape(-1))
            leaf_size += len(leaves) * n_out
    return slot, np.concatenate(leaf_chunks) if leaf_chunks else np.zeros(1, leaf_dt)


@dataclasses.dataclass
class RepBuffers:
    """What a representation lays out: named model buffers (NumPy arrays) and facts about them."""

    buffers: dict[str, np.ndarray]
    info: dict = dataclasses.field(default_factory=dict)


__all__ = ["FLAG_DEFAULT_LEFT", "FLAG_ZERO_MISSING", "FLAG_CATEGORICAL", "FLAG_OP_SHIFT", "TreeLayout",
           "ForestLayout", "RepBuffers", "INDEX_DTYPES", "smallest_int", "build_layout"]

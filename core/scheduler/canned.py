"""Named schedules: the loop orders of known systems, written in the scheduling language.

Each is a function ``(forest, batch_size) -> Schedule`` so its sizes can follow the model; the
text of each is what ``forge show --level mir --schedule NAME`` prints at its head.  Plugins add
named schedules of their own (the ``silvanforge_schedules`` hook: a GPU backend's template, say);
:meth:`silvanforge.plugins.PluginRegistry.schedules` lists them all.
"""

from __future__ import annotations

import math

from silvanforge.frontend.hir_passes import tree_groups
from silvanforge.ir import hir
from silvanforge.scheduler.schedule import Schedule

# Rows per tile in XGBoost's CPU predictor (the SilvanForge paper draft, section 'The XBoost
# Schedule': 64 in the version it describes).
XGBOOST_CHUNK = 64


def default(forest: hir.Forest, batch_size: int | None = None) -> Schedule:
    """Each row walks every tree in order; rows in parallel (the loop order of the Treebeard paper
    draft)."""
    return Schedule().parallel("batch")


def xgboost(forest: hir.Forest, batch_size: int | None = None, chunk: int = XGBOOST_CHUNK) -> Schedule:
    """XGBoost's order (the SilvanForge paper draft, section 'The XBoost Schedule'): a chunk of rows
    walks one tree before the next tree; chunks in parallel."""
    return (Schedule().tile("batch", "b0", "b1", chunk).reorder("b0", "tree", "b1").parallel("b0"))


def interleaved(forest: hir.Forest, batch_size: int | None = None, chunk: int = XGBOOST_CHUNK,
                lanes: int = 8) -> Schedule:
    """XGBoost's order with ``lanes`` rows walking each tree together: their dependent loads
    overlap instead of waiting on each other (the CPU default for batches of 16 rows or more)."""
    return (Schedule().tile("batch", "b0", "b1", chunk).reorder("b0", "tree", "b1")
            .tile("b1", "c0", "c1", lanes).interleave("c1").parallel("b0"))


def interleaved_trees(forest: hir.Forest, batch_size: int | None = None, lanes: int = 8) -> Schedule:
    """Each row walks ``lanes`` trees together, their dependent loads overlapping; rows in
    parallel (the CPU default for batches under 16 rows, which have no rows to interleave).
    Fewer than 2 trees (``lanes`` or the forest's): :func:`default`."""
    lanes = min(lanes, forest.num_trees)
    if lanes < 2:
        return default(forest, batch_size)
    return Schedule().tile("tree", "t0", "t1", lanes).interleave("t1").parallel("batch")


def chained_trees(forest: hir.Forest, batch_size: int | None = None, lanes: int = 8) -> Schedule:
    """Each row's trees walked by ``lanes`` chains (:meth:`Schedule.chain_walks`): every lane
    walks its own trees back to back instead of waiting at a leaf for the others (the CPU
    default for a few rows of deep, uneven trees); rows in parallel.  Where chains cannot be
    laid out it lowers as ``interleaved-trees``; fewer than 2 trees: :func:`default`."""
    lanes = min(lanes, forest.num_trees)
    if lanes < 2:
        return default(forest, batch_size)
    return Schedule().interleave("tree", lanes).chain_walks("tree").parallel("batch")


def peel_groups(forest: hir.Forest, batch_size: int | None = None, groups=None,
                base: Schedule | None = None) -> Schedule:
    """``base`` (default: ``interleaved``, or ``default`` for batches under 16 rows) with the tree
    loop split at group boundaries and each group's walks peeled to its shallowest leaf (the
    probability-based tiling draft: walks of trees with equal peel depth share specialised code).
    ``groups`` (:class:`silvanforge.frontend.hir_passes.TreeGroup`) default to the runs of trees with equal
    peel depth in the forest's order: reorder the trees first (``compile(reorder=...)``) for few,
    large groups."""
    groups = tree_groups(forest, "peel") if groups is None else groups
    if base is None:
        base = default(forest, batch_size) if batch_size is not None and batch_size < 16 \
            else interleaved(forest, batch_size)
    s = Schedule(base.directives)
    index, names = "tree", []
    for k, g in enumerate(groups[:-1]):
        first, rest = f"g{k}", f"g{k}_rest"
        s.split(index, first, rest, g.stop - g.start)
        names.append(first)
        index = rest
    names.append(index)
    for name, g in zip(names, groups):
        if g.peel > 0:
            s.peel_walk(name, g.peel)
    return s


def one_tree_at_a_time(forest: hir.Forest, batch_size: int | None = None) -> Schedule:
    """Every row walks one tree before any row walks the next: the tree stays in cache."""
    return Schedule().reorder("tree", "batch").parallel("batch")


def tree_parallel(forest: hir.Forest, batch_size: int | None = None, parts: int = 2) -> Schedule:
    """The trees split into ``parts`` groups walked in parallel over all rows; the partial
    margins are privatised per group and folded afterwards (a legalised reduction)."""
    per_part = max(1, math.ceil(forest.num_trees / parts))
    return (Schedule().tile("tree", "t0", "t1", per_part).reorder("t0", "batch", "t1").parallel("t0"))


def split_trees(forest: hir.Forest, batch_size: int | None = None, lanes: int = 8) -> Schedule:
    """Each row's trees split over threads, exactly: groups of ``lanes`` trees walked side by
    side (as ``interleaved-trees``), the groups shared out over threads, every tree's value kept
    apart and added in tree order afterwards (orderedReduce), so a long one-row call runs on
    two threads and still sums as the reference does (``tree-parallel`` reorders the sums)."""
    lanes = max(2, min(lanes, forest.num_trees)) if forest.num_trees > 1 else 1
    s = Schedule().tile("tree", "t0", "t1", lanes).reorder("t0", "batch", "t1")
    if lanes > 1:
        s.interleave("t1")
    s.parallel("t0")
    # min and max give the same in any order: their groups' partial results fold exactly; trees
    # that own their outputs (leaf ids) write them directly, with nothing to fold.
    if forest.aggregation in (hir.Aggregation.SUM, hir.Aggregation.AVERAGE) and not forest.trees_own_outputs():
        s.ordered_reduce("t0")
    return s


def tahoe_direct(forest: hir.Forest, batch_size: int | None = None, rows_per_block: int = 64) -> Schedule:
    """Tahoe's direct method (the SilvanForge paper draft, section 'Tahoe Schedules'): one GPU
    thread walks all trees for one row."""
    return (Schedule().tile("batch", "b0", "b1", rows_per_block).reorder("b0", "b1", "tree")
            .gpu_dimension("b0", "grid.x").gpu_dimension("b1", "block.x"))


def tahoe_shared_data(forest: hir.Forest, batch_size: int | None = None) -> Schedule:
    """Tahoe's shared data: a thread block walks all trees of one row in parallel, the row in
    shared memory; partial sums reduced across the block."""
    return (Schedule().reorder("batch", "tree").gpu_dimension("batch", "grid.x")
            .gpu_dimension("tree", "block.x").cache("batch"))


def tahoe_shared_forest(forest: hir.Forest, batch_size: int | None = None,
                        rows_per_block: int = 64) -> Schedule:
    """Tahoe's shared forest: the whole model in shared memory, one thread per row."""
    return (Schedule().tile("batch", "b0", "b1", rows_per_block)
            .tile("tree", "t0", "t1", max(1, forest.num_trees)).reorder("b0", "b1", "t0", "t1")
            .cache("t0").gpu_dimension("b0", "grid.x").gpu_dimension("b1", "block.x"))


def tahoe_shared_partial_forest(forest: hir.Forest, batch_size: int | None = None,
                                rows_per_block: int = 64, trees_per_block: int = 16) -> Schedule:
    """Tahoe's shared partial forest: chunks of trees in shared memory, one chunk per block row
    of the grid; partial results reduced across chunks."""
    return (Schedule().tile("batch", "b0", "b1", rows_per_block)
            .tile("tree", "t0", "t0Inner", trees_per_block)
            .tile("t0Inner", "t1", "t2", trees_per_block).cache("t1")
            .reorder("b0", "t0", "b1", "t1", "t2")
            .gpu_dimension("b0", "grid.x").gpu_dimension("t0", "grid.y").gpu_dimension("b1", "block.x"))


CANNED = {
    "default": default,
    "xgboost": xgboost,
    "interleaved": interleaved,
    "interleaved-trees": interleaved_trees,
    "chained-trees": chained_trees,
    "peel-groups": peel_groups,
    "one-tree-at-a-time": one_tree_at_a_time,
    "tree-parallel": tree_parallel,
    "split-trees": split_trees,
    "tahoe-direct": tahoe_direct,
    "tahoe-shared-data": tahoe_shared_data,
    "tahoe-shared-forest": tahoe_shared_forest,
    "tahoe-shared-partial-forest": tahoe_shared_partial_forest,
}
# Those that map loops to a GPU (Tahoe's strategies, the SilvanForge paper draft, section 'Tahoe
# Schedules').
GPU_CANNED = tuple(name for name in CANNED if name.startswith("tahoe"))


def canned(name: str, forest: hir.Forest, batch_size: int | None = None) -> Schedule:
    return CANNED[name](forest, batch_size)

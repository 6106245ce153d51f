"""The GPU template schedule of the SilvanForge paper draft, section 'Exploring the Schedule Space',
and the default chosen from it.

The template gives each thread block ``rows_per_block`` rows (grid.x), each thread
``rows_per_thread`` of them (block.x threads: rows_per_block / rows_per_thread), and spreads the
trees over ``tree_threads`` threads (block.y) that each walk a contiguous chunk of trees; the
tree threads' partial sums are folded after a barrier (in shared memory with ``shared_reduce``).
The block's rows can be cached in shared memory; walks can be unrolled and interleaved::

    tile(batch, b0, b1, rows_per_block)     gpuDimension(b0, grid.x)
    tile(b1, b2, b3, rows_per_thread)       gpuDimension(b2, block.x)
    tile(tree, t0, t1, trees_per_thread)    gpuDimension(t0, block.y)
    reorder(b0, b2, t0, t1, b3)             cache(b0) / sharedReduce(t0) / interleave(b3) ...

:func:`candidates` lists the set Algorithm 1's ``TBConfigs`` would evaluate (batch size against
2048 rows, features against 128), for a tuner that can time them on the GPU;
:func:`default_gpu_schedule` takes the shapes that were fastest when such a sweep ran on an H100
(:func:`default_params`), since the compiler may not time candidates on the machine that compiles.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from silvanforge.ir import hir
from silvanforge.scheduler import Schedule

BATCH_THRESHOLD = 2048  # T_batch of Algorithm 1
FEATURE_THRESHOLD = 128  # T_f of Algorithm 1


@dataclasses.dataclass(frozen=True)
class TemplateParams:
    rows_per_block: int = 32
    rows_per_thread: int = 1
    tree_threads: int = 1
    cache_rows: bool = True
    unroll_walk: int = 0
    interleave: int = 1
    shared_reduce: bool = False


def gpu_template(forest: hir.Forest, p: TemplateParams) -> Schedule:
    """The template schedule for ``forest`` with parameters ``p`` (see the module docstring)."""
    rows_per_thread = max(1, min(p.rows_per_thread, p.rows_per_block))
    tree_threads = max(1, min(p.tree_threads, forest.num_trees))
    s = Schedule().tile("batch", "b0", "b1", p.rows_per_block)
    s.tile("b1", "b2", "b3", rows_per_thread)
    s.tile("tree", "t0", "t1", max(1, math.ceil(forest.num_trees / tree_threads)))
    s.reorder("b0", "b2", "t0", "t1", "b3")
    s.gpu_dimension("b0", "grid.x").gpu_dimension("b2", "block.x")
    if tree_threads > 1:
        s.gpu_dimension("t0", "block.y")
        if p.shared_reduce:
            s.shared_reduce("t0")
    if p.cache_rows:
        s.cache("b0")
    if p.unroll_walk:
        s.unroll_walk("b3", p.unroll_walk)
    if p.interleave > 1 and rows_per_thread > 1:
        s.interleave("b3", min(p.interleave, rows_per_thread))
    return s


def tb_configs(batch_size: int | None, num_features: int) -> tuple[tuple, tuple]:
    """Algorithm 1's TBConfigs: (rows per block, tree threads) candidates."""
    if batch_size is not None and batch_size <= BATCH_THRESHOLD:
        return (8, 32), (20, 50)
    if num_features <= FEATURE_THRESHOLD:
        return (32, 64), (2, 10)
    return (8, 32), (20, 50)


def candidates(forest: hir.Forest, batch_size: int | None) -> list[TemplateParams]:
    """The schedules Algorithm 1 evaluates (rows cached, trees never; interleave 1, 2, 4)."""
    rows, threads = tb_configs(batch_size, forest.num_features)
    return [TemplateParams(rows_per_block=r, rows_per_thread=i, tree_threads=t, interleave=i)
            for r, t, i in itertools.product(rows, threads, (1, 2, 4))]


# Batches above this many rows take the large-batch shape of :func:`default_params`.
LARGE_BATCH = 16384


def default_params(forest: hir.Forest, batch_size: int | None) -> TemplateParams:
    """Measured on an H100 over the 144 template schedules of ``benchmarks/gpu_explore.py``
    (100-tree depth-8 XGBoost and LightGBM models, plugins/gpu/README.md): folding the tree threads'
    sums in shared memory beat global scratch at every batch size (0.52-0.75x the kernel time);
    up to 4096 rows, 32 rows per block with 20 tree threads was fastest or near it; at 65536 rows,
    16 rows per block, 2 interleaved rows per thread and 4 tree threads (0.53x the small shape's
    kernel time; the grid alone fills the GPU).  An unknown batch size takes the small shape,
    which is never far off at large batches, where the copy of the rows dominates."""
    if batch_size is not None and batch_size > LARGE_BATCH:
        return TemplateParams(rows_per_block=16, rows_per_thread=2, interleave=2, tree_threads=4,
                              cache_rows=True, shared_reduce=True)
    return TemplateParams(rows_per_block=32, tree_threads=20, cache_rows=True, shared_reduce=True)


def default_gpu_schedule(forest: hir.Forest, batch_size: int | None = None) -> Schedule:
    """The GPU template of the SilvanForge paper draft, section 'Exploring the Schedule Space', with
    Algorithm 1's parameters for this batch (the GPU targets' default schedule, and the named
    schedule ``gpu-template``)."""
    return gpu_template(forest, default_params(forest, batch_size))


# The named schedules the GPU targets add to the core's canned ones (their ``silvanforge_schedules``
# hook): ``compile(schedule="gpu-template")``, ``--schedule gpu-template``.
SCHEDULES = {"gpu-template": default_gpu_schedule}

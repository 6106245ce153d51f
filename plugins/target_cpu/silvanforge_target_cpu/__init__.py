"""The CPU target: LIR -> LLVM IR (llvmlite) -> O3 -> JIT for the host CPU, or for a named x86-64
CPU (``cpu="x86-64-v3"``, :mod:`.cpus`): code for a fleet, built and saved anywhere, run where
the host has that CPU's features.

:class:`CpuTarget` is the plugin's one target (its ``silvanforge_targets`` hook lists it); its
kernels are :class:`.jit.CpuKernel`.  The core's lowering serves it (it brings none of its own).
"""

from __future__ import annotations

import json

from silvanforge import hookimpl
from silvanforge.target import Target

NAME = "cpu"


class CpuTarget(Target):
    """LLVM IR JIT-compiled for this machine's CPU (see the module docstring)."""

    name = NAME
    kind = "cpu"
    # LLVM fuses no multiply and add that the IR does not allow to (no contraction flags).
    linear_leaves = True

    def can_run_here(self) -> tuple[bool, str]:
        try:
            from . import jit

            jit.host_signature()
        except Exception as exc:  # llvmlite missing or broken
            return False, f"llvmlite cannot JIT on this machine: {exc}"
        return True, ""

    def default_schedule(self, forest, batch_size, options=None, walks=None):
        return default_schedule(forest, batch_size, options, walks)

    def source(self, module, options=None) -> str:
        from . import codegen

        return str(codegen.generate(module, cpu=_cpu(options)))

    def compile(self, module, options):
        from . import codegen, jit

        _reject_gpu_constructs(module)
        cpu = _cpu(options)
        return jit.compile_module(module, str(codegen.generate(module, cpu=cpu)), cpu)

    def contributions_kernel(self):
        from . import treeshap

        return treeshap.kernel()

    def hashed_columns_kernel(self, saved=None):
        from . import hashed_columns

        return hashed_columns.kernel(saved)

    def arrow_columns_kernel(self):
        from . import arrow_columns

        return arrow_columns.kernel()

    def check_cpu(self, cpu):
        from . import cpus

        return cpus.canonical(cpu)

    def vectors(self, cpu):
        from . import cpus

        return cpus.vectors(cpu)

    def host_key(self) -> str:
        from . import jit

        return json.dumps(jit.host_signature(), sort_keys=True)

    def load_kernel(self, module, blob, options):
        from . import jit

        return jit.load_artifact(module, blob, _cpu(options))


def _cpu(options) -> str | None:
    """The named CPU of a compile's kernel options (None: this host), checked again: a name
    LLVM does not know must never reach it (it aborts the process)."""
    from . import cpus

    return cpus.canonical((options or {}).get("cpu"))


@hookimpl
def silvanforge_targets():
    return [CpuTarget]


def default_schedule(forest, batch_size, options=None, walks=None):
    """The CPU's schedule for ``forest`` at ``batch_size`` (None: any), knowing the compile's
    ``options`` (its lowering knobs and threads) and the representation whose walks it drives
    (``walks``: a :class:`silvanforge.rep.ChosenWalks`) where given."""
    from silvanforge.frontend.hir_passes import leaf_depth_range
    from silvanforge.lowering.walksetup import split_rows_pay, want_leaf_self_loops
    from silvanforge.lowering.walkcost import chains_pay
    from silvanforge.scheduler.canned import chained_trees, interleaved, interleaved_trees, split_trees

    # Interleaved walks pay once a batch has rows to interleave (docs/benchmarks.md, "Small calls");
    # a batch known to be tiny walks row by row, each row's trees together where the
    # representation's walks gain from it (its ``row_tree_lanes``); a long one-row walk splits
    # its trees over two threads.
    if batch_size is not None and batch_size < 16:
        lanes = 1 if walks is None else walks.row_tree_lanes
        if walks is not None and walks.chains and chains_pay(forest, lanes):
            # Lanes walking their trees back to back (silvanforge.lowering.chains), on one thread
            # even where two could split the trees: one row chained on one thread ran 1.2-1.7x
            # the unchained split on two (docs/design.md, "Chained walks"); forge tune times both.
            return chained_trees(forest, batch_size, lanes=lanes)
        if batch_size == 1 and walks is not None and _split_one_row(forest, options, walks):
            return split_trees(forest, batch_size, lanes=lanes)
        return interleaved_trees(forest, batch_size, lanes=lanes)

    shallowest, deepest = leaf_depth_range(forest)
    # Wide rows: a walk touches lines all over each row, which no hardware prefetcher follows.
    # Caching each chunk's rows as it starts makes the lowering split them chunk by chunk (a
    # sequential read, then walks of rows in L2), or prefetch them.
    wide = row_bytes(forest) >= WIDE_ROW_BYTES
    # Walks of split rows address every lane's row from one register, so 16 lanes fit the
    # registers where every step is peeled (padded trees, or self-looping leaves); walks with
    # leaf checks keep 8 (docs/benchmarks.md, "Measurements behind the defaults").
    peeled = shallowest == deepest or want_leaf_self_loops(
        forest, options.leaf_self_loops if options is not None else None)
    lanes = WIDE_LANES if split_rows_pay(forest, check_width=not wide) and peeled else LANES
    schedule = interleaved(forest, batch_size, chunk=row_chunk(forest), lanes=lanes)
    if wide:
        schedule.cache("b0")
    if shallowest == deepest > 0:
        # Every walk takes exactly this many steps (padded trees): none needs a leaf check.
        schedule.peel_walk("c1", deepest)
    elif shallowest >= PEEL_MIN:
        # Every walk takes at least this many steps: those need no leaf check.
        schedule.peel_walk("c1", shallowest)
    return schedule


# A one-row walk splits its trees over two threads (split-trees: the second half handed to a
# native worker, the values added in tree order) where half the walk saves more than the
# hand-off and the ordered fold of every tree's slot of every output cost.  The
# representations' one-row estimates run about half the measured time, so the estimate stands
# for the half saved.  The fold adds a tree's slot per output, the outputs' sums side by side:
# a tree costs an add's latency, or its outputs' loads where there are many.  The 100-tree
# models lose (xgb_wide_2000's worker reads 2000 features of the row from the other core):
# docs/benchmarks.md, "Measurements behind the defaults".
SPLIT_HANDOFF_NS = 1_500
SPLIT_FOLD_NS = 1.0  # a tree
SPLIT_FOLD_OUTPUT_NS = 0.25  # a tree's output


def _split_one_row(forest, options, walks) -> bool:
    """Whether a one-row form of ``forest`` walked by ``walks`` splits its trees over threads
    (split-trees)."""
    from silvanforge.runtime.threads import default_threads

    threads = getattr(options, "threads", None) or default_threads()
    if threads < 2:
        return False
    ns = walks.estimate_ns(forest, "cpu", 1)
    # (trees that own their outputs, as leaf ids, write them directly: no fold)
    fold = 0.0 if forest.trees_own_outputs() else \
        forest.num_trees * max(SPLIT_FOLD_NS, SPLIT_FOLD_OUTPUT_NS * forest.num_outputs)
    return ns is not None and ns >= SPLIT_HANDOFF_NS + fold


# Rows of one chunk (walked tree by tree) should stay in the L2 cache with room for the tree
# nodes: 64 rows (XGBoost's block) unless rows are wide (2000 float32 features: 32 rows).
CHUNK_BYTES = 256 << 10
MAX_CHUNK, MIN_CHUNK = 64, 16
LANES, WIDE_LANES = 8, 16
PEEL_MIN = 2


# Rows of this many bytes and more are cached a chunk at a time (the batch loop's cache(b0)):
# walks read lines all over a row, which no prefetcher follows, so rows from memory cost a
# miss a line; a chunk's rows split as it starts (a sequential read) are then walked in L2.
# 1.6-2.4x on 2000-feature models; from 512 B, 2.8x on a 968-feature XGBoost model (Bosch's
# shape) and 1.5-2x on synthetic forests of 128-512 float32 features, 0.9-1.0x at 32-64
# (100 trees of depth 8, 4096-row calls, 1 thread, AVX2 and AVX-512 code, Zen 4).
WIDE_ROW_BYTES = 512


def row_bytes(forest) -> int:
    import numpy as np

    return max(1, forest.num_features) * np.dtype(forest.threshold_dtype).itemsize


def row_chunk(forest) -> int:
    chunk = MAX_CHUNK
    while chunk > MIN_CHUNK and chunk * row_bytes(forest) > CHUNK_BYTES:
        chunk //= 2
    return chunk


def _reject_gpu_constructs(module):
    from silvanforge import ScheduleError

    for index, what in module.info.get("gpu", []):
        directive = what if what.endswith("Reduce") else f"gpuDimension({index}, {what})"
        raise ScheduleError(f"{directive} maps loop {index} to a GPU; the cpu target has no GPU "
                            "grid or shared memory (use parallel, or compile for cuda/amd)")

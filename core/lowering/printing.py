"""A program printed at each level of the compiler: ``hir`` (the trees, with their tiles),
``mir`` (the loop nest the schedule made), ``lir`` (buffers and statements) and ``target`` (what
the target plugin generates: LLVM IR, CUDA C, OpenCL C), for ``forge show``, ``sf.show`` and a
compiled model's ``show``."""

from __future__ import annotations

from silvanforge.errors import InputError
from silvanforge.frontend.tiling import format_hir, with_tile_ids
from silvanforge.ir import hir, lir, mir
from silvanforge.options import CompileOptions, kernel_options
from silvanforge.plugins import registry


def program_text(level: str, forest: hir.Forest, tile_ids, tile_size: int, options: CompileOptions, mir_fn,
                 lir_module) -> str:
    """A program at ``level`` (hir, mir, lir, target) compiled with ``options`` (its target and
    CPU make the target code): ``mir_fn`` and ``lir_module`` give the MIR function and LIR
    module when asked (a loaded model lowers them only then)."""
    if level == "hir":
        return format_hir(_tiled_model(forest, tile_ids), tile_size)
    if level == "mir":
        return mir.format_function(mir_fn())
    if level == "lir":
        return lir.format_module(lir_module())
    if level == "target":
        target = registry().target(options.target)
        if options.cpu is None:
            return target.source(lir_module())
        return target.source(lir_module(), kernel_options(options))
    raise InputError(f"unknown level {level!r}; choose hir, mir, lir or target")


def _tiled_model(forest: hir.Forest, tile_ids) -> hir.Forest:
    return forest if tile_ids is None else with_tile_ids(forest, tile_ids)

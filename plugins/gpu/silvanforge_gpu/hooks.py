"""The hooks every GPU target implements alike, made for one target name: its default schedule
(the GPU template), its lowering (:func:`silvanforge_gpu.lowering.lower_gpu`) and the named
schedules the template adds.  A target module binds them to its own names::

    (silvanforge_target_default_schedule, silvanforge_target_lower,
     silvanforge_schedules) = target_hooks(NAME)

(pluggy finds hook implementations by the module attribute's name.)"""

from __future__ import annotations

from silvanforge import hookimpl


def target_hooks(name: str) -> tuple:
    """``(default_schedule, lower, schedules)`` hook implementations for GPU target ``name``."""

    @hookimpl
    def silvanforge_target_default_schedule(target, forest, batch_size):
        if target != name:
            return None
        from .template import default_gpu_schedule

        return default_gpu_schedule(forest, batch_size)

    @hookimpl
    def silvanforge_target_lower(target, forest, fn, rep, tile_size, options):
        if target != name:
            return None
        from .lowering import lower_gpu

        return lower_gpu(forest, fn, rep, tile_size, options=options)

    @hookimpl
    def silvanforge_schedules():
        from .template import SCHEDULES

        return SCHEDULES

    return silvanforge_target_default_schedule, silvanforge_target_lower, silvanforge_schedules

"""What every GPU target does alike, written once: :class:`GpuTarget`, a
:class:`silvanforge.target.Target` of kind ``gpu`` whose default schedule is the GPU template,
whose lowering is :func:`silvanforge_gpu.lowering.lower_gpu` and whose source is the C of its
dialect; and :func:`silvanforge_schedules`, the template's named schedules, which a target
module lists as its own hook::

    class CudaTarget(GpuTarget):
        name = "cuda"
        def c_dialect(self): ...       # silvanforge_gpu.c_dialect.CUDA
        def can_run_here(self): ...
        def compile(self, module, options): ...

    from silvanforge_gpu.target import silvanforge_schedules  # noqa: F401  (a hook)

Importing it costs a few lines: the lowering, emitter and template are imported when used.
"""

from __future__ import annotations

from silvanforge import hookimpl
from silvanforge.target import Target


class GpuTarget(Target):
    """Base of the GPU targets: a subclass names itself, gives its C dialect
    (:meth:`c_dialect`), and says whether it runs here and how it compiles (and reloads) a
    module."""

    kind = "gpu"

    def c_dialect(self):
        """The :class:`silvanforge_gpu.c_dialect.Dialect` its source is written in."""
        raise NotImplementedError

    def default_schedule(self, forest, batch_size, options=None, walks=None):
        from .template import default_gpu_schedule

        return default_gpu_schedule(forest, batch_size)

    def lower(self, forest, fn, rep, tile_size, options):
        from .lowering import lower_gpu

        return lower_gpu(forest, fn, rep, tile_size, options=options)

    def source(self, module) -> str:
        from .c_dialect import emit

        return emit(module, self.c_dialect())

    def tune(self, forest, rows, sizes, budget_s, threads, progress):
        """Algorithm 1 per band of rows per call (:mod:`silvanforge_gpu.plansearch`)."""
        from .plansearch import tune_plan

        return tune_plan(self.name, forest, rows, sizes, budget_s, progress)


@hookimpl
def silvanforge_schedules():
    from .template import SCHEDULES

    return SCHEDULES

"""Algorithm 1 of the SilvanForge paper draft (section 'Exploring the Schedule Space'): time the
template's candidates on the target and keep the best, then try shared reduction on the three best.

It needs the target to run here (it times real launches), so it is a separate step
(``forge tune-gpu``), not part of ``compile``: the default GPU schedule takes Algorithm 1's first
candidate without timing (:func:`silvanforge_gpu.template.default_params`).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from silvanforge.errors import PluginError, ScheduleError, UnsupportedModelError
from silvanforge.scheduler import Schedule

from .template import TemplateParams, candidates, gpu_template


@dataclasses.dataclass
class Trial:
    params: TemplateParams
    rep: str
    seconds: float  # best kernel time (device clock where the target records it)
    compile_s: float = 0.0


@dataclasses.dataclass
class Exploration:
    best: Trial
    schedule: Schedule
    trials: list
    #: candidates this model, target or device cannot take: (params, rep, why)
    skipped: list = dataclasses.field(default_factory=list)


def _time(cf, X, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        cf.predict(X)
        wall = time.perf_counter() - start
        kernel = getattr(cf.kernel, "last_timing", {}).get("kernel")
        best = min(best, kernel if kernel is not None and np.isfinite(kernel) else wall)
    return best


def explore(model, target: str, batch_size: int, reps: tuple[str, ...] | None = None,
            params: list[TemplateParams] | None = None, repeat: int = 3, X=None,
            progress=None, deadline: float | None = None) -> Exploration:
    """Time every candidate x representation on ``batch_size`` rows (random ones unless ``X``);
    the three fastest are timed again with ``sharedReduce``; the fastest of all wins.  ``reps``:
    the representations to try (default: every installed one the core walks).  ``deadline``: a
    ``time.perf_counter()`` past which no further candidate is started (one always is)."""
    from silvanforge import api
    from silvanforge.ir import hir
    from silvanforge.frontend.loading import load_model
    from silvanforge.plugins import registry
    from silvanforge.frontend.sampling import random_rows

    forest = model if isinstance(model, hir.Forest) else load_model(model)
    X = random_rows(forest, batch_size) if X is None else X
    if reps is None:
        reg = registry()
        reps = tuple(r for r in reg.representations() if reg.rep_kind(r) == "walk")
    todo = [(p, r) for p in (params or candidates(forest, batch_size)) for r in reps]
    trials: list[Trial] = []
    skipped: list = []

    def run(p: TemplateParams, rep: str):
        if trials and deadline is not None and time.perf_counter() > deadline:
            return
        if progress is not None:
            progress(f"{rep} {p}", len(trials), len(todo) + 3)
        start = time.perf_counter()
        try:
            cf = api.compile(forest, target=target, rep=rep, schedule=gpu_template(forest, p),
                             batch_size=batch_size)
        except (ScheduleError, UnsupportedModelError, PluginError) as exc:
            # Not a candidate here: more threads a block than the device takes, a representation
            # the model cannot use...  Algorithm 1 goes on with the others.
            skipped.append((p, rep, " ".join(str(exc).split())[:200]))
            return
        compile_s = time.perf_counter() - start
        trials.append(Trial(p, rep, _time(cf, X, repeat), compile_s))

    for p, rep in todo:
        run(p, rep)
    for t in sorted(trials, key=lambda t: t.seconds)[:3]:
        if t.params.tree_threads > 1 and not t.params.shared_reduce:
            run(dataclasses.replace(t.params, shared_reduce=True), t.rep)
    if not trials:
        reasons = "; ".join(sorted({why for _, _, why in skipped}))[:400]
        raise ScheduleError(f"no GPU template candidate runs for this model on {target}: {reasons}")
    best = min(trials, key=lambda t: t.seconds)
    return Exploration(best, gpu_template(forest, best.params), trials, skipped)

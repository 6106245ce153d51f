"""The GPU targets' plan search (:meth:`silvanforge.target.Target.tune`, so ``sf.tune`` and
``forge tune --target cuda|amd``): Algorithm 1 (:func:`silvanforge_gpu.explore.explore`) at each
request size of :data:`SIZES`, its winner answering the band of rows around that size.

Per size, in order, while the budget lasts (a size reached past it still times one candidate):
the template's candidates for that batch size x the walk representations are compiled and timed
on that many rows (the caller's sample, repeated to the size, else rows drawn around the
model's thresholds), kernel time on the device clock where the target records it (the copies
of rows and margins are the same for every candidate); the three fastest with tree threads are
timed again with ``sharedReduce``; a candidate the device cannot take (more threads a block
than it allows) is recorded with the reason and passed over.  Band edges lie halfway between sizes, as the CPU search
places them; neighbouring sizes won by the same schedule share one band and one form.

The record has the CPU search's shape (:func:`silvanforge.plan.tuning.record_header`, candidates
with ``us_per_call`` by rows, winners), plus each candidate's ``schedule`` and ``rep``, so
``forge show --tuning`` prints it and a load on another GPU (another
:meth:`~silvanforge.target.Target.host_key`) warns and uses the untuned plan.
"""

from __future__ import annotations

import time
from importlib import metadata

import numpy as np

from silvanforge.options import CompileOptions

# Rows per call tuned for: a small request, a batch, a large batch (GPU launches pay for
# themselves from hundreds of rows; see docs/benchmarks.md).
SIZES = (512, 4096, 65536)
REPEAT = 3


def tune_plan(target: str, forest, rows, sizes, budget_s: float, progress) -> tuple[list, dict]:
    """``(bands, record)`` of :meth:`silvanforge.target.Target.tune` for GPU target ``target``."""
    from silvanforge.frontend.sampling import random_rows
    from silvanforge.plan.tuning import record_header

    from . import explore as explore_module
    from .template import gpu_template

    start = time.perf_counter()
    sizes = tuple(sorted({int(s) for s in (sizes or SIZES)}))
    share = budget_s / len(sizes)
    winners = []  # per size: the winning Trial
    keyed: dict = {}  # (rep, params) -> candidate entry of the record
    for k, size in enumerate(sizes):
        X = _rows(forest, rows, size, random_rows)
        deadline = start + share * (k + 1)

        def say(what, done, total, size=size):
            progress(f"{size} rows: {what}", done, total)

        found = explore_module.explore(forest, target, size, X=X, repeat=REPEAT, progress=say,
                                       deadline=deadline)
        def entry(rep, params):
            return keyed.setdefault((rep, params), {
                "form": f"rep={rep} {_params_text(params)}", "rep": rep,
                "schedule": gpu_template(forest, params).to_text(), "estimate_ns": None,
                "compile_s": 0.0, "us_per_call": {}})

        for trial in found.trials:
            e = entry(trial.rep, trial.params)
            e["compile_s"] = round(e["compile_s"] + trial.compile_s, 3)
            e["us_per_call"][str(size)] = round(trial.seconds * 1e6, 3)
        for params, rep, why in found.skipped:
            entry(rep, params)["error"] = why
        winners.append(found.best)
    candidates = list(keyed.values())
    index = {key: n for n, key in enumerate(keyed)}
    # Bands: halfway between sizes; neighbours won by one schedule merged.
    bands, record_winners = [], []
    lo = 1
    for k, (size, best) in enumerate(zip(sizes, winners)):
        hi = None if k == len(sizes) - 1 else size + (sizes[k + 1] - size) // 2
        key = (best.rep, best.params)
        if bands and bands[-1][2] == key:
            bands[-1] = (bands[-1][0], hi, key, bands[-1][3])
        else:
            bands.append((lo, hi, key, size))
        lo = (hi or 0) + 1
    plan = []
    for lo, hi, key, size in bands:
        rep, params = key
        plan.append((hi, CompileOptions(target=target, rep=rep, schedule=gpu_template(forest, params),
                                        batch_size=size)))
        text = f"{lo}+" if hi is None else (str(lo) if lo == hi else f"{lo}-{hi}")
        record_winners.append({"rows": text, "candidate": index[key]})
    record = record_header(target, None, budget_s, time.perf_counter() - start, sizes, rows is not None)
    record["threads"] = None  # a GPU grid runs the rows
    record["versions"].update(_versions())
    record["search"] = "GPU template, Algorithm 1 per band; times are kernel time on the device clock"
    record["candidates"] = candidates
    record["winners"] = record_winners
    return plan, record


def _rows(forest, rows, size: int, random_rows) -> np.ndarray:
    if rows is None:
        return random_rows(forest, size)
    reps = -(-size // rows.shape[0])
    return np.ascontiguousarray(np.tile(rows, (reps, 1))[:size])


def _params_text(p) -> str:
    text = (f"rows/block={p.rows_per_block} rows/thread={p.rows_per_thread} tree_threads={p.tree_threads}"
            f" interleave={p.interleave}")
    return text + (" shared_reduce" if p.shared_reduce else "") + ("" if p.cache_rows else " uncached")


def _versions() -> dict:
    out = {}
    for dist in ("silvanforge-gpu", "pycuda", "pyopencl"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out

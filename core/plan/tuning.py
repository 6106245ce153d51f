"""Schedule search on the user's machine (``sf.tune``, ``forge tune``): for each band of rows per
call, time the forms the cost model ranks best and keep the fastest, as the paper draft's
section on schedule exploration does for the GPU template (a heuristic that times a small,
well-chosen subset of the space, then refines around the winners).

The search, per request size of :data:`SIZES`:

1. every installed representation's estimate at that size ranks the candidates (representation
   x the batch size the form is lowered for, which picks the schedule family, interleave width
   and padding the target's default makes of it); the best :data:`PER_SIZE` and the untuned
   plan's own forms are compiled, in order of promise, while the budget lasts;
2. each compiled form is timed per call at every size, on fresh rows (the user's sample, else
   rows drawn around the model's thresholds with missing values), best of three rounds; the
   untuned plan's form and the others close to the fastest at a size are timed again in
   rounds (:data:`CONTENDERS`), and the untuned plan's keeps the size unless beaten by
   :data:`KEEP_MARGIN`;
3. where two sizes are won by different forms, both are timed at sizes between them to place
   the band's edge.

The result is a compiled model whose plan holds the winners, and a tuning record (candidates,
times, winners, host, versions) kept in its artifact: a load on another host warns and uses
the untuned plan.  Timing never decides a prediction: every form is exact.

A target that is not a CPU brings its own search (:meth:`silvanforge.target.Target.tune`: the
GPU targets run the template exploration of the paper draft's Algorithm 1 per band of rows);
its winners become the plan through :func:`compile_plan` and its record is kept the same way.
"""

from __future__ import annotations

import dataclasses
import json
from importlib import metadata
import math
import platform
import time
from collections.abc import Callable

import numpy as np

from silvanforge import __version__
from silvanforge.runtime.compiled import CompiledForest
from silvanforge.errors import InputError, PluginError, UnsupportedModelError
from silvanforge.plan.forms import Form, build_form, host_key
from silvanforge.plan.policy import untuned_plan
from silvanforge.inputs.rows import as_rows
from silvanforge.ir import hir
from silvanforge.frontend.loading import load_model
from silvanforge.plan.memo import in_compile_scope
from silvanforge.options import CompileOptions
from silvanforge.api import compile_options
from silvanforge.plan.bands import Band, merge_bands
from silvanforge.plugins import registry
from silvanforge.frontend.profiling import profile
from silvanforge.runtime.threads import check_threads, default_threads
from silvanforge.frontend.sampling import random_rows

# The request sizes tuned for (rows per call), and the sizes between them tried to place edges.
SIZES = (1, 16, 64, 256, 4096)
BETWEEN = {(1, 16): (2, 4, 8), (16, 64): (32,), (64, 256): (128,), (256, 4096): (512, 1024, 2048)}
# The batch size a form is lowered for when it is to answer a request of n rows.
BATCH_CLASSES = (1, 16, 64, None)
# Candidates per request size ranked by the estimates and compiled (besides the untuned forms).
PER_SIZE = 3
# Another form replaces the untuned plan's for a size only where timed this much faster.
KEEP_MARGIN = 0.03
# Before a size is decided, the untuned plan's form and the others timed within CONTEND_MARGIN
# of the fastest (CONTENDERS in all) are timed again, one after another, RETIME_ROUNDS times.
CONTEND_MARGIN, CONTENDERS, RETIME_ROUNDS = 1.15, 3, 2
# The budget of a tune without one: seconds of compiling and timing.
DEFAULT_BUDGET_S = 60.0
# Fresh rows timed: requests never repeat a row within a round, so no branch predictor learns them.
POOL_ROWS = 8192
MISSING_FRACTION = 0.02
# The untuned plan's walks for requests of up to this many rows are tried laid out in the
# sample's order, from a profile of this many of its rows (more took seconds on 1000 categorical
# trees, for about the same order).
ORDER_ROWS = 16
PROFILE_ROWS = 1024


def batch_class(rows: int) -> int | None:
    """The batch size a form for requests of ``rows`` rows is lowered for."""
    if rows <= 1:
        return 1
    if rows <= 16:
        return 16
    if rows <= 256:
        return 64
    return None


@dataclasses.dataclass
class Candidate:
    options: CompileOptions
    estimate_ns: float | None
    form: Form | None = None
    compile_s: float = 0.0
    seconds: dict = dataclasses.field(default_factory=dict)  # rows per call -> s a call
    error: str | None = None
    # rows per call -> its representation's estimate, ns a row: what the timings check
    estimates: dict = dataclasses.field(default_factory=dict)


@in_compile_scope
def compile_plan(model, bands: list[tuple[int | None, CompileOptions]], tuning: dict | None = None) -> CompiledForest:
    """A compiled model whose plan is given: ``bands`` lists ``(up_to_rows, options)`` in order,
    the last with ``None`` (no bound); each band's form is compiled with its (resolved) options,
    and bands whose programs are one share a form."""
    start = time.perf_counter()
    forest = model if isinstance(model, hir.Forest) else load_model(model)
    if not bands or bands[-1][0] is not None:
        raise InputError("a plan's last band has no upper bound (None)")
    forms: list[Form] = []
    by_digest: dict[str, int] = {}
    out, lo = [], 1
    for hi, opts in bands:
        opts = compile_options(opts)
        registry().check_target(opts.target)
        form = build_form(forest, opts)
        index = by_digest.get(form.digest)
        if index is None:
            index = by_digest[form.digest] = len(forms)
            forms.append(form)
        if hi is not None and hi < lo:
            raise InputError(f"plan bands must grow: {hi} rows after {lo - 1}")
        out.append(Band(lo, hi, index))
        lo = (hi or 0) + 1
    return CompiledForest(forest, forms, merge_bands(out), time.perf_counter() - start, tuning=tuning)


@in_compile_scope
def tune(model, rows=None, target: str | None = None, threads: int | None = None,
         budget_s: float | None = None, batch_size: int | None = None,
         sizes: tuple[int, ...] = SIZES,
         progress: Callable[[str, int, int], None] | None = None, cpu: str | None = None) -> CompiledForest:
    """Time the forms worth trying for ``model`` on this machine and keep the fastest for each
    band of rows per call (see the module docstring).

    ``rows``: sample rows the model will see (anything ``predict`` takes); None draws rows
    around the model's thresholds.  ``threads``: threads predict will use (tuned for; None: all
    usable CPUs).  ``budget_s``: seconds to spend (default 60); the untuned plan's forms are
    always compiled, so a budget of a few seconds returns a model at least as good as
    ``compile``'s by its own timing.  ``progress(what, done, total)`` is told what is timed.
    ``cpu``: the CPU the code is for, as :func:`silvanforge.compile` takes it (None: this
    host); the forms are timed here, so this host must run that CPU's code (else a
    ``PluginError`` says what it lacks).
    Returns a :class:`~silvanforge.runtime.compiled.CompiledForest`; ``forge show --tuning`` of its
    artifact prints the record."""
    start = time.perf_counter()
    budget = DEFAULT_BUDGET_S if budget_s is None else float(budget_s)
    if not budget > 0 or math.isinf(budget):
        raise InputError(f"the tuning budget must be a positive number of seconds, got {budget_s!r}")
    if threads is not None:
        threads = check_threads(threads)
    sizes = tuple(sorted({int(s) for s in sizes}))
    if not sizes or sizes[0] < 1:
        raise InputError(f"request sizes to tune for must be positive, got {sizes}")
    forest = model if isinstance(model, hir.Forest) else load_model(model)
    opts = compile_options(None, target=target, threads=threads, batch_size=batch_size, cpu=cpu)
    reg = registry()
    reg.check_target(opts.target)
    kind = reg.target_kind(opts.target)
    say = progress or (lambda what, done, total: None)
    if kind != "cpu":
        # The target's own search (a GPU target's template exploration), kept as a CPU plan is.
        dtype = np.float32 if forest.threshold_dtype == "float32" else np.float64
        sample = None if rows is None else np.ascontiguousarray(as_rows(rows, forest, dtype))
        if sample is not None and sample.shape[0] == 0:
            raise InputError("tuning needs at least one sample row")
        found = reg.target(opts.target).tune(forest, sample, None if sizes == SIZES else sizes, budget,
                                             threads, say)
        if found is None:
            raise InputError(f"the {opts.target!r} target ({kind}) has no plan search for sf.tune")
        bands, record = found
        return compile_plan(forest, bands, tuning=record)
    pool = _sample(forest, rows)

    # 1. The untuned plan's forms first (they are the baseline), then by the estimates.
    say("compiling the untuned plan", 0, 0)
    base_forms, base_bands = untuned_plan(forest, opts)
    candidates = [Candidate(f.options, None, form=f) for f in base_forms]
    built = {f.digest: f for f in base_forms}
    ranked = _ordered(forest, base_forms, base_bands, pool) + _ranked(forest, opts, kind, sizes)
    compile_budget = 0.6 * budget
    for k, cand in enumerate(ranked):
        if time.perf_counter() - start > compile_budget:
            break
        say(f"compiling {_label(cand.options)}", k + 1, len(ranked))
        t0 = time.perf_counter()
        known = len(built)
        try:
            cand.form = build_form(forest, cand.options, built=built)
        except (UnsupportedModelError, PluginError, InputError) as exc:
            cand.error = str(exc)[:200]
            continue
        cand.compile_s = time.perf_counter() - t0
        if len(built) > known:  # a program not made before
            candidates.append(cand)
        else:
            cand.form, cand.error = None, "the same program as another candidate"

    # 2. Every compiled form timed at every size.
    timed = [c for c in candidates if c.form is not None]
    # The pool holds the kernels' rows (as_rows made them): where a model computes columns from
    # its input (CatBoost's hashed categories and CTRs), the forms are timed on those rows as
    # they are, by a forest that reads them as plain numbers (predict would read them again).
    hashed = bool(forest.hashed_categories or forest.hashed_combinations)
    plain = dataclasses.replace(forest, hashed_categories=None, hashed_combinations=None) if hashed else forest
    models = [CompiledForest(plain, [c.form]) for c in timed]
    if hashed:
        for cf in models:
            cf._small_for = None  # (such a model's calls take the general path: timed on it)
    work = len(timed) * len(sizes)
    done = 0
    for size in sizes:
        X = pool
        for cand, cf in zip(timed, models):
            done += 1
            say(f"timing {_label(cand.options)} at {size} rows", done, work)
            cand.seconds[size] = _per_call(cf, X, size, threads)
    for cand in timed:
        cand.estimates = _estimates(forest, kind, cand.form.options.rep, sizes,
                                    registry().vectors(opts.target, opts.cpu))

    # The untuned plan's form for each size keeps it unless another beats it by KEEP_MARGIN,
    # timed again beside it with the others close to the fastest, in rounds: one round of
    # short timings picks a slower form on noise, and a form timed in a slow spell of the
    # machine loses a size it would have won (docs/benchmarks.md, "Measurements behind the
    # defaults").
    def untuned(size: int) -> int:
        form = base_forms[next(b.form for b in base_bands if b.holds(size))]
        return next(i for i, c in enumerate(timed) if c.form is form)

    def fastest(size: int) -> int:
        return min((i for i in range(len(timed)) if size in timed[i].seconds), key=lambda i: timed[i].seconds[size])

    in_plan = frozenset(i for i, c in enumerate(timed) if c.form in base_forms)
    for size in sizes:
        if time.perf_counter() - start >= budget:
            break
        near = contenders(timed, size, untuned(size), in_plan)
        if len(near) < 2:
            continue
        say(f"timing the {len(near)} fastest at {size} rows again", done, work)
        for _round in range(RETIME_ROUNDS):
            for i in near:
                timed[i].seconds[size] = min(timed[i].seconds[size], _per_call(models[i], pool, size, threads))

    def winner(size: int) -> int:
        best, base = fastest(size), untuned(size)
        if size in timed[base].seconds and timed[base].seconds[size] <= (1 + KEEP_MARGIN) * timed[best].seconds[size]:
            return base
        return best

    # 3. Edges between sizes won by different forms.
    points = list(sizes)
    for a, b in zip(sizes, sizes[1:]):
        wa, wb = winner(a), winner(b)
        if wa == wb:
            continue
        for m in BETWEEN.get((a, b), _between(a, b)):
            if time.perf_counter() - start > budget:
                break
            say(f"placing the edge between {a} and {b} rows", done, work)
            for i in {wa, wb}:
                timed[i].seconds[m] = _per_call(models[i], pool, m, threads)
            points.append(m)
    points.sort()
    bands: list[Band] = []
    lo = 1
    for k, size in enumerate(points):
        best = winner(size)
        hi = None if k == len(points) - 1 else points[k] + (points[k + 1] - points[k]) // 2
        if hi is not None and hi < lo:
            continue
        bands.append(Band(lo, hi, best))
        lo = (hi or 0) + 1
    bands = merge_bands(bands)
    used = sorted({b.form for b in bands})
    renumber = {old: new for new, old in enumerate(used)}
    bands = [Band(b.lo, b.hi, renumber[b.form]) for b in bands]
    forms = [timed[i].form for i in used]
    record = _record(forest, opts, threads, budget, time.perf_counter() - start, sizes, timed, bands,
                     used, rows is not None, candidates + [c for c in ranked if c.form is None])
    return CompiledForest(forest, forms, bands, time.perf_counter() - start, tuning=record)


def contenders(timed: list[Candidate], size: int, base: int, plan: frozenset = frozenset()) -> list[int]:
    """The candidates timed again at ``size``: the untuned plan's (``base``) and up to
    :data:`CONTENDERS` in all of those timed within :data:`CONTEND_MARGIN` of the fastest,
    fastest first, the fastest of them outside the untuned plan (``plan``: its forms' indices)
    among them however many of the plan's own tie ahead (a lone form: nothing to decide)."""
    times = {i: c.seconds[size] for i, c in enumerate(timed) if size in c.seconds}
    if base not in times:
        return []
    best = min(times.values())
    near = sorted((i for i in times if i != base and times[i] <= CONTEND_MARGIN * best), key=times.get)
    picks = near[:CONTENDERS - 1]
    outside = [i for i in near if i not in plan]
    if outside and outside[0] not in picks and picks:
        picks[-1] = outside[0]
    return [base] + picks if picks else []


def _ranked(forest: hir.Forest, opts: CompileOptions, kind: str, sizes) -> list[Candidate]:
    """Candidates not in the untuned plan, by promise: for each size, the representations the
    estimates rank best at it, lowered for that size's batch class (the untuned choice of
    padding, and unpadded where that differs)."""
    reg = registry()
    out, keys = [], set()
    per_size = []
    for size in sizes:
        costs = sorted((ns, rep) for rep, ns, _ in reg.rep_costs(forest, kind, size,
                                                                  vectors=reg.vectors(opts.target, opts.cpu))
                       if ns is not None)
        per_size.append([(ns, rep, batch_class(size)) for ns, rep in costs[:PER_SIZE]])
    # Round robin over sizes, so a short budget still tries something for each.
    for rank in range(PER_SIZE):
        if rank == 1 and 1 in sizes:
            split = _split_one_row(forest, opts, kind, per_size[list(sizes).index(1)])
            if split is not None:
                out.append(split)
        for picks in per_size:
            if rank >= len(picks):
                continue
            ns, rep, batch = picks[rank]
            for pad in ((None, False) if reg.rep_kind(rep) == "walk" and batch != 1 else (None,)):
                key = (rep, batch, pad)
                if key in keys:
                    continue
                keys.add(key)
                out.append(Candidate(dataclasses.replace(opts, rep=rep, batch_size=batch,
                                                         pad=pad if pad is not None else (False if batch == 1 else None)),
                                     ns))
    return out


def _ordered(forest: hir.Forest, forms: list[Form], bands: list[Band], pool: np.ndarray) -> list[Candidate]:
    """The untuned plan's walks for requests of up to :data:`ORDER_ROWS` rows again, their nodes
    laid out in the order the sample rows walk them (a profile of them: each node's more visited
    child first, silvanforge.frontend.tiling.hot_first_order), so a row's likely path reads consecutive
    bytes (docs/benchmarks.md, "Measurements behind the defaults").  Only representations that
    place nodes (``node_order``), unpadded and untiled."""
    reg = registry()
    small = {b.form for b in bands if b.lo <= ORDER_ROWS}
    picks = [forms[i].options for i in sorted(small)]
    picks = [o for o in picks if o.profile is None and o.tile_size == 1 and not o.pad
             and reg.rep_kind(o.rep) == "walk" and reg.rep_class(o.rep).node_order]
    if not picks:
        return []
    sample_profile = profile(forest, pool[:PROFILE_ROWS], check_features=False)
    return [Candidate(dataclasses.replace(o, profile=sample_profile), None) for o in picks]


def _split_one_row(forest: hir.Forest, opts: CompileOptions, kind: str, picks: list):
    """A one-row candidate that splits each row's trees over threads (``split-trees``) for the
    walk representation estimated fastest at one row, where the tune is for two or more CPU
    threads: the untuned plan splits only walks it estimates long (the CPU target's
    ``SPLIT_HANDOFF_NS``), and timing tells for the others."""
    reg = registry()
    threads = opts.threads or default_threads()
    walks = [(ns, rep) for ns, rep, _ in picks if reg.rep_kind(rep) == "walk"]
    if kind != "cpu" or threads < 2 or not walks or forest.num_trees < 2:
        return None
    ns, rep = walks[0]
    return Candidate(dataclasses.replace(opts, rep=rep, batch_size=1, pad=False, schedule="split-trees"), ns)


def _estimates(forest: hir.Forest, kind: str, rep: str, sizes, vectors=None) -> dict:
    """``rep``'s own estimate for ``forest`` at each size on the vector unit ``vectors``, ns a
    row (the record keeps them beside the timings, so a wrong estimate shows:
    :func:`estimate_errors`)."""
    out = {}
    for size in sizes:
        ns = {name: v for name, v, _ in registry().rep_costs(forest, kind, size, vectors=vectors)}.get(rep)
        if ns is not None:
            out[size] = ns
    return out


def estimate_errors(record: dict) -> list[tuple[int, int, float]]:
    """``(candidate, rows per call, measured / estimated)`` for every timed candidate of a
    tuning record and size where both are known: above 1 the estimate was optimistic."""
    out = []
    for k, c in enumerate(record.get("candidates", [])):
        estimates, times = c.get("estimates_ns") or {}, c.get("us_per_call") or {}
        for size, ns in estimates.items():
            if size in times and ns:
                out.append((k, int(size), times[size] * 1e3 / int(size) / ns))
    return out


def _label(opts: CompileOptions) -> str:
    batch = "any" if opts.batch_size is None else opts.batch_size
    split = ", trees split over threads" if opts.schedule == "split-trees" else ""
    order = ", nodes in the sample's order" if opts.profile is not None else ""
    return f"{opts.rep or 'auto'} (batch {batch}{', unpadded' if opts.pad is False else ''}{split}{order})"


def _between(a: int, b: int) -> tuple[int, ...]:
    out, m = [], a * 2
    while m < b:
        out.append(m)
        m *= 2
    return tuple(out[:3])


def _sample(forest: hir.Forest, rows) -> np.ndarray:
    """The rows timed: the user's (converted as predict converts them), repeated to the pool's
    size where fewer; else drawn around the thresholds, with missing values."""
    dtype = np.float32 if forest.threshold_dtype == "float32" else np.float64
    if rows is not None:
        X = np.ascontiguousarray(as_rows(rows, forest, dtype))
        if X.shape[0] == 0:
            raise InputError("tuning needs at least one sample row")
        reps = -(-POOL_ROWS // X.shape[0])
        return np.ascontiguousarray(np.tile(X, (reps, 1))[:POOL_ROWS])
    X = random_rows(forest, POOL_ROWS, seed=7).astype(dtype)
    rng = np.random.default_rng(11)
    X[rng.random(X.shape) < MISSING_FRACTION] = np.nan
    return X


def _per_call(cf: CompiledForest, pool: np.ndarray, size: int, threads: int | None) -> float:
    """Seconds a call of ``size`` rows, best of three rounds over different rows."""
    n = min(size, pool.shape[0])
    calls = max(2, min(64, pool.shape[0] // (3 * n)))
    batches = [pool[(k * n) % (pool.shape[0] - n + 1):][:n] for k in range(3 * calls)]
    batches = [np.ascontiguousarray(b) for b in batches]
    cf.predict(batches[0], threads=threads)  # warm: the first call maps scratch
    best = float("inf")
    for r in range(3):
        t0 = time.perf_counter()
        for b in batches[r * calls:(r + 1) * calls]:
            cf.predict(b, threads=threads)
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def record_header(target: str, threads: int | None, budget: float, seconds: float, sizes,
                  user_rows: bool) -> dict:
    """The part of a tuning record every search writes alike: the host key (a load elsewhere
    falls back), the host's name, versions, threads, budget, seconds spent, sizes, the rows."""
    host = host_key(target)
    try:
        parsed = json.loads(host) if host else {}
        name = parsed.get("cpu") or parsed.get("device")
    except (ValueError, AttributeError):
        name = None
    return {
        "host": host, "host_name": name or platform.processor() or platform.machine(),
        "versions": {"silvanforge": __version__, "numpy": np.__version__, "python": platform.python_version(),
                     **_plugin_versions(target)},
        "target": target, "threads": threads if threads is not None else default_threads(),
        "budget_s": budget, "seconds": round(seconds, 3), "sizes": list(sizes),
        "rows": "the caller's sample" if user_rows else "drawn around the model's thresholds",
    }


def _record(forest, opts, threads, budget, seconds, sizes, timed, bands, used, user_rows, tried) -> dict:
    """The tuning record an artifact keeps (plain JSON)."""
    index = {id(c): k for k, c in enumerate(timed)}
    return {
        **record_header(opts.target, threads, budget, seconds, sizes, user_rows),
        "candidates": [{"form": c.form.text() if c.form is not None else _label(c.options),
                        "estimate_ns": None if c.estimate_ns is None else round(c.estimate_ns, 1),
                        "compile_s": round(c.compile_s, 3),
                        "us_per_call": {str(k): round(v * 1e6, 3) for k, v in sorted(c.seconds.items())},
                        "estimates_ns": {str(k): round(v, 1) for k, v in sorted(c.estimates.items())},
                        **({"error": c.error} if c.error else {})}
                       for c in tried],
        "winners": [{"rows": b.text(), "candidate": index[id(timed[used[b.form]])]} for b in bands],
    }


def _plugin_versions(target: str) -> dict:
    """The versions of the target's distribution and of what it compiles with (by metadata: the
    core imports no target)."""
    out = {}
    cpu = registry().target_kind(target) == "cpu"  # a GPU target's own add theirs
    for dist in (f"silvanforge-target-{target}", *(("llvmlite",) if cpu else ())):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def record_text(record: dict) -> str:
    """A tuning record as ``forge show --tuning`` prints it."""
    threads = record.get("threads")
    lines = [f"tuned on {record.get('host_name')}" + (f" with {threads} threads" if threads is not None else "") +
             " in "
             f"{record.get('seconds')} s (budget {record.get('budget_s')} s), rows "
             f"{record.get('rows')}; versions " +
             ", ".join(f"{k} {v}" for k, v in (record.get("versions") or {}).items())]
    sizes = [str(s) for s in record.get("sizes", [])]
    lines.append("candidate".ljust(72) + "".join(f"{s + ' rows':>12}" for s in sizes))
    for k, c in enumerate(record.get("candidates", [])):
        times = c.get("us_per_call", {})
        cells = "".join(f"{(str(times[s]) + ' us') if s in times else '-':>12}" for s in sizes)
        lines.append(f"{k:>2} {c.get('form', '')[:69]:<69}{cells}" + (f"  ({c['error']})" if c.get("error") else ""))
    lines.append("winners: " + "; ".join(f"{w['rows']} rows: candidate {w['candidate']}"
                                         for w in record.get("winners", [])))
    errors: dict[int, dict[str, float]] = {}
    for k, size, ratio in estimate_errors(record):
        errors.setdefault(k, {})[str(size)] = ratio
    if errors:
        lines.append("measured / estimated time a row (above 1: the estimate was optimistic)")
        for k, row in errors.items():
            cells = "".join(f"{('x%.2f' % row[s]) if s in row else '-':>12}" for s in sizes)
            lines.append(f"{k:>2} {record['candidates'][k].get('form', '')[:69]:<69}{cells}")
    return "\n".join(lines)

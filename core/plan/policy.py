"""The plan's policy, in one place: which bands of rows per call a compile that times nothing
gets, which form answers each (the representations' estimates choosing), and how they are built
(the main form first, the others on a second thread, now or after ``compile`` returns:
:mod:`silvanforge.plan.lateforms`).  The bands themselves are :mod:`silvanforge.plan.bands`, a
form :mod:`silvanforge.plan.forms`; :mod:`silvanforge.plan.tuning` times forms instead."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import threading
from operator import attrgetter

from silvanforge.errors import PluginError, UnsupportedModelError
from silvanforge.frontend.tiling import cover_order_ids
from silvanforge.ir import hir
from silvanforge.lowering.choices import choose_representation
from silvanforge.options import CompileOptions
from silvanforge.plan.bands import MID_MAX, SMALL_ROWS, Band, merge_bands
from silvanforge.plan.forms import Builds, Form, splits_trees
from silvanforge.plan.memo import compile_scope, current, in_compile_scope
from silvanforge.plan.overlap import Turns
from silvanforge.plugins import registry
from silvanforge.rep import called_cost_of
from silvanforge.runtime.threads import default_threads

# The untuned plan's one-row form answers requests of up to this many rows, where it beat the
# block form on fresh rows (docs/benchmarks.md, "Measurements behind the defaults"); sf.tune
# measures the edge for the model at hand.
ONE_ROW_MAX = 2
# ... and of up to ONE_ROW_REACH rows where the form answering the next rows is estimated to cost
# each of them at least ONE_ROW_MARGIN times the one-row form's row, and of up to SMALL_ROWS
# where at least ONE_ROW_FAR_MARGIN times: a form lowered for 16-64 rows pays its whole block at
# 3-16 rows (flat in the rows), the one-row form a walk a row.  The estimates of a walk were
# 0.36-2x off the lean path's time on 15 models (over on the 1000-tree ones, under on the small
# ones), and a small form's block 1.6-1.8x under on the 1000-tree ones; measured (us, at 3 / 8 /
# 12 rows, the plan before / a walk a row through predict, 1 thread, Zen 4 VM): taxizone
# 1000x255 265 / 45, 268 / 133, 264 / 210; taxi 1000x255 (8 / 12 / 16) 266 / 86, 265 / 137, 268
# / 195; flight 1000x255 268 / 117, 277 / 307; xgb_mixed_4_10 25 / 8, 28 / 21, 30 / 31;
# xgb_insurance_300 (8 / 12) 61 / 43, 63 / 72; lgb_leafwise (4 / 6) 14 / 12, 14 / 19; where the
# small band's cheap blocks win at a few rows (xgb_100x8_f8 5 / 6 at 3, taxi 100x31 4 / 6)
# the estimates keep them (docs/benchmarks.md, "Measurements behind the defaults").  Past
# ONE_ROW_REACH the larger margin: a walk underestimated (xgb_100x8's, 2x) costs more the
# further it reaches.
ONE_ROW_REACH, ONE_ROW_MARGIN = 8, 1.0
ONE_ROW_FAR_MARGIN = 1.5
# The mid-size form is lowered for MID_BATCH rows a call (it answers up to MID_MAX rows).
MID_BATCH = 64
# Requests of 3 to SMALL_ROWS rows get a form of their own where the mid-size form answering
# them is estimated to cost more than this times the cheapest form lowered for SMALL_ROWS (a
# block of 64 rows answering 16 pays for 64: the levelwise form's bytes), and at least
# SMALL_BAND_MIN_NS a row more: worth a form and its compile (docs/benchmarks.md, "Measurements
# behind the defaults").
SMALL_BAND_FACTOR, SMALL_BAND_MIN_NS = 1.2, 100.0
# Forests cheaper than this a row (the cheapest representation's estimate, ns) get one form:
# what a second form could save there is a fraction of a microsecond, below the cost of a call.
# The default of the option CompileOptions.plan_min_ns.
PLAN_MIN_NS = 200.0


def program_options_given(opts: CompileOptions) -> bool:
    """Whether the user decided the program (a representation, schedule, padding, tiles, tree
    groups or a lowering knob): then one form, exactly what was asked for.  A profile without
    tiles is not: it orders the nodes of the forms whose layouts can place them."""
    return not (opts.rep is None and opts.schedule is None and opts.pad is None and opts.tile_size == 1
                and opts.reorder is None
                and all(value is None for value in opts.lowering().values()))


def untuned_bands(forest: hir.Forest, opts: CompileOptions, cheapest_ns: float | None,
                  saving_ns: float = 0.0, small_band: bool = False,
                  one_row: int = ONE_ROW_MAX) -> list[tuple[int, int | None, int | None]]:
    """``(lo, hi, batch_size)`` of each band of the untuned plan, the batch size its form is
    lowered for: one row (``batch_size=1``), mid-size requests (``MID_BATCH``) and the rest
    (the compile's batch size).  One band where the user decided the program, where the
    compile's batch size is itself small, or where the forest is too cheap for a second form
    to pay: ``cheapest_ns`` (the representations' best estimate a row at the compile's batch
    size) and ``saving_ns`` (the most another representation is estimated to save a row at a
    small band's size, against the main form's) both under ``opts.plan_min_ns`` (None:
    :data:`PLAN_MIN_NS`).  ``small_band``: requests past the one-row band up to SMALL_ROWS rows
    get a form of their own, lowered for SMALL_ROWS (:data:`SMALL_BAND_FACTOR`).  ``one_row``:
    the most rows the one-row form answers (:data:`ONE_ROW_REACH`; up to SMALL_ROWS where no
    small band follows)."""
    top = opts.batch_size
    limit = PLAN_MIN_NS if opts.plan_min_ns is None else opts.plan_min_ns
    cheap = cheapest_ns is not None and cheapest_ns < limit and saving_ns < limit
    if program_options_given(opts) or cheap or (top is not None and top <= ONE_ROW_MAX):
        return [(1, None, top)]
    one_row = max(ONE_ROW_MAX, min(one_row, SMALL_ROWS - 1 if small_band else SMALL_ROWS))
    bands: list[tuple[int, int | None, int | None]] = [(1, one_row, 1)]
    if top is None or top > MID_MAX:
        if small_band:
            bands.append((one_row + 1, SMALL_ROWS, SMALL_ROWS))
        bands.append((SMALL_ROWS + 1 if small_band else one_row + 1, MID_MAX, MID_BATCH))
        bands.append((MID_MAX + 1, None, top))
    else:
        bands.append((one_row + 1, None, top))
    return bands


def _split_small_requests(spec: list, forms: list) -> list:
    """``spec`` with the one-row band stretched to SMALL_ROWS rows where its form splits each
    row's trees over threads and no form of its own answers 3 to SMALL_ROWS rows: the next
    band's form runs so few rows on one thread (a share needs ``min_share_rows``), while the
    split walks them on two (docs/benchmarks.md, "Measurements behind the defaults")."""
    if len(spec) < 2 or spec[0][2] != 1 or spec[1][1] == SMALL_ROWS or forms[0] is None:
        return spec
    if not splits_trees(forms[0].kernel, forms[0].options) or spec[1][1] is not None and spec[1][1] <= SMALL_ROWS:
        return spec
    (lo, _hi, batch), (_lo, hi, next_batch) = spec[0], spec[1]
    return [(lo, SMALL_ROWS, batch), (SMALL_ROWS + 1, hi, next_batch)] + list(spec[2:])


def _untuned_spec(forest: hir.Forest, opts: CompileOptions, kind: str):
    """:func:`silvanforge.plan.bands.untuned_bands` of the representations' estimates: the cheapest at
    the compile's batch size, and what another representation saves a row at a small band's
    size over the one that is cheapest at the compile's (a block form pays for its whole block
    on a few rows: 8-64 times a row's cost), and whether requests of 3 to SMALL_ROWS rows get a
    form of their own (:data:`silvanforge.plan.bands.SMALL_BAND_FACTOR`)."""
    reg = registry()
    vectors = reg.vectors(opts.target, opts.cpu)

    def costs(batch):
        return {rep: ns for rep, ns, _ in reg.rep_costs(forest, kind, batch, vectors=vectors) if ns is not None}

    top = costs(opts.batch_size)
    if not top:
        return untuned_bands(forest, opts, None)
    main = min(top, key=top.get)
    at_one, mid, small = costs(1), costs(MID_BATCH), costs(SMALL_ROWS)
    saving = 0.0
    for at in (at_one, mid):
        if main in at:
            saving = max(saving, at[main] - min(at.values()))
    # Small requests' own form, where the mid-size form would answer them at a block's cost.
    small_band = False
    if mid and small:
        rep = min(mid, key=mid.get)
        called = called_cost_of(reg.rep_class(rep), forest, kind, MID_BATCH, SMALL_ROWS, opts.rep_options,
                                vectors)
        best = min(small.values())
        small_band = isinstance(called, float) and called > SMALL_BAND_FACTOR * best \
            and called - best >= SMALL_BAND_MIN_NS
    # How far the one-row form reaches: the form answering the next rows, as lowered, called
    # with a few rows, against a walk a row (:data:`ONE_ROW_REACH`).
    if opts.batch_size is not None and opts.batch_size <= MID_MAX:  # (no small or mid band then)
        after, lowered = main, opts.batch_size
    elif small_band:
        after, lowered = min(small, key=small.get), SMALL_ROWS
    else:
        after, lowered = (min(mid, key=mid.get), MID_BATCH) if mid else (main, opts.batch_size)
    one_row = ONE_ROW_MAX
    while at_one and one_row < SMALL_ROWS:
        called = called_cost_of(reg.rep_class(after), forest, kind, lowered, one_row + 1, opts.rep_options, vectors)
        margin = ONE_ROW_MARGIN if one_row < ONE_ROW_REACH else ONE_ROW_FAR_MARGIN
        if not isinstance(called, float) or called < margin * min(at_one.values()):
            break
        one_row += 1
    if one_row >= SMALL_ROWS - 1:  # (every small request a walk: no form of their own for the last size)
        one_row, small_band = SMALL_ROWS, False
    return untuned_bands(forest, opts, top[main], saving, small_band, one_row)


# Threads building a plan's forms together: Python lowers one form while LLVM (which releases
# the GIL; the CPU target runs each form's LLVM work in a context of its own, outside
# llvmlite's lock) optimises and generates others, on the other core.  A
# forest of this many nodes builds one form at a time: its lowering is Python (holding the
# GIL) much more than LLVM, and each form's tables take hundreds of megabytes, so a second
# thread raised the peak memory by a fifth and saved no time (docs/benchmarks.md, "Compile times").
ONE_FORM_AT_A_TIME_NODES = 750_000


def plan_threads(forest: hir.Forest | None = None) -> int:
    """How many threads build a plan's forms (``forest``: the model, if its size should say)."""
    if forest is not None and sum(map(len, map(attrgetter("left"), forest.trees))) >= ONE_FORM_AT_A_TIME_NODES:
        return 1
    return max(1, min(2, default_threads()))


def main_form(forest: hir.Forest, opts: CompileOptions, builds: Builds | None = None) -> Form:
    """The form answering the largest requests (the last band's): lowered for the compile's
    batch size, whatever the other bands turn out to be, so it can be built first."""
    return (builds or Builds()).build(forest, opts)


@in_compile_scope  # the bands' forms ask for the same estimates and statistics
def untuned_plan(forest: hir.Forest, opts: CompileOptions, threads: int | None = None
                 ) -> tuple[list[Form], list[Band]]:
    """The forms and bands of a compile that times nothing: each band's form lowered for its
    batch size (:func:`silvanforge.plan.bands.untuned_bands`), the representations' estimates choosing;
    bands whose form is another's program share it.  The main form (the last band's) is first
    (:func:`main_form`): a small-request form that cannot be built leaves its band to the next
    one.  ``threads``: how many build forms at once (None: :func:`plan_threads`); the forms
    and bands are those of one thread, in the same order."""
    threads = plan_threads(forest) if threads is None else threads
    builds = Builds()
    if threads <= 1:
        return rest_of_plan(forest, opts, main_form(forest, opts, builds), builds, threads)
    # The main form on a thread of its own while this one weighs the bands.
    main = _Task(_scoped, current(), main_form, forest, opts, builds)
    return rest_of_plan(forest, opts, main, builds, threads)


class _Task:
    """``fn(*args)`` on a thread of its own (a daemon: a builder never holds up an exit);
    ``result()`` waits for it and returns its value or raises its error."""

    def __init__(self, fn, *args):
        self._fn, self._args, self._out = fn, args, None
        self._thread = threading.Thread(target=self._run, name="silvanforge-form", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            self._out = (True, self._fn(*self._args))
        except BaseException as exc:  # noqa: BLE001 - handed to result()
            self._out = (False, exc)

    def result(self):
        self._thread.join()
        ok, value = self._out
        if not ok:
            raise value
        return value


def _each(fn, items: list, threads: int, gate=None) -> list:
    """``[fn(item) for item in items]``, on up to ``threads`` threads (the first error raised),
    the items taken in order; ``gate()``: returns once threads past the first may start (the
    main form is built: while its machine code is made, one core is its)."""
    if threads <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    todo = iter(range(len(items)))
    lock = threading.Lock()
    out: list = [None] * len(items)

    def work(first: bool = False):
        if not first and gate is not None:
            gate()
        while True:
            with lock:
                k = next(todo, None)
            if k is None:
                return
            try:
                out[k] = (True, fn(items[k]))
            except BaseException as exc:  # noqa: BLE001 - raised below, in order
                out[k] = (False, exc)

    workers = [_Task(work, k == 0) for k in range(min(threads, len(items)))]
    for w in workers:
        w.result()
    for ok, value in out:
        if not ok:
            raise value
    return [value for _, value in out]


def _scoped(cache, fn, *args):
    with compile_scope(cache):
        return fn(*args)


def rest_of_plan(forest: hir.Forest, opts: CompileOptions, main, builds: Builds, threads: int = 1,
                 step=contextlib.nullcontext, early: bool = False) -> tuple[list[Form], list[Band]]:
    """The untuned plan's forms and bands around its ``main`` form (a Form, or a task or future
    whose ``result()`` gives it): the bands' estimates, then each other band's form (``threads``
    at once, those for the most rows first: their machine code takes longest); ``step()``: a
    context each part is done in (the background builder's guard,
    :mod:`silvanforge.plan.lateforms`).  ``early``: started while the main form is built
    (:mod:`silvanforge.plan.overlap`): one thread builds until it is."""
    reg = registry()
    kind = reg.target_kind(opts.target)
    with step():
        # A GPU launch costs more than any form saves on a few rows: GPU targets keep one form.
        spec = _untuned_spec(forest, opts, kind) if kind == "cpu" else [(1, None, opts.batch_size)]
        jobs = [_band_job(forest, opts, batch) for (_lo, _hi, batch) in spec[:-1]]
    cache = current()

    turns = Turns()

    def build(job):
        band_opts, order = job
        with step(), turns.turn():
            return _refusal_as_value(_scoped, cache, builds.build, forest, band_opts, order,
                                     None if order is None else "cover", False)

    first = sorted(range(len(jobs)), key=lambda k: -(spec[k][2] or float("inf")))
    gate = (lambda: _settled(main)) if early and not isinstance(main, Form) else None
    results = [None] * len(jobs)
    for k, form in zip(first, _each(build, [jobs[k] for k in first], threads, gate)):
        results[k] = _settled(form)
    forms = [main if isinstance(main, Form) else main.result()]
    indices = [0] * len(spec)
    for k, form in enumerate(results):
        if isinstance(form, Exception):
            indices[k] = -1
            continue
        if form not in forms:
            forms.append(form)
        indices[k] = forms.index(form)
    for k in range(len(spec) - 2, -1, -1):
        if indices[k] < 0:
            indices[k] = indices[k + 1]
    spec = _split_small_requests(spec, [forms[i] if i >= 0 else None for i in indices])
    bands = merge_bands([Band(lo, hi, index) for (lo, hi, _), index in zip(spec, indices)])
    return forms, bands


def _settled(form):
    """A band's form: ``form``, or what the build of the same program on another thread gave
    (:meth:`silvanforge.plan.forms.Builds.build`, ``wait=False``), a refusal as a value."""
    if not isinstance(form, concurrent.futures.Future):
        return form
    return _refusal_as_value(form.result)


def _refusal_as_value(call, *args):
    """``call(*args)``, or the representation's or plugin's refusal it raised, returned: a band
    whose form is refused is answered by the next band's form."""
    try:
        return call(*args)
    except (UnsupportedModelError, PluginError) as exc:
        return exc


def _band_job(forest: hir.Forest, opts: CompileOptions, batch) -> tuple[CompileOptions, list | None]:
    """The options (and node order) a small-request band's form is lowered with."""
    reg = registry()
    kind = reg.target_kind(opts.target)
    # A one-row form walks its trees unpadded: padding saves leaf checks of blocks of
    # rows walked together, and a lone row would walk the padding.  (Unless a program
    # representation is cheapest for one row: it walks nothing, and padding is not asked.)
    unpadded = batch == 1 and opts.pad is None and opts.rep is None and \
        reg.rep_kind(choose_representation(forest, kind, batch, vectors=reg.vectors(opts.target, opts.cpu))) == "walk"
    # Its nodes in the order the training rows walked them, where the model file says
    # (a layout that cannot place nodes ignores it): a lone row's likely path then reads
    # consecutive bytes, as with a profile (docs/benchmarks.md, "Measurements behind the defaults").
    order = cover_order_ids(forest) if unpadded and opts.profile is None else None
    return dataclasses.replace(opts, batch_size=batch, pad=False if unpadded else opts.pad), order

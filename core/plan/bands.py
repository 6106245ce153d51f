"""A plan by request size: which compiled form of a model answers a call of n rows.

A compiled model holds a few forms (programs of one model, each lowered for a batch size:
the representation, the schedule, the padding chosen for it) and *bands* of rows per call, each
answered by one form.  Why: a form tuned for large batches walks 8-64 rows together, so a
one-row call pays for a block; a form for one row walks that row alone, 8 of its trees at a
time.  And representations price rows differently: mask tables read a tree's tables once a
block of up to 4,096 rows, cheap for large batches and dear for a few rows.

Without tuning the bands and their forms come from the representations' cost estimates
(:func:`untuned_bands`), and nothing is timed; :mod:`silvanforge.plan.tuning` times forms on the
user's machine and keeps the fastest for each band.  The plan is part of the artifact
(``plan.json``), the pickle and the code cache.
"""

from __future__ import annotations

import dataclasses

from silvanforge.errors import InputError
from silvanforge.ir import hir
from silvanforge.options import CompileOptions

# Requests of up to this many rows take the lean path of CompiledForest.predict.
SMALL_ROWS = 16
# The untuned plan's one-row form answers requests of up to this many rows, where it beat the
# block form on fresh rows (docs/benchmarks.md, "Measurements behind the defaults"); sf.tune
# measures the edge for the model at hand.
ONE_ROW_MAX = 2
# The mid-size form (lowered for MID_BATCH rows a call) answers requests up to MID_MAX rows.
MID_MAX, MID_BATCH = 256, 64
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


@dataclasses.dataclass(frozen=True)
class Band:
    """Requests of ``lo`` to ``hi`` rows (``hi`` None: no bound) are answered by ``form``, an
    index into the compiled model's forms."""

    lo: int
    hi: int | None
    form: int

    def holds(self, rows: int) -> bool:
        return rows >= self.lo and (self.hi is None or rows <= self.hi)

    def text(self) -> str:
        return f"{self.lo}+" if self.hi is None else (str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}")


def check_bands(bands: list[Band], forms: int) -> None:
    """Bands cover 1 row and up, in order, without gaps, each naming an existing form."""
    if not bands:
        raise InputError("a plan needs at least one band")
    expect = 1
    for band in bands:
        if band.lo != expect or (band.hi is not None and band.hi < band.lo) or not 0 <= band.form < forms:
            raise InputError(f"plan bands must cover 1 row and up in order, each naming a form: {bands}")
        if band.hi is None:
            break
        expect = band.hi + 1
    if bands[-1].hi is not None or any(b.hi is None for b in bands[:-1]):
        raise InputError("the last band of a plan, and only it, has no upper bound")


def merge_bands(bands: list[Band]) -> list[Band]:
    """Adjacent bands answered by the same form joined into one."""
    out: list[Band] = []
    for band in bands:
        if out and out[-1].form == band.form:
            out[-1] = Band(out[-1].lo, band.hi, band.form)
        else:
            out.append(band)
    return out


def program_options_given(opts: CompileOptions) -> bool:
    """Whether the user decided the program (a representation, schedule, padding, tiles, tree
    groups or a lowering knob): then one form, exactly what was asked for.  A profile without
    tiles is not: it orders the nodes of the forms whose layouts can place them."""
    return not (opts.rep is None and opts.schedule is None and opts.pad is None and opts.tile_size == 1
                and opts.reorder is None
                and all(value is None for value in opts.lowering().values()))


def untuned_bands(forest: hir.Forest, opts: CompileOptions, cheapest_ns: float | None,
                  saving_ns: float = 0.0, small_band: bool = False) -> list[tuple[int, int | None, int | None]]:
    """``(lo, hi, batch_size)`` of each band of the untuned plan, the batch size its form is
    lowered for: one row (``batch_size=1``), mid-size requests (``MID_BATCH``) and the rest
    (the compile's batch size).  One band where the user decided the program, where the
    compile's batch size is itself small, or where the forest is too cheap for a second form
    to pay: ``cheapest_ns`` (the representations' best estimate a row at the compile's batch
    size) and ``saving_ns`` (the most another representation is estimated to save a row at a
    small band's size, against the main form's) both under ``opts.plan_min_ns`` (None:
    :data:`PLAN_MIN_NS`).  ``small_band``: requests of 3 to SMALL_ROWS rows get a form of their
    own, lowered for SMALL_ROWS (:data:`SMALL_BAND_FACTOR`)."""
    top = opts.batch_size
    limit = PLAN_MIN_NS if opts.plan_min_ns is None else opts.plan_min_ns
    cheap = cheapest_ns is not None and cheapest_ns < limit and saving_ns < limit
    if program_options_given(opts) or cheap or (top is not None and top <= ONE_ROW_MAX):
        return [(1, None, top)]
    bands: list[tuple[int, int | None, int | None]] = [(1, ONE_ROW_MAX, 1)]
    if top is None or top > MID_MAX:
        if small_band:
            bands.append((ONE_ROW_MAX + 1, SMALL_ROWS, SMALL_ROWS))
        bands.append((SMALL_ROWS + 1 if small_band else ONE_ROW_MAX + 1, MID_MAX, MID_BATCH))
        bands.append((MID_MAX + 1, None, top))
    else:
        bands.append((ONE_ROW_MAX + 1, None, top))
    return bands


def dispatch_table(bands: list[Band], rows: int = SMALL_ROWS) -> list[int]:
    """The form answering each request of 0 to ``rows`` rows (0 rows: the one-row band's)."""
    table = []
    for n in range(rows + 1):
        table.append(next(b.form for b in bands if b.holds(max(n, 1))))
    return table


def bands_to_json(bands: list[Band]) -> list[list]:
    return [[b.lo, b.hi, b.form] for b in bands]


def bands_from_json(raw, forms: int) -> list[Band]:
    """Bands read back from ``plan.json`` (checked: an InputError where they are not a plan)."""
    try:
        bands = [Band(int(lo), None if hi is None else int(hi), int(form)) for lo, hi, form in raw]
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: int(Infinity)
        raise InputError(f"plan bands are malformed ({exc})") from None
    check_bands(bands, forms)
    return bands


def describe(bands: list[Band], forms_text: list[str]) -> str:
    """The plan as ``forge show`` prints it: a line a band, rows per call and the form."""
    width = max(len(b.text()) for b in bands)
    return "\n".join(f"rows {b.text():>{width}}: form {b.form}: {forms_text[b.form]}" for b in bands)

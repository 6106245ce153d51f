"""A plan by request size: which compiled form of a model answers a call of n rows.

A compiled model holds a few forms (programs of one model, each lowered for a batch size:
the representation, the schedule, the padding chosen for it) and *bands* of rows per call, each
answered by one form.  Why: a form tuned for large batches walks 8-64 rows together, so a
one-row call pays for a block; a form for one row walks that row alone, 8 of its trees at a
time.  And representations price rows differently: mask tables read a tree's tables once a
block of up to 4,096 rows, cheap for large batches and dear for a few rows.

Without tuning the bands and their forms come from the representations' cost estimates
(:func:`silvanforge.plan.policy.untuned_bands`), and nothing is timed; :mod:`silvanforge.plan.tuning` times forms on the
user's machine and keeps the fastest for each band.  The plan is part of the artifact
(``plan.json``), the pickle and the code cache.
"""

from __future__ import annotations

import dataclasses

from silvanforge.errors import InputError

# Requests of up to this many rows take the lean path of CompiledForest.predict.
SMALL_ROWS = 16
# Requests of more rows on one thread take it too, up to LEAN_ROWS rows of at most LEAN_BYTES
# in all (:func:`lean_rows`): the general path's thread split, scratch and ten-argument calls
# and the output transform in NumPy cost 10-14 us a call, a 17-row call of a 100-tree model
# three times a 16-row one's; the lean path copies the rows into staging instead (AVX2 code,
# 1 thread, Zen 4: xgb_100x8 17 rows 2.7x, 512 1.14x, 1024 1.09x; the Bosch-shaped model's
# 3.9 KB rows 1.84x at 17 rows, 1.10x at 128; lgb_1000x31 1.20x at 17 rows, 1.01x at 1024).
LEAN_ROWS = 1024
LEAN_BYTES = 512 << 10
# The mid-size form (lowered for silvanforge.plan.policy.MID_BATCH rows a call) answers
# requests up to MID_MAX rows; the lazy plan builds its other forms from the first such request.
MID_MAX = 256


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


def lean_rows(row_bytes: int) -> int:
    """The most rows a call on one thread takes the lean path with, for rows of ``row_bytes``
    bytes: LEAN_ROWS, fewer where they would pass LEAN_BYTES, never fewer than SMALL_ROWS."""
    return max(SMALL_ROWS, min(LEAN_ROWS, LEAN_BYTES // max(1, int(row_bytes))))


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

"""CatBoost's categorical splits as HIR categorical splits over categories known by hash.

CatBoost hashes a categorical value's text to 32 bits (``CalcCatFeatureHash``, implemented in
:mod:`silvanforge.category_hash`, which ``predict`` applies to the input columns).  Its splits
on categorical features are of two kinds, and for both the answer depends on nothing but the
value's hash, so each becomes "hash in a set" (``Forest.hashed_categories`` gives every hash a
feature's splits know a code; the HIR split lists the codes that go left):

* one-hot (``OneHotFeature``): ``hash == value``;
* CTR (``OnlineCtr``, target statistics) over one categorical feature: a table keyed by
  ``CalcHash(0, hash)`` holds counts; the CTR is ``((good + prior_num) / (total + prior_den) +
  shift) * scale`` in float32 (CatBoost's ``TModelCtr::Calc``), with ``good`` and ``total``
  read from the counts as its CTR type says, or both 0 for a hash missing from the table; the
  split is ``ctr > border``.  The importer evaluates that for each hash in the table (and for
  "missing", which sends every other hash, and a missing value, the same way).

``CalcHash(a, b) = M * (a + M * b)`` (mod 2**64) is invertible, so the table's keys give back
the categories' hashes.  A CTR over a combination of features (``max_ctr_complexity`` > 1: the
key chains ``CalcHash`` over several categorical values, ``x > border`` bits of float features
and ``hash == value`` bits of one-hot values) depends on more than one column: its key becomes
a computed column (``Forest.hashed_combinations``, which ``predict`` computes from the row) and
its splits sets of that column's known keys, the same way.  CTR types whose statistics the
JSON export does not carry exactly (``BinarizedTargetMeanValue``, ``FloatTargetMeanValue``) are
refused.
"""

from __future__ import annotations

import numpy as np

from silvanforge.errors import UnsupportedModelError

_M64 = (1 << 64) - 1
_MAGIC = 0x4906BA494954CB65
# CalcHash(0, b) = MAGIC**2 * b: its inverse multiplies by (MAGIC**2)^-1 mod 2**64.
_INV_MAGIC2 = pow(_MAGIC * _MAGIC % (1 << 64), -1, 1 << 64)
# The hash table's empty slots.
_EMPTY = _M64

CTR_TYPES = ("Borders", "Buckets", "Counter", "FeatureFreq")


def key_of(cat_hash: int) -> int:
    """The CTR table key of a single feature's category hash (unsigned 32-bit)."""
    signed = cat_hash - (1 << 32) if cat_hash >= 1 << 31 else cat_hash
    return (_MAGIC * ((_MAGIC * signed) & _M64)) & _M64


def hash_of_key(key: int) -> int | None:
    """The category hash a single-feature CTR key was made from, or None when no 32-bit hash
    makes it (an empty slot, or an edited table: no input can reach such a key)."""
    if key == _EMPTY:
        return None
    b = (key * _INV_MAGIC2) & _M64
    signed = b - (1 << 64) if b >= 1 << 63 else b
    if not -(1 << 31) <= signed < 1 << 31:
        return None
    return signed & 0xFFFFFFFF


class CtrTable:
    """One ``ctr_data`` entry: category hash -> its statistics row."""

    def __init__(self, rows: dict[int, list[int]], stride: int, counter_denominator: int):
        self.rows, self.stride, self.counter_denominator = rows, stride, counter_denominator


def ctr_value(kind: str, stats: list[int] | None, table: CtrTable, target_border_idx: int,
              prior_num: float, prior_den: float, shift: float, scale: float) -> np.float32:
    """CatBoost's CTR value (float32) for one category's statistics row (None: not in the table)."""
    f32 = np.float32
    if stats is None:
        good, total = 0, 0
    elif kind in ("Counter", "FeatureFreq"):
        good, total = stats[0], table.counter_denominator
    elif kind == "Buckets":
        good, total = stats[target_border_idx], sum(stats)
    else:  # Borders: the classes above the target border against all
        good, total = sum(stats[target_border_idx + 1:]), sum(stats)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ctr = (f32(good) + f32(prior_num)) / (f32(total) + f32(prior_den))
        return (ctr + f32(shift)) * f32(scale)


def refuse(name: str, what: str):
    raise UnsupportedModelError(f"{name}: CatBoost {what} cannot be compiled exactly and are not supported")

"""CatBoost's categorical splits as numeric splits on computed columns.

CatBoost hashes a categorical value's text to 32 bits (``CalcCatFeatureHash``, implemented in
:mod:`silvanforge.inputs.category_hash`, which ``predict`` applies to the input columns).  Its splits
on categorical features are of two kinds; each becomes a split ``x <= threshold`` on a column
``predict`` computes from the row (``Forest.hashed_combinations``, :func:`ctr_column` and
:func:`one_hot_column`), as CatBoost's own evaluator computes its binary features:

* one-hot (``OneHotFeature``): ``hash == value``, a column of 1 where it holds, else 0 (a
  missing category too), split at 0.5;
* CTR (``OnlineCtr``, target statistics): a table keyed by ``CalcHash(0, hash)`` for one
  feature, or by a key chaining ``CalcHash`` over a combination's elements (``max_ctr_complexity``
  > 1: categorical values, ``x > border`` bits of float features and ``hash == value`` bits of
  one-hot values), holds counts; the CTR is ``((good + prior_num) / (total + prior_den) +
  shift) * scale`` in float32 (CatBoost's ``TModelCtr::Calc``), with ``good`` and ``total``
  read from the counts as its CTR type says, or both 0 for a key missing from the table (and
  a row missing a category: the prior).  The column holds each key's CTR, worked out here
  once, and the split is ``ctr > border`` in float32.

``CalcHash(a, b) = M * (a + M * b)`` (mod 2**64) is invertible, so a single feature's table
keys give back the categories' hashes (checked: a key no 32-bit hash makes is dropped).  CTR
types whose statistics the JSON export does not carry exactly (``BinarizedTargetMeanValue``,
``FloatTargetMeanValue``) are refused.
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
    """One ``ctr_data`` entry: its keys (category hashes for one feature, keys for a
    combination) and their statistics rows, as arrays."""

    def __init__(self, keys: list[int], stats: np.ndarray, stride: int, counter_denominator: int):
        self.keys, self.stats = keys, stats  # stats: (len(keys), stride - 1) int64
        self.stride, self.counter_denominator = stride, counter_denominator


def ctr_values(kind: str, table: CtrTable, target_border_idx: int, prior_num: float, prior_den: float,
               shift: float, scale: float) -> tuple[np.ndarray, np.float32]:
    """CatBoost's CTR values (float32, as ``TModelCtr::Calc``) for every key of ``table``, and
    the value for a key the table does not hold (both counts 0: the prior)."""
    stats = table.stats
    if kind in ("Counter", "FeatureFreq"):
        good, total = stats[:, 0], np.full(len(stats), table.counter_denominator, dtype=np.int64)
    elif kind == "Buckets":
        good, total = stats[:, target_border_idx], stats.sum(axis=1)
    else:  # Borders: the classes above the target border against all
        good, total = stats[:, target_border_idx + 1:].sum(axis=1), stats.sum(axis=1)
    f32 = np.float32

    def calc(good, total):
        # the counts become floats (CatBoost passes them as float), then float32 throughout
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ctr = (np.asarray(good, dtype=f32) + f32(prior_num)) / (np.asarray(total, dtype=f32) + f32(prior_den))
            return (ctr + f32(shift)) * f32(scale)

    return calc(good, total), f32(calc(np.zeros(1), np.zeros(1))[0])


def _mix(key: int, value: int) -> int:
    """CatBoost's ``CalcHash(key, value)`` on 64-bit integers (``value`` sign-extended)."""
    return _MAGIC * ((key + _MAGIC * value) & _M64) & _M64


def ctr_column(elements: list, single: bool, kind: str, table: CtrTable, target_border_idx: int,
               prior_num: float, prior_den: float, shift: float, scale: float) -> dict:
    """A CTR as a computed column (``Forest.hashed_combinations``): ``elements`` its key hashes,
    ``keys`` the keys its table holds (a single feature's, whose table lists category hashes:
    ``CalcHash(0, hash)`` of each), ``values`` their CTR values (float32, as floats) and
    ``unknown`` the value of any other key (the prior)."""
    values, prior = ctr_values(kind, table, target_border_idx, prior_num, prior_den, shift, scale)
    if single:
        keys = [_mix(0, h - (1 << 32) if h >= 1 << 31 else h) for h in table.keys]
    else:
        keys = [int(k) for k in table.keys]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return {"elements": elements, "keys": [keys[i] for i in order],
            "values": [float(values[i]) for i in order], "unknown": float(prior)}


def one_hot_column(column: int, value: int) -> dict:
    """A one-hot test ``hash == value`` as a computed column: 1 where it holds, else 0 (a missing
    category too, as CatBoost's one-hot test is false for it)."""
    return {"elements": [["onehot", column, value]], "keys": [_mix(0, 1)], "values": [1.0], "unknown": 0.0}


def refuse(name: str, what: str):
    raise UnsupportedModelError(f"{name}: CatBoost {what} cannot be compiled exactly and are not supported")

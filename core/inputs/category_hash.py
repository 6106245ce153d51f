"""Categories known by hash: CatBoost's ``CalcCatFeatureHash`` and the codes it leads to.

CatBoost does not store its categories' labels in a model; it stores the 32-bit hash of each
label's text (``CityHash64`` version 1.0, the one in CatBoost's ``util/digest/city.cpp``, whose
results differ from later CityHash releases, truncated to its low 32 bits).  Integers are
hashed as their decimal text (CatBoost converts them with ``ToString``), so ``3`` and ``"3"``
are one category.  ``predict`` hashes each value of a model's categorical columns
(``Forest.hashed_categories``) and mixes the hashes into the keys of its computed columns (CTRs
and one-hot tests, ``Forest.hashed_combinations``, with :func:`mix`), looked up among the keys
the model knows: a key it does not know takes the CTR's prior, as in CatBoost.

Pure Python integers (masked to 64 bits), a hash a distinct label: :mod:`silvanforge.inputs.hashed_rows`
reads whole columns with them.
"""

from __future__ import annotations

import datetime
import math

import numpy as np

_M64 = (1 << 64) - 1
_K0 = 0xC3A5C85C97CB3127
_K1 = 0xB492B66FBE98F273
_K2 = 0x9AE16A3B2F90404F
_K3 = 0xC949D7C7509E6557
_KMUL = 0x9DDFEA08EB382D69


def _u64(b: bytes, at: int) -> int:
    return int.from_bytes(b[at:at + 8], "little")


def _u32(b: bytes, at: int) -> int:
    return int.from_bytes(b[at:at + 4], "little")


def _rot(v: int, s: int) -> int:
    return v if s == 0 else ((v >> s) | (v << (64 - s))) & _M64


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def _len16(u: int, v: int) -> int:
    # Hash128to64 of the pair (low u, high v)
    a = ((u ^ v) * _KMUL) & _M64
    a ^= a >> 47
    b = ((v ^ a) * _KMUL) & _M64
    b ^= b >> 47
    return (b * _KMUL) & _M64


def _len0to16(s: bytes) -> int:
    n = len(s)
    if n > 8:
        a, b = _u64(s, 0), _u64(s, n - 8)
        return _len16(a, _rot((b + n) & _M64, n)) ^ b
    if n >= 4:
        return _len16((n + (_u32(s, 0) << 3)) & _M64, _u32(s, n - 4))
    if n > 0:
        y = s[0] + (s[n >> 1] << 8)
        z = n + (s[n - 1] << 2)
        return (_shift_mix(((y * _K2) ^ (z * _K3)) & _M64) * _K2) & _M64
    return _K2


def _len17to32(s: bytes) -> int:
    n = len(s)
    a = (_u64(s, 0) * _K1) & _M64
    b = _u64(s, 8)
    c = (_u64(s, n - 8) * _K2) & _M64
    d = (_u64(s, n - 16) * _K0) & _M64
    return _len16((_rot((a - b) & _M64, 43) + _rot(c, 30) + d) & _M64,
                  (a + _rot(b ^ _K3, 20) - c + n) & _M64)


def _weak32(s: bytes, at: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = _u64(s, at), _u64(s, at + 8), _u64(s, at + 16), _u64(s, at + 24)
    a = (a + w) & _M64
    b = _rot((b + a + z) & _M64, 21)
    c = a
    a = (a + x + y) & _M64
    b = (b + _rot(a, 44)) & _M64
    return (a + z) & _M64, (b + c) & _M64


def _len33to64(s: bytes) -> int:
    n = len(s)
    z = _u64(s, 24)
    a = (_u64(s, 0) + (n + _u64(s, n - 16)) * _K0) & _M64
    b = _rot((a + z) & _M64, 52)
    c = _rot(a, 37)
    a = (a + _u64(s, 8)) & _M64
    c = (c + _rot(a, 7)) & _M64
    a = (a + _u64(s, 16)) & _M64
    vf = (a + z) & _M64
    vs = (b + _rot(a, 31) + c) & _M64
    a = (_u64(s, 16) + _u64(s, n - 32)) & _M64
    z = _u64(s, n - 8)
    b = _rot((a + z) & _M64, 52)
    c = _rot(a, 37)
    a = (a + _u64(s, n - 24)) & _M64
    c = (c + _rot(a, 7)) & _M64
    a = (a + _u64(s, n - 16)) & _M64
    wf = (a + z) & _M64
    ws = (b + _rot(a, 31) + c) & _M64
    r = _shift_mix(((vf + ws) * _K2 + (wf + vs) * _K0) & _M64)
    return (_shift_mix((r * _K0 + vs) & _M64) * _K2) & _M64


def city_hash64(s: bytes) -> int:
    """CityHash64, version 1.0 (as CatBoost's ``util/digest/city.cpp``)."""
    n = len(s)
    if n <= 16:
        return _len0to16(s)
    if n <= 32:
        return _len17to32(s)
    if n <= 64:
        return _len33to64(s)
    x = _u64(s, 0)
    y = _u64(s, n - 16) ^ _K1
    z = _u64(s, n - 56) ^ _K0
    v = _weak32(s, n - 64, n, y)
    w = _weak32(s, n - 32, (n * _K1) & _M64, _K0)
    z = (z + _shift_mix(v[1]) * _K1) & _M64
    x = (_rot((z + x) & _M64, 39) * _K1) & _M64
    y = (_rot(y, 33) * _K1) & _M64
    at, left = 0, (n - 1) & ~63
    while True:
        x = (_rot((x + y + v[0] + _u64(s, at + 16)) & _M64, 37) * _K1) & _M64
        y = (_rot((y + v[1] + _u64(s, at + 48)) & _M64, 42) * _K1) & _M64
        x ^= w[1]
        y ^= v[0]
        z = _rot(z ^ w[0], 33)
        v = _weak32(s, at, (v[1] * _K1) & _M64, (x + w[0]) & _M64)
        w = _weak32(s, at + 32, (z + w[1]) & _M64, y)
        z, x = x, z
        at += 64
        left -= 64
        if left == 0:
            break
    return _len16((_len16(v[0], w[0]) + _shift_mix(y) * _K1 + z) & _M64, (_len16(v[1], w[1]) + x) & _M64)


def catboost_text(value) -> str | None:
    """The text CatBoost hashes for a categorical value, or None for a missing / non-category
    value: strings as they are, integers (and integral floats, as numeric arrays hold them) in
    decimal, booleans as the integers 1 and 0 (CatBoost's predict hashes ``True`` as it hashes
    ``1``, in a bool column and among objects alike); a TypeError for a fractional
    or infinite number (CatBoost refuses floats there; read as missing it would answer silently)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if v != v:
            return None  # (NaN: a missing value)
        if not (math.isfinite(v) and v == int(v)):  # (CatBoost refuses every float: a code is an integer)
            raise TypeError(f"the number {v!r}: categories are read from strings and integers")
        return str(int(v))
    if isinstance(value, (datetime.date, datetime.time, datetime.timedelta, np.datetime64, np.timedelta64)):
        # (CatBoost refuses them; a date's text would be a category no row of training held)
        raise TypeError(f"the {type(value).__name__} {value}: categories are read from strings and integers")
    return str(value)


def catboost_hash(value) -> int | None:
    """CatBoost's ``CalcCatFeatureHash`` of a categorical value (an unsigned 32-bit int), or None."""
    text = catboost_text(value)
    if text is None:
        return None
    return city_hash64(text.encode("utf-8", "surrogatepass")) & 0xFFFFFFFF


_MAGIC = np.uint64(0x4906BA494954CB65)


def mix(key: np.ndarray, value: np.ndarray) -> np.ndarray:
    """CatBoost's ``CalcHash(key, value)`` = MAGIC * (key + MAGIC * value) in 64-bit arithmetic
    (uint64 arrays wrap), which builds a combination's key element by element."""
    with np.errstate(over="ignore"):
        return _MAGIC * (key + _MAGIC * value)

"""Rows of a model whose categories are known by hash (CatBoost), read with numpy, not a
Python loop a value.

A CatBoost model with categorical features needs, for every row, each categorical column's
hash (:func:`silvanforge.inputs.category_hash.catboost_hash` of its text) replaced by the feature's
code, and the code of every combination of features its CTRs count
(``Forest.hashed_combinations``: a 64-bit key mixed from category hashes, float borders and
one-hot tests, looked up among the keys the model knows).  Done a value and a combination at
a time in Python, that costs many times CatBoost's own predict (docs/benchmarks.md, "Frames and
records").  :class:`HashedInputs` is built once a compiled model and does it with array
operations over all rows and combinations at once:

- a column's values are factorised (pandas categories' own codes, else ``pandas.factorize``)
  and only its distinct values are hashed, each once a model (a bounded memo);
- a feature's known hashes are a sorted array: codes by ``searchsorted``;
- the combinations' keys are mixed element by element over all combinations sharing a step,
  and found in one sorted table of every combination's keys, each tagged by its combination
  (its key mixed with the combination's index; a match is checked against both, so it is
  exact: two combinations' known keys never share a tag, else the model falls back to one
  search a combination).
"""

from __future__ import annotations

import threading

import numpy as np

from silvanforge.inputs import category_hash
from silvanforge.errors import InputError
from silvanforge.ir.hir import Forest

# Distinct values a model remembers the hash of (a memo, cleared when full).
VALUE_MEMO = 1 << 16
# Calls of up to this many rows find all combinations' keys in one table; more rows search
# each combination's own few keys (numpy's search of a large table by unsorted keys misses
# the cache a key: 68 ms against 25 ms for 4096 rows of 258 combinations, while one search a
# combination costs 258 calls' overhead on a few rows).
TAGGED_ROWS = 64


def _sorted_index(known) -> tuple[np.ndarray, np.ndarray]:
    """``known`` (hashes in code order) sorted, and each sorted hash's code."""
    values = np.asarray([int(h) for h in known], dtype=np.uint64)
    order = np.argsort(values, kind="stable")
    return values[order], order.astype(np.float64)


def _find(sorted_values: np.ndarray, codes: np.ndarray, query: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The code of each ``query`` among ``sorted_values`` (NaN where absent or not ``valid``)."""
    out = np.full(query.shape, np.nan)
    if len(sorted_values) == 0:
        return out
    at = np.minimum(np.searchsorted(sorted_values, query), len(sorted_values) - 1)
    found = valid & (sorted_values[at] == query)
    out[found] = codes[at[found]]
    return out


class HashedInputs:
    """What reading rows of ``forest`` (hashed categories, combinations) needs, built once."""

    def __init__(self, forest: Forest):
        self.forest = forest
        self.hashed = {int(f): _sorted_index(known) for f, known in (forest.hashed_categories or {}).items()}
        self.width = forest.input_features
        self._memo: dict = {}
        self._lock = threading.Lock()
        combos = list(forest.hashed_combinations or ())
        self.count = len(combos)
        # Steps: for each element position, the combinations having an element there, by kind.
        steps = []
        for s in range(max((len(c["elements"]) for c in combos), default=0)):
            cat, flt, onehot = [], [], []
            for j, combo in enumerate(combos):
                if s < len(combo["elements"]):
                    e = combo["elements"][s]
                    if e[0] == "cat":
                        cat.append((j, int(e[1])))
                    elif e[0] == "float":
                        flt.append((j, int(e[1]), float(np.float32(e[2])), bool(e[3])))
                    else:
                        onehot.append((j, int(e[1]), int(e[2])))
            steps.append((_columns(cat, 2), _columns(flt, 4), _columns(onehot, 3)))
        self.steps = steps
        self.float_columns = sorted({int(e[1]) for c in combos for e in c["elements"] if e[0] == "float"})
        # One table of every combination's keys, each tagged by its combination.
        keys = [np.asarray([int(k) for k in c["keys"]], dtype=np.uint64) for c in combos]
        ids = np.concatenate([np.full(len(k), j, np.uint64) for j, k in enumerate(keys)]) if keys else \
            np.zeros(0, np.uint64)
        flat = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
        codes = np.concatenate([np.arange(len(k), dtype=np.float64) for k in keys]) if keys else np.zeros(0)
        tags = category_hash.mix(flat, ids)
        order = np.argsort(tags, kind="stable")
        self.tags, self.tag_ids, self.tag_keys, self.tag_codes = tags[order], ids[order], flat[order], codes[order]
        self.tagged = len(np.unique(self.tags)) == len(self.tags)
        self.per_combo = [_sorted_index(k) for k in keys]

    # ------------------------------------------------------------------ a column's hashes
    def column_hashes(self, values) -> tuple[np.ndarray, np.ndarray]:
        """CatBoost's hashes (uint64 holding the unsigned 32-bit hash) of a column's values (a
        pandas Series, an array or a list), and which values are categories at all."""
        codes, uniques = _factorise(values)
        hashes = np.zeros(len(uniques) + 1, dtype=np.uint64)  # the last: missing (code -1)
        ok = np.zeros(len(uniques) + 1, dtype=bool)
        memo = self._memo
        for i, v in enumerate(uniques):
            # Keyed by type too: True == 1 in Python, but CatBoost hashes "True" and "1".
            key = (type(v), v)
            try:
                h = memo[key]
            except (KeyError, TypeError):
                h = category_hash.catboost_hash(v)
                try:
                    if len(memo) >= VALUE_MEMO:
                        with self._lock:
                            memo.clear()
                    memo[key] = h
                except TypeError:
                    pass
            if h is not None:
                hashes[i], ok[i] = h, True
        return hashes[codes], ok[codes]

    def codes(self, feature: int, hashes: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Codes (float64) of ``feature``'s hashes: NaN for an invalid value or an unknown hash."""
        return _find(*self.hashed[feature], hashes, valid)

    # ------------------------------------------------------------------ combinations
    def combination_codes(self, hashes: dict, values: np.ndarray) -> np.ndarray:
        """(n, combinations) codes of every combination's key (NaN where the model does not
        know it or a category in it is missing): ``hashes`` maps a column to
        (:meth:`column_hashes`), ``values`` is the rows' plain columns (float64)."""
        n = values.shape[0]
        C = self.count
        H = np.zeros((n, self.width), dtype=np.uint64)
        OK = np.zeros((n, self.width), dtype=bool)
        for column, (h, ok) in hashes.items():
            H[:, column], OK[:, column] = h, ok
        # the hash as CatBoost's int, sign-extended to 64 bits
        signed = np.where(H >= np.uint64(1 << 31), H + np.uint64(((1 << 64) - (1 << 32))), H)
        F = values[:, :self.width].astype(np.float32)
        key = np.zeros((n, C), dtype=np.uint64)
        valid = np.ones((n, C), dtype=bool)
        with np.errstate(over="ignore"):
            for cat, flt, onehot in self.steps:
                if cat is not None:
                    j, col = cat
                    key[:, j] = category_hash.mix(key[:, j], signed[:, col])
                    valid[:, j] &= OK[:, col]
                if flt is not None:
                    j, col, border, nan_right = flt
                    x = F[:, col]
                    bit = (x > border.astype(np.float32)) | (np.isnan(x) & nan_right.astype(bool))
                    key[:, j] = category_hash.mix(key[:, j], bit.astype(np.uint64))
                if onehot is not None:
                    j, col, value = onehot
                    bit = (H[:, col] == value.astype(np.uint64)) & OK[:, col]
                    key[:, j] = category_hash.mix(key[:, j], bit.astype(np.uint64))
            if self.tagged and n <= TAGGED_ROWS:
                return self._tagged(key, valid)
        out = np.empty((n, C))
        for j in range(C):
            out[:, j] = _find(*self.per_combo[j], key[:, j], valid[:, j])
        return out

    def _tagged(self, key: np.ndarray, valid: np.ndarray) -> np.ndarray:
        out = np.full(key.shape, np.nan)
        if len(self.tags) == 0:
            return out
        ids = np.arange(key.shape[1], dtype=np.uint64)
        tag = category_hash.mix(key, ids[None, :])
        at = np.minimum(np.searchsorted(self.tags, tag), len(self.tags) - 1)
        found = valid & (self.tags[at] == tag) & (self.tag_ids[at] == ids[None, :]) & (self.tag_keys[at] == key)
        out[found] = self.tag_codes[at[found]]
        return out


def _columns(rows: list, width: int):
    """A step's elements of one kind as arrays (combination, column, ...), or None."""
    if not rows:
        return None
    parts = list(zip(*rows))
    out = [np.asarray(parts[0], dtype=np.intp), np.asarray(parts[1], dtype=np.intp)]
    out += [np.asarray(p) for p in parts[2:width]]
    return tuple(out)


def _factorise(values) -> tuple[np.ndarray, list]:
    """(codes, distinct values) of a column: code -1 for a missing value (None, NaN, pandas
    NA), which the last slot of the caller's tables answers (not a category)."""
    module = type(values).__module__.split(".")[0]
    if module == "pandas" and str(getattr(values, "dtype", "")) == "category":
        codes = values.cat.codes.to_numpy()
        return codes.astype(np.intp), list(values.cat.categories)
    try:
        import pandas as pd
    except ImportError:  # no pandas: a dict of the distinct values
        seen: dict = {}
        codes = np.empty(len(values), dtype=np.intp)
        for i, v in enumerate(values.tolist() if hasattr(values, "tolist") else values):
            codes[i] = seen.setdefault(v, len(seen)) if v is not None else -1
        return codes, list(seen)
    if module != "pandas":
        values = np.asarray(values) if not isinstance(values, np.ndarray) else values
        if values.dtype.kind not in "biufOUS":
            raise InputError(f"a categorical column of dtype {values.dtype} cannot be read")
        if values.dtype.kind in "US":
            values = values.astype(object)
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    return np.asarray(codes, dtype=np.intp), list(uniques)

"""Rows sampled from a forest's own thresholds: the compiler's one-row timing, the tuner, the
benchmarks and the conformance kit all need inputs that take both sides of the splits, and none
of them should depend on another for it."""

from __future__ import annotations

import numpy as np

from silvanforge.ir.hir import Forest


# Distinct integers random rows hold in a categorical column known by hash.
HASHED_VALUES = 16


def random_rows(forest: Forest, n: int, seed: int = 0, missing: float = 0.0) -> np.ndarray:
    """Rows that exercise both sides of the splits: each feature uniform over a little more than
    the range of its thresholds; features with categorical splits get category codes.
    ``missing``: the share of values made missing (NaN), drawn apart, as wide sparse datasets
    hold them (Bosch's production-line rows are about 80% missing), which moves some engines'
    speed a good deal; 0 leaves the rows exactly as without it."""
    rng = np.random.default_rng(seed)
    lo = np.full(forest.num_features, np.inf)
    hi = np.full(forest.num_features, -np.inf)
    cat_max = np.full(forest.num_features, -1)
    for t in forest.trees:
        internal = np.flatnonzero(t.left >= 0)
        feats = t.feature[internal]
        thr = np.asarray(t.threshold[internal], dtype=np.float64)
        finite = np.isfinite(thr)
        np.minimum.at(lo, feats[finite], thr[finite])
        np.maximum.at(hi, feats[finite], thr[finite])
        for node, cats in t.categories.items():
            f = int(t.feature[node])
            cat_max[f] = max(cat_max[f], int(cats.max()) if len(cats) else 0)
    unused = ~np.isfinite(lo)
    lo[unused], hi[unused] = 0.0, 1.0
    dtype = np.float32 if forest.threshold_dtype == "float32" else np.float64
    pad = np.maximum((hi - lo) * 0.1, 1e-3)
    # Thresholds near the dtype's largest value (CatBoost's missing-value borders, for one)
    # would draw values past it: rows stay finite in the dtype the model compares in.
    top = float(np.finfo(dtype).max)
    with np.errstate(over="ignore"):
        low, high = np.maximum(lo - pad, -top), np.minimum(hi + pad, top)
    # Uniform between them by the midpoint and half the width, which stay finite.
    mid, half = low / 2 + high / 2, high / 2 - low / 2
    X = np.clip(mid + (2 * rng.random((n, forest.num_features)) - 1) * half, -top, top)
    for f in np.flatnonzero(cat_max >= 0):
        X[:, f] = rng.integers(0, cat_max[f] + 2, size=n)
    for f in forest.hashed_categories or {}:
        # Categories known by hash (CatBoost's) read integers as their text and refuse fractions:
        # small integers, as codes of real data come (the model's own labels are not kept).
        X[:, f] = rng.integers(0, HASHED_VALUES, size=n)
    if missing:
        if not 0.0 <= missing <= 1.0:
            raise ValueError(f"missing must be a share between 0 and 1, got {missing}")
        X[np.random.default_rng((seed, 1)).random(X.shape) < missing] = np.nan
    return X.astype(dtype)

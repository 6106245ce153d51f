"""Rows drawn around a forest's thresholds (silvanforge.frontend.sampling): both sides of every split, and
finite in the dtype the model compares in even where thresholds sit at its largest values."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from silvanforge.ir.hir import Forest, Tree
from silvanforge.frontend.sampling import random_rows

pytestmark = pytest.mark.core_alone  # needs no target and no shipped representation


def _stump(threshold: float, dtype: str) -> Forest:
    tree = Tree.from_nodes(left=[1, -1, -1], right=[2, -1, -1], feature=[0, -1, -1],
                           threshold=[threshold, 0, 0], leaf_value=[0.0, 1.0, 2.0])
    return Forest(trees=[tree, Tree.from_nodes(left=[1, -1, -1], right=[2, -1, -1], feature=[0, -1, -1],
                                               threshold=[0.5, 0, 0], leaf_value=[0.0, 1.0, 2.0])],
                  num_features=1, threshold_dtype=dtype, accumulate_dtype=dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("extreme", [-1, 1])
def test_rows_stay_finite_at_extreme_thresholds(dtype, extreme):
    top = float(np.finfo(dtype).max)
    forest = _stump(extreme * top, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either
        X = random_rows(forest, 2000, seed=1)
    assert X.dtype == np.dtype(dtype) and np.isfinite(X).all()
    assert (X[:, 0] < 0.5).any() and (X[:, 0] >= 0.5).any()  # both sides of the ordinary split


def test_rows_take_both_sides_of_every_threshold():
    forest = _stump(-3.0, "float32")
    X = random_rows(forest, 500, seed=2)
    assert (X[:, 0] < -3.0).any() and ((X[:, 0] >= -3.0) & (X[:, 0] < 0.5)).any() and (X[:, 0] >= 0.5).any()


def test_missing_share_of_values_and_rows_otherwise_unchanged():
    forest = _stump(-3.0, "float64")
    plain = random_rows(forest, 4000, seed=4)
    sparse = random_rows(forest, 4000, seed=4, missing=0.8)
    gone = np.isnan(sparse)
    assert not np.isnan(plain).any() and 0.75 < gone.mean() < 0.85
    assert np.array_equal(sparse[~gone], plain[~gone])  # the values kept are the rows without it
    assert np.isnan(random_rows(forest, 50, seed=4, missing=1.0)).all()
    with pytest.raises(ValueError, match="share between 0 and 1"):
        random_rows(forest, 5, missing=1.5)

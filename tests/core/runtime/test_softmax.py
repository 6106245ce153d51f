"""The registry's softmax (every target's and the reference's): a row's exponentials summed in a
double in class order, as XGBoost, LightGBM and CatBoost sum them, whatever the rows' layout or
count, so a row's probabilities do not depend on the call it came in."""

from __future__ import annotations

import numpy as np
import pytest
from silvanforge.ir.hir import Transform
from silvanforge.runtime import transforms


def _in_class_order(margins: np.ndarray) -> np.ndarray:
    """Softmax written out as the libraries loop over a row (float64 exp rounded to the margins'
    precision, as the registry's ``_exp``)."""
    out = np.empty_like(margins)
    for r, row in enumerate(margins):
        top = row.max()
        e = [np.float64(np.exp(np.float64(v - top))).astype(margins.dtype) for v in row]
        total = 0.0
        for v in e:
            total += float(v)
        out[r] = [v / margins.dtype.type(total) for v in e]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows, classes", [(1, 3), (5, 8), (70, 9), (200, 26), (3, 100)])
def test_softmax_sums_each_row_in_class_order_in_any_call(dtype, rows, classes):
    margins = (np.random.default_rng(rows * classes).normal(size=(rows, classes)) * 6).astype(dtype)
    got = transforms._softmax(margins, Transform("softmax"))
    assert got.dtype == dtype and got.shape == margins.shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got, _in_class_order(margins))
    for r in (0, rows - 1):  # a row alone as in the call
        np.testing.assert_array_equal(transforms._softmax(margins[r:r + 1], Transform("softmax")), got[r:r + 1])
    np.testing.assert_array_equal(transforms._softmax(np.asfortranarray(margins), Transform("softmax")), got)


def test_softmax_of_margins_not_finite_is_nan_as_the_libraries():
    margins = np.array([[1.0, np.inf, 0.0], [np.nan, 1.0, 2.0], [1.0, 2.0, 3.0]])
    got = transforms._softmax(margins, Transform("softmax"))
    assert np.isnan(got[:2]).all() and np.isfinite(got[2]).all()
    assert transforms._softmax(np.empty((0, 4)), Transform("softmax")).shape == (0, 4)

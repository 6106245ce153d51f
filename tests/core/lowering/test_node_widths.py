"""Node-array widths: float32 thresholds that decide every float32 input as the float64 ones do,
and the narrowest integer types (test_widths.py, beside this file, compiles every width)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import silvanforge as sf
from silvanforge.ir.hir import Op
from silvanforge.lowering.walksetup import float32_thresholds, smallest_int

pytestmark = pytest.mark.core_alone  # needs no target and no shipped representation

f64 = st.floats(allow_nan=False, width=64)
f32 = st.floats(allow_nan=True, width=32)


@settings(max_examples=400, deadline=None)
@given(t=f64, xs=st.lists(f32, min_size=1, max_size=8), near=st.integers(-3, 3))
def test_float32_thresholds_decide_every_float32_input_like_float64(t, xs, near):
    """x <= t (and x < t) in float64 equals x <= t32 (x < t32) in float32 for float32 x."""
    with np.errstate(over="ignore"):
        around = np.float32(t)  # inputs right next to the threshold are the interesting ones
    for _ in range(abs(near)):
        around = np.nextafter(around, np.float32(np.inf if near > 0 else -np.inf))
    x = np.array(xs + [around], dtype=np.float32)
    for op, cmp in ((Op.LE, np.less_equal), (Op.LT, np.less)):
        t32 = float32_thresholds(np.array([t]), op)
        assert t32.dtype == np.float32
        np.testing.assert_array_equal(cmp(x, t32[0]), cmp(x.astype(np.float64), t), err_msg=f"{op} {t!r}")


def test_float32_thresholds_edges():
    big = float(np.finfo(np.float32).max) * 1.5
    t = np.array([np.inf, -np.inf, big, -big, 0.1, -0.0, 1e-46])
    down = float32_thresholds(t, Op.LE)
    assert down[0] == np.inf and down[1] == -np.inf and down[2] == np.finfo(np.float32).max
    assert down[3] == -np.inf and down[4] < 0.1 and down[6] == 0.0
    with pytest.raises(ValueError):
        float32_thresholds(t, Op.EQ)


def test_smallest_int():
    assert smallest_int(-1, 127) == np.int8
    assert smallest_int(-1, 128) == np.int16
    assert smallest_int(0, 40000) == np.int32
    assert smallest_int(-1, 5, np.int32) == np.int32
    with pytest.raises(sf.UnsupportedModelError):
        smallest_int(0, 2**31)

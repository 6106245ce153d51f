"""Output transforms: margins (n, num_outputs) -> what the source library's ``predict`` returns.

One registry serves the reference evaluator and every compiled target, so a transform is
written once.  Each function computes in the precision the library uses (``dtype``: XGBoost
float32, LightGBM and ONNX-double float64) to match its rounding.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from silvanforge.ir.hir import Forest, Transform

TransformFn = Callable[[np.ndarray, Transform], np.ndarray]
_REGISTRY: dict[str, TransformFn] = {}


def register(name: str):
    def deco(fn: TransformFn) -> TransformFn:
        _REGISTRY[name] = fn
        return fn

    return deco


def names() -> list[str]:
    return sorted(_REGISTRY)


def _one(dt) -> np.generic:
    return np.dtype(dt).type(1)


def _exp(x: np.ndarray) -> np.ndarray:
    """exp in x's precision, correctly rounded for float32 (float64 exp rounded once).  glibc's
    expf, which XGBoost's float32 transforms call, is within 0.502 ulp: it rounds the other way
    on about 0.07% of float32 values (measured, glibc on x86-64), so a probability may be 1 ulp
    from XGBoost's there (margins are exact); NumPy's own float32 exp is further off."""
    with np.errstate(over="ignore"):
        if x.dtype == np.float32:
            return np.exp(x, dtype=np.float64).astype(np.float32)
        return np.exp(x)


@register("identity")
def _identity(m, tr):
    return m


@register("sigmoid")
def _sigmoid(m, tr):
    # 1 / (1 + exp(-alpha * x)): XGBoost's logistic (alpha 1) and LightGBM's sigmoid(alpha).
    alpha = m.dtype.type(tr.param("alpha", 1.0))
    one = _one(m.dtype)
    return one / (one + _exp(-alpha * m if alpha != 1 else -m))


@register("exp")
def _exp_link(m, tr):
    return _exp(m)


@register("softmax")
def _softmax(m, tr):
    # Computed along the longer axis: NumPy reduces an (n, k) array's short rows one row at a
    # time, 6 ns a value (4,096 rows of 8 classes: 0.4 ms of CatBoost's 2 ms multiclass call),
    # so where rows outnumber classes each class's margins are laid side by side first (one
    # transposing copy each way; 0.1 ms in all).  An infinite margin (a linear leaf of an
    # infinite input) makes its row NaN, as the libraries' is: quietly.
    by_row = m.shape[0] < m.shape[1]
    axis = 1 if by_row else 0
    with np.errstate(invalid="ignore"):
        a = np.ascontiguousarray(m if by_row else m.T)
        e = _exp(a - a.max(axis=axis, keepdims=True))
        # XGBoost, LightGBM and CatBoost sum a row's exponentials in a double, in class order
        # (NumPy's own sum along a row is pairwise from 8 classes), and divide by that sum in
        # the margins' precision.
        e /= _sums_in_order(e.astype(np.float64, copy=False), axis).astype(m.dtype)
    return e if by_row else np.ascontiguousarray(e.T)


def _sums_in_order(a: np.ndarray, axis: int) -> np.ndarray:
    """The sums of ``a`` (2-D, C-ordered) along ``axis``, kept as a dimension, its values added
    first to last (``(a0 + a1) + a2``...) whatever the shape: NumPy's own sum pairs them where
    they lie side by side."""
    if axis == 1 or a.shape[1] < 160:  # (one call, 3.5 ns a value, where the values added lie side
        return np.add.accumulate(a, axis=axis)[:, -1:] if axis == 1 else np.add.accumulate(a, axis=0)[-1:]
    total = a[0:1].copy()  # (else a call a class's row, 0.6 us and 0.5 ns a value: cheaper from ~160 rows)
    for row in a[1:]:
        total += row
    return total


@register("argmax")
def _argmax(m, tr):
    # XGBoost multi:softmax returns the winning class index as a float.
    return np.argmax(m, axis=1).astype(m.dtype)


@register("hinge")
def _hinge(m, tr):
    # XGBoost binary:hinge: 1 where the margin is positive, else 0.
    return (m > 0).astype(m.dtype)


@register("log1p_exp")
def _log1p_exp(m, tr):
    # LightGBM cross_entropy_lambda: log(1 + exp(x)).
    with np.errstate(over="ignore"):
        return np.log1p(np.exp(m))


@register("signed_square")
def _signed_square(m, tr):
    # LightGBM regression objectives trained with reg_sqrt ("regression sqrt"): sign(x) * x * x.
    return np.sign(m) * m * m


# ---- ONNX tree ensembles, as onnxruntime computes them ------------------------------------
# onnxruntime applies post_transform in float32 (std::exp / std::log on floats) whatever the
# accumulation type.  Codes follow its POST_EVAL_TRANSFORM enum.
ONNX_NONE, ONNX_LOGISTIC, ONNX_SOFTMAX, ONNX_SOFTMAX_ZERO, ONNX_PROBIT = range(5)
_F32 = np.float32


def _onnx_exp(x):
    # glibc's expf is (nearly) correctly rounded: evaluate in double, round once.
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(np.asarray(x, dtype=np.float64)).astype(_F32)


def onnx_logistic(x):
    """ComputeLogistic: v = 1 / (1 + exp(-|x|)); x < 0 gives 1 - v (all float32)."""
    x = np.asarray(x, dtype=_F32)
    with np.errstate(over="ignore", invalid="ignore"):
        v = _F32(1) / (_F32(1) + _onnx_exp(-np.abs(x)))
        return np.where(x < 0, _F32(1) - v, v).astype(_F32)


def onnx_probit(x):
    """ComputeProbit: sqrt(2) * ErfInv(2x - 1) with onnxruntime's closed-form ErfInv, in float32."""
    x = np.asarray(x, dtype=_F32)
    with np.errstate(all="ignore"):
        x = _F32(2) * x - _F32(1)
        sgn = np.where(x < 0, _F32(-1), _F32(1))
        x = (_F32(1) - x) * (_F32(1) + x)
        log = np.log(x.astype(np.float64)).astype(_F32)
        v = _F32(2) / (_F32(3.14159) * _F32(0.147)) + _F32(0.5) * log
        v2 = _F32(1) / _F32(0.147) * log
        v3 = -v + np.sqrt(v * v - v2)
        return (_F32(np.sqrt(2.0)) * (sgn * np.sqrt(v3))).astype(_F32)


def _onnx_rowmax(x):
    # v_max starts at -FLT_MAX and takes a value only when `value > v_max` (NaN never wins).
    with np.errstate(invalid="ignore"):
        return np.maximum(np.where(np.isnan(x), -np.inf, x).max(axis=1, initial=-np.inf),
                          -np.finfo(_F32).max).astype(_F32)[:, None]


def onnx_softmax(x):
    x = np.asarray(x, dtype=_F32)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = _onnx_exp(x - _onnx_rowmax(x))
        total = np.zeros(len(x), dtype=_F32)
        for j in range(x.shape[1]):  # float32 sum in column order, as onnxruntime adds
            total = total + e[:, j]
        return (e / total[:, None]).astype(_F32)


def onnx_softmax_zero(x):
    """Softmax that leaves (near-)zero scores out of the sum and scales them by exp(-max)."""
    x = np.asarray(x, dtype=_F32)
    vmax = _onnx_rowmax(x)
    nonzero = (x > _F32(1e-7)) | (x < _F32(-1e-7))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        e = np.where(nonzero, _onnx_exp(x - vmax), x * _onnx_exp(-vmax)).astype(_F32)
        total = np.zeros(len(x), dtype=_F32)
        for j in range(x.shape[1]):
            total = total + np.where(nonzero[:, j], e[:, j], _F32(0))
        return (e / total[:, None]).astype(_F32)


def onnx_post(x, post: int):
    """onnxruntime's write_scores for two or more scores: the transform on every column."""
    if post == ONNX_LOGISTIC:
        return onnx_logistic(x)
    if post == ONNX_SOFTMAX:
        return onnx_softmax(x)
    if post == ONNX_SOFTMAX_ZERO:
        return onnx_softmax_zero(x)
    if post == ONNX_PROBIT:
        return onnx_probit(x)
    return x


@register("onnx")
def _onnx(m, tr):
    """ONNX TreeEnsemble* scores: the first ``k`` margins, each zeroed where its indicator
    column ``mask<j>`` is 0 (no tree reached a leaf with a weight for it: onnxruntime then writes
    0, not the base value), then ``post`` (see ``onnx_post``); ``f32``: the op returns float32."""
    k = int(tr.param("k", m.shape[1]))
    vals = m[:, :k].copy()
    for key, col in tr.params:
        if key.startswith("mask"):
            j = int(key[4:])
            vals[:, j] = np.where(m[:, int(col)] != 0, vals[:, j], vals.dtype.type(0))
    post = int(tr.param("post", ONNX_NONE))
    out = vals if post == ONNX_NONE else onnx_post(vals, post)
    return out.astype(_F32) if tr.param("f32", 1.0) else out.astype(m.dtype)


@register("onnx_binary")
def _onnx_binary(m, tr):
    """TreeEnsembleClassifier with two class labels, as onnxruntime's TreeAggregatorClassifier.

    Margins: 0 = sum of the class-0 weights, 1 = sum of the class-1 weights; the flags saying
    whether a row reached any weight of class c are constants ``h<c>`` or, where they vary by row,
    the indicator column ``h<c>col`` (non-zero = reached).  ``nb``/``b0``/``b1``: base_values.
    Rows with no class-1 weight and fewer than two base values keep one score ``v``, which is
    written as two: ``wa`` 0 (one class id, all weights >= 0): [1-v, v] (LOGISTIC:
    [1-L(v), L(v)]); 2 or 3 (mixed signs, or no base values): [-v, v] (LOGISTIC: [L(-v), L(v)]).
    Rows with two scores get ``post`` on both.
    """
    dt = m.dtype.type
    n = m.shape[0]

    def flag(c):
        col = tr.param(f"h{c}col", -1.0)
        if col >= 0:
            return m[:, int(col)] != 0
        return np.full(n, bool(tr.param(f"h{c}", 1.0)))

    s0, s1 = m[:, 0], m[:, 1]
    h0, h1 = flag(0), flag(1)
    nb = int(tr.param("nb", 0))
    b0, b1 = dt(tr.param("b0", 0.0)), dt(tr.param("b1", 0.0))
    zero = dt(0)
    if nb == 2:
        p1 = b1 + s0  # onnxruntime adds base_values[1] to the class-0 sum (sic)
        c0 = np.where(h1, np.where(h0, -p1, zero), np.where(h0, s0 + b0, zero))
        c1 = np.where(h1, p1, zero)
        two = np.ones(n, dtype=bool)
    else:
        a0 = s0 + b0 if nb == 1 else s0
        c0 = np.where(h0, a0, zero)
        c1 = np.where(h1, s1, zero)
        two = h1
    post = int(tr.param("post", ONNX_NONE))
    pair = np.stack([c0, c1], axis=1)
    out = (pair if post == ONNX_NONE else onnx_post(pair, post)).astype(_F32)
    if not two.all():
        v = c0
        if int(tr.param("wa", 2)) == 0:
            if post == ONNX_LOGISTIC:
                lv = onnx_logistic(v)
                single = np.stack([_F32(1) - lv, lv], axis=1)
            else:
                single = np.stack([dt(1) - v, v], axis=1)
        elif post == ONNX_LOGISTIC:
            single = np.stack([onnx_logistic(-v), onnx_logistic(v)], axis=1)
        else:
            single = np.stack([-v, v], axis=1)
        out = np.where(two[:, None], out, single.astype(_F32))
    return out if tr.param("f32", 1.0) else out.astype(m.dtype)


# ---- scikit-learn, as its losses' inverse links compute them ------------------------------
# scikit-learn takes probabilities from float64 margins with scipy.special.expit, which is
# 1 / (1 + exp(-x)) with the C library's exp; NumPy's own float64 exp (SIMD) differs from it
# in the last bit for a few percent of inputs, so the expit here is the C library's too.


def _libm_expit_scalar(v: float) -> float:
    try:
        return 1.0 / (1.0 + math.exp(-v))
    except OverflowError:  # exp(-v) beyond the double range: 1 / (1 + inf)
        return 0.0


_libm_expit = np.frompyfunc(_libm_expit_scalar, 1, 1)


def _expit(x: np.ndarray) -> np.ndarray:
    """scipy.special.expit on float64, bit for bit; without SciPy (an artifact scored where it
    is not installed) the same formula through Python's math.exp, the same C library exp."""
    x = np.asarray(x, dtype=np.float64)
    try:
        from scipy.special import expit
    except ImportError:
        with np.errstate(over="ignore"):  # exp's overflow flag, already answered as 0.0
            return _libm_expit(x).astype(np.float64)
    return expit(x)


@register("sklearn_binary")
def _sklearn_binary(m, tr):
    """Binary classifiers' predict_proba: [1 - p, p] with p = expit(scale * margin) (scale 1:
    log-loss, 2: GradientBoosting's exponential loss, whose half-logit link doubles first)."""
    scale = m.dtype.type(tr.param("scale", 1.0))
    p = _expit(m[:, 0] * scale if scale != 1 else m[:, 0]).astype(m.dtype)
    out = np.empty((m.shape[0], 2), dtype=m.dtype)
    out[:, 1] = p
    out[:, 0] = m.dtype.type(1) - p
    return out


@register("sklearn_softmax")
def _sklearn_softmax(m, tr):
    """sklearn.utils.extmath.softmax: exp with NumPy, the row sums as NumPy adds them.  Those
    sums depend on the margins' memory order: GradientBoosting keeps them in C order (a row is
    contiguous and NumPy sums it pairwise, which differs from left to right from 8 classes on),
    HistGradientBoosting in Fortran order (NumPy adds the columns left to right); ``fortran``
    1 takes the latter."""
    x = np.array(m, dtype=np.float64, order="F" if tr.param("fortran", 0.0) else "C", copy=True)
    x -= x.max(axis=1).reshape(-1, 1)
    np.exp(x, out=x)
    x /= x.sum(axis=1).reshape(-1, 1)
    return x.astype(m.dtype, copy=False)


def apply(forest: Forest, margins: np.ndarray) -> np.ndarray:
    """Transform margins of shape (n, num_outputs) in the forest's accumulation precision."""
    fn = _REGISTRY.get(forest.transform.name)
    if fn is None:
        raise KeyError(f"unknown output transform {forest.transform.name!r}; known: {names()}")
    divisor = forest.transform.param("margin_divisor", 1.0)
    if divisor != 1.0:
        # LightGBM random forests: the margin (raw_score) is the sum of the trees, and predict
        # transforms that sum divided by the number of iterations.
        margins = margins / margins.dtype.type(divisor)
    return fn(margins, forest.transform)


class Finish:
    """The output transform of a device-array call (``DeviceKernel.device_predict``'s
    ``finish``): called on host margins ``(n, outputs)`` it returns what ``predict`` returns;
    ``transform`` names it, so a kernel may apply it where the margins are instead, wherever its
    result is this one's bit for bit."""

    def __init__(self, forest: Forest):
        self.forest = forest
        self.transform = forest.transform

    def __call__(self, margins: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(shape_output(self.forest, apply(self.forest, margins)))


def shape_output(forest: Forest, values: np.ndarray) -> np.ndarray:
    """Give a (n, k) result the library's shape: (n,) for one column unless the model says matrix."""
    if values.ndim == 2 and values.shape[1] == 1 and forest.output_shape != "matrix":
        return values[:, 0]
    return values

"""Output transforms: margins (n, num_outputs) -> what the source library's ``predict`` returns.

One registry serves the reference evaluator and every compiled target, so a transform is
written once.  Each function computes in the precision the library uses (``dtype``: XGBoost
float32, LightGBM and ONNX-double float64) to match its rounding.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .ir.hir import Forest, Transform

TransformFn = Callable[[np.ndarray, Transform], np.ndarray]
_REGISTRY: dict[str, TransformFn] = {}


def register(name: str):
    def deco(fn: TransformFn) -> TransformFn:
        _REGISTRY[name] = fn
        return fn

    return deco


def names() -> list[str]:
    return sorted(_REGISTRY)


def _one(dt) -> np.ndarray:
    return np.asarray(1, dtype=dt)


@register("identity")
def _identity(m, tr):
    return m


@register("sigmoid")
def _sigmoid(m, tr):
    # 1 / (1 + exp(-alpha * x)): XGBoost's logistic (alpha 1) and LightGBM's sigmoid(alpha).
    alpha = m.dtype.type(tr.param("alpha", 1.0))
    with np.errstate(over="ignore"):
        return _one(m.dtype) / (_one(m.dtype) + np.exp(-alpha * m if alpha != 1 else -m))


@register("exp")
def _exp(m, tr):
    with np.errstate(over="ignore"):
        return np.exp(m)


@register("softmax")
def _softmax(m, tr):
    z = m - m.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


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


def shape_output(forest: Forest, values: np.ndarray) -> np.ndarray:
    """Give a (n, k) result the library's shape: (n,) for one column unless the model says matrix."""
    if values.ndim == 2 and values.shape[1] == 1 and forest.output_shape != "matrix":
        return values[:, 0]
    return values

"""SHAP interaction values (``predict(X, pred_interactions=True)``): XGBoost's
``pred_interactions``, ``(n, F + 1, F + 1)`` a row (``(n, classes, F + 1, F + 1)``), the bias
last, each row's entries adding up to the feature's contribution.

XGBoost conditions each feature ``i`` on and off (Lundberg et al., "Consistent Individualized
Feature Attribution for Tree Ensembles", section 'SHAP interaction values') and halves the
difference of the other features' contributions.  A leaf path without ``i`` gives both the
same; a path with ``i`` weighs the rest of the path by ``o_i`` on and ``z_i`` off, so in the
path form of :mod:`silvanforge.runtime.contributions` features ``i != j`` of a path of value
``v`` interact by

    v / 2 * (o_i - z_i) * (o_j - z_j) * integral_0^1 prod_{k != i, j} (z_k (1 - t) + o_k t) dt

(the integral the Shapley weights of the path without ``i`` and ``j``, by Gauss-Legendre,
exact for its degree); a feature's own entry is its contribution less its interactions, and
the bias's is the bias.  Evaluated in NumPy over the path tables the contributions use.
"""

from __future__ import annotations

import numpy as np

from silvanforge.errors import UnsupportedModelError
from silvanforge.ir.hir import Forest
from silvanforge.runtime.contributions import CHUNK_ELEMENTS, Tables, contributions, decisions, patterns


def check(forest: Forest) -> None:
    """Raise ``UnsupportedModelError`` unless ``forest`` is XGBoost's (the library that gives
    interaction values)."""
    if forest.source != "xgboost":
        raise UnsupportedModelError(f"pred_interactions: interaction values are XGBoost's; this is a "
                                    f"{forest.source} model (pred_contribs gives its contributions)")


def interactions(t: Tables, X: np.ndarray, forest: Forest) -> np.ndarray:
    """(n, outputs, features + 1, features + 1) of rows ``X`` (in the comparison dtype)."""
    check(forest)
    n, K, F = X.shape[0], forest.num_outputs, forest.input_features
    phi = contributions(t, X, forest)
    out = np.zeros((n, K, F + 1, F + 1))
    flat = out.reshape(-1)  # (a view: a pair's shares are added at their cells' flat indices)
    left = decisions(t, X, forest)
    for g in t.groups:
        if g.d < 2:
            continue  # a path of one feature: no pair
        P, d = g.node.shape[0], g.d
        x, w = np.polynomial.legendre.leggauss(max(1, d // 2))  # degree d - 2
        points, weights = (x + 1) / 2, w / 2
        rows = max(1, CHUNK_ELEMENTS // max(1, P * d * points.size))
        for lo in range(0, n, rows):
            hi = min(n, lo + rows)
            o = ((patterns(g, left[lo:hi])[:, :, None] >> np.arange(d)) & 1).astype(np.float64)  # (m, P, d)
            off = o - g.zero[None]
            factor = g.zero[None, :, :, None] * (1 - points) + o[..., None] * points  # (m, P, d, points)
            for i in range(d):
                for j in range(i + 1, d):
                    rest = np.delete(factor, [i, j], axis=2).prod(axis=2) @ weights  # (m, P)
                    pair = 0.5 * off[:, :, i] * off[:, :, j] * rest
                    a, b = g.feature[:, i], g.feature[:, j]
                    for k in range(K):
                        if not g.value[:, k].any():
                            continue
                        share = (pair * g.value[None, :, k]).ravel()
                        at = (np.arange(lo, hi)[:, None] * K + k) * (F + 1)
                        for first, second in ((a, b), (b, a)):
                            np.add.at(flat, ((at + first[None]) * (F + 1) + second[None]).ravel(), share)
    own = np.arange(F)
    out[:, :, own, own] = phi[:, :, :F] - (out[:, :, :F, :F].sum(axis=3) - out[:, :, own, own])
    out[:, :, F, F] = phi[:, :, F]
    return out


def shaped(forest: Forest, out: np.ndarray) -> np.ndarray:
    """As XGBoost returns them: float32, ``(n, F + 1, F + 1)`` for one output."""
    out = out.astype(np.float32)
    return out[:, 0] if out.shape[1] == 1 else out

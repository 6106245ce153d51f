"""One fitted scikit-learn ``tree_`` (``sklearn.tree._tree.Tree``) -> one HIR tree.

How scikit-learn walks these trees (``Tree.apply`` in ``sklearn/tree/_tree.pyx``, and
``predict_stages`` in ``sklearn/ensemble/_gradient_boosting.pyx`` for GradientBoosting):

* Rows are converted to float32 first (``validate_data(dtype=np.float32)``), then compared
  ``x <= threshold`` with the node's float64 threshold, in double.  ``x`` is a float32, so
  ``x <= t`` holds exactly when ``x <= r`` for ``r`` the largest float32 not above ``t``: the
  HIR compares in float32 (``threshold_dtype="float32"``) against thresholds rounded *down*
  to float32, which is exact for every input, infinities included (``t = +inf`` stays
  ``+inf``; a finite ``t`` beyond the float32 range becomes +-FLT_MAX or -inf accordingly).
* A NaN goes where ``missing_go_to_left`` says (scikit-learn >= 1.3).  GradientBoosting's
  ``predict_stages`` ignores that field (and refuses NaN inputs): a NaN compares false and
  goes right, so it is read with ``use_missing=False``.
* Leaves have ``children_left == -1``; their ``feature`` (-2) and ``threshold`` (-2.0) are
  placeholders, which the HIR wants as -1 and anything.
"""

from __future__ import annotations

import copy

import numpy as np

from silvanforge.errors import UnsupportedModelError
from silvanforge.ir.hir import Op, Tree


def round_down_to_float32(threshold: np.ndarray) -> np.ndarray:
    """The largest float32 not above each float64 threshold, as float64 (NaN stays NaN)."""
    t = np.asarray(threshold, dtype=np.float64)
    with np.errstate(over="ignore"):
        r = t.astype(np.float32)  # round to nearest: one step down where it rounded up
    up = r.astype(np.float64) > t
    r[up] = np.nextafter(r[up], np.float32(-np.inf))
    return r.astype(np.float64)


def hir_tree(tree_, leaf_value: np.ndarray, *, use_missing: bool,
             outputs: tuple[int, ...]) -> Tree:
    """The HIR tree of a fitted ``tree_`` whose leaves carry ``leaf_value`` (n_nodes, k)."""
    left = np.asarray(tree_.children_left, dtype=np.int64)
    right = np.asarray(tree_.children_right, dtype=np.int64)
    leaf = left < 0
    feature = np.where(leaf, -1, np.asarray(tree_.feature, dtype=np.int64))
    threshold = np.where(leaf, 0.0, round_down_to_float32(tree_.threshold))
    default_left = np.zeros(len(left), dtype=bool)
    missing_left = getattr(tree_, "missing_go_to_left", None)  # absent before 1.3: no NaN support
    if use_missing and missing_left is not None:
        default_left = np.asarray(missing_left, dtype=bool) & ~leaf
    # The (weighted) training rows that reached each node: the order of one-row walks.
    cover = getattr(tree_, "weighted_n_node_samples", None)
    return Tree.from_nodes(left, right, feature, threshold, leaf_value, op=Op.LE,
                           default_left=default_left, outputs=outputs, cover=cover)


class _NodeRows:
    """Stands in for an estimator's ``tree_``: ``predict`` answers every node's value row, as
    the real ``Tree.predict`` answers the row of the leaf each sample reaches."""

    def __init__(self, tree_):
        value = np.asarray(tree_.value, dtype=np.float64)  # (n_nodes, n_outputs, max_n_classes)
        self.rows = np.ascontiguousarray(value.reshape(value.shape[0], value.shape[2]))

    def predict(self, X, *args, **kwargs):
        return self.rows.copy()


def leaf_outputs(est, method: str) -> np.ndarray:
    """What ``est.<method>`` (``predict_proba`` or ``predict``) returns for a row reaching each
    node, shape (n_nodes, k).

    The estimator's own method does the work on a shallow copy whose ``tree_`` answers the node
    value rows: whatever this scikit-learn version does to the leaf values (before 1.4,
    ``predict_proba`` divided class counts by their row sums; since, ``tree_.value`` holds the
    fractions and is returned as it is) happens with its own code and rounding.
    """
    stub = copy.copy(est)
    stub.tree_ = _NodeRows(est.tree_)
    n = stub.tree_.rows.shape[0]
    # Only the shape is read (the feature-count check): a broadcast zero costs no memory.
    X = np.broadcast_to(np.float32(0), (n, int(est.n_features_in_)))
    try:
        out = getattr(type(est), method)(stub, X, check_input=False)
    except Exception as exc:  # a scikit-learn whose predict reads more of tree_ than predict()
        raise UnsupportedModelError(
            f"cannot read the leaf values of this scikit-learn version's {type(est).__name__} "
            f"through its {method} ({type(exc).__name__}: {exc})") from exc
    out = np.asarray(out, dtype=np.float64)
    return out.reshape(n, -1)

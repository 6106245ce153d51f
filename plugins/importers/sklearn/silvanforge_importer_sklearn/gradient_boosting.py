"""GradientBoostingClassifier / GradientBoostingRegressor (``sklearn/ensemble/_gb.py``).

``_raw_predict`` starts from the init estimator's raw prediction (``_raw_predict_init``) and
``predict_stages`` adds, stage by stage and within a stage class by class, ``learning_rate *
value[leaf]`` of tree ``estimators_[stage, k]`` to column ``k``, all in float64:

* each leaf holds the product ``learning_rate * value`` (the same float64 multiplication);
  the trees follow in stage-major order, tree ``(stage, k)`` adding to output ``k``; the sum
  starts from the baseline, ``Aggregation.SUM`` in float64;
* the baseline is 0 for ``init="zero"``; for a Dummy estimator (the default: the class prior,
  the mean, the median or a quantile) it is constant, and is taken from the estimator itself
  (``_raw_predict_init``, which applies the loss's link with its clipping).  Any other init
  estimator predicts per row, which the HIR cannot express: refused;
* ``predict_stages`` reads rows as float32 and ignores ``missing_go_to_left`` (NaN inputs are
  refused by ``validate_data``; a NaN would compare false and go right);
* classifiers' ``predict_proba`` is the loss's (:mod:`.links`); ``decision_function`` is the
  margin, shape (n,) for binary models, so those keep ``output_shape="auto"``; regressors'
  ``predict`` is the raw prediction whatever the loss.
"""

from __future__ import annotations

import sys

import numpy as np

from silvanforge.errors import UnsupportedModelError
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, Transform

from . import links, metadata
from .tree_arrays import hir_tree


def read(est, classifier: bool) -> Forest:
    stages = est.estimators_  # object array (n_stages, K) of DecisionTreeRegressor
    n_stages, k = stages.shape
    scale = float(est.learning_rate)
    trees = []
    for stage in range(n_stages):
        for out in range(k):
            tree_ = stages[stage, out].tree_
            value = np.asarray(tree_.value, dtype=np.float64)[:, 0, 0]
            trees.append(hir_tree(tree_, scale * value, use_missing=False, outputs=(out,)))
    # Regressors' predict is the raw prediction itself, whatever the loss.
    transform = (links.transform_for(est, fortran_margins=False) if classifier
                 else Transform("identity"))
    return Forest(
        trees=trees,
        num_features=int(est.n_features_in_),
        num_outputs=k,
        base_score=_baseline(est, k),
        aggregation=Aggregation.SUM,
        transform=transform,
        threshold_dtype="float32",
        accumulate_dtype="float64",
        category_rule=CategoryRule.EXACT,
        output_shape="auto",
        **metadata.of(est, classifier, f"loss={est.loss!r}"),
    )


def _baseline(est, k: int) -> np.ndarray:
    init = est.init_
    if isinstance(init, str) and init == "zero":
        return np.zeros(k)
    dummy = sys.modules.get("sklearn.dummy")
    dummies = () if dummy is None else (dummy.DummyClassifier, dummy.DummyRegressor)
    if not isinstance(init, dummies):
        raise UnsupportedModelError(
            f"the {type(est).__name__}'s init estimator is a {type(init).__name__}, whose "
            "predictions vary by row; SilvanForge reads GradientBoosting models whose init is "
            "'zero' or a Dummy estimator (the default), a constant baseline")
    if getattr(init, "strategy", None) == "stratified":
        raise UnsupportedModelError(
            f"the {type(est).__name__}'s init estimator is DummyClassifier(strategy='stratified'), "
            "which draws a random prediction per row; use init=None (the class prior) or 'zero'")
    # The estimator's own initial raw prediction on two different rows: it must be one
    # constant (the Dummy ignores its input), which becomes the base score.
    probe = np.zeros((2, int(est.n_features_in_)), dtype=np.float32)
    probe[1] = 1
    raw = np.asarray(est._raw_predict_init(probe), dtype=np.float64).reshape(2, k)
    if not np.array_equal(raw[0], raw[1], equal_nan=True):
        raise UnsupportedModelError(
            f"the {type(est).__name__}'s init estimator {type(init).__name__} predicts "
            "differently for different rows: no constant baseline")
    return raw[0].copy()

"""Single decision trees, random forests and extra trees.

* A tree's prediction is its ``predict`` (regressors) or ``predict_proba`` (classifiers) at
  the leaf a row reaches: those are the leaf values (:func:`.tree_arrays.leaf_outputs`), one
  column per class.
* ``ForestClassifier.predict_proba`` / ``ForestRegressor.predict`` add the trees' predictions
  into float64 zeros in the order of ``estimators_`` and divide by the number of trees:
  ``Aggregation.AVERAGE`` in float64 with that divisor.  (With ``n_jobs > 1`` scikit-learn adds
  the trees in whatever order its threads finish, so its own result may vary in the last bit.)
* A single tree adds its leaf to 0: ``Aggregation.SUM`` from a zero base score.
* Classifiers answer probabilities with one column per class, binary included, so the forest
  keeps ``output_shape="matrix"``.
"""

from __future__ import annotations

import numpy as np

from silvanforge.ir.hir import Aggregation, CategoryRule, Forest

from . import metadata
from .tree_arrays import hir_tree, leaf_outputs


def _tree(est, classifier: bool):
    values = leaf_outputs(est, "predict_proba" if classifier else "predict")
    return hir_tree(est.tree_, values, use_missing=True, outputs=tuple(range(values.shape[1])))


def _forest(est, trees, classifier: bool, aggregation: Aggregation) -> Forest:
    k = len(trees[0].outputs)
    return Forest(
        trees=trees,
        num_features=int(est.n_features_in_),
        num_outputs=k,
        base_score=np.zeros(k),
        aggregation=aggregation,
        average_divisor=float(len(trees)),
        threshold_dtype="float32",
        accumulate_dtype="float64",
        category_rule=CategoryRule.EXACT,
        output_shape="matrix" if classifier else "auto",
        **metadata.of(est, classifier, f"criterion={est.criterion!r}"),
    )


def read_tree(est, classifier: bool) -> Forest:
    """DecisionTreeClassifier / DecisionTreeRegressor (and the single ExtraTree*)."""
    return _forest(est, [_tree(est, classifier)], classifier, Aggregation.SUM)


def read_forest(est, classifier: bool) -> Forest:
    """RandomForest* and ExtraTrees*: the mean of the trees' predictions."""
    trees = [_tree(tree, classifier) for tree in est.estimators_]
    return _forest(est, trees, classifier, Aggregation.AVERAGE)

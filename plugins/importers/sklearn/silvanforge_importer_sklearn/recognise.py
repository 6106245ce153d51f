"""Which objects are scikit-learn estimators this plugin reads, and which reader reads each.

scikit-learn is never imported here: an estimator can exist only once its module has been
imported, so its classes are looked up in ``sys.modules`` (``sklearn.tree``,
``sklearn.ensemble``), and a user without scikit-learn pays nothing.  Subclasses are read as
their scikit-learn base class only while they keep the methods whose results the forest
reproduces; one that overrides them could compute anything, and is refused.
"""

from __future__ import annotations

import sys

from silvanforge.errors import UnsupportedModelError
from silvanforge.ir.hir import Forest

from . import forests, gradient_boosting, hist_gradient_boosting

_PROBA = ("predict_proba",)
_PREDICT = ("predict",)
# (public module, class, reader, is a classifier, methods the forest reproduces).  A subclass
# is read by its base's entry (the single ExtraTreeClassifier is a DecisionTreeClassifier with
# the same predict_proba, and reads as one).
_SUPPORTED = (
    ("sklearn.tree", "DecisionTreeClassifier", forests.read_tree, True, _PROBA),
    ("sklearn.tree", "DecisionTreeRegressor", forests.read_tree, False, _PREDICT),
    ("sklearn.ensemble", "RandomForestClassifier", forests.read_forest, True, _PROBA),
    ("sklearn.ensemble", "RandomForestRegressor", forests.read_forest, False, _PREDICT),
    ("sklearn.ensemble", "ExtraTreesClassifier", forests.read_forest, True, _PROBA),
    ("sklearn.ensemble", "ExtraTreesRegressor", forests.read_forest, False, _PREDICT),
    ("sklearn.ensemble", "GradientBoostingClassifier", gradient_boosting.read, True,
     ("predict_proba", "decision_function", "_raw_predict", "_raw_predict_init")),
    ("sklearn.ensemble", "GradientBoostingRegressor", gradient_boosting.read, False,
     ("predict", "_raw_predict", "_raw_predict_init")),
    ("sklearn.ensemble", "HistGradientBoostingClassifier", hist_gradient_boosting.read, True,
     ("predict_proba", "decision_function", "_raw_predict", "_predict_iterations")),
    ("sklearn.ensemble", "HistGradientBoostingRegressor", hist_gradient_boosting.read, False,
     ("predict", "_raw_predict", "_predict_iterations")),
)

def import_estimator(obj) -> Forest | None:
    """The forest of a fitted estimator of ours, or None when ``obj`` is not one."""
    if "sklearn" not in sys.modules:
        return None
    for module, name, read, classifier, methods in _SUPPORTED:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is None or not isinstance(obj, cls):
            continue
        what = type(obj).__name__
        for method in methods:
            if getattr(type(obj), method, None) is not getattr(cls, method, None):
                raise UnsupportedModelError(
                    f"the {what} overrides {method} of scikit-learn's {name}, so its predictions "
                    "need not be the forest's; compile a plain scikit-learn estimator")
        _check_fitted(obj)
        n_outputs = int(getattr(obj, "n_outputs_", 1))
        if n_outputs > 1:
            raise UnsupportedModelError(
                f"the {what} is a multi-output model ({n_outputs} targets, n_outputs_ > 1); "
                "SilvanForge compiles scikit-learn models of one target: fit one per target")
        return read(obj, classifier)
    return None


def _check_fitted(est) -> None:
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(est)
    except NotFittedError:
        raise UnsupportedModelError(
            f"the {type(est).__name__} is not fitted: call fit before compiling it") from None

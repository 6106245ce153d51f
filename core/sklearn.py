"""A compiled model shaped like a scikit-learn estimator (needs scikit-learn).

    import silvanforge.sklearn
    fast = silvanforge.sklearn.compile(fitted_classifier)    # XGBoost, LightGBM or scikit-learn
    fast.predict(X_frame)          # class labels, exactly the estimator's
    fast.predict_proba(X_frame)    # (n, n_classes)

    pipe = silvanforge.sklearn.compile(fitted_pipeline)       # the last step compiled
    pipe = Pipeline([("scale", StandardScaler()),
                     ("model", silvanforge.sklearn.CompiledEstimator(XGBClassifier()))]).fit(X, y)

What is supported: ``predict`` (class labels for classifiers, values for regressors),
``predict_proba`` for classifiers, ``apply`` (leaf indices), ``classes_``, ``n_features_in_``, ``feature_names_in_``,
``fit`` (fits a clone of the wrapped estimator, then compiles it), ``score`` (accuracy for
classifiers, R^2 for regressors, as scikit-learn's mixins), ``get_params`` / ``set_params`` /
``clone``, pickling, and use as the last step of a ``Pipeline`` or in ``cross_val_score`` /
``GridSearchCV``.  Not supported: ``decision_function``, ``score_samples``,
``predict_log_proba``, multi-output estimators.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, clone, is_classifier
from sklearn.pipeline import Pipeline
from sklearn.utils.metaestimators import available_if

from silvanforge import api
from silvanforge.errors import InputError, UnsupportedModelError


def compile(estimator, **options):
    """A :class:`CompiledEstimator` of a fitted ``estimator`` (XGBoost, LightGBM or scikit-learn
    forest), or of a fitted ``Pipeline`` with its last step compiled; ``options`` are
    :func:`silvanforge.compile`'s (``target``, ``rep``, ``batch_size``, ``threads``).

        >>> fast = silvanforge.sklearn.compile(xgb_classifier)      # doctest: +SKIP
        >>> fast.predict(X)                                        # doctest: +SKIP
    """
    if isinstance(estimator, Pipeline):
        name, last = estimator.steps[-1]
        return Pipeline(estimator.steps[:-1] + [(name, compile(last, **options))],
                        memory=estimator.memory, verbose=estimator.verbose)
    wrapper = CompiledEstimator(estimator, **options)
    wrapper._compile(estimator)
    return wrapper


def _refuse_other_outputs(fitted, forest) -> None:
    """Refuse a classifier whose model gives no class probabilities: several sigmoid outputs (a
    multi-label XGBoost classifier, fitted on a 2-D target: labels, not one class) or raw
    scores (a custom objective); read as probabilities, their labels would be wrong."""
    name = type(fitted).__name__
    if forest.num_outputs > 1 and forest.transform.name == "sigmoid":
        raise UnsupportedModelError(
            f"the {name} gives {forest.num_outputs} independent outputs (a multi-label classifier, fitted on a "
            "2-D target): silvanforge.sklearn wraps classifiers of one label; sf.compile(model).predict(X) gives "
            "each label's probability")
    if forest.transform.name == "identity" and forest.objective == "custom":  # (LightGBM's callable objective)
        raise UnsupportedModelError(
            f"the {name}'s objective (a function of yours) gives raw scores, not class probabilities: "
            "silvanforge.sklearn cannot give its labels or probabilities; sf.compile(model).predict(X) gives the "
            "scores")


class CompiledEstimator(BaseEstimator):
    """``estimator`` compiled by SilvanForge; predicts exactly as the estimator does.

    ``fit(X, y)`` fits a clone of ``estimator`` and compiles it; :func:`compile` wraps an
    estimator that is already fitted.  ``target``, ``rep``, ``batch_size`` and ``threads`` are
    :func:`silvanforge.compile`'s options.
    """

    def __init__(self, estimator=None, target: str | None = None, rep: str | None = None,
                 batch_size: int | None = None, threads: int | None = None):
        self.estimator = estimator
        self.target = target
        self.rep = rep
        self.batch_size = batch_size
        self.threads = threads

    # --------------------------------------------------------------- fitting
    def fit(self, X, y, **fit_params):
        """Fit a clone of ``estimator`` on ``X, y`` and compile it."""
        if self.estimator is None:
            raise InputError("CompiledEstimator needs an estimator to fit")
        self._compile(clone(self.estimator).fit(X, y, **fit_params))
        return self

    def _compile(self, fitted) -> None:
        self.estimator_ = fitted
        self.compiled_ = api.compile(fitted, target=self.target, rep=self.rep,
                                     batch_size=self.batch_size, threads=self.threads)
        forest = self.compiled_.forest
        if is_classifier(fitted):
            _refuse_other_outputs(fitted, forest)
            classes = getattr(fitted, "classes_", None)
            self.classes_ = np.asarray(classes if classes is not None else
                                       forest.class_labels or range(max(forest.num_outputs, 2)))
        # (CatBoost's estimators say 0: the features the model reads then, as users pass them)
        self.n_features_in_ = int(getattr(fitted, "n_features_in_", 0) or forest.input_features)
        names = getattr(fitted, "feature_names_in_", None)
        if names is None and forest.feature_names is not None:
            names = np.asarray(forest.feature_names, dtype=object)
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "compiled_")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        if self.estimator is not None:
            inner = self.estimator.__sklearn_tags__() if hasattr(self.estimator, "__sklearn_tags__") else None
            if inner is not None:
                tags.estimator_type = inner.estimator_type
        return tags

    @property
    def _estimator_type(self):  # scikit-learn before 1.6 asks this instead of the tags
        return getattr(self.estimator, "_estimator_type", None)

    # --------------------------------------------------------------- predicting
    def _fitted(self):
        if not hasattr(self, "compiled_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("this CompiledEstimator is not fitted: call fit, or use "
                                 "silvanforge.sklearn.compile on a fitted estimator")
        return self.compiled_

    def predict(self, X):
        """Class labels for classifiers (the estimator's ``predict``), values for regressors."""
        compiled = self._fitted()
        if not hasattr(self, "classes_"):
            return compiled.predict(X)
        return self.classes_.take(np.argmax(self.predict_proba(X), axis=1))

    def apply(self, X):
        """The leaf each row reaches in each tree, as the estimator's ``apply`` numbers them
        (XGBoost's and LightGBM's estimators: their ``pred_leaf``): ``predict(X, pred_leaf=True)``
        of the compiled model."""
        return self._fitted().predict(X, pred_leaf=True)

    def score(self, X, y, sample_weight=None) -> float:
        """Accuracy (classifiers) or R^2 (regressors) of ``predict(X)`` against ``y``."""
        from sklearn.metrics import accuracy_score, r2_score

        metric = accuracy_score if hasattr(self, "classes_") else r2_score
        return float(metric(y, self.predict(X), sample_weight=sample_weight))

    @available_if(lambda self: self.estimator is not None and is_classifier(self.estimator))
    def predict_proba(self, X):
        """Class probabilities (n, n_classes), as the estimator's ``predict_proba``."""
        compiled = self._fitted()
        out = compiled.predict(X)
        if out.ndim == 1:  # binary boosters give P(class 1); predict_proba gives both columns
            one = out.dtype.type(1)
            out = np.column_stack([one - out, out])
        if out.shape[1] != len(self.classes_):
            raise InputError(f"the compiled model gives {out.shape[1]} values per row for "
                             f"{len(self.classes_)} classes: its objective does not give probabilities")
        return out

"""SilvanForge importer for fitted scikit-learn tree models, read from the estimator in memory.

Reads ``DecisionTreeClassifier`` / ``DecisionTreeRegressor`` (and the single ``ExtraTree*``),
``RandomForest*``, ``ExtraTrees*``, ``GradientBoosting*`` and ``HistGradientBoosting*``, each
into a HIR forest whose predictions equal the estimator's ``predict_proba`` (classifiers) or
``predict`` (regressors) bit for bit on numpy input; the modules say how each is mapped:

- :mod:`.recognise`   which objects are ours, found without importing scikit-learn
- :mod:`.tree_arrays` one fitted ``tree_`` -> one HIR tree (float32 thresholds, missing values)
- :mod:`.forests`     single trees, random forests and extra trees (averaged probabilities)
- :mod:`.gradient_boosting` / :mod:`.hist_gradient_boosting`  the two boosting families
- :mod:`.links`       each loss's inverse link -> the output transform

Formats: scikit-learn has no model file format of its own (a pickle is code to run, not a
model to read), so ``silvanforge_formats`` names none: ``load_model(path, fmt=...)`` and the
lists of known formats are unaffected, and estimators arrive only through
``silvanforge_import_object`` (``silvanforge.load_model(est)`` / ``silvanforge.compile(est)``).
``forge plugins`` shows :data:`STATUS` for this plugin instead of a list of formats.
"""

from __future__ import annotations

from silvanforge import hookimpl

from . import recognise

# What `forge plugins` shows in the status column (the plugin provides no file format).
STATUS = "loaded: reads fitted scikit-learn estimators in memory (no file format)"


@hookimpl
def silvanforge_formats():
    return []


@hookimpl
def silvanforge_import_object(obj):
    return recognise.import_estimator(obj)

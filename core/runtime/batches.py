"""Batches of a cluster engine's table scored with a compiled model (:mod:`silvanforge.spark`,
:mod:`silvanforge.ray`, :mod:`silvanforge.dask`): which columns hold the model's features,
checked where the job is defined, and the predictions as the column each kind of batch takes."""

from __future__ import annotations

import numpy as np

from silvanforge.errors import InputError
from silvanforge.inputs.columns import listed
from silvanforge.inputs.rows import frame_columns_match

# What an engine passes on to ``predict`` with each batch (the outputs besides predictions
# included: each row's leaves, per-tree values or SHAP contributions, shaped as ``predict``
# shapes them); ``threads`` is each engine's own (its workers' cores).
PREDICT_OPTIONS = ("output_margin", "missing", "pred_leaf", "per_tree", "pred_contribs")


def check_options(options: dict, takes: tuple = PREDICT_OPTIONS, what: str = "predict") -> dict:
    """``options`` as given, where each is one ``what`` takes (``takes``); else one InputError
    naming the unknown ones and listing what it takes.  Checked where the job is defined."""
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise InputError(f"{what} takes no option {', '.join(map(repr, unknown))} (it takes {', '.join(takes)})")
    return dict(options)


def output_shape(model, options: dict) -> tuple:
    """The shape of one row's result under ``options`` (``()``: one number; ``(k,)``: k values,
    such as classes or trees; ``(classes, features + 1)``: XGBoost's multiclass contributions),
    from one row scored here, where the job is defined: transforms may change it (a binary
    scikit-learn classifier's one margin gives two probabilities), and a bad option fails here,
    not in a task.  An output of another kind than predictions is built here too, once."""
    probe = model.predict(np.zeros((1, model.num_features), model.kernel.input_dtype),
                          **{k: v for k, v in options.items() if k != "threads"}, threads=1)
    return tuple(probe.shape[1:])


def check_features(features, forest, columns=None, what: str = "the DataFrame") -> list:
    """The names of the columns that hold ``forest``'s features: ``features`` (in any order
    where the model has names; in the model's order where it has none) or, where None, the
    model's own names; each checked now, where the job is defined: a name the model does not
    know, a feature no column holds, or (given ``columns``) a column ``what`` lacks is one
    InputError naming it."""
    if features is None:
        if forest.feature_names is None:
            raise InputError(f"the model has no feature names (it was trained on an array): pass features=[...], "
                             f"the {forest.input_features} columns holding its features in its order")
        features = list(forest.feature_names)
    elif isinstance(features, str):
        raise InputError(f"features is a list of column names, got the string {features!r}")
    else:
        features = list(features)
    if not all(isinstance(name, str) for name in features):
        raise InputError(f"features are column names (strings), got {features!r}"[:200])
    if columns is not None:
        have = set(columns)
        missing = [name for name in features if name not in have]
        if missing:
            raise InputError(f"{what} has no column {listed(missing)} (its columns: {listed(list(columns))})")
    frame_columns_match(features, forest)  # unknown, missing or repeated features: named
    return features


def arrow_values(values: np.ndarray):
    """A batch's results (``(n,)``, ``(n, k)`` or ``(n, a, b)``) as an Arrow column: doubles, a
    list of k doubles a row (Spark's ``array<double>``), or a list of a lists of b doubles
    (``array<array<double>>``); their offsets made whole, not per row."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=np.float64)
    column = pa.array(values.reshape(-1))
    for width, count in zip(reversed(values.shape[1:]), reversed(np.cumprod(values.shape[:-1]))):
        offsets = pa.array(np.arange(0, (int(count) + 1) * width, width, dtype=np.int32))
        column = pa.ListArray.from_arrays(offsets, column)
    return column


def spark_type(shape: tuple) -> str:
    """The Spark SQL type of a row's result of ``shape`` (:func:`output_shape`)."""
    return "array<" * len(shape) + "double" + ">" * len(shape)


__all__ = ["PREDICT_OPTIONS", "check_options", "check_features", "output_shape", "arrow_values", "spark_type"]

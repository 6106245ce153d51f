"""Batches of a cluster engine's table scored with a compiled model (:mod:`silvanforge.spark`,
:mod:`silvanforge.ray`, :mod:`silvanforge.dask`): which columns hold the model's features,
checked where the job is defined, and the predictions as the column each kind of batch takes."""

from __future__ import annotations

import numpy as np

from silvanforge.errors import InputError
from silvanforge.inputs.columns import listed
from silvanforge.inputs.rows import frame_columns_match


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


def arrow_values(values: np.ndarray, outputs: int | None):
    """Predictions (``(n,)``, or ``(n, outputs)``) as an Arrow column: doubles, or a list of
    ``outputs`` doubles a row (Spark's ``array<double>``), its offsets made, not per row."""
    import pyarrow as pa

    if outputs is None:
        return pa.array(values)
    n = values.shape[0]
    offsets = pa.array(np.arange(0, (n + 1) * outputs, outputs, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(np.ascontiguousarray(values).reshape(-1)))

__all__ = ["check_features", "arrow_values"]

"""Scoring Ray Datasets with a compiled model (needs ``pip install "silvanforge[ray]"``).

    import silvanforge as sf
    from silvanforge.ray import Predictor
    scored = ds.map_batches(Predictor, fn_constructor_args=(sf.compile(model),),
                            batch_format="pyarrow",   # or "pandas", "numpy"
                            compute=ray.data.ActorPoolStrategy(size=2))

``Predictor`` is a callable class, as Ray Data's stateful transforms are: Ray makes one per
actor, which loads the model once and scores every batch the actor gets, adding the column
``output_col`` (a number a row for one output; a vector a row for several, or for a row's
leaves, per-tree values or contributions: ``pred_leaf=True``, ``per_tree=True``,
``pred_contribs=True``; a matrix a row for XGBoost's multiclass contributions).  The model argument
travels as Ray pickles constructor arguments (once, through its object store): a compiled model
as its artifact (compiled once, on the driver; an actor on another CPU rebuilds its code from
the model inside, with an ``ArtifactWarning`` in that actor's log, and predicts the same), a
path as the path (each actor compiles or loads it), a model object as the object (its class must
then import on the workers, which one defined in a module of yours they cannot import does not:
compile it first).

Threads: the CPUs Ray gave the actor (``num_cpus=``, one unless asked), or ``threads`` where
given, never more: more would take cores from the actors beside it.
"""

from __future__ import annotations

import numpy as np

from silvanforge.artifact.shipped import compiled_model
from silvanforge.errors import InputError
from silvanforge.runtime.batches import PREDICT_OPTIONS, arrow_values, check_features, check_options
from silvanforge.runtime.threads import check_threads, default_threads


class Predictor:
    """``map_batches``' callable class: ``Predictor(model, features=None,
    output_col="prediction", threads=None, **predict_options)``, made by Ray in each actor.

    ``model``: a compiled model (best: compiled once, on the driver), a model file's or saved
    artifact's path, or a model object.  ``features``: the columns holding the model's features
    (default: its feature names; in its order where it has none).  A batch is a pandas
    DataFrame, a pyarrow Table or a dict of NumPy arrays (``batch_format=``), returned as the
    same kind with ``output_col`` added; a column the batch lacks, or one the model does not
    know, is an ``InputError`` naming it.  ``predict_options``: ``output_margin``, ``missing``,
    ``pred_leaf``, ``per_tree`` and ``pred_contribs`` as :meth:`CompiledForest.predict` takes
    them."""

    def __init__(self, model, features=None, output_col: str = "prediction", threads: int | None = None,
                 **predict_options):
        predict_options = check_options(predict_options, ("features", "output_col", "threads", *PREDICT_OPTIONS),
                                        "Predictor")
        if not isinstance(output_col, str) or not output_col:
            raise InputError(f"output_col is a column name, got {output_col!r}")
        self.model = compiled_model(model)
        self.features = check_features(features, self.model.forest)
        # (the same columns in the model's order, for rows built as one array: read by position)
        self._in_order = list(self.model.forest.feature_names or self.features)
        self.output_col = output_col
        self.threads = actor_threads(None if threads is None else check_threads(threads))
        self.options = predict_options

    def __call__(self, batch):
        kind = type(batch).__module__.split(".")[0]
        if kind == "pandas":
            check_features(self.features, self.model.forest, list(batch.columns), "the batch")
            values = self._predict(batch[self.features])
            batch[self.output_col] = values if values.ndim == 1 else list(values)
            return batch
        if kind == "pyarrow":
            check_features(self.features, self.model.forest, batch.column_names, "the batch")
            values = self._predict(batch.select(self.features))
            column = arrow_values(values)
            if self.output_col in batch.column_names:
                return batch.set_column(batch.column_names.index(self.output_col), self.output_col, column)
            return batch.append_column(self.output_col, column)
        if isinstance(batch, dict):
            check_features(self.features, self.model.forest, list(batch), "the batch")
            batch = dict(batch)
            batch[self.output_col] = self._predict(_numpy_rows(batch, self._in_order))
            return batch
        raise InputError(f"Predictor scores pandas, pyarrow or numpy batches (batch_format=), got "
                         f"{type(batch).__name__}")

    def _predict(self, rows) -> np.ndarray:
        return self.model.predict(rows, threads=self.threads, **self.options)


def _numpy_rows(batch: dict, features: list):
    """A numpy batch's columns ``features`` (in the model's order) as predict reads them: one
    array where every column is numbers (no frame built), else a pandas frame (strings mapped
    through the categories)."""
    columns = [np.asarray(batch[name]) for name in features]
    if all(c.ndim == 1 and c.dtype.kind in "biuf" for c in columns):
        return np.column_stack(columns) if columns else np.empty((0, 0))
    import pandas as pd

    return pd.DataFrame(dict(zip(features, columns)), copy=False)


def actor_threads(asked: int | None) -> int:
    """Threads for this actor: the CPUs Ray assigned it (outside a Ray worker, those this
    process may run on), or fewer where asked."""
    cores = default_threads()
    try:
        import ray

        if ray.is_initialized():
            context = ray.get_runtime_context()
            if context.worker.mode == ray.WORKER_MODE:
                cores = min(cores, max(1, int(context.get_assigned_resources().get("CPU", 1))))
    except Exception:  # noqa: BLE001 - not in a Ray worker: the process's CPUs
        pass
    return cores if asked is None else min(asked, cores)


__all__ = ["Predictor", "actor_threads"]

"""Scoring Spark DataFrames with a compiled model (needs ``pip install "silvanforge[spark]"``).

    import silvanforge.spark
    scored = silvanforge.spark.transform(df, "model.json")    # df and a "prediction" column
    score = silvanforge.spark.predict_udf(model)              # a column expression's maker
    df.select("id", score().alias("p"))                       # the model's features, by name

``model`` is a model file's path, a saved artifact's path, a model object or a
:class:`~silvanforge.runtime.compiled.CompiledForest`.  The driver compiles (or loads) it once
and broadcasts its artifact, the machine code plus the model as plain arrays, so no class of the
driver's (one defined in ``__main__``, say) is unpickled on a worker.  Each Python worker loads
it at its first task and keeps it for the later ones, by the model's fingerprint
(:mod:`silvanforge.artifact.shipped`); a worker whose CPU is not the driver's rebuilds the code
from the model inside the artifact and says so once in its log: the same predictions, a slower
first task.

Batches reach the model as Arrow arrays (the iterator form of an Arrow UDF; on PySpark before
4.1, of a pandas UDF), only the feature columns travel to Python, and the output column comes
back as ``double`` (one output), ``array<double>`` (one value a class; with ``pred_leaf=True``
or ``per_tree=True`` one a tree; with ``pred_contribs=True`` one a feature and the bias) or
``array<array<double>>`` (XGBoost's multiclass contributions: a class, then a feature).  A task scores on
``spark.task.cpus`` threads (default 1): Spark already runs a task per core, and more threads
than the task's cores would take cores from its neighbours.
"""

from __future__ import annotations

import typing

import numpy as np

from silvanforge.artifact.shipped import ShippedModel, compiled_model
from silvanforge.errors import InputError
from silvanforge.runtime.batches import PREDICT_OPTIONS as ENGINE_OPTIONS
from silvanforge.runtime.batches import arrow_values, check_features, check_options, output_shape, spark_type
from silvanforge.runtime.threads import check_threads, default_threads

# What predict takes besides the rows (threads: at most the task's cores).
PREDICT_OPTIONS = (*ENGINE_OPTIONS, "threads")


def transform(df, model, features=None, output_col: str = "prediction", **predict_options):
    """``df`` with the column ``output_col`` added (or replaced): the model's predictions for
    each row, ``double`` for one output, ``array<double>`` for several (the classes' values),
    or, with ``pred_leaf``, ``per_tree`` or ``pred_contribs``, that output of each row as
    ``predict`` gives it (``array<double>``; ``array<array<double>>`` for a matrix a row).

    ``features``: the columns holding the model's features, in any order where the model has
    feature names (default: those names), in its order where it has none; categorical columns
    of strings are mapped through the model's categories as ``predict`` maps them.  A column
    ``df`` lacks, or one the model does not know, is an ``InputError`` naming it, raised here
    (before any job runs).  ``predict_options``: ``output_margin``, ``missing``, ``pred_leaf``,
    ``per_tree``, ``pred_contribs`` and ``threads`` as :meth:`CompiledForest.predict` takes
    them (``threads``: at most the task's cores)."""
    if not isinstance(output_col, str) or not output_col:
        raise InputError(f"output_col is a column name, got {output_col!r}")
    udf = _predict_udf(model, features, predict_options, df.sparkSession, df.columns)
    return df.withColumn(output_col, udf())


def predict_udf(model, features=None, **predict_options) -> "PredictUDF":
    """A :class:`PredictUDF`: called with no arguments, the column expression of the model's
    predictions from the columns named ``features`` (default: the model's feature names), for
    ``select`` and ``withColumn``; called with columns (names or ``Column`` objects), from those
    (for a model without feature names and no ``features``, its columns in the model's order).
    The model is compiled (or loaded) and broadcast here, once, however often it is called."""
    return _predict_udf(model, features, predict_options)


def _predict_udf(model, features, predict_options: dict, spark=None, columns=None) -> "PredictUDF":
    """:func:`predict_udf`, with the session to broadcast in and, from :func:`transform`, the
    DataFrame's columns to check the features against."""
    predict_options = check_options(predict_options, PREDICT_OPTIONS)
    if predict_options.get("threads") is not None:
        predict_options["threads"] = check_threads(predict_options["threads"])
    cf = compiled_model(model)
    given = features is not None
    # A model without feature names takes its columns by position when the UDF is called with
    # them: asked of no columns, the UDF says so (transform reads a DataFrame's: named ones).
    unnamed = not given and columns is None and cf.forest.feature_names is None
    features = None if unnamed else check_features(features, cf.forest, columns)
    shape = output_shape(cf, predict_options)
    shipped = ShippedModel.of(cf)
    return PredictUDF(_broadcast(shipped, spark), features, given, cf.forest, shape, predict_options)


class PredictUDF:
    """The predictions as a Spark column: ``udf()`` reads the columns named by the features it
    was made with; ``udf(*cols)`` reads ``cols`` instead, one a feature, matched to the model's
    features by the names given to :func:`predict_udf` (``features=``) where it was given them,
    else by these column names where all are names, else by position in the model's order."""

    def __init__(self, shipped, features: list, given: bool, forest, shape: tuple, options: dict):
        self._shipped, self.features, self._given = shipped, features, given
        self._forest, self.shape, self._options = forest, shape, options
        self.return_type = spark_type(shape)

    def __call__(self, *cols):
        from pyspark.sql import functions as F

        if not cols:
            if self.features is None:
                raise InputError(f"the model has no feature names (it was trained on an array): call the UDF "
                                 f"with the {self._forest.input_features} columns holding its features in its "
                                 "order, or make it with features=[...]")
            cols, names = tuple(self.features), self.features
        elif self._given or not all(isinstance(c, str) for c in cols) or self._forest.feature_names is None:
            names = self.features if self._given else list(self._forest.feature_names or
                                                            [f"f{i}" for i in range(self._forest.input_features)])
            if len(cols) != len(names):
                raise InputError(f"the model reads {len(names)} feature columns ({', '.join(names[:8])}"
                                 f"{', ...' if len(names) > 8 else ''}), got {len(cols)}")
        else:
            names = check_features(list(cols), self._forest)
        cols = [F.col(c) if isinstance(c, str) else c for c in cols]
        return _spark_udf(self._shipped, list(names), self._options, self.return_type)(*cols)


def _broadcast(shipped: ShippedModel, spark):
    """``shipped`` as a broadcast variable of the active Spark context (each executor fetches
    it once), or as it is where there is none to broadcast with (Spark Connect: it travels
    inside the function)."""
    try:
        from pyspark.sql import SparkSession

        session = spark or SparkSession.getActiveSession()
        context = session.sparkContext if session is not None else None
    except Exception:  # noqa: BLE001 - Spark Connect sessions have no SparkContext
        context = None
    return context.broadcast(shipped) if context is not None else shipped


def _spark_udf(shipped, names: list, options: dict, return_type: str):
    """The iterator-form UDF scoring batches of ``names``' columns: Arrow's where PySpark has it
    (4.1 and later), else pandas'.  Its function is made here, with real type hints, as PySpark
    reads the UDF's kind from them."""
    from pyspark.sql import functions as F

    if hasattr(F, "arrow_udf"):
        import pyarrow as pa

        def score(batches):
            return _score_arrow(batches, shipped, names, options)

        one = len(names) == 1
        score.__annotations__ = {"batches": typing.Iterator[pa.Array] if one else typing.Iterator[typing.Tuple[pa.Array, ...]],
                                 "return": typing.Iterator[pa.Array]}
        return F.arrow_udf(score, return_type)
    import pandas as pd

    def score_pandas(batches):
        return _score_pandas(batches, shipped, names, options)

    one = len(names) == 1
    score_pandas.__annotations__ = {"batches": typing.Iterator[pd.Series] if one else typing.Iterator[typing.Tuple[pd.Series, ...]],
                                    "return": typing.Iterator[pd.Series]}
    return F.pandas_udf(score_pandas, return_type)


# ------------------------------------------------------------------ in the Python workers
def _model(shipped):
    shipped = getattr(shipped, "value", shipped)  # a Broadcast's value: read once a worker
    return shipped.load()


def task_threads(asked: int | None) -> int:
    """Threads for this task: ``spark.task.cpus`` (its cores; 1 outside a task), or fewer where
    asked, and never more than this process may run on."""
    cores = 1
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None and hasattr(context, "cpus"):
            cores = int(context.cpus())
    except Exception:  # noqa: BLE001 - an older PySpark, or no task: one thread
        cores = 1
    cores = max(1, min(cores, default_threads()))
    return cores if asked is None else min(asked, cores)


def _predict(model, rows, options: dict, threads: int) -> np.ndarray:
    values = model.predict(rows, threads=threads, **{k: v for k, v in options.items() if k != "threads"})
    return values.astype(np.float64, copy=False)


def _score_arrow(batches, shipped, names: list, options: dict):
    import pyarrow as pa

    model = _model(shipped)
    threads = task_threads(options.get("threads"))
    for arrays in batches:
        arrays = [arrays] if isinstance(arrays, (pa.Array, pa.ChunkedArray)) else list(arrays)
        values = _predict(model, pa.Table.from_arrays(arrays, names=names), options, threads)
        yield arrow_values(values)


def _score_pandas(batches, shipped, names: list, options: dict):
    import pandas as pd

    model = _model(shipped)
    threads = task_threads(options.get("threads"))
    for series in batches:
        series = [series] if isinstance(series, pd.Series) else list(series)
        frame = pd.DataFrame(dict(zip(names, series)))
        values = _predict(model, frame, options, threads)
        if values.ndim > 2:  # (a row's matrix as a list of its rows: Arrow converts no 2-D array)
            yield pd.Series([list(v) for v in values])
        else:
            yield pd.Series(values if values.ndim == 1 else list(values))


__all__ = ["transform", "predict_udf", "PredictUDF", "task_threads", "PREDICT_OPTIONS"]

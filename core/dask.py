"""Scoring Dask collections with a compiled model (needs ``pip install silvanforge[dask]``).

    import silvanforge.dask
    y = silvanforge.dask.predict(model, ddf)          # lazy, like ddf; .compute() to run
    scored = silvanforge.dask.transform(ddf, model)   # ddf and a "prediction" column

The argument names are those of :mod:`silvanforge.spark` and :mod:`silvanforge.ray`: ``model``
is a compiled model, a model file's or saved artifact's path, or a model object (compiled here,
once); ``features`` the columns holding its features; ``output_col`` the column added.  The
model enters the task graph once, as one key holding its artifact
(:class:`~silvanforge.artifact.shipped.ShippedModel`): each worker receives it once, loads it at
its first task and scores every partition it holds with it; a worker on another CPU rebuilds the
code from the model inside and says so once in its log.  Partitions are scored with
``threads=1`` by default: Dask runs one task per worker thread already.
"""

from __future__ import annotations

import numpy as np

from silvanforge.artifact.shipped import ShippedModel, compiled_model
from silvanforge.errors import InputError
from silvanforge.inputs.rows import frame_columns_match
from silvanforge.runtime.batches import PREDICT_OPTIONS, check_features, check_options
from silvanforge.runtime.threads import check_threads, default_threads


def predict(model, data, output_margin: bool = False, threads: int = 1, features=None, **predict_options):
    """``model.predict`` over a ``dask.array`` (2-D, chunked by rows only) or a
    ``dask.dataframe``; returns the same kind of lazy collection: a dask array of the
    predictions (rows chunked as ``data``; a row's matrix of XGBoost's multiclass contributions
    as two more axes), or a dask Series (one output) / DataFrame (one column per output; a
    row's matrix flattened, class by class, as LightGBM lays its contributions out) with
    ``data``'s index and divisions.  ``features``: the dataframe's columns holding the model's
    features (default: every column, matched by name as ``predict`` matches a frame's);
    ``predict_options``: ``missing``, ``pred_leaf``, ``per_tree`` and ``pred_contribs``, as
    ``predict`` takes them."""
    import dask.array as da

    cf, key, options = _prepare(model, output_margin, threads, predict_options)
    dtype, shape = _result(cf, options)
    outputs = int(np.prod(shape)) if shape else None
    if isinstance(data, da.Array):
        if features is not None:
            raise InputError("features names dataframe columns; a dask array's columns are the model's features")
        if data.ndim != 2:
            raise InputError(f"a dask array of rows is 2-D, got {data.ndim}-D")
        if len(data.chunks[1]) != 1:
            data = data.rechunk({1: -1})  # every block must hold whole rows
        # meta given: dask would otherwise call the scorer on empty arrays to learn the result
        if outputs is None:
            return da.map_blocks(_score_block, data, key, options, drop_axis=1, dtype=dtype,
                                 meta=np.empty((0,), dtype))
        if len(shape) == 2:
            return da.map_blocks(_score_block, data, key, options, chunks=(data.chunks[0], (shape[0],), (shape[1],)),
                                 new_axis=2, dtype=dtype, meta=np.empty((0, 0, 0), dtype))
        return da.map_blocks(_score_block, data, key, options, chunks=(data.chunks[0], (outputs,)), dtype=dtype,
                             meta=np.empty((0, 0), dtype))
    if _is_dataframe(data):
        import pandas as pd

        if features is None:
            frame_columns_match(list(data.columns), cf.forest)  # now, not at compute()
        else:
            data = data[check_features(features, cf.forest, list(data.columns))]
        meta = pd.Series([], dtype=dtype) if outputs is None else \
            pd.DataFrame({k: pd.Series([], dtype=dtype) for k in range(outputs)})
        return data.map_partitions(_score_frame, key, options, meta=meta)
    raise InputError(f"silvanforge.dask.predict takes a dask array or dataframe, got {type(data).__name__}")


def transform(data, model, features=None, output_col: str = "prediction", threads: int = 1, **predict_options):
    """``data`` (a ``dask.dataframe``) with the column ``output_col`` added, lazily: the model's
    predictions, a number a row for one output, an array a row for several (as
    :func:`silvanforge.spark.transform`).  ``features``: the columns holding the model's
    features, in any order (default: the model's feature names); a column ``data`` lacks, or
    one the model does not know, is an ``InputError`` naming it, raised here."""
    if not _is_dataframe(data):
        raise InputError(f"silvanforge.dask.transform takes a dask dataframe, got {type(data).__name__}")
    if not isinstance(output_col, str) or not output_col:
        raise InputError(f"output_col is a column name, got {output_col!r}")
    output_margin = predict_options.pop("output_margin", False)
    cf, key, options = _prepare(model, output_margin, threads, predict_options)
    features = check_features(features, cf.forest, list(data.columns))
    dtype, shape = _result(cf, options)
    meta = data._meta.copy()
    meta[output_col] = np.empty(0, object) if shape else np.empty(0, dtype)
    return data.map_partitions(_add_column, key, options, features, output_col, meta=meta)


def _prepare(model, output_margin: bool, threads: int, predict_options: dict):
    """The compiled model here, its shipment as one graph key, and the options every partition
    is scored with (checked now, not at compute())."""
    import dask

    check_options(predict_options, (*PREDICT_OPTIONS, "threads"))
    cf = compiled_model(model)
    threads = min(check_threads(threads), default_threads())
    key = dask.delayed(ShippedModel.of(cf), pure=True, traverse=False)
    return cf, key, {"output_margin": bool(output_margin), "threads": threads, **predict_options}


def _result(cf, options: dict):
    """The result's dtype and a row's shape (:func:`~silvanforge.runtime.batches.output_shape`),
    from one row: transforms may change both (a binary scikit-learn classifier's one margin
    gives two probabilities, ONNX gives float32; leaf ids are integers)."""
    probe = cf.predict(np.zeros((1, cf.num_features), cf.kernel.input_dtype), **{**options, "threads": 1})
    return probe.dtype, tuple(probe.shape[1:])


def _is_dataframe(data) -> bool:
    return type(data).__module__.startswith("dask.dataframe") or hasattr(data, "map_partitions")


def _score_block(block, shipped: ShippedModel, options: dict):
    return shipped.load().predict(block, **options)


def _score_frame(frame, shipped: ShippedModel, options: dict):
    import pandas as pd

    values = shipped.load().predict(frame, **options)
    if values.ndim == 1:
        return pd.Series(values, index=frame.index)
    # (a row's values by the shape's own sizes: -1 is no size for an empty partition's)
    return pd.DataFrame(values.reshape(len(values), int(np.prod(values.shape[1:]))), index=frame.index)


def _add_column(frame, shipped: ShippedModel, options: dict, features: list, output_col: str):
    values = shipped.load().predict(frame[features], **options)
    frame = frame.copy(deep=False)
    frame[output_col] = values if values.ndim == 1 else list(values)
    return frame

"""Scoring Dask collections with a compiled model (needs ``pip install silvanforge[dask]``).

    import silvanforge.dask
    y = silvanforge.dask.predict(compiled, ddf)      # lazy, like ddf; .compute() to run

The compiled model enters the task graph once, as one key: each worker receives it once
(pickled through its artifact, :meth:`CompiledForest.__reduce__`) and scores every partition
it holds with it.  Partitions are scored with ``threads=1`` by default: Dask runs one task per
worker thread already.
"""

from __future__ import annotations

import numpy as np

from silvanforge.errors import InputError
from silvanforge.inputs.rows import frame_columns_match


def predict(compiled, data, output_margin: bool = False, threads: int = 1):
    """``compiled.predict`` over a ``dask.array`` (2-D, chunked by rows only) or a
    ``dask.dataframe``; returns the same kind of lazy collection: a dask array of the
    predictions (rows chunked as ``data``), or a dask Series (one output) / DataFrame (one
    column per output) with ``data``'s index and divisions."""
    import dask
    import dask.array as da

    model = dask.delayed(compiled, pure=True, traverse=False)
    # The result's columns and dtype, from one row: transforms may change both (a binary
    # scikit-learn classifier's one margin gives two probabilities, ONNX gives float32).
    probe = compiled.predict(np.zeros((1, compiled.num_features), compiled.kernel.input_dtype),
                             output_margin=output_margin)
    dtype, outputs = probe.dtype, (None if probe.ndim == 1 else probe.shape[1])
    if isinstance(data, da.Array):
        if data.ndim != 2:
            raise InputError(f"a dask array of rows is 2-D, got {data.ndim}-D")
        if len(data.chunks[1]) != 1:
            data = data.rechunk({1: -1})  # every block must hold whole rows
        # meta given: dask would otherwise call the scorer on empty arrays to learn the result
        kwargs = dict(dtype=dtype, output_margin=output_margin, threads=threads)
        if outputs is None:
            return da.map_blocks(_score_block, data, model, drop_axis=1,
                                 meta=np.empty((0,), dtype), **kwargs)
        return da.map_blocks(_score_block, data, model, chunks=(data.chunks[0], (outputs,)),
                             meta=np.empty((0, 0), dtype), **kwargs)
    if type(data).__module__.startswith("dask.dataframe") or hasattr(data, "map_partitions"):
        import pandas as pd

        frame_columns_match(list(data.columns), compiled.forest)  # now, not at compute()
        meta = pd.Series([], dtype=dtype) if outputs is None else \
            pd.DataFrame({k: pd.Series([], dtype=dtype) for k in range(outputs)})
        return data.map_partitions(_score_frame, model, output_margin, threads, meta=meta)
    raise InputError(f"silvanforge.dask.predict takes a dask array or dataframe, got {type(data).__name__}")


def _score_block(block, model, output_margin: bool, threads: int):
    return model.predict(block, output_margin=output_margin, threads=threads)


def _score_frame(frame, model, output_margin: bool, threads: int):
    import pandas as pd

    values = model.predict(frame, output_margin=output_margin, threads=threads)
    if values.ndim == 1:
        return pd.Series(values, index=frame.index)
    return pd.DataFrame(values, index=frame.index)

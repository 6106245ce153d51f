"""Frames read once per schema: what ``predict`` works out from a data frame's columns (which
column holds which feature, how each converts, each categorical column's table from its own
codes to the model's) is kept on the compiled model in a :class:`SchemaMemory`, so that a call
with a frame of a schema seen before converts its values with a copy and table lookups.

Why: read column by column at each call (``iloc`` a column, ``set_categories`` and a dict a
value), a one-row frame would cost many times what the compiled code takes to answer the same row
from an array (docs/benchmarks.md, "Frames and records").

The key of a schema is what may change while a frame keeps its column names: pandas' blocks
(each block's dtype and which columns it holds), polars' dtypes, arrow's schema.  A categorical
column's categories are not in the key (a frame built per request infers them afresh): each
call checks them against the table built last for that column (the same object, or equal in
order) and builds another table where they differ, so a frame with its categories in another
order is never read with an old table.  Anything a plan does not read fast (nullable and
Arrow-backed dtypes, strings, objects, dates) is read by the general column readers of
:mod:`silvanforge.inputs.columns`, with their errors.  ``None`` from :func:`frame_rows` means "not a
frame this module reads": :mod:`silvanforge.inputs.rows` reads it as before.

Here: which library's reader a frame's type takes, and polars' and arrow's readers; pandas'
plans in :mod:`silvanforge.inputs.pandas_frames`, polars' in :mod:`silvanforge.inputs.polars_frames`,
arrow's in :mod:`silvanforge.inputs.arrow_frames`, and what they all share (the memory, column
order, a categorical column's reading) in :mod:`silvanforge.inputs.schemas`.
"""

from __future__ import annotations

import numpy as np

from silvanforge.errors import InputError
from silvanforge.inputs.arrow_frames import FLOAT32, FLOAT64, ArrowKey, ArrowPlan
from silvanforge.inputs.pandas_frames import pandas_rows
from silvanforge.inputs.polars_frames import FEW_POLARS_ROWS, POLARS_STREAM_ROWS, PolarsPlan
from silvanforge.inputs.schemas import COLUMN_ORDER_ROWS, SCHEMAS, SchemaMemory

# The libraries whose frames are read here (host memory: never device arrays).
FRAME_LIBRARIES = ("pandas", "polars", "pyarrow")


def frame_rows(X, memory: SchemaMemory, dtype: np.dtype, tuples: bool = False):
    """``X`` (a pandas, polars or pyarrow frame) as (n, num_features) rows of ``dtype``, or None
    where it is none of those or its library's internals are not the ones read here.
    ``tuples``: the caller's lean path reads row tuples of Python numbers
    (:meth:`silvanforge.runtime.kernel.Kernel.small_calls`), and a few rows of plain numbers that
    a library hands out as tuples (polars') come as a list of them, in the model's order."""
    read = _READERS.get(type(X))
    if read is None:  # (a type's reader found once: a one-row call is a few microseconds)
        read = _READERS.setdefault(type(X), _reader(type(X)))
    return read(X, memory, dtype, tuples)


def is_frame(X) -> bool:
    """Whether ``X`` is a frame of a library read here (by its type, found once)."""
    return _reader_of(X) is not _not_read


def refuse_lazy_frame(X) -> None:
    """An InputError where ``X`` is a query not yet run (a polars LazyFrame); models whose
    categories are known by hash read frames otherwise, and ask here."""
    if _reader_of(X) is _lazy_frame:
        _lazy_frame(X, None, None, False)


def _reader_of(X):
    """The reader of ``X``'s type (found once a type; :func:`frame_rows` looks it up inline)."""
    read = _READERS.get(type(X))
    if read is None:
        read = _READERS.setdefault(type(X), _reader(type(X)))
    return read


def _polars_rows(X, memory: SchemaMemory, dtype: np.dtype, tuples: bool):
    # (Written for speed, polars' own calls made once each: a one-row call is polars' list of
    # names, 0.8 us, and its row tuple, 0.6, and what the kernel takes; each line of Python
    # between them 30-80 ns more.)
    try:
        df = X._df  # (polars' own frame: private, so guarded)
    except AttributeError:
        return _polars_rows_of(X, memory, dtype)
    names = df.columns()
    last_names, plan = memory.polars_last
    if last_names != names:
        key = tuple(names)
        plan = memory.plan(("polars", key), lambda: PolarsPlan(X, key, memory))
        memory.polars_last = (names, plan)
    height = df.height()
    if height <= FEW_POLARS_ROWS:
        if tuples and plan.tuples and height:
            if plan.as_given:  # (its numbers in the model's order as they are)
                return df.row_tuples()
            rows = plan.few_tuples(df.row_tuples())
            if rows is not None:
                return rows
    elif plan.copied is not None and height < POLARS_STREAM_ROWS and df.dtype_strings() == plan.copied:
        # Plain numbers of these dtypes: polars' one copy is the rows (in the model's order)
        # (a 64-row call's checks were 1.7 us besides it, 5.5 us)
        values = df.to_numpy("c", False, True)
        if values.dtype is dtype:
            return values if plan.identity else values[:, plan.order]
    return plan.rows(X, dtype, memory)


def _polars_rows_of(X, memory: SchemaMemory, dtype: np.dtype):
    """A polars frame's rows through its public names (a polars that keeps its frame otherwise)."""
    key = tuple(X.columns)
    return memory.plan(("polars", key), lambda: PolarsPlan(X, key, memory)).rows(X, dtype, memory)


def _arrow_rows(X, memory: SchemaMemory, dtype: np.dtype, tuples: bool = False):
    plan = memory.arrow_last[1]
    if plan is not None and plan.direct_read is not None and (dtype is FLOAT32 or dtype is FLOAT64):
        # A few rows of the last table's columns, as a service's requests come: compared and read
        # by the C++ reader in one call, without the schema's Python object (0.35 us of a 3.7 us
        # one-row call); columns of another table, the way below.
        n = X.num_rows
        if n < COLUMN_ORDER_ROWS:
            out = np.empty((n, plan.width), dtype)
            found = plan.direct_read(plan.direct, X, out, True)
            if found == 0:
                return out
            if found == 1:  # (the table's to the Python reader: a new dictionary, a refused category)
                return plan.rows(X, dtype, direct=False)
    schema = X.schema
    last, plan = memory.arrow_last  # (the last table's schema, compared without a key made: 0.4 us)
    if last is None or not (last is schema or plan.matches(X) or last.equals(schema)):
        plan = memory.plan(("pyarrow", ArrowKey(schema)), lambda: ArrowPlan(X, memory))
        memory.arrow_last = (schema, plan)
    return plan.rows(X, dtype)


def _arrow_batch_rows(X, memory: SchemaMemory, dtype: np.dtype, tuples: bool):
    """A pyarrow RecordBatch: read as the table of that one batch."""
    import pyarrow as pa

    return _arrow_rows(pa.Table.from_batches([X]), memory, dtype)


def _lazy_frame(X, memory: SchemaMemory, dtype: np.dtype, tuples: bool):
    raise InputError(f"predict got a polars {type(X).__name__}, a query not yet run: pass its result, "
                     "frame.collect()")


def _not_read(X, memory: SchemaMemory, dtype: np.dtype, tuples: bool):
    return None


def _reader(cls):
    """The reader of frames of type ``cls``: by its library (its module) and what it has."""
    module = cls.__module__.split(".")[0]
    if module == "pandas":
        return pandas_rows
    if module == "polars" and hasattr(cls, "get_columns"):
        return _polars_rows
    if module == "polars" and hasattr(cls, "collect"):  # a LazyFrame
        return _lazy_frame
    if module == "pyarrow" and hasattr(cls, "schema") and hasattr(cls, "column"):
        return _arrow_rows if hasattr(cls, "to_batches") else _arrow_batch_rows
    return _not_read


_READERS: dict = {}  # a type -> its reader (:func:`_reader`)


__all__ = ["FRAME_LIBRARIES", "SCHEMAS", "SchemaMemory", "frame_rows", "is_frame"]

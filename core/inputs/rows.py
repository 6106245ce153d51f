"""What ``predict`` accepts: NumPy arrays, and data frames (pandas, polars, pyarrow) matched to
the model by column name, with categorical columns mapped to the model's category codes.

Rules, as XGBoost and LightGBM users expect them:

- A frame whose columns have names, for a model that has feature names, is matched by name and
  reordered as needed; a feature the frame lacks, or a column the model does not know, is an
  :class:`InputError` naming them (XGBoost's "feature_names mismatch").  A frame without names
  (pandas' default integer columns, polars' ``column_0``...) or a model without names is read
  by position.
- A categorical column (pandas ``category``, polars ``Enum``/``Categorical``, arrow dictionary)
  becomes category codes: through the labels the model stores for that feature
  (``Forest.feature_categories``: LightGBM's ``pandas_categorical``, XGBoost's categories),
  where a label the model never saw, or a missing one, is a missing value (NaN), as both
  libraries do; without stored labels, the column's own codes are used (LightGBM without
  ``pandas_categorical``, XGBoost before 3.1).  A plain number column for a feature whose
  labels the model stores is read as labels where those are numbers (pandas integer
  categories, which polars holds as plain integers) and refused where they are strings: read
  as codes it would answer otherwise than the same values as categories.
- Missing values of any column (None, NaN, pandas NA, nulls) are NaN.

The libraries are never imported here: a frame is recognised by its type's module, so users
without pandas or polars pay nothing.
"""

from __future__ import annotations

import numpy as np

from silvanforge.inputs.columns import (Labels, arrow_column, catboost_numbers, column_order, numbers_as_labels,
                                        pandas_column, polars_column)
from silvanforge.errors import InputError
from silvanforge.inputs.frames import FRAME_LIBRARIES, SchemaMemory, frame_rows, is_frame, refuse_lazy_frame
from silvanforge.inputs.pandas_frames import hashed_frame_columns
from silvanforge.inputs.hashed_rows import HashedInputs
from silvanforge.inputs.schemas import numeric_features
from silvanforge.inputs.records import is_records, records_matrix
from silvanforge.ir.hir import Forest
from silvanforge.runtime.threads import check_rows, check_threads, default_threads


def as_rows(X, forest: Forest, dtype: np.dtype, memory: SchemaMemory | None = None,
            threads: int | None = 1) -> np.ndarray:
    """``X`` as a (n, num_features) array of ``dtype`` that a kernel can read: arrays as they
    are (validated, copied only when needed), frames in the model's order through the plan of
    their schema (:mod:`silvanforge.inputs.frames`; ``memory``: the compiled model's, else one for
    this call), records by feature name (:mod:`silvanforge.inputs.records`).  Rows of a model
    with categories known by hash are made here, with ``threads`` threads (None: all CPUs), and with
    ``memory`` in an array the calling thread reuses on its next call: the caller drops them
    before then."""
    hashed = forest.hashed_categories or forest.hashed_combinations
    if type(X) is np.ndarray and not hashed:  # (the common case first: nothing to convert)
        return check_rows(X, forest.num_features, dtype, forest.wider_rows)
    if type(X) is list and not X:  # no records: no rows (as the server and JSON Lines read it)
        return np.empty((0, forest.num_features), dtype)
    framed = not hashed and is_frame(X)
    if not framed and _is_stream(X):
        X = _stream_table(X)  # (read as the table it holds)
        framed = not hashed
    if framed:  # (the next most common)
        rows = frame_rows(X, memory if memory is not None else SchemaMemory(forest), dtype)
        if rows is not None:
            return rows
    if is_records(X):
        X = records_matrix(X, forest, readers=memory.record_readers() if memory is not None else None, dtype=dtype)
        if not hashed and X.shape[1] == forest.num_features:  # (rows made here: nothing to check)
            return X.astype(dtype, copy=False)
    if hashed:
        refuse_lazy_frame(X)  # (read the hashed way, it would be "not numeric")
        if memory is not None:
            return _hashed_rows(X, forest, dtype, memory.hashing(), threads, memory)
        return _hashed_rows(X, forest, dtype, HashedInputs(forest), threads)
    if type(X) is np.ndarray:
        return check_rows(X, forest.num_features, dtype, forest.wider_rows)
    if not framed and type(X).__module__.split(".")[0] in FRAME_LIBRARIES:
        rows = frame_rows(X, memory if memory is not None else SchemaMemory(forest), dtype)
        if rows is not None:
            return rows
    frame = _frame(X)
    if frame is None:
        if _is_sparse(X):
            raise InputError("scipy sparse matrices are not read: convert with .toarray() first, "
                             "deciding what an absent entry means (XGBoost reads it as missing, "
                             "LightGBM as 0)")
        return check_rows(X, forest.num_features, dtype, forest.wider_rows)
    names, column, whole = frame
    order = column_order(names, forest)
    categories = forest.feature_categories or {}
    values = whole()
    if values is not None:  # every column a plain number: one conversion, not one a column
        rows = np.ascontiguousarray(values[:, order], dtype=dtype)
        for feature, labels in categories.items():  # numbers where the model has labels
            index = order[feature]
            name = names[index] if names is not None else index
            rows[:, feature] = numbers_as_labels(values[:, index].astype(object), name, "number",
                                                  Labels(labels, forest.unseen_category_error))
        return rows
    n = _num_rows(X)
    out = np.empty((n, forest.num_features), dtype=dtype)
    numeric = memory.numeric() if memory is not None else numeric_features(forest)
    for feature, index in enumerate(order):
        labels = categories.get(feature)
        out[:, feature] = column(index, None if labels is None else Labels(labels, forest.unseen_category_error),
                                 feature in numeric)
    return out


def _hashed_rows(X, forest: Forest, dtype: np.dtype, hashing: HashedInputs, threads: int | None = 1,
                 memory: SchemaMemory | None = None) -> np.ndarray:
    """Rows of a model with categories known by hash (CatBoost): its categorical columns'
    values (strings, integers, pandas categories; in arrays of any dtype) hashed and replaced
    by their codes, every other column read as numbers, and the computed columns of
    ``Forest.hashed_combinations`` appended (:class:`silvanforge.inputs.hashed_rows.HashedInputs`).
    With ``memory`` (the compiled model's), a pandas frame is read by the plan of its schema
    and the rows are the calling thread's array for its next call too."""
    # rows of the kernel's dtype made here (the numbers rounded once, as check_rows would)
    dtype = np.dtype(dtype if dtype in (np.float32, np.float64) else np.float64)

    def rows(n):
        return hashing.rows(n, forest.num_features, dtype) if memory is not None else \
            np.empty((n, forest.num_features), dtype=dtype)
    columns = None
    if memory is not None and type(X).__module__.split(".")[0] == "pandas" and hasattr(X, "_mgr"):
        out = rows(len(X))
        columns = hashed_frame_columns(X, memory, out)
    if columns is None:
        out, columns = _hashed_columns(X, forest, rows, memory.numeric() if memory is not None else None)
    hashes = {}
    for feature, values in columns:
        try:
            hashes[feature] = codes, table = hashing.hash_codes(values, feature)
        except TypeError as exc:  # a list or dict where a label belongs (records, object arrays)
            raise InputError(f"{_column_name(forest, feature)} holds a value that is no category label ({exc})") \
                from None
        out[:, feature] = hashing.code_table(feature, table)[codes]  # (code -1, missing: the table's last)
    hashing.fill(hashes, out, default_threads() if threads is None else check_threads(threads))
    return out  # (made here, of the kernel's dtype and width: nothing to check)


def _column_name(forest: Forest, feature: int) -> str:
    """Column ``feature`` as messages name it: by position, and by the model's name for it."""
    names = forest.feature_names
    return f"column {feature} ({names[feature]!r})" if names and feature < len(names) else f"column {feature}"


def _is_number(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _hashed_columns(X, forest: Forest, rows, numeric: frozenset | None = None) -> tuple[np.ndarray, list]:
    """Rows ``rows(n)`` of any input with their number columns read, and its categorical
    features' values, ``[(feature, values)]`` (column by column: :func:`_hashed_rows`);
    ``numeric``: the model's :func:`numeric_features`, where the caller keeps them."""
    hashed = forest.hashed_categories or {}
    width = forest.input_features
    if numeric is None:
        numeric = numeric_features(forest)
    table = _arrow_table(X)
    if table is not None:  # pyarrow and polars: their arrow columns as they are, no pandas frame made
        names = list(table.column_names)
        order = column_order(names, forest)
        arrays = [table.column(i) for i in order]
        n = table.num_rows

        def number(feature):
            return arrow_column(arrays[feature], names[order[feature]], None, feature in numeric)

        def raw(feature):
            return _arrow_values(arrays[feature])
    elif _frame(X) is not None:
        frame = X if type(X).__module__.split(".")[0] == "pandas" else _to_pandas(X)
        names = list(frame.columns)
        named = all(isinstance(c, str) for c in names)
        order = column_order(names, forest)
        # (by name where names are distinct: twice as fast as by position)
        columns = [frame[names[i]] for i in order] if named and len(set(names)) == len(names) else \
            [frame.iloc[:, i] for i in order]
        n = len(frame)

        def number(feature):
            try:
                return pandas_column(columns[feature], names[order[feature]], None, feature in numeric)
            except InputError:  # (a number's text: CatBoost's own predict reads it)
                numbers = catboost_numbers(columns[feature])
                if numbers is None:
                    raise
                return numbers

        def raw(feature):
            return columns[feature]
    else:
        arr = np.asarray(X)
        if arr.ndim != 2 or arr.dtype.kind not in "biufOUS":
            check_rows(X, width, np.float64, forest.wider_rows)  # its error message
            raise InputError(f"rows of dtype {arr.dtype} cannot be read")
        if arr.shape[1] != width and not (forest.wider_rows and arr.shape[1] > width):
            raise InputError(f"the model expects {width} features per row, got {arr.shape[1]}")
        n = arr.shape[0]

        def number(feature):
            column = arr[:, feature]
            try:
                return column.astype(np.float64)
            except (TypeError, ValueError, OverflowError):
                if column.dtype == object:  # (None and pandas' NA missing, a number's text a number)
                    numbers = catboost_numbers(column)
                    if numbers is not None:
                        return numbers
                bad = next((v for v in column if not _is_number(v)), "a value")
                shown = repr(bad) if len(repr(bad)) <= 40 else repr(bad)[:36] + "..."
                raise InputError(f"{_column_name(forest, feature)} holds {shown}, not a number (the feature "
                                 "is not categorical)") from None

        def raw(feature):
            return arr[:, feature]
    out = rows(n)
    values = []
    for feature in range(width):
        if feature in hashed:
            values.append((feature, raw(feature)))
        else:
            out[:, feature] = number(feature)
    return out, values


def _is_stream(X) -> bool:
    """Whether ``X`` is an Arrow stream of rows other than the frames read as they are: a pyarrow
    RecordBatchReader, or another library's object handing its rows over so (a DuckDB result,
    nanoarrow's); not a column (a pyarrow array, a polars or pandas Series), which is no rows."""
    kind = type(X)
    if not hasattr(kind, "__arrow_c_stream__") or is_frame(X):
        return False
    return kind.__module__.split(".")[0] not in ("pyarrow", "polars", "pandas") or kind.__name__ == "RecordBatchReader"


def _stream_table(X):
    """The pyarrow Table of an object that hands its rows over as an Arrow C stream (a pyarrow
    RecordBatchReader, a DuckDB result, nanoarrow's...; read once, as a stream is)."""
    try:
        import pyarrow as pa
    except ImportError:
        raise InputError(f"predict got a {type(X).__name__}, an Arrow stream: reading one takes pyarrow "
                         "(pip install pyarrow)") from None
    try:
        return pa.table(X)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise InputError(f"predict got a {type(X).__name__}, an Arrow stream that did not read: {exc}") from None


def _arrow_table(X):
    """A pyarrow Table or RecordBatch as it is, a polars frame as the arrow table it holds (its
    columns handed over, not copied); None for anything else.  Why: made a pandas frame, a row of
    CatBoost's 8 string and 6 number columns took 2.4 ms, 20 times the pandas frame's call."""
    module = type(X).__module__.split(".")[0]
    if module == "pyarrow" and hasattr(X, "column_names") and hasattr(X, "column"):
        return X
    if module == "polars" and hasattr(X, "get_columns") and hasattr(X, "to_arrow"):
        try:
            try:  # (its strings as arrow's string views, as polars holds them: not copied into large
                # strings, 45 against 110 us for a row of 8 string columns)
                import polars as pl

                return X.to_arrow(compat_level=pl.CompatLevel.newest())
            except Exception:  # noqa: BLE001 - a polars before compatibility levels, a pyarrow before views (16)
                return X.to_arrow()
        except Exception as exc:  # noqa: BLE001 - a column arrow cannot hold (128-bit integers)
            raise InputError(f"a polars frame for a model with hashed categorical features is read as "
                             f"arrow columns: {exc}") from None
    return None


def _arrow_values(column):
    """A categorical arrow column as :meth:`HashedInputs.hash_codes` reads it: integers and
    booleans without nulls as NumPy's (coded by a table over their span, as a pandas column of
    them), anything else as it is (strings through the C++ index of a column's values, else
    arrow's dictionary encoding)."""
    import pyarrow as pa

    kind = column.type
    if (pa.types.is_integer(kind) or pa.types.is_boolean(kind)) and column.null_count == 0:
        return column.to_numpy()
    if pa.types.is_dictionary(kind) and _longest_dictionary(column) > max(1024, 2 * len(column)):
        # (its values, not a dictionary of many more: every value of which a column would remember)
        return column.cast(kind.value_type)
    return column


def _longest_dictionary(column) -> int:
    chunks = column.chunks if hasattr(column, "chunks") else [column]
    return max((len(chunk.dictionary) for chunk in chunks), default=0)


def _to_pandas(X):
    try:
        return X.to_pandas()
    except Exception as exc:  # no pandas, or a frame that does not convert
        raise InputError(f"a {type(X).__name__} for a model with hashed categorical features is "
                         f"read through pandas: {exc}") from None


def _is_sparse(X) -> bool:
    return type(X).__module__.startswith("scipy.sparse")


def _num_rows(X) -> int:
    shape = getattr(X, "shape", None)
    return int(shape[0]) if shape is not None else int(X.num_rows)


def _frame(X):
    """(column names or None, a function (index, labels, numeric) -> float64 column, a function () -> the
    whole frame as float64 or None) for a data frame, or None for anything else."""
    module = type(X).__module__.split(".")[0]
    if module == "pandas" and hasattr(X, "columns") and hasattr(X, "iloc"):
        cols = list(X.columns)
        return (cols, lambda i, labels, numeric: pandas_column(X.iloc[:, i], cols[i], labels, numeric),
                lambda: _pandas_numbers(X))
    if module == "polars" and hasattr(X, "get_columns"):
        cols = list(X.columns)
        # polars names a frame built from an array column_0, column_1, ...: no names given.
        named = cols != [f"column_{i}" for i in range(len(cols))]
        series = X.get_columns()
        return ((cols if named else None),
                lambda i, labels, numeric: polars_column(series[i], cols[i], labels, numeric), _none)
    if module == "pyarrow" and hasattr(X, "column_names") and hasattr(X, "column"):
        cols = list(X.column_names)
        return cols, lambda i, labels, numeric: arrow_column(X.column(i), cols[i], labels, numeric), _none
    if module == "pandas" and hasattr(X, "to_frame"):
        raise InputError("predict takes rows: a pandas Series is one column; pass a DataFrame "
                         "or series.to_frame().T for one row")
    return None


def frame_columns_match(columns: list, forest: Forest) -> None:
    """Raise the InputError predict would raise for a frame with these column labels."""
    column_order(columns, forest)


def label_codes(labels: list, forest: Forest, values: np.ndarray, name) -> np.ndarray:
    """The model's codes (float64) of category labels ``values`` (an object array) of a feature
    whose labels are ``labels``: a missing label NaN, an unseen one NaN or an error, as the
    model's library does."""
    return Labels(labels, forest.unseen_category_error).codes(values, name)


def _none():
    return None


def _pandas_numbers(X) -> np.ndarray | None:
    """A pandas frame whose every column holds NumPy numbers or booleans as one float64 array
    (the values :func:`_pandas_column` reads column by column, an ``iloc`` a column, many
    times slower for a few rows), else None (categories, strings, nullable or extension
    dtypes: read column by column)."""
    if all(isinstance(d, np.dtype) and d.kind in "biuf" for d in X.dtypes):
        return X.to_numpy(dtype=np.float64)
    return None

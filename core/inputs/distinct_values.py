"""A column's values as codes of its distinct values (:func:`factorise`), as
:mod:`silvanforge.inputs.hashed_rows` hashes them: a pandas category's own codes, small
integers by a table over their span, strings held by arrow (pandas' Arrow-backed, arrow's own) by
Arrow's dictionary, a few Python values by a dict, anything else by ``pandas.factorize`` (a dict
without pandas); and what the C++ index of a column's strings is given (:func:`arrow_values`,
:func:`dictionary_indices`, :func:`encodes`)."""

from __future__ import annotations

import numpy as np

from silvanforge.errors import InputError
from silvanforge.inputs.columns import loaded_pandas_na

# Integer columns whose values lie within this span are factorised by a table over it.
INTEGER_SPAN = 1 << 16

# Columns of Python values (records, object arrays) of up to this many rows are factorised by a
# dict: pandas' factorize costs 20 us a call however few (8 columns of a one-record request).
FEW_VALUES = 64


def listed(uniques) -> list:
    """A column's distinct values as :func:`factorise` gives them, as a list (Arrow's dictionary
    listed only where a call's values are not the last call's: 0.8 us a column)."""
    return uniques.to_pylist() if hasattr(uniques, "to_pylist") else uniques


def small_integers(values, module: str) -> tuple[np.ndarray, list] | None:
    """(codes, distinct values) of a column of NumPy integers within :data:`INTEGER_SPAN` of
    each other (categories given as codes), by a table over their span, else None."""
    if module == "pandas":
        dtype = getattr(values, "dtype", None)
        if not isinstance(dtype, np.dtype) or dtype.kind not in "iu":
            return None
        values = values.to_numpy()
    elif not (isinstance(values, np.ndarray) and values.dtype.kind in "iu" and values.ndim == 1):
        return None
    if len(values) == 0:
        return None
    lo, hi = int(values.min()), int(values.max())
    if hi - lo >= INTEGER_SPAN:
        return None
    offsets = (values - lo).astype(np.intp)
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[offsets] = True
    distinct = np.flatnonzero(present)
    rank = np.cumsum(present) - 1
    return rank[offsets], [int(v) + lo for v in distinct]


def pandas_categories(values):
    """A pandas ``category`` Series' categories (an Index), else None."""
    if type(values).__module__.split(".")[0] == "pandas" and getattr(getattr(values, "dtype", None), "name", "") \
            == "category":
        return values.dtype.categories
    return None


def arrow_values(values):
    """The arrow array (or ChunkedArray) of a column held by arrow: pandas' Arrow-backed arrays
    (its default strings among them) and arrow's own; else None."""
    if type(values).__name__.startswith("Arrow"):
        return values.__arrow_array__()
    if type(values).__module__.split(".")[0] == "pyarrow" and hasattr(values, "type"):
        return values
    return None


def dictionary_indices(array):
    """(indices, the dictionary's values: a null's index one past them) of an arrow dictionary
    column of one chunk (polars' Categorical and Enum, pandas categories made arrow) whose
    dictionary is not much longer than the column (a polars Categorical's may hold every string
    its process has seen); else None."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(array.type):
        return None
    if isinstance(array, pa.ChunkedArray):
        if array.num_chunks != 1:
            return None
        array = array.chunk(0)
    labels = array.dictionary
    if len(labels) > max(1024, 2 * len(array)):
        return None
    indices = array.indices
    if indices.null_count:  # (as int64: a dictionary's unsigned or narrow indices may not hold it)
        indices = pc.fill_null(indices.cast(pa.int64()), len(labels))
    return indices.to_numpy(zero_copy_only=False), labels


def encodes(value: str) -> bool:
    """Whether UTF-8 holds ``value`` (not a lone surrogate)."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def factorise(values) -> tuple[np.ndarray, object, object]:
    """(codes, distinct values, a token of them or None) of a column: code -1 for a missing
    value (None, NaN, pandas NA), which the last slot of the caller's tables answers (not a
    category).  The token (:meth:`silvanforge.inputs.hashed_rows._ColumnValues.codes`) is
    Arrow's dictionary of strings (then the distinct values too, a list by :func:`listed`), or the
    integers themselves."""
    module = type(values).__module__.split(".")[0]
    if module == "pandas" and str(getattr(values, "dtype", "")) == "category":
        codes = values.cat.codes.to_numpy()
        return codes.astype(np.intp), list(values.cat.categories), None
    ints = small_integers(values, module)
    if ints is not None:
        return ints[0], ints[1], tuple(ints[1])
    backing = None
    if module == "pandas":
        try:
            backing = values.array  # (a Series' extension array)
        except AttributeError:  # (one a frame's block holds)
            backing = values
    chunks = arrow_values(backing if module == "pandas" else values)
    if chunks is not None:  # arrow's (pandas' default strings, Arrow-backed, arrow's own): Arrow's dictionary
        import pyarrow as pa
        import pyarrow.compute as pc

        if hasattr(chunks, "combine_chunks"):
            chunks = chunks.chunk(0) if chunks.num_chunks == 1 else chunks.combine_chunks()
        try:
            encoded = pc.dictionary_encode(chunks)
        except pa.ArrowNotImplementedError:  # (lists, structs, ...: arrow encodes no such values)
            raise TypeError(f"arrow values of type {chunks.type}") from None
        indices = encoded.indices
        if indices.null_count:  # (as int64: a dictionary column's own indices may be unsigned)
            indices = pc.fill_null(indices.cast(pa.int64()), -1)
        codes = indices.to_numpy(zero_copy_only=False)
        return codes.astype(np.intp), encoded.dictionary, encoded.dictionary  # (listed where needed)
    try:
        import pandas as pd
    except ImportError:  # no pandas: a dict of the distinct values
        return _by_dict(values.tolist() if hasattr(values, "tolist") else values)
    if module != "pandas":
        values = np.asarray(values) if not isinstance(values, np.ndarray) else values
        if values.dtype.kind not in "biufOUS":
            raise InputError(f"a categorical column of dtype {values.dtype} cannot be read")
        if values.dtype.kind in "US":
            values = values.astype(object)
        if values.dtype == object and len(values) <= FEW_VALUES:
            return _by_dict(values.tolist())
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    return np.asarray(codes, dtype=np.intp), list(uniques), None


def _by_dict(values: list) -> tuple[np.ndarray, list, None]:
    """:func:`factorise` of Python values by a dict of them (None, pandas' NA and any NaN missing,
    as pandas' factorize has them)."""
    na = loaded_pandas_na()
    seen: dict = {}
    codes = np.empty(len(values), dtype=np.intp)
    for i, v in enumerate(values):
        codes[i] = -1 if v is None or v is na or not isinstance(v, str) and _not_itself(v) else \
            seen.setdefault(v, len(seen))
    return codes, list(seen), None


def _not_itself(value) -> bool:
    """Whether ``value`` differs from itself: a NaN of any kind (float, NumPy's, NaT, Decimal's),
    which pandas' factorize counts missing too."""
    try:
        return bool(value != value)
    except (TypeError, ValueError):  # (an array's comparison: no NaN)
        return False

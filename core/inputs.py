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

from . import category_hash
from .errors import InputError
from .ir.hir import Forest
from .runtime import check_rows

# How many names an error message lists before "...".
SHOWN_NAMES = 8


def as_rows(X, forest: Forest, dtype: np.dtype) -> np.ndarray:
    """``X`` as a (n, num_features) array of ``dtype`` that a kernel can read: arrays as they
    are (validated, copied only when needed), frames column by column in the model's order."""
    if forest.hashed_categories or forest.hashed_combinations:
        return _hashed_rows(X, forest, dtype)
    if type(X) is np.ndarray:
        return check_rows(X, forest.num_features, dtype, forest.wider_rows)
    frame = _frame(X)
    if frame is None:
        if _is_sparse(X):
            raise InputError("scipy sparse matrices are not read: convert with .toarray() first, "
                             "deciding what an absent entry means (XGBoost reads it as missing, "
                             "LightGBM as 0)")
        return check_rows(X, forest.num_features, dtype, forest.wider_rows)
    names, column, whole = frame
    order = _column_order(names, forest)
    categories = forest.feature_categories or {}
    values = whole()
    if values is not None:  # every column a plain number: one conversion, not one a column
        rows = np.ascontiguousarray(values[:, order], dtype=dtype)
        for feature, labels in categories.items():  # numbers where the model has labels
            index = order[feature]
            name = names[index] if names is not None else index
            rows[:, feature] = _numbers_as_labels(values[:, index].astype(object), name, "number",
                                                  _Labels(labels, forest.unseen_category_error))
        return rows
    n = _num_rows(X)
    out = np.empty((n, forest.num_features), dtype=dtype)
    for feature, index in enumerate(order):
        labels = categories.get(feature)
        out[:, feature] = column(index, None if labels is None else
                                 _Labels(labels, forest.unseen_category_error))
    return out


def _hashed_rows(X, forest: Forest, dtype: np.dtype) -> np.ndarray:
    """Rows of a model with categories known by hash (CatBoost): its categorical columns'
    values (strings, integers, pandas categories; in arrays of any dtype) hashed and replaced
    by their codes, every other column read as numbers, and the computed columns of
    ``Forest.hashed_combinations`` appended."""
    hashed = forest.hashed_categories or {}
    width = forest.input_features
    if _frame(X) is not None:
        frame = X if type(X).__module__.split(".")[0] == "pandas" else _to_pandas(X)
        names = list(frame.columns)
        order = _column_order(names if all(isinstance(c, str) for c in names) else None, forest)
        columns = [frame.iloc[:, i] for i in order]
        n = len(frame)

        def number(feature):
            return _pandas_column(columns[feature], names[order[feature]], None)

        def raw(feature):
            return columns[feature].astype(object).tolist()
    else:
        arr = np.asarray(X)
        if arr.ndim != 2 or arr.dtype.kind not in "biufOUS":
            return check_rows(X, width, dtype, forest.wider_rows)  # its error message
        if arr.shape[1] != width and not (forest.wider_rows and arr.shape[1] > width):
            raise InputError(f"the model expects {width} features per row, got {arr.shape[1]}")
        n = arr.shape[0]

        def number(feature):
            try:
                return arr[:, feature].astype(np.float64)
            except (TypeError, ValueError):
                raise InputError(f"column {feature} is not numeric and not a categorical feature "
                                 f"of the model") from None

        def raw(feature):
            return arr[:, feature].tolist()
    out = np.empty((n, forest.num_features), dtype=np.float64)
    hashes = {}
    for feature in range(width):
        if feature in hashed:
            hashes[feature] = category_hash.hash_column(raw(feature))
            out[:, feature] = category_hash.codes_of(*hashes[feature], hashed[feature])
        else:
            out[:, feature] = number(feature)
    floats = {}
    for j, combo in enumerate(forest.hashed_combinations or ()):
        for e in combo["elements"]:
            if e[0] == "float" and e[1] not in floats:
                floats[e[1]] = out[:, e[1]].astype(np.float32)
        out[:, width + j] = category_hash.combination_codes(combo, hashes, floats, n)
    return check_rows(out, forest.num_features, dtype, forest.wider_rows)


def _to_pandas(X):
    try:
        return X.to_pandas()
    except Exception as exc:  # no pandas, or a frame that does not convert
        raise InputError(f"a {type(X).__name__} for a model with hashed categorical features is "
                         f"read through pandas: {exc}") from None


class _Labels:
    """A feature's category labels and what a label outside them is (missing, or an error)."""

    def __init__(self, labels: list, unseen_error: bool):
        self.labels, self.unseen_error = labels, unseen_error

    def lookup(self, values: np.ndarray) -> np.ndarray:
        """Codes (float64) of ``values``, an object array of labels: NaN for a missing label
        (None or NaN), -1 for one the model does not know."""
        lookup = {}
        for code, label in enumerate(self.labels):
            lookup.setdefault(label, float(code))
        return np.fromiter((np.nan if v is None or v != v else lookup.get(v, -1.0) for v in values.tolist()),
                           dtype=np.float64, count=len(values))

    def codes(self, values: np.ndarray, name) -> np.ndarray:
        codes = self.lookup(values)
        return self.unseen(codes, codes == -1.0, name)

    def unseen(self, codes: np.ndarray, unseen: np.ndarray, name) -> np.ndarray:
        """``codes`` with the ``unseen`` labels missing, or refused."""
        if unseen.any():
            if self.unseen_error:
                raise InputError(f"column {name!r} has a category the model was not trained with "
                                 f"(it knows {_listed(self.labels)}), which its library refuses too")
            codes[unseen] = np.nan
        return codes


def _is_sparse(X) -> bool:
    return type(X).__module__.startswith("scipy.sparse")


def _num_rows(X) -> int:
    shape = getattr(X, "shape", None)
    return int(shape[0]) if shape is not None else int(X.num_rows)


def _frame(X):
    """(column names or None, a function (index, labels) -> float64 column, a function () -> the
    whole frame as float64 or None) for a data frame, or None for anything else."""
    module = type(X).__module__.split(".")[0]
    if module == "pandas" and hasattr(X, "columns") and hasattr(X, "iloc"):
        cols = list(X.columns)
        named = all(isinstance(c, str) for c in cols)
        return ((cols if named else None), lambda i, labels: _pandas_column(X.iloc[:, i], cols[i], labels),
                lambda: _pandas_numbers(X))
    if module == "polars" and hasattr(X, "get_columns"):
        cols = list(X.columns)
        # polars names a frame built from an array column_0, column_1, ...: no names given.
        named = cols != [f"column_{i}" for i in range(len(cols))]
        series = X.get_columns()
        return (cols if named else None), lambda i, labels: _polars_column(series[i], cols[i], labels), _none
    if module == "pyarrow" and hasattr(X, "column_names") and hasattr(X, "column"):
        cols = list(X.column_names)
        return cols, lambda i, labels: _arrow_column(X.column(i), cols[i], labels), _none
    if module == "pandas" and hasattr(X, "to_frame"):
        raise InputError("predict takes rows: a pandas Series is one column; pass a DataFrame "
                         "or series.to_frame().T for one row")
    return None


def frame_columns_match(columns: list, forest: Forest) -> None:
    """Raise the InputError predict would raise for a frame with these column labels."""
    _column_order(columns if all(isinstance(c, str) for c in columns) else None, forest)


def column_order(names: list | None, forest: Forest, what: str = "the frame's columns") -> list[int]:
    """For each model feature, the column that holds it: by ``names`` where both the columns and
    the model have names, else by position; ``what`` the columns are, for messages."""
    return _column_order(names, forest, what)


def label_codes(labels: list, forest: Forest, values: np.ndarray, name) -> np.ndarray:
    """The model's codes (float64) of category labels ``values`` (an object array) of a feature
    whose labels are ``labels``: a missing label NaN, an unseen one NaN or an error, as the
    model's library does."""
    return _Labels(labels, forest.unseen_category_error).codes(values, name)


def _column_order(names: list | None, forest: Forest, what: str = "the frame's columns") -> list[int]:
    """For each model feature, the frame column that holds it."""
    wanted = forest.feature_names
    if names is None or wanted is None:
        count = forest.input_features
        if names is not None and len(names) != count and not (forest.wider_rows and len(names) > count):
            raise InputError(f"the model expects {count} features per row, got {len(names)} columns")
        return list(range(count))
    seen: dict = {}
    for i, name in enumerate(names):
        if name in seen:
            raise InputError(f"{what} include two columns named {name!r}")
        seen[name] = i
    missing = [n for n in wanted if n not in seen]
    known = set(wanted)
    unknown = [n for n in names if n not in known]
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing {_listed(missing)}")
        if unknown:
            parts.append(f"not features of the model: {_listed(unknown)}")
        raise InputError(f"{what} do not match the model's features: {'; '.join(parts)} "
                         f"(the model's features: {_listed(wanted)})")
    return [seen[n] for n in wanted]


def _listed(names: list) -> str:
    shown = ", ".join(repr(n) for n in names[:SHOWN_NAMES])
    return shown + (f", ... ({len(names)} in all)" if len(names) > SHOWN_NAMES else "")


def _none():
    return None


def _pandas_numbers(X) -> np.ndarray | None:
    """A pandas frame whose every column holds NumPy numbers or booleans as one float64 array
    (the values :func:`_pandas_column` reads column by column: a 1-row frame took 225 us that
    way, 18 us a column in ``iloc``), else None (categories, strings, nullable or extension
    dtypes: read column by column)."""
    if all(isinstance(d, np.dtype) and d.kind in "biuf" for d in X.dtypes):
        return X.to_numpy(dtype=np.float64)
    return None


def _numbers_as_labels(values: np.ndarray, name, dtype, labels) -> np.ndarray:
    """A plain number column where the model stored category labels: mapped as labels where the
    labels are numbers (pandas integer categories; ``polars.from_pandas`` turns such a column into
    plain integers), refused where they are not.  Why: read as codes it would silently answer
    otherwise than the same values as categories (LightGBM refuses such a column)."""
    if all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
           for v in labels.labels):
        codes = labels.lookup(values)
        given = ~np.isnan(codes)
        if given.any() and not (codes[given] >= 0).any():
            # Not one value is a label: these are codes (0, 1, ...) of labels such as 10, 20, 30,
            # and reading them as labels would make every one a missing value.
            raise InputError(
                f"column {name!r} holds plain {dtype} values, none of which is one of the labels of the "
                f"model's categorical feature {name!r} ({_listed(list(labels.labels))}): pass the labels "
                "or a categorical column; category codes as numbers are read from NumPy arrays only")
        return labels.unseen(codes, codes == -1.0, name)
    raise InputError(
        f"column {name!r} holds plain {dtype} values, but the model's feature {name!r} is categorical "
        f"with the labels {_listed(list(labels.labels))}: pass it as a categorical column (pandas "
        "'category', polars Enum, arrow dictionary) or as its labels (strings), which predict maps "
        "to the model's codes; category codes as numbers are read from NumPy arrays only")


def _pandas_column(s, name, labels) -> np.ndarray:
    import pandas as pd

    dtype = s.dtype
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        raise InputError(f"column {name!r} holds dates or durations ({dtype}); predict reads numbers: "
                         "convert it as the model was trained (LightGBM and XGBoost refuse them too)")
    if isinstance(dtype, pd.CategoricalDtype):
        missing = s.isna().to_numpy()
        if labels is not None:
            # Exactly LightGBM's mapping: the column's categories replaced by the training ones.
            s = s.cat.set_categories(labels.labels)
        codes = s.cat.codes.to_numpy().astype(np.float64)
        unseen = (codes < 0) & ~missing
        codes[missing] = np.nan
        return codes if labels is None else labels.unseen(codes, unseen, name)
    if dtype == object or pd.api.types.is_string_dtype(dtype):
        if labels is not None:
            return labels.codes(s.to_numpy(dtype=object), name)
        raise InputError(f"column {name!r} holds {dtype} values; predict reads numbers or "
                         "categorical columns (pandas 'category')")
    if labels is not None:
        return _numbers_as_labels(s.to_numpy(dtype=object, na_value=None), name, dtype, labels)
    try:
        return s.to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError) as exc:
        raise InputError(f"column {name!r} of dtype {dtype} is not numeric ({exc})") from None


def _polars_column(s, name, labels) -> np.ndarray:
    # An Enum's codes are positions in its fixed categories; a Categorical's depend on the
    # order strings were first seen, so without the model's labels they mean nothing.
    if type(s.dtype).__name__ == "Categorical" and labels is None:
        raise InputError(f"column {name!r} is a polars Categorical and the model stores no "
                         "category labels, so its codes mean nothing to the model: pass the "
                         "codes the model was trained with, or a pl.Enum of its categories")
    return _arrow_column(s.to_arrow(), name, labels)


def _arrow_column(col, name, labels) -> np.ndarray:
    """A pyarrow Array or ChunkedArray (polars columns arrive as arrow too) as float64."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_dictionary(col.type):
        dictionary = col.dictionary.to_numpy(zero_copy_only=False)
        indices = col.indices.to_numpy(zero_copy_only=False)
        if labels is not None:
            lut = labels.lookup(np.asarray(dictionary, dtype=object))
        else:
            lut = np.arange(len(dictionary), dtype=np.float64)  # the column's own codes
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        safe = np.where(valid, indices, 0).astype(np.int64)
        codes = np.where(valid, lut[safe] if len(lut) else np.nan, np.nan)
        return codes if labels is None else labels.unseen(codes, codes == -1.0, name)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        if labels is not None:
            return labels.codes(np.asarray(col.to_numpy(zero_copy_only=False), dtype=object), name)
        raise InputError(f"column {name!r} holds strings; predict reads numbers or categorical columns")
    if labels is not None:
        return _numbers_as_labels(np.asarray(col.to_pylist(), dtype=object), name, col.type, labels)
    # Integers past 2**53 round to the nearest float64, as NumPy and pandas convert them (arrow's
    # default safe cast refuses them as lossy).
    lossy_ok = pa.types.is_integer(col.type)
    try:
        return pc.cast(col, pa.float64(), safe=not lossy_ok).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(f"column {name!r} of type {col.type} is not numeric ({exc})") from None


"""Polars frames read by the plan of their schema (:mod:`silvanforge.inputs.frames` says why): a
few rows as Python values (row tuples, labels replaced by their codes); more as polars hands its
columns over by the Arrow PyCapsule Interface, read in place by the C++ reader of arrow columns
(numbers with nulls, Enum and Categorical columns, integers that are labels); a frame of plain
numbers below that with one copy; else column by column, Enum and Categorical columns through
their code tables."""

from __future__ import annotations

import itertools
import operator

import numpy as np

from silvanforge.errors import InputError
from silvanforge.inputs import arrow_native
from silvanforge.inputs.arrow_frames import FLOAT32, FLOAT64, ArrowKey, ArrowPlan, dictionary_codes
from silvanforge.inputs.columns import polars_column
from silvanforge.inputs.schemas import (CategoryReading, SchemaMemory, column_rows,
                                        feature_order, numeric_features, through_float64)

# Rows of a polars frame read as Python values rather than through its own copies: about 1.5 us
# a row of 28 numbers against 5-12 us a call (polars 2.1: 4 rows 4.9 us against 9.0).
FEW_POLARS_ROWS = 4

# Rows from which polars' to_numpy is asked for column order (it copied 4096 rows of 28 columns
# in 93 us so, 183 us in row order; 256 rows in 18 against 11).
POLARS_C_ORDER_ROWS = 2048

# Rows from which a frame of plain numbers goes over as an Arrow stream rather than by polars'
# to_numpy (a frame with categorical columns goes so from FEW_POLARS_ROWS): with nulls, where
# polars' readers put missing values, 28 float32 columns took 15 / 17 / 46 us so at 64 / 256 /
# 4096 rows against 15 / 28 / 262 by to_numpy (the stream's 12 us are polars' export).
POLARS_STREAM_ROWS = 128

_NUMBER_OR_NULL = frozenset((float, int, type(None)))  # the Python values of a polars number column


class PolarsPlan:
    """A polars frame of these column names: where every column is a number, one ``to_numpy``
    (its result's dtype tells a schema that changed since); else column by column, Enum and
    Categorical columns through their code tables (kept by dtype)."""

    def __init__(self, X, names: tuple, memory: SchemaMemory):
        forest = memory.forest
        # polars names a frame built from an array column_0, column_1, ...: no names given.
        given = None if list(names) == [f"column_{i}" for i in range(len(names))] else names
        self.order = np.array(feature_order(given, forest), dtype=np.intp)
        self.identity = self.order.tolist() == list(range(len(names)))
        self.names, self.labels = names, memory.labels
        self.dtypes = tuple(X.dtypes)
        for name, d in zip(names, self.dtypes):
            if type(d).__name__ in ("Int128", "UInt128"):  # (polars' own conversions raise their error)
                raise InputError(f"column {name!r} holds 128-bit integers ({d}), which NumPy, arrow's readers and "
                                 "the models' libraries do not read: cast it to Int64 or Float64")
        self.kinds = polars_kinds(X)
        self.numeric = all(d.is_numeric() for d in self.dtypes) and not memory.labels
        # A few rows are read as Python values (:meth:`_few_rows`) where every feature is a number
        # column, or a column of labels (Enum, Categorical, String) the model has codes for:
        # (column, the model's label -> code dict or None) a feature, in the model's order.
        self.few = []
        for f, c in enumerate(self.order.tolist()):
            kind, labels = type(self.dtypes[c]).__name__, memory.labels.get(f)
            if labels is None and self.dtypes[c].is_numeric() and kind != "Decimal":
                self.few.append((c, None))
            elif labels is not None and (kind in ("Enum", "Categorical") or
                                         kind in ("String", "Utf8") and not labels.numbers):
                self.few.append((c, (labels._lookup(), str)))
            elif labels is not None and labels.numbers and self.dtypes[c].is_numeric() and kind != "Decimal":
                # numbers where the labels are numbers (pandas integer categories, which
                # polars.from_pandas makes plain integers): each its label's code
                self.few.append((c, (labels._lookup(), float)))
            else:
                self.few = None
                break
        # ... as (the columns in the model's order taken from a row at once, None where the frame
        # holds them so; the label features with the model's dicts).
        if self.few is not None:
            columns = [c for c, _ in self.few]
            take = None if columns == list(range(len(names))) else \
                operator.itemgetter(*columns) if len(columns) > 1 else (lambda row, c=columns[0]: (row[c],))
            self.few = (take, [(f, lookup) for f, (_, lookup) in enumerate(self.few) if lookup is not None])
        # Whether polars' row tuples are the rows as they are (its columns the model's numbers, in order)
        self.as_given = self.few is not None and self.few[0] is None and not self.few[1]
        # Every feature a plain number column or labels: a few rows may go to a lean path that
        # reads polars' row tuples itself (frames.frame_rows' ``tuples``: NumPy's array of them
        # and its float32 copy cost 1.2 us, a third of a one-row call), labels replaced by their
        # codes first (:meth:`few_tuples`).  A value of another type there (a schema changed
        # under these names) sends the rows back to :meth:`rows`.
        self.tuples = self.few is not None
        self.number_features = numeric_features(forest)
        self.categorical = {f: CategoryReading(f, names[c], memory.labels.get(f), f in self.number_features)
                            for f, c in enumerate(self.order)
                            if type(self.dtypes[c]).__name__ in ("Enum", "Categorical")}
        # The plain number columns, read at once: their positions and the features they hold.
        plain = [(f, c) for f, c in enumerate(self.order.tolist())
                 if self.dtypes[c].is_numeric() and f not in memory.labels]
        self.plain = ([c for _, c in plain], np.array([f for f, _ in plain], dtype=np.intp)) if plain else None
        # The other features (feature, column), read one by one.
        plain_set = {f for f, _ in plain}
        self.others = [(f, c) for f, c in enumerate(self.order.tolist()) if f not in plain_set]
        # Whether more than a few rows go over as an Arrow stream, read by the C++ reader
        # (:meth:`_stream_rows`): columns of numbers, Enums, Categoricals and strings, what it reads, by
        # name (a frame made from an array, its columns named by position, reads as before).
        self.streams = given is not None and all(
            type(d).__name__ in ("Enum", "Categorical", "String", "Utf8") or d.is_numeric() and
            type(d).__name__ not in ("Decimal", "Float16", "Int128", "UInt128") for d in self.dtypes)
        self.arrow = None  # (the plan of the stream's tables, once one was read)
        # Where every column is a plain number: the dtypes (as :func:`polars_kinds` names them, a
        # list) by which polars' copy of such a frame is its rows, in the model's order
        # (:func:`silvanforge.inputs.frames._polars_rows`), else None.
        self.copied = list(self.kinds) if self.numeric and all(
            type(k) is str for k in self.kinds) else None

    def rows(self, X, dtype: np.dtype, memory: SchemaMemory) -> np.ndarray:
        height = X.height
        if self.few is not None and 0 < height <= FEW_POLARS_ROWS:
            values = self._few_rows(X)
            if values is not None:
                return values if values.dtype == dtype else values.astype(dtype)
        if self.streams and height > FEW_POLARS_ROWS and (not self.numeric or height >= POLARS_STREAM_ROWS) \
                and (dtype is FLOAT32 or dtype is FLOAT64):
            values = self._stream_rows(X, height, dtype, memory)
            if values is not None:
                return values
        if self.numeric and polars_kinds(X) == self.kinds:
            # (polars copies its columns side by side: C order transposes them, cheaper below a
            # few thousand rows, dearer above; the kernels read either by their strides.  The
            # dtypes checked first: polars makes numbers of dates and durations there, which the
            # column readers refuse)
            order = "c" if height < POLARS_C_ORDER_ROWS else "fortran"
            try:  # (polars' own copy without its wrapper's checks: 0.7 us of a 64-row call; private, so guarded)
                values = X._df.to_numpy(order, False, True)
            except (AttributeError, TypeError):
                values = X.to_numpy(order=order)
            if values.dtype.kind in "biuf":
                if not self.identity:
                    values = values.take(self.order, axis=1)
                if through_float64(values.dtype, dtype):
                    values = values.astype(np.float64)
                return values if values.dtype == dtype else values.astype(dtype)
        if self.numeric or polars_kinds(X) != self.kinds:
            # another schema under the same names: a plan for it, in this one's place, which
            # reads it as its own (from its stream where it streams; a numeric plan's numbers
            # that were not numbers: column by column)
            plan = PolarsPlan(X, self.names, memory)
            memory.replace(("polars", self.names), plan)
            other = plan.kinds != self.kinds and plan.streams and height > FEW_POLARS_ROWS
            return plan.rows(X, dtype, memory) if other else plan._columns(X, dtype)
        return self._columns(X, dtype)

    def _stream_rows(self, X, n: int, dtype: np.dtype, memory: SchemaMemory) -> np.ndarray | None:
        """The rows as polars hands its columns over by the Arrow PyCapsule Interface
        (``__arrow_c_stream__``), read by the C++ reader (:mod:`silvanforge.inputs.arrow_native`)
        by the plan of the tables of its columns: names and types checked there, nulls and
        categories read in place.  Where the stream's columns are not that plan's (the first
        call, another schema, a dictionary the reader leaves to Python), its table is read as
        any pyarrow table is.  None where the reader is not ready or polars has no such export."""
        module = arrow_native.reader()
        export = getattr(X, "__arrow_c_stream__", None)
        if module is None or export is None:
            return None
        arrow = self.arrow
        out = column_rows(n, len(self.order), dtype)
        found = module.read_stream(arrow.direct if arrow is not None and arrow.ready() else None, export(), out)
        if type(found) is int:
            return out
        if found is None:  # (a type arrow cannot import: polars' own copies, as before)
            return None
        plan = self
        if polars_kinds(X) != self.kinds:  # another schema under these names: a plan for it, in this one's place
            plan = PolarsPlan(X, self.names, memory)
            if not plan.streams:
                return None  # (the general way below replaces this plan)
            memory.replace(("polars", self.names), plan)
        return plan._table_rows(found, dtype, memory)

    def _table_rows(self, table, dtype: np.dtype, memory: SchemaMemory) -> np.ndarray | None:
        """The rows of the stream's ``table`` (the C++ reader left them, or had no plan yet) by
        the plan of its schema, which the next frame's stream is read by; None where the C++
        reader does not read its columns (polars' own copies, from now on)."""
        arrow = memory.plan(("pyarrow", ArrowKey(table.schema)), lambda: ArrowPlan(table, memory))
        if arrow.direct is None:
            self.streams = False
            return None
        self.arrow = arrow
        return arrow.rows(table, dtype)

    def few_tuples(self, rows: list) -> list | None:
        """A few rows as polars hands them out (its row tuples) as tuples of Python numbers in the
        model's order: a label its code, a missing value None, a label the model does not know
        missing or refused (as its library does); None where a value is not of its plan's kind
        (another schema under these names, read the general way)."""
        take, labeled = self.few
        if take is not None:
            rows = [take(row) for row in rows]
        if not labeled:
            return rows
        converted = []
        for row in rows:
            row = list(row)
            for f, (lookup, kind) in labeled:
                v = row[f]
                if v is None:
                    continue
                if kind is str and type(v) is str:
                    code = lookup.get(v)
                    if code is None:  # (a label the model does not know: missing, or refused)
                        labels = self.labels[f]
                        if labels.unseen_error:
                            labels.refuse(self.names[self.order[f]], v)
                        code = np.nan
                elif kind is float and (type(v) is int or type(v) is float):
                    code = None if v != v else lookup.get(v)
                    if code is None and v == v:  # (a number not a label: the column reader decides,
                        return None             # as for more rows: codes refused, or the label missing)
                else:
                    return None
                row[f] = code
            converted.append(tuple(row))
        return converted

    def _few_rows(self, X) -> np.ndarray | None:
        """A few rows as Python values (polars' own copies cost 5-17 us a call however few rows,
        a categorical column's 10 more): (n, features) float64, numbers as they are (through
        float64, as the column readers convert them; a null is NaN, the missing value), labels
        through the model's codes (:meth:`few_tuples`).  None where a value is not of its plan's
        kind: another schema under these names, read the general way."""
        try:  # (polars' own rows, without rows()'s wrapper: 0.2 us of 8; private, so guarded)
            rows = X._df.row_tuples()
        except (AttributeError, TypeError):
            rows = X.rows()
        rows = self.few_tuples(rows)
        return None if rows is None else _numbers(rows)

    def _columns(self, X, dtype: np.dtype) -> np.ndarray:
        out = column_rows(X.height, len(self.order), dtype)
        plain_read = False
        if self.plain is not None:
            columns, features = self.plain
            # polars' own columns (private X._df: no Series made a column; 24: 7 us, Series 26 us)
            try:
                series = X._df.get_columns()
                arrays = [series[c].to_numpy(writable=False, allow_copy=True) for c in columns]
            except (AttributeError, TypeError):
                arrays = [X.to_series(c).to_numpy() for c in columns]
            if all(a.dtype.kind in "biuf" for a in arrays):  # (else a polars that converts otherwise: by column)
                # (written a column at a time: side by side first, then at once, took 29 us
                # against 19 for 4096 rows of 24 columns, as long for 64)
                for f, a in zip(features.tolist(), arrays):
                    out[:, f] = a.astype(np.float64) if through_float64(a.dtype, dtype) else a
                plain_read = True
        for feature, column in self.others if plain_read else enumerate(self.order.tolist()):
            s = X.to_series(column)
            reading = self.categorical.get(feature)
            if reading is not None and (reading.labels is not None or type(s.dtype).__name__ == "Enum"):
                out[:, feature] = dictionary_codes(s.to_arrow(), reading, checked=True)  # (polars' own: valid)
            else:
                out[:, feature] = polars_column(s, self.names[column], self.labels.get(feature),
                                                feature in self.number_features)
        return out


def _numbers(rows: list) -> np.ndarray | None:
    """Rows of Python values (tuples of as many) as float64, None where one is not a number or
    a null (another schema under the same names: read the general way)."""
    try:  # (the dtype NumPy finds tells plain numbers: no type checked a value)
        values = np.array(rows)
    except ValueError:  # (values of several lengths: lists)
        return None
    if values.dtype.kind in "fiub" and values.ndim == 2:
        # (integers and booleans through float64, as the column readers read them)
        return values if values.dtype.kind == "f" else values.astype(np.float64)
    # nulls (None, read as NaN), or values of another kind
    if not set(map(type, itertools.chain.from_iterable(rows))) <= _NUMBER_OR_NULL:
        return None
    return np.array(rows, dtype=np.float64).reshape(len(rows), -1)


def polars_kinds(X):
    """A polars frame's dtypes as its plan depends on them: their names (``f64``, ``enum``...; an
    Enum's categories are checked at each call), made without a dtype object a column (an Enum's
    holds its categories: 40 us of a 64-row call of four Enums), else the dtypes."""
    names = getattr(getattr(X, "_df", None), "dtype_strings", None)
    return tuple(names()) if names is not None else tuple(X.dtypes)


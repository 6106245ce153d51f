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
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict

import numpy as np

from silvanforge.inputs.columns import CodeTable, Labels, arrow_column, column_order, numbers_as_labels, pandas_column, polars_column
from silvanforge.inputs.records import record_readers
from silvanforge.ir.hir import Forest

# The libraries whose frames are read here (host memory: never device arrays).
FRAME_LIBRARIES = ("pandas", "polars", "pyarrow")

# Rows of a polars frame read as Python values rather than through its own copies: about 1.5 us
# a row of 28 numbers against 5-12 us a call (polars 2.1: 4 rows 4.9 us against 9.0).
FEW_POLARS_ROWS = 4

# Rows from which polars' to_numpy is asked for column order (it copied 4096 rows of 28 columns
# in 93 us so, 183 us in row order; 256 rows in 18 against 11).
POLARS_C_ORDER_ROWS = 2048

# Rows from which an arrow table's number columns are read one by one, not as one tensor.
ARROW_BY_COLUMN_ROWS = 1024

# Rows of a pandas block made C-ordered (the lean path for a few rows takes those; larger calls
# read the block as it lies).
FEW_ROWS_CONTIGUOUS = 16

_NUMBER_OR_NULL = frozenset((float, int, type(None)))  # the Python values of a polars number column

# Schemas a compiled model remembers (a service sees a few; a loop over many frames of other
# schemas costs a plan each, as every call did before).
SCHEMAS = 16


class SchemaMemory:
    """The plans of the last :data:`SCHEMAS` frame schemas of one model; safe from many threads
    (a plan is immutable but for its columns' last tables, each replaced in one assignment)."""

    def __init__(self, forest: Forest, size: int = SCHEMAS):
        self.forest, self.size = forest, size
        self._plans: OrderedDict = OrderedDict()
        self._last: tuple = (None, None)  # (key, plan) of the last hit, replaced in one assignment
        self._names: dict = {}  # id(pandas columns Index) -> (the Index, its names)
        self._lock = threading.Lock()
        self._hashing = None
        self._readers = None  # how a record's values are read (silvanforge.inputs.records)
        categories = forest.feature_categories or {}
        self.labels = {f: Labels(v, forest.unseen_category_error) for f, v in categories.items()}

    def __len__(self) -> int:
        return len(self._plans)

    def record_readers(self) -> list:
        """The model's :func:`silvanforge.inputs.records.record_readers`, made on first use."""
        found = self._readers
        if found is None:
            found = self._readers = record_readers(self.forest)
        return found

    def hashing(self):
        """The model's :class:`silvanforge.inputs.hashed_rows.HashedInputs` (models with categories
        known by hash, CatBoost's), built on first use."""
        found = self._hashing
        if found is None:
            from silvanforge.inputs.hashed_rows import HashedInputs  # only CatBoost models with categories need it

            with self._lock:
                found = self._hashing = self._hashing or HashedInputs(self.forest)
        return found

    def plan(self, key, build):
        last = self._last  # (the schema of the last call, as a service sends: one comparison)
        if last[0] == key:
            return last[1]
        plan = self._plans.get(key)  # (a hit takes no lock: a dict's get and move_to_end are atomic)
        if plan is not None:
            try:
                self._plans.move_to_end(key)
            except KeyError:  # evicted meanwhile by another thread: still this schema's plan
                pass
            self._last = (key, plan)
            return plan
        plan = build()  # outside the lock: a plan's errors and work hold no other caller up
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > self.size:
                self._plans.popitem(last=False)
        return plan

    def replace(self, key, plan) -> None:
        with self._lock:
            self._plans[key] = plan
            self._plans.move_to_end(key)
            self._last = (None, None)

    def names(self, columns) -> tuple:
        """A pandas frame's column names; an Index is immutable, so its names are kept by the
        object (reading 28 Arrow-backed names took 4 us)."""
        hit = self._names.get(id(columns))
        if hit is not None and hit[0] is columns:
            return hit[1]
        names = tuple(columns.tolist())
        with self._lock:
            if len(self._names) >= self.size:
                self._names.clear()
            self._names[id(columns)] = (columns, names)  # the Index held: its id is not reused
        return names


def frame_rows(X, memory: SchemaMemory, dtype: np.dtype):
    """``X`` (a pandas, polars or pyarrow frame) as (n, num_features) rows of ``dtype``, or None
    where it is none of those or its library's internals are not the ones read here."""
    module = type(X).__module__.split(".")[0]
    if module == "pandas":
        key = _pandas_key(X, memory)
        if key is None:
            return None
        return memory.plan(key, lambda: _PandasPlan(X, memory, dtype)).rows(X, dtype)
    if module == "polars" and hasattr(type(X), "get_columns"):
        names = tuple(X.columns)
        plan = memory.plan(("polars", names), lambda: _PolarsPlan(X, names, memory))
        return plan.rows(X, dtype, memory)
    if module == "pyarrow" and hasattr(X, "schema") and hasattr(X, "column"):
        schema = X.schema
        plan = memory.plan(("pyarrow", _ArrowKey(schema)), lambda: _ArrowPlan(X, memory))
        return plan.rows(X, dtype)
    return None


def _pandas_key(X, memory: SchemaMemory, kind: str = "pandas"):
    """The key of a pandas frame's schema (its names and blocks), or None: internals not read here."""
    mgr = getattr(X, "_mgr", None)
    blocks = getattr(mgr, "blocks", None)
    if blocks is None or not hasattr(X, "columns"):
        return None
    if len(blocks) == 1:  # (a frame built from one array: which block each column is in goes without saying)
        return (kind, memory.names(X.columns), _dtype_token(blocks[0].dtype), mgr.blklocs.tobytes())
    return (kind, memory.names(X.columns), tuple(_dtype_token(b.dtype) for b in blocks),
            mgr.blknos.tobytes(), mgr.blklocs.tobytes())


def hashed_frame_columns(X, memory: SchemaMemory, out: np.ndarray) -> list | None:
    """For a model with categories known by hash (CatBoost's), by the plan of its schema: pandas frame
    ``X``'s numbers written to ``out``, its categorical features' values as its blocks hold them; or None."""
    if type(X).__module__.split(".")[0] != "pandas":
        return None
    key = _pandas_key(X, memory, "pandas hashed")
    if key is None:
        return None
    return memory.plan(key, lambda: _HashedPandasPlan(X, memory, out.dtype)).read(X, out)


def _dtype_token(dtype):
    # A categorical dtype hashes by its categories (slow for a new dtype, and unordered ones equal
    # in any order): the plan checks its categories at each call instead.
    return dtype if isinstance(dtype, np.dtype) else ("category" if dtype.name == "category" else dtype)


def _order(names, forest: Forest) -> list[int]:
    named = names is not None and all(isinstance(c, str) for c in names)
    return column_order(list(names) if named else None, forest)


def _through_float64(dtype: np.dtype, out: np.dtype) -> bool:
    """Whether numbers of ``dtype`` are converted to ``out`` through float64, as the column path
    reads them (a 64-bit integer rounds twice that way, and may differ from one rounding)."""
    return dtype.kind in "iu" and dtype.itemsize == 8 and out != np.float64


class _Categorical:
    """A categorical column's reading: its feature, name, the model's labels (or None) and the
    table of its last categories."""

    __slots__ = ("feature", "name", "labels", "last")

    def __init__(self, feature, name, labels):
        self.feature, self.name, self.labels, self.last = feature, name, labels, None

    def table(self, categories) -> CodeTable:
        last = self.last
        if last is not None and (last.source is categories or _same_categories(last.source, categories)):
            return last
        table = CodeTable.own(categories, len(categories)) if self.labels is None else self.labels.table(categories)
        self.last = table
        return table


def _same_categories(a, b) -> bool:
    equals = getattr(a, "equals", None)
    try:
        return bool(equals(b)) and len(a) == len(b) if equals is not None else False
    except Exception:  # noqa: BLE001 - categories that do not compare: another table
        return False


# ------------------------------------------------------------------ pandas
class _PandasPlan:
    """A pandas frame of one block layout: numeric blocks copied with one assignment each,
    categorical columns through their code tables, anything else through the column readers."""

    def __init__(self, X, memory: SchemaMemory, dtype: np.dtype):
        forest = memory.forest
        names = memory.names(X.columns)
        order = _order(names, forest)
        where = {column: feature for feature, column in enumerate(order)}
        self.width = forest.num_features
        self.steps = []  # (kind, block index, what)
        numeric = True
        for b, block in enumerate(X._mgr.blocks):
            columns = block.mgr_locs.as_array
            used = [(i, where[c]) for i, c in enumerate(columns) if c in where]
            if not used:
                continue
            bdtype = block.dtype
            if isinstance(bdtype, np.dtype) and bdtype.kind in "biuf" and block.ndim == 2:
                plain = [(i, f) for i, f in used if f not in memory.labels]
                for i, f in used:
                    if f in memory.labels:  # numbers where the model has labels: read as labels
                        self.steps.append(("column", columns[i], (names[columns[i]], f)))
                        numeric = False
                if plain:
                    src, dest = (np.array(v, dtype=np.intp) for v in zip(*plain))
                    self.steps.append(("block", b, (src, dest, _through_float64(bdtype, dtype))))
                continue
            numeric = False
            for i, f in used:
                name = names[columns[i]]
                if getattr(bdtype, "name", None) == "category" and hasattr(block.values, "codes"):
                    self.steps.append(("category", b, _Categorical(f, name, memory.labels.get(f))))
                elif block.ndim == 1 and f not in memory.labels and _nullable_number(bdtype):
                    self.steps.append(("nullable", b, f))
                else:
                    self.steps.append(("column", columns[i], (name, f)))
        self.labels = memory.labels
        # Every column a NumPy number: one conversion of the frame, in the model's order.
        self.order = np.array(order, dtype=np.intp) if numeric else None
        self.identity = numeric and order == list(range(len(names)))
        self.via = np.float64 if numeric and any(s[2][2] for s in self.steps) else dtype
        # One block holding the features in the model's order (a frame made from an array, or
        # from a dict of one dtype): its values are the rows, transposed, read with one copy
        # and not through DataFrame.to_numpy (1.5 us of a 5 us one-row call).
        self.block = None
        if numeric and len(self.steps) == 1 and self.via == dtype:
            _, at, (src, dest, _) = self.steps[0]
            if len(src) == self.width and (src == np.arange(self.width)).all() and (dest == src).all():
                self.block = at

    def rows(self, X, dtype: np.dtype) -> np.ndarray:
        if self.block is not None:
            # Read only from here on.  The kernels read rows by their strides, so a large frame's
            # block is read as it lies (column by column: no copy, as fast on the CPU target);
            # a few rows are made C-ordered, which the lean path for few rows takes.
            values = X._mgr.blocks[self.block].values.T
            if values.shape[0] <= FEW_ROWS_CONTIGUOUS:
                return np.ascontiguousarray(values, dtype=dtype)
            return values if values.dtype == dtype else values.astype(dtype)
        if self.order is not None:
            values = X.to_numpy(dtype=self.via)
            if not self.identity:
                values = values.take(self.order, axis=1)
            return values if values.dtype == dtype else values.astype(dtype)
        blocks = X._mgr.blocks
        out = np.empty((len(X), self.width), dtype=dtype)
        for kind, at, what in self.steps:
            if kind == "block":
                src, dest, via = what
                values = blocks[at].values
                out[:, dest] = (values[src].astype(np.float64) if via else values[src]).T
            elif kind == "category":
                values = blocks[at].values
                # (``_codes``: the array ``codes`` wraps in a read-only view, a third of a
                # microsecond a column)
                own = values._codes if hasattr(values, "_codes") else values.codes
                out[:, what.feature] = what.table(values.dtype.categories).codes(own, what.labels, what.name)
            elif kind == "nullable":  # as the column reader converts them, pd.NA missing
                out[:, what] = blocks[at].values.to_numpy(dtype=np.float64, na_value=np.nan)
            else:
                name, feature = what
                out[:, feature] = pandas_column(X.iloc[:, at], name, self.labels.get(feature))
        return out


class _HashedPandasPlan:
    """A pandas frame of one block layout, for a model with categories known by hash: number
    blocks copied with one assignment each, each categorical feature's values taken from its
    block as they lie (:mod:`silvanforge.inputs.hashed_rows` hashes them), others read a column at a time."""

    def __init__(self, X, memory: SchemaMemory, dtype: np.dtype):
        names = memory.names(X.columns)
        order = _order(names, memory.forest)
        where = {column: feature for feature, column in enumerate(order)}
        hashed = memory.forest.hashed_categories or {}
        self.numbers, self.hashed, self.others = [], [], []
        for b, block in enumerate(X._mgr.blocks):
            columns = block.mgr_locs.as_array
            two_d = getattr(block.values, "ndim", 1) == 2  # (an extension array is one column, 1-D)
            numeric = isinstance(block.dtype, np.dtype) and block.dtype.kind in "biuf" and two_d
            plain = []
            for i, c in enumerate(columns):
                f = where.get(c)
                if f is None:
                    continue
                if f in hashed:
                    self.hashed.append((f, b, i if two_d else None))
                elif numeric:
                    plain.append((i, f))
                else:
                    self.others.append((c, names[c], f))
            if plain:
                src, dest = (np.array(v, dtype=np.intp) for v in zip(*plain))
                self.numbers.append((b, src, dest, _through_float64(block.dtype, dtype)))
        self.hashed.sort()

    def read(self, X, out: np.ndarray) -> list:
        blocks = X._mgr.blocks
        for b, src, dest, via in self.numbers:
            values = blocks[b].values
            out[:, dest] = (values[src].astype(np.float64) if via else values[src]).T
        for column, name, feature in self.others:
            out[:, feature] = pandas_column(X.iloc[:, column], name, None)
        return [(f, blocks[b].values if i is None else blocks[b].values[i]) for f, b, i in self.hashed]


def _nullable_number(dtype) -> bool:
    """Whether a pandas extension dtype holds numbers or booleans with pd.NA missing (Int64,
    Float64, boolean, Arrow-backed numbers)."""
    import pandas as pd

    kind = getattr(dtype, "kind", "O")
    return kind in "biuf" and pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)


# ------------------------------------------------------------------ polars
class _PolarsPlan:
    """A polars frame of these column names: where every column is a number, one ``to_numpy``
    (its result's dtype tells a schema that changed since); else column by column, Enum and
    Categorical columns through their code tables (kept by dtype)."""

    def __init__(self, X, names: tuple, memory: SchemaMemory):
        forest = memory.forest
        # polars names a frame built from an array column_0, column_1, ...: no names given.
        given = None if list(names) == [f"column_{i}" for i in range(len(names))] else names
        self.order = np.array(_order(given, forest), dtype=np.intp)
        self.identity = self.order.tolist() == list(range(len(names)))
        self.names, self.labels = names, memory.labels
        self.dtypes = tuple(X.dtypes)
        self.kinds = _polars_kinds(X)
        self.numeric = all(d.is_numeric() for d in self.dtypes) and not memory.labels
        # A few rows are read as Python values (:meth:`_few_rows`) where every feature is a number
        # column, or a column of labels (Enum, Categorical, String) the model has codes for:
        # (column, the model's label -> code dict or None) a feature, in the model's order.
        self.few = []
        for f, c in enumerate(self.order.tolist()):
            kind, labels = type(self.dtypes[c]).__name__, memory.labels.get(f)
            if labels is None and self.dtypes[c].is_numeric() and kind != "Decimal":
                self.few.append((c, None))
            elif labels is not None and kind in ("Enum", "Categorical", "String", "Utf8"):
                self.few.append((c, labels._lookup()))
            else:
                self.few = None
                break
        self.few_labels = [(f, memory.labels[f], names[self.order[f]]) for f in range(len(self.order))
                           if self.few is not None and self.few[f][1] is not None]
        self.categorical = {f: _Categorical(f, names[c], memory.labels.get(f)) for f, c in enumerate(self.order)
                            if type(self.dtypes[c]).__name__ in ("Enum", "Categorical")}
        # The plain number columns, read at once: their positions and the features they hold.
        plain = [(f, c) for f, c in enumerate(self.order.tolist())
                 if self.dtypes[c].is_numeric() and f not in memory.labels]
        self.plain = ([c for _, c in plain], np.array([f for f, _ in plain], dtype=np.intp)) if plain else None

    def rows(self, X, dtype: np.dtype, memory: SchemaMemory) -> np.ndarray:
        if self.few is not None and X.height <= FEW_POLARS_ROWS:
            values = self._few_rows(X)
            if values is not None:
                return values if values.dtype == dtype else values.astype(dtype)
        if self.numeric:
            # (polars copies its columns side by side: C order transposes them, cheaper below a
            # few thousand rows, dearer above; the kernels read either by their strides)
            values = X.to_numpy(order="c" if X.height < POLARS_C_ORDER_ROWS else "fortran")
            if values.dtype.kind in "biuf":
                if not self.identity:
                    values = values.take(self.order, axis=1)
                if _through_float64(values.dtype, dtype):
                    values = values.astype(np.float64)
                return values if values.dtype == dtype else values.astype(dtype)
        if self.numeric or _polars_kinds(X) != self.kinds:
            # another schema under the same names: a plan for it, in this one's place
            plan = _PolarsPlan(X, self.names, memory)
            memory.replace(("polars", self.names), plan)
            return plan._columns(X, dtype)
        return self._columns(X, dtype)

    def _few_rows(self, X) -> np.ndarray | None:
        """A few rows as Python values (polars' own copies cost 5-17 us a call however few rows,
        a categorical column's 10 more): (n, features) float64, numbers as they are (through
        float64, as the column readers convert them; a null is NaN, the missing value), labels
        through the model's codes (an unseen one missing, or refused where its library refuses
        it).  None where a value is not of its plan's kind: another schema under these names,
        read the general way."""
        raw = X.rows()
        if not self.few_labels:  # numbers only: converted in one call
            if not set(map(type, itertools.chain.from_iterable(raw))) <= _NUMBER_OR_NULL:
                return None
            values = np.array(raw, dtype=np.float64).reshape(len(raw), -1)  # (a null: None, read as NaN)
            return values if self.identity else values.take(self.order, axis=1)
        out = []
        for row in raw:
            read = []
            for c, lookup in self.few:
                v = row[c]
                if v is None:
                    read.append(np.nan)
                elif lookup is None:
                    if type(v) is not float and type(v) is not int:
                        return None
                    read.append(v)
                elif type(v) is str:
                    read.append(lookup.get(v, -1.0))
                else:
                    return None
            out.append(read)
        values = np.array(out, dtype=np.float64).reshape(len(raw), len(self.few))
        for f, labels, name in self.few_labels:
            column = values[:, f]
            labels.unseen(column, column == -1.0, name)
        return values

    def _columns(self, X, dtype: np.dtype) -> np.ndarray:
        out = np.empty((X.height, len(self.order)), dtype=dtype)
        done = ()
        if self.plain is not None:
            columns, done = self.plain
            # polars' own columns (private X._df: no Series made a column; 24: 7 us, Series 26 us)
            try:
                series = X._df.get_columns()
                values = np.array([series[c].to_numpy(writable=False, allow_copy=True) for c in columns]).T
            except (AttributeError, TypeError):
                values = np.array([X.to_series(c).to_numpy() for c in columns]).T
            if values.dtype.kind in "biuf":  # (else a polars that converts otherwise: by column)
                out[:, done] = values.astype(np.float64) if _through_float64(values.dtype, dtype) else values
            done = set(done.tolist()) if values.dtype.kind in "biuf" else ()
        for feature, column in enumerate(self.order.tolist()):
            if feature in done:
                continue
            s = X.to_series(column)
            reading = self.categorical.get(feature)
            if reading is not None and (reading.labels is not None or type(s.dtype).__name__ == "Enum"):
                out[:, feature] = _dictionary_codes(s.to_arrow(), reading)
            else:
                out[:, feature] = polars_column(s, self.names[column], self.labels.get(feature))
        return out


def _polars_kinds(X):
    """A polars frame's dtypes as its plan depends on them: their names (``f64``, ``enum``...; an
    Enum's categories are checked at each call), made without a dtype object a column (an Enum's
    holds its categories: 40 us of a 64-row call of four Enums), else the dtypes."""
    names = getattr(getattr(X, "_df", None), "dtype_strings", None)
    return tuple(names()) if names is not None else tuple(X.dtypes)


# ------------------------------------------------------------------ pyarrow
class _ArrowKey:
    """An arrow schema as a key: equal to another of equal fields (hashing a schema took 10 us
    and listing its names 4 us: its length is the hash, ``equals`` decides)."""

    __slots__ = ("schema", "hash")

    def __init__(self, schema):
        self.schema = schema
        self.hash = len(schema)

    def __hash__(self):
        return self.hash

    def __eq__(self, other):
        return isinstance(other, _ArrowKey) and (other.schema is self.schema or other.schema.equals(self.schema))


class _ArrowPlan:
    """A pyarrow Table of one schema: numeric columns as one tensor where arrow makes one,
    dictionary columns through their code tables, anything else through the column reader."""

    def __init__(self, X, memory: SchemaMemory):
        import pyarrow as pa

        names = list(X.column_names)
        self.order = _order(names, memory.forest)
        self.labels = memory.labels
        self.names = names
        self.width = memory.forest.num_features
        types = [X.schema.field(i).type for i in range(len(names))]
        plain = [(f, c) for f, c in enumerate(self.order)
                 if (pa.types.is_integer(types[c]) or pa.types.is_floating(types[c])) and f not in memory.labels]
        # The plain number columns, read as one tensor: their positions in the features' order, the
        # features, and whether they are the whole table as it is (nothing to select).
        self.tensor = None
        if plain and hasattr(pa.RecordBatch, "to_tensor"):
            columns = [c for _, c in plain]  # (selected by position: by name took twice as long)
            dest = np.array([f for f, _ in plain], dtype=np.intp)
            self.tensor = (columns, dest, columns == list(range(len(names))), dest.tolist() == list(range(self.width)))
        in_tensor = set() if self.tensor is None else set(self.tensor[1].tolist())
        self.categorical = {f: _Categorical(f, names[c], memory.labels.get(f)) for f, c in enumerate(self.order)
                            if pa.types.is_dictionary(types[c])}
        self.others = [f for f in range(len(self.order)) if f not in self.categorical and f not in in_tensor]

    def rows(self, X, dtype: np.dtype) -> np.ndarray:
        n = X.num_rows
        if self.tensor is not None and n >= ARROW_BY_COLUMN_ROWS:
            # Column by column into rows in column order (the kernels read rows by their
            # strides): arrow's tensor with nulls made NaN took 230 us for 4096 rows of 28 columns.
            columns, dest = self.tensor[0], self.tensor[1]
            out = np.empty((self.width, n), dtype=dtype).T
            for column, feature in zip(columns, dest.tolist()):
                values = X.column(column).to_numpy()  # (a float column's nulls: NaN; an integer one's: float64)
                out[:, feature] = values.astype(np.float64) if _through_float64(values.dtype, dtype) else values
        elif self.tensor is not None and n:
            columns, dest, same, every = self.tensor
            table = X if same else X.select(columns)
            batches = table.to_batches()
            if len(batches) != 1:
                batches = table.combine_chunks().to_batches()
            values = np.asarray(batches[0].to_tensor(null_to_nan=True, row_major=True))
            if _through_float64(values.dtype, dtype):
                values = values.astype(np.float64)
            if every:  # every feature a plain number column
                return values if values.dtype == dtype else values.astype(dtype)
            out = np.empty((n, self.width), dtype=dtype)
            out[:, dest] = values
        else:
            out = np.empty((n, self.width), dtype=dtype)
            if self.tensor is not None:
                out[:, self.tensor[1]] = np.nan
        for feature, reading in self.categorical.items():
            out[:, feature] = _dictionary_codes(X.column(self.order[feature]), reading)
        for feature in self.others:
            out[:, feature] = arrow_column(X.column(self.order[feature]), self.names[self.order[feature]],
                                           self.labels.get(feature))
        return out


def _dictionary_codes(col, reading: _Categorical) -> np.ndarray:
    """An arrow dictionary column's codes in the model's terms, through ``reading``'s table."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    dictionary = col.dictionary
    indices = col.indices
    if indices.null_count:
        indices = pc.fill_null(indices, -1) if pa.types.is_signed_integer(indices.type) else \
            pc.fill_null(pc.cast(indices, pa.int64()), -1)
    own = indices.to_numpy(zero_copy_only=False)
    table = reading.table(_ArrowLabels(dictionary))
    return table.codes(own.astype(np.intp, copy=False), reading.labels, reading.name)


class _ArrowLabels:
    """A dictionary's labels as a list for :meth:`Labels.table`, compared with ``equals``."""

    __slots__ = ("dictionary",)

    def __init__(self, dictionary):
        self.dictionary = dictionary

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.dictionary.to_pylist(), dtype=object)

    def __len__(self):
        return len(self.dictionary)

    def equals(self, other) -> bool:
        return isinstance(other, _ArrowLabels) and self.dictionary.equals(other.dictionary)


__all__ = ["FRAME_LIBRARIES", "SCHEMAS", "SchemaMemory", "frame_rows", "hashed_frame_columns", "numbers_as_labels"]

"""Arrow tables read by the plan of their schema (:mod:`silvanforge.inputs.frames` says why):
where every feature is a number or dictionary column, all at once by the C++ reader
(:mod:`silvanforge.inputs.arrow_native`) once it is built; else, and until then, number columns
as one tensor or column by column, dictionary columns through their code tables (which the C++
reader is then given).  And an arrow dictionary column's codes in the model's terms, which
polars' Enum and Categorical columns are read by too."""

from __future__ import annotations

import functools
import threading

import numpy as np

from silvanforge.inputs import arrow_native
from silvanforge.inputs.columns import arrow_column, check_dictionary_indices
from silvanforge.inputs.host_kernels import first_kernel
from silvanforge.inputs.schemas import (COLUMN_ORDER_ROWS, CategoryReading, SchemaMemory, as_slice, feature_order,
                                        numeric_features, through_float64)

# Rows from which an arrow table's number columns are read one by one (by the target's kernel
# where there is one), not as one tensor: the kernel's call costs about what a tensor of 256
# rows of 28 float32 columns does, and 35 us against 125 at 1024 rows.
ARROW_BY_COLUMN_ROWS = 512

# The target's kernel of arrow number columns as read here: its args block, and the words of
# the C data interface's struct ArrowArray.
ARG_LAYOUT = ("batch", "count", "columns", "features", "kinds", "out", "row_stride", "column_stride")
ARROW_ARRAY_WORDS = 10


class ArrowKey:
    """An arrow schema as a key: equal to another of equal fields (hashing a schema took 10 us
    and listing its names 4 us: its length is the hash, ``equals`` decides)."""

    __slots__ = ("schema", "hash")

    def __init__(self, schema):
        self.schema = schema
        self.hash = len(schema)

    def __hash__(self):
        return self.hash

    def __eq__(self, other):
        return isinstance(other, ArrowKey) and (other.schema is self.schema or other.schema.equals(self.schema))


class ArrowPlan:
    """A pyarrow Table of one schema: numeric columns as one tensor where arrow makes one (from
    :data:`ARROW_BY_COLUMN_ROWS` rows, copied by the target's kernel of arrow columns),
    dictionary columns through their code tables, anything else through the column reader."""

    def __init__(self, X, memory: SchemaMemory):
        import pyarrow as pa

        names = list(X.column_names)
        self.order = feature_order(names, memory.forest)
        self.labels = memory.labels
        self.names = names
        self.width = memory.forest.num_features
        types = [X.schema.field(i).type for i in range(len(names))]
        # (half floats, which arrow's tensors and casts refuse, are read by their column's NumPy copy)
        plain = [(f, c) for f, c in enumerate(self.order)
                 if (pa.types.is_integer(types[c]) or pa.types.is_floating(types[c]) and not pa.types.is_float16(types[c]))
                 and f not in memory.labels]
        # The plain number columns, read as one tensor: their positions in the features' order, the
        # features, and whether they are the whole table as it is (nothing to select).
        self.tensor = None
        if plain and hasattr(pa.RecordBatch, "to_tensor"):
            columns = [c for _, c in plain]  # (selected by position: by name took twice as long)
            dest = np.array([f for f, _ in plain], dtype=np.intp)
            self.tensor = (columns, dest, columns == list(range(len(names))), dest.tolist() == list(range(self.width)),
                           as_slice(dest))
        # The same columns as the target's kernel reads them: their positions, features and
        # types' names (their kinds of the kernel's found at the first call it answers).
        self.native = None if self.tensor is None or not hasattr(pa.RecordBatch, "_export_to_c") else (
            np.array(self.tensor[0], dtype=np.int64), self.tensor[1].astype(np.int64),
            [str(types[c]) for _, c in plain])
        in_tensor = set() if self.tensor is None else set(self.tensor[1].tolist())
        self.number_features = numeric_features(memory.forest)
        self.categorical = {f: CategoryReading(f, names[c], memory.labels.get(f), f in self.number_features)
                            for f, c in enumerate(self.order)
                            if pa.types.is_dictionary(types[c])}
        self.others = [f for f in range(len(self.order)) if f not in self.categorical and f not in in_tensor]
        # The table as the C++ reader reads it (arrow_native): its number and dictionary columns
        # by arrow's type ids, where it reads every feature's column; made its plan at first use.
        self.direct = None
        self._matches = None  # (the C++ reader's ``matches``, once the plan is its)
        self.direct_read = None  # (and its ``read``: a few rows' call goes straight to it, frames._arrow_rows)
        numbers, indices, labels = direct_types()
        # Number columns on features whose labels are numbers (pandas' integer categories, which
        # polars and arrow hold as plain integers): read by the C++ reader as labels too.
        self.labelled = [(f, self.order[f]) for f in self.others if types[self.order[f]].id in numbers
                         and memory.labels.get(f) is not None and memory.labels[f].exact_numbers() is not None]
        # String columns on features whose labels are strings (JSON rows made a table, polars'
        # String): each value looked up among the labels by the C++ reader.
        self.strings = [(f, self.order[f]) for f in self.others if types[self.order[f]].id in string_types()
                        and memory.labels.get(f) is not None and memory.labels[f].strings]
        # Columns of nulls alone (records missing a value in every row given make them): missing.
        self.nulls = [(f, self.order[f]) for f in self.others if pa.types.is_null(types[self.order[f]])]
        if len(self.labelled) + len(self.strings) + len(self.nulls) == len(self.others) and all(
                types[c].id in numbers for _, c in plain) and all(
                types[self.order[f]].index_type.id in indices
                and types[self.order[f]].value_type.id in labels for f in self.categorical):
            self.direct = ([(c, f, types[c].id) for f, c in plain + self.nulls],
                           [(self.order[f], f, types[self.order[f]].index_type.id, types[self.order[f]].value_type.id)
                            for f in self.categorical],
                           [(name, t.id, t.index_type.id if pa.types.is_dictionary(t) else -1,
                             t.value_type.id if pa.types.is_dictionary(t) else -1) for name, t in zip(names, types)],
                           [(c, f, types[c].id) for f, c in self.labelled],
                           [(c, f, types[c].id) for f, c in self.strings])

    def matches(self, X) -> bool:
        """Whether table ``X`` has this plan's columns (names and kinds), as the C++ reader tells
        (False where it is not ready): a request's table holds a new schema, whose ``equals``
        first computes arrow's fingerprint of it (10 us for 28 columns)."""
        matches = self._matches
        return matches is not None and matches(self.direct, X)

    def _read_direct(self, X, n: int, dtype: np.dtype) -> np.ndarray | None:
        """The rows as the C++ reader writes them, or None where it is not ready, the table
        is not of the plan's kinds or it leaves the table to the Python reader (a dictionary
        it was not given codes of, a category the model refuses: the Python reader raises)."""
        module = arrow_native.reader()
        if module is None or dtype not in _DIRECT_DTYPES:
            return None
        direct = self.direct
        if isinstance(direct, tuple):  # (the columns: the module's plan of them now)
            direct = self.direct = module.plan(self.width, *direct)
            self._matches, self.direct_read = module.matches, module.read
            self._give_label_codes(module)
        out = np.empty((self.width, n), dtype=dtype).T if n >= COLUMN_ORDER_ROWS else np.empty((n, self.width), dtype)
        return None if module.read(direct, X, out) else out

    def _give_label_codes(self, module) -> None:
        """The model's string labels of each dictionary column, by which the C++ reader reads a
        dictionary of other labels than the last one registered (polars' Categorical columns
        and tables encoded for each request hold the labels they use, in their own order), and
        the number labels of each labelled number column."""
        for k, reading in enumerate(self.categorical.values()):
            labels = reading.labels
            if labels is not None and labels.strings:
                module.set_label_codes(self.direct, k, labels.labels, labels.unseen_error)
        for k, (f, _) in enumerate(self.labelled):
            labels = self.labels[f]
            module.set_number_codes(self.direct, k, labels.exact_numbers(), labels.unseen_error)
        for k, (f, _) in enumerate(self.strings):
            labels = self.labels[f]
            module.set_string_codes(self.direct, k, labels.labels, labels.unseen_error)

    def ready(self) -> bool:
        """Whether the C++ reader reads tables of this plan (its plan made, at the first read)."""
        return self.direct is not None and not isinstance(self.direct, tuple)

    def _give_codes(self) -> None:
        """The C++ reader's codes of each dictionary column: those the Python reader made last."""
        module = arrow_native.reader()
        if module is None or isinstance(self.direct, tuple):
            return
        for k, reading in enumerate(self.categorical.values()):
            table = reading.last
            if table is not None and isinstance(table.source, _ArrowLabels):
                module.set_labels(self.direct, k, table.source.dictionary, table.lut, table.unseen)

    def rows(self, X, dtype: np.dtype, direct: bool = True) -> np.ndarray:
        """``X``'s rows (``direct``: the C++ reader asked first; not where it has just left them)."""
        n = X.num_rows
        if direct and self.direct is not None:
            out = self._read_direct(X, n, dtype)
            if out is not None:
                return out
        source = X  # (where the dictionary columns are read from: the one batch of a few rows)
        if self.tensor is not None and n >= ARROW_BY_COLUMN_ROWS:
            # Column by column into rows in column order (the kernels read rows by their
            # strides): arrow's tensor with nulls made NaN took 230 us for 4096 rows of 28 columns.
            out = self._native(X, n, dtype) if self.native is not None else None
            if out is None:  # (no kernel: arrow's conversion a column)
                columns, dest = self.tensor[0], self.tensor[1]
                out = np.empty((self.width, n), dtype=dtype).T
                for column, feature in zip(columns, dest.tolist()):
                    values = X.column(column).to_numpy()  # (a float column's nulls: NaN; an integer one's: float64)
                    out[:, feature] = values.astype(np.float64) if through_float64(values.dtype, dtype) else values
        elif self.tensor is not None and n:
            columns, _, same, every, dest = self.tensor
            # (a batch's tensor: a Table's own took 21 us for a table made anew, as a request's
            # is; the batch's columns selected, not the table's: 1 us sooner)
            batches = X.to_batches()
            if len(batches) != 1:
                batches = X.combine_chunks().to_batches()
            source = batches[0]  # (a batch's dictionary column: 1.2 us, a table's 2.0)
            batch = source if same else source.select(columns)
            values = batch.to_tensor(null_to_nan=True, row_major=True).to_numpy()
            if values.dtype.kind != "f" and through_float64(values.dtype, dtype):
                values = values.astype(np.float64)
            if every:  # every feature a plain number column
                # (NumPy's own dtype instance, which the lean path for a few rows checks with ``is``:
                # a tensor's to_numpy gives an equal one that is not)
                return values if values.dtype is dtype else values.astype(dtype)
            out = np.empty((n, self.width), dtype=dtype)
            out[:, dest] = values
        else:
            out = np.empty((n, self.width), dtype=dtype)
            if self.tensor is not None:
                out[:, self.tensor[1]] = np.nan
        at = 0 if n == 1 else slice(None)  # (a row's value set as an item: a slice's costs 0.4 us more)
        for feature, reading in self.categorical.items():
            out[at, feature] = dictionary_codes(source.column(self.order[feature]), reading)
        for feature in self.others:
            out[:, feature] = arrow_column(X.column(self.order[feature]), self.names[self.order[feature]],
                                           self.labels.get(feature), feature in self.number_features)
        if self.categorical and self.direct is not None:
            self._give_codes()
        return out

    def _native(self, X, n: int, dtype: np.dtype) -> np.ndarray | None:
        """Rows in column order (as the kernels read them fast: by their strides) with the plain
        number columns written by the target's kernel
        (:meth:`silvanforge.target.Target.arrow_columns_kernel`) batch by batch, or None where
        there is none, it does not read a column's type (half floats) or the rows are not of floats."""
        kernel = columns_kernel()
        if kernel is None or dtype not in (np.float32, np.float64):
            return None
        columns, features, kinds = self.native
        if isinstance(kinds, list):  # (the types' names: their kinds of the kernel's now)
            if not all(k in kernel.kinds for k in kinds):
                self.native = None
                return None
            kinds = np.array([kernel.kinds[k] for k in kinds], dtype=np.int8)
            self.native = (columns, features, kinds)
        out = np.empty((self.width, n), dtype=dtype).T
        exported = np.zeros(ARROW_ARRAY_WORDS, dtype=np.int64)  # (this call's: threads each have theirs)
        args = np.array([exported.ctypes.data, len(columns), columns.ctypes.data, features.ctypes.data,
                         kinds.ctypes.data, 0, 1, n], dtype=np.int64)
        row = 0
        for batch in X.to_batches():
            if batch.num_rows:
                batch._export_to_c(exported.ctypes.data)  # (the kernel releases it)
                args[5] = out.ctypes.data + row * out.itemsize
                kernel.run(args.ctypes.data, out.itemsize)
                row += batch.num_rows
        return out


@functools.cache
def direct_types() -> tuple:
    """What the C++ reader reads, as arrow's type ids: number columns' types, dictionaries' index
    types and their labels' types."""
    import pyarrow as pa

    def ids(*types):
        return frozenset(t.id for t in types)

    ints = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())
    # (string views: polars' strings, and so its Enum and Categorical labels, as it exports them)
    views = tuple(getattr(pa, name)() for name in ("string_view", "binary_view") if hasattr(pa, name))
    return (ids(*ints, pa.float32(), pa.float64()), ids(*ints),
            ids(*ints, pa.float32(), pa.float64(), pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
                *views))


@functools.cache
def string_types() -> frozenset:
    """The arrow type ids of string columns the C++ reader reads as labels (views: polars')."""
    import pyarrow as pa

    return frozenset(getattr(pa, name)().id for name in ("string", "large_string", "string_view") if hasattr(pa, name))


FLOAT32, FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)
_DIRECT_DTYPES = (FLOAT32, FLOAT64)


def columns_kernel(wait: bool = False):
    """The installed targets' kernel of arrow number columns, or None.  Why not at once: it is
    compiled once a process (0.3-0.9 s where no model was compiled in it), which would cost a
    process's first large table far more than the kernel saves it (about 0.1 ms a 4096-row
    call), so the first asking starts the compile on a thread of its own and calls are answered
    by arrow's own conversions until it is ready (``wait``: until it is, for tests)."""
    if not _FOUND:
        with _LOCK:
            if _COMPILE is None:
                globals()["_COMPILE"] = threading.Thread(target=_compile, name="arrow-columns-kernel", daemon=True)
                _COMPILE.start()
        if wait:
            _COMPILE.join()
    return _FOUND[0] if _FOUND else None


def _compile() -> None:
    _FOUND.append(first_kernel(lambda target, name: _checked(target.arrow_columns_kernel()))[0])


def _checked(kernel):
    return kernel if kernel is not None and tuple(kernel.arg_layout) == ARG_LAYOUT else None


_FOUND: list = []  # (columns_kernel's kernel, once compiled)
_LOCK = threading.Lock()
_COMPILE: threading.Thread | None = None  # (the thread compiling it, once started)


def dictionary_codes(col, reading: CategoryReading, checked: bool = False) -> np.ndarray | float:
    """An arrow dictionary column's codes in the model's terms, through ``reading``'s table (of
    a column of one row, its code).  ``checked``: its indices are known to lie in its dictionary
    (polars' own columns); else one outside it is refused (arrow's unchecked arrays)."""
    if hasattr(col, "num_chunks"):  # (a ChunkedArray)
        col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    dictionary = col.dictionary
    table = reading.last
    # (the last table's dictionary compared here: no wrapper made a call where it is the same)
    if table is None or not isinstance(table.source, _ArrowLabels) or not table.source.dictionary.equals(dictionary):
        table = reading.table(_ArrowLabels(dictionary))
    if len(col) == 1:  # (one row: its index as a Python int, 0.3 us; as an array and back, 1.2)
        own = col.indices[0].as_py()
        if own is None or 0 <= own < len(dictionary):
            return table.code(-1 if own is None else own, reading.labels, reading.name)
        check_dictionary_indices(np.array([own]), len(dictionary), reading.name)
    own = col.indices.to_numpy(zero_copy_only=False)
    if own.dtype.kind == "f":  # nulls: arrow gives float64 with NaN (pyarrow.compute's fill_null
        # and cast took 6-13 us a column, this 1-2)
        present = own == own
        if not checked:
            check_dictionary_indices(own[present], len(dictionary), reading.name)
        own = np.where(present, own, -1.0).astype(np.intp)
    elif not checked and len(own) and int(own.astype(np.int64).view(np.uint64).max()) >= len(dictionary):
        # (every index in one comparison of unsigned values, a negative one past any size: min
        # and max took 2 us a column of 64 rows)
        check_dictionary_indices(own, len(dictionary), reading.name)
    return table.codes(own, reading.labels, reading.name)  # (``take`` reads indices of any integer type)


class _ArrowLabels:
    """A dictionary's labels as a list for :meth:`Labels.table`, compared with ``equals``."""

    __slots__ = ("dictionary",)

    def __init__(self, dictionary):
        self.dictionary = dictionary

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.dictionary.to_pylist(), dtype=object)

    def __len__(self):
        return len(self.dictionary)

    def __getitem__(self, i: int):  # (a refused label, named by its error)
        return self.dictionary[i].as_py()

    def equals(self, other) -> bool:
        return isinstance(other, _ArrowLabels) and self.dictionary.equals(other.dictionary)


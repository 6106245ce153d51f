"""What the plans of data frames share (:mod:`silvanforge.inputs.frames` for pandas,
:mod:`silvanforge.inputs.polars_frames`, :mod:`silvanforge.inputs.arrow_frames`): the
:class:`SchemaMemory` a compiled model keeps them in, which column holds which feature, how
numbers convert, and a categorical column's reading (its table of the last categories seen)."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from silvanforge.inputs import arrow_native
from silvanforge.inputs.columns import CodeTable, Labels, column_order
from silvanforge.inputs.records import record_readers
from silvanforge.ir.hir import Forest
from silvanforge.plan.memo import memoised

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
        # (polars' list of names, the plan) of the last polars frame, likewise (frames._polars_rows),
        # and (the schema, the plan) of the last arrow table
        self.polars_last: tuple = (None, None)
        self.arrow_last: tuple = (None, None)
        self.pandas_blocks_last = None  # the plan of the last pandas frame read in one walk (pandas_frames.pandas_rows)
        self.pandas_block_last = None  # ... and of the last frame of one block read as it lies
        self._names: dict = {}  # id(pandas columns Index) -> (the Index, its names)
        self._last_names: tuple = (None, None)  # (the last Index read, its names)
        self._lock = threading.Lock()
        self._hashing = None
        self._readers = None  # how a record's values are read (silvanforge.inputs.records)
        self._numeric = None  # (numeric_features of the model, once)
        categories = forest.feature_categories or {}
        self.labels = {f: Labels(v, forest.unseen_category_error) for f, v in categories.items()}

    def __len__(self) -> int:
        return len(self._plans)

    def numeric(self) -> frozenset:
        """:func:`numeric_features` of the model, worked out at first use (a scan of every tree:
        1.4 ms for CatBoost's 500, which a call reading its columns one by one paid each time)."""
        found = self._numeric
        if found is None:
            found = self._numeric = numeric_features(self.forest)
        return found

    def record_readers(self):
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
            self._last = self.polars_last = self.arrow_last = (None, None)
            self.pandas_blocks_last = self.pandas_block_last = None

    def names(self, columns) -> tuple:
        """A pandas frame's column names; an Index is immutable, so its names are kept by the
        object (reading 28 Arrow-backed names took 4 us)."""
        hit = self._names.get(id(columns))
        if hit is not None and hit[0] is columns:
            return hit[1]
        last, names = self._last_names
        if last is columns:
            return names
        if last is not None and _same_labels(last, columns):  # (a frame made anew a request: 1 us, not 4)
            # (this Index the last from now on: called again with it, as with a frame of records,
            # whose names another frame's Index held first, it is not compared again)
            self._last_names = (columns, names)
            return names
        names = tuple(columns.tolist())
        with self._lock:
            if len(self._names) >= self.size:
                self._names.clear()
            self._names[id(columns)] = (columns, names)  # the Index held: its id is not reused
        self._last_names = (columns, names)
        return names



def numeric_features(forest: Forest) -> frozenset:
    """The features the model reads as numbers: split on by a threshold, never by categories,
    and without category labels (a categorical column on one is read by its categories'
    values, :meth:`CodeTable.values`).  Made once a forest."""
    def find():
        split, categorical = set(), set(forest.feature_categories or ())
        for t in forest.trees:
            split.update(t.feature[t.left >= 0].tolist())
            if t.categories:
                categorical.update(t.feature[list(t.categories)].tolist())
        return frozenset(split - categorical)
    return memoised(forest, "numeric_features", find)


def feature_order(names, forest: Forest) -> list[int]:
    return column_order(None if names is None else list(names), forest)


def through_float64(dtype: np.dtype, out: np.dtype) -> bool:
    """Whether numbers of ``dtype`` are converted to ``out`` through float64, as the column path
    reads them (a 64-bit integer rounds twice that way, and may differ from one rounding)."""
    return dtype.kind in "iu" and dtype.itemsize == 8 and out != np.float64


# Rows up to which columns written side by side into rows go through a slice (:func:`as_slice`):
# NumPy copies a transposed block through a slice sooner for a few rows (64: 1.0 us against 1.6)
# and later from a few hundred (4096 float32 rows of 24 columns: 71 us against 54; its loop order).
SLICED_ROWS = 256


# Rows from which rows written column by column are laid out in column order (:func:`column_rows`;
# 4096 rows of a frame of 24 number and 4 categorical columns: 2-5% sooner, 1024 rows 2-4% later).
COLUMN_ORDER_ROWS = 2048


def column_rows(n: int, width: int, dtype: np.dtype) -> np.ndarray:
    """An empty (n, width) array of ``dtype`` for rows written column by column: in column order
    from :data:`COLUMN_ORDER_ROWS` rows (a column written is then one contiguous copy, and the
    kernels read rows by their strides), else in row order (which the lean path reads faster)."""
    if n >= COLUMN_ORDER_ROWS:
        return np.empty((width, n), dtype=dtype).T
    return np.empty((n, width), dtype=dtype)


def as_slice(positions: np.ndarray):
    """Positions as a slice where they are consecutive (a slice reads without an index array: a
    third of the time for a few rows), else as they are."""
    if len(positions) and (np.diff(positions) == 1).all():
        return slice(int(positions[0]), int(positions[-1]) + 1)
    return positions


class CategoryReading:
    """A categorical column's reading: its feature, name, the model's labels (or None) and the
    table of its last categories."""

    __slots__ = ("feature", "name", "labels", "last", "numeric")

    def __init__(self, feature, name, labels, numeric: bool = False):
        self.feature, self.name, self.labels, self.last = feature, name, labels, None
        self.numeric = numeric  # (the model reads the feature as a number: the categories' values)

    def table(self, categories) -> CodeTable:
        last = self.last
        if last is not None and last.source is categories:
            return last
        if last is not None and same_categories(last.source, categories):
            self.last = last = last.of(categories)  # (the frame called again: an identity next time)
            return last
        if self.labels is not None:
            table = self.labels.table(categories)
        elif self.numeric:
            table = CodeTable.values(categories, self.name)
        else:
            table = CodeTable.own(categories, len(categories))
        self.last = table
        return table


def same_categories(a, b) -> bool:
    """Whether categories ``a`` and ``b`` (pandas Indexes, or what has ``equals``) are the same
    labels in the same order."""
    same = _same_labels(a, b)
    if same is not None:
        return same
    equals = getattr(a, "equals", None)
    try:
        return bool(equals(b)) and len(a) == len(b) if equals is not None else False
    except Exception:  # noqa: BLE001 - categories that do not compare: another table
        return False


def _same_labels(a, b) -> bool | None:
    """``same_categories`` of two pandas Indexes of one dtype by the arrays they hold, or None
    (another kind: their ``equals`` decides).  Why: a frame built for each request holds its
    categories anew, and ``Index.equals`` took 2 us a column; the arrays compare in 0.2-0.4."""
    va, vb = getattr(a, "_values", None), getattr(b, "_values", None)
    if va is None or type(va) is not type(vb):
        return None
    arrow = getattr(va, "_pa_array", None)  # (pandas' strings held by arrow: pandas 3's own)
    if arrow is not None and hasattr(arrow, "equals"):
        # The arrays' values compared where arrow keeps them (the C++ reader of arrow columns:
        # arrow's ``equals`` and pandas' dtype comparison took 2.8 us a column of a new frame;
        # the arrow type decides, as the labels hold no missing value)
        module = arrow_native.reader()
        same = None if module is None else module.same_values(arrow, vb._pa_array)
        if same is not None:
            return same
        return getattr(a, "dtype", None) == getattr(b, "dtype", 0) and bool(arrow.equals(vb._pa_array))
    if getattr(a, "dtype", None) != getattr(b, "dtype", 0):
        return None
    if type(va) is np.ndarray and va.dtype == object:  # (labels as Python objects: equal as dict keys)
        return va.tolist() == vb.tolist()
    return None

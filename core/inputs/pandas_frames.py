"""pandas frames read by the plan of their schema (:mod:`silvanforge.inputs.frames` says why): a
frame's key (its names and blocks: each block's dtype and which columns it holds), its plan
(numeric blocks copied with one assignment each, categorical columns through their code
tables, Arrow-backed numbers and strings by the C++ reader of arrow columns, anything else
through the column readers), and the walk that reads a frame of the last plan's blocks in one
call of the C++ reader (:meth:`_PandasPlan.walk`).  Models with categories known by hash read
their frames' numbers here too (:func:`hashed_frame_columns`).
"""

from __future__ import annotations

import numpy as np

from silvanforge.errors import InputError
from silvanforge.inputs import arrow_native
from silvanforge.inputs.arrow_frames import FLOAT32, FLOAT64, direct_types, string_types
from silvanforge.inputs.columns import catboost_numbers, number_labels, object_column, pandas_column, pandas_na
from silvanforge.inputs.schemas import (SLICED_ROWS, CategoryReading, SchemaMemory, as_slice, column_rows,
                                        feature_order, numeric_features, through_float64)

# Rows of a pandas block made C-ordered (the lean path reads rows in order faster: 64 rows of 28
# float32 columns 0.6 us sooner with the copy; from about 1024 rows the copy costs what it saves,
# and larger calls read the block as it lies).
FEW_ROWS_CONTIGUOUS = 512


def pandas_rows(X, memory: SchemaMemory, dtype: np.dtype, tuples: bool):
    """A pandas frame's rows by the plan of its schema (:func:`silvanforge.inputs.frames.frame_rows`), or None."""
    block_plan = memory.pandas_block_last
    if block_plan is not None and type(X) is block_plan.frame_type:  # (one block of the last frame's, as a service sends)
        values = block_plan.block_rows(X, memory, dtype)
        if values is not None:
            return values
    last = memory.pandas_blocks_last
    if last is not None and type(X) is last.walked.frame_type:  # (the last frame's blocks, as a service sends)
        values = last.read_blocks(X, memory, dtype)
        if values is not None:
            return values
    key, arrays = _pandas_key_and_arrays(X, memory)
    if key is None:
        return None
    plan = memory.plan(key, lambda: _PandasPlan(X, memory, dtype))
    values = plan.rows(X, dtype, arrays)
    walked = plan.walked
    if walked is None and plan.walkable:
        # Blocks the C++ reader reads (NumPy numbers and objects, Arrow-backed numbers and strings,
        # categories): the next frame is checked against them and read in one walk
        # (:meth:`_PandasPlan.read_blocks`)
        walked = plan.walk(X, key[1])
    elif walked is not None and walked.categories:  # (read here: its categories' tables may be new)
        walked.register(arrow_native.reader())
    if walked is not None:
        memory.pandas_blocks_last = plan
    elif plan.block is not None and plan.frame_type is None:
        plan.one_block(X, key[1])
    if plan.frame_type:
        memory.pandas_block_last = plan
    return values


def _pandas_key(X, memory: SchemaMemory, kind: str = "pandas"):
    """The key of a pandas frame's schema (its names and blocks), or None: internals not read here."""
    return _pandas_key_and_arrays(X, memory, kind)[0]


def _pandas_key_and_arrays(X, memory: SchemaMemory, kind: str = "pandas"):
    """(the key of a pandas frame's schema, or None; the ChunkedArray of each block of Arrow-backed
    numbers, None for the others, where the blocks were walked in C++, else None)."""
    mgr = getattr(X, "_mgr", None)
    blocks = getattr(mgr, "blocks", None)
    if blocks is None or not hasattr(X, "columns"):
        return None, None
    if len(blocks) > PLACED_BLOCKS:
        # Many blocks (a frame of Arrow-backed columns holds one a column): those of Arrow-backed
        # numbers keyed by their arrow type and column in one C++ walk (silvanforge.inputs.arrow_native)
        module = arrow_native.reader()
        if module is not None:
            # (pandas' Categorical blocks known by their class there too: 3.4 us of a 12 us call)
            kinds, columns, arrays, others = module.arrow_blocks(blocks, _categoricals()[1])
            return (kind, memory.names(X.columns), kinds, columns,
                    tuple([(_dtype_token(blocks[i].dtype), _placement(blocks[i])) for i in others])), arrays
    return _pandas_key_of(X, mgr, blocks, memory, kind), None


def _pandas_key_of(X, mgr, blocks, memory: SchemaMemory, kind: str):
    # Which columns each block holds: the manager's block numbers and locations where pandas has
    # built them (a frame called again), else each block's own (see PLACED_BLOCKS)
    built = getattr(mgr, "_blknos", None) is not None
    if len(blocks) == 1:  # (a frame built from one array: which block each column is in goes without saying)
        return (kind, memory.names(X.columns), _dtype_token(blocks[0].dtype),
                mgr.blklocs.tobytes() if built else _placement(blocks[0]))
    # (NumPy's dtypes as they are and a categorical one by its class, without a call: a third of
    # the time of a frame's five blocks, 0.6 us against 1.8)
    categorical = _categoricals()[0]
    tokens = tuple([d if isinstance(d, np.dtype) else "category" if type(d) is categorical else _dtype_token(d)
                    for d in [b.dtype for b in blocks]])
    if len(blocks) <= PLACED_BLOCKS and not built:
        return kind, memory.names(X.columns), tokens, tuple([_placement(b) for b in blocks])
    return kind, memory.names(X.columns), tokens, mgr.blknos.tobytes(), mgr.blklocs.tobytes()


# Blocks up to which a pandas frame's key holds each block's columns (its placement) where pandas
# has not built the manager's block numbers and locations: it builds them at their first use,
# 2.9-4.2 us of a frame made for a request (from a dict, records or an array alike), against
# about 0.3 us a block; where it has, they are read (0.2 us).  A schema has a plan of each form
# at most.
PLACED_BLOCKS = 8


def _placement(block):
    """The frame's columns a block holds, as a key: a slice's (start, stop, step), else the bytes."""
    columns = block.mgr_locs.indexer
    return (columns.start, columns.stop, columns.step) if type(columns) is slice else columns.tobytes()


def _categoricals() -> tuple:
    """pandas' CategoricalDtype class and its Categorical (a categorical block's values), found
    once pandas' frames are read."""
    found = _CATEGORICALS
    if not found:
        import pandas as pd

        found.append((pd.CategoricalDtype, pd.Categorical))
    return found[0]


_CATEGORICALS: list = []


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
    # in any order): the plan checks its categories at each call instead.  An Arrow-backed dtype
    # of a primitive number type is that type's id, the one token each (a frame's ArrowDtypes are
    # new objects a column: their name took 0.5 us each, their hash 0.4, comparing them 0.1).
    if isinstance(dtype, np.dtype):
        return dtype
    arrow = _arrow_number_type(dtype)
    if arrow is not None:
        return _ARROW_TOKENS.get(arrow) or _ARROW_TOKENS.setdefault(arrow, ("arrow", arrow))
    return "category" if dtype.name == "category" else dtype


_ARROW_TOKENS: dict = {}  # an arrow type id -> its token (one tuple: keys compare by identity)


# ------------------------------------------------------------------ pandas
class _PandasPlan:
    """A pandas frame of one block layout: numeric blocks copied with one assignment each,
    categorical columns through their code tables, anything else through the column readers."""

    def __init__(self, X, memory: SchemaMemory, dtype: np.dtype):
        forest = memory.forest
        names = memory.names(X.columns)
        order = feature_order(names, forest)
        where = {column: feature for feature, column in enumerate(order)}
        self.width = forest.num_features
        self.number_features = numeric_features(forest)  # (a categorical column on one: its values)
        self.steps = []  # (kind, block index, what)
        self.arrow = []  # (block index, feature, arrow type id): Arrow-backed numbers, read at once
        self.strings = []  # (block index, feature, arrow type id, name): arrow strings on labelled features
        self.arrow_plan = None  # (their plan of the C++ reader's, made at first use)
        # What the C++ reader reads of NumPy blocks where it walks the frame (:meth:`walk`):
        # (block, [(row in the block, feature, the feature's number labels or None)]) and object
        # columns (block, row, feature, the feature's string labels or None); whether it walks
        # every block.
        self.numpy_reads, self.object_reads, self.walkable = [], [], True
        self.walked = None  # (the walk's :class:`_Walk`, once made: :meth:`read_blocks`)
        numeric = True
        for b, block in enumerate(X._mgr.blocks):
            columns = block.mgr_locs.as_array
            used = [(i, where[c]) for i, c in enumerate(columns) if c in where]
            if not used:
                continue
            bdtype = block.dtype
            if isinstance(bdtype, np.dtype) and bdtype.kind in "biuf" and block.ndim == 2:
                plain = [(i, f) for i, f in used if f not in memory.labels]
                walked = [(i, f, None) for i, f in plain]
                for i, f in used:
                    if f in memory.labels:  # numbers where the model has labels: read as labels,
                        # from the block's row (through a Series and pandas' object copy: 80 us a column)
                        self.steps.append(("labels", b, (i, names[columns[i]], f)))
                        numeric = False
                        exact = memory.labels[f].exact_numbers()  # (walked: looked up in C++)
                        walked.append((i, f, exact))
                        self.walkable = self.walkable and exact is not None
                if walked:
                    self.numpy_reads.append((b, walked))
                if plain:
                    src, dest = (np.array(v, dtype=np.intp) for v in zip(*plain))
                    # (src, dest, dest as a slice where it can be: for a few rows, and whether through float64)
                    via = through_float64(bdtype, dtype)
                    self.steps.append(("block", b, (as_slice(src), dest, as_slice(dest), via)))
                continue
            numeric = False
            for i, f in used:
                name = names[columns[i]]
                if getattr(bdtype, "name", None) == "category" and hasattr(block.values, "codes"):
                    self.steps.append(("category", b, CategoryReading(f, name, memory.labels.get(f),
                                                                      f in self.number_features)))
                elif block.values.ndim == 1 and f not in memory.labels and _nullable_number(bdtype):
                    # (an extension array is one column: Int64, Float64, boolean, Arrow-backed)
                    arrow = _arrow_number_type(bdtype)
                    if arrow is not None:
                        self.arrow.append((b, f, arrow))
                    else:
                        self.steps.append(("nullable", b, f))
                        self.walkable = False
                elif block.values.ndim == 1 and (strings := _arrow_strings(block.values, memory.labels.get(f))) is not None:
                    # strings held by arrow (pandas 3's str) where the labels are strings: looked
                    # up by the C++ reader (through pandas and Python 70 us a column of one row)
                    self.strings.append((b, f, strings, name))
                elif isinstance(bdtype, np.dtype) and bdtype.kind == "O" and block.ndim == 2:
                    # Python objects (labels, or numbers with None: records' frames) read from
                    # the block's row (a column as a Series took 7-28 us of pandas' checks)
                    self.steps.append(("object", b, (i, name, f)))
                    labels = memory.labels.get(f)
                    self.object_reads.append((b, i, f, None if labels is None else labels.labels))
                    self.walkable = self.walkable and (labels is None or labels.strings)
                else:
                    self.steps.append(("column", columns[i], (name, f)))
                    self.walkable = False
        self.labels = memory.labels
        # Every column a NumPy number: one conversion of the frame, in the model's order.
        self.order = np.array(order, dtype=np.intp) if numeric else None
        self.identity = numeric and order == list(range(len(names)))
        self.via = np.float64 if numeric and any(s[2][3] for s in self.steps) else dtype
        # One block holding the features in the model's order (a frame made from an array, or
        # from a dict of one dtype): its values are the rows, transposed, read with one copy
        # and not through DataFrame.to_numpy (1.5 us of a 5 us one-row call).
        self.block = None
        if numeric and len(self.steps) == 1 and self.via == dtype:
            _, at, (src, _, dest, _) = self.steps[0]
            if type(src) is slice and src == slice(0, self.width) and type(dest) is slice and dest == src:
                self.block = at
        # (one block read as it lies: no faster walked)
        self.walkable = self.walkable and self.block is None
        # Where it is one block: the frame type, names and block dtype by which the next frame is
        # known to be of this plan without its key (:meth:`block_rows`), once one was read.
        self.frame_type = self.names = self.block_dtype = None
        # The categorical columns (read apart: a row of them as Python scalars) and the other steps.
        self.categories = [(at, what) for kind, at, what in self.steps if kind == "category"]
        self.steps = [step for step in self.steps if step[0] != "category"]

    def one_block(self, X, names: tuple) -> None:
        """Remember what tells the next frames of this one-block plan (``X``, a frame it read, and
        its names) for :meth:`block_rows` (a frame of other blocks besides: ``frame_type`` False)."""
        blocks = X._mgr.blocks
        self.names, self.block_dtype = names, blocks[self.block].values.dtype
        self.frame_type = type(X) if len(blocks) == 1 else False  # (last: set, the plan is whole)

    def block_rows(self, X, memory: SchemaMemory, dtype: np.dtype) -> np.ndarray | None:
        """The rows of a frame of this one-block plan's names, block dtype and placement (every
        column in order), else None.  Its key took 1.5 us of a one-row call of 28 columns whose
        kernel takes 2; these checks, what the key tells of one block, 0.5."""
        blocks = X._mgr.blocks
        if len(blocks) != 1:
            return None
        block = blocks[0]
        values = block.values
        if values.dtype is not self.block_dtype and values.dtype != self.block_dtype:  # (an unpickled frame's: equal)
            return None
        names = memory.names(X.columns)
        if names is not self.names and names != self.names:
            return None
        # (pandas' Cython attribute behind the property mgr_locs: 0.05 us against 0.15)
        placement = getattr(block, "_mgr_locs", None)
        indexer = placement.indexer if placement is not None else block.mgr_locs.indexer
        if type(indexer) is not slice or indexer.start != 0 or indexer.stop != self.width or indexer.step != 1:
            return None
        return _block_rows(values, dtype)

    def rows(self, X, dtype: np.dtype, arrays: list | None = None) -> np.ndarray:
        """``arrays``: each block's ChunkedArray where it is one column of Arrow-backed numbers
        (None for the others), as :func:`_pandas_key_and_arrays` found them, else None."""
        if self.block is not None:
            return _block_rows(X._mgr.blocks[self.block].values, dtype)
        if self.order is not None:
            values = X.to_numpy(dtype=self.via)
            if not self.identity:
                values = values.take(self.order, axis=1)
            return values if values.dtype == dtype else values.astype(dtype)
        blocks = X._mgr.blocks
        out = column_rows(len(X), self.width, dtype)
        sliced = len(out) <= SLICED_ROWS
        for kind, at, what in self.steps:
            if kind == "block":
                src, dest, few, via = what
                values = blocks[at].values
                out[:, few if sliced else dest] = (values[src].astype(np.float64) if via else values[src]).T
            elif kind == "nullable":  # as the column reader converts them, pd.NA missing
                out[:, what] = blocks[at].values.to_numpy(dtype=np.float64, na_value=np.nan)
            elif kind == "object":
                i, name, feature = what
                out[:, feature] = object_column(blocks[at].values[i], name, self.labels.get(feature))
            elif kind == "labels":
                i, name, feature = what
                out[:, feature] = number_labels(blocks[at].values[i], name, self.labels[feature])
            else:
                name, feature = what
                out[:, feature] = pandas_column(_column(X, at), name, self.labels.get(feature),
                                                feature in self.number_features)
        if self.arrow or self.strings:
            self._arrow_columns(X, blocks, out, arrays)
        if self.categories:
            _category_columns(self.categories, blocks, out)
        return out

    def read_blocks(self, X, memory: SchemaMemory, dtype: np.dtype) -> np.ndarray | None:
        """The rows of a frame of this plan's names and blocks (:attr:`walked`), its blocks checked
        and read by the C++ reader in one walk (the key, which walks them too, and the read: one
        row of 28 columns 5.1 -> 4.0 us before the kernel); None where they are other blocks or it
        leaves them to the general reading."""
        walked = self.walked
        blocks = X._mgr.blocks
        module = arrow_native.reader()
        if len(blocks) != walked.block_count or module is None or not (dtype is FLOAT32 or dtype is FLOAT64) \
                or memory.names(X.columns) != walked.names:
            return None
        out = column_rows(len(X.index), self.width, dtype)  # (the index's length: DataFrame.__len__ a call more)
        left = []  # (the categorical columns of other categories than the walk's tables: read here)
        if module.read_blocks(walked.plan, blocks, walked.kinds, walked.columns, walked.categorical, out, np.ndarray,
                              walked.placements, left) != 0:
            return None
        if left:  # (with those read in Python, in the frame's order: the first column refused is named)
            _category_columns(sorted([walked.categories[k] for k in left] + walked.python_categories,
                                     key=lambda category: category[0]), blocks, out)
            walked.register(module)
        elif walked.python_categories:
            _category_columns(walked.python_categories, blocks, out)
        return out

    def walk(self, X, names: tuple):
        """The :class:`_Walk` by which the frames of this plan's blocks are read in one walk of the
        C++ reader (:meth:`read_blocks`), where it is ready and reads every block of ``X`` (a frame
        this plan has read); None where not (one row of a frame of records, a float, an object and
        4 str blocks: 9.0 -> 2.6 us before the kernel)."""
        module = arrow_native.reader()
        if module is None:
            return None  # (not yet: asked again at the next frame)
        blocks = X._mgr.blocks
        kinds, columns, placements = module.frame_blocks(blocks, _categoricals()[1], np.ndarray)
        labels = [v for _, _, _, v in self.object_reads if v is not None]
        if (np.frombuffer(kinds, dtype=np.int32) == -1).any() or not all(map(_utf8, labels)):
            self.walkable = False  # (a block it does not read, or a label no UTF-8 holds)
            return None
        # (a plan of its own, made whole before anyone reads by it: a plan made by two threads
        # at once is one of them, each configured)
        walked = self.walked = _Walk(X, names, kinds, columns, placements, self._new_native_plan(module), self,
                                     module)
        return walked

    def _native_plan(self, module):
        """The C++ reader's plan of this frame's Arrow-backed numbers and strings, made at first use."""
        plan = self.arrow_plan
        if plan is None:
            plan = self.arrow_plan = self._new_native_plan(module)
        return plan

    def _new_native_plan(self, module):
        """A C++ reader's plan of this frame's Arrow-backed numbers and strings (their column
        numbers their blocks'), their labels' codes given it."""
        plan = module.plan(self.width, self.arrow, [], None, [], [(b, f, t) for b, f, t, _ in self.strings])
        for k, (_, f, _, _) in enumerate(self.strings):
            module.set_string_codes(plan, k, self.labels[f].labels, self.labels[f].unseen_error)
        return plan

    def _arrow_columns(self, X, blocks, out: np.ndarray, arrays: list | None) -> None:
        """The Arrow-backed number columns and the arrow strings on labelled features, by the C++
        reader of arrow columns where it is ready (reading each through pandas took 3-40 us a
        column), else as the column reader converts them, pd.NA missing.  ``arrays``: each
        block's ChunkedArray where it is Arrow-backed numbers (None for the others), else read
        from the blocks here."""
        module = arrow_native.reader()
        if module is not None and out.dtype in (np.float32, np.float64):
            plan = self._native_plan(module)
            if arrays is None:
                arrays = [getattr(block.values, "_pa_array", None) for block in blocks]
            elif self.strings:  # (the walk gives the numbers' arrays alone)
                arrays = list(arrays)
                for b, _, _, _ in self.strings:
                    arrays[b] = getattr(blocks[b].values, "_pa_array", None)
            try:
                if module.read(plan, arrays, out) == 0:
                    return
            except TypeError:  # (a pandas that keeps its arrays otherwise)
                pass
        for b, f, _ in self.arrow:
            out[:, f] = blocks[b].values.to_numpy(dtype=np.float64, na_value=np.nan)
        for b, f, _, name in self.strings:  # (a label the model refuses: the column reader raises)
            out[:, f] = pandas_column(_column(X, blocks[b].mgr_locs.as_array[0]), name, self.labels[f],
                                      f in self.number_features)


class _Walk:
    """How the C++ reader walks the frames of a plan's blocks (:meth:`_PandasPlan.read_blocks`):
    the names and each block's kind, column and placement as the frame the plan was made for had
    them (the next frame's are checked against them), the reader's plan (its NumPy, object, arrow
    and categorical reads given it), and which categorical columns it reads, with the tables last
    given it, and which it leaves to Python."""

    def __init__(self, X, names, kinds, columns, placements, plan, frame: _PandasPlan, module):
        self.frame_type, self.names, self.block_count = type(X), names, len(X._mgr.blocks)
        self.kinds, self.columns, self.placements, self.plan = kinds, columns, placements, plan
        self.categorical = _categoricals()[1]  # (pandas' Categorical class, kept: not asked for at each call)
        blocks, walked = X._mgr.blocks, np.frombuffer(kinds, dtype=np.int32)
        # Categorical columns whose categories pandas holds as arrow strings or NumPy numbers,
        # where pandas keeps its codes and categories where the walk reads them: their codes
        # through the tables the plan made (:meth:`register`), compared by value (a request's
        # frame holds its categories anew: 2-3 us a column in Python)
        self.categories, self.python_categories = [], []
        for at, reading in frame.categories:
            held = getattr(reading.last.source if reading.last is not None else None, "_values", None)
            if _private_categorical(blocks[at].values) and (hasattr(held, "_pa_array") or (
                    type(held) is np.ndarray and held.dtype.kind in "iuf")):
                self.categories.append((at, reading))
            else:
                self.python_categories.append((at, reading))
        module.set_frame(plan, [(b, int(walked[b]), [(int(i), int(f), labels) for i, f, labels in reads])
                                for b, reads in frame.numpy_reads], frame.object_reads, pandas_na(),
                         [(at, reading.feature) for at, reading in self.categories])
        self.registered = [None] * len(self.categories)
        self.register(module)

    def register(self, module) -> None:
        """Give the C++ reader the tables of the categorical columns it reads where they changed
        since (a frame of other categories, read in Python, made new ones)."""
        for k, (_, reading) in enumerate(self.categories):
            table = reading.last
            if table is not None and table.lut is not self.registered[k]:
                module.set_categories(self.plan, k, table.source._values, table.lut, table.unseen)
                self.registered[k] = table.lut


def _block_rows(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The rows of a block holding the model's features in order (``values``: its (features, n)
    array), read only from here on.  The kernels read rows by their strides, so a large frame's
    block is read as it lies (column by column: no copy, as fast on the CPU target); a few rows
    are made C-ordered, which the lean path for few rows takes."""
    values = values.T
    if values.shape[0] <= FEW_ROWS_CONTIGUOUS:
        return np.ascontiguousarray(values, dtype=dtype)
    return values if values.dtype == dtype else values.astype(dtype)


def _utf8(labels) -> bool:
    """Whether UTF-8 holds every label (none a str with a lone surrogate)."""
    try:
        for label in labels:
            label.encode()
    except (UnicodeEncodeError, AttributeError):
        return False
    return True


def _category_columns(categories, blocks, out: np.ndarray) -> None:
    """The model's codes of categorical columns (``(block, CategoryReading)``), written to ``out``."""
    if len(out) == 1:  # (a row: its codes as Python scalars, a third of the array operations' time)
        row = out[0]
        private = _PRIVATE_CATEGORICAL[0]
        for at, reading in categories:
            values = blocks[at].values
            if private:  # (pandas' own attributes behind dtype.categories and codes: 0.15 us a column sooner)
                categories_now, own = values._dtype._categories, values._ndarray.item(0)
            else:
                categories_now, own = values.dtype.categories, _codes(values).item(0)
                if private is None:
                    private = _PRIVATE_CATEGORICAL[0] = _private_categorical(values)
            table = reading.last  # (the last table's, as CategoryReading.table has it: inline, 0.3 us a column)
            if table is None or table.source is not categories_now:
                table = reading.table(categories_now)
            items = table.items
            row[reading.feature] = items[own] if items is not None and table.unseen is None else \
                table.code(own, reading.labels, reading.name)
        return
    for at, reading in categories:
        values = blocks[at].values
        out[:, reading.feature] = reading.table(values.dtype.categories).codes(_codes(values), reading.labels,
                                                                                reading.name)


def _private_categorical(values) -> bool:
    """Whether this pandas' Categorical keeps its dtype, categories and codes where
    :func:`_category_columns` reads them at one row (asked once a process)."""
    try:
        return values._dtype._categories is values.dtype.categories and values._ndarray is _codes(values)
    except AttributeError:
        return False


_PRIVATE_CATEGORICAL = [None]  # (:func:`_private_categorical`, once known)


def _codes(values) -> np.ndarray:
    # (``_codes``: the array ``codes`` wraps in a read-only view, a third of a microsecond a column)
    return values._codes if hasattr(values, "_codes") else values.codes


class _HashedPandasPlan:
    """A pandas frame of one block layout, for a model with categories known by hash: number
    blocks copied with one assignment each, each categorical feature's values taken from its
    block as they lie (:mod:`silvanforge.inputs.hashed_rows` hashes them), others read a column at a time."""

    def __init__(self, X, memory: SchemaMemory, dtype: np.dtype):
        names = memory.names(X.columns)
        order = feature_order(names, memory.forest)
        where = {column: feature for feature, column in enumerate(order)}
        hashed = memory.forest.hashed_categories or {}
        self.number_features = numeric_features(memory.forest)
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
                self.numbers.append((b, src, dest, through_float64(block.dtype, dtype)))
        self.hashed.sort()

    def read(self, X, out: np.ndarray) -> list:
        blocks = X._mgr.blocks
        for b, src, dest, via in self.numbers:
            values = blocks[b].values
            out[:, dest] = (values[src].astype(np.float64) if via else values[src]).T
        for column, name, feature in self.others:
            values = X.iloc[:, column]
            try:
                out[:, feature] = pandas_column(values, name, None, feature in self.number_features)
            except InputError:  # (a number's text: CatBoost's own predict reads it)
                numbers = catboost_numbers(values)
                if numbers is None:
                    raise
                out[:, feature] = numbers
        return [(f, blocks[b].values if i is None else blocks[b].values[i]) for f, b, i in self.hashed]


def _column(X, at: int):
    """A pandas frame's column at position ``at`` as a Series (pandas' own ``_ixs``: its
    ``iloc`` took 28 us of checks, this 7; private, so guarded)."""
    take = getattr(X, "_ixs", None)
    if take is not None:
        try:
            return take(at, axis=1)
        except TypeError:
            pass
    return X.iloc[:, at]


def _arrow_strings(values, labels) -> int | None:
    """The arrow type id of a pandas extension array of strings held by arrow (pandas 3's str)
    where the model's labels are strings, else None."""
    arrow = getattr(values, "_pa_array", None)
    if labels is None or arrow is None:
        return None
    type_id = getattr(getattr(arrow, "type", None), "id", None)
    if type_id not in string_types() or not labels.strings:
        return None
    return type_id


def _arrow_number_type(dtype) -> int | None:
    """The arrow type id of an Arrow-backed pandas dtype of numbers that the C++ reader of arrow
    columns reads (:mod:`silvanforge.inputs.arrow_native`), else None."""
    arrow = getattr(dtype, "pyarrow_dtype", None)
    if arrow is None:
        return None
    return arrow.id if arrow.id in direct_types()[0] else None


def _nullable_number(dtype) -> bool:
    """Whether a pandas extension dtype holds numbers or booleans with pd.NA missing (Int64,
    Float64, boolean, Arrow-backed numbers)."""
    import pandas as pd

    kind = getattr(dtype, "kind", "O")
    return kind in "biuf" and pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)

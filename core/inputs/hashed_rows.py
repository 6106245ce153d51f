"""Rows of a model whose categories are known by hash (CatBoost), with no Python loop a value.

A CatBoost model with categorical features needs, for every row, each categorical column's
hash (:func:`silvanforge.inputs.category_hash.catboost_hash` of its text) and every computed
column (``Forest.hashed_combinations``: a CTR's value, or a one-hot test's 1 or 0, of a 64-bit
key mixed from category hashes, float borders and one-hot tests, looked up among the keys the
model knows).  :class:`HashedInputs` is built once a compiled model and does it so:

- a column's values are factorised (:mod:`silvanforge.inputs.distinct_values`: pandas
  categories' own codes, Arrow's dictionary for Arrow-backed strings, else
  ``pandas.factorize``) and only its distinct values are hashed,
  each once a model (a bounded memo), sign-extended as CatBoost's ``int``; a frame's columns
  are found by the plan of its schema (:func:`silvanforge.inputs.pandas_frames.hashed_frame_columns`),
  and a column's codes are the model's across calls (:class:`_ColumnValues`), so that calls of
  values seen before share the tables below;
- the computed columns are filled by the target's kernel
  (:meth:`silvanforge.target.Target.hashed_columns_kernel`; the CPU's mixes the keys and looks
  them up a block of rows at a time) over flat arrays built here once: the distinct element
  lists (*chains*: a combination's CTRs share its key), each chain's keys in a cuckoo table
  (:func:`_table`) and each column's answer for each key and for any other; a chain whose
  call has fewer combinations of its elements' values (the call's distinct categories, bits)
  than rows is looked up once a combination, in a table of the call's, kept for the next
  calls of the same values (:data:`DENSE_TABLES`);
- without such a kernel, NumPy does the same: keys mixed element by element over all chains
  sharing a step, found by ``searchsorted`` (:meth:`HashedInputs.combination_codes`).

Both give what CatBoost computes: the same keys, exact table lookups, values stored as the
float32 CatBoost compares.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

from silvanforge.inputs import arrow_native, category_hash
from silvanforge.ir.hir import Forest
from silvanforge.inputs.hashed_kernel import (
    CODE_STRIDE,
    CODES,
    COLUMN_STRIDE,
    DENSE,
    DENSE_AT,
    DISTINCT,
    DISTINCT_AT,
    DISTINCT_COUNT,
    FLOAT_STRIDE,
    FLOATS,
    ROW_STRIDE,
    ROWS,
    native_arrays,
)
from silvanforge.inputs.hashed_kernel import find_kernel as _kernel  # (tests replace it: no kernel)
from silvanforge.inputs.distinct_values import (INTEGER_SPAN, arrow_values, dictionary_indices, encodes, factorise,
                                                listed, pandas_categories)
from silvanforge.runtime.threads import _get_pool

# Distinct values a model remembers the hash of (a memo, cleared when full).
VALUE_MEMO = 1 << 16
# Sets of pandas categories a model remembers the hashes of (cleared when full).
CATEGORY_TABLES = 64
# A value's hash where it is no category (outside every sign-extended 32-bit hash).
MISSING = 1 << 40
# Bytes of rows a thread keeps for its next call (HashedInputs.rows).
SCRATCH_BYTES = 32 << 20
# A chain is read by a table of the call's where its entries are at most the rows over this
# (an entry costs about as much as this many rows read by the table: at 4 the table way took
# 0.75x the time of hashing each row at 4096 rows, benchmarks/catboost_categories.py's model)
TABLE_ENTRY_ROWS = 4
# Distinct values a column keeps a code for across calls (then it starts again): a column's codes
# are its values' positions in the model's list of that column's values seen so far, not in the
# call's, so calls of the same values share their tables of combinations (below).
COLUMN_VALUES = 1 << 12
# Tables of combinations of a call's values (the kernel's ``dense``) a model keeps, keyed by
# every column's table of values: a service's calls, of categories it has seen, build none
# (building them took 0.8 ms of a 4096-row call, benchmarks/catboost_categories.py).
DENSE_TABLES = 8
# Table entries (int32) kept for every call of a layout's values after its first: built once, a
# table serves every later call (512-row calls of benchmarks/catboost_categories.py's model
# hashed 52 of its 266 chains a row; their tables, 41 thousand entries, took a fifth off).
LASTING_ENTRIES = 1 << 20
# Rows from which a call's rows are laid out a column at a time, and the rows a column is
# padded with (HashedInputs.rows).
FORTRAN_ROWS = 256
COLUMN_PAD = 16
# Rows a thread's share of the computed columns has at least where Python's pool runs the
# shares (fewer: one thread fills them; 512-row calls split in two ran slower than on one
# thread on the 2 shared cores), and where the target hands them off itself (its kernel's
# ``run_shares``: the CPU's native workers, one of which still spins from the form's walk of
# the last call).  512-row calls of benchmarks/catboost_categories.py's model on two threads
# took 0.6x the time in two 256-row shares handed off so, 0.9x in Python's pool.
THREAD_ROWS = 1024
SHARE_ROWS = 256


def _sorted_index(known) -> tuple[np.ndarray, np.ndarray]:
    """``known`` (hashes in code order) sorted, and each sorted hash's code."""
    order = np.argsort(values := np.asarray([int(h) for h in known], dtype=np.uint64), kind="stable")
    return values[order], order.astype(np.float64)


def _find(sorted_values: np.ndarray, codes: np.ndarray, query: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The code of each ``query`` among ``sorted_values`` (NaN where absent or not ``valid``)."""
    out = np.full(query.shape, np.nan)
    if len(sorted_values) == 0:
        return out
    at = np.minimum(np.searchsorted(sorted_values, query), len(sorted_values) - 1)
    found = valid & (sorted_values[at] == query)
    out[found] = codes[at[found]]
    return out


class HashedInputs:
    """What reading rows of ``forest`` (hashed categories, combinations) needs, built once."""

    def __init__(self, forest: Forest):
        self.forest = forest
        self.hashed = {int(f): _sorted_index(known) for f, known in (forest.hashed_categories or {}).items()}
        self.width = forest.input_features
        self._memo: dict = {}
        self._lock = threading.Lock()
        self._scratch = threading.local()
        # pandas categories (an Index, immutable) -> (it, its hashes): frames of one schema share them
        self._category_tables: dict[int, tuple] = {}
        self._code_tables: dict[int, tuple] = {}  # feature -> (a table of hashes, its codes): code_table
        combos = list(forest.hashed_combinations or ())
        self.count = len(combos)
        # Chains: the distinct element lists (several CTRs of one combination share its key),
        # each key mixed once a call; a column reads its chain's key.
        chains: dict[str, int] = {}
        self.chain_of = np.asarray([chains.setdefault(repr(c["elements"]), len(chains)) for c in combos],
                                   dtype=np.intp)
        elements = [None] * len(chains)
        for c, j in zip(combos, self.chain_of):
            elements[j] = c["elements"]
        # Steps: for each element position, the chains having an element there, by kind.
        steps = []
        for s in range(max((len(e) for e in elements), default=0)):
            cat, flt, onehot = [], [], []
            for j, chain in enumerate(elements):
                if s < len(chain):
                    e = chain[s]
                    if e[0] == "cat":
                        cat.append((j, int(e[1])))
                    elif e[0] == "float":
                        flt.append((j, int(e[1]), float(np.float32(e[2])), bool(e[3])))
                    else:
                        onehot.append((j, int(e[1]), int(e[2])))
            steps.append((_columns(cat, 2), _columns(flt, 4), _columns(onehot, 3)))
        self.steps = steps
        self.chains = len(elements)
        # A chain's known keys sorted (the union of its columns'); each column's answer for
        # each of them and, in one more slot, for any other key: its value, or for a column
        # without values its code (NaN for another key).
        chain_keys: list[set] = [set() for _ in elements]
        for c, j in zip(combos, self.chain_of):
            chain_keys[j].update(int(k) for k in c["keys"])
        self.chain_keys = [np.asarray(sorted(k), dtype=np.uint64) for k in chain_keys]
        tables, offsets, at = [], [], 0
        for c, j in zip(combos, self.chain_of):
            keys = self.chain_keys[j]
            own = np.asarray([int(k) for k in c["keys"]], dtype=np.uint64)
            answers = np.asarray(c["values"], dtype=np.float64) if "values" in c else \
                np.arange(len(own), dtype=np.float64)
            table = np.full(len(keys) + 1, c.get("unknown", np.nan) if "values" in c else np.nan)
            if len(own):
                table[np.searchsorted(keys, own)] = answers
            tables.append(table)
            offsets.append(at)
            at += len(table)
        self.table = np.concatenate(tables) if tables else np.zeros(0)
        self.offsets = np.asarray(offsets, dtype=np.intp)
        self._native = None  # (kernel, args block, arrays it points to), made at first use
        self._elements = elements
        self._columns: dict = {}  # feature -> _ColumnValues (its values' codes across calls)
        self._dense: dict = {}  # the identities of a call's tables of values -> their _Layout

    def _kernel_args(self):
        """The target's kernel of computed columns and its args block (rows and hashes left to
        each call), or None where no installed target has one."""
        if self._native is None:
            with self._lock:
                if self._native is None:
                    kernel = _kernel()
                    self._native = (None,) if kernel is None else (kernel,) + native_arrays(self, kernel)
        return self._native if self._native[0] is not None else None

    # ------------------------------------------------------------------ a column's hashes
    def hash_codes(self, values, feature: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(each value's code, the table of CatBoost's hashes by code) of a column's values (a
        pandas Series or Categorical, an array or a list): a hash as CatBoost's ``int``,
        sign-extended to int64, :data:`MISSING` where a value is no category; the table's last
        entry is a missing value's (code -1).  A pandas category's codes are its own; other
        values' are the call's, or with ``feature`` (the column's feature) the model's codes of
        that column's values across calls (:class:`_ColumnValues`)."""
        categories = pandas_categories(values)
        if categories is not None:  # a pandas category: its categories' hashes, worked out once
            found = self._category_tables.get(id(categories))
            if found is None or found[0] is not categories:
                if len(self._category_tables) >= CATEGORY_TABLES:
                    self._category_tables.clear()
                found = self._category_tables[id(categories)] = (categories, self._hash_table(list(categories)))
            # (a Categorical's codes: -1 where missing)
            return (values.codes if hasattr(values, "codes") else values.array.codes), found[1]
        column = self._columns.get(feature) if feature is not None else None
        if column is not None:
            found = column.integer_codes(values)
            if found is None:
                found = column.string_codes(values)
            if found is not None:
                return found
        codes, uniques, token = factorise(values)
        if feature is None:
            return codes, self._hash_table(listed(uniques))
        if column is None:
            with self._lock:
                column = self._columns.setdefault(feature, _ColumnValues())
        return column.codes(codes, uniques, self, token)

    def signed_hashes(self, values) -> np.ndarray:
        """CatBoost's hashes of a column's values as :meth:`hash_codes` gives them, a value each."""
        codes, table = self.hash_codes(values)
        return table[codes]

    def _hash_table(self, uniques: list) -> np.ndarray:
        """The signed hashes of ``uniques`` and, last, :data:`MISSING` (a code of -1)."""
        table = np.full(len(uniques) + 1, MISSING, dtype=np.int64)
        memo = self._memo
        for i, v in enumerate(uniques):
            # (keyed by type too: values equal in Python may differ in text, as Decimal("1.0") and 1)
            key = (type(v), v)
            try:
                h = memo[key]
            except (KeyError, TypeError):
                h = category_hash.catboost_hash(v)
                try:
                    if len(memo) >= VALUE_MEMO:
                        with self._lock:
                            memo.clear()
                    memo[key] = h
                except TypeError:
                    pass
            if h is not None:
                table[i] = h - (1 << 32) if h >= 1 << 31 else h
        return table

    def column_hashes(self, values) -> tuple[np.ndarray, np.ndarray]:
        """CatBoost's hashes (uint64 holding the unsigned 32-bit hash) of a column's values, and
        which values are categories at all."""
        signed = self.signed_hashes(values)
        return _unsigned(signed)

    def codes(self, feature: int, signed: np.ndarray) -> np.ndarray:
        """Codes (float64) of ``feature``'s hashes (:meth:`signed_hashes`): NaN for a value that
        is no category or a hash the model does not list."""
        known = self.hashed[feature]
        if len(known[0]) == 0:
            return np.full(len(signed), np.nan)
        return _find(*known, *_unsigned(signed))

    def code_table(self, feature: int, table: np.ndarray) -> np.ndarray:
        """:meth:`codes` of a column's table of hashes (:meth:`hash_codes`), kept by the table:
        the same array call after call while a column's values are ones seen before (a search
        of the model's hashes a column and call: 70 us of 4096-row calls of 8 categories)."""
        found = self._code_tables.get(feature)
        if found is not None and found[0] is table:
            return found[1]
        codes = self.codes(feature, table)
        self._code_tables[feature] = (table, codes)  # (one assignment: another thread reads a whole pair)
        return codes

    # ------------------------------------------------------------------ combinations
    def rows(self, n: int, num_features: int, dtype: np.dtype) -> np.ndarray:
        """An (n, num_features) array of ``dtype`` for a call's rows: this thread's own, kept
        for its next call (up to :data:`SCRATCH_BYTES`: a fresh one of megabytes costs a page
        fault a page as the kernel writes it), else a new one.  For a compiled model's calls,
        which drop the rows before they return.  From :data:`FORTRAN_ROWS` rows a column at a
        time (the kernel of computed columns writes a column's rows in a row, and reads the
        inputs in place), each column :data:`COLUMN_PAD` rows longer than the array holds (a
        column of 4096 float32 rows, 16 KiB, would put a row of every column in one set of the
        caches); fewer rows in C order (a row's columns together for the forms that walk a few
        rows).  Fortran order took 0.85x the time of C order to fill 512 and 4096 rows of
        cb_cat (benchmarks/catboost_categories.py) and as long to walk."""
        fortran = n >= FORTRAN_ROWS
        if n * num_features * dtype.itemsize > SCRATCH_BYTES:
            return _new_rows(n, num_features, dtype, fortran)
        name = "fortran" if fortran else "rows"
        kept = getattr(self._scratch, name, None)
        if kept is None or kept.dtype != dtype or kept.shape[1] != num_features or kept.shape[0] < n:
            kept = _new_rows(max(n, 64), num_features, dtype, fortran)
            setattr(self._scratch, name, kept)
        return kept[:n]

    def fill(self, hashes: dict, rows: np.ndarray, threads: int = 1) -> None:
        """Fill the computed columns of ``rows`` (float32 or float64, ``num_features`` columns,
        the input columns read; ``hashes``: each categorical column's :meth:`hash_codes`) by the
        target's kernel where one is installed (rows shared among up to ``threads`` threads),
        else by :meth:`combination_codes`."""
        width, n = self.width, rows.shape[0]
        native = self._kernel_args() if self.count and n else None
        if native is None or rows.dtype not in (np.float32, np.float64) or min(rows.strides) <= 0 \
                or any(st % rows.itemsize for st in rows.strides):
            if self.count:
                signed = {column: table[codes] for column, (codes, table) in hashes.items()}
                rows[:, width:width + self.count] = self.combination_codes(signed, rows)
            return
        kernel, template, arrays = native
        layout = self._layout(hashes, kernel, arrays)
        # codes a column at a time (the kernel reads a column's rows in a row; -1: missing)
        codes = np.empty((width, n), dtype=np.int32)
        for column, (code, _) in hashes.items():
            codes[column] = code
        # the chains read by a table of the call's values (a digit an element: a category's code
        # among the call's distinct values, a bit): those whose table has fewer entries than rows
        chosen = layout.need <= n
        if layout.calls:  # (values seen before: the kept tables too)
            chosen |= layout.lasting
        layout.calls += 1  # (a hint: a race loses a count)
        dense_at, dense = layout.dense.get(chosen.tobytes(), (None, None))
        build = dense_at is None
        if build:
            size = np.where(chosen, layout.size, 0).astype(np.int64)
            dense_at = np.where(chosen, np.cumsum(size) - size, -1).astype(np.int64)
            dense = np.empty(max(1, int(size.sum())), dtype=np.int32)
        row_stride, column_stride = (st // rows.itemsize for st in rows.strides)
        if rows.dtype == np.float32 and row_stride == 1:  # columns in a row (Fortran order): read in place
            F, float_stride = rows, column_stride
        else:
            F, float_stride = np.ascontiguousarray(rows[:, :width].T, dtype=np.float32), n
        args = template.copy()
        args[ROWS], args[ROW_STRIDE], args[COLUMN_STRIDE] = rows.ctypes.data, row_stride, column_stride
        args[FLOATS], args[FLOAT_STRIDE] = F.ctypes.data, float_stride
        args[CODES], args[CODE_STRIDE] = codes.ctypes.data, n
        args[DISTINCT], args[DISTINCT_AT], args[DISTINCT_COUNT] = layout.addresses
        args[DENSE_AT], args[DENSE] = dense_at.ctypes.data, dense.ctypes.data
        if build:  # the call's tables of combinations, kept for calls of the same values
            if chosen.any():
                kernel.tables(args.ctypes.data)
            layout.dense[chosen.tobytes()] = (dense_at, dense)
        address, row_bytes = args.ctypes.data, rows.dtype.itemsize
        parts = min(threads, n // SHARE_ROWS)
        run_shares = getattr(kernel, "run_shares", None)  # (the target's own hand-off, where it has one)
        if parts > 1 and run_shares is not None and run_shares(address, _bounds(n, parts), row_bytes):
            return
        parts = min(threads, n // THREAD_ROWS)  # (Python's pool)
        if parts <= 1:
            kernel.run(address, 0, n, row_bytes)
            return
        bounds = _bounds(n, parts)
        pool = _get_pool(parts)
        futures = [pool.submit(kernel.run, address, lo, hi, row_bytes) for lo, hi in itertools.pairwise(bounds[1:])]
        try:
            kernel.run(address, 0, bounds[1], row_bytes)
        finally:
            for f in futures:
                f.result()

    def _layout(self, hashes: dict, kernel, arrays) -> _Layout:
        """The :class:`_Layout` of a call's tables of values (each column's, from
        :meth:`hash_codes`), kept by the tables themselves: a model's tables of a column are
        the same arrays from call to call while its values are the same (a pandas category's,
        :class:`_ColumnValues`'), so a call of values seen before works out nothing here."""
        tables = tuple(hashes[c][1] if c in hashes else None for c in range(self.width))
        key = tuple(map(id, tables))
        found = self._dense.get(key)
        if found is not None and all(a is b for a, b in zip(found.tables, tables)):
            return found
        found = _Layout(tables, kernel, arrays)
        with self._lock:
            if len(self._dense) >= DENSE_TABLES:
                self._dense.clear()
            self._dense[key] = found
        return found

    def combination_codes(self, hashes: dict, values: np.ndarray) -> np.ndarray:
        """(n, combinations) answers of every computed column: its value of the row's key (a
        column without values: the key's code, NaN where the model does not know it); a row
        missing a category in the key takes the unknown key's answer.  ``hashes`` maps a
        column to its :meth:`signed_hashes`, ``values`` is the rows' plain columns."""
        n = values.shape[0]
        width = self.width
        H = np.zeros((width, n), dtype=np.uint64)
        OK = np.zeros((width, n), dtype=bool)
        for column, signed in hashes.items():
            H[column], OK[column] = _unsigned(signed)
        # the hash as CatBoost's int, sign-extended to 64 bits
        signed = np.where(H >= np.uint64(1 << 31), H + np.uint64(((1 << 64) - (1 << 32))), H)
        F = np.ascontiguousarray(values[:, :width].T, dtype=np.float32)
        key = np.zeros((self.chains, n), dtype=np.uint64)
        valid = np.ones((self.chains, n), dtype=bool)
        with np.errstate(over="ignore"):
            for cat, flt, onehot in self.steps:
                if cat is not None:
                    j, col = cat
                    key[j] = category_hash.mix(key[j], signed[col])
                    valid[j] &= OK[col]
                if flt is not None:
                    j, col, border, nan_right = flt
                    x = F[col]
                    bit = (x > border.astype(np.float32)[:, None]) | (np.isnan(x) & nan_right.astype(bool)[:, None])
                    key[j] = category_hash.mix(key[j], bit.astype(np.uint64))
                if onehot is not None:
                    j, col, value = onehot
                    bit = (H[col] == value.astype(np.uint64)[:, None]) & OK[col]
                    key[j] = category_hash.mix(key[j], bit.astype(np.uint64))
        # each chain's key found among its known keys: its slot, or the last (unknown)
        slot = np.empty((self.chains, n), dtype=np.intp)
        for j, keys in enumerate(self.chain_keys):
            k = len(keys)
            if k == 0:
                slot[j] = 0
                continue
            at = np.minimum(np.searchsorted(keys, key[j]), k - 1)
            slot[j] = np.where(valid[j] & (keys[at] == key[j]), at, k)
        out = self.table[(slot[self.chain_of] + self.offsets[:, None])]
        return out.T


def _bounds(n: int, parts: int) -> list[int]:
    """The first row of each of ``parts`` shares of ``n`` rows, and ``n``."""
    return [n * k // parts for k in range(parts + 1)]


def _new_rows(capacity: int, num_features: int, dtype: np.dtype, fortran: bool) -> np.ndarray:
    """(capacity, num_features) rows of ``dtype``: in C order, or a column at a time with
    columns :data:`COLUMN_PAD` rows longer than ``capacity``."""
    if not fortran:
        return np.empty((capacity, num_features), dtype=dtype)
    return np.empty((num_features, capacity + COLUMN_PAD), dtype=dtype)[:, :capacity].T


class _Layout:
    """A call's tables of values as the kernel reads them (:meth:`HashedInputs.fill`): every
    column's distinct hashes in one array (``addresses``: it, each column's first and count),
    each chain's size of its table of combinations of those values (``size``) and the rows a
    call has from which that table is read (``need``: infinite where the kernel cannot), and
    the tables of combinations built so far, by the chains a call reads so; ``lasting``, ``calls``."""

    __slots__ = ("_keep", "addresses", "calls", "dense", "lasting", "need", "size", "tables")

    def __init__(self, tables: tuple, kernel, arrays: dict):
        self.tables = tables  # (held: the key is their identities)
        lengths = [0 if t is None else len(t) for t in tables]
        counts = np.asarray(lengths, dtype=np.int64)
        # (a bit's digit may read past a table)
        distinct = np.concatenate([t for t in tables if t is not None] + [np.zeros(2, np.int64)])
        at = np.cumsum([0] + lengths[:-1]).astype(np.int64)
        self._keep = (distinct, at, counts)
        self.addresses = (distinct.ctypes.data, at.ctypes.data, counts.ctypes.data)
        radix = np.where(arrays["element_kind"] == kernel.kinds["cat"], counts[arrays["element_column"]], 2)
        self.size = np.multiply.reduceat(radix.astype(np.float64), arrays["chain_elements"][:-1])
        self.need = np.where(arrays["dense_ok"], self.size * TABLE_ENTRY_ROWS, np.inf)
        order = np.argsort(self.need, kind="stable")  # (the smallest tables, LASTING_ENTRIES in all)
        self.lasting = np.zeros(len(self.need), dtype=bool)
        self.lasting[order[np.cumsum(np.where(np.isfinite(self.need), self.size, np.inf)[order]) <= LASTING_ENTRIES]] = True
        self.calls = 0  # (calls with this layout: the kept tables are read from the second)
        self.dense: dict = {}  # chains read by a table (bytes of a bool a chain) -> (dense_at, dense)


class _ColumnValues:
    """A column's values a model has seen (up to :data:`COLUMN_VALUES`, then it starts again),
    each with a code in order of first sight, and their hashes: the same values get the same
    codes and table in every call, so a call's tables of combinations are found again
    (:meth:`HashedInputs.fill`).  ``state`` (the codes by value, the hash table) is replaced in
    one assignment, so a call reads one whole state while another adds values."""

    __slots__ = ("integers", "last", "state", "strings")

    def __init__(self):
        self.state = ({}, np.full(1, MISSING, dtype=np.int64))
        self.last = None  # (state, token, remap) of the last call's distinct values
        self.integers = None  # (state, lowest, codes by integer from it: -1 unseen), its integers'
        self.strings = None  # (state, the C++ reader's index of its strings or None, the reader: None not yet indexed)

    def integer_codes(self, values) -> tuple[np.ndarray, np.ndarray] | None:
        """(codes, table) of a 1-D NumPy array of integers whose every value the state holds,
        looked up in a table over their span (categories given as codes); else None."""
        found = self.integers
        if found is None or type(values) is not np.ndarray or values.ndim != 1 or values.dtype.kind not in "iu" \
                or not len(values) or found[0] is not self.state:
            return None
        state, lowest, lut = found
        if values.min() < lowest or values.max() >= lowest + len(lut):
            return None
        codes = lut[values.astype(np.int64, copy=False) - lowest]  # (within the span: int64 holds them)
        return (codes, state[1]) if codes.min() >= 0 else None

    def string_codes(self, values) -> tuple[np.ndarray, np.ndarray] | None:
        """(codes, table) of a column of strings held by arrow (pandas' str, Arrow-backed) whose
        every value the state holds, each found by the C++ reader of arrow columns in an index of
        the state's strings; else None (a value not seen, the reader not ready: :meth:`codes` of
        the column factorised, which adds it).  A state is indexed at the second call that finds
        it (the first after it changed reads the old way): a column whose calls keep bringing
        new values (identifiers) never pays for an index it would not use."""
        array = arrow_values(values)
        if array is None:
            return None
        found, state = self.strings, self.state
        if found is None or found[0] is not state:
            self.strings = (state, None, None)
            return None
        _, index, module = found
        if module is None:  # (the second call of this state: indexed now)
            module = arrow_native.reader()
            if module is None:
                return None
            index = self._index(module, state)
            self.strings = (state, index, module)
        if index is None:  # (no string of the state's UTF-8 holds)
            return None
        dictionary = dictionary_indices(array)
        if dictionary is not None:  # (its dictionary's strings found, and its indices taken)
            indices, labels = dictionary
            found_codes = np.empty(len(labels) + 1, dtype=np.int64)
            if module.index_codes(index, labels, found_codes[:-1]) != 0:
                return None
            found_codes[-1] = -1  # (a null's index: missing)
            return found_codes[indices], state[1]
        codes = np.empty(len(values), dtype=np.int64)
        if module.index_codes(index, array, codes) != 0:
            return None
        return codes, state[1]

    @staticmethod
    def _index(module, state: tuple):
        """The C++ reader's index of the strings of ``state`` (those UTF-8 holds: no value of an
        arrow column equals a lone surrogate), or None where it holds none."""
        labels = [(v, code) for (kind, v), code in state[0].items() if kind is str]
        index = module.label_index([v for v, _ in labels], [code for _, code in labels]) if labels else None
        if index is None and labels:
            labels = [(v, code) for v, code in labels if encodes(v)]
            index = module.label_index([v for v, _ in labels], [code for _, code in labels]) if labels else None
        return index

    def _integers(self, state: tuple) -> None:
        """The table of :meth:`integer_codes` for ``state``, where its integers span little."""
        known = [(v, code) for (kind, v), code in state[0].items() if kind is int]
        if not known:
            return
        values = [v for v, _ in known]
        lowest, highest = min(values), max(values)
        if highest - lowest < INTEGER_SPAN:
            lut = np.full(highest - lowest + 1, -1, dtype=np.intp)
            lut[np.asarray(values) - lowest] = [code for _, code in known]
            self.integers = (state, lowest, lut)

    def codes(self, local: np.ndarray, uniques: list, hashing: HashedInputs, token=None) -> tuple:
        """The model's codes (-1 missing) of a call's codes ``local`` of its ``uniques``, and the
        table.  ``token`` (an Arrow dictionary, or a tuple of integers: the uniques, with their
        types) tells the same distinct values as the last call's, whose codes are then reused."""
        last, state = self.last, self.state
        if token is not None and last is not None and last[0] is state and _same_values(last[1], token):
            return last[2][local], state[1]
        uniques = listed(uniques)
        try:
            keys = [(type(v), v) for v in uniques]  # (keyed by type too, as the memo of hashes)
            if not all(k in state[0] for k in keys):
                with hashing._lock:
                    index, table = self.state
                    if len(index) + len(keys) > COLUMN_VALUES:  # full: start again
                        index, table = {}, table[-1:]
                    index = dict(index)
                    new = [(k, v) for k, v in zip(keys, uniques) if k not in index]
                    for k, _ in new:
                        index[k] = len(index)
                    added = hashing._hash_table([v for _, v in new])
                    # (added ends with MISSING)
                    state = self.state = (index, np.concatenate([table[:-1], added]))
            index = state[0]
            remap = np.append(np.fromiter((index[k] for k in keys), dtype=np.intp, count=len(keys)), -1)
        except TypeError:  # a value that is no dict key: the call's own codes
            return local, hashing._hash_table(uniques)
        if token is not None:
            self.last = (state, token, remap)  # (the state these codes are of)
            if type(token) is tuple and (self.integers is None or self.integers[0] is not state):
                self._integers(state)
        return remap[local], state[1]


def _same_values(a, b) -> bool:
    """Whether two tokens of distinct values (:meth:`_ColumnValues.codes`) are the same values."""
    if type(a) is tuple:
        return type(b) is tuple and a == b
    return type(b) is not tuple and a.equals(b)


def _unsigned(signed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the unsigned 32-bit hashes as uint64, which values are categories) of signed hashes."""
    return (signed & 0xFFFFFFFF).astype(np.uint64), signed < (1 << 31)


def _columns(rows: list, width: int):
    """A step's elements of one kind as arrays (combination, column, ...), or None."""
    if not rows:
        return None
    parts = list(zip(*rows))
    return (np.asarray(parts[0], dtype=np.intp), np.asarray(parts[1], dtype=np.intp),
            *[np.asarray(p) for p in parts[2:width]])

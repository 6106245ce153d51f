"""One column of a data frame as a model reads it, and which column holds which feature: the
general path of :mod:`silvanforge.inputs.rows` (column by column), and what the plans of
:mod:`silvanforge.inputs.frames` (frames read once per schema) are built from.

A categorical feature's labels (``Forest.feature_categories``) are a :class:`Labels`; a
categorical column's own categories become a :class:`CodeTable` from its codes to the model's,
built once per distinct list of categories, so that reading the column is one ``take``.
"""

from __future__ import annotations

import sys

import numpy as np

from silvanforge.errors import InputError
from silvanforge.ir.hir import Forest

# How many names an error message lists before "...".
SHOWN_NAMES = 8


def column_order(names: list | None, forest: Forest, what: str = "the frame's columns",
                 by_position: bool = True) -> list[int]:
    """For each model feature, the column that holds it: by ``names`` where both the columns and
    the model have names, else by position; ``what`` the columns are, for messages.  Labels that
    are not all strings (:func:`_as_names`) are matched by their text, or read by position where
    they are pandas' labels of a frame made from an array (``by_position``: a frame's columns,
    not a record's keys, which always name their features)."""
    if names is not None and not all(isinstance(n, str) for n in names):
        names = _as_names(list(names), forest, by_position)
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
    if (missing or unknown) and forest.source == "lightgbm":
        # LightGBM keeps a name's spaces as underscores ("my feature" is "my_feature" in its
        # model), and scores the frame it was trained on: so do we.
        renamed = {(n.replace(" ", "_") if isinstance(n, str) else n): i for i, n in enumerate(names)}
        if len(renamed) == len(names) and set(renamed) == known:
            return [renamed[n] for n in wanted]
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing {listed(missing)}")
        if unknown:
            parts.append(f"not features of the model: {listed(unknown)}")
        raise InputError(f"{what} do not match the model's features: {'; '.join(parts)} "
                         f"(the model's features: {listed(wanted)})")
    return [seen[n] for n in wanted]


def _as_names(labels: list, forest: Forest, by_position: bool = True) -> list[str] | None:
    """Column labels not all strings as the names they are matched by: their text (XGBoost's
    way: a model fitted on a frame of integer labels names its features "0", "1", ...), or None
    (by position) for pandas' labels of a frame made from an array (0, 1, 2, ... in order) where
    their text is not the model's names.  Why: read by position, integers in another order, a
    mix of labels or a MultiIndex's tuples gave another feature's values unchecked."""
    text = [str(label) for label in labels]
    wanted = forest.feature_names
    if by_position and (wanted is None or set(text) != set(wanted)) and \
            all(type(label) is int or isinstance(label, np.integer) for label in labels) and \
            labels == list(range(len(labels))):
        return None
    return text


def listed(names: list) -> str:
    shown = ", ".join(repr(n) for n in names[:SHOWN_NAMES])
    return shown + (f", ... ({len(names)} in all)" if len(names) > SHOWN_NAMES else "")


_UNNAMED = object()  # (Labels.refuse: no value to name)


def _first(values, chosen: np.ndarray | None, at: int | None = None):
    """The first of ``values`` (labels of a column or its categories, or a function making them:
    made only for an error) that ``chosen`` marks (or the one ``at``), or nothing to name where the
    values are not given or do not line up with the marks."""
    try:
        if callable(values):
            values = values()
        if values is None or chosen is not None and len(values) != len(chosen):
            return _UNNAMED
        value = values[int(np.flatnonzero(chosen)[0]) if at is None else at]
    except (TypeError, IndexError, KeyError):
        return _UNNAMED
    return value.as_py() if hasattr(value, "as_py") else value  # (an arrow scalar: its value)


def _shown(value) -> str:
    """A refused label as a message shows it: its repr, cut short."""
    text = repr(value.item() if isinstance(value, (np.number, np.bool_)) else value)
    return text if len(text) <= 60 else text[:57] + "..."


class Labels:
    """A feature's category labels and what a label outside them is (missing, or an error)."""

    def __init__(self, labels: list, unseen_error: bool):
        self.labels, self.unseen_error = labels, unseen_error
        self._codes: dict | None = None  # label -> code, built on first use
        self._numbers: bool | None = None  # (:attr:`numbers`, found on first use)
        self._strings: bool | None = None  # (:attr:`strings`, found on first use)
        self._identity: bool | None = None  # (:attr:`codes_are_labels`, found on first use)
        self._sorted = None  # (sorted number labels, their codes) or False (_number_codes)

    def _lookup(self) -> dict:
        if self._codes is None:
            lookup = {}
            for code, label in enumerate(self.labels):
                lookup.setdefault(label, float(code))  # a repeated label keeps its first code
            self._codes = lookup
        return self._codes

    def lookup(self, values: np.ndarray) -> np.ndarray:
        """Codes (float64) of ``values``, an object array of labels (or an array of numbers):
        NaN for a missing label (None or NaN), -1 for one the model does not know."""
        if values.dtype != object:
            found = self._number_codes(values)
            if found is not None:
                return found
            values = values.astype(object)
        lookup = self._lookup()
        return np.fromiter((np.nan if v is None or v != v else lookup.get(v, -1.0) for v in values.tolist()),
                           dtype=np.float64, count=len(values))

    def _number_codes(self, values: np.ndarray) -> np.ndarray | None:
        """:meth:`lookup` of an array of numbers where every label is a number float64 holds
        exactly, at once (a sorted search): the codes a label lookup gives, a repeated label's
        first; None where it cannot be (other labels, integers past 2**53)."""
        table = self._sorted
        if table is None:
            exact = self.numbers and all(v != v or (float(v) == v and abs(float(v)) <= 2.0 ** 53) for v in self.labels)
            if exact:
                keys = np.array([float(v) for v in self.labels], dtype=np.float64)
                order = np.argsort(keys, kind="stable")  # (equal labels: the first code first)
                keep = keys[order] == keys[order]  # (a NaN label is never looked up)
                table = (keys[order][keep], order[keep].astype(np.float64))
            table = self._sorted = table if exact else False
        kind = values.dtype.kind
        if table is False or kind not in "iuf":
            return None
        if kind != "f" and len(values) and (values.max() > 2 ** 53 or values.min() < -(2 ** 53)):
            return None  # (as Python integers: float64 would round them)
        x = values.astype(np.float64)
        keys, codes = table
        if not len(keys):
            return np.where(x == x, -1.0, np.nan)
        at = keys.searchsorted(x)
        at[at == len(keys)] = len(keys) - 1
        found = codes[at]
        found[keys[at] != x] = -1.0  # (NaN too, made missing below)
        if kind == "f":
            found[x != x] = np.nan
        return found

    def codes(self, values: np.ndarray, name) -> np.ndarray:
        codes = self.lookup(values)
        return self.unseen(codes, codes == -1.0, name, values)

    def unseen(self, codes: np.ndarray, unseen: np.ndarray, name, values=None) -> np.ndarray:
        """``codes`` with the ``unseen`` labels missing, or refused (``values``: the column's, to
        name the first refused)."""
        if unseen.any():
            if self.unseen_error:
                self.refuse(name, _first(values, unseen))
            codes[unseen] = np.nan
        return codes

    @property
    def numbers(self) -> bool:
        """Whether every label is a number (pandas integer categories)."""
        found = self._numbers
        if found is None:  # (a column's read asks at each call: 4 us for 25 labels)
            found = self._numbers = all(isinstance(v, (int, float, np.integer, np.floating))
                                        and not isinstance(v, (bool, np.bool_)) for v in self.labels)
        return found

    @property
    def codes_are_labels(self) -> bool:
        """Whether the labels are the codes themselves, 0, 1, 2, ... (scikit-learn's integer
        categories, whose values are their own codes): a value is then never a code mistaken
        for a label."""
        found = self._identity
        if found is None:
            found = self._identity = self.numbers and all(v == code for code, v in enumerate(self.labels))
        return found

    @property
    def strings(self) -> bool:
        """Whether every label is a str (the C++ reader of arrow columns looks such labels up)."""
        found = self._strings
        if found is None:
            found = self._strings = all(type(v) is str for v in self.labels)
        return found

    def exact_numbers(self) -> list | None:
        """The labels as floats (in code order) where every one is a number float64 holds exactly
        (the labels :meth:`lookup` finds numbers by at once), else None."""
        if not self.numbers or not all(v != v or (float(v) == v and abs(float(v)) <= 2.0 ** 53) for v in self.labels):
            return None
        return [float(v) for v in self.labels]

    def refuse_words(self, values, name) -> None:
        """Refuse text in a column of plain values where the labels are numbers ("7" for 7, as
        CSV and string-typed pipelines give): every value would be unseen, silently missing
        (LightGBM refuses such a column; a record's is refused the same way)."""
        word = next((v for v in values if isinstance(v, str)), None)
        if word is not None and self.numbers:
            raise InputError(f"column {name!r} holds text such as {word[:40]!r}, and the feature's categories are "
                             f"numbers ({listed(self.labels)}): pass them as numbers")

    def refuse(self, name, value=_UNNAMED):
        """The error of a category the model refuses (``value``: the category, where known)."""
        which = "" if value is _UNNAMED else f": {_shown(value)}"
        raise InputError(f"column {name!r} has a category the model was not trained with{which} "
                         f"(it knows {listed(self.labels)}), which its library refuses too")

    def table(self, categories) -> CodeTable:
        """The :class:`CodeTable` of a column whose own categories are ``categories`` (labels;
        a category's position is the column's code of it)."""
        codes = self.lookup(np.asarray(categories, dtype=object))
        unseen = codes == -1.0
        codes[unseen] = np.nan
        return CodeTable(categories, codes, unseen if self.unseen_error and unseen.any() else None)


class CodeTable:
    """A categorical column's own codes (0..k-1, -1 missing) to the model's (float64, NaN
    missing): ``lut`` has an entry a category and a last one, NaN, that code -1 takes;
    ``unseen`` marks the categories the model refuses (None where none is)."""

    __slots__ = ("source", "lut", "unseen", "items")

    def __init__(self, source, codes: np.ndarray, unseen: np.ndarray | None):
        self.source = source  # the categories it was built from, checked against the next call's
        self.lut = np.append(codes, np.nan)
        self.unseen = None if unseen is None else np.append(unseen, False)
        self.items = None  # (``lut`` as a list, for :meth:`code`: made at its first use)

    @classmethod
    def own(cls, source, count: int) -> CodeTable:
        """The column's own codes, where the model stores no labels."""
        return cls(source, np.arange(count, dtype=np.float64), None)

    @classmethod
    def values(cls, source, name) -> CodeTable:
        """A categorical column on a feature the model reads as a number: each category's value
        (as scikit-learn reads such a column; its codes would silently be other numbers), refused
        where a category is not a number."""
        labels = np.asarray(source, dtype=object)
        numbers = [v for v in labels.tolist() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numbers) != len(labels):
            odd = next(v for v in labels.tolist() if not isinstance(v, (int, float)) or isinstance(v, bool))
            raise InputError(f"column {name!r} is categorical with labels such as {odd!r}, but the model's feature "
                             f"{name!r} is a number: pass its values as numbers (the model was trained on numbers)")
        return cls(source, np.asarray(numbers, dtype=np.float64).reshape(len(labels)), None)

    def of(self, source) -> CodeTable:
        """This table for ``source``, categories equal to its own held by another object (the
        next call's frame, checked by identity first: comparing categories took 2 us a column)."""
        table = CodeTable.__new__(CodeTable)
        table.source, table.lut, table.unseen, table.items = source, self.lut, self.unseen, self.items
        return table

    def codes(self, own: np.ndarray, labels: Labels | None, name) -> np.ndarray:
        """The model's codes of the column's codes ``own`` (integers, -1 missing)."""
        if self.unseen is not None:
            refused = self.unseen.take(own)
            if refused.any():  # (named by a row's category: the categories may hold unused ones)
                labels.refuse(name, _first(self.source, None, int(own[np.flatnonzero(refused)[0]])))
        return self.lut.take(own)

    def code(self, own, labels: Labels | None, name) -> float:
        """The model's code of one of the column's codes (an integer, -1 missing)."""
        items = self.items
        if items is None:
            items = self.items = self.lut.tolist()
        if self.unseen is not None and self.unseen[own]:
            labels.refuse(name, _first(self.source, None, own))
        return items[own]


def numbers_as_labels(values: np.ndarray, name, dtype, labels, labelled: bool = False) -> np.ndarray:
    """A plain number column where the model stored category labels: mapped as labels where the
    labels are numbers (pandas integer categories; ``polars.from_pandas`` turns such a column into
    plain integers), refused where they are not.  Why: read as codes it would silently answer
    otherwise than the same values as categories (LightGBM refuses such a column).  A column
    none of whose values is a label is taken for codes and refused, unless ``labelled`` (a
    record's values are labels by name: one the model never saw is missing) or the labels are
    the codes (a one-row request of a category new since training is then what it is: unseen)."""
    if labels.numbers:
        codes = labels.lookup(values)
        unseen = codes == -1.0
        if not unseen.any():  # (every value a label or missing: nothing to refuse)
            return codes
        given = ~np.isnan(codes)
        if not labelled and not labels.codes_are_labels and given.any() and not (codes[given] >= 0).any():
            # Not one value is a label: these are codes (0, 1, ...) of labels such as 10, 20, 30,
            # and reading them as labels would make every one a missing value.
            raise InputError(
                f"column {name!r} holds plain {dtype} values, none of which is one of the labels of the "
                f"model's categorical feature {name!r} ({listed(list(labels.labels))}): pass the labels "
                "or a categorical column; category codes as numbers are read from NumPy arrays only")
        return labels.unseen(codes, codes == -1.0, name, values)
    raise InputError(
        f"column {name!r} holds plain {dtype} values, but the model's feature {name!r} is categorical "
        f"with the labels {listed(list(labels.labels))}: pass it as a categorical column (pandas "
        "'category', polars Enum, arrow dictionary) or as its labels (strings), which predict maps "
        "to the model's codes; category codes as numbers are read from NumPy arrays only")


def object_column(values: np.ndarray, name, labels) -> np.ndarray:
    """A pandas column of Python objects (a 1-D object array) as float64: labels where the model
    has them (missing: None, NaN, pd.NA); else numbers and missing values alone, as pandas makes
    of records whose column is missing in every row given (a one-row request) or mixes None with
    numbers; anything else (text, bools, other objects) refused."""
    items = values.tolist()
    missing = loaded_pandas_na()  # (None without pandas: no value is NA then)
    if labels is not None:
        items = [None if v is missing else v for v in items]
        odd = next((v for v in items if type(v) not in LABEL_TYPES and isinstance(v, CONTAINERS)), _UNNAMED)
        if odd is not _UNNAMED:  # (a list was read as its item, one row; two, a bare TypeError)
            raise InputError(f"column {name!r} holds {_shown(odd)}, which is no category label (labels are strings "
                             "or numbers, None missing)")
        labels.refuse_words(items, name)
        # (fromiter: each item one value, as np.array would not keep a sequence)
        return labels.codes(np.fromiter(items, dtype=object, count=len(items)), name)
    if all(t in NUMBERS_OR_MISSING or t is type(missing) or issubclass(t, (np.integer, np.floating))
           for t in set(map(type, items))):
        try:
            return np.array([np.nan if v is None or v is missing else v for v in items], dtype=np.float64)
        except OverflowError:  # (an int past float64's range: not a value a model was trained on)
            odd = next(v for v in items if type(v) is int and abs(v) > 1.7976931348623157e308)
            raise InputError(f"column {name!r} holds an integer too large for a number "
                             f"({str(odd)[:20]}...)") from None
    odd = next((v for v in items if not (type(v) in NUMBERS_OR_MISSING or v is missing or
                                         isinstance(v, (np.integer, np.floating)))), _UNNAMED)
    which = "" if odd is _UNNAMED else f" such as {_shown(odd)} ({type(odd).__name__})"
    raise InputError(f"column {name!r} holds object values{which}; predict reads numbers or "
                     "categorical columns (pandas 'category')")


def catboost_numbers(values) -> np.ndarray | None:
    """A number column of a CatBoost model (a pandas column, a 1-D object array) read as CatBoost
    reads it: numbers, a number's text or bytes, ``Decimal``, as the number; None, NaN and pandas'
    NA missing; None where a value is no number (the caller raises its error).  (XGBoost and
    LightGBM refuse text; their models keep the refusal.)"""
    missing = loaded_pandas_na()
    items = [np.nan if v is None or v is missing else v for v in np.asarray(values, dtype=object).tolist()]
    if any(isinstance(v, CONTAINERS) for v in items):  # (a list would be read as its item)
        return None
    try:  # (fromiter: one value an item)
        return np.fromiter(items, dtype=object, count=len(items)).astype(np.float64)
    except (TypeError, ValueError, OverflowError):
        return None


def pandas_na():
    """pandas' NA (a nullable column's missing value, in an object column too)."""
    import pandas as pd

    return pd.NA


def loaded_pandas_na():
    """pandas' NA where pandas is loaded, else None (no value can be it then): for readers of
    Python values (records, object arrays) that must not import pandas themselves."""
    return getattr(sys.modules.get("pandas"), "NA", None)


# Python values' types, for readers of columns and records: numbers or missing; a label's (the
# common ones: others are asked one by one); values that hold values, never a number or a label.
NUMBERS_OR_MISSING = frozenset((float, int, type(None)))
LABEL_TYPES = frozenset((str, float, int, type(None)))
CONTAINERS = (list, tuple, dict, set, frozenset, np.ndarray)


def not_numbers(name, kind: str, dtype) -> InputError:
    """The error of a column whose values are no numbers, by what they are (``kind``: "dates",
    "nested", "intervals", else other): one line naming the column and its type, without the
    text of the conversion that failed (a library's internals: arrow's cast functions, Python's
    float())."""
    if kind == "dates":
        return InputError(f"column {name!r} holds dates, times or durations ({dtype}); predict reads numbers: "
                          "convert it as the model was trained (LightGBM and XGBoost refuse them too)")
    held = {"nested": "lists, structs or maps, several values a row",
            "intervals": "intervals, two numbers a row"}.get(kind)
    if held is not None:
        return InputError(f"column {name!r} holds {held} ({dtype}); predict reads one number a feature "
                          "(or a label, for a categorical one)")
    return InputError(f"column {name!r} of type {dtype} is not numeric; predict reads numbers or categorical columns")


def pandas_column(s, name, labels, numeric: bool = False) -> np.ndarray:
    """A pandas column as float64 (``labels``: the model's labels of a categorical feature, or
    None; ``numeric``: the model reads the feature as a number, so a categorical column's
    values are read, not its codes)."""
    import pandas as pd

    dtype = s.dtype
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype) \
            or isinstance(dtype, pd.PeriodDtype):
        raise not_numbers(name, "dates", dtype)
    if pd.api.types.is_complex_dtype(dtype):  # (NumPy would drop the imaginary parts, with a warning)
        raise InputError(f"column {name!r} holds complex numbers ({dtype}); predict reads real numbers "
                         "(XGBoost and LightGBM refuse them too)")
    arrow = getattr(dtype, "pyarrow_dtype", None)  # (a pandas column of arrow data: read as arrow)
    if arrow is not None and not pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
        import pyarrow as pa

        return arrow_column(pa.array(s.array), name, labels, numeric)
    if isinstance(dtype, pd.CategoricalDtype):
        missing = s.isna().to_numpy()
        if labels is None and numeric:
            return CodeTable.values(dtype.categories, name).codes(s.cat.codes.to_numpy(), None, name)
        if labels is not None:
            # Exactly LightGBM's mapping: the column's categories replaced by the training ones.
            s = s.cat.set_categories(labels.labels)
        codes = s.cat.codes.to_numpy().astype(np.float64)
        unseen = (codes < 0) & ~missing
        codes[missing] = np.nan
        return codes if labels is None else labels.unseen(codes, unseen, name, lambda: s.to_numpy(dtype=object))
    if dtype == object:  # (the array as pandas holds it: its to_numpy with na_value took 90 us a row)
        return object_column(np.asarray(s.array, dtype=object), name, labels)
    if pd.api.types.is_string_dtype(dtype):
        if labels is not None:
            # (missing as None: a nullable string column holds pd.NA, which compares to nothing)
            values = s.to_numpy(dtype=object, na_value=None)
            labels.refuse_words(values.tolist(), name)
            return labels.codes(values, name)
        raise InputError(f"column {name!r} holds {dtype} values; predict reads numbers or "
                         "categorical columns (pandas 'category')")
    if labels is not None:
        return numbers_as_labels(s.to_numpy(dtype=object, na_value=None), name, dtype, labels)
    try:
        return s.to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError):
        raise not_numbers(name, "intervals" if isinstance(dtype, pd.IntervalDtype) else "", dtype) from None


def polars_column(s, name, labels, numeric: bool = False) -> np.ndarray:
    # An Enum's codes are positions in its fixed categories; a Categorical's depend on the
    # order strings were first seen, so without the model's labels they mean nothing.
    if type(s.dtype).__name__ == "Categorical" and labels is None and not numeric:
        raise InputError(f"column {name!r} is a polars Categorical and the model stores no "
                         "category labels, so its codes mean nothing to the model: pass the "
                         "codes the model was trained with, or a pl.Enum of its categories")
    if labels is not None and labels.numbers and s.dtype.is_numeric() and type(s.dtype).__name__ != "Decimal" \
            and (s.dtype.is_float() or not s.null_count()):
        # (numbers where the labels are numbers, as pandas integer categories come from
        # polars.from_pandas: NumPy's copy, as arrow_column reads them, at half the time)
        found = _numbers_at_once(s.to_numpy(), name, labels)
        if found is not None:
            return found
    return arrow_column(s.to_arrow(), name, labels, numeric)


def number_labels(values: np.ndarray, name, labels: Labels) -> np.ndarray:
    """A NumPy column of numbers (a pandas block's row) read as labels, as a pandas column of them
    is (:func:`numbers_as_labels`): looked up at once where NumPy holds them so, else one by one."""
    if len(values) <= FEW_LABELS and values.dtype.kind in "iuf" and labels.numbers:
        # (a request's few rows: each value looked up as a Python number, 0.3 us, where NumPy's
        # sorted search costs 5 us a column; an unseen value goes the general way for its error)
        lookup = labels._lookup()
        codes = [np.nan if v != v else lookup.get(v, -1.0) for v in values.tolist()]
        if -1.0 not in codes:
            return np.array(codes, dtype=np.float64)
    found = _numbers_at_once(values, name, labels)
    return found if found is not None else numbers_as_labels(values.astype(object), name, values.dtype, labels)


# Rows up to which a column of number labels is looked up value by value (number_labels).
FEW_LABELS = 16


def _numbers_at_once(values: np.ndarray, name, labels: Labels) -> np.ndarray | None:
    """A column of numbers read as labels, given as NumPy's array of numbers (looked up at once,
    :meth:`Labels.lookup`), or None where NumPy holds them otherwise.  The caller gives no
    integers with nulls: NumPy's copy of them is float, and past 2**53 one would round onto
    another label."""
    return numbers_as_labels(values, name, values.dtype, labels) if values.dtype.kind in "iuf" else None


def check_dictionary_indices(indices: np.ndarray, size: int, name) -> None:
    """Refuse a dictionary column whose indices (of its valid rows) fall outside its
    dictionary of ``size`` values: arrow makes such arrays only unchecked (``safe=False``), and
    its own ``validate(full=True)`` refuses them; read as they are, an index past the dictionary
    would be a bare IndexError or, past the last label, read as missing."""
    if len(indices) and (indices.min() < 0 or indices.max() >= size):
        bad = int(indices[(indices < 0) | (indices >= size)][0])
        raise InputError(f"column {name!r} is a dictionary column with index {bad} for a dictionary of {size} "
                         "values: not a valid arrow array (arrow's validate(full=True) refuses it too)")


def arrow_column(col, name, labels, numeric: bool = False) -> np.ndarray:
    """A pyarrow Array or ChunkedArray (polars columns arrive as arrow too) as float64
    (``labels`` and ``numeric`` as for :func:`pandas_column`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_null(col.type):
        # Nothing but nulls (arrow's and polars' type of a column whose every value was None, as a
        # request's record with a categorical value None makes): missing in every row, as the
        # same rows are as records or as a pandas column of None
        return np.full(len(col), np.nan)
    if pa.types.is_dictionary(col.type):
        dictionary = col.dictionary.to_numpy(zero_copy_only=False)
        indices = col.indices.to_numpy(zero_copy_only=False)
        if labels is not None:
            lut = labels.lookup(np.asarray(dictionary, dtype=object))
        elif numeric:  # (the categories' values)
            lut = CodeTable.values(dictionary, name).lut[:-1]
        else:
            lut = np.arange(len(dictionary), dtype=np.float64)  # the column's own codes
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        check_dictionary_indices(indices[valid], len(dictionary), name)
        safe = np.where(valid, indices, 0).astype(np.int64)
        codes = np.where(valid, lut[safe] if len(lut) else np.nan, np.nan)
        return codes if labels is None else labels.unseen(
            codes, codes == -1.0, name, lambda: np.asarray(dictionary, dtype=object)[safe])
    if getattr(pa.types, "is_string_view", lambda t: False)(col.type):  # (polars' newest arrow: as strings)
        col = col.cast(pa.large_string())
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        if labels is not None:
            # Through a dictionary of the column's distinct labels (arrow hashes them in C++):
            # each label is then looked up once, not once a row (8x faster for 10,000 rows of
            # five columns, as Spark and Ray hand string columns over).
            encoded = pc.dictionary_encode(col)
            labels.refuse_words(encoded.dictionary.to_pylist(), name)
            return arrow_column(encoded, name, labels)
        raise InputError(f"column {name!r} holds strings; predict reads numbers or categorical columns")
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type) or pa.types.is_fixed_size_binary(col.type) \
            or getattr(pa.types, "is_binary_view", lambda t: False)(col.type):
        # (arrow's cast would parse b"60" as 60: bytes are no numbers, as strings are not)
        raise InputError(f"column {name!r} holds bytes ({col.type}); predict reads numbers, categorical columns, "
                         "or labels as strings")
    if labels is not None:
        if pa.types.is_floating(col.type) or pa.types.is_integer(col.type) and not col.null_count:
            # (as an array of numbers, nulls NaN: 64 rows of five such columns 360 -> 130 us)
            found = _numbers_at_once(col.to_numpy(zero_copy_only=False), name, labels)
            if found is not None:
                return found
        return numbers_as_labels(np.asarray(col.to_pylist(), dtype=object), name, col.type, labels)
    # Integers past 2**53 round to the nearest float64, as NumPy and pandas convert them (arrow's
    # default safe cast refuses them as lossy).
    lossy_ok = pa.types.is_integer(col.type)
    try:
        return pc.cast(col, pa.float64(), safe=not lossy_ok).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        kind = "dates" if pa.types.is_temporal(col.type) else "nested" if pa.types.is_nested(col.type) else ""
        raise not_numbers(name, kind, col.type) from None


"""Records: rows as a service receives them, a dict of feature name to value (one row) or a
list of such dicts, and JSON Lines files of them (``forge predict --input rows.jsonl``).

A record names every feature of the model, in any order, as a frame's columns do
(:func:`silvanforge.inputs.columns.column_order`): a missing or unknown key is an :class:`InputError`
naming it and the record, as a frame's missing or unknown column is.  A value is a number,
a boolean, or None / NaN (missing); a categorical feature's value is its label (``"red"``),
mapped through the model's labels as a frame's categories are, where a label the model never
saw is missing or refused as its library does.  Records need a model with feature names.
"""

from __future__ import annotations

import itertools
import json
import operator
import os
from pathlib import Path

import numpy as np

from silvanforge.inputs.columns import (CONTAINERS, LABEL_TYPES, NUMBERS_OR_MISSING, Labels, column_order, listed,
                                        loaded_pandas_na, numbers_as_labels)
from silvanforge.inputs.native import FirstUse, NativeUnavailable, compiler, load_module
from silvanforge.errors import InputError
from silvanforge.ir.hir import Forest

# The file endings read as JSON Lines (any file whose first character is "{" is, too).
JSONL_ENDINGS = (".jsonl", ".ndjson")
_FLOAT_MAX = int(np.finfo(np.float64).max)  # (an integer past it: no float64, as Python's float says)


def is_records(X) -> bool:
    """Whether ``X`` is one record (a dict) or a list of them."""
    return isinstance(X, dict) or (isinstance(X, list) and bool(X) and isinstance(X[0], dict))


def records_matrix(X, forest: Forest, name=lambda i: f"record {i}", readers: RecordReaders | None = None,
                   dtype: np.dtype = np.dtype(np.float64)) -> np.ndarray:
    """The rows of records ``X`` in the model's feature order: float64, with categorical labels
    as the model's codes; for a model with categories known by hash, the values themselves
    (an object array, which predict hashes).  ``name(i)``: what messages call record ``i``.
    ``readers``: :func:`record_readers` of the model, where the caller keeps them.  ``dtype``:
    float32 where the caller wants the rows so (plain records read in C++ are written so; the
    others are float64, which the caller converts)."""
    if not (forest.hashed_categories or forest.hashed_combinations) and forest.feature_names is not None:
        # Plain records read in C++ (:func:`native_reader`), else value by value, one dict lookup a
        # feature (2-8x faster than the general reading below at 8 to 4,096 records, which decides
        # anything less plain, with its errors)
        readers = readers if readers is not None else record_readers(forest)
        rows = readers.read(X, dtype)
        if rows is not None:
            return rows
        rows = _plain_records([X] if isinstance(X, dict) else X, readers)
        if rows is not None:
            return rows
    if isinstance(X, dict) and X and all(_column_like(v) for v in X.values()):
        first = next(iter(X))
        raise InputError(f"predict got a dict of columns ({first!r}: a {type(X[first]).__name__} of {len(X[first])} "
                         "values): a dict is one record, a feature's name to its value; pass pandas.DataFrame(it) "
                         "or pyarrow.table(it), or a list of records")
    records = [X] if isinstance(X, dict) else X
    wanted = forest.feature_names
    if wanted is None:
        raise InputError("records name their features, and the model has no feature names: "
                         "pass the rows as an array in the model's column order")
    columns = _same_keys_columns(records, forest, name)
    keys, key_of = None, None
    for i, record in enumerate(records if columns is None else ()):
        if not isinstance(record, dict):
            raise InputError(f"{name(i)} is a {type(record).__name__}, not a dict of feature name to value")
        if keys is None or record.keys() != keys:  # the same keys as the last record: checked
            listed_keys = list(record)
            order = column_order(listed_keys, forest, f"the keys of {name(i)}", by_position=False)
            # (each feature's key: its name, or the name LightGBM stored with underscores)
            spelled = [listed_keys[c] for c in order]
            if key_of is not None and spelled != key_of:
                raise InputError(f"{name(i)} spells a feature's key otherwise than {name(0)} "
                                 f"({next(a for a, b in zip(spelled, key_of) if a != b)!r})")
            key_of, keys = spelled, record.keys()
    if columns is None:
        columns = [[record[key] for record in records] for key in key_of]
    na = loaded_pandas_na()  # (records of a frame of nullable columns hold pandas' NA: missing, as None)
    if forest.hashed_categories or forest.hashed_combinations:
        # (the values as they are: None and NA are missing values there, as in an object array)
        out = np.empty((len(records), len(wanted)), dtype=object)
        hashed = forest.hashed_categories or {}
        for f, column in enumerate(columns):  # (fromiter: a list as a value stays one, not a row of values)
            if f not in hashed and not NUMBERS_OR_MISSING.issuperset(map(type, column)):
                _refuse_text(column, wanted[f], name, na)
            elif f in hashed and not LABEL_TYPES.issuperset(map(type, column)):
                odd = next((i for i, v in enumerate(column) if isinstance(v, CONTAINERS)), None)
                if odd is not None:  # (a list or a dict: hashed, a bare TypeError or its text)
                    raise InputError(f"{name(odd)}: {wanted[f]!r} is {_value_text(column[odd])}, "
                                     "not a label or a category code")
            out[:, f] = np.fromiter(column, dtype=object, count=len(records))
        return out
    out = np.empty((len(records), len(wanted)), dtype=np.float64)
    categories = forest.feature_categories or {}
    # (the readers' Labels where the caller keeps them: their lookups are made once)
    kept = {f: labels for f, _, labels in readers.labelled} if readers is not None else {}
    for f, (feature, column) in enumerate(zip(wanted, columns)):
        strings = [v for v in column if isinstance(v, str)]
        if f in categories:
            odd = next((i for i, v in enumerate(column) if not (isinstance(v, str) or _number(v))), None)
            if odd is not None and column[odd] is na:
                column = [None if v is na else v for v in column]
                odd = next((i for i, v in enumerate(column) if not (isinstance(v, str) or _number(v))), None)
            if odd is not None:  # (a list or an object: neither a label nor a code)
                raise InputError(f"{name(odd)}: {feature!r} is {json.dumps(column[odd], default=str)[:40]}, "
                                 "not a label or a category code")
            if strings and all(_number(label) and type(label) is not bool for label in categories[f]):
                at = next(i for i, v in enumerate(column) if isinstance(v, str))
                raise InputError(f"{name(at)}: {feature!r} is the string {column[at][:40]!r}, and the feature's "
                                 f"categories are numbers ({listed(categories[f])}): write it as a number")
            given = next((i for i, v in enumerate(column) if not isinstance(v, str) and v is not None and v == v), None)
            if given is not None and not any(_number(label) for label in categories[f]):
                # (a number among labels is no label and no code: refused, as alone; taken for an
                # unseen label it was a missing value where another record held a label)
                raise InputError(f"{name(given)}: {feature!r} is the number {column[given]!r}, and the feature's "
                                 f"categories are labels ({listed(categories[f])}): write its label (a "
                                 "category's code as a number is read from arrays only)")
            labels = kept.get(f) or Labels(categories[f], forest.unseen_category_error)
            values = np.array(column, dtype=object)
            numbers = not strings and any(v is not None and v == v for v in column)
            # (a record's number is a label: one the model never saw is missing, however many)
            if numbers:
                out[:, f] = numbers_as_labels(values, feature, "number", labels, labelled=True)
                continue
            codes = labels.lookup(values)
            refused = codes == -1.0
            if labels.unseen_error and refused.any():  # (named by its record, as a bad number is)
                at = int(np.flatnonzero(refused)[0])
                raise InputError(f"{name(at)}: {feature!r} is {json.dumps(column[at])[:40]}, a category the model "
                                 f"was not trained with (it knows {listed(categories[f])}), which its library "
                                 "refuses too")
            out[:, f] = labels.unseen(codes, refused, feature, values)
            continue
        bad = strings or [v for v in column if not _number(v)]
        if bad and all(v is na for v in bad):
            column, bad = [None if v is na else v for v in column], None
        if bad:
            at = next(i for i, v in enumerate(column) if v is bad[0])
            raise InputError(f"{name(at)}: {feature!r} is {_clipped(repr(bad[0]))}, not a number (the feature is not "
                             "categorical)")
        try:
            out[:, f] = np.array(column, dtype=np.float64)  # None is NaN
        except OverflowError:  # (an integer past float64's range: Python's float refuses it too)
            at = next(i for i, v in enumerate(column) if type(v) is int and abs(v) > _FLOAT_MAX)
            raise InputError(f"{name(at)}: {feature!r} is an integer too large for a number "
                             f"({str(column[at])[:20]}...)") from None
    return out


def record_readers(forest: Forest) -> RecordReaders:
    """How the model's records are read (a compiled model keeps them)."""
    return RecordReaders(forest)


class RecordReaders:
    """How a record's values are read: the model's feature names in its order
    (:attr:`names`), for each categorical feature (position, the model's label -> code dict, its
    :class:`Labels`) (:attr:`labelled`), a function taking a record's values in that order at
    once (:attr:`take`: a tuple; a KeyError where one is missing), and the plan of the C++
    reader (:meth:`read`), made once it is built."""

    def __init__(self, forest: Forest):
        categories = forest.feature_categories or {}
        self.labelled = [(f, labels._lookup(), labels) for f, labels in
                         ((f, Labels(categories[f], forest.unseen_category_error)) for f in sorted(categories))]
        names = self.names = list(forest.feature_names or ())
        self.take = operator.itemgetter(*names) if len(names) > 1 else (
            lambda record, name=names[0] if names else None: (record[name],))
        self._native = None  # (the C++ reader and its plan; False where it reads none of these records)

    def read(self, X, dtype: np.dtype) -> np.ndarray | None:
        """Records ``X`` (a dict, or a list of dicts) as rows of ``dtype`` (float32 or float64)
        read by the C++ reader; None where it is not ready, or leaves them to the Python reader
        (anything not plain: :func:`_plain_records`' rules)."""
        native = self._native
        if native is None:
            module = native_reader()
            if module is None:
                return None
            plan = self._plan(module)
            native = self._native = (module, plan) if plan is not None else False
        if native is False or dtype not in (FLOAT32, FLOAT64):
            return None
        kind = type(X)
        if kind is dict:
            out = np.empty((1, len(self.names)), dtype)
        elif kind is list and X:
            out = np.empty((len(X), len(self.names)), dtype)
        else:
            return None
        return out if native[0].read(native[1], X, out) == 0 else None

    def _plan(self, module):
        if not self.names or not all(type(n) is str for n in self.names):
            return None
        labelled = []
        for f, lookup, labels in self.labelled:
            strings = {str(k): c for k, c in lookup.items() if isinstance(k, str)}
            exact = labels.exact_numbers()  # (None: labels a number value is not looked up by here)
            numbers = None if exact is None else {}
            for code, label in enumerate(exact or ()):  # (a repeated label keeps its first code, as in Python)
                if label == label:
                    numbers.setdefault(label, float(code))
            labelled.append((f, strings, numbers))
        return module.plan(tuple(self.names), labelled)  # (None where a name repeats)


FLOAT32, FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)
SOURCE = Path(__file__).with_name("record_rows.cpp")


def native_reader(wait: bool = False):
    """The C++ reader of records (``record_rows.cpp``, which says why it exists), built on a thread
    of its own at first use and kept in the user's cache (:mod:`silvanforge.inputs.native`); None
    while it is being built or where it cannot be (``wait``: until it is known).
    ``SILVANFORGE_RECORDS_NATIVE=0`` turns it off."""
    return _NATIVE.get(wait)


def load_native(cache: str | os.PathLike | None = None):
    """The C++ reader of records, built into ``cache`` (the user's cache by default) if it is not
    there; :class:`NativeUnavailable` where it cannot be had."""
    if os.environ.get("SILVANFORGE_RECORDS_NATIVE", "1") == "0":
        raise NativeUnavailable("turned off (SILVANFORGE_RECORDS_NATIVE=0)")
    from silvanforge.artifact.userdirs import cache_home

    cache = cache if cache is not None else os.path.join(cache_home(), "record-rows")
    return load_module(SOURCE, "_record_rows", cache, compiler(), [], [])


_NATIVE = FirstUse(lambda: load_native(), "the C++ reader of records")


_PLAIN = frozenset((float, int, bool, type(None)))  # what a number feature's value may be here


def _plain_records(records: list, readers: RecordReaders) -> np.ndarray | None:
    """Records read value by value: numbers (and booleans) as they are, None missing,
    labels through the model's codes (numbers too, where the labels are numbers; NaN missing).
    None where anything is not that plain (a missing or extra key, a number for a label of
    text, a label the model does not know, another type): the general reading decides, with
    its errors."""
    names, labelled, take = readers.names, readers.labelled, readers.take
    if not records:
        return np.empty((0, len(names)), dtype=np.float64)
    # (Every record a dict of the model's names alone, asked of them all at once, and each
    # record's values taken in C: 1,000 records of 28 numbers 2.7 -> 1.9 ms.)
    if set(map(type, records)) != {dict} or set(map(len, records)) != {len(names)}:
        return None
    try:
        rows = list(map(take, records))
    except KeyError:  # (a key the model does not have, in place of one it has)
        return None
    if labelled:
        rows = [list(row) for row in rows]
        for values in rows:
            for f, lookup, labels in labelled:
                v = values[f]
                if v is None:
                    continue
                kind = type(v)
                if kind is not str and not ((kind is int or kind is float) and labels.numbers):
                    return None  # (a number for a label of text, a bool...: the general reading decides)
                code = values[f] = np.nan if v != v else lookup.get(v, -1.0)
                if code == -1.0:  # (a label the model does not know: the general reading decides)
                    return None
    # Every value's type asked at once (NumPy would also read a 0-d array or a masked constant
    # as a number, which the general reading refuses)
    if not set(map(type, itertools.chain.from_iterable(rows))) <= _PLAIN:
        return None
    try:
        return np.array(rows, dtype=np.float64).reshape(len(rows), len(names))  # (None: NaN)
    except OverflowError:  # (an integer past float64: the general reading names it)
        return None


def _same_keys_columns(records: list, forest: Forest, name) -> list | None:
    """Each feature's values (a tuple a feature, in the model's order) where every record is a
    dict of the first record's keys, taken by one C-level getter a record; None where not (the
    caller's loop then checks each record, with its errors).  Why: keys compared record by record
    and values gathered feature by feature in Python took 3.5 ms of 4,096 records of 14 values."""
    first = records[0]
    if type(first) is not dict or not first:
        return None
    listed_keys = list(first)
    order = column_order(listed_keys, forest, f"the keys of {name(0)}", by_position=False)
    width = len(first)
    if len(order) != width or not all(type(r) is dict and len(r) == width for r in records):
        return None
    spelled = [listed_keys[c] for c in order]
    get = operator.itemgetter(*spelled) if width > 1 else (lambda r, k=spelled[0]: (r[k],))
    try:  # (as many keys as the first's, each of them there: its keys)
        return list(zip(*map(get, records)))
    except KeyError:
        return None


def _refuse_text(column: list, feature: str, name, na) -> None:
    """The error naming the record of the first value of a number feature of a CatBoost model
    that is neither missing nor a number (CatBoost reads "41.5", b"41.5" and Decimal("41.5") as
    41.5: whatever Python's float reads): the rows' reader would name it by column, without the
    record."""
    for i, v in enumerate(column):
        if v is None or v is na:
            continue
        try:
            float(v)
            continue
        except (TypeError, ValueError, OverflowError):
            pass
        raise InputError(f"{name(i)}: {feature!r} is {_value_text(v)}, not a number (the feature is not categorical)")


def _value_text(v) -> str:
    """A record's value as a message shows it: JSON's text of what JSON holds, else its repr."""
    try:
        text = json.dumps(v) if isinstance(v, (str, list, dict)) else repr(v)
    except (TypeError, ValueError):
        text = repr(v)
    return _clipped(text)


def _column_like(v) -> bool:
    """Whether a record's value is a column of values (a list, a 1-D array, a Series), not one."""
    return not isinstance(v, (str, bytes, dict)) and hasattr(v, "__len__") and np.ndim(v) >= 1


def _clipped(text: str) -> str:
    """A value's text cut to 40 characters (a list's whole text, a column's, is no message)."""
    return text if len(text) <= 40 else text[:37] + "..."


def _number(v) -> bool:
    return v is None or (isinstance(v, (int, float, np.integer, np.floating, np.bool_)))


def is_jsonl(path: str, text: str | None = None) -> bool:
    """Whether ``path`` (or its ``text``) holds JSON Lines: by its ending, or a first "{"."""
    if path.lower().endswith(JSONL_ENDINGS):
        return True
    return text is not None and text.lstrip()[:1] == "{"


def read_jsonl(text: str, source: str) -> tuple[list[dict], list[int]]:
    """The records of JSON Lines ``text`` and their line numbers; a line that is not a JSON
    object, or names a key twice, is an :class:`InputError` naming ``source`` and the line.
    Blank lines are skipped."""
    records, lines = [], []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=unique_keys)
        except json.JSONDecodeError as exc:
            raise InputError(f"{source}: line {lineno}: not JSON ({exc.msg})") from None
        except DuplicateKey as exc:
            raise InputError(f"{source}: line {lineno}: the key {exc.args[0]!r} twice in one object "
                             "(which value is meant?)") from None
        except RecursionError:
            raise InputError(f"{source}: line {lineno}: arrays or objects nested too deeply to be a record") from None
        if not isinstance(record, dict):
            raise InputError(f"{source}: line {lineno}: a JSON {_JSON_KINDS.get(type(record), 'value')}, not an "
                             "object of feature name to value")
        records.append(record)
        lines.append(lineno)
    return records, lines


# JSON's names of what a line other than an object holds.
_JSON_KINDS = {list: "array of values", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


class DuplicateKey(Exception):
    """A JSON object naming a key twice (the standard library would keep the last silently)."""


def unique_keys(pairs: list) -> dict:
    """``json``'s ``object_pairs_hook`` refusing an object that names a key twice (DuplicateKey,
    the key its argument): JSON Lines files here, ``forge serve``'s bodies."""
    found = dict(pairs)
    if len(found) != len(pairs):
        seen = set()
        raise DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return found


def jsonl_matrix(records: list[dict], lines: list[int], forest: Forest, source: str) -> np.ndarray:
    """:func:`records_matrix` of a JSON Lines file's records, messages naming its lines."""
    if not records:
        return np.empty((0, forest.input_features), dtype=np.float64)
    try:
        return records_matrix(records, forest, lambda i: f"line {lines[i]}")
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None


__all__ = ["JSONL_ENDINGS", "is_jsonl", "is_records", "jsonl_matrix", "read_jsonl", "record_readers", "records_matrix"]

"""What ``POST /predict`` accepts, turned into rows before they join a batch.

A body is one JSON object in one of these shapes (``"output_margin": true`` may go with any, and
``"pred_contribs": true`` or ``"pred_leaf": true``, LightGBM's ``"pred_contrib"`` too, for each
row's SHAP contributions or leaves beside its predictions):

    {"rows": [{"f0": 1.5, "colour": "red", ...}, ...]}   records by feature name (a list, or one)
    {"f0": 1.5, "colour": "red", ...}                     one record, the object itself
    {"columns": {"f0": [1.5, 2.0], "colour": ["red", "blue"], ...}}   one list a feature
    {"data": [[1.5, 0.0, ...], ...]}                       rows of numbers in the model's order

Records and columns are read as ``predict`` reads records (:mod:`silvanforge.inputs.records`: every
feature named, categorical values as labels, null as missing); ``data`` as an array (null is
missing, categorical features as codes).  Whatever is wrong with a body is a :class:`BadRequest`
with one line naming it, raised here, before the rows meet other requests' rows.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np

from silvanforge.errors import InputError
from silvanforge.inputs.records import DuplicateKey, records_matrix, unique_keys

from .json_io import loads

SHAPES = ("rows", "columns", "data")
# A body's flags: margins, and an output beside the predictions (predict's keyword; LightGBM's
# spelling of pred_contribs read as it)
FLAGS = ("output_margin", "pred_contribs", "pred_contrib", "pred_leaf")
OUTPUT_OF_FLAG = {"pred_contribs": "pred_contribs", "pred_contrib": "pred_contribs", "pred_leaf": "pred_leaf"}
USAGE = ('a body is {"rows": [{feature: value, ...}, ...]}, one record {feature: value, ...}, '
         '{"columns": {feature: [values], ...}} or {"data": [[numbers], ...]}, '
         'with "output_margin": true, "pred_contribs": true or "pred_leaf": true optionally')


class BadRequest(InputError):
    """A body ``POST /predict`` cannot read (HTTP 400)."""


def parse_body(body: bytes, forest, readers: tuple | None = None, lists: bool = False,
               taken: frozenset | None = None) -> tuple[np.ndarray | list, bool, str | None]:
    """The rows a body asks predictions for (the model's feature order; float64, or objects for a
    model that hashes its categories), whether it asks for margins, and the output it asks for
    beside the predictions (``"pred_contribs"``, ``"pred_leaf"``, or None).  ``readers``: the model's
    :func:`silvanforge.inputs.records.record_readers`, and ``taken``: its :func:`taken_keys`, kept
    by the caller (else made a body).  ``lists``: a row of ``data`` holding only floats and nulls
    may come back as it is, a list of one list (what
    :class:`silvanforge_serve.batching.MicroBatcher` makes float64, null NaN)."""
    try:
        doc = loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("the body nests arrays or objects too deeply to be rows") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"the body is a JSON {_kind(doc)}; {USAGE}")
    _refuse_keys_twice(body, doc)
    if taken is None:
        taken = taken_keys(forest)
    if len(doc) == 1 and "data" in doc and "data" not in taken:  # (rows of numbers, as services send them)
        return _data(doc["data"], forest, lists), False, None
    flags = [key for key in FLAGS if key in doc and key not in taken]
    margin, explained = False, None
    if flags:  # (read, and the rest of the body is the rows)
        margin, explained = _flags(doc, flags)
        doc = {key: value for key, value in doc.items() if key not in flags}
    shapes = [key for key in SHAPES if key in doc and key not in taken]
    if not shapes:  # one record, the object itself
        return _records(doc, forest, readers), margin, explained
    if len(doc) > 1:
        other = [key for key in doc if key != shapes[0]]
        if other[0] in taken:  # (a flag's name that the model has as a feature's)
            role = "a shape of the body" if other[0] in SHAPES else "a flag"
            raise BadRequest(f"unexpected key {other[0]!r} next to {shapes[0]!r}: {other[0]!r} is one of this model's "
                             f"features, so a body means it as a feature's value (in a record), never as {role}")
        raise BadRequest(f"unexpected key {other[0]!r} next to {shapes[0]!r}; {USAGE}")
    key = shapes[0]
    value = doc[key]
    if key == "rows":
        if not isinstance(value, (list, dict)):
            raise BadRequest(f'"rows" is a JSON {_kind(value)}, not a list of records')
        return _records(value, forest, readers), margin, explained
    if key == "columns":
        return _columns(value, forest, readers), margin, explained
    return _data(value, forest, lists), margin, explained


def _refuse_keys_twice(body, doc: dict) -> None:
    """A BadRequest where an object of the body names a key twice (JSON readers keep the last
    value silently; ``forge predict``'s JSON Lines reader refuses it too).  Every key is followed
    by a colon: a body with no more colons than the keys it was read into names none twice (a
    count of its bytes, 0.1-0.3 us a record of numbers); where labels hold colons, the colons after
    a quote (without a backslash in the body, a string holds no quote: those are the keys', 3 us a
    record); else (a key twice, or escaped quotes in strings) it is read again keeping every key."""
    if not isinstance(body, (bytes, bytearray)):
        return
    colons = body.count(b":")
    if colons <= len(doc):
        return
    keys = _keys_read(doc)
    if colons <= keys:
        return
    if b"\\" not in body and len(_KEY_COLON.findall(body)) <= keys:
        return
    try:
        json.loads(body, object_pairs_hook=unique_keys, parse_constant=lambda name: None)
    except DuplicateKey as exc:
        raise BadRequest(f"the key {exc.args[0]!r} twice in one object of the body (which value is meant?)") from None
    except (ValueError, RecursionError):  # (what orjson read and json does not: as orjson read it)
        pass


def _keys_read(doc: dict) -> int:
    """The keys of the objects of a body as bodies hold them: the body's, a record's or the columns'
    (objects nested deeper are not counted: their body is read again)."""
    keys = len(doc)
    for value in doc.values():
        if type(value) is dict:
            keys += len(value)
        elif type(value) is list and value and type(value[0]) is dict:
            keys += sum([len(record) for record in value if type(record) is dict])
    return keys


# A key's closing quote and its colon (JSON's whitespace between).
_KEY_COLON = re.compile(rb'"[ \t\r\n]*:')


def _flags(doc: dict, flags: list) -> tuple[bool, str | None]:
    """A body's ``output_margin`` and the output it asks for beside the predictions, from its
    ``flags`` (those of :data:`FLAGS` it holds that are no feature names), each true or false."""
    margin, explained = False, None
    for key in flags:
        value = doc[key]
        if not isinstance(value, bool):
            raise BadRequest(f"{key} must be true or false, got {json.dumps(value)}")
        if key == "output_margin":
            margin = value
        elif value:
            if explained is not None and explained != OUTPUT_OF_FLAG[key]:
                raise BadRequest("a body asks for pred_contribs or pred_leaf, not both")
            explained = OUTPUT_OF_FLAG[key]
    return margin, explained


def taken_keys(forest) -> frozenset:
    """The body's own keys (its shapes and flags) that are feature names of ``forest``, where a
    record means them as features.  A server keeps them (a wide model's list of names was
    scanned for them at each request)."""
    names = set(forest.feature_names or ())
    return frozenset(key for key in (*SHAPES, *FLAGS) if key in names)


def _unnamed(forest, what: str) -> None:
    """A BadRequest where the model has no feature names for ``what`` (records, columns) to name:
    its rows go as ``data``, in its column order (``predict``'s own error speaks of arrays)."""
    if forest.feature_names is None:
        raise BadRequest(f"{what} name their features, and the model has no feature names (it was trained on an "
                         f'array): send its rows as {{"data": [[numbers], ...]}}, {forest.input_features} values '
                         "each in the model's column order")


def _records(records, forest, readers=None) -> np.ndarray:
    _unnamed(forest, "records")
    if isinstance(records, list) and not records:
        return _empty(forest)
    try:
        return records_matrix(records, forest, readers=readers)
    except InputError as exc:
        raise BadRequest(str(exc)) from None


def _columns(columns, forest, readers=None) -> np.ndarray:
    if not isinstance(columns, dict):
        raise BadRequest(f'"columns" is a JSON {_kind(columns)}, not an object of feature name to a list of values')
    _unnamed(forest, "columns")
    lengths = set()
    for name, values in columns.items():
        if not isinstance(values, list):
            raise BadRequest(f"column {name!r} is a JSON {_kind(values)}, not a list of values")
        lengths.add(len(values))
    if len(lengths) > 1:
        raise BadRequest(f"the columns have different lengths ({', '.join(map(str, sorted(lengths)))})")
    names = list(columns)
    records = [dict(zip(names, row)) for row in zip(*columns.values())]
    try:
        if not records:  # no rows, but the names are still checked
            records_matrix([dict.fromkeys(names)], forest)
            return _empty(forest)
        return records_matrix(records, forest, name=lambda i: f"row {i} of the columns", readers=readers)
    except InputError as exc:
        raise BadRequest(str(exc)) from None


def _data(data, forest, lists: bool = False) -> np.ndarray | list:
    if type(data) is list and len(data) == 1 and type(data[0]) is list and len(data[0]) == forest.input_features \
            and not (forest.hashed_categories or forest.hashed_combinations):
        # one row of plain numbers, as a service sends them (the checks below, made for many
        # rows, were a tenth of the event loop's time under load)
        kinds = set(map(type, data[0]))
        if lists and _FLOATS.issuperset(kinds):  # (no integer, which could be past float64)
            return data
        if _NUMBERS.issuperset(kinds):
            try:
                return np.array(data, dtype=np.float64)
            except OverflowError:
                pass  # (an integer past float64: named below)
    if not isinstance(data, list) or not all(isinstance(row, list) for row in data):
        raise BadRequest('"data" must be a list of rows, each a list of numbers ([[1.5, 0.0, ...], ...])')
    if not data:
        return _empty(forest)
    width = forest.input_features
    for i, row in enumerate(data):
        if len(row) != width and not (forest.wider_rows and len(row) > width and len(row) == len(data[0])):
            raise BadRequest(f"row {i} of data has {len(row)} values; the model expects {width} features per row")
    hashed = forest.hashed_categories or forest.hashed_combinations
    if not hashed:  # (numpy would read "1.5" as a number)
        # (the types of a row's values checked at once: a third of the time of each value's)
        bad = None if all(_NUMBERS.issuperset(map(type, row)) for row in data) else \
            next(((i, v) for i, row in enumerate(data) for v in row
                  if not (v is None or isinstance(v, (int, float)))), None)
        if bad is not None:
            raise BadRequest(f"row {bad[0]} of data holds {json.dumps(bad[1])}, not a number (null is missing)")
        try:
            return np.array(data, dtype=np.float64)  # null is NaN
        except OverflowError:
            bad = next((i, v) for i, row in enumerate(data) for v in row if type(v) is int and _too_large(v))
            raise BadRequest(f"row {bad[0]} of data holds an integer too large for a number ({str(bad[1])[:20]}...)") \
                from None
    # a model that hashes its categories reads labels and numbers alike: objects, null as NaN
    rows = np.array(data, dtype=object)
    return np.where(rows == None, math.nan, rows)  # noqa: E711 - elementwise


# What JSON numbers and null read as (and booleans, which are ints to ``isinstance``).
_NUMBERS = frozenset((float, int, bool, type(None)))
_FLOATS = frozenset((float, type(None)))


def _too_large(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return True
    return False


def _empty(forest) -> np.ndarray:
    return np.empty((0, forest.input_features))


def _kind(value) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")

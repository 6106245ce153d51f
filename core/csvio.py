"""Rows in and predictions out for the command line: CSV and NumPy ``.npy`` files.

CSV input has one row per input and one column per feature.  The first line is a header of
feature names when any of its cells is not a number.  A header is read as a data frame's
column names are (:mod:`silvanforge.inputs`): for a model with feature names it must name them
all, in any order (a missing or unknown name is an error naming it, as XGBoost's feature-name
check is); for a model without names the columns are taken by position.  A cell of a
categorical feature may be the category's label (``red``), mapped to the model's code as a
data frame's category column is (a number there is the category's code, as in an array).
An empty cell, ``nan``, ``na``, ``null`` or ``none`` (any
case) is a missing value.  Number cells are parsed as float64, so the compiled model converts
them exactly as the training library would.

CSV output has one line per input and one column per output (K columns for K classes) written
with enough digits to read back the identical value: ``%.9g`` for float32 and the shortest
round-tripping ``repr`` for float64.  ``-`` means standard input / output.

Every problem with a file is raised as :class:`silvanforge.errors.InputError` naming the file
(and line and column for CSV), so the CLI can print it as one line.
"""

from __future__ import annotations

import csv
import io
import os
import sys
import dataclasses
from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .inputs import column_order, label_codes

NPY_MAGIC = b"\x93NUMPY"
MISSING_CELLS = frozenset({"", "nan", "na", "null", "none"})


@dataclass
class Rows:
    """Input rows read from a file, with the header names if the file had a header."""

    values: np.ndarray  # (n, columns) float64 (CSV; NaN where a cell is a label) or the .npy's
    header: list[str] | None = None
    note: str | None = None  # something worth telling the user (columns matched by name...)
    # CSV cells that are not numbers, by column: (row indices, their text, their line numbers)
    labels: dict = dataclasses.field(default_factory=dict)
    name: str = ""  # the file, as messages call it


def is_npy(path: str) -> bool:
    if path == "-":
        return False
    if path.lower().endswith(".npy"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(len(NPY_MAGIC)) == NPY_MAGIC
    except OSError:
        return False


# --------------------------------------------------------------------------- reading
def read_rows(path: str, num_features: int | None = None,
              feature_names: list[str] | None = None) -> Rows:
    """Read the input rows at ``path`` (``.npy`` by extension or content, otherwise CSV).

    ``num_features`` and ``feature_names`` (the model's) shape an empty file and say whether
    the header's names are reordered (a note); :func:`model_rows` gives the rows a model reads.
    """
    if is_npy(path):
        return Rows(_read_npy(path))
    if path == "-":
        return _parse_csv(sys.stdin.read(), "<stdin>", num_features, feature_names)
    if not os.path.exists(path):
        raise InputError(f"input file not found: {path}")
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text CSV file (and not a .npy file)") from None
    except OSError as exc:
        raise InputError(f"cannot read input file {path}: {exc.strerror or exc}") from None
    return _parse_csv(text, path, num_features, feature_names)


def _read_npy(path: str) -> np.ndarray:
    try:
        arr = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"input file not found: {path}") from None
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npy array ({exc})") from None
    if isinstance(arr, np.lib.npyio.NpzFile):  # pragma: no cover - np.load of .npz
        raise InputError(f"{path}: an .npz archive; save one 2-D array with numpy.save")
    if arr.ndim != 2:
        raise InputError(f"{path}: expected a 2-D array (rows, features), got shape {arr.shape}")
    return arr


def _cell(text: str) -> float | None:
    """The cell as a float, NaN for a missing cell, ``None`` if it is not a number."""
    s = text.strip()
    if s.lower() in MISSING_CELLS:
        return np.nan
    try:
        return float(s)
    except ValueError:
        return None


def _parse_csv(text: str, name: str, num_features: int | None,
               feature_names: list[str] | None) -> Rows:
    try:
        lines = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise InputError(f"{name}: malformed CSV ({exc})") from None
    numbered = [(i, row) for i, row in enumerate(lines, start=1) if row and any(c.strip() for c in row)]
    header = None
    if numbered and any(_cell(c) is None for c in numbered[0][1]):
        header = [c.strip() for c in numbered[0][1]]
        numbered = numbered[1:]
    width = len(header) if header is not None else (len(numbered[0][1]) if numbered else num_features or 0)
    values = np.empty((len(numbered), width), dtype=np.float64)
    labels: dict[int, tuple[list, list, list]] = {}
    for r, (lineno, row) in enumerate(numbered):
        if len(row) != width:
            what = "the header has" if header is not None else "the first row has"
            raise InputError(f"{name}: line {lineno} has {len(row)} columns but {what} {width}")
        for c, cell in enumerate(row):
            v = _cell(cell)
            if v is None:  # a category's label, or a mistake: model_rows tells which
                rows, texts, lines = labels.setdefault(c, ([], [], []))
                rows.append(r)
                texts.append(cell.strip())
                lines.append(lineno)
                v = np.nan
            values[r, c] = v
    note = None
    if header is not None and feature_names and header != list(feature_names) \
            and sorted(header) == sorted(feature_names):
        note = f"{name}: columns matched to the model's features by name"
    return Rows(values, header, note, labels, name)


def model_rows(rows: Rows, forest) -> np.ndarray:
    """The rows ``forest`` reads from a file's: header columns matched to its features by name
    (or by position), label cells of categorical features mapped to their codes; anything else
    that is not a number is an :class:`InputError` naming its line and column."""
    if rows.header is None:  # by position; predict checks the count
        order = list(range(rows.values.shape[1]))
    else:
        try:
            order = column_order(rows.header, forest, "the header's columns")
        except InputError as exc:
            raise InputError(f"{rows.name}: {exc}") from None
    values = rows.values[:, order] if order != list(range(rows.values.shape[1])) else rows.values
    categories = forest.feature_categories or {}
    for feature, column in enumerate(order):
        found = rows.labels.get(column)
        if found is None:
            continue
        at, texts, lines = found
        if categories.get(feature) is None:
            what = "" if not rows.header else f" (feature {rows.header[column]!r} is not categorical)"
            raise InputError(f"{rows.name}: line {lines[0]}, column {column + 1}: {texts[0]!r} is not a number{what}")
        name = rows.header[column] if rows.header else f"column {column + 1}"
        try:
            values[np.asarray(at), feature] = label_codes(categories[feature], forest, np.array(texts, dtype=object), name)
        except InputError as exc:
            raise InputError(f"{rows.name}: {exc}") from None
    return values


# --------------------------------------------------------------------------- writing
def format_csv(y: np.ndarray) -> str:
    """Predictions as CSV text: one line per row, one column per output, exact digits."""
    y = np.asarray(y)
    if y.ndim == 1:
        y = y[:, None]
    elif y.ndim != 2:
        y = y.reshape(y.shape[0], -1)
    if y.dtype == np.float32:
        cells = np.char.mod("%.9g", y) if y.size else np.empty(y.shape, dtype=str)
        lines = (",".join(row) for row in cells.tolist())
    elif np.issubdtype(y.dtype, np.floating):
        lines = (",".join(map(repr, row)) for row in y.astype(np.float64).tolist())
    else:
        lines = (",".join(map(str, row)) for row in y.tolist())
    out = "\n".join(lines)
    return out + "\n" if out else ""


def write_predictions(path: str | None, y: np.ndarray) -> None:
    """Write ``y`` to ``path``: ``.npy`` by extension, CSV otherwise, stdout for ``None``/``-``."""
    if path is None or path == "-":
        sys.stdout.write(format_csv(y))
        sys.stdout.flush()
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InputError(f"cannot write {path}: directory {directory} does not exist")
    try:
        if path.lower().endswith(".npy"):
            np.save(path, np.asarray(y), allow_pickle=False)
        else:
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(format_csv(y))
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None

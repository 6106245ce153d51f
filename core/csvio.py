"""Rows in and predictions out for the command line: CSV and NumPy ``.npy`` files.

CSV input has one row per input and one column per feature.  The first line is a header of
feature names when any of its cells is not a number; a header that names exactly the model's
features (in any order) selects the columns by name, otherwise columns are taken by position.
An empty cell, ``nan``, ``na``, ``null`` or ``none`` (any case) is a missing value.  Cells are
parsed as float64, so the compiled model converts them exactly as the training library would.

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
from dataclasses import dataclass

import numpy as np

from .errors import InputError

NPY_MAGIC = b"\x93NUMPY"
MISSING_CELLS = frozenset({"", "nan", "na", "null", "none"})


@dataclass
class Rows:
    """Input rows read from a file, with the header names if the file had a header."""

    values: np.ndarray  # (n, columns) float64 (CSV) or whatever dtype the .npy holds
    header: list[str] | None = None
    note: str | None = None  # something worth telling the user (columns matched by position...)


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

    ``num_features`` and ``feature_names`` (the model's) shape an empty file and select header
    columns by name; a count mismatch is left to ``predict``, whose message names both counts.
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
    for r, (lineno, row) in enumerate(numbered):
        if len(row) != width:
            what = "the header has" if header is not None else "the first row has"
            raise InputError(f"{name}: line {lineno} has {len(row)} columns but {what} {width}")
        for c, cell in enumerate(row):
            v = _cell(cell)
            if v is None:
                raise InputError(f"{name}: line {lineno}, column {c + 1}: {cell.strip()!r} is not a number")
            values[r, c] = v
    note = None
    if header is not None and feature_names and header != list(feature_names):
        if sorted(header) == sorted(feature_names) and len(set(header)) == len(header):
            order = [header.index(n) for n in feature_names]
            values = values[:, order]
            note = f"{name}: columns matched to the model's features by name"
        else:
            note = f"{name}: the header does not name the model's features; columns are used by position"
    return Rows(values, header, note)


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

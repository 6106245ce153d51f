"""Rows in and predictions out for the command line: CSV, JSON Lines and NumPy ``.npy`` files,
and Parquet and Arrow IPC (Feather v2) files in.

A Parquet or Arrow IPC file (Feather v2), known by its first and last bytes, is read with
pyarrow (the ``pyarrow`` extra) into a table, which ``predict`` reads as any pyarrow Table:
columns by name, dictionary and string columns of categorical features by label.

A JSON Lines file (``.jsonl``/``.ndjson``, or any text whose first character is ``{``) holds a
record a line, a JSON object of feature name to value (:mod:`silvanforge.inputs.records`).

CSV input has one row per input and one column per feature.  The first line is a header of
feature names when it is plausibly one: every cell a name (empty cells allowed, as the index
column pandas writes), none a number, a missing value (``nan``...) or a misspelt number
(``1,5``, ``1.2.3``); ``--header``/``--no-header`` (``header=True/False``) decide instead.  A
first line with a number among its cells is data, so a typo in one of its cells is an error
naming it, never a row silently dropped; a header read for a model without feature names says
so (:attr:`Rows.note`), since nothing then checks it.  A header is read as a data frame's
column names are (:mod:`silvanforge.inputs.rows`): for a model with feature names it must name them
all, in any order (a missing or unknown name is an error naming it, as XGBoost's feature-name
check is); for a model without names the columns are taken by position.  A cell of a
categorical feature may be the category's label (``red``), mapped to the model's code as a
data frame's category column is (a number there is the category's code, as in an array; one that
is no code but one of the feature's labels, 40 of categories 30, 10, 20, 40, is refused).
An empty cell, ``nan``, ``na``, ``null`` or ``none`` (any
case) is a missing value, but where a categorical feature has that word as a label (a category
``NA`` or ``None``): there it is the label (a feature whose categories are known by hash,
CatBoost's, reads any word as its text, as CatBoost reads a file).  Empty lines are skipped; a line of empty cells (``,,``) is a row of
missing values.  Malformed lines (a row wider or narrower than the first, a NUL byte, an
unbalanced quote, a quoted cell running over lines) are errors naming the line.  Number cells are parsed as float64, so the compiled model converts
them exactly as the training library would.

CSV output has one line per input and one column per output (K columns for K classes) written
with enough digits to read back the identical value: ``%.9g`` for float32 and the shortest
round-tripping ``repr`` for float64.  ``-`` means standard input / output.

Every problem with a file is raised as :class:`silvanforge.errors.InputError` naming the file
(and line and column for CSV), so the CLI can print it as one line.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

from silvanforge.artifact.archive import UMASK as _UMASK
from silvanforge.errors import InputError
from silvanforge.inputs.columns import Labels
from silvanforge.inputs.rows import column_order, label_codes
from silvanforge.inputs.records import JSONL_ENDINGS, is_jsonl, jsonl_matrix, read_jsonl

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
    # JSON Lines: the records and their line numbers (``values`` is then empty)
    records: tuple[list, list] | None = None
    table: object = None  # Parquet and Arrow files: a pyarrow Table (``values`` is then empty)
    # CSV cells read as missing from a word (``NA``, ``null``...), by column: (row indices, their
    # text); a categorical feature whose labels hold the word reads it as that label
    words: dict = dataclasses.field(default_factory=dict)
    row_lines: list = dataclasses.field(default_factory=list)  # CSV: each row's line number


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
              feature_names: list[str] | None = None, header: bool | None = None) -> Rows:
    """Read the input rows at ``path`` (``.npy`` by extension or content, Parquet and Arrow files by
    content, JSON Lines by ending or a first "{", otherwise CSV).

    ``num_features`` and ``feature_names`` (the model's) shape an empty file and say whether
    the header's names are reordered (a note); ``header``: the CSV's first line is a header
    (True), is data (False), or is a header when it is plausibly one (None).
    :func:`model_rows` gives the rows a model reads.
    """
    if path != "-" and os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        # A pipe or a device (<(...), /dev/stdin): read once, whole; a peek at its head for the
        # .npy magic would consume what the reader after it then never sees.
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise InputError(f"cannot read input file {path}: {exc.strerror or exc}") from None
        if data.startswith(NPY_MAGIC):
            return Rows(_read_npy(io.BytesIO(data), path))
        kind = _columnar_kind(data)
        if kind is not None:
            return _read_table(data, path, kind)
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InputError(_not_text(path)) from None
        _refuse_json_array(text, path)
        if is_jsonl(path, text):
            return Rows(np.empty((0, 0)), name=path, records=read_jsonl(text, path))
        return _parse_csv(text, path, num_features, feature_names, header)
    if is_npy(path):
        return Rows(_read_npy(path))
    kind = _columnar_kind(_ends(path))
    if kind is not None:
        return _read_table(path, path, kind)
    if path == "-":
        text = sys.stdin.read()
        _refuse_json_array(text, "<stdin>")
        if is_jsonl(path, text):
            return Rows(np.empty((0, 0)), name="<stdin>", records=read_jsonl(text, "<stdin>"))
        return _parse_csv(text, "<stdin>", num_features, feature_names, header)
    if not os.path.exists(path):
        raise InputError(f"input file not found: {path}")
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise InputError(_not_text(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read input file {path}: {exc.strerror or exc}") from None
    _refuse_json_array(text, path)
    if is_jsonl(path, text):
        return Rows(np.empty((0, 0)), name=path, records=read_jsonl(text, path))
    return _parse_csv(text, path, num_features, feature_names, header)


def _not_text(path: str) -> str:
    """What an input of bytes that are not UTF-8 text is told (by the kind its name says)."""
    kind = "JSON Lines" if path.lower().endswith(JSONL_ENDINGS) else "CSV"
    return f"{path}: not UTF-8 text, so not a {kind} file (nor a .npy, Parquet or Arrow file)"


# The bytes that begin and end the columnar files read with pyarrow (both: a CSV whose first
# name starts PAR1 stays a CSV).
COLUMNAR_MAGIC = {b"PAR1": "Parquet", b"ARROW1": "Arrow"}


def _ends(path: str) -> bytes:
    """The first and last 8 bytes of the file at ``path`` (none for stdin, a missing or
    unreadable file, or one too short to be a columnar file)."""
    if path == "-":
        return b""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8 or f.seek(0, os.SEEK_END) < 16:
                return b""
            f.seek(-8, os.SEEK_END)
            return head + f.read(8)
    except OSError:
        return b""


def _columnar_kind(data: bytes) -> str | None:
    """"Parquet" or "Arrow" where ``data`` (a file's bytes, or its first and last 8) begins and
    ends as such a file, else None."""
    return next((kind for magic, kind in COLUMNAR_MAGIC.items()
                 if len(data) >= 2 * len(magic) and data.startswith(magic) and data.endswith(magic)), None)


def _read_table(source, path: str, kind: str) -> Rows:
    """A Parquet or Arrow IPC file (``source``: its path, or its bytes) as a pyarrow Table."""
    try:
        import pyarrow as pa
        import pyarrow.feather as feather
        import pyarrow.parquet as parquet
    except ImportError:
        raise InputError(f"{path}: a {kind} file, which forge reads with pyarrow: pip install pyarrow "
                         "(or write the rows as CSV)") from None
    where = pa.BufferReader(source) if isinstance(source, bytes) else source
    try:
        table = parquet.read_table(where) if kind == "Parquet" else feather.read_table(where)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable {kind} file ({str(exc)[:200]})") from None
    return Rows(np.empty((0, 0)), name=path, table=table)


def _refuse_json_array(text: str, name: str) -> None:
    """A JSON document of records (``[{...}, ...]``) is no CSV: say what is read instead."""
    start = text.lstrip()
    if start[:1] == "[" and start[1:].lstrip()[:1] == "{":
        raise InputError(f"{name}: a JSON array; predict reads JSON Lines, one object of feature name to value "
                         "a line (X.jsonl)")


def _read_npy(source, path: str | None = None) -> np.ndarray:
    """The 2-D array of the .npy file ``source`` (a path, or a file object of ``path``'s bytes)."""
    path = source if path is None else path
    try:
        arr = np.load(source, allow_pickle=False)
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
    if "_" in s or not s.isascii():  # (Python's float reads "1_000" and other scripts' digits)
        return None
    try:
        return float(s)
    except ValueError:
        return None


# Characters a number is written with: a cell of only these (and a digit) is a number, or a
# misspelt one ("1,5", "1.2.3", "1 000"), never a feature name.
_NUMBER_CHARS = frozenset("0123456789.,+-eE _")


def _is_name(cell: str) -> bool:
    s = cell.strip()
    if not s:
        return True  # the unnamed index column pandas writes
    if _cell(s) is not None:
        return False
    return not (set(s) <= _NUMBER_CHARS and any(ch.isdigit() for ch in s))


def _records(text: str, name: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of each record; malformed CSV an InputError naming the line."""
    reader = csv.reader(io.StringIO(text), strict=True)
    out, start = [], 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return out
        except csv.Error as exc:
            raise InputError(f"{name}: line {start}: malformed CSV ({exc}; an unbalanced quote?)") from None
        lineno, start = start, reader.line_num + 1
        for c, cell in enumerate(row, start=1):
            if "\0" in cell:
                raise InputError(f"{name}: line {lineno}, column {c}: a NUL byte: not a text CSV file")
            if "\n" in cell or "\r" in cell:
                raise InputError(f"{name}: line {lineno}, column {c}: a quoted cell runs over several "
                                 "lines (an unbalanced quote?)")
        # An empty or blank line is skipped; a line of empty cells (or a quoted empty cell) is a
        # row of missing values.
        if len(row) > 1 or (len(row) == 1 and not row[0].isspace()):
            out.append((lineno, row))


def _parse_csv(text: str, name: str, num_features: int | None,
               feature_names: list[str] | None, header_mode: bool | None = None) -> Rows:
    numbered = _records(text, name)
    header = None
    guessed = header_mode is None and bool(numbered) and all(_is_name(c) for c in numbered[0][1]) \
        and any(c.strip() for c in numbered[0][1])
    if numbered and (header_mode or guessed):
        header_line, header = numbered[0][0], [c.strip() for c in numbered[0][1]]
        numbered = numbered[1:]
    width = len(header) if header is not None else (len(numbered[0][1]) if numbered else num_features or 0)
    values = np.empty((len(numbered), width), dtype=np.float64)
    labels: dict[int, tuple[list, list, list]] = {}
    words: dict[int, tuple[list, list]] = {}
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
            elif v != v and cell.strip():  # a missing word, unless a categorical feature has it as a label
                rows, texts = words.setdefault(c, ([], []))
                rows.append(r)
                texts.append(cell.strip())
            values[r, c] = v
    note = None
    if header is not None and feature_names and header != list(feature_names) \
            and sorted(header) == sorted(feature_names):
        note = f"{name}: columns matched to the model's features by name"
    if guessed and not feature_names:
        shown = ", ".join(header[:4]) + (", ..." if len(header) > 4 else "")
        note = (f"{name}: line {header_line} ({shown}) read as a header, not a row: the model has "
                "no feature names, so columns are taken by position (--no-header reads it as a row)")
    return Rows(values, header, note, labels, name, words=words, row_lines=[lineno for lineno, _ in numbered])


def model_rows(rows: Rows, forest, missing: float | None = None):
    """The rows ``forest`` reads from a file's: header columns matched to its features by name
    (or by position), label cells of categorical features mapped to their codes; anything else
    that is not a number is an :class:`InputError` naming its line and column.  JSON Lines
    records are read by :mod:`silvanforge.inputs.records`; a Parquet or Arrow file's table is
    given as it is (``predict`` reads tables).  ``missing``: predict's value taken as missing
    (``--missing``), which a categorical column may hold besides its codes."""
    if rows.records is not None:
        return jsonl_matrix(*rows.records, forest, rows.name)
    if rows.table is not None:  # (a Parquet or Arrow file's table: predict reads it as any table)
        return rows.table
    if rows.header is None:  # by position; predict checks the count
        order = list(range(rows.values.shape[1]))
    else:
        try:
            order = column_order(rows.header, forest, "the header's columns")
        except InputError as exc:
            raise InputError(f"{rows.name}: {exc}") from None
    values = rows.values[:, order] if order != list(range(rows.values.shape[1])) else rows.values
    categories = forest.feature_categories or {}
    hashed = forest.hashed_categories or {}
    if hashed and any(rows.labels.get(column) is not None or rows.words.get(column) is not None
                      for feature, column in enumerate(order) if feature in hashed):
        # categories known by hash are read by predict from the values themselves (labels
        # hashed as text, numbers as integers): the label cells go in as text
        values = values.astype(object)
    for feature, column in enumerate(order):
        if rows.row_lines and feature in categories and feature not in hashed:  # (CSV, not .npy)
            _check_codes(rows, np.asarray(values[:, feature], dtype=np.float64), categories[feature], column,
                         missing)
        said = rows.words.get(column)
        if said is not None and feature in hashed:  # ("NA" is a category like any other text)
            values[np.asarray(said[0]), feature] = np.array(said[1], dtype=object)
        elif said is not None and categories.get(feature) is not None:
            # A word that is one of the feature's labels is that label (a category "NA", "None");
            # any other stays missing.
            codes = Labels(categories[feature], forest.unseen_category_error).lookup(np.array(said[1], dtype=object))
            known = codes >= 0
            values[np.asarray(said[0])[known], feature] = codes[known]
        found = rows.labels.get(column)
        if found is None:
            continue
        at, texts, lines = found
        if feature in hashed:
            values[np.asarray(at), feature] = np.array(texts, dtype=object)
            continue
        if categories.get(feature) is None:
            what = "" if not rows.header else f" (feature {rows.header[column]!r} is not categorical)"
            raise InputError(f"{rows.name}: line {lines[0]}, column {column + 1}: {texts[0]!r} is not a number{what}")
        name = rows.header[column] if rows.header else f"column {column + 1}"
        try:
            values[np.asarray(at), feature] = label_codes(categories[feature], forest, np.array(texts, dtype=object), name)
        except InputError as exc:
            raise InputError(f"{rows.name}: {exc}") from None
    return values


def _check_codes(rows: Rows, codes: np.ndarray, labels: list, column: int, missing: float | None) -> None:
    """A number in a categorical feature's column is a category's code, as in an array (a number
    past the codes is an unseen category, as the libraries read it).  But one that is no code and
    is one of the feature's labels (integer categories 30, 10, 20, 40: a frame's column written by
    ``to_csv``) is refused: read as a code it would answer otherwise than the same row as a frame."""
    numeric = [v for v in labels if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)]
    if not numeric:
        return
    count = len(labels)
    given = (codes == codes) & ((codes >= count) | (codes != np.floor(codes)))
    if missing is not None:
        given &= codes != missing
    hits = np.flatnonzero(given & np.isin(codes, np.asarray(numeric, dtype=np.float64)))
    if not hits.size:
        return
    r = int(hits[0])
    name = repr(rows.header[column]) if rows.header else f"column {column + 1}"
    line = rows.row_lines[r] if r < len(rows.row_lines) else r + 1
    raise InputError(f"{rows.name}: line {line}, column {column + 1}: {codes[r]:g} is one of the labels of the "
                     f"categorical feature {name} but not a category code (0 to {count - 1}), which is what a CSV "
                     "number there is, as in an array: give the codes, or the labels as JSON Lines records "
                     "(forge predict --input rows.jsonl)")


# --------------------------------------------------------------------------- writing
def format_csv(y: np.ndarray) -> str:
    """Predictions as CSV text: one line per row, one column per output, exact digits."""
    y = np.asarray(y)
    if y.ndim == 1:
        y = y[:, None]
    elif y.ndim != 2:  # (columns named: a reshape of no rows cannot infer them)
        y = y.reshape(y.shape[0], int(np.prod(y.shape[1:])))
    if y.dtype == np.float32:
        cells = np.char.mod("%.9g", y) if y.size else np.empty(y.shape, dtype=str)
        lines = (",".join(row) for row in cells.tolist())
    elif np.issubdtype(y.dtype, np.floating):
        lines = (",".join(map(repr, row)) for row in y.astype(np.float64).tolist())
    else:
        lines = (",".join(map(str, row)) for row in y.tolist())
    out = "\n".join(lines)
    return out + "\n" if out else ""


# Endings of formats forge does not write: such an output would get CSV under a name that
# promises another format (anything else is written as CSV, .npy as NumPy's format).
OTHER_FORMATS = (".parquet", ".feather", ".arrow", ".ipc", ".orc", ".avro", ".xlsx", ".xls", ".json", ".jsonl",
                 ".ndjson", ".pkl", ".pickle", ".h5", ".hdf5", ".npz", ".gz", ".zip")


def refuse_overwrite(output: str | None, *, predictions: bool = False, **inputs: str | None) -> None:
    """Refuse an ``--output`` that is one of the command's inputs (``inputs``: what each is, by
    option name), itself or through a link: writing it would destroy what the command reads,
    so the check runs before any work.  ``-`` (stdout, stdin) and absent paths never clash.
    ``predictions``: the output is predictions, and one named for a format forge does not write
    them in (:data:`OTHER_FORMATS`) is refused too."""
    if output is None or output == "-":
        return
    target = os.path.realpath(output)
    for what, path in inputs.items():
        if path is None or path == "-":
            continue
        same = os.path.realpath(path) == target
        if not same and os.path.exists(path) and os.path.exists(output):
            try:
                same = os.path.samefile(path, output)  # hard links too
            except OSError:
                same = False
        if same:
            raise InputError(f"--output {output} is the {what.replace('_', ' ')} {path}: writing it would "
                             "destroy it; choose another output path")
    if predictions and output.lower().endswith(OTHER_FORMATS):
        raise InputError(f"--output {output}: forge writes CSV or .npy, not {os.path.splitext(output)[1]}; "
                         "name the output Y.csv or Y.npy")


def refuse_output_flags(margin: bool, **outputs: bool) -> None:
    """Refuse more than one of the other outputs (``outputs``: each flag by its name, ``--leaf``,
    ``--per-tree``, ``--contribs``), or one with ``--margin``, in the flags' names: predict's own
    refusal names its Python arguments (pred_leaf ...), which a command-line user never wrote."""
    asked = [flag for flag, on in outputs.items() if on]
    if len(asked) > 1:
        raise InputError(f"{' and '.join(asked)}: one of {', '.join(outputs)} at a time")
    if margin and asked:
        raise InputError(f"--margin applies to predictions, not to {asked[0]}")


def contribution_header(forest, y: np.ndarray) -> list[str]:
    """The CSV header of contributions ``y`` (``(n, F + 1)``, ``(n, classes, F + 1)`` or LightGBM's
    ``(n, classes * (F + 1))``): the features' names and ``bias``, each prefixed ``class<k>:``
    where there are several classes."""
    y = np.asarray(y)
    classes = y.shape[1] if y.ndim == 3 else max(1, forest.num_outputs)
    width = (int(np.prod(y.shape[1:])) if y.ndim > 1 else 1) // classes
    names = list(forest.feature_names or ())
    if len(names) < width - 1:
        names = [f"f{i}" for i in range(width - 1)]
    block = [*names[:width - 1], "bias"]
    return block if classes == 1 else [f"class{k}:{name}" for k in range(classes) for name in block]


def write_predictions(path: str | None, y: np.ndarray, header: list[str] | None = None) -> None:
    """Write ``y`` to ``path``: ``.npy`` by extension, CSV otherwise (``header``: its first line's
    column names, where given), stdout for ``None``/``-``."""
    npy = path is not None and path != "-" and path.lower().endswith(".npy")
    text = ""
    if not npy:
        text = format_csv(y)
        if header is not None:
            line = io.StringIO()
            csv.writer(line, lineterminator="\n").writerow(header)
            text = line.getvalue() + text

    def dump(f):
        if npy:
            np.save(f, np.asarray(y), allow_pickle=False)
        else:
            f.write(text.encode("utf-8"))
    if path is None or path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InputError(f"cannot write {path}: directory {directory} does not exist")
    if os.path.exists(path) and not os.path.isfile(path):
        # A pipe, a device or /dev/stdout: written in place (renaming over it would replace the
        # node, and /dev/fd/N cannot be renamed over at all).
        try:
            with open(path, "wb") as f:
                dump(f)
        except OSError as exc:
            raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
        return
    # Written whole to a file of its own beside the target, then renamed over it: a failed or
    # interrupted run never leaves half a file, and a link at ``path`` is replaced, not written
    # through.
    try:  # (a directory where no file can be made, /proc's: the target named, not the temporary)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + ".", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            dump(f)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600: the mode any new file would get
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


"""The ``forge`` command line: predictions through files equal the API's and the library's, and
every user error is one ``error:`` line with a non-zero exit status, never a traceback."""

from __future__ import annotations

import json
import io
import subprocess
import sys

import numpy as np
import pytest
import silvanforge as sf
from silvanforge.ir import hir
from support_cli import forge, read_csv, wide_console, write_csv  # noqa: F401  (an autouse fixture)

xgb = pytest.importorskip("xgboost")

NUM_FEATURES = 5
NAMES = [f"feat_{i}" for i in range(NUM_FEATURES)]


def _data(rng, n=300):
    X = rng.normal(size=(n, NUM_FEATURES))
    y = X[:, 0] - 0.5 * X[:, 1] + X[:, 2] * X[:, 3]
    X[rng.random(X.shape) < 0.1] = np.nan
    return X, y


@pytest.fixture(scope="module")
def binary_model(tmp_path_factory):
    rng = np.random.default_rng(7)
    X, y = _data(rng)
    d = xgb.DMatrix(X, label=(y > 0).astype(np.float32), feature_names=NAMES)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 3, "nthread": 1}, d, 8)
    path = tmp_path_factory.mktemp("cli") / "binary.json"
    booster.save_model(path)
    return path, booster


@pytest.fixture(scope="module")
def multiclass_model(tmp_path_factory):
    rng = np.random.default_rng(8)
    X, y = _data(rng)
    labels = np.digitize(y, [-0.5, 0.5]).astype(np.float32)
    d = xgb.DMatrix(X, label=labels)
    booster = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 3, "nthread": 1}, d, 4)
    path = tmp_path_factory.mktemp("cli") / "multi.json"
    booster.save_model(path)
    return path, booster


@pytest.fixture
def X(rng):
    X, _ = _data(rng, 40)
    return X


def xgb_predict(booster, X, **kw):
    return booster.predict(xgb.DMatrix(X, feature_names=booster.feature_names), **kw)


# --------------------------------------------------------------------------- predict
@pytest.mark.parametrize("missing", ["", "nan", "NaN"])
def test_predict_csv_equals_api_and_xgboost(capsys, tmp_path, binary_model, X, missing):
    path, booster = binary_model
    inp = write_csv(tmp_path / "X.csv", X, missing=missing)
    out = tmp_path / "y.csv"
    code, _, err = forge(capsys, "predict", path, "--input", inp, "--output", out)
    assert code == 0, err
    got = read_csv(out)
    assert got.shape == (len(X), 1)
    api = sf.compile(path).predict(X)
    np.testing.assert_array_equal(got[:, 0], api)  # the CSV round trip loses nothing
    np.testing.assert_allclose(got[:, 0], xgb_predict(booster, X), rtol=1e-6, atol=1e-7)

    code, _, err = forge(capsys, "predict", path, "-i", inp, "-o", out, "--margin")
    assert code == 0, err
    np.testing.assert_allclose(read_csv(out)[:, 0], xgb_predict(booster, X, output_margin=True),
                               rtol=1e-6, atol=1e-6)


def test_predict_csv_header(capsys, tmp_path, binary_model, X):
    path, _ = binary_model
    expected = sf.compile(path).predict(X)
    out = tmp_path / "y.csv"
    # a header of the model's feature names
    code, _, err = forge(capsys, "predict", path, "-i", write_csv(tmp_path / "a.csv", X, NAMES), "-o", out)
    assert code == 0, err
    np.testing.assert_array_equal(read_csv(out)[:, 0], expected)
    # the same names in another order select the columns by name
    perm = [3, 0, 4, 1, 2]
    code, _, err = forge(capsys, "predict", path, "-i",
                         write_csv(tmp_path / "b.csv", X[:, perm], [NAMES[i] for i in perm]), "-o", out)
    assert code == 0, err
    np.testing.assert_array_equal(read_csv(out)[:, 0], expected)
    assert "by name" in err
    # other names (a typo, another model's file): an error naming them, nothing written
    typo = [NAMES[3], NAMES[0], NAMES[4], NAMES[1], NAMES[2] + "x"]
    out.unlink()
    code, _, err = forge(capsys, "predict", path, "-i",
                         write_csv(tmp_path / "c.csv", X[:, perm], typo), "-o", out)
    assert code != 0 and "Traceback" not in err and not out.exists()
    assert f"missing {NAMES[2]!r}; not features of the model: {NAMES[2] + 'x'!r}" in err, err
    assert err.count("c.csv") == 1, err
    # a model without feature names reads a header's columns by position
    booster = xgb.Booster(model_file=str(path))
    booster.feature_names = None
    booster.save_model(str(tmp_path / "nameless.json"))
    code, _, err = forge(capsys, "predict", tmp_path / "nameless.json", "-i",
                         write_csv(tmp_path / "d.csv", X, list("abcde")), "-o", out)
    assert code == 0, err
    np.testing.assert_array_equal(read_csv(out)[:, 0], expected)


@pytest.fixture(scope="module")
def nameless_model(binary_model, tmp_path_factory):
    booster = xgb.Booster(model_file=str(binary_model[0]))
    booster.feature_names = None
    path = tmp_path_factory.mktemp("cli") / "nameless.json"
    booster.save_model(str(path))
    return path


@pytest.mark.parametrize("first", ['nanx', '"1,5"', '1.2.3', '\x00', '1_000', '\u0661'])
def test_a_first_row_with_one_bad_cell_is_an_error_not_a_dropped_row(capsys, tmp_path, nameless_model, X, first):
    # For a model without feature names nothing checks a header, so a first row with one
    # mistyped cell must not be taken for one: every row in gives a line out, or an error.
    lines = write_csv(tmp_path / "X.csv", X).read_text().splitlines()
    cells = lines[0].split(",")
    cells[2] = first
    lines[0] = ",".join(cells)
    (tmp_path / "X.csv").write_text("\n".join(lines) + "\n")
    code, out, err = forge(capsys, "predict", nameless_model, "-i", tmp_path / "X.csv")
    assert code != 0 and "Traceback" not in err, (code, out, err)
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert line.startswith("error: ") and "line 1, column 3" in line, line


def test_a_header_for_a_nameless_model_is_noted_and_can_be_declined(capsys, tmp_path, nameless_model, X):
    expected = sf.compile(nameless_model).predict(X)
    out = tmp_path / "y.csv"
    code, _, err = forge(capsys, "predict", nameless_model, "-i", write_csv(tmp_path / "h.csv", X, list("abcde")),
                         "-o", out)
    assert code == 0, err
    np.testing.assert_array_equal(read_csv(out)[:, 0], expected)
    (note,) = [x for x in err.splitlines() if x.strip()]
    assert note.startswith("note: ") and "line 1 (a, b, c, d, ...) read as a header" in note, note
    # --no-header: that line is a row, and its words are not numbers
    code, _, err = forge(capsys, "predict", nameless_model, "-i", tmp_path / "h.csv", "--no-header")
    assert code != 0 and "line 1, column 1: 'a' is not a number" in err, err
    # --header: a first line of numbers is a header all the same, and nothing is noted
    code, _, err = forge(capsys, "predict", nameless_model, "-i", write_csv(tmp_path / "n.csv", X), "-o", out,
                         "--header")
    assert code == 0 and not err.strip(), err
    np.testing.assert_array_equal(read_csv(out)[:, 0], expected[1:])
    # a file of rows only: nothing to note
    code, _, err = forge(capsys, "predict", nameless_model, "-i", write_csv(tmp_path / "p.csv", X), "-o", out)
    assert code == 0 and not err.strip(), err


@pytest.mark.parametrize("text, line", [
    ("1,2,3,4,5\n1,\"2,3,4,5\n6,7,8,9,0\n", 2),   # a quote never closed
    ("1,2,3,4,5\n1,\"2\"x,3,4,5\n", 2),           # text after a closing quote
    ("1,2,3,4,5\n1,2,3,4,5\n1,2\x003,4,5\n", 3),  # a NUL byte
    ("1,2,3,4,5\n1,\"2\n3\",4,5,6\n", 2),        # a quoted cell over two lines
    ("1,2,3,4,5\n\n1,2,3,4\n", 3),               # a short row, after an empty line
])
def test_malformed_csv_lines_are_errors_naming_the_line(capsys, tmp_path, nameless_model, text, line):
    (tmp_path / "bad.csv").write_text(text)
    code, out, err = forge(capsys, "predict", nameless_model, "-i", tmp_path / "bad.csv")
    (msg,) = [x for x in err.splitlines() if x.strip()]
    assert code != 0 and msg.startswith("error: ") and f"bad.csv: line {line}" in msg, err


def test_a_row_of_empty_cells_is_a_row_of_missing_values(capsys, tmp_path, nameless_model, X):
    X = X.copy()
    X[3] = np.nan
    out = tmp_path / "y.csv"
    code, _, err = forge(capsys, "predict", nameless_model, "-i", write_csv(tmp_path / "X.csv", X), "-o", out)
    assert code == 0, err
    np.testing.assert_array_equal(read_csv(out)[:, 0], sf.compile(nameless_model).predict(X))


def test_predict_npy_round_trip(capsys, tmp_path, binary_model, X):
    path, booster = binary_model
    np.save(tmp_path / "X.npy", X)
    code, _, err = forge(capsys, "predict", path, "-i", tmp_path / "X.npy", "-o", tmp_path / "y.npy")
    assert code == 0, err
    got = np.load(tmp_path / "y.npy")
    api = sf.compile(path).predict(X)
    assert got.dtype == api.dtype
    np.testing.assert_array_equal(got, api)
    np.testing.assert_allclose(got, xgb_predict(booster, X), rtol=1e-6, atol=1e-7)


def test_predict_multiclass_has_one_column_per_class(capsys, tmp_path, multiclass_model, X):
    path, booster = multiclass_model
    out = tmp_path / "y.csv"
    code, _, err = forge(capsys, "predict", path, "-i", write_csv(tmp_path / "X.csv", X), "-o", out)
    assert code == 0, err
    got = read_csv(out)
    assert got.shape == (len(X), 3)
    np.testing.assert_array_equal(got, sf.compile(path).predict(X))
    np.testing.assert_allclose(got, xgb_predict(booster, X), rtol=1e-6, atol=1e-7)


def test_predict_float64_output_round_trips(capsys, tmp_path, rng):
    lgb = pytest.importorskip("lightgbm")
    X, y = _data(rng, 300)
    booster = lgb.train({"objective": "regression", "num_leaves": 7, "verbose": -1, "num_threads": 1},
                        lgb.Dataset(X, label=y), 10)
    path = tmp_path / "lgb.txt"
    booster.save_model(str(path))
    out = tmp_path / "y.csv"
    code, _, err = forge(capsys, "predict", path, "-i", write_csv(tmp_path / "X.csv", X), "-o", out)
    assert code == 0, err
    got = read_csv(out, np.float64)[:, 0]
    np.testing.assert_array_equal(got, sf.compile(path).predict(X))
    np.testing.assert_allclose(got, booster.predict(X), rtol=1e-12, atol=1e-12)


def test_predict_stdin_to_stdout_and_empty_input(capsys, monkeypatch, tmp_path, binary_model, X):
    path, _ = binary_model
    monkeypatch.setattr(sys, "stdin", io.StringIO(write_csv(tmp_path / "X.csv", X[:3]).read_text()))
    code, out, err = forge(capsys, "predict", path, "-i", "-")
    assert code == 0, err
    got = np.array([np.float32(line) for line in out.splitlines()])
    np.testing.assert_array_equal(got, sf.compile(path).predict(X[:3]))

    (tmp_path / "empty.csv").write_text(",".join(NAMES) + "\n")
    code, out, err = forge(capsys, "predict", path, "-i", tmp_path / "empty.csv", "-o", tmp_path / "e.csv")
    assert code == 0, err
    assert (tmp_path / "e.csv").read_text() == ""


def test_compile_reports_and_saves_an_artifact(capsys, tmp_path, binary_model, X):
    path, _ = binary_model
    art = tmp_path / "m.forge"
    code, out, err = forge(capsys, "compile", path, "--rep", "sparse", "--batch-size", "64",
                           "--threads", "1", "-o", art)
    assert code == 0, err
    for word in ("trees", "max depth", "features", "outputs", "sparse", "cpu", "compile time", "8"):
        assert word in out
    assert art.exists()
    out_csv = tmp_path / "y.csv"
    code, _, err = forge(capsys, "predict", art, "-i", write_csv(tmp_path / "X.csv", X), "-o", out_csv)
    assert code == 0, err
    np.testing.assert_array_equal(read_csv(out_csv)[:, 0], sf.compile(path).predict(X))
    # the artifact keeps its own options; asking for others is a clear error
    code, _, err = forge(capsys, "predict", art, "-i", tmp_path / "X.csv", "--rep", "array")
    assert code != 0 and err.startswith("error:") and "sparse" in err


def test_compile_with_schedule_file(capsys, tmp_path, binary_model, X):
    path, _ = binary_model
    sched = tmp_path / "s.txt"
    sched.write_text("# rows outermost\nreorder(batch, tree)\nparallel(batch)\n")
    code, out, err = forge(capsys, "compile", path, "--schedule", sched)
    assert code == 0, err
    assert "reorder(batch, tree)" in out


@pytest.mark.parametrize("level", ["hir", "mir", "lir", "target"])
def test_show_each_level(capsys, tmp_path, binary_model, level):
    path, _ = binary_model
    code, out, err = forge(capsys, "show", path, "--level", level)
    assert code == 0, err
    if level == "hir":
        expected = hir.format_forest(sf.load_model(path))
    else:
        expected = sf.compile(path).show(level)
    assert out.rstrip("\n") == expected.rstrip("\n")
    assert out.strip()


def test_show_hir_all_trees_and_artifact(capsys, tmp_path, binary_model):
    path, _ = binary_model
    code, out, _ = forge(capsys, "show", path, "--level", "hir", "--max-trees", "0")
    assert code == 0 and "more trees" not in out and out.count("  tree ") == 8
    sf.compile(path).save(tmp_path / "m.forge")
    code, out2, _ = forge(capsys, "show", tmp_path / "m.forge", "--level", "hir", "--max-trees", "0")
    assert code == 0 and out2 == out


def test_plugins_lists_everything(capsys):
    code, out, err = forge(capsys, "plugins")
    assert code == 0, err
    for text in ("silvanforge-importer-xgboost", "silvanforge-target-cpu", "importers", "targets", "0.1.0",
                 "xgboost-json", "runs here", "yes"):
        assert text in out
    for target in ("cuda", "amd"):
        ok, why = sf.plugins.registry().target_available(target)
        if target in sf.plugins.registry().targets() and not ok:
            assert why.split(";")[0][:40] in " ".join(out.split())


def test_version_and_help(capsys):
    code, out, _ = forge(capsys, "--version")
    assert code == 0 and sf.__version__ in out
    code, out, _ = forge(capsys)
    assert code == 0 and "predict" in out


# --------------------------------------------------------------------------- user errors
def _errors(tmp, model, X):
    good_csv = write_csv(tmp / "good.csv", X)
    narrow = write_csv(tmp / "narrow.csv", X[:, :-1])
    ragged = tmp / "ragged.csv"
    ragged.write_text("1,2,3,4,5\n1,2,3\n")
    word = tmp / "word.csv"
    word.write_text("1,2,3,4,5\n1,2,x,4,5\n")
    garbage = tmp / "garbage.json"
    garbage.write_bytes(b"\x00\x01 this is not a model \xff" * 10)
    truncated = tmp / "truncated.json"
    truncated.write_text(model.read_text()[:500])
    bad_sched = tmp / "bad.sched"
    bad_sched.write_text("reorder(batch, tree)\nfrobnicate(batch)\n")
    bad_npy = tmp / "bad.npy"
    bad_npy.write_bytes(b"\x93NUMPY garbage")
    return {
        "missing model": ["predict", tmp / "nope.json", "-i", good_csv],
        "garbage model": ["predict", garbage, "-i", good_csv],
        "truncated model": ["compile", truncated],
        "garbage artifact": ["predict", tmp / "garbage.forge", "-i", good_csv],
        "wrong feature count": ["predict", model, "-i", narrow],
        "ragged csv": ["predict", model, "-i", ragged],
        "non-numeric cell": ["predict", model, "-i", word],
        "missing input": ["predict", model, "-i", tmp / "nope.csv"],
        "bad npy": ["predict", model, "-i", bad_npy],
        "unwritable output": ["predict", model, "-i", good_csv, "-o", tmp / "no" / "dir" / "y.csv"],
        "unknown rep": ["compile", model, "--rep", "nonesuch"],
        "illegal schedule": ["compile", model, "--schedule", "tahoe-direct"],
        "unknown target": ["compile", model, "--target", "nonesuch"],
        "unavailable target": ["predict", model, "-i", good_csv, "--target", "cuda"],
        "bad batch size": ["compile", model, "--batch-size", "abc"],
        "zero batch size": ["compile", model, "--batch-size", "0"],
        "bad threads": ["predict", model, "-i", good_csv, "--threads", "-2"],
        "bad schedule file": ["compile", model, "--schedule", bad_sched],
        "missing schedule file": ["compile", model, "--schedule", tmp / "nope.sched"],
        "bad level": ["show", model, "--level", "asm"],
        "missing option": ["predict", model],
        "unknown command": ["frobnicate"],
        "bad batch sizes": ["bench", model, "--batch-sizes", "1,zero"],
        "unknown peer": ["bench", model, "--peers", "nonesuch"],
    }


@pytest.mark.parametrize("case", [
    "missing model", "garbage model", "truncated model", "garbage artifact", "wrong feature count",
    "ragged csv", "non-numeric cell", "missing input", "bad npy", "unwritable output", "unknown rep",
    "illegal schedule", "unknown target", "unavailable target", "bad batch size", "zero batch size",
    "bad threads", "bad schedule file", "missing schedule file", "bad level", "missing option",
    "unknown command", "bad batch sizes", "unknown peer",
])
def test_user_errors_are_one_line(capsys, tmp_path, binary_model, X, case):
    path, _ = binary_model
    (tmp_path / "garbage.forge").write_bytes(b"PK\x03\x04 not really a zip")
    args = _errors(tmp_path, path, X)[case]
    code, out, err = forge(capsys, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err + out


def test_error_messages_name_the_problem(capsys, tmp_path, binary_model, X):
    path, _ = binary_model
    cases = _errors(tmp_path, path, X)
    _, _, err = forge(capsys, *cases["wrong feature count"])
    assert f"{NUM_FEATURES} features" in err and "narrow.csv" in err
    _, _, err = forge(capsys, *cases["non-numeric cell"])
    assert "line 2" in err and "column 3" in err
    _, _, err = forge(capsys, *cases["bad schedule file"])
    assert "bad.sched" in err and "line 2" in err
    _, _, err = forge(capsys, *cases["unknown rep"])
    assert "nonesuch" in err and "array" in err


def test_console_script_reports_one_line(tmp_path):
    """The real entry point (python -m silvanforge.cli runs the same main) exits 1 with one line."""
    proc = subprocess.run([sys.executable, "-m", "silvanforge.cli", "predict", str(tmp_path / "nope.json"),
                           "-i", str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: ")
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ outputs never destroy inputs
def test_output_onto_an_input_or_a_link_to_one_is_refused_and_nothing_changes(capsys, binary_model, tmp_path):
    import os
    import shutil

    path, _ = binary_model
    model = tmp_path / "model.json"
    shutil.copy(path, model)
    X = tmp_path / "X.csv"
    X.write_text("\n".join(",".join(f"{v:.3f}" for v in row)
                           for row in np.random.default_rng(1).normal(size=(4, NUM_FEATURES))) + "\n")
    os.symlink(X, tmp_path / "link.csv")
    os.symlink(model, tmp_path / "link.json")
    before = {p: p.read_bytes() for p in (model, X)}
    cases = [("predict", model, "-i", X, "-o", X, "input"),
             ("predict", model, "-i", X, "-o", tmp_path / "link.csv", "input"),
             ("predict", model, "-i", X, "-o", model, "model"),
             ("predict", model, "-i", X, "-o", tmp_path / "link.json", "model"),
             ("compile", model, "-o", model, "model"),
             ("compile", model, "-o", tmp_path / "link.json", "model")]
    for *args, what in cases:
        code, out, err = forge(capsys, *args)
        assert code != 0 and err.count("error:") == 1 and "Traceback" not in err, (args, err)
        assert f"is the {what}" in err, err
        assert {p: p.read_bytes() for p in before} == before, args
    # an ordinary output is written whole, and a link at the output path is replaced, not written through
    target = tmp_path / "elsewhere.csv"
    target.write_text("keep\n")
    os.symlink(target, tmp_path / "out.csv")
    code, _, err = forge(capsys, "predict", model, "-i", X, "-o", tmp_path / "out.csv")
    assert code == 0, err
    assert target.read_text() == "keep\n" and not (tmp_path / "out.csv").is_symlink()
    assert len((tmp_path / "out.csv").read_text().splitlines()) == 4
    assert not list(tmp_path.glob("*.tmp"))
    # a directory where no file can be made (/proc's, a read-only one): the output named, not a temporary
    from pathlib import Path

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    for where in ([locked / "y.csv"] if os.geteuid() else []) + ([Path("/proc/y.csv")] if Path("/proc").is_dir() else []):
        code, _, err = forge(capsys, "predict", model, "-i", X, "-o", where)
        assert code != 0 and err.count("error:") == 1 and f"cannot write {where}" in err and ".tmp" not in err, err



def test_predictions_to_a_pipe_are_written_into_it(capsys, binary_model, tmp_path):
    """A FIFO (or /dev/stdout) at the output path is written in place, not replaced by a file."""
    import os
    import stat
    import threading

    path, _ = binary_model
    X = tmp_path / "X.csv"
    X.write_text("\n".join(",".join("0.5" for _ in range(NUM_FEATURES)) for _ in range(3)) + "\n")
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    code, _, err = forge(capsys, "predict", path, "-i", X, "-o", fifo)
    reader.join(10)
    assert code == 0, err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and len(got[0].splitlines()) == 3


def test_outputs_and_inputs_in_formats_forge_does_not_read_or_write_are_refused(capsys, tmp_path, binary_model, X):
    path, _ = binary_model
    csv = write_csv(tmp_path / "X.csv", X)
    for name in ("y.parquet", "y.JSON", "y.xlsx"):
        code, _, err = forge(capsys, "predict", path, "-i", csv, "-o", tmp_path / name)
        assert code != 0 and "forge writes CSV or .npy" in err and not (tmp_path / name).exists(), err
    records = [dict(zip([f"f{i}" for i in range(NUM_FEATURES)], map(float, row))) for row in X[:2]]
    (tmp_path / "rows.json").write_text(json.dumps(records, indent=1))  # a JSON array, not JSON Lines
    code, _, err = forge(capsys, "predict", path, "-i", tmp_path / "rows.json")
    assert code != 0 and "a JSON array; predict reads JSON Lines" in err, err


def test_a_command_group_alone_prints_its_help_and_succeeds(capsys):
    code, out, err = forge(capsys, "key")
    assert code == 0 and "show" in out and "rotate" in out and err == "", (code, err)


def test_pipes_devices_and_overflowing_schedules_are_read_once_or_refused(capsys, binary_model, tmp_path):
    """Rows from a pipe given as a path are all read (the .npy peek consumed the pipe's first
    buffer: rows lost); a model path that is a pipe or a device is refused at once (it hung);
    a schedule file of /dev/zero, tiles past 2**31 rows, or a batch size past memory are one
    line each, no traceback, no crash."""
    import os
    import threading

    path, _ = binary_model
    rows = "\n".join(",".join(repr(0.25 * (i + j)) for j in range(NUM_FEATURES)) for i in range(300)) + "\n"
    (tmp_path / "X.csv").write_text(rows)
    want = forge(capsys, "predict", path, "-i", tmp_path / "X.csv")[1]
    fifo = tmp_path / "in.csv"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(rows))
    writer.start()
    code, out, err = forge(capsys, "predict", path, "-i", fifo)
    writer.join(10)
    assert code == 0 and out == want and len(out.splitlines()) == 300, err
    model_fifo = tmp_path / "model.json"
    os.mkfifo(model_fifo)
    code, _, err = forge(capsys, "predict", model_fifo, "-i", tmp_path / "X.csv")
    assert code == 1 and "not a regular file" in err and "Traceback" not in err
    code, _, err = forge(capsys, "predict", path, "-i", tmp_path / "X.csv", "--profile", tmp_path / "none.npz")
    assert code == 1 and "--profile" in err and "not found" in err
    (tmp_path / "huge.sched").write_text("tile(batch, b0, b1, 9223372036854775808)\nparallel(b0)\n")
    for schedule, message in (("/dev/zero", "not a schedule"), (tmp_path / "huge.sched", "at most 2147483648")):
        code, _, err = forge(capsys, "predict", path, "-i", tmp_path / "X.csv", "--schedule", schedule)
        assert code == 1 and message in err and "Traceback" not in err


def test_python_api_user_errors_are_input_errors(binary_model):
    path, _ = binary_model
    cf = sf.compile(path)
    X = np.zeros((2, NUM_FEATURES))
    for call, message in ((lambda: cf.predict([[1.0] * NUM_FEATURES, [1.0, 2.0]]), "not a 2-D array"),
                          (lambda: cf.predict(X, missing=np.array([1.0, 2.0])), "missing must be a number"),
                          (lambda: cf.predict(r for r in X), "a generator"),
                          (lambda: sf.compile(path, target=["cpu"]), "target is a name"),
                          (lambda: sf.compile(path, cache=5), "cache is a folder's path")):
        with pytest.raises(sf.InputError, match=message):
            call()

"""The ``forge`` command line as the tests drive it: in this process, its output captured, rich
tables unwrapped whatever the terminal; and the CSV files it reads and writes.  A test module
imports ``wide_console`` (an autouse fixture) with ``forge``."""

from __future__ import annotations

import numpy as np
import pytest

from silvanforge import cli


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich tables unwrapped, whatever the terminal


def forge(capsys, *args):
    """``forge ARGS...``: its exit status, standard output and standard error."""
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def write_csv(path, X, header=None, missing=""):
    lines = [",".join(header)] if header else []
    for row in X:
        lines.append(",".join(missing if np.isnan(v) else repr(float(v)) for v in row))
    path.write_text("\n".join(lines) + "\n")
    return path


def read_csv(path, dtype=np.float32):
    rows = [line.split(",") for line in path.read_text().splitlines()]
    return np.array([[dtype(float(c)) for c in row] for row in rows], dtype=dtype)

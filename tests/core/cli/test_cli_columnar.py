"""``forge predict`` of Parquet and Arrow (Feather) files: read with pyarrow into a table, which
``predict`` reads by column name, a categorical feature's dictionary or string column by label;
the answers equal the API's on the same table and LightGBM's on the same rows."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import silvanforge as sf
from support_cli import forge, read_csv, wide_console  # noqa: F401  (an autouse fixture)

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
lgb = pytest.importorskip("lightgbm")

COLOURS = ["red", "green", "blue", "amber"]


def _frame(rng, n):
    frame = pd.DataFrame({"width": rng.normal(size=n), "height": rng.normal(size=n),
                          "colour": pd.Categorical(rng.choice(COLOURS, n), categories=COLOURS)})
    frame.loc[rng.random(n) < 0.1, "width"] = np.nan
    return frame


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    rng = np.random.default_rng(3)
    frame = _frame(rng, 600)
    y = frame.width.fillna(0) + frame.colour.cat.codes * 0.5 + rng.normal(size=len(frame)) * 0.1
    booster = lgb.train({"objective": "regression", "num_leaves": 8, "verbose": -1, "num_threads": 1,
                         "min_data_per_group": 5, "cat_smooth": 1}, lgb.Dataset(frame, y), 10)
    path = tmp_path_factory.mktemp("columnar") / "model.txt"
    booster.save_model(str(path))
    return path, booster


def _rows(rng):
    """Rows as a user's file holds them: the columns in another order, the categories too (a
    dictionary in its own order), a missing label and a missing number."""
    frame = _frame(rng, 50)[["colour", "height", "width"]]
    frame["colour"] = frame.colour.cat.reorder_categories(COLOURS[::-1])
    frame.loc[3, "colour"] = np.nan
    return frame


@pytest.mark.parametrize("kind", ["parquet", "feather", "parquet of strings"])
def test_parquet_and_arrow_files_predict_as_their_table(capsys, tmp_path, model, kind):
    import pyarrow.feather as feather
    import pyarrow.parquet as parquet

    path, booster = model
    frame = _rows(np.random.default_rng(5))
    if kind == "parquet of strings":  # (labels as plain strings, as many writers keep them)
        frame = frame.astype({"colour": object})
    table = pa.Table.from_pandas(frame, preserve_index=False)
    rows = tmp_path / ("rows.feather" if kind == "feather" else "rows.parquet")
    (feather.write_feather if kind == "feather" else parquet.write_table)(table, str(rows))
    code, _, err = forge(capsys, "predict", path, "-i", rows, "-o", tmp_path / "y.csv")
    assert code == 0, err
    got = read_csv(tmp_path / "y.csv", np.float64).ravel()
    cf = sf.compile(str(path))
    np.testing.assert_array_equal(got, cf.predict(table))
    library = frame.astype({"colour": pd.CategoricalDtype(COLOURS)})[["width", "height", "colour"]]
    np.testing.assert_array_equal(got, booster.predict(library))
    code, out, err = forge(capsys, "predict", path, "-i", rows, "--contribs")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "width,height,colour,bias"
    np.testing.assert_array_equal(np.array([[float(c) for c in line.split(",")] for line in lines[1:]]),
                                  cf.predict(table, pred_contribs=True))


def test_a_broken_file_or_no_pyarrow_is_one_clear_line(capsys, tmp_path, model, monkeypatch):
    path, _ = model
    broken = tmp_path / "rows.parquet"
    broken.write_bytes(b"PAR1 and then not a Parquet file, PAR1")
    code, _, err = forge(capsys, "predict", path, "-i", broken)
    assert code != 0 and "not a readable Parquet file" in err and "Traceback" not in err, err
    named = tmp_path / "named.csv"  # (a CSV whose first name begins as a Parquet file does: a CSV)
    named.write_text("PAR1_width,height,colour\n0.5,1.0,red\n")
    code, _, err = forge(capsys, "predict", path, "-i", named)
    assert code != 0 and "PAR1_width" in err and "Parquet" not in err, err
    import pyarrow.parquet as parquet

    good = tmp_path / "good.parquet"
    parquet.write_table(pa.Table.from_pandas(_rows(np.random.default_rng(1)), preserve_index=False), str(good))
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # (pyarrow not installed: its import fails)
    code, _, err = forge(capsys, "predict", path, "-i", good)
    assert code != 0 and "a Parquet file, which forge reads with pyarrow: pip install pyarrow" in err, err
    garbage = tmp_path / "rows.bin"
    garbage.write_bytes(b"\xff\xfe\x00 not text")
    code, _, err = forge(capsys, "predict", path, "-i", garbage)
    assert code != 0 and "nor a .npy, Parquet or Arrow file" in err, err

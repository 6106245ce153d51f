"""``forge bench`` runs and reports; it measures, so nothing here asserts a speed."""

from __future__ import annotations

import numpy as np
import pytest
import silvanforge as sf
from silvanforge import bench, cli
from silvanforge.errors import InputError

xgb = pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 4))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.float32)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 3, "nthread": 1},
                        xgb.DMatrix(X, label=y), 5)
    path = tmp_path_factory.mktemp("bench") / "tiny.json"
    booster.save_model(path)
    return path


def test_bench_measures_ours_and_xgboost(tiny_model):
    seen = []
    report = bench.run_bench(tiny_model, [1, 16], threads=1, repeat=1, min_time=0.001,
                             peers=["xgboost"], progress=lambda what, done, total: seen.append((done, total)))
    assert report.batch_sizes == [1, 16]
    assert report.engines() == [bench.OURS, "xgboost"]
    assert len(report.measurements) == 4
    for m in report.measurements:
        assert m.seconds > 0 and m.rows_per_second > 0
        if m.engine == "xgboost":
            assert m.agrees, f"xgboost disagrees with us by {m.max_abs_diff}"
            assert m.max_abs_diff < 1e-6
    for b in (1, 16):
        ratio, peer = report.speedup(b)
        assert ratio > 0 and peer == "xgboost"
    assert seen and seen[-1][0] == seen[-1][1]  # progress reached its total

    rows = bench.table_rows(report)
    assert len(rows) == 4 and all(len(r) == len(bench.HEADERS) for r in rows)
    md = bench.to_markdown(report, "forge bench tiny.json")
    assert "forge bench tiny.json" in md and "| batch |" in md and "CPUs" in md


def test_bench_all_installed_peers_agree(tiny_model):
    report = bench.run_bench(tiny_model, [8], threads=1, repeat=1, min_time=0.0)
    assert bench.OURS in report.engines()
    for m in report.measurements:
        assert m.rows_per_second > 0
        if m.engine != bench.OURS:
            assert m.agrees, f"{m.engine} disagrees with us by {m.max_abs_diff}"


def test_missing_peer_is_a_note(tiny_model, monkeypatch):
    real = bench._importable
    monkeypatch.setattr(bench, "_importable", lambda module: module != "xgboost" and real(module))
    report = bench.run_bench(tiny_model, [4], threads=1, repeat=1, min_time=0.0, peers=["xgboost"])
    assert report.engines() == [bench.OURS]
    assert any("xgboost" in n and "not installed" in n for n in report.notes)
    assert report.speedup(4) is None


def test_failing_peer_is_a_note(tiny_model, monkeypatch):
    def broken(*args):
        raise RuntimeError("cannot load\nthis model")

    monkeypatch.setattr(bench, "PEERS", [("xgboost", "xgboost", ("xgboost-json",), broken)])
    report = bench.run_bench(tiny_model, [4], threads=1, repeat=1, min_time=0.0)
    assert report.engines() == [bench.OURS]
    assert any("skipped" in n and "cannot load this model" in n for n in report.notes)


def test_bench_cli_writes_markdown(tiny_model, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    md = tmp_path / "bench.md"
    code = cli.main(["bench", str(tiny_model), "--batch-sizes", "1,16", "--repeat", "1", "--min-time", "0",
                     "--threads", "1", "--peers", "xgboost", "--markdown", str(md)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "silvanforge" in out and "xgboost" in out and "rows/s" in out
    text = md.read_text()
    assert "forge bench" in text and "--markdown" in text and "| 16 | xgboost |" in text


def test_random_rows_and_compare(tiny_model):
    forest = sf.load_model(tiny_model)
    X = bench.random_rows(forest, 100)
    assert X.shape == (100, 4) and X.dtype == np.float32 and np.isfinite(X).all()
    ours = np.array([0.25, 0.5, np.nan])
    assert bench.compare(ours, np.array([[0.75, 0.25], [0.5, 0.5], [np.nan, np.nan]])) == (0.0, True)
    diff, agrees = bench.compare(ours, np.array([[0.25], [0.6], [np.nan]]))
    assert not agrees and diff == pytest.approx(0.1)


def test_parse_batch_sizes():
    assert bench.parse_batch_sizes("64, 1,64") == [1, 64]
    for bad in ("", "0", "1,-4", "1,x"):
        with pytest.raises(InputError):
            bench.parse_batch_sizes(bad)


def test_time_call_counts_calls():
    calls = []
    seconds = bench.time_call(calls.append, 1, repeat=2, min_time=0.001)
    assert seconds > 0 and len(calls) > 2

"""``forge bench --output leaf|contribs``: runs, compares each peer with ours and reports; it
measures, so nothing here asserts a speed."""

from __future__ import annotations

import numpy as np
import pytest

from silvanforge import cli
from silvanforge_bench.explanations import run_output_bench

xgb = pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 4))
    booster = xgb.train({"max_depth": 3, "nthread": 1}, xgb.DMatrix(X, label=X[:, 0] - X[:, 1]), 5)
    path = tmp_path_factory.mktemp("bench") / "tiny.json"
    booster.save_model(path)
    return str(path)


@pytest.mark.parametrize("output", ["leaf", "contribs"])
def test_each_output_agrees_with_the_library(tiny_model, output):
    report = run_output_bench(tiny_model, output, [1, 8], [1, 2], repeat=1, min_time=0.0, peers=["xgboost"])
    library = [m for m in report.measurements if m.engine == "xgboost"]
    assert len(library) == 4 and all(m.agrees for m in library)
    assert {m.engine for m in report.measurements} == {"silvanforge", "xgboost"}


def test_the_cli_prints_the_table_and_refuses_an_unknown_output(tiny_model, capsys):
    assert cli.main(["bench", tiny_model, "--output", "contribs", "--batch-sizes", "1", "--threads", "1",
                     "--repeat", "1", "--min-time", "0", "--peers", "xgboost"]) == 0
    assert "vs xgboost" in capsys.readouterr().out
    assert cli.main(["bench", tiny_model, "--output", "margins"]) != 0
    assert "Traceback" not in capsys.readouterr().err

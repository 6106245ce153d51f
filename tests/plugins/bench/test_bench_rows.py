"""``forge bench``'s rows with a share of their values missing (``--missing``): every engine is
compared on them as on the usual rows, the report says so, and a share outside [0, 1] is refused;
it measures, so nothing here asserts a speed."""

from __future__ import annotations

import numpy as np
import pytest

from silvanforge.errors import InputError
from silvanforge_bench import bench

xgb = pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(200, 5))
    X[rng.random(X.shape) < 0.3] = np.nan  # (trained with missing values: both directions taken)
    booster = xgb.train({"max_depth": 3, "nthread": 1}, xgb.DMatrix(X, label=np.nan_to_num(X[:, 0] - X[:, 1] ** 2)), 5)
    path = tmp_path_factory.mktemp("bench") / "tiny.json"
    booster.save_model(path)
    return str(path)


def test_rows_with_missing_values_agree_and_are_noted(tiny_model):
    report = bench.run_bench(tiny_model, [16], threads=1, repeat=1, min_time=0.001, peers=["xgboost"], missing=0.8)
    library = [m for m in report.measurements if m.engine == "xgboost"]
    assert library and all(m.agrees for m in library)
    assert any("80% of values missing" in note for note in report.notes)


def test_a_share_outside_zero_to_one_is_refused(tiny_model):
    with pytest.raises(InputError, match="share between 0 and 1"):
        bench.run_bench(tiny_model, [16], threads=1, missing=1.5)

"""Train the models the benchmark tables in docs/benchmarks.md are measured on.

    python benchmarks/make_models.py OUT_DIR
    forge bench OUT_DIR/xgb_100x8.json --batch-sizes 512,4096 --threads 1

Models are trained on synthetic data with fixed seeds, so every run measures the same forests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def main(out: Path) -> None:
    import lightgbm as lgb
    import xgboost as xgb

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2026)
    X = rng.normal(size=(50_000, 32)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * X[:, 2] - np.sin(X[:, 3]) + 0.3 * rng.normal(size=len(X)) > 0).astype(int)
    params = {"max_depth": 8, "eta": 0.1, "objective": "binary:logistic", "nthread": 2, "seed": 1}
    xgb.train(params, xgb.DMatrix(X, y), 100).save_model(out / "xgb_100x8.json")
    lgb.train({"objective": "binary", "num_leaves": 255, "max_depth": 8, "min_data_in_leaf": 5,
               "verbose": -1, "num_threads": 2, "seed": 1},
              lgb.Dataset(X, y), 100).save_model(out / "lgb_100x8.txt")
    # Mixed depths, where padding every tree to one depth is too costly (docs/design.md,
    # "Tree groups"): 100 trees of depth 4, then 100 of depth 10; LightGBM grown leaf-wise.
    params4 = {**params, "max_depth": 4}
    mixed = xgb.train(params4, xgb.DMatrix(X, y), 100)
    xgb.train({**params, "max_depth": 10}, xgb.DMatrix(X, y), 100, xgb_model=mixed).save_model(
        out / "xgb_mixed_4_10.json")
    lgb.train({"objective": "binary", "num_leaves": 63, "max_depth": -1, "min_data_in_leaf": 20,
               "verbose": -1, "num_threads": 2, "seed": 1},
              lgb.Dataset(X, y), 200).save_model(out / "lgb_leafwise.txt")
    # Few features (California housing's width), where the levelwise form gains most.
    xgb.train(params, xgb.DMatrix(X[:, :8], y), 100).save_model(out / "xgb_100x8_f8.json")
    print(f"wrote {out}/xgb_100x8.json, lgb_100x8.txt, xgb_mixed_4_10.json, lgb_leafwise.txt and xgb_100x8_f8.json")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/silvanforge-bench"))

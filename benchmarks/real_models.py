"""Train XGBoost and LightGBM models on the real datasets scikit-learn ships (no download):
breast cancer (binary, 30 features), diabetes (regression, 10 features) and digits (10 classes,
64 features), 100 rounds of depth up to 8 each.

    python benchmarks/real_models.py OUT_DIR
    forge bench OUT_DIR/xgb_cancer.json --batch-sizes 512,4096 --threads 1,2

Trees grown on a few hundred rows are small and of mixed depths (most of the XGBoost cancer
model's trees have depth 2-5), unlike the synthetic suite's full trees: docs/benchmarks.md
("Large batches against every CPU peer") compares every peer on them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def main(out: Path) -> None:
    import lightgbm as lgb
    import xgboost as xgb
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits

    out.mkdir(parents=True, exist_ok=True)
    kinds = {
        "cancer": (load_breast_cancer, {"objective": "binary:logistic"}, {"objective": "binary"}),
        "diabetes": (load_diabetes, {"objective": "reg:squarederror"}, {"objective": "regression"}),
        "digits": (load_digits, {"objective": "multi:softprob", "num_class": 10},
                   {"objective": "multiclass", "num_class": 10}),
    }
    for name, (loader, xgb_params, lgb_params) in kinds.items():
        X, y = loader(return_X_y=True)
        X = X.astype(np.float32)
        xgb.train({**xgb_params, "max_depth": 8, "eta": 0.1, "nthread": 2, "seed": 1},
                  xgb.DMatrix(X, y), 100).save_model(out / f"xgb_{name}.json")
        lgb.train({**lgb_params, "num_leaves": 255, "max_depth": 8, "min_data_in_leaf": 2, "verbose": -1,
                   "num_threads": 2, "seed": 1}, lgb.Dataset(X, y), 100).save_model(out / f"lgb_{name}.txt")
        print(f"{name}: {X.shape[0]} rows x {X.shape[1]} features -> {out}/xgb_{name}.json, lgb_{name}.txt")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "real-models"))

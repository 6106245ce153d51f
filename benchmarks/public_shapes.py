"""Train XGBoost and LightGBM models shaped like the public benchmark suites' (Treebeard's and
Hummingbird's: abalone, airline, airline-ohe, covtype, epsilon, higgs, letters, year) on synthetic
data of the same width, so the CPU chooser can be checked on their shapes without downloads.

    python benchmarks/public_shapes.py OUT_DIR [--only NAME,...] [--rows N]
    forge bench OUT_DIR/xgb_higgs.json --batch-sizes 512,4096 --threads 1,2

The data is `make_classification` / `make_regression` with a tenth of the values missing, so the
trees are full-depth and use the default directions, like models trained on the real sets.
Shapes (rounds x outputs, features, depth 8 everywhere) follow the suites' published tables;
letters is cut to 200 rounds (5200 trees) to keep training to minutes on two cores.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

# name: (task, rounds, features, classes)
SHAPES = {
    "abalone": ("regression", 1000, 8, 1),
    "airline": ("binary", 100, 13, 2),
    "airline-ohe": ("binary", 1000, 692, 2),
    "covtype": ("multiclass", 100, 54, 8),
    "epsilon": ("binary", 100, 2000, 2),
    "higgs": ("binary", 100, 28, 2),
    "letters": ("multiclass", 200, 16, 26),
    "year": ("regression", 100, 90, 1),
}


def dataset(task: str, features: int, classes: int, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_classification, make_regression

    if task == "regression":
        X, y = make_regression(rows, features, n_informative=min(features, 20), noise=5.0, random_state=seed)
    else:
        X, y = make_classification(rows, features, n_informative=min(features, 24), n_redundant=0,
                                   n_classes=classes, n_clusters_per_class=2, random_state=seed)
    X = X.astype(np.float32)
    X[np.random.default_rng(seed).random(X.shape) < 0.1] = np.nan
    return X, y


def main() -> None:
    import lightgbm as lgb
    import xgboost as xgb

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", default="", help="comma-separated names (default: all)")
    parser.add_argument("--rows", type=int, default=20000)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.only.split(",") if n] or list(SHAPES)
    for name in names:
        task, rounds, features, classes = SHAPES[name]
        X, y = dataset(task, features, classes, args.rows, seed=len(name))
        xgb_obj = {"regression": {"objective": "reg:squarederror"},
                   "binary": {"objective": "binary:logistic"},
                   "multiclass": {"objective": "multi:softprob", "num_class": classes}}[task]
        lgb_obj = {"regression": {"objective": "regression"}, "binary": {"objective": "binary"},
                   "multiclass": {"objective": "multiclass", "num_class": classes}}[task]
        xgb.train({**xgb_obj, "max_depth": 8, "eta": 0.1, "nthread": 2, "seed": 1, "tree_method": "hist"},
                  xgb.DMatrix(X, y), rounds).save_model(args.out / f"xgb_{name}.json")
        lgb.train({**lgb_obj, "num_leaves": 255, "max_depth": 8, "verbose": -1, "num_threads": 2, "seed": 1},
                  lgb.Dataset(X, y), rounds).save_model(args.out / f"lgb_{name}.txt")
        print(f"{name}: {rounds} rounds x {classes if classes > 2 else 1} outputs, {features} features "
              f"-> {args.out}/xgb_{name}.json, lgb_{name}.txt", flush=True)


if __name__ == "__main__":
    main()

"""Train LightGBM models with categorical features and deep leaf-wise trees, and XGBoost models
with ``enable_categorical=True``, shaped like public tabular data (what users have, not what is
easy to train), so `forge bench` measures the forms real LightGBM models take.

    python benchmarks/categorical_models.py OUT_DIR [--only NAME,...] [--rows N]
    forge bench OUT_DIR/lgb_flight_100x31.txt --batch-sizes 512,4096 --threads 1,2

Data sets (synthetic, one tenth of the numeric values missing):
- flight: 6 features, 3 categorical (carrier 20 levels, origin and destination airports 300 and
  400 levels, Zipf-distributed like real airport traffic) and 3 numeric (hour, distance, month);
  the target depends mostly on the categories, so most splits are categorical.
- insurance: 15 features, 5 categorical of 5-25 levels and 10 numeric.
- taxi: 5 numeric features, a smooth target: leaf-wise trees grow 16-39 deep; taxiclean: the
  same without missing values (no NaN-or-not splits: the walks read split rows); taxizone: taxi
  with a pickup zone of 30 levels and a small effect (some trees split on it, most do not: the
  per-tree choice of forms).
Models: LightGBM (100 and 1000 trees, 31 and 255 leaves, leaf-wise, no depth limit) and XGBoost
hist with ``enable_categorical`` (pandas categoricals, depth 8).  ``--only`` takes model names.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

# name: (data set, library, trees, leaves)
MODELS = {
    "lgb_flight_100x31": ("flight", "lightgbm", 100, 31),
    "lgb_flight_1000x255": ("flight", "lightgbm", 1000, 255),
    "lgb_insurance_1000x31": ("insurance", "lightgbm", 1000, 31),
    "lgb_insurance_100x255": ("insurance", "lightgbm", 100, 255),
    "lgb_taxi_100x31": ("taxi", "lightgbm", 100, 31),
    "lgb_taxi_1000x255": ("taxi", "lightgbm", 1000, 255),
    "lgb_taxiclean_100x255": ("taxiclean", "lightgbm", 100, 255),
    "lgb_taxizone_1000x255": ("taxizone", "lightgbm", 1000, 255),
    "xgb_flight_100": ("flight", "xgboost", 100, 0),
    "xgb_insurance_300": ("insurance", "xgboost", 300, 0),
}


def _zipf_codes(rng, rows: int, levels: int) -> np.ndarray:
    p = 1.0 / np.arange(1, levels + 1) ** 1.1
    return rng.choice(levels, size=rows, p=p / p.sum())


def dataset(name: str, rows: int, seed: int = 0):
    """(X as a pandas DataFrame with ``category`` columns, y, categorical column names)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    cols: dict[str, np.ndarray] = {}
    if name == "flight":
        levels = {"carrier": 20, "origin": 300, "dest": 400}
        for c, k in levels.items():
            cols[c] = _zipf_codes(rng, rows, k)
        cols["hour"] = rng.integers(0, 24, rows).astype(float)
        cols["distance"] = rng.gamma(2.0, 400.0, rows)
        cols["month"] = rng.integers(1, 13, rows).astype(float)
        effect = {c: rng.normal(0, 1, k) for c, k in levels.items()}
        logit = (effect["carrier"][cols["carrier"]] + effect["origin"][cols["origin"]]
                 + effect["dest"][cols["dest"]] + 0.05 * (cols["hour"] - 12) + 0.2 * np.sin(cols["month"]))
        y = (logit + rng.normal(0, 1, rows) > 0).astype(int)
    elif name == "insurance":
        levels = {f"cat{k}": n for k, n in enumerate((5, 8, 12, 18, 25))}
        for c, k in levels.items():
            cols[c] = rng.integers(0, k, rows)
        for k in range(10):
            cols[f"num{k}"] = rng.normal(0, 1, rows)
        effect = {c: rng.normal(0, 1, k) for c, k in levels.items()}
        mean = sum(effect[c][cols[c]] for c in levels) + cols["num0"] * cols["num1"] + np.abs(cols["num2"])
        y = rng.gamma(2.0, np.exp(0.3 * mean) / 2.0)  # claim amounts: skewed, positive
    elif name in ("taxi", "taxiclean", "taxizone"):
        levels = {"zone": 30} if name == "taxizone" else {}
        cols["pickup_x"], cols["pickup_y"] = rng.normal(0, 1, rows), rng.normal(0, 1, rows)
        cols["dropoff_x"], cols["dropoff_y"] = rng.normal(0, 1, rows), rng.normal(0, 1, rows)
        cols["hour"] = rng.uniform(0, 24, rows)
        dist = np.hypot(cols["pickup_x"] - cols["dropoff_x"], cols["pickup_y"] - cols["dropoff_y"])
        y = 3 + 7 * dist * (1 + 0.3 * np.sin(cols["hour"] / 24 * 2 * np.pi)) + rng.normal(0, 0.5, rows)
        if levels:
            cols["zone"] = rng.integers(0, 30, rows)
            y = y + 0.3 * rng.normal(0, 1, 30)[cols["zone"]]
    else:
        raise ValueError(f"unknown data set {name!r}")
    frame = pd.DataFrame(cols)
    for c in frame.columns:
        if c in levels:
            frame[c] = pd.Categorical(frame[c], categories=range(levels[c]))
        elif name != "taxiclean":
            frame.loc[rng.random(rows) < 0.1, c] = np.nan
    return frame, y, list(levels)


def task_of(data: str) -> str:
    return {"flight": "binary", "insurance": "regression", "taxi": "regression", "taxiclean": "regression",
            "taxizone": "regression"}[data]


def train(name: str, path: Path, rows: int) -> None:
    data, library, trees, leaves = MODELS[name]
    X, y, cats = dataset(data, rows)
    if library == "lightgbm":
        import lightgbm as lgb

        objective = {"binary": "binary", "regression": "gamma" if data == "insurance" else "regression"}[task_of(data)]
        params = {"objective": objective, "num_leaves": leaves, "max_depth": -1, "learning_rate": 0.1,
                  "min_data_in_leaf": 5, "max_cat_to_onehot": 4, "max_cat_threshold": 64,
                  "cat_smooth": 5, "min_data_per_group": 20, "verbose": -1, "num_threads": 2, "seed": 1}
        lgb.train(params, lgb.Dataset(X, y, categorical_feature=cats or "auto"), trees).save_model(str(path))
    else:
        import xgboost as xgb

        objective = {"binary": "binary:logistic", "regression": "reg:gamma"}[task_of(data)]
        params = {"objective": objective, "max_depth": 8, "eta": 0.1, "tree_method": "hist",
                  "max_cat_to_onehot": 1, "nthread": 2, "seed": 1}
        xgb.train(params, xgb.DMatrix(X, y, enable_categorical=True), trees).save_model(str(path))


def filename(name: str) -> str:
    return name + (".txt" if MODELS[name][1] == "lightgbm" else ".json")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", default="", help="comma-separated model names (default: all)")
    parser.add_argument("--rows", type=int, default=50_000)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in [n for n in args.only.split(",") if n] or list(MODELS):
        path = args.out / filename(name)
        train(name, path, args.rows)
        print(f"{name} -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Regenerate the example model and inputs shipped in examples/ (needs xgboost).

    python examples/make_example.py

Writes examples/model.json (XGBoost, binary:logistic, 20 trees of depth 4 over 8 features,
trained on synthetic data) and examples/X.csv (100 rows with a header of feature names; some
cells are empty, which means missing).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xgboost as xgb

HERE = Path(__file__).resolve().parent
FEATURES = [f"f{i}" for i in range(8)]


def make_data(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    X = rng.normal(size=(n, len(FEATURES)))
    logit = 1.5 * X[:, 0] - X[:, 1] + 0.8 * X[:, 2] * X[:, 3] + np.sin(2 * X[:, 4]) + 0.3 * X[:, 5]
    y = (logit + rng.normal(scale=0.5, size=n) > 0).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan  # some values missing, as in real data
    return X, y


def main() -> None:
    rng = np.random.default_rng(2024)
    X, y = make_data(rng, 2000)
    dtrain = xgb.DMatrix(X, label=y, feature_names=FEATURES)
    params = {"objective": "binary:logistic", "max_depth": 4, "eta": 0.3, "seed": 0, "nthread": 1}
    booster = xgb.train(params, dtrain, num_boost_round=20)
    booster.save_model(HERE / "model.json")

    X_new, _ = make_data(rng, 100)
    lines = [",".join(FEATURES)]
    for row in X_new:
        lines.append(",".join("" if np.isnan(v) else f"{v:.6g}" for v in row))
    (HERE / "X.csv").write_text("\n".join(lines) + "\n")
    print(f"wrote {HERE / 'model.json'} and {HERE / 'X.csv'}")


if __name__ == "__main__":
    main()

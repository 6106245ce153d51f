"""How far our probabilities are from each library's own: the share of values that differ and the
largest difference, for binary and 3-class models of XGBoost, LightGBM and CatBoost.

    python benchmarks/probability_bits.py [--rows 20000] [--rounds 50]

Margins are equal bit for bit on the CPU; a probability can differ in its last bit where the
``exp`` the transform takes differs from the library's: ours is NumPy's (float64) or correctly
rounded (XGBoost's float32 sigmoid), XGBoost and LightGBM call the C library's, CatBoost its own
fast ``exp``.  The models are trained here on random data (8 features, fixed seed) and predict
random rows; the README quotes this script's output.
"""

from __future__ import annotations

import argparse

import numpy as np


def _report(name: str, ours: np.ndarray, theirs: np.ndarray) -> None:
    theirs = np.asarray(theirs).reshape(ours.shape)
    differ = ours != theirs
    print(f"| {name} | {differ.sum():,} of {differ.size:,} ({differ.mean():.2%}) | "
          f"{np.abs(ours - theirs).max():.2g} |")


def main(argv=None) -> None:
    import catboost as cb
    import lightgbm as lgb
    import silvanforge as sf
    import xgboost as xgb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5000, 8))
    three = np.digitize(X[:, 0] + X[:, 1] * X[:, 2], [-0.5, 0.5])
    two = (X[:, 0] + rng.normal(size=len(X)) > 0).astype(int)
    rows = rng.normal(size=(args.rows, 8))
    n = args.rounds
    print("| model | values that differ | largest difference |")
    print("|---|---:|---:|")
    for name, model, y, binary in [
            ("XGBoost binary:logistic (float32)", xgb.XGBClassifier(n_estimators=n, max_depth=6), two, True),
            ("XGBoost multi:softprob, 3 classes (float32)", xgb.XGBClassifier(n_estimators=n, max_depth=6), three, False),
            ("LightGBM binary", lgb.LGBMClassifier(n_estimators=n, verbose=-1), two, True),
            ("LightGBM multiclass, 3 classes", lgb.LGBMClassifier(n_estimators=n, verbose=-1), three, False),
            ("CatBoost Logloss", cb.CatBoostClassifier(iterations=n, depth=6, verbose=0, thread_count=1), two, True),
            ("CatBoost MultiClass, 3 classes",
             cb.CatBoostClassifier(iterations=n, depth=6, verbose=0, thread_count=1), three, False)]:
        model.fit(X, y)
        theirs = model.predict_proba(rows)
        _report(name, sf.compile(model, threads=1).predict(rows), theirs[:, 1] if binary else theirs)


if __name__ == "__main__":
    main()

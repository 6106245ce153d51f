"""A CatBoost classifier with one-hot and CTR categorical features (8 string columns of 2-40
categories, 6 numbers; 500 trees of depth 6, 258 CTR combinations), rows given as a pandas
frame of labels: ours against CatBoost's own predict, 1 thread, best of 5.

    python benchmarks/catboost_categories.py DIR    # trains DIR/cb_cat.cbm once, then times it

Most of a call of ours is reading the categories (hashing each distinct label, finding every
combination's key among the model's): docs/benchmarks.md, "Frames and records".
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

CATS = {"workclass": 8, "education": 16, "marital": 7, "occupation": 14, "relationship": 6, "race": 5,
        "sex": 2, "country": 40}


def frame(n: int, seed: int = 0):
    import pandas as pd

    rng = np.random.default_rng(seed)
    df = pd.DataFrame({k: rng.choice([f"{k}_{i}" for i in range(m)], n,
                                     p=np.random.default_rng(len(k)).dirichlet(np.ones(m)))
                       for k, m in CATS.items()})
    for j in range(6):
        df[f"num{j}"] = rng.normal(size=n)
    df.loc[rng.random(n) < 0.05, "num0"] = np.nan
    y = ((df.num0.fillna(0) + (df.education.str[-1].astype(int) % 3) - (df.sex == "sex_1")
          + rng.normal(size=n)) > 0.5).astype(int)
    return df, y


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    import catboost

    import silvanforge as sf

    path = args.dir / "cb_cat.cbm"
    if not path.exists():
        args.dir.mkdir(parents=True, exist_ok=True)
        df, y = frame(30000)
        catboost.CatBoostClassifier(iterations=500, depth=6, verbose=False, random_seed=0, thread_count=2,
                                    one_hot_max_size=4, cat_features=list(CATS),
                                    allow_writing_files=False).fit(df, y).save_model(str(path))
    model = catboost.CatBoostClassifier()
    model.load_model(str(path))
    cf = sf.compile(path)
    X, _ = frame(4096, seed=1)
    print("| rows | ours rows/s | catboost rows/s | ours / catboost |\n|---:|---:|---:|---:|")
    for n in (1, 64, 512, 4096):
        rows = X.iloc[:n]
        np.testing.assert_allclose(cf.predict(rows, output_margin=True).ravel(),
                                   model.predict(rows, prediction_type="RawFormulaVal", thread_count=1).ravel(),
                                   rtol=1e-9, atol=1e-9)

        def best(fn, k):
            out = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(k):
                    fn()
                out = min(out, (time.perf_counter() - start) / k)
            return out

        k = max(3, 2000 // n)
        ours = best(lambda: cf.predict(rows, threads=1), k)
        lib = best(lambda: model.predict(rows, prediction_type="Probability", thread_count=1), k)
        print(f"| {n} | {n / ours:,.0f} | {n / lib:,.0f} | {lib / ours:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

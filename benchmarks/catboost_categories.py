"""CatBoost classifiers with one-hot and CTR categorical features (8 categorical columns of 2-40
categories, 6 numbers; 500 trees of depth 6, CTRs over combinations of up to 4 features): ours
against CatBoost's own predict, the categories given as labels (strings), as pandas categories
and as integer codes (a model trained on the codes), timed in turns in one process; and ours given
the labels' rows as a pyarrow table, a polars frame or records (dicts), CatBoost the pandas frame.

    python benchmarks/catboost_categories.py DIR    # trains DIR/cb_cat.cbm, cb_cat_codes.cbm once
    python benchmarks/catboost_categories.py DIR --rows 512,4096 --threads 1,2 --rounds 40
    python benchmarks/catboost_categories.py DIR --rows 1,64,4096 --inputs pyarrow,polars,records,labels

Each cell: the best of ``--rounds`` rounds, a round timing ours then CatBoost's on the same rows
(``predict(..., thread_count=threads)``), so load on a shared machine falls on both alike and
the best round of each is the least disturbed (clock time: CatBoost spends CPU time in other
threads even at ``thread_count=1``, so CPU time would not compare the two).
docs/benchmarks.md, "Frames and records".
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


def as_codes(df):
    """The frame with each label replaced by its integer code (``workclass_3`` -> 3)."""
    out = df.copy()
    for k in CATS:
        out[k] = df[k].str.rsplit("_", n=1).str[1].astype(np.int64)
    return out


def as_categories(df):
    """The frame with each categorical column a pandas ``category``."""
    out = df.copy()
    for k in CATS:
        out[k] = df[k].astype("category")
    return out


def train(path: Path, codes: bool) -> None:
    import catboost

    df, y = frame(30000)
    catboost.CatBoostClassifier(iterations=500, depth=6, verbose=False, random_seed=0, thread_count=2,
                                one_hot_max_size=4, cat_features=list(CATS),
                                allow_writing_files=False).fit(as_codes(df) if codes else df, y).save_model(str(path))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--rows", default="1,64,512,4096")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--inputs", default="", help="the inputs whose names hold one of these comma-separated "
                        "words (default: labels, pandas categories and codes; also: pyarrow, polars, records)")
    args = parser.parse_args(argv)
    import catboost

    import silvanforge as sf

    args.dir.mkdir(parents=True, exist_ok=True)
    models = {}
    for codes in (False, True):
        path = args.dir / ("cb_cat_codes.cbm" if codes else "cb_cat.cbm")
        if not path.exists():
            train(path, codes)
        model = catboost.CatBoostClassifier()
        model.load_model(str(path))
        models[codes] = (model, sf.compile(path).wait())  # (every form built: none compiling meanwhile)
    clock = time.perf_counter
    X, _ = frame(4096, seed=1)
    inputs = {"labels": (False, X), "pandas categories": (False, as_categories(X)), "codes": (True, as_codes(X)),
              "pyarrow labels": (False, "pyarrow"), "polars labels": (False, "polars"), "records": (False, "records")}
    wanted = [w for w in args.inputs.split(",") if w]
    if not wanted:  # (the model's own inputs; the others are ours given the labels' rows)
        inputs = {name: given for name, given in inputs.items() if type(given[1]) is not str}
    print("| input | threads | rows | ours rows/s | catboost rows/s | ours / catboost |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (codes, data) in inputs.items():
        if wanted and not any(w in name for w in wanted):
            continue
        model, cf = models[codes]
        for threads in (int(t) for t in args.threads.split(",")):
            for n in (int(r) for r in args.rows.split(",")):
                # (CatBoost's predict is given the pandas frame of labels where ours is given another
                # input of the same rows: its own input, as its users call it)
                theirs = rows = (X if type(data) is str else data).iloc[:n]
                kind = data if type(data) is str else None
                if kind == "pyarrow":
                    import pyarrow as pa
                    rows = pa.Table.from_pandas(theirs, preserve_index=False)
                elif kind == "polars":
                    import polars as pl
                    rows = pl.from_pandas(theirs)
                elif kind == "records":
                    rows = theirs.astype(object).where(theirs.notna(), None).to_dict("records")
                np.testing.assert_allclose(cf.predict(rows, output_margin=True).ravel(),
                                           model.predict(theirs, prediction_type="RawFormulaVal").ravel(),
                                           rtol=1e-12, atol=1e-12)
                k = max(3, 2000 // n)
                ours = lib = float("inf")
                for _ in range(args.rounds):
                    start = clock()
                    for _ in range(k):
                        cf.predict(rows, threads=threads)
                    ours = min(ours, (clock() - start) / k)
                    start = clock()
                    for _ in range(k):
                        model.predict(theirs, prediction_type="Probability", thread_count=threads)
                    lib = min(lib, (clock() - start) / k)
                print(f"| {name} | {threads} | {n} | {n / ours:,.0f} | {n / lib:,.0f} | {lib / ours:.2f}x |",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Leaf indices and SHAP contributions: ours against the model's library (and shap /
fasttreeshap where installed), at request sizes users send, on one thread.

    python benchmarks/explanations.py MODEL [MODEL ...] [--sizes 1,64,4096] [--threads 1] [--repeat 3]

MODEL: an XGBoost JSON, LightGBM text or CatBoost .cbm file.  Each cell is the best of
``--repeat`` calls (after one warm call) in ms, and the library's time over ours; every answer
is checked against the library's first (leaf ids equal, contributions within 1e-4 relative)."""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import silvanforge as sf


def _best(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _library(path: str, threads: int):
    """(name, leaf(X), contribs(X)) of the model's own library."""
    if path.endswith(".json"):
        import xgboost as xgb

        booster = xgb.Booster(model_file=path)
        booster.set_param({"nthread": threads})
        return ("xgboost", lambda X: booster.predict(xgb.DMatrix(X, nthread=threads), pred_leaf=True),
                lambda X: booster.predict(xgb.DMatrix(X, nthread=threads), pred_contribs=True))
    if path.endswith(".cbm"):
        import catboost as cb

        model = cb.CatBoost()
        model.load_model(path)
        return ("catboost", lambda X: model.calc_leaf_indexes(cb.Pool(X), thread_count=threads),
                lambda X: model.get_feature_importance(cb.Pool(X), type="ShapValues", thread_count=threads))
    import lightgbm as lgb

    booster = lgb.Booster(model_file=path)
    return ("lightgbm", lambda X: booster.predict(X, pred_leaf=True, num_threads=threads),
            lambda X: booster.predict(X, pred_contrib=True, num_threads=threads))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--sizes", default="1,64,4096")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print("| model | output | rows | ours ms | library | library ms | library / ours |")
    print("|---|---|---|---|---|---|---|")
    for path in args.models:
        cf = sf.compile(path, threads=args.threads, forms="eager")
        name, leaf, contribs = _library(path, args.threads)
        X = np.random.default_rng(0).random((max(sizes), cf.num_features))
        X = X.astype(cf.main.input_dtype)
        model = os.path.basename(path)
        for output, lib in (("leaf", leaf), ("contribs", contribs)):
            kw = {"pred_leaf": True} if output == "leaf" else {"pred_contribs": True}
            for n in sizes:
                rows = X[:n]
                ours, theirs = cf.predict(rows, threads=args.threads, **kw), lib(rows)
                if output == "leaf":
                    assert np.array_equal(ours.reshape(theirs.shape), theirs), f"{model}: leaf ids differ"
                else:
                    np.testing.assert_allclose(ours.reshape(theirs.shape), theirs, rtol=1e-4,
                                               atol=1e-4 * float(np.abs(theirs).max() or 1))
                repeat = args.repeat if n < 4096 else 1
                t_ours = _best(lambda: cf.predict(rows, threads=args.threads, **kw), repeat)
                t_lib = _best(lambda: lib(rows), repeat)
                print(f"| {model} | {output} | {n} | {t_ours * 1e3:.3f} | {name} | {t_lib * 1e3:.3f} | "
                      f"{t_lib / t_ours:.2f}x |", flush=True)


if __name__ == "__main__":
    main()

"""SHAP contributions, ours against the model's library and shap's TreeExplainer (and
fasttreeshap where it reads the model), alternating call by call in one process, so a shared
machine's load falls on every engine alike; ``--output leaf``: leaf indices against the
library's (``pred_leaf``, ``calc_leaf_indexes``), each round of every size (not one at 4096).

    python benchmarks/contribs_alternating.py MODEL [--sizes 1,64,4096] [--threads 1] [--repeat 5] [--output leaf]
    python benchmarks/contribs_alternating.py MODEL --background 100     # interventional, against shap

MODEL: an XGBoost JSON, LightGBM text or CatBoost .cbm file.  Rows are ``forge bench``'s random
rows; each round calls every engine once at each size (a new batch each round), and a cell is
the best of ``--repeat`` rounds (4096 rows and more: of 1, after the check).  Each peer's answer
on 64 rows is compared with ours first (its largest difference printed; shap and fasttreeshap
without the bias column).  Our tables are built before timing, as the peers' explainers are.
``--background N``: interventional contributions against N random rows (``pred_contribs=True,
background=...``) against shap's interventional TreeExplainer on the same rows (the libraries
compute none)."""

from __future__ import annotations

import argparse
import time

import numpy as np

import silvanforge as sf
from silvanforge.frontend.sampling import random_rows


def _engines(path: str, forest, threads: int, leaf: bool = False) -> list:
    """[(name, contribs(X), drops_bias)] of the library, shap and fasttreeshap; ``leaf``:
    [(name, leaf indices(X), False)] of the library."""
    if path.endswith(".json"):
        import xgboost as xgb

        from silvanforge_bench.bench_peers.native import load_xgboost_booster

        model = load_xgboost_booster(path)
        model.set_param({"nthread": threads})
        kw = {"pred_leaf": True} if leaf else {"pred_contribs": True}
        out = [("xgboost", lambda X: model.predict(xgb.DMatrix(X, nthread=threads), **kw), False)]
    elif path.endswith(".cbm"):
        import catboost as cb

        model = cb.CatBoost()
        model.load_model(path)
        out = [("catboost", (lambda X: model.calc_leaf_indexes(cb.Pool(X), thread_count=threads)) if leaf else
                (lambda X: model.get_feature_importance(cb.Pool(X), type="ShapValues", thread_count=threads)),
                False)]
    else:
        import lightgbm as lgb

        model = lgb.Booster(model_file=path)
        kw = {"pred_leaf": True} if leaf else {"pred_contrib": True}
        out = [("lightgbm", lambda X: model.predict(X, num_threads=threads, **kw), False)]
    if leaf:
        return out
    try:
        import shap

        explainer = shap.TreeExplainer(model, feature_perturbation="tree_path_dependent")
        out.append(("shap", lambda X: explainer.shap_values(X, check_additivity=False), True))
    except ImportError:
        print("shap: not installed")
    try:
        from silvanforge_bench.explanations import _obj2sctype

        if not hasattr(np, "obj2sctype"):
            np.obj2sctype = _obj2sctype
        import fasttreeshap

        fast = fasttreeshap.TreeExplainer(model, algorithm="auto", n_jobs=threads)
        fast.shap_values(np.zeros((1, forest.input_features)), check_additivity=False)
        out.append(("fasttreeshap", lambda X: fast.shap_values(X, check_additivity=False), True))
    except Exception as exc:  # noqa: BLE001 - a peer that cannot read the model is a note
        print(f"fasttreeshap: skipped ({type(exc).__name__}: {str(exc)[:80]})")
    return out


def _interventional_peer(path: str, background: np.ndarray) -> list:
    """[("shap", interventional contributions(X), True)]: shap's TreeExplainer on the model's
    library's booster, against ``background``, for the margin."""
    import shap

    if path.endswith(".json"):
        from silvanforge_bench.bench_peers.native import load_xgboost_booster

        model = load_xgboost_booster(path)
    elif path.endswith(".cbm"):
        import catboost as cb

        model = cb.CatBoost()
        model.load_model(path)
    else:
        import lightgbm as lgb

        model = lgb.Booster(model_file=path)
    explainer = shap.TreeExplainer(model, data=background, feature_perturbation="interventional", model_output="raw")
    return [("shap", lambda X: explainer.shap_values(X, check_additivity=False), True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--sizes", default="1,64,4096")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--output", choices=("contribs", "leaf"), default="contribs")
    parser.add_argument("--background", type=int, default=0, help="interventional, against this many rows")
    args = parser.parse_args()
    leaf = args.output == "leaf"
    sizes = [int(s) for s in args.sizes.split(",")]
    forest = sf.load_model(args.model)
    cf = sf.compile(forest).wait()
    pool = random_rows(forest, max(8192, 2 * max(sizes)), 0)[:, :forest.input_features]
    start = time.perf_counter()
    background = random_rows(forest, args.background, 1)[:, :forest.input_features] if args.background else None
    if leaf:
        cf.output_model("pred_leaf").wait()
    elif background is not None:
        cf.predict(pool[:1], pred_contribs=True, background=background)
    else:
        cf.prepare_contributions()
    print(f"{args.output} built in {time.perf_counter() - start:.1f} s")
    kw = {"pred_leaf": True} if leaf else {"pred_contribs": True, "background": background}
    engines = [("ours", lambda X: cf.predict(X, threads=args.threads, **kw), False)]
    engines += _engines(args.model, forest, args.threads, leaf) if background is None else \
        _interventional_peer(args.model, background)
    ours = engines[0][1](pool[:64]).reshape(64, -1)
    for name, fn, drops_bias in engines[1:]:
        got = np.asarray(fn(pool[:64]))
        want = ours.reshape(64, -1, forest.num_features + 1)[..., :-1] if drops_bias else ours
        print(f"{name}: max difference {np.abs(got.reshape(64, -1) - want.reshape(64, -1)).max():.1e}")
    for n in sizes:
        best: dict[str, float] = {}
        for r in range(args.repeat if n < 4096 or leaf else 1):
            X = pool[(r * n) % (len(pool) - n + 1):][:n]
            for name, fn, _ in engines:
                begin = time.perf_counter()
                fn(X)
                best[name] = min(best.get(name, np.inf), time.perf_counter() - begin)
        peer = min((t, name) for name, t in best.items() if name != "ours")
        cells = ", ".join(f"{name} {t * 1e3:.3f} ms" for name, t in best.items())
        print(f"{n} rows, {args.threads} threads: {cells}; fastest peer / ours: {peer[0] / best['ours']:.2f}x "
              f"({peer[1]})", flush=True)


if __name__ == "__main__":
    main()

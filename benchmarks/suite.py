"""The synthetic benchmark suite: models spanning the bar, each timed with ``forge bench``.

    python benchmarks/suite.py [--dir ~/.cache/silvanforge/suite] [--markdown OUT.md]
                               [--set suite|categorical|all]
                               [--models xgb_100x6_f8,...] [--peers xgboost,lleaves,...]

``--set categorical`` takes the models users have that the synthetic suite lacks:
LightGBM with categorical features (flight-delay and insurance shapes) and deep leaf-wise trees
(taxi), XGBoost with ``enable_categorical`` (benchmarks/categorical_models.py).

The bar: 100- to 1000-tree models of depth 6 to 10 with 8 to 2000 features, XGBoost
and LightGBM alike, at batch 512 and 4096, with 1 thread and with every core.  Every model is
trained once on synthetic data with fixed seeds and cached in ``--dir`` (a model file found there
is reused), then timed by :func:`silvanforge_bench.bench.run_bench`, the function behind
``forge bench MODEL --batch-sizes 512,4096 --threads 1,2 --repeat 5``.  The output is one
markdown table (our rows/s, the fastest peer, the ratio) per model, thread count and batch size,
and the geometric mean of the ratios.  ``--details`` also appends each model's full
``forge bench`` report.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from pathlib import Path

import numpy as np


@dataclasses.dataclass(frozen=True)
class SuiteModel:
    name: str
    library: str  # "xgboost" | "lightgbm"
    trees: int
    depth: int
    features: int
    rows: int  # training rows
    objective: str = "binary"  # "binary" | "regression"

    @property
    def filename(self) -> str:
        return self.name + (".json" if self.library == "xgboost" else ".txt")


# Chosen to span the bar: small and large tree counts, shallow and deep, few and many features,
# balanced (XGBoost depth-wise) and skewed (LightGBM leaf-wise with fewer leaves than 2**depth).
MODELS = [
    SuiteModel("xgb_100x6_f8", "xgboost", 100, 6, 8, 20_000),
    SuiteModel("xgb_500x8_f64", "xgboost", 500, 8, 64, 20_000, "regression"),
    SuiteModel("xgb_1000x10_f200", "xgboost", 1000, 10, 200, 20_000),
    SuiteModel("xgb_300x8_f2000", "xgboost", 300, 8, 2000, 5_000),
    SuiteModel("lgb_100x6_f8", "lightgbm", 100, 6, 8, 20_000),
    SuiteModel("lgb_500x8_f64", "lightgbm", 500, 8, 64, 20_000, "regression"),
    SuiteModel("lgb_1000x10_f200", "lightgbm", 1000, 10, 200, 10_000),
    SuiteModel("lgb_300x8_f2000", "lightgbm", 300, 8, 2000, 5_000),
]


def synthetic(m: SuiteModel) -> tuple[np.ndarray, np.ndarray]:
    """Rows with a few informative features, the rest noise; a label that needs deep trees."""
    rng = np.random.default_rng(hash((m.features, m.rows)) % 2**32)
    X = rng.normal(size=(m.rows, m.features)).astype(np.float32)
    k = min(m.features, 16)
    w = rng.normal(size=k)
    z = X[:, :k] @ w + np.sin(3 * X[:, 0]) * X[:, 1 % m.features] + 0.5 * rng.normal(size=m.rows)
    if m.features > 16:  # sparse contributions from many features so trees use them
        z += 0.05 * X[:, 16:].sum(axis=1) / math.sqrt(m.features - 16)
    if m.objective == "binary":
        return X, (z > np.median(z)).astype(np.float32)
    return X, z.astype(np.float32)


def train(m: SuiteModel, path: Path) -> None:
    X, y = synthetic(m)
    if m.library == "xgboost":
        import xgboost as xgb

        params = {"max_depth": m.depth, "eta": 0.05, "nthread": 2, "seed": 1, "tree_method": "hist",
                  "objective": "binary:logistic" if m.objective == "binary" else "reg:squarederror",
                  "colsample_bytree": 0.8, "subsample": 0.8}
        xgb.train(params, xgb.DMatrix(X, y), m.trees).save_model(path)
    else:
        import lightgbm as lgb

        params = {"objective": m.objective, "max_depth": m.depth,
                  # leaf-wise trees with fewer leaves than a full tree: skewed, like real models
                  "num_leaves": max(8, 2 ** m.depth // 4), "min_data_in_leaf": 5,
                  "learning_rate": 0.05, "feature_fraction": 0.8, "bagging_fraction": 0.8,
                  "bagging_freq": 1, "verbose": -1, "num_threads": 1, "seed": 1}
        lgb.train(params, lgb.Dataset(X, y), m.trees).save_model(str(path))


@dataclasses.dataclass(frozen=True)
class CategoricalModel:
    """A model of benchmarks/categorical_models.py: LightGBM with categorical features and deep
    leaf-wise trees, XGBoost with ``enable_categorical``, shaped like public data."""
    name: str

    @property
    def filename(self) -> str:
        return _categorical_models().filename(self.name)

    def train(self, path: Path) -> None:
        _categorical_models().train(self.name, path, rows=50_000)


def _categorical_models():
    sys.path.insert(0, str(Path(__file__).parent))
    import categorical_models

    return categorical_models


def categorical_set() -> list[CategoricalModel]:
    return [CategoricalModel(name) for name in _categorical_models().MODELS]


def ensure_models(directory: Path, models: list, say=print) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for m in models:
        path = directory / m.filename
        if not path.exists():
            start = time.perf_counter()
            tmp = directory / ("tmp-" + m.filename)
            m.train(tmp) if isinstance(m, CategoricalModel) else train(m, tmp)
            os.replace(tmp, path)
            say(f"trained {m.name} in {time.perf_counter() - start:.1f} s")
        paths[m.name] = path
    return paths


def geomean(values) -> float:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def suite_table(results: list[tuple[SuiteModel, object]], batch_sizes, threads) -> tuple[str, list[float]]:
    lines = ["| model | trees x depth | features | threads | batch | silvanforge rows/s "
             "| fastest peer | peer rows/s | ours / fastest |",
             "|---|---|---:|---:|---:|---:|---|---:|---:|"]
    ratios = []
    for m, report in results:
        for t in threads:
            for bs in batch_sizes:
                rows = report.at(bs, t)
                ours = next((r for r in rows if r.engine == "silvanforge"), None)
                peers = [r for r in rows if r.engine != "silvanforge"]
                if ours is None or not peers:
                    continue
                best = max(peers, key=lambda r: r.rows_per_second)
                ratio = ours.rows_per_second / best.rows_per_second
                ratios.append(ratio)
                lines.append(f"| {m.name} | {report.trees} x {report.max_depth} | {report.features} "
                             f"| {t} | {bs} | {ours.rows_per_second:,.0f} | {best.engine} "
                             f"| {best.rows_per_second:,.0f} | {ratio:.2f}x |")
    return "\n".join(lines) + "\n", ratios


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", default=os.path.expanduser("~/.cache/silvanforge/suite"))
    p.add_argument("--set", default="suite", choices=("suite", "categorical", "all"),
                   help="suite: the synthetic models above; categorical: LightGBM with categorical "
                        "features and deep leaf-wise trees, XGBoost enable_categorical "
                        "(benchmarks/categorical_models.py); all: both")
    p.add_argument("--models", default=None, help="comma-separated model names (default: all)")
    p.add_argument("--peers", default=None, help="comma-separated peers (default: every available)")
    p.add_argument("--batch-sizes", default="512,4096")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.1)
    p.add_argument("--schedule", default=None, help="a schedule for ours (default: the chooser's)")
    p.add_argument("--tile-size", type=int, default=None)
    p.add_argument("--markdown", default=None, help="write the suite table here")
    p.add_argument("--details", action="store_true", help="append every model's forge bench report")
    p.add_argument("--train-only", action="store_true")
    args = p.parse_args(argv)

    known = {"suite": MODELS, "categorical": categorical_set(), "all": MODELS + categorical_set()}[args.set]
    models = known
    if args.models:
        wanted = args.models.split(",")
        models = [m for m in known if m.name in wanted]
        unknown = set(wanted) - {m.name for m in models}
        if unknown:
            p.error(f"unknown models {sorted(unknown)}; choose from {[m.name for m in known]}")
    paths = ensure_models(Path(args.dir), models, say=lambda s: print(s, file=sys.stderr))
    if args.train_only:
        return 0

    from silvanforge_bench import bench

    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    results = []
    for m in models:
        start = time.perf_counter()
        kw = {} if args.tile_size is None else {"tile_size": args.tile_size}
        report = bench.run_bench(str(paths[m.name]), batch_sizes=batch_sizes, threads=threads,
                                 repeat=args.repeat, min_time=args.min_time,
                                 peers=args.peers.split(",") if args.peers else None,
                                 schedule=args.schedule, **kw)
        results.append((m, report))
        table, ratios = suite_table([(m, report)], batch_sizes, threads)
        print(table, f"({m.name}: {time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    table, ratios = suite_table(results, batch_sizes, threads)
    cmd = "python benchmarks/suite.py " + " ".join(argv if argv is not None else sys.argv[1:])
    m0 = bench.machine_details()
    versions = {}
    for _, r in results:
        versions.update(r.versions)
    text = (f"Command: `{cmd.strip()}`\n\n"
            f"- Machine: {m0['cpu']}; {m0['cores']}; {m0.get('simd', '')}; {m0['os']}; {m0['python']}\n"
            "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "\n"
            f"- Schedules (ours): " + "; ".join(f"{m.name}: rep {r.rep}, tile {r.tile_size}, "
                                                f"`{r.schedule}`" for m, r in results) + "\n\n"
            + table + f"\nGeometric mean of ours / fastest peer: **{geomean(ratios):.2f}x** "
            f"(min {min(ratios):.2f}x, max {max(ratios):.2f}x, {len(ratios)} cells)\n")
    if args.details:
        text += "\n" + "\n".join(bench.to_markdown(r, level=3) for _, r in results)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

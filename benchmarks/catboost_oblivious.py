"""CatBoost models of symmetric (oblivious) trees for the ``oblivious`` representation's
measurements (plugins/rep_oblivious/README.md, "Symmetric trees"): trains them with fixed seeds and writes
``.cbm`` files, then ``forge bench MODEL.cbm --batch-sizes 1,16,512,4096 --threads 1`` times
them against CatBoost's own predict and ONNX Runtime on CatBoost's ONNX export.

    python benchmarks/catboost_oblivious.py DIR            # cb_300x6.cbm, cb_1000x8.cbm, cb_multiclass_8.cbm
    python benchmarks/catboost_oblivious.py DIR --quick    # small ones, for a smoke run
    python benchmarks/catboost_oblivious.py DIR --compare 512,4096   # and each against CatBoost's predict

Files already present are kept, so a second run measures the same forests."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

# (name, trees, depth, loss): the two shapes the representation was calibrated on, and a
# multiclass model (8 classes: a leaf holds 8 values).
MODELS = (("cb_300x6", 300, 6, "Logloss"), ("cb_1000x8", 1000, 8, "RMSE"), ("cb_multiclass_8", 300, 6, "MultiClass"))
ROWS, FEATURES = 20000, 32


def data(rows: int = ROWS, features: int = FEATURES, seed: int = 2026):
    """A nonlinear target over normal features, 2% of values missing."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, features)).astype(np.float32)
    y = X[:, 0] + X[:, 1] * X[:, 2] - np.sin(X[:, 3]) + 0.5 * X[:, 4:8].sum(axis=1) + 0.3 * rng.normal(size=rows)
    X[rng.random(X.shape) < 0.02] = np.nan
    return X, y


def train(path: Path, trees: int, depth: int, loss: str, quick: bool = False) -> Path:
    import catboost

    X, y = data(2000 if quick else ROWS)
    if loss == "Logloss":
        y = (y > 0).astype(int)
    elif loss == "MultiClass":
        y = np.digitize(y, np.quantile(y, np.linspace(0, 1, 9)[1:-1]))
    model = catboost.CatBoost({"iterations": 20 if quick else trees, "depth": depth, "loss_function": loss,
                               "random_seed": 0, "verbose": False, "thread_count": 2,
                               "allow_writing_files": False})
    model.fit(X, y)
    model.save_model(str(path))
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--compare", default=None, metavar="ROWS",
                        help="also time each model against CatBoost's predict (probabilities for classifiers) "
                             "at these rows a call, e.g. 512,4096: in turns, 1 thread, the best of 40 rounds")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    for name, trees, depth, loss in MODELS:
        path = args.dir / f"{name}{'_quick' if args.quick else ''}.cbm"
        if not path.exists():
            train(path, trees, depth, loss, args.quick)
        print(path)
        if args.compare:
            compare(path, loss, [int(n) for n in args.compare.split(",")])


def compare(path: Path, loss: str, sizes: list[int], rounds: int = 40) -> None:
    """Ours against CatBoost's predict on the same rows, timed in turns (clock time; the best
    round of each is the least disturbed by other work on a shared machine)."""
    import time

    import catboost

    import silvanforge as sf

    model = catboost.CatBoost()
    model.load_model(str(path))
    cf = sf.compile(path).wait()  # (every form built: none compiling meanwhile)
    kind = "RawFormulaVal" if loss == "RMSE" else "Probability"
    X, _ = data(max(sizes), seed=7)
    for n in sizes:
        rows, k = X[:n], max(3, 2000 // n)
        ours = lib = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(k):
                cf.predict(rows, threads=1)
            ours = min(ours, (time.perf_counter() - start) / k)
            start = time.perf_counter()
            for _ in range(k):
                model.predict(rows, prediction_type=kind, thread_count=1)
            lib = min(lib, (time.perf_counter() - start) / k)
        print(f"  {n} rows: ours {ours * 1e6:,.0f} us, catboost {lib * 1e6:,.0f} us, {lib / ours:.2f}x", flush=True)


if __name__ == "__main__":
    main()

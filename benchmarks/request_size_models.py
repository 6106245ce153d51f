"""The models benchmarks/request_sizes.py times: real-data shapes, trained here with fixed seeds
(categorical_models.py and public_shapes.py supply the data where they already have it).

Each builder writes one model file and returns its path; ``quick`` trains a small model of the
same kind (same library, objective and feature kinds) for smoke tests.  Files already present
are reused, so a second run measures the same forests without training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    what: str  # one line for the table
    filename: str
    build: Callable[[Path, bool], None]  # (path, quick): write the model there
    # peers not run on this model by default, with why (--all-peers runs them)
    slow_peers: tuple[tuple[str, str], ...] = ()


# TL2cgen's gcc -O3 build of a 1000-tree deep model takes 15-20 minutes on two cores.
SLOW_TL2CGEN = (("tl2cgen", "its gcc -O3 build takes 15+ minutes on a model this size"),)


def _synthetic_binary(rows: int, features: int, seed: int = 2026):
    """make_models.py's data: 32 features, a nonlinear binary target."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, features)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * X[:, 2] - np.sin(X[:, 3]) + 0.3 * rng.normal(size=rows) > 0).astype(int)
    return X, y


def _xgb_binary(rounds: int):
    def build(path: Path, quick: bool) -> None:
        import xgboost as xgb

        X, y = _synthetic_binary(2_000 if quick else 20_000, 32)
        params = {"max_depth": 3 if quick else 8, "eta": 0.1, "objective": "binary:logistic",
                  "nthread": 2, "seed": 1}
        xgb.train(params, xgb.DMatrix(X, y), 5 if quick else rounds).save_model(path)
    return build


def _public_shape(task: str, features: int, classes: int, rows: int, rounds: int):
    def build(path: Path, quick: bool) -> None:
        import xgboost as xgb
        from public_shapes import dataset

        X, y = dataset(task, min(features, 300) if quick else features, min(classes, 3) if quick else classes,
                       1_000 if quick else rows, seed=features)
        objective = ({"objective": "multi:softprob", "num_class": min(classes, 3) if quick else classes}
                     if classes > 2 else {"objective": "binary:logistic"})
        xgb.train({**objective, "max_depth": 3 if quick else 8, "eta": 0.1, "tree_method": "hist",
                   "nthread": 2, "seed": 1}, xgb.DMatrix(X, y), 4 if quick else rounds).save_model(path)
    return build


def _categorical(name: str):
    """categorical_models.py's LightGBM models (quick: the same data, 5 trees of 7 leaves)."""
    def build(path: Path, quick: bool) -> None:
        import categorical_models as cm

        if not quick:
            cm.train(name, path, 50_000)
            return
        import lightgbm as lgb

        data = cm.MODELS[name][0]
        X, y, cats = cm.dataset(data, 2_000)
        objective = "binary" if cm.task_of(data) == "binary" else "regression"
        lgb.train({"objective": objective, "num_leaves": 7, "max_depth": -1, "min_data_in_leaf": 5,
                   "max_cat_to_onehot": 4, "min_data_per_group": 5, "cat_smooth": 1, "verbose": -1,
                   "num_threads": 2, "seed": 1},
                  lgb.Dataset(X, y, categorical_feature=cats or "auto"), 5).save_model(str(path))
    return build


def _xgb_vector_leaf(path: Path, quick: bool) -> None:
    """One tree per round whose leaves hold all 5 classes' values (multi_output_tree)."""
    import xgboost as xgb
    from public_shapes import dataset

    X, y = dataset("multiclass", 20, 5, 1_000 if quick else 20_000, seed=5)
    xgb.train({"objective": "multi:softprob", "num_class": 5, "multi_strategy": "multi_output_tree",
               "tree_method": "hist", "max_depth": 3 if quick else 8, "eta": 0.1, "nthread": 2, "seed": 1},
              xgb.DMatrix(X, y), 4 if quick else 100).save_model(path)


def _sklearn_forest(path: Path, quick: bool) -> None:
    """A full-depth 10-class random forest, through its ONNX export (no zipmap: probabilities)."""
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier
    from skl2onnx import to_onnx

    X, y = make_classification(1_000 if quick else 5_000, 20, n_informative=12, n_redundant=0,
                               n_classes=10, n_clusters_per_class=1, random_state=10)
    X = X.astype(np.float32)
    forest = RandomForestClassifier(5 if quick else 200, max_depth=4 if quick else None, n_jobs=2,
                                    random_state=1).fit(X, y)
    onx = to_onnx(forest, X[:1], options={id(forest): {"zipmap": False}}, target_opset={"": 17, "ai.onnx.ml": 3})
    path.write_bytes(onx.SerializeToString())


MODELS = [
    ModelSpec("xgb_100x8", "XGBoost, 100 trees of depth 8, 32 features, binary", "xgb_100x8.json",
              _xgb_binary(100)),
    ModelSpec("lgb_taxi_100x31", "LightGBM, 100 leaf-wise trees of 31 leaves (depth 16-39), 5 features, "
              "regression", "lgb_taxi_100x31.txt", _categorical("lgb_taxi_100x31")),
    ModelSpec("lgb_flight_1000x255", "LightGBM, 1000 trees of 255 leaves, 3 categorical features of "
              "20-400 levels, binary", "lgb_flight_1000x255.txt", _categorical("lgb_flight_1000x255"),
              SLOW_TL2CGEN),
    ModelSpec("xgb_1000x8", "XGBoost, 1000 trees of depth 8, 32 features, binary", "xgb_1000x8.json",
              _xgb_binary(1000), SLOW_TL2CGEN),
    ModelSpec("xgb_wide_2000", "XGBoost, 100 trees of depth 8, 2000 features (epsilon's width), binary",
              "xgb_wide_2000.json", _public_shape("binary", 2000, 2, 5_000, 100)),
    ModelSpec("xgb_multiclass_8", "XGBoost, 100 rounds x 8 classes of depth 8, 54 features (covtype's "
              "shape)", "xgb_multiclass_8.json", _public_shape("multiclass", 54, 8, 20_000, 100),
              SLOW_TL2CGEN),
    ModelSpec("xgb_vector_5", "XGBoost vector leaves (multi_output_tree), 100 trees of depth 8, 5 classes",
              "xgb_vector_5.json", _xgb_vector_leaf),
    ModelSpec("rf_10class", "scikit-learn random forest, 200 full-depth trees, 10 classes, 20 features "
              "(ONNX export)", "rf_10class.onnx", _sklearn_forest),
]
BY_NAME = {m.name: m for m in MODELS}


def model_path(spec: ModelSpec, out: Path, quick: bool, say=print) -> Path:
    """The model's file under ``out`` (quick ones apart), trained now when missing."""
    folder = out / ("models-quick" if quick else "models")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / spec.filename
    if not path.is_file():
        say(f"training {spec.name}{' (quick)' if quick else ''}")
        staged = path.with_name(path.stem + ".partial" + path.suffix)
        spec.build(staged, quick)
        staged.replace(path)  # a run stopped mid-training leaves no half model to reuse
    return path

"""XGBoost model factory for the differential tests (see :mod:`support_common`).

Every case trains a small booster on generated data, saves it (JSON or UBJSON, or an edited
JSON document emulating an older XGBoost version) and records XGBoost's own ``predict`` and
``predict(output_margin=True)`` on test rows that contain NaN.

    case_names(quick=False) -> list[str]       # the cases' names (quick: a representative subset)
    build_case(name, folder) -> Case           # one case by name, saved into folder
    importer_only_names() -> list[str]         # emulated old files XGBoost cannot load

Tests read them through one cache for the whole run (``model_cases["xgboost"]``, tests/conftest.py).
"""

from __future__ import annotations

import copy
import json
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xgboost as xgb
from support_common import Case, with_nans

_BUILDERS: dict[str, Callable[[Path], Case]] = {}
_QUICK: list[str] = []
# Cases only the importer tests use: files XGBoost itself cannot load (it crashes on them).
_IMPORTER_ONLY: list[str] = []

N_TRAIN = 240
N_TEST = 120


def case_names(quick: bool = False) -> list[str]:
    return list(_QUICK) if quick else [n for n in _BUILDERS if n not in _IMPORTER_ONLY]


def importer_only_names() -> list[str]:
    """Cases for the importer tests only (emulated old files the installed XGBoost cannot load)."""
    return list(_IMPORTER_ONLY)


def build_case(name: str, tmp_path) -> Case:
    tmp_path = Path(tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # XGBoost's UserWarnings about parameters
        return _BUILDERS[name](tmp_path)


def _register(name: str, fn: Callable[[Path], Case], quick: bool = False,
              importer_only: bool = False) -> None:
    assert name not in _BUILDERS, name
    _BUILDERS[name] = fn
    if quick:
        _QUICK.append(name)
    if importer_only:
        _IMPORTER_ONLY.append(name)


# ---------------------------------------------------------------------------------------------
# data and helpers
# ---------------------------------------------------------------------------------------------


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _features(rng, n: int, d: int) -> np.ndarray:
    X = rng.normal(size=(n, d))
    X[:, 0] *= 3
    if d > 2:
        X[:, 2] = np.round(X[:, 2] * 2)  # a feature with ties on thresholds
    return X.astype(np.float32)


def _signal(X: np.ndarray) -> np.ndarray:
    d = X.shape[1]
    y = X[:, 0] + (X[:, 1] ** 2 if d > 1 else 0) - (X[:, 2] if d > 2 else 0)
    return y.astype(np.float64)


def _train(params: dict, dtrain: xgb.DMatrix, rounds: int) -> xgb.Booster:
    params = {"max_depth": 4, "eta": 0.3, "nthread": 1, "seed": 7, **params}
    return xgb.train(params, dtrain, num_boost_round=rounds)


def _save(booster: xgb.Booster, tmp_path: Path, name: str, fmt: str) -> Path:
    path = tmp_path / f"{name}.{'json' if fmt == 'json' else 'ubj'}"
    booster.save_model(str(path))
    return path


def _predictions(booster: xgb.Booster, X: np.ndarray, inplace: bool = False):
    if inplace:  # inplace_predict also takes infinities, which a DMatrix refuses
        return booster.inplace_predict(X), booster.inplace_predict(X, predict_type="margin")
    dm = xgb.DMatrix(X, feature_names=booster.feature_names)
    return booster.predict(dm), booster.predict(dm, output_margin=True)


def _make(name: str, booster: xgb.Booster, path: Path, X: np.ndarray, rtol=1e-6, atol=1e-6,
          inplace: bool = False) -> Case:
    expected, margin = _predictions(booster, X, inplace)
    return Case(name=name, path=path, X=X, expected=expected, expected_margin=margin,
                rtol=rtol, atol=atol)


def _simple(name: str, params: dict, label: Callable, *, fmt: str = "json", d: int = 5,
            rounds: int = 10, quick: bool = False, dmatrix: Callable | None = None,
            rtol: float = 1e-6, atol: float = 1e-6) -> None:
    """Register a case: features ``d``, labels ``label(X, rng)``, XGBoost ``params``."""

    def builder(tmp_path: Path) -> Case:
        rng = _rng(name)
        X = _features(rng, N_TRAIN, d)
        y = label(X, rng)
        dtrain = dmatrix(X, y) if dmatrix else xgb.DMatrix(X, label=y)
        booster = _train(params, dtrain, rounds)
        Xt = with_nans(_features(rng, N_TEST, d), rng)
        return _make(name, booster, _save(booster, tmp_path, name, fmt), Xt, rtol, atol)

    _register(name, builder, quick)


def _binary(X, rng):
    return (_signal(X) + rng.normal(size=len(X)) * 0.3 > 1).astype(np.float64)


def _reg(X, rng):
    return _signal(X) + rng.normal(size=len(X)) * 0.1


def _positive(X, rng):
    return np.exp(_signal(X) / 4) + rng.random(len(X)) * 0.1


def _classes(k):
    def label(X, rng):
        s = _signal(X) + rng.normal(size=len(X)) * 0.3
        return np.digitize(s, np.quantile(s, np.linspace(0, 1, k + 1)[1:-1])).astype(np.float64)

    return label


def _ranking(X, y):
    n = len(X)
    group = [n // 4] * 3 + [n - 3 * (n // 4)]
    return xgb.DMatrix(X, label=y, group=group)


def _relevance(binary: bool):
    def label(X, rng):
        s = _signal(X) + rng.normal(size=len(X)) * 0.3
        return (s > 1).astype(np.float64) if binary else np.digitize(s, [0, 1, 2]).astype(np.float64)

    return label


# ---------------------------------------------------------------------------------------------
# the cases
# ---------------------------------------------------------------------------------------------

# Plain regression and classification, in both file formats.
_simple("reg_squarederror_json", {"objective": "reg:squarederror"}, _reg, quick=True)
_simple("reg_squarederror_ubj", {"objective": "reg:squarederror"}, _reg, fmt="ubj")
_simple("binary_logistic_json", {"objective": "binary:logistic"}, _binary)
_simple("binary_logistic_ubj", {"objective": "binary:logistic"}, _binary, fmt="ubj", quick=True)
_simple("multi_softprob_json", {"objective": "multi:softprob", "num_class": 4}, _classes(4),
        rounds=6, quick=True)
_simple("multi_softprob_ubj", {"objective": "multi:softprob", "num_class": 3}, _classes(3),
        fmt="ubj", rounds=6)
_simple("multi_softmax_json", {"objective": "multi:softmax", "num_class": 3}, _classes(3), rounds=6)
_simple("multi_softmax_ubj", {"objective": "multi:softmax", "num_class": 5}, _classes(5),
        fmt="ubj", rounds=5)

# Every other objective.
_simple("reg_squaredlogerror", {"objective": "reg:squaredlogerror"}, _positive)
_simple("reg_pseudohubererror", {"objective": "reg:pseudohubererror"}, _reg)
_simple("reg_absoluteerror", {"objective": "reg:absoluteerror"}, _reg)
_simple("reg_quantileerror", {"objective": "reg:quantileerror", "quantile_alpha": 0.3}, _reg)
_simple("reg_quantileerror_multi",
        {"objective": "reg:quantileerror", "quantile_alpha": np.array([0.1, 0.5, 0.9])}, _reg,
        fmt="ubj")
_simple("reg_logistic", {"objective": "reg:logistic"}, lambda X, rng: 1 / (1 + np.exp(-_signal(X))))
_simple("binary_logitraw", {"objective": "binary:logitraw"}, _binary)
_simple("binary_hinge", {"objective": "binary:hinge"}, _binary)
_simple("count_poisson", {"objective": "count:poisson"},
        lambda X, rng: rng.poisson(np.exp(_signal(X) / 4)).astype(np.float64))
_simple("reg_gamma", {"objective": "reg:gamma"}, _positive, fmt="ubj")
_simple("reg_tweedie", {"objective": "reg:tweedie", "tweedie_variance_power": 1.3}, _positive)
_simple("survival_cox", {"objective": "survival:cox"},
        lambda X, rng: np.where(rng.random(len(X)) < 0.8, 1, -1) * _positive(X, rng))
_simple("rank_pairwise", {"objective": "rank:pairwise"}, _relevance(False), dmatrix=_ranking)
_simple("rank_ndcg", {"objective": "rank:ndcg"}, _relevance(False), dmatrix=_ranking)
_simple("rank_map", {"objective": "rank:map"}, _relevance(True), dmatrix=_ranking)
_simple("binary_logistic_base_score", {"objective": "binary:logistic", "base_score": 0.3}, _binary)
_simple("count_poisson_base_score", {"objective": "count:poisson", "base_score": 2.5},
        lambda X, rng: rng.poisson(np.exp(_signal(X) / 4)).astype(np.float64), fmt="ubj")


def _aft_dmatrix(X, y):
    dm = xgb.DMatrix(X)
    lower = np.abs(y) + 0.5
    upper = np.where(np.arange(len(y)) % 4 == 0, np.inf, lower * 1.5)  # some right-censored
    dm.set_float_info("label_lower_bound", lower)
    dm.set_float_info("label_upper_bound", upper)
    return dm


_simple("survival_aft", {"objective": "survival:aft", "aft_loss_distribution": "logistic"}, _reg,
        dmatrix=_aft_dmatrix)

# Random forests, dart, multi-target.
_simple("rf_regression", {"num_parallel_tree": 4, "subsample": 0.7, "colsample_bynode": 0.7,
                          "eta": 1.0}, _reg, rounds=2)
_simple("rf_multiclass", {"num_parallel_tree": 3, "subsample": 0.7, "objective": "multi:softprob",
                          "num_class": 3}, _classes(3), rounds=3, fmt="ubj")
_simple("dart_regression", {"booster": "dart", "rate_drop": 0.3, "skip_drop": 0.0}, _reg,
        rounds=12, quick=True)
_simple("dart_binary", {"booster": "dart", "rate_drop": 0.4, "skip_drop": 0.0,
                        "objective": "binary:logistic"}, _binary, rounds=10, fmt="ubj")
_simple("dart_multiclass", {"booster": "dart", "rate_drop": 0.3, "skip_drop": 0.0,
                            "objective": "multi:softprob", "num_class": 3}, _classes(3), rounds=5)


def _targets(X, rng):
    return np.stack([_reg(X, rng), X[:, 1] * 2 - X[:, 3], np.sin(X[:, 0])], axis=1)


_simple("multi_target_per_tree", {"tree_method": "hist"}, _targets)
_simple("multi_target_vector_leaf", {"tree_method": "hist", "multi_strategy": "multi_output_tree"},
        _targets, fmt="ubj")
_simple("multi_softprob_vector_leaf", {"tree_method": "hist", "multi_strategy": "multi_output_tree",
                                       "objective": "multi:softprob", "num_class": 3},
        _classes(3), rounds=5)


def _multi_label(X, rng):
    return (_targets(X, rng) > 0).astype(np.float64)


# Vector intercepts in probability space: each target's base_score goes through logit / log.
_simple("multi_label_logistic", {"objective": "binary:logistic", "tree_method": "hist"}, _multi_label)
_simple("multi_target_poisson", {"objective": "count:poisson", "tree_method": "hist"},
        lambda X, rng: rng.poisson(np.exp(np.abs(_targets(X, rng)) / 3)).astype(np.float64), fmt="ubj")

# Degenerate shapes: stumps, trees that are a single leaf, one feature, deep trees.
_simple("stumps", {"max_depth": 1}, _reg, rounds=20)
_simple("single_leaf_trees", {"min_split_loss": 1e9, "objective": "binary:logistic"}, _binary, rounds=3)
_simple("one_feature", {"objective": "reg:squarederror"}, lambda X, rng: np.sin(X[:, 0]), d=1)
_simple("deep", {"max_depth": 10, "min_child_weight": 0, "eta": 0.5}, _reg, rounds=5, d=8)


def _random_shape(seed: int):
    name = f"random_shape_{seed}"

    def builder(tmp_path: Path) -> Case:
        rng = np.random.default_rng(1000 + seed)
        d = int(rng.integers(1, 13))
        depth = int(rng.integers(1, 8))
        rounds = int(rng.integers(5, 21))
        kind = ["reg", "binary", "multi"][seed % 3]
        X = _features(rng, N_TRAIN, d)
        params = {"max_depth": depth, "eta": float(rng.uniform(0.05, 1)),
                  "tree_method": str(rng.choice(["exact", "hist", "approx"]))}
        if kind == "reg":
            y = _reg(X, rng)
        elif kind == "binary":
            params["objective"] = "binary:logistic"
            y = _binary(X, rng)
        else:
            k = int(rng.integers(2, 6))
            params.update(objective="multi:softprob", num_class=k)
            y = _classes(k)(X, rng)
        booster = _train(params, xgb.DMatrix(X, label=y), rounds)
        Xt = with_nans(_features(rng, N_TEST, d), rng, frac=float(rng.uniform(0, 0.4)))
        fmt = "json" if seed % 2 else "ubj"
        return _make(name, booster, _save(booster, tmp_path, name, fmt), Xt)

    _register(name, builder)


for _seed in range(4):
    _random_shape(_seed)


# Categorical splits: partition splits with more than 64 categories, one-hot splits, and test
# inputs with unseen, negative, fractional and huge category values as well as NaN.

CAT_TYPES = ["q", "c", "q", "c", "c"]


def categorical_data(rng, n: int, test: bool = False) -> np.ndarray:
    X = np.empty((n, 5), dtype=np.float32)
    X[:, 0] = rng.normal(size=n)
    X[:, 1] = rng.integers(0, 100, n)  # 100 categories: sets beyond one 64-bit word
    X[:, 2] = rng.normal(size=n)
    X[:, 3] = rng.integers(0, 3, n)  # few categories: one-hot splits
    X[:, 4] = rng.integers(0, 70, n)
    if test:
        odd = rng.random((n, 5)) < 0.15
        weird = rng.choice(np.array([-1, -3.5, -0.5, 0.5, 2.7, 64, 65, 99.9, 100, 150, 1e9,
                                     2.0**24, 2.0**24 - 1, np.inf, -np.inf, np.nan],
                                    dtype=np.float32), size=(n, 5))
        odd[:, [0, 2]] = False
        X[odd] = weird[odd]
        X = with_nans(X, rng, 0.05)
    return X


def categorical_label(X: np.ndarray, rng) -> np.ndarray:
    c1 = X[:, 1].astype(int)
    return (X[:, 0] + np.isin(c1 % 7, [0, 3, 5]) * 2 - (X[:, 3] == 1) * 1.5 + (X[:, 4] % 2)
            + rng.normal(size=len(X)) * 0.1)


def _categorical(name: str, params: dict, fmt: str, quick: bool = False, binary: bool = False):
    def builder(tmp_path: Path) -> Case:
        rng = _rng(name)
        X = categorical_data(rng, 400)
        y = categorical_label(X, rng)
        if binary:
            y = (y > np.median(y)).astype(np.float64)
            params.setdefault("objective", "binary:logistic")
        dtrain = xgb.DMatrix(X, label=y, feature_types=CAT_TYPES, enable_categorical=True)
        booster = _train({"tree_method": "hist", "max_cat_to_onehot": 4, **params}, dtrain, 12)
        Xt = categorical_data(rng, 200, test=True)
        return _make(name, booster, _save(booster, tmp_path, name, fmt), Xt, inplace=True)

    _register(name, builder, quick)


_categorical("categorical_regression", {}, "json", quick=True)
_categorical("categorical_binary_ubj", {"max_depth": 6}, "ubj", binary=True)
_categorical("categorical_onehot", {"max_cat_to_onehot": 200}, "json")


# Older XGBoost versions, emulated by editing a 3.x document into the older layout.


def legacy_document(doc: dict, version: tuple[int, int, int]) -> dict:
    """``doc`` (an XGBoost 3.x JSON model with a scalar intercept) as an older version wrote it.

    1.x: base_score "5E-1" (no brackets), no num_target, no iteration_indptr, no categorical
    fields or split_type, default_left as booleans, size_leaf_vector "0".  2.x: base_score
    "5E-1" and no category encoder; everything else as 3.x.
    """
    d = copy.deepcopy(doc)
    d["version"] = list(version)
    learner = d["learner"]
    mparam = learner["learner_model_param"]
    values = mparam["base_score"].strip("[]").split(",")
    assert len(set(values)) == 1, "an older version cannot spell a vector intercept"
    mparam["base_score"] = values[0]
    booster = learner["gradient_booster"]
    model = booster["gbtree"]["model"] if booster["name"] == "dart" else booster["model"]
    model.pop("cats", None)
    if version[0] < 3:
        for tree in model["trees"]:
            if "leaf_weights" in tree:  # 2.x vector leaves: node weights, no leaf index
                tree.pop("leaf_weights")
                tree["right_children"] = [r if l >= 0 else -1
                                          for l, r in zip(tree["left_children"], tree["right_children"])]
    if version[0] < 2:
        mparam.pop("num_target", None)
        mparam.pop("boost_from_average", None)
        model.pop("iteration_indptr", None)
        if version[1] < 4:  # feature names and types entered the JSON in 1.4
            learner.pop("feature_names", None)
            learner.pop("feature_types", None)
        model["gbtree_model_param"]["size_leaf_vector"] = "0"
        for tree in model["trees"]:
            assert not any(tree["split_type"]), "1.x models have no categorical splits"
            for key in ("split_type", "categories", "categories_nodes", "categories_segments",
                        "categories_sizes"):
                tree.pop(key)
            tree["default_left"] = [bool(v) for v in tree["default_left"]]
            tree["tree_param"]["size_leaf_vector"] = "0"
            tree["tree_param"].pop("num_deleted", None)
    return d


def _legacy(name: str, params: dict, label: Callable, version: tuple[int, int, int],
            importer_only: bool = False):
    def builder(tmp_path: Path) -> Case:
        rng = _rng(name)
        X = _features(rng, N_TRAIN, 5)
        booster = _train(params, xgb.DMatrix(X, label=label(X, rng)), 8)
        booster.feature_names = [f"f_{i}" for i in range(5)]
        doc = json.loads(booster.save_raw("json"))
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(legacy_document(doc, version)))
        Xt = with_nans(_features(rng, N_TEST, 5), rng)
        return _make(name, booster, path, Xt)

    _register(name, builder, importer_only=importer_only)


_legacy("legacy_1_0_binary", {"objective": "binary:logistic", "base_score": 0.5}, _binary, (1, 0, 0))
_legacy("legacy_1_0_regression", {"objective": "reg:squarederror"}, _reg, (1, 0, 0))
_legacy("legacy_1_7_softprob", {"objective": "multi:softprob", "num_class": 3, "base_score": 0.5},
        _classes(3), (1, 7, 6))
_legacy("legacy_2_0_gamma", {"objective": "reg:gamma"}, _positive, (2, 0, 3))
_legacy("legacy_2_1_dart", {"booster": "dart", "rate_drop": 0.3, "skip_drop": 0.0,
                            "objective": "binary:logistic"}, _binary, (2, 1, 0))
# XGBoost 3.x crashes loading 2.x vector-leaf trees (no leaf_weights), so only we read this one.
_legacy("legacy_2_0_vector_leaf", {"tree_method": "hist", "multi_strategy": "multi_output_tree",
                                   "base_score": 0.5}, _targets, (2, 0, 0), importer_only=True)


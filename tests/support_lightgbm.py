"""LightGBM models for the differential tests: ``case_names(quick=False)`` and
``build_case(name, folder) -> Case``, read through the tests' one cache (``model_cases["lightgbm"]``).

Every model is trained here on generated data (or, for the edge cases no training run
produces on demand, written as a small text model that LightGBM itself loads), saved as a
text file, reloaded with ``lgb.Booster(model_file=...)``, and that booster's ``predict`` on
inputs with NaN, +-inf, zeros and tiny values is the expected answer.  LightGBM computes in
float64, so the tolerances are tight.
"""

from __future__ import annotations

import warnings
import zlib
from pathlib import Path

import numpy as np

from support_common import Case, with_nans

# LightGBM's kZeroThreshold (1e-35f widened to double): |x| <= KZ counts as zero.
KZ = float(np.float32(1e-35))

# Values every test input mixes in: zeros of both signs, tiny values either side of zero
# (both edges of the [-KZ, KZ] zero window), infinities, and a few magnitudes.
SPECIAL = np.array([0.0, -0.0, 1e-36, -1e-36, 5e-36, -5e-36, 1e-35, -1e-35, KZ, -KZ,
                    float(np.nextafter(KZ, 1)), float(np.nextafter(-KZ, -1)), 1e-30, -1e-30, 1e-300, -1e-300,
                    np.inf, -np.inf, 1e300, -1e300])

RTOL = 1e-12
ATOL = 1e-12
_BASE = dict(verbose=-1, num_threads=2, seed=7, deterministic=True, force_col_wise=True)


def _lgb():
    import lightgbm as lgb

    return lgb


def sprinkle(X: np.ndarray, rng: np.random.Generator, nan_frac=0.08, special_frac=0.08,
             zero_frac=0.05) -> np.ndarray:
    """Test inputs: X with NaN, exact zeros and the SPECIAL values mixed in."""
    X = with_nans(X, rng, nan_frac)
    X[rng.random(X.shape) < zero_frac] = 0.0
    mask = rng.random(X.shape) < special_frac
    X[mask] = rng.choice(SPECIAL, size=int(mask.sum()))
    return X


def is_average_output(path: Path) -> bool:
    """Whether the model averages its trees (``boosting=rf`` writes an ``average_output`` line)."""
    header = Path(path).read_text().split("\nTree=", 1)[0]
    return "average_output" in header.splitlines()


def _case(name: str, path: Path, X: np.ndarray, **kw) -> Case:
    lgb = _lgb()
    booster = lgb.Booster(model_file=str(path))
    margin = booster.predict(X, raw_score=True)
    return Case(
        name=name,
        path=path,
        X=X,
        expected=booster.predict(X),
        expected_margin=margin,
        rtol=kw.pop("rtol", RTOL),
        atol=kw.pop("atol", ATOL),
        **kw,
    )


def _train(tmp_path: Path, name: str, params: dict, X, y, rounds: int, X_test, *,
           categorical=None, group=None, **case_kw) -> Case:
    lgb = _lgb()
    ds = lgb.Dataset(X, y, group=group,
                     categorical_feature=categorical if categorical is not None else "auto",
                     params={"verbose": -1})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        booster = lgb.train({**_BASE, **params}, ds, num_boost_round=rounds)
    path = Path(tmp_path) / f"lgb_{name}.txt"
    booster.save_model(str(path))
    return _case(name, path, X_test, **case_kw)


# ---------------------------------------------------------------------------- data
def _regression_data(rng, n=300, d=5, nan_frac=0.0, zero_frac=0.0):
    X = rng.normal(size=(n, d))
    y = X[:, 0] - 0.5 * X[:, 1] ** 2 + np.sin(2 * X[:, min(2, d - 1)]) + 0.1 * rng.normal(size=n)
    if zero_frac:
        X[rng.random(X.shape) < zero_frac] = 0.0
    if nan_frac:
        X = with_nans(X, rng, nan_frac)
    return X, y


def _test_rows(rng, d, n=200, scale=1.0):
    return sprinkle(rng.normal(size=(n, d)) * scale, rng)


# ---------------------------------------------------------------------------- handcrafted
_HEADER = """tree
version=v4
num_class=1
num_tree_per_iteration=1
label_index=0
max_feature_idx={maxf}
objective={objective}
feature_names={names}
feature_infos={infos}

"""


def tree_block(idx: int, *, split_feature=(), threshold=(), decision_type=(), left_child=(),
               right_child=(), leaf_value=(0.0,), cat_boundaries=None, cat_threshold=None) -> str:
    """One ``Tree=idx`` block in LightGBM's text format (statistics fields filled with zeros)."""
    n_leaves = len(leaf_value)
    n_int = n_leaves - 1
    j = lambda xs: " ".join(repr(float(x)) if isinstance(x, float) else str(x) for x in xs)  # noqa: E731
    num_cat = 0 if cat_boundaries is None else len(cat_boundaries) - 1
    lines = [
        f"Tree={idx}",
        f"num_leaves={n_leaves}",
        f"num_cat={num_cat}",
        f"split_feature={j(split_feature)}",
        f"split_gain={j([1] * n_int)}",
        f"threshold={j(threshold)}",
        f"decision_type={j(decision_type)}",
        f"left_child={j(left_child)}",
        f"right_child={j(right_child)}",
        f"leaf_value={j(leaf_value)}",
        f"leaf_weight={j([1] * n_leaves)}",
        f"leaf_count={j([1] * n_leaves)}",
        f"internal_value={j([0] * n_int)}",
        f"internal_weight={j([0] * n_int)}",
        f"internal_count={j([1] * n_int)}",
    ]
    if num_cat:
        lines += [f"cat_boundaries={j(cat_boundaries)}", f"cat_threshold={j(cat_threshold)}"]
    lines += ["is_linear=0", "shrinkage=1", "", ""]
    return "\n".join(lines) + "\n"


def model_text(blocks: list[str], num_features: int, objective: str = "regression") -> str:
    """A whole LightGBM text model around ``blocks`` (no tree_sizes, so LightGBM parses serially)."""
    names = " ".join(f"f{i}" for i in range(num_features))
    infos = " ".join(["none"] * num_features)
    return (_HEADER.format(maxf=num_features - 1, objective=objective, names=names, infos=infos)
            + "".join(blocks) + "end of trees\n")


def _missing_types_case(tmp_path: Path) -> Case:
    """One stump per (decision_type, threshold): every missing type, default direction and a
    threshold on either side of zero, including LightGBM's own +-kZeroThreshold boundaries."""
    thresholds = [0.5, -0.5, 1e-3, -1e-3, KZ, -KZ, 0.0, 2.5e-36, -2.5e-36, 1e-20, -1e-20]
    blocks = []
    for dt in (0, 2, 4, 6, 8, 10):
        for thr in thresholds:
            i = len(blocks)
            # Leaf values are distinct powers of two so every path shows in the sum.
            blocks.append(tree_block(i, split_feature=[i % 3], threshold=[thr], decision_type=[dt],
                                     left_child=[-1], right_child=[-2],
                                     leaf_value=[2.0 ** -(2 * (i % 24)), -(2.0 ** -(2 * (i % 24) + 1))]))
    path = Path(tmp_path) / "lgb_missing_types.txt"
    path.write_text(model_text(blocks, 3))
    vals = np.array([np.nan, 0.0, -0.0, 1e-36, -1e-36, 5e-36, -5e-36, 1e-34, -1e-34, 1e-20,
                     -1e-20, 1e-3, -1e-3, 0.5, -0.5, 0.25, -0.7, np.inf, -np.inf])
    rng = np.random.default_rng(11)
    X = np.stack([np.repeat(vals, len(vals)), np.tile(vals, len(vals)),
                  rng.permutation(np.tile(vals, len(vals)))], axis=1)
    return _case("handcrafted_missing_types", path, X)


def _constant_trees_case(tmp_path: Path, rng) -> Case:
    """A trained model with constant (num_leaves=1) trees spliced between its real trees."""
    lgb = _lgb()
    X, y = _regression_data(rng, n=200, d=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        booster = lgb.train({**_BASE, "objective": "regression", "num_leaves": 5}, lgb.Dataset(X, y), 4)
    text = booster.model_to_string()
    head, rest = text.split("Tree=0", 1)
    head = "\n".join(ln for ln in head.splitlines() if not ln.startswith("tree_sizes=")) + "\n"
    trees_text, tail = ("Tree=0" + rest).split("end of trees", 1)
    blocks = ["Tree=" + b for b in trees_text.split("Tree=")[1:]]
    out = []
    for i, b in enumerate(blocks):
        out.append(b)
        out.append(tree_block(0, leaf_value=[0.125 * (i + 1)]))
    renumbered = []
    for i, b in enumerate(out):
        renumbered.append(f"Tree={i}\n" + b.split("\n", 1)[1])
    path = Path(tmp_path) / "lgb_constant_spliced.txt"
    path.write_text(head + "".join(renumbered) + "end of trees" + tail)
    return _case("constant_trees_spliced", path, _test_rows(rng, 3))


# ---------------------------------------------------------------------------- the cases
def _objective_recipe(objective: str, extra: dict):
    def build(tmp_path, name, rng):
        X, y = _regression_data(rng, nan_frac=0.05)
        label = {"mape": y + 6, "poisson": np.exp(y / 3), "gamma": np.exp(y / 3),
                 "tweedie": np.exp(y / 3), "cross_entropy": 1 / (1 + np.exp(-y)),
                 "cross_entropy_lambda": 1 / (1 + np.exp(-y))}.get(objective, y)
        group = None
        if objective in ("lambdarank", "rank_xendcg"):
            label, group = rng.integers(0, 4, size=len(y)), [30] * (len(y) // 30)
        return _train(tmp_path, name, {"objective": objective, "num_leaves": 7, **extra},
                      X, label, 8, _test_rows(rng, 5), group=group)
    return build


def _regression_nan(tmp_path, name, rng):
    # Trained with NaN: missing type NaN, both default directions.
    X, y = _regression_data(rng, nan_frac=0.1)
    return _train(tmp_path, name, {"objective": "regression", "num_leaves": 15}, X, y, 20,
                  _test_rows(rng, 5))


def _binary(tmp_path, name, rng, **extra):
    X, y = _regression_data(rng, nan_frac=0.05)
    return _train(tmp_path, name, {"objective": "binary", "num_leaves": 8, **extra},
                  X, (y > 0.2).astype(int), 15, _test_rows(rng, 5))


def _multiclass(tmp_path, name, rng, objective="multiclass", constant_class=False, **extra):
    X, y = _regression_data(rng, nan_frac=0.05)
    yc = np.digitize(y, [-1, 0, 1])
    k = 4
    if constant_class:
        # A class so rare (and min_sum_hessian_in_leaf so high) that its trees cannot split.
        yc[:4] = 4
        k = 5
        extra["min_sum_hessian_in_leaf"] = 4
    return _train(tmp_path, name, {"objective": objective, "num_class": k, "num_leaves": 6, **extra},
                  X, yc, 8, _test_rows(rng, 5))


def _rf(tmp_path, name, rng, objective):
    X, y = _regression_data(rng, nan_frac=0.05)
    label = (y > 0).astype(int) if objective == "binary" else y
    return _train(tmp_path, name, {"objective": objective, "boosting": "rf", "bagging_freq": 1,
                                   "bagging_fraction": 0.6, "feature_fraction": 0.8, "num_leaves": 10},
                  X, label, 9, _test_rows(rng, 5))


def _missing_params(tmp_path, name, rng, zero_frac, nan_frac, **params):
    X, y = _regression_data(rng, zero_frac=zero_frac, nan_frac=nan_frac)
    return _train(tmp_path, name, {"objective": "regression", "num_leaves": 10, **params},
                  X, y, 15, _test_rows(rng, 5, scale=0.5))


def _boosting(tmp_path, name, rng, **params):
    X, y = _regression_data(rng, nan_frac=0.05)
    label = (y > 0).astype(int) if params.get("objective") == "binary" else y
    return _train(tmp_path, name, {"objective": "regression", "num_leaves": 7, **params},
                  X, label, 12, _test_rows(rng, 5))


def _constant_label(tmp_path, name, rng):
    # Constant labels: a single tree with a single leaf (LightGBM stops after it).
    X, _ = _regression_data(rng, n=100, d=3)
    return _train(tmp_path, name, {"objective": "regression"}, X, np.full(100, 2.5), 5,
                  _test_rows(rng, 3))


def _random_shape(i):
    def build(tmp_path, name, rng):
        d = int(rng.integers(1, 12))
        n = int(rng.integers(60, 400))
        X = rng.normal(size=(n, d)) * rng.uniform(0.1, 100)
        y = X @ rng.normal(size=d) + rng.normal(size=n)
        if i % 2:
            X = with_nans(X, rng, 0.1)
        params = {"objective": "regression", "num_leaves": int(rng.integers(2, 32)),
                  "max_depth": int(rng.choice([-1, 3, 6])), "min_data_in_leaf": int(rng.integers(2, 20))}
        T = sprinkle(rng.normal(size=(150, d)) * np.abs(X[~np.isnan(X)]).mean(), rng)
        if i == 3:
            with np.errstate(over="ignore"):  # +-1e300 become +-inf
                T = T.astype(np.float32)  # LightGBM widens float32 inputs to float64
        return _train(tmp_path, name, params, X, y, int(rng.integers(5, 31)), T)
    return build


_QUICK = [
    ("regression_nan", _regression_nan),
    ("binary", _binary),
    ("multiclass_constant_class", lambda t, n, r: _multiclass(t, n, r, constant_class=True)),
    ("categorical", lambda t, n, r: _categorical_case(t, r, n, "regression")),
    ("rf_binary", lambda t, n, r: _rf(t, n, r, "binary")),
    ("zero_as_missing", lambda t, n, r: _missing_params(t, n, r, 0.25, 0.05, zero_as_missing=True)),
]
_MORE = [
    ("use_missing_false", lambda t, n, r: _missing_params(t, n, r, 0.2, 0.1, use_missing=False)),
    ("no_nan_in_training", lambda t, n, r: _missing_params(t, n, r, 0.2, 0.0)),
    ("handcrafted_missing_types", lambda t, n, r: _missing_types_case(t)),
    ("binary_sigmoid_0.7", lambda t, n, r: _binary(t, n, r, sigmoid=0.7)),
    ("multiclass", _multiclass),
    ("multiclassova", lambda t, n, r: _multiclass(t, n, r, "multiclassova", sigmoid=1.3)),
    ("categorical_multiclass", lambda t, n, r: _categorical_case(t, r, n, "multiclass")),
    ("rf_regression", lambda t, n, r: _rf(t, n, r, "regression")),
    ("dart", lambda t, n, r: _boosting(t, n, r, boosting="dart", drop_rate=0.3)),
    ("goss", lambda t, n, r: _boosting(t, n, r, objective="binary", data_sample_strategy="goss")),
    ("constant_label", _constant_label),
    ("constant_trees_spliced", lambda t, n, r: _constant_trees_case(t, r)),
    *[(f"objective_{o}" + ("_sqrt" if e.get("reg_sqrt") else ""), _objective_recipe(o, e)) for o, e in [
        ("regression_l1", {}), ("huber", {}), ("fair", {}), ("quantile", {"alpha": 0.7}),
        ("mape", {}), ("poisson", {}), ("gamma", {}), ("tweedie", {"tweedie_variance_power": 1.3}),
        ("cross_entropy", {}), ("cross_entropy_lambda", {}), ("lambdarank", {}),
        ("rank_xendcg", {}), ("regression", {"reg_sqrt": True}),
        ("regression_l1", {"reg_sqrt": True}), ("quantile", {"reg_sqrt": True}),
    ]],
    *[(f"random_shape_{i}", _random_shape(i)) for i in range(4)],
]


def case_names(quick: bool = False) -> list[str]:
    """Names of the cases (``quick``: a representative subset for other test files), without
    training anything."""
    return [name for name, _ in (_QUICK if quick else _QUICK + _MORE)]


def build_case(name: str, tmp_path) -> Case:
    """Build one case by name; each case seeds its own generator, so it does not depend on others."""
    recipes = dict(_QUICK + _MORE)
    if name not in recipes:
        raise KeyError(f"no LightGBM case {name!r}; known: {case_names()}")
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return recipes[name](Path(tmp_path), name, rng)


def _categorical_case(tmp_path: Path, rng, name: str, objective: str) -> Case:
    n = 600
    cat = rng.integers(0, 100, size=n).astype(np.float64)  # categories up to 99 (> 64)
    cat2 = rng.integers(0, 8, size=n).astype(np.float64)
    num = rng.normal(size=n)
    effect = rng.normal(size=100) * 2
    y = effect[cat.astype(int)] + (cat2 == 3) * 1.5 + num
    X = np.stack([cat, num, cat2], axis=1)
    params = {"objective": objective, "num_leaves": 12, "max_cat_to_onehot": 2,
              "min_data_per_group": 5, "cat_smooth": 1, "cat_l2": 1, "max_cat_threshold": 64}
    if objective == "multiclass":
        X[rng.random(n) < 0.05, 0] = np.nan
        y = np.digitize(y, np.quantile(y, [0.33, 0.66]))
        params["num_class"] = 3
    # Unseen categories (100..300), negatives, NaN, fractional values and specials.
    T = np.stack([
        rng.choice(np.r_[np.arange(0, 100), [100, 150, 299, 2.7, -0.5, -0.99, -1, -3, 64.5, 65.99,
                                             np.nan, 1e9, 2.0**31, 2.0**32 + 5, np.inf, -np.inf]],
                   size=300),
        rng.normal(size=300),
        rng.choice(np.r_[np.arange(0, 8), [8, 3.7, -0.2, np.nan, 40]], size=300),
    ], axis=1)
    return _train(tmp_path, name, params, X, y, 10, T, categorical=[0, 2])

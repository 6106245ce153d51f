"""Intel oneDAL's gradient-boosting inference, through daal4py's model builders
(``daal4py.mb.convert_model(booster)``, from ``pip install scikit-learn-intelex``).

Classifiers are timed through ``predict_proba`` (what our ``predict`` returns), regressors
through ``predict``; ``daal4py.daalinit(n)`` sets oneDAL's thread count.  XGBoost rows are
float32 (what XGBoost compares in), LightGBM rows float64.

oneDAL's trees have numeric splits only and its predictions apply no link but the sigmoid and
softmax of classifiers, so models it would predict wrongly are refused up front with the reason:
categorical splits, exp-link and other transformed objectives (``reg:gamma``, LightGBM
``poisson``, ``binary:logitraw``, a LightGBM ``sigmoid`` other than 1), vector leaves, random
forests, linear trees.  What remains is also checked by ``forge bench`` against ours
(``must_agree``): a difference beyond the tolerance skips the peer instead of timing wrong
numbers.

Two gaps of daal4py 2024.x's converter are bridged on a private copy of the booster, never in
the predictions: it parses XGBoost >= 3's ``base_score`` (``"[5E-1]"``) with ``float()``, so it is
handed the scalar; and it keeps one intercept for all classes, so XGBoost's per-class intercepts
are added to the leaves of each class's first tree (the same sums in another order).
"""

from __future__ import annotations

import importlib
import json
import sys
import types
import warnings

import numpy as np

from .base import Call, PeerContext, PeerUnavailable, versions

# XGBoost and LightGBM objectives whose prediction is the raw sum (oneDAL's regression).
_IDENTITY_XGB = ("reg:squarederror", "reg:linear", "reg:absoluteerror", "reg:pseudohubererror",
                 "reg:quantileerror", "reg:squaredlogerror")
_IDENTITY_LGB = ("regression", "regression_l2", "l2", "mse", "regression_l1", "l1", "mae", "huber",
                 "fair", "quantile", "mape")


def import_daal4py():
    """``daal4py`` and ``daal4py.mb``.

    daal4py 2024.x imports its scikit-learn patches on ``import daal4py``, and those fail with
    newer scikit-learn (``_check_multi_class`` is gone in 1.7+) although the model builders do
    not use them: then daal4py is imported again with an empty ``daal4py.sklearn`` in its place.
    """
    try:
        import daal4py
        from daal4py import mb
        return daal4py, mb
    except ImportError as exc:
        if "daal4py._daal4py" not in sys.modules:  # oneDAL itself did not load: nothing to bridge
            raise
        first = exc
    for name in [m for m in sys.modules if m == "daal4py" or m.startswith("daal4py.")]:
        if not name.startswith("daal4py._"):  # the native modules loaded fine: keep them
            del sys.modules[name]
    sys.modules["daal4py.sklearn"] = types.ModuleType("daal4py.sklearn")
    try:
        daal4py = importlib.import_module("daal4py")
        mb = importlib.import_module("daal4py.mb")
    except ImportError:
        raise first from None
    finally:
        sys.modules.pop("daal4py.sklearn", None)  # a real import later fails as it would have
    return daal4py, mb


def _refuse(why: str) -> PeerUnavailable:
    return PeerUnavailable(f"onedal: skipped for this model ({why})")


# --------------------------------------------------------------------------- XGBoost
def _xgboost_booster(path: str):
    """A private booster daal4py's converter reads correctly, or a refusal saying why not."""
    from .native import load_xgboost_booster

    booster = load_xgboost_booster(path)
    model = json.loads(booster.save_raw("json"))
    learner = model["learner"]
    objective = learner["objective"]["name"]
    params = learner["learner_model_param"]
    trees_model = learner["gradient_booster"].get("model", learner["gradient_booster"])
    if learner["gradient_booster"].get("name", "gbtree") not in ("gbtree", "dart"):
        raise _refuse(f"XGBoost booster {learner['gradient_booster'].get('name')}")
    trees = trees_model.get("trees", [])
    if any(int(t["tree_param"].get("size_leaf_vector", "1") or 1) > 1 for t in trees):
        raise _refuse("vector leaves (multi_strategy=multi_output_tree)")
    if any(any(int(s) for s in t.get("split_type", [])) for t in trees):
        raise _refuse("categorical splits, which oneDAL's trees do not have")
    if int(trees_model.get("gbtree_model_param", {}).get("num_parallel_tree", "1")) > 1:
        raise _refuse("XGBoost random forest (num_parallel_tree > 1)")
    classes = int(params.get("num_class", "0"))
    if not (objective in ("binary:logistic", "multi:softprob", "multi:softmax") or objective in _IDENTITY_XGB):
        raise _refuse(f"XGBoost objective {objective}: oneDAL applies no such transform")
    if objective == "multi:softmax":
        raise _refuse("multi:softmax predicts labels; oneDAL's probabilities are not that")
    base = [float(v) for v in str(params.get("base_score", "0.5")).strip("[]").replace(",", " ").split()]
    if len(base) > 1 and classes <= 1:
        raise _refuse(f"{len(base)} regression targets")

    saved = booster.save_config
    scalar = base[0] if classes <= 1 else 0.5  # a class-independent intercept cancels in softmax

    def scalar_base_score() -> str:  # daal4py float()s this field
        config = json.loads(saved())
        config["learner"]["learner_model_param"]["base_score"] = repr(scalar)
        return json.dumps(config)

    booster.save_config = scalar_base_score
    if classes > 1:
        intercepts = base * classes if len(base) == 1 else base
        _fold_intercepts(booster, trees_model.get("tree_info", []), intercepts)
    return booster


def _fold_intercepts(booster, tree_info: list, intercepts: list[float]) -> None:
    """Add class c's intercept to the leaves of its first tree in what daal4py reads (``get_dump``)."""
    first = {}
    for index, cls in enumerate(tree_info):
        first.setdefault(int(cls), index)
    dump = booster.get_dump

    def shift(node: dict, by: float) -> None:
        if "leaf" in node:
            node["leaf"] = float(node["leaf"]) + by
        for child in node.get("children", []):
            shift(child, by)

    def folded(*args, **kwargs):
        trees = dump(*args, **kwargs)
        if kwargs.get("dump_format", args[1] if len(args) > 1 else "text") != "json":
            raise RuntimeError("daal4py read the trees in a form the intercepts cannot be added to")
        trees = list(trees)
        for cls, index in first.items():
            tree = json.loads(trees[index])
            shift(tree, intercepts[cls])
            trees[index] = json.dumps(tree)
        return trees

    booster.get_dump = folded


# --------------------------------------------------------------------------- LightGBM
def _lightgbm_booster(path: str):
    import lightgbm as lgb

    objective, categorical = "", False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("objective="):
                objective = line.split("=", 1)[1].strip()
            elif line.startswith("average_output"):
                raise _refuse("LightGBM random forest (average_output)")
            elif line.startswith("is_linear=1"):
                raise _refuse("LightGBM linear trees")
            elif line.startswith("num_cat=") and line.strip() != "num_cat=0":
                categorical = True
    if categorical:
        raise _refuse("categorical splits, which oneDAL's trees do not have")
    words = objective.split()
    name = words[0] if words else "regression"
    sigmoid = [w.split(":", 1)[1] for w in words if w.startswith("sigmoid:")]
    if name == "binary" and sigmoid and float(sigmoid[0]) != 1.0:
        raise _refuse(f"LightGBM {objective}: oneDAL's sigmoid has no parameter")
    if name not in ("binary", "multiclass", "softmax") and name not in _IDENTITY_LGB:
        raise _refuse(f"LightGBM objective {name}: oneDAL applies no such transform")
    return lgb.Booster(model_file=path)


# --------------------------------------------------------------------------- the engine
def onedal_engine(ctx: PeerContext) -> Call:
    if ctx.fmt.startswith("xgboost"):
        booster, dtype = _xgboost_booster(ctx.path), np.float32
    elif ctx.fmt.startswith("lightgbm"):
        booster, dtype = _lightgbm_booster(ctx.path), np.float64
    else:
        raise NotImplementedError(f"onedal: daal4py converts XGBoost and LightGBM models, not {ctx.fmt}")
    daal4py, mb = import_daal4py()
    with warnings.catch_warnings():
        # numpy's "overflow encountered in cast" on LightGBM's +-1e300 thresholds: the check
        # against ours (must_agree) is what says whether the conversion is right.
        warnings.simplefilter("ignore", RuntimeWarning)
        model = mb.convert_model(booster)
    predict = model.predict if model._is_regression else model.predict_proba
    engine = Call("onedal", lambda X, n: predict(X), prepare=lambda X: np.ascontiguousarray(X, dtype=dtype),
                  on_threads=daal4py.daalinit, versions=versions("scikit-learn-intelex", "daal4py"))
    engine.must_agree = True  # a converter gap shows as a difference: skip rather than time it
    return engine

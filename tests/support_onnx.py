"""ONNX tree ensembles for the differential tests: ``case_names(quick=False)`` and
``build_case(name, folder) -> Case``, read through the tests' one cache (``model_cases["onnx"]``).

Models come from two places:

* converters: scikit-learn trees and forests through skl2onnx, XGBoost and LightGBM through
  onnxmltools, each trained here on generated data;
* ``onnx.helper``, for what no converter emits: every branch mode, missing_value_tracks_true
  both ways, SUM/AVERAGE/MIN/MAX, every post_transform, base values, several targets, leaves
  with several weights or none, double ``*_as_tensor`` attributes, TreeEnsemble (opset 5)
  with BRANCH_MEMBER, onnxruntime's binary-classifier special cases, casts around the node.

The expected answer is what onnxruntime (single-threaded, so trees are summed in order) returns
for the ensemble's scores: the regressor's ``Y``, the classifier's probability tensor ``Z``
(read back through a ZipMap where the graph has one), TreeEnsemble's ``Y``.

Over 600 lines because it is one registry (:func:`case_names`, :func:`build_case`): the converter
builders and the ``onnx.helper`` builders share its data makers, its ``Case`` and onnxruntime's
expected answer, and the tests ask it for cases by name.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from pathlib import Path

import numpy as np
from support_common import Case, with_nans

RTOL = 1e-5
ATOL = 1e-6
# onnxruntime's probit evaluates a closed-form ErfInv whose float32 log differs from ours by a
# few ulps; near p = 0.5 the formula cancels and the difference grows to ~1e-4 absolute.
PROBIT_ATOL = 3e-4

ENSEMBLE_OPS = ("TreeEnsembleRegressor", "TreeEnsembleClassifier", "TreeEnsemble")

# Values hand-built thresholds are drawn from; inputs mix them in so EQ / NEQ and <= vs < matter.
GRID = np.array([-2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.5, 3.0], dtype=np.float32)
F32_TENTH = float(np.float32(0.1))


# ----------------------------------------------------------------------------- onnxruntime
def ort_session(path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _score_output(model):
    """The graph output fed by the ensemble's scores, and the class labels (for ZipMap)."""
    ens = [n for n in model.graph.node if n.op_type in ENSEMBLE_OPS]
    node = ens[0]
    scores = node.output[1] if node.op_type == "TreeEnsembleClassifier" else node.output[0]
    labels = None
    for a in node.attribute:
        if a.name == "classlabels_int64s" and len(a.ints):
            labels = list(a.ints)
        elif a.name == "classlabels_strings" and len(a.strings):
            labels = [s.decode() for s in a.strings]
    outputs = [o.name for o in model.graph.output]
    frontier, seen = [scores], set()
    while frontier:
        name = frontier.pop(0)
        if name in outputs:
            return name, labels
        seen.add(name)
        for n in model.graph.node:
            if name in n.input:
                frontier += [o for o in n.output if o not in seen]
    raise AssertionError("the scores reach no graph output")


def ort_predict(path, X):
    import onnx

    model = onnx.load(str(path))
    name, labels = _score_output(model)
    sess = ort_session(path)
    inp = sess.get_inputs()[0]
    dtype = {"tensor(float)": np.float32, "tensor(double)": np.float64,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32}[inp.type]
    out = sess.run([name], {inp.name: np.asarray(X).astype(dtype)})[0]
    if isinstance(out, list):  # ZipMap: one {label: probability} per row
        out = np.array([[row[lab] for lab in labels] for row in out], dtype=np.float32)
    return np.asarray(out)


def make_case(name, path, X, model=None, **kw) -> Case:
    import onnx

    if model is not None:
        onnx.save(model, str(path))
    return Case(name=name, path=Path(path), X=X, expected=ort_predict(path, X),
                rtol=kw.pop("rtol", RTOL), atol=kw.pop("atol", ATOL), **kw)


def test_inputs(X_train, rng, n=160, dtype=np.float32):
    """Rows like the training data with NaN, infinities and the training values themselves."""
    X = X_train[rng.integers(0, len(X_train), n)].astype(np.float64)
    X += rng.normal(0, 0.3, X.shape) * (rng.random(X.shape) < 0.5)
    X = with_nans(X, rng, 0.08)
    special = rng.random(X.shape)
    X[special < 0.03] = np.inf
    X[(special >= 0.03) & (special < 0.06)] = -np.inf
    return X.astype(dtype)


# ----------------------------------------------------------------------------- converters
@contextlib.contextmanager
def _skl2onnx_numpy_fix():
    """skl2onnx 1.20 hands numpy scalars / bools in int lists to onnx.helper for
    HistGradientBoosting, which onnx rejects; convert them for the duration of a conversion."""
    import skl2onnx.common._container as container

    orig = container.make_node

    def clean(v):
        if isinstance(v, list):
            return [int(x) if isinstance(x, (bool, np.bool_)) else
                    x.item() if isinstance(x, np.generic) else x for x in v]
        return v

    def make_node(op_type, inputs, outputs, name=None, **kw):
        return orig(op_type, inputs, outputs, name=name, **{k: clean(v) for k, v in kw.items()})

    container.make_node = make_node
    try:
        yield
    finally:
        container.make_node = orig


def _data(kind, rng, n=300, f=6, nan_frac=0.0):
    from sklearn.datasets import make_classification, make_regression

    seed = int(rng.integers(1 << 30))
    if kind == "reg":
        X, y = make_regression(n, f, n_informative=4, noise=5.0, random_state=seed)
    elif kind == "reg2":
        X, y = make_regression(n, f, n_informative=4, n_targets=2, random_state=seed)
    else:
        k = {"bin": 2, "multi": 3}[kind]
        X, y = make_classification(n, f, n_informative=4, n_redundant=0, n_classes=k,
                                   n_clusters_per_class=1, random_state=seed)
    X = X.astype(np.float32)
    if nan_frac:
        X = with_nans(X, rng, nan_frac)
    return X, y


def _skl(name, est, kind, tmp, rng, *, options=None, dtype=np.float32, nan_frac=0.0,
         labels=None):
    from skl2onnx import to_onnx

    X, y = _data(kind, rng, nan_frac=nan_frac)
    if labels is not None:
        y = np.asarray(labels)[y]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
        with _skl2onnx_numpy_fix():
            model = to_onnx(est, X[:1].astype(dtype), options=options)
    return make_case(name, tmp / f"{name}.onnx", test_inputs(X, rng, dtype=dtype), model)


def _xgb(name, kind, tmp, rng, **params):
    import onnxmltools
    import xgboost as xgb
    from onnxmltools.convert.common.data_types import FloatTensorType

    X, y = _data(kind, rng, nan_frac=0.05)
    cls = xgb.XGBRegressor if kind.startswith("reg") else xgb.XGBClassifier
    est = cls(n_estimators=8, max_depth=3, learning_rate=0.3, n_jobs=1, random_state=0, **params)
    est.fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = onnxmltools.convert_xgboost(
            est, initial_types=[("X", FloatTensorType([None, X.shape[1]]))], target_opset=15)
    return make_case(name, tmp / f"{name}.onnx", test_inputs(X, rng), model)


def _lgb(name, kind, tmp, rng, **params):
    import lightgbm as lgb
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    X, y = _data(kind, rng, nan_frac=0.05)
    cls = lgb.LGBMRegressor if kind.startswith("reg") else lgb.LGBMClassifier
    est = cls(n_estimators=8, num_leaves=7, learning_rate=0.3, verbose=-1, n_jobs=1,
              random_state=0, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
        model = onnxmltools.convert_lightgbm(
            est, initial_types=[("X", FloatTensorType([None, X.shape[1]]))], zipmap=False,
            target_opset=15)
    return make_case(name, tmp / f"{name}.onnx", test_inputs(X, rng), model)


def _converter_builders():
    from sklearn import ensemble, tree

    b = {}
    b["skl_dt_reg"] = lambda t, r: _skl("skl_dt_reg", tree.DecisionTreeRegressor(max_depth=5), "reg", t, r)
    b["skl_dt_bin_zipmap"] = lambda t, r: _skl(
        "skl_dt_bin_zipmap", tree.DecisionTreeClassifier(max_depth=4), "bin", t, r)
    b["skl_dt_multi_strlabels"] = lambda t, r: _skl(
        "skl_dt_multi_strlabels", tree.DecisionTreeClassifier(max_depth=4), "multi", t, r,
        options={"zipmap": False}, labels=["ash", "birch", "cedar"])
    b["skl_rf_reg"] = lambda t, r: _skl(
        "skl_rf_reg", ensemble.RandomForestRegressor(6, max_depth=4, random_state=0), "reg", t, r)
    b["skl_rf_reg_2targets"] = lambda t, r: _skl(
        "skl_rf_reg_2targets", ensemble.RandomForestRegressor(4, max_depth=3, random_state=0),
        "reg2", t, r)
    b["skl_rf_bin"] = lambda t, r: _skl(
        "skl_rf_bin", ensemble.RandomForestClassifier(6, max_depth=4, random_state=0), "bin", t, r,
        options={"zipmap": False})
    b["skl_rf_multi"] = lambda t, r: _skl(
        "skl_rf_multi", ensemble.RandomForestClassifier(6, max_depth=4, random_state=0), "multi",
        t, r)
    b["skl_et_reg"] = lambda t, r: _skl(
        "skl_et_reg", ensemble.ExtraTreesRegressor(5, max_depth=4, random_state=0), "reg", t, r)
    b["skl_et_multi"] = lambda t, r: _skl(
        "skl_et_multi", ensemble.ExtraTreesClassifier(5, max_depth=4, random_state=0), "multi",
        t, r, options={"zipmap": False})
    b["skl_gb_reg"] = lambda t, r: _skl(
        "skl_gb_reg", ensemble.GradientBoostingRegressor(n_estimators=10, max_depth=3), "reg", t, r)
    b["skl_gb_bin"] = lambda t, r: _skl(
        "skl_gb_bin", ensemble.GradientBoostingClassifier(n_estimators=10, max_depth=3), "bin",
        t, r, options={"zipmap": False})
    b["skl_gb_multi"] = lambda t, r: _skl(
        "skl_gb_multi", ensemble.GradientBoostingClassifier(n_estimators=6, max_depth=2), "multi",
        t, r, options={"zipmap": False})
    b["skl_hgb_reg_nan"] = lambda t, r: _skl(
        "skl_hgb_reg_nan", ensemble.HistGradientBoostingRegressor(max_iter=8, max_depth=4),
        "reg", t, r, nan_frac=0.1)
    b["skl_hgb_bin_nan"] = lambda t, r: _skl(
        "skl_hgb_bin_nan", ensemble.HistGradientBoostingClassifier(max_iter=8, max_depth=4),
        "bin", t, r, nan_frac=0.1, options={"zipmap": False})
    b["xgb_reg"] = lambda t, r: _xgb("xgb_reg", "reg", t, r)
    b["xgb_bin"] = lambda t, r: _xgb("xgb_bin", "bin", t, r)
    b["xgb_multi"] = lambda t, r: _xgb("xgb_multi", "multi", t, r)
    b["lgb_reg"] = lambda t, r: _lgb("lgb_reg", "reg", t, r)
    b["lgb_bin"] = lambda t, r: _lgb("lgb_bin", "bin", t, r)
    b["lgb_multi"] = lambda t, r: _lgb("lgb_multi", "multi", t, r)
    return b


# ----------------------------------------------------------------------------- onnx.helper
V3_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
_TP = {np.float32: 1, np.float64: 11, np.int64: 7, np.int32: 6}


def random_tree(rng, n_features, depth, modes, thresholds):
    """A random binary tree as nested tuples: ("leaf",) or (mode, feature, threshold, mvt, T, F)."""
    if depth == 0 or (depth < 3 and rng.random() < 0.25):
        return ("leaf",)
    return (str(rng.choice(modes)), int(rng.integers(n_features)), float(rng.choice(thresholds)),
            int(rng.random() < 0.5),
            random_tree(rng, n_features, depth - 1, modes, thresholds),
            random_tree(rng, n_features, depth - 1, modes, thresholds))


def flatten_v3(trees, leaf_weights):
    """Nested trees -> V3 node tuples (tree, node, mode, feature, value, true, false, mvt) in
    preorder, and weight tuples (tree, node, id, weight) from ``leaf_weights(tree, node)``."""
    nodes, weights = [], []

    def visit(t, n, counter):
        me = counter[0]
        counter[0] += 1
        slot = len(nodes)
        nodes.append(None)
        if n[0] == "leaf":
            nodes[slot] = (t, me, "LEAF", 0, 0.0, 0, 0, 0)
            weights.extend((t, me, k, w) for k, w in leaf_weights(t, me))
            return me
        tt = visit(t, n[4], counter)
        ff = visit(t, n[5], counter)
        nodes[slot] = (t, me, n[0], n[1], n[2], tt, ff, n[3])
        return me

    for t, root in enumerate(trees):
        visit(t, root, [0])
    return nodes, weights


def v3_model(op, nodes, weights, n_features, *, n_out=1, labels=None, in_dtype=np.float32,
             as_tensor=False, input_cast=None, ir_version=9, opset=3, extra_nodes=(),
             scores_name=None, **attrs):
    from onnx import TensorProto as TP
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    a = {"nodes_treeids": [n[0] for n in nodes], "nodes_nodeids": [n[1] for n in nodes],
             "nodes_modes": [n[2] for n in nodes], "nodes_featureids": [n[3] for n in nodes],
             "nodes_truenodeids": [n[5] for n in nodes], "nodes_falsenodeids": [n[6] for n in nodes],
             "nodes_missing_value_tracks_true": [n[7] for n in nodes]}
    prefix = "class" if op == "TreeEnsembleClassifier" else "target"
    a[f"{prefix}_treeids"] = [w[0] for w in weights]
    a[f"{prefix}_nodeids"] = [w[1] for w in weights]
    a[f"{prefix}_ids"] = [w[2] for w in weights]
    base = attrs.pop("base_values", None)
    if as_tensor:
        a["nodes_values_as_tensor"] = nh.from_array(np.array([n[4] for n in nodes], np.float64))
        a[f"{prefix}_weights_as_tensor"] = nh.from_array(np.array([w[3] for w in weights], np.float64))
        if base is not None:
            a["base_values_as_tensor"] = nh.from_array(np.array(base, np.float64))
    else:
        a["nodes_values"] = [float(n[4]) for n in nodes]
        a[f"{prefix}_weights"] = [float(w[3]) for w in weights]
        if base is not None:
            a["base_values"] = [float(v) for v in base]
    a.update(attrs)
    src = "X"
    pre = []
    if input_cast is not None:
        pre.append(oh.make_node("Cast", ["X"], ["Xc"], to=_TP[input_cast]))
        src = "Xc"
    if op == "TreeEnsembleClassifier":
        if isinstance(labels[0], str):
            a["classlabels_strings"] = list(labels)
            ltype = TP.STRING
        else:
            a["classlabels_int64s"] = [int(v) for v in labels]
            ltype = TP.INT64
        scores = scores_name or "probabilities"
        node = oh.make_node(op, [src], ["label", scores], domain="ai.onnx.ml", **a)
        outs = [oh.make_tensor_value_info("label", ltype, [None])]
        n_cols = len(labels)
    else:
        scores = scores_name or "variable"
        node = oh.make_node(op, [src], [scores], domain="ai.onnx.ml", n_targets=n_out, **a)
        outs = []
        n_cols = n_out
    final = scores
    post = []
    for (kind,) in extra_nodes:
        if kind == "mul_one":
            post += [oh.make_node("Constant", [], ["one"],
                                  value=oh.make_tensor("one", TP.FLOAT, [1], [1.0])),
                     oh.make_node("Mul", [final, "one"], [final + "_x1"])]
            final += "_x1"
        elif kind == "identity":
            post.append(oh.make_node("Identity", [final], [final + "_id"]))
            final += "_id"
    outs.append(oh.make_tensor_value_info(final, TP.FLOAT, [None, n_cols]))
    graph = oh.make_graph(pre + [node] + post, "trees",
                          [oh.make_tensor_value_info("X", _TP[in_dtype], [None, n_features])], outs)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17),
                                                oh.make_opsetid("ai.onnx.ml", opset)],
                          ir_version=ir_version)
    return model


def grid_inputs(rng, n, n_features, values=GRID, dtype=np.float32, nan=0.1, inf=0.05):
    """Rows drawn from the thresholds, their float32 neighbours, NaN, +-inf and noise."""
    vals = np.asarray(values, dtype=np.float64)
    X = rng.choice(vals, size=(n, n_features))
    r = rng.random(X.shape)
    X = np.where(r < 0.15, rng.normal(0, 1.5, X.shape), X)
    nudge = (r >= 0.15) & (r < 0.25)
    X = np.where(nudge, np.nextafter(X.astype(np.float32), np.float32(np.inf)).astype(np.float64), X)
    X[rng.random(X.shape) < nan] = np.nan
    s = rng.random(X.shape)
    X[s < inf / 2] = np.inf
    X[(s >= inf / 2) & (s < inf)] = -np.inf
    return X.astype(dtype)


def _rand_weights(rng, n_out, *, partial=False, dup=False, weightless=False, scale=1.0):
    def fn(t, node):
        if weightless and rng.random() < 0.1:
            return []
        ks = [k for k in range(n_out) if not partial or rng.random() < 0.6] or [int(rng.integers(n_out))]
        out = [(k, float(np.float32(rng.normal(0, scale)))) for k in ks]
        if dup and rng.random() < 0.3:
            out.append((ks[0], float(np.float32(rng.normal(0, scale)))))
        rng.shuffle(out)
        return out
    return fn


def _v3_reg(name, tmp, rng, *, n_out=1, n_trees=4, depth=4, modes=V3_MODES, agg="SUM",
            post="NONE", base=None, partial=False, dup=False, weightless=False, n_features=4,
            in_dtype=np.float32, as_tensor=False, thresholds=GRID, input_cast=None, xvalues=GRID,
            atol=ATOL, extra_nodes=()):
    trees = [random_tree(rng, n_features, depth, modes, thresholds) for _ in range(n_trees)]
    nodes, weights = flatten_v3(trees, _rand_weights(rng, n_out, partial=partial, dup=dup,
                                                      weightless=weightless))
    attrs = {"aggregate_function": agg, "post_transform": post}
    if base is not None:
        attrs["base_values"] = base
    model = v3_model("TreeEnsembleRegressor", nodes, weights, n_features, n_out=n_out,
                     in_dtype=in_dtype, as_tensor=as_tensor, input_cast=input_cast,
                     extra_nodes=extra_nodes, **attrs)
    X = grid_inputs(rng, 200, n_features, xvalues, dtype=in_dtype)
    return make_case(name, tmp / f"{name}.onnx", X, model,
                     atol=PROBIT_ATOL if post == "PROBIT" else atol)


def _v3_clf(name, tmp, rng, *, labels=(0, 1), class_sets=None, positive=False, base=None,
            post="NONE", n_trees=3, depth=3, n_features=3, in_dtype=np.float32, zipmap=False,
            extra_nodes=()):
    """``class_sets``: the class ids a leaf may carry (one set drawn per leaf)."""
    k = len(labels)
    class_sets = class_sets or [tuple(range(k))]
    trees = [random_tree(rng, n_features, depth, V3_MODES, GRID) for _ in range(n_trees)]

    def weights(t, node):
        ks = class_sets[int(rng.integers(len(class_sets)))]
        return [(c, float(np.float32(abs(rng.normal()) if positive else rng.normal()))) for c in ks]

    nodes, ws = flatten_v3(trees, weights)
    attrs = {"post_transform": post}
    if base is not None:
        attrs["base_values"] = base
    model = v3_model("TreeEnsembleClassifier", nodes, ws, n_features, labels=list(labels),
                     in_dtype=in_dtype, extra_nodes=extra_nodes, **attrs)
    if zipmap:
        from onnx import helper as oh

        g = model.graph
        zm = oh.make_node("ZipMap", ["probabilities"], ["zipped"], domain="ai.onnx.ml",
                          **({"classlabels_strings": list(labels)} if isinstance(labels[0], str)
                             else {"classlabels_int64s": list(labels)}))
        g.node.append(zm)
        from onnx import TensorProto as TP

        key = TP.STRING if isinstance(labels[0], str) else TP.INT64
        zvi = oh.make_value_info("zipped", oh.make_sequence_type_proto(
            oh.make_map_type_proto(key, oh.make_tensor_type_proto(TP.FLOAT, []))))
        del g.output[1]
        g.output.append(zvi)
    X = grid_inputs(rng, 200, n_features, dtype=in_dtype if in_dtype != np.int64 else np.float32)
    if in_dtype == np.int64:
        X = np.nan_to_num(X, nan=0.0, posinf=7, neginf=-7).round().astype(np.int64)
    return make_case(name, tmp / f"{name}.onnx", X, model,
                     atol=PROBIT_ATOL if post == "PROBIT" else ATOL)


# TreeEnsemble (ai.onnx.ml opset 5)
def flatten_v5(trees, leaf_fn, member_fn=None):
    """Nested trees (mode names as in V3, or "BRANCH_MEMBER") -> TreeEnsemble attributes."""
    codes = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4,
             "BRANCH_NEQ": 5, "BRANCH_MEMBER": 6}
    nodes, leaves, roots, members = [], [], [], []

    def visit(n):  # returns (is_leaf, index)
        if n[0] == "leaf":
            leaves.append(leaf_fn())
            return 1, len(leaves) - 1
        slot = len(nodes)
        nodes.append(None)
        tl, ti = visit(n[4])
        fl, fi = visit(n[5])
        split = n[2]
        if n[0] == "BRANCH_MEMBER":
            members.extend(member_fn() + [np.nan])
            split = 0.0
        nodes[slot] = (codes[n[0]], n[1], split, ti, tl, fi, fl, n[3])
        return 0, slot

    for root in trees:
        if root[0] == "leaf":  # a one-leaf tree: a node whose two branches are that leaf
            slot = len(nodes)
            nodes.append(None)
            leaves.append(leaf_fn())
            nodes[slot] = (0, 0, 0.0, len(leaves) - 1, 1, len(leaves) - 1, 1, 0)
            roots.append(slot)
        else:
            roots.append(visit(root)[1])
    return nodes, leaves, roots, members


def v5_model(nodes, leaves, roots, members, n_features, n_out, *, dtype=np.float32, **attrs):
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    a = {"nodes_modes": nh.from_array(np.array([n[0] for n in nodes], np.uint8)),
             "nodes_featureids": [n[1] for n in nodes],
             "nodes_splits": nh.from_array(np.array([n[2] for n in nodes], dtype)),
             "nodes_truenodeids": [n[3] for n in nodes], "nodes_trueleafs": [n[4] for n in nodes],
             "nodes_falsenodeids": [n[5] for n in nodes], "nodes_falseleafs": [n[6] for n in nodes],
             "nodes_missing_value_tracks_true": [n[7] for n in nodes],
             "leaf_targetids": [l[0] for l in leaves],
             "leaf_weights": nh.from_array(np.array([l[1] for l in leaves], dtype)),
             "tree_roots": roots, "n_targets": n_out}
    if members:
        a["membership_values"] = nh.from_array(np.array(members, dtype))
    a.update(attrs)
    tt = _TP[dtype]
    node = oh.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **a)
    graph = oh.make_graph([node], "trees", [oh.make_tensor_value_info("X", tt, [None, n_features])],
                          [oh.make_tensor_value_info("Y", tt, [None, n_out])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid("ai.onnx.ml", 5)],
                         ir_version=10)


MEMBER_X = [-1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 7.0, 7.9, 30.0, 31.0,
            31.5, 40.0, 40.5, 64.0, 100.0, 100.99, 1000.0, 3e9, 2147483520.0]


def _v5(name, tmp, rng, *, n_out=1, n_trees=4, depth=4, modes=V3_MODES, agg=1, post=0,
        member_sets=(), n_features=3, dtype=np.float32, xvalues=GRID):
    """``member_sets``: candidate membership sets for BRANCH_MEMBER nodes (none if empty)."""
    all_modes = tuple(modes) + (("BRANCH_MEMBER",) * 3 if member_sets else ())
    trees = [random_tree(rng, n_features, depth, all_modes, GRID) for _ in range(n_trees)]
    nodes, leaves, roots, members = flatten_v5(
        trees, lambda: (int(rng.integers(n_out)), float(rng.normal())),
        lambda: list(map(float, member_sets[int(rng.integers(len(member_sets)))])))
    model = v5_model(nodes, leaves, roots, members, n_features, n_out, dtype=dtype,
                     aggregate_function=agg, post_transform=post)
    X = grid_inputs(rng, 220, n_features, xvalues, dtype=dtype)
    return make_case(name, tmp / f"{name}.onnx", X, model,
                     atol=PROBIT_ATOL if post == 4 else ATOL)


def _helper_builders():
    b = {}
    # --- TreeEnsembleRegressor (opset 3 attributes; floats)
    b["v3_modes_sum_base"] = lambda t, r: _v3_reg("v3_modes_sum_base", t, r, base=[0.3], n_trees=6)
    b["v3_one_target_posts_ignored"] = lambda t, r: _v3_reg(
        "v3_one_target_posts_ignored", t, r, post="SOFTMAX", dup=True, weightless=True)
    b["v3_one_target_probit"] = lambda t, r: _v3_reg("v3_one_target_probit", t, r, post="PROBIT",
                                                     base=[0.1], agg="AVERAGE")
    b["v3_avg_softmax_partial"] = lambda t, r: _v3_reg(
        "v3_avg_softmax_partial", t, r, n_out=3, agg="AVERAGE", post="SOFTMAX",
        base=[0.5, -0.25, 1.0], partial=True, weightless=True)
    b["v3_sum_logistic_dup"] = lambda t, r: _v3_reg(
        "v3_sum_logistic_dup", t, r, n_out=3, post="LOGISTIC", base=[0.1, 0.2, 0.3],
        partial=True, dup=True)
    b["v3_min_partial"] = lambda t, r: _v3_reg(
        "v3_min_partial", t, r, n_out=3, agg="MIN", base=[1.0, 0.0, -1.0], partial=True, dup=True)
    b["v3_max_softmax_zero"] = lambda t, r: _v3_reg(
        "v3_max_softmax_zero", t, r, n_out=3, agg="MAX", post="SOFTMAX_ZERO", partial=True,
        weightless=True)
    b["v3_min_one_target"] = lambda t, r: _v3_reg("v3_min_one_target", t, r, agg="MIN", base=[2.0])
    b["v3_max_one_target"] = lambda t, r: _v3_reg("v3_max_one_target", t, r, agg="MAX")
    b["v3_multi_probit"] = lambda t, r: _v3_reg("v3_multi_probit", t, r, n_out=2, post="PROBIT",
                                                partial=True, base=[0.25, 0.5])
    # --- double inputs: float attributes widened, and double *_as_tensor attributes
    tenth = [0.1, -0.7, 0.3, 1 / 3, 2.0 / 3.0, 1e-8, 0.0]
    b["v3_double_as_tensor"] = lambda t, r: _v3_reg(
        "v3_double_as_tensor", t, r, n_out=2, in_dtype=np.float64, as_tensor=True,
        thresholds=tenth, base=[0.1, 0.2], xvalues=tenth + [F32_TENTH])
    b["v3_double_float_attrs"] = lambda t, r: _v3_reg(
        "v3_double_float_attrs", t, r, in_dtype=np.float64, thresholds=tenth,
        xvalues=tenth + [F32_TENTH], post="NONE", agg="AVERAGE")
    b["v3_float_cast_to_double"] = lambda t, r: _v3_reg(
        "v3_float_cast_to_double", t, r, in_dtype=np.float32, input_cast=np.float64,
        as_tensor=True, thresholds=tenth, xvalues=tenth + [F32_TENTH])
    b["v3_double_cast_to_float"] = lambda t, r: _v3_reg(
        "v3_double_cast_to_float", t, r, in_dtype=np.float64, input_cast=np.float32,
        thresholds=tenth, xvalues=tenth + [F32_TENTH])
    b["v3_mul_one_identity"] = lambda t, r: _v3_reg(
        "v3_mul_one_identity", t, r, n_out=2, extra_nodes=(("mul_one",), ("identity",)))
    # --- TreeEnsembleClassifier: onnxruntime's binary cases, then 3+ classes
    for cs, pos, base, post in [
        ([(0,)], True, None, "NONE"), ([(0,)], True, None, "LOGISTIC"),
        ([(0,)], False, [0.3], "LOGISTIC"), ([(0,)], False, None, "SOFTMAX"),
        ([(0,)], True, [0.1, 0.2], "SOFTMAX_ZERO"), ([(1,)], False, [0.1, 0.2], "NONE"),
        ([(1,)], True, None, "LOGISTIC"), ([(0, 1)], False, None, "NONE"),
        ([(0, 1)], False, [0.1, 0.2], "LOGISTIC"), ([(0, 1)], True, [0.5], "PROBIT"),
        ([(0,), (1,), (0, 1)], False, None, "LOGISTIC"), ([(0,), (1,)], True, [-0.1, 0.4], "SOFTMAX"),
        ([(0,), (0, 1)], False, None, "NONE"),
    ]:
        name = ("v3_bin_ids" + "_".join("".join(map(str, s)) for s in cs)
                + ("_pos" if pos else "_mixed") + f"_base{len(base or [])}_{post.lower()}")
        b[name] = functools.partial(_named_clf, name, class_sets=cs, positive=pos, base=base,
                                    post=post)
    b["v3_bin_zipmap_strlabels"] = lambda t, r: _v3_clf(
        "v3_bin_zipmap_strlabels", t, r, labels=("no", "yes"), class_sets=[(0,)], positive=True,
        zipmap=True)
    b["v3_clf3_base_softmax"] = lambda t, r: _v3_clf(
        "v3_clf3_base_softmax", t, r, labels=(10, 20, 30), class_sets=[(0, 1, 2), (1,), (2, 0)],
        base=[0.1, -0.2, 0.3], post="SOFTMAX")
    b["v3_clf4_logistic_zipmap"] = lambda t, r: _v3_clf(
        "v3_clf4_logistic_zipmap", t, r, labels=("a", "b", "c", "d"),
        class_sets=[(0, 1, 2, 3), (3,)], post="LOGISTIC", zipmap=True)
    b["v3_clf3_int64_input"] = lambda t, r: _v3_clf(
        "v3_clf3_int64_input", t, r, labels=(0, 1, 2), in_dtype=np.int64)
    # --- TreeEnsemble (opset 5)
    b["v5_modes_sum"] = lambda t, r: _v5("v5_modes_sum", t, r, n_trees=5)
    b["v5_avg_targets_post1"] = lambda t, r: _v5("v5_avg_targets_post1", t, r, n_out=3, agg=0, post=1)
    b["v5_min_post2"] = lambda t, r: _v5("v5_min_post2", t, r, n_out=3, agg=2, post=2)
    b["v5_max_post3"] = lambda t, r: _v5("v5_max_post3", t, r, n_out=2, agg=3, post=3)
    b["v5_probit"] = lambda t, r: _v5("v5_probit", t, r, n_out=2, post=4)
    b["v5_double"] = lambda t, r: _v5("v5_double", t, r, n_out=2, dtype=np.float64, post=1)
    b["v5_member_exact"] = lambda t, r: _v5(
        "v5_member_exact", t, r, member_sets=[(1, 2), (0,), (3, 7, 30), (5,)], xvalues=MEMBER_X)
    b["v5_member_trunc"] = lambda t, r: _v5(
        "v5_member_trunc", t, r, n_out=2, member_sets=[(0, 40), (31,), (7, 100, 1000), tuple(range(31))],
        xvalues=MEMBER_X)
    b["v5_member_mixed_double"] = lambda t, r: _v5(
        "v5_member_mixed_double", t, r, member_sets=[(1, 2), (0, 40), (3, 64), (7,)],
        xvalues=MEMBER_X, dtype=np.float64)
    b["v3_never_touched_target"] = _never_touched
    b["v3_tree_order_dag"] = _tree_order_dag
    return b


def _named_clf(name, tmp, rng, **kw):
    return _v3_clf(name, tmp, rng, **kw)


def _never_touched(tmp, rng):
    """Three targets, target 2 has no weight anywhere (written as 0 despite its base value)."""
    n_features = 3
    trees = [random_tree(rng, n_features, 3, V3_MODES, GRID) for _ in range(3)]
    nodes, weights = flatten_v3(trees, lambda t, n: [(0, float(rng.normal())), (1, float(rng.normal()))])
    model = v3_model("TreeEnsembleRegressor", nodes, weights, n_features, n_out=3,
                     base_values=[0.5, 0.25, 4.0], post_transform="SOFTMAX")
    return make_case("v3_never_touched_target", tmp / "v3_never_touched_target.onnx",
                     grid_inputs(rng, 120, n_features), model)


def _tree_order_dag(tmp, rng):
    """Node ids not starting at 0, a subtree shared by two parents, a one-leaf tree, trees in
    runs of tree ids (onnxruntime starts a tree at the first node of each run)."""
    nodes = [
        # tree 7: root id 1; nodes 2 and 3 both lead to the shared subtree 9
        (7, 1, "BRANCH_LEQ", 0, 0.5, 2, 3, 0),
        (7, 2, "BRANCH_GT", 1, 0.0, 9, 4, 1),
        (7, 3, "BRANCH_NEQ", 2, 1.0, 5, 9, 0),
        (7, 9, "BRANCH_LT", 1, 1.5, 6, 7, 1),
        (7, 4, "LEAF", 0, 0.0, 0, 0, 0), (7, 5, "LEAF", 0, 0.0, 0, 0, 0),
        (7, 6, "LEAF", 0, 0.0, 0, 0, 0), (7, 7, "LEAF", 0, 0.0, 0, 0, 0),
        # tree 3: a single leaf
        (3, 0, "LEAF", 0, 0.0, 0, 0, 0),
        # tree 5: a stump whose two children are the same leaf (onnxruntime wants child ids
        # below the total number of nodes)
        (5, 4, "BRANCH_EQ", 2, 0.25, 10, 10, 0), (5, 10, "LEAF", 0, 0.0, 0, 0, 0),
        # tree 7 again: a new run of the id, so onnxruntime evaluates it as one more tree
        (7, 8, "BRANCH_GTE", 0, 1.0, 11, 12, 0), (7, 11, "LEAF", 0, 0.0, 0, 0, 0),
        (7, 12, "LEAF", 0, 0.0, 0, 0, 0),
    ]
    weights = [(7, 4, 0, 1.0), (7, 5, 0, 2.0), (7, 6, 0, 4.0), (7, 7, 0, 8.0),
               (3, 0, 0, 16.0), (5, 10, 0, 32.0), (7, 11, 0, 64.0), (7, 12, 0, 128.0),
               (7, 1, 0, 99.0)]  # the last is on an internal node: ignored
    model = v3_model("TreeEnsembleRegressor", nodes, weights, 3, aggregate_function="AVERAGE")
    return make_case("v3_tree_order_dag", tmp / "v3_tree_order_dag.onnx",
                     grid_inputs(rng, 150, 3), model)


# ----------------------------------------------------------------------------- registry
QUICK = ("skl_rf_reg", "skl_gb_bin", "xgb_multi", "lgb_bin", "v3_modes_sum_base",
         "v3_avg_softmax_partial", "v3_bin_ids0_pos_base0_logistic", "v5_member_mixed_double")


def _builders():
    b = _converter_builders()
    b.update(_helper_builders())
    return b


def case_names(quick: bool = False) -> list[str]:
    names = list(_builders())
    return [n for n in names if n in QUICK] if quick else names


def build_case(name: str, tmp_path) -> Case:
    import zlib

    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return _builders()[name](Path(tmp_path), rng)

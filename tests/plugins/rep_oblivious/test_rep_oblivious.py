"""The oblivious representation (plugins/rep_oblivious): symmetric trees evaluated as one compare
a level whose bits index the leaves.  Differential: against the reference evaluator bit for bit
(margins) and against catboost's and xgboost's own predict, on models trained here; the chooser
takes it by cost for CatBoost's symmetric trees; other forests are refused with the reason."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
from strategies import oblivious_tree

import silvanforge as sf
from silvanforge.frontend.outputs import leaf_forest
from silvanforge.ir.hir import Aggregation, Forest, Transform, Tree
from silvanforge.plugins import registry
from silvanforge.runtime import reference

catboost = pytest.importorskip("catboost")
pytest.importorskip("silvanforge_rep_oblivious")

BATCHES = (0, 1, 7, 16, 300)
# The default chooser without the bitvector representation, whose cost on these small models'
# few trees is lower still (it takes them when left on): these tests are the oblivious form's.
NO_BITVECTORS = sf.CompileOptions(rep_options={"auto_choose": False})


def _data(rows=400, features=6, seed=0, nan=0.1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, features)).astype(np.float32)
    y = X[:, 0] + X[:, 1] * X[:, 2] - np.abs(X[:, 3])
    X[rng.random(X.shape) < nan] = np.nan
    return X, y


@functools.lru_cache(maxsize=None)  # one training a model: the tests only read it
def _train(loss: str, nan_mode: str = "Min", y_of=lambda y: y, **extra):
    X, y = _data()
    model = catboost.CatBoost({"iterations": 12, "depth": 4, "loss_function": loss, "nan_mode": nan_mode,
                               "random_seed": 0, "verbose": False, "thread_count": 1,
                               "allow_writing_files": False, **extra})
    model.fit(X, y_of(y))
    return model


def _three_classes(y):
    return np.digitize(y, [-1.0, 0.5])


def _two_classes(y):
    return (y > 0).astype(int)


LABELS = {"RMSE": lambda y: y, "Logloss": _two_classes, "MultiClass": _three_classes}


def _rows(features: int, n: int, seed: int = 1) -> np.ndarray:
    X, _ = _data(max(n, 1), features, seed, nan=0.15)
    return X[:n]


def _check(cf, forest, X):
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


@pytest.mark.parametrize("loss, nan_mode, kind", [
    ("RMSE", "Min", "RawFormulaVal"), ("Logloss", "Max", "Probability"), ("MultiClass", "Min", "Probability")])
def test_catboost_models_are_exact_at_every_batch_size(loss, nan_mode, kind):
    model = _train(loss, nan_mode, LABELS[loss])
    forest = sf.load_model(model)
    cf = sf.compile(model, options=NO_BITVECTORS)
    assert cf.rep == "oblivious"
    for n in BATCHES:  # 1-16 rows take the lean path
        X = _rows(forest.num_features, n, seed=n)
        _check(cf, forest, X)
        ours = cf.predict(X)
        theirs = model.predict(X, prediction_type=kind) if n else ours
        if loss == "Logloss" and n:
            theirs = theirs[:, 1]
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("batch_size", [1, 7, 16, 300])
def test_forms_lowered_for_each_batch_size(batch_size):
    model = _train("MultiClass", "Min", LABELS["MultiClass"])
    forest = sf.load_model(model)
    cf = sf.compile(forest, rep="oblivious", batch_size=batch_size, threads=2)
    for n in BATCHES:
        _check(cf, forest, _rows(forest.num_features, n, seed=n))


def test_the_chooser_prices_it_below_the_walks_for_catboost():
    X, y = _data(2000)
    model = catboost.CatBoost({"iterations": 60, "depth": 6, "random_seed": 0, "verbose": False,
                               "thread_count": 1, "allow_writing_files": False}).fit(X, y)
    forest = sf.load_model(model)
    costs = {rep: ns for rep, ns, _ in registry().rep_costs(forest, "cpu", None) if isinstance(ns, float)}
    assert min(costs, key=costs.get) == "oblivious", costs
    assert sf.compile(model).rep == "oblivious"


def test_every_band_of_the_plan_takes_it():
    """The one-row form too: it runs scalar code, a row at a time, where its estimate is the
    lowest (the walks' one-row form is not forced on it)."""
    model = _train("RMSE")
    forest = sf.load_model(model)
    # plan_min_ns=0: a small model gets its forms by request size too
    cf = sf.compile(model, options=dataclasses.replace(NO_BITVECTORS, plan_min_ns=0))
    assert cf.options.plan_min_ns == 0.0
    shown = cf.wait().show("plan")  # (every form built)
    assert shown.count("rep=oblivious") == shown.count("form ") >= 2, shown
    assert "lanes=1 " in sf.compile(model, batch_size=1, options=NO_BITVECTORS).show("lir")
    for n in (1, 2, 3, 40):
        _check(cf, forest, _rows(forest.num_features, n, seed=n))


@pytest.mark.parametrize("dtype, chunked", [("float32", False), ("float64", False), ("float32", True)])
def test_random_symmetric_forests_every_op_and_missing_rule(dtype, chunked):
    """Every HIR rule a symmetric tree may hold: < and <=, NaN either way, zero as missing,
    trees of depth 0 to 5, tree groups of one output each and trees of several outputs;
    ``chunked``: a few trees a chunk over spans of several blocks, as large forests run.  The
    forests of several outputs are averaged (summed from zero, divided, the base added after the
    trees: CatBoost's bias, onnxruntime's base values)."""
    spans = sf.CompileOptions(rep_options={"oblivious_chunk_bytes": 1024, "oblivious_span_rows": 48}
                              if chunked else {})
    rng = np.random.default_rng(5)
    features = 4
    for outputs_of in (lambda k: (0,), lambda k: (k % 3,), lambda k: (0, 1)):
        trees = [oblivious_tree(rng, int(rng.integers(0, 6)), features, outputs_of(k)) for k in range(25)]
        outputs = 1 + max(max(t.outputs) for t in trees)
        forest = Forest(trees=trees, num_features=features, num_outputs=outputs,
                        base_score=np.linspace(-0.3, 0.3, outputs),
                        aggregation=Aggregation.SUM if outputs == 1 else Aggregation.AVERAGE, average_divisor=3.0,
                        transform=Transform(), threshold_dtype=dtype, accumulate_dtype=dtype)
        X = rng.choice([np.nan, 0.0, -0.0, 1e-36, -1.0, 0.5, np.inf, -np.inf, 2.0], size=(300, features))
        X = np.where(rng.random(X.shape) < 0.5, rng.normal(size=X.shape), X).astype(dtype)
        assert registry().rep_class("oblivious").refuses(forest, "cpu") is None
        cf = sf.compile(forest, rep="oblivious", options=spans)
        assert ("chunk=25" in cf.show("lir")) != chunked
        for n in BATCHES:
            _check(cf, forest, X[:n])


def test_xgboost_stumps_take_it_and_agree_with_xgboost():
    """Depth-1 trees are symmetric: a multiclass model's one-output trees make groups."""
    xgboost = pytest.importorskip("xgboost")
    X, y = _data(600)
    booster = xgboost.train({"max_depth": 1, "objective": "multi:softprob", "num_class": 3, "nthread": 1},
                            xgboost.DMatrix(X, np.digitize(y, [-1.0, 0.5])), 15)
    forest = sf.load_model(booster)
    cf = sf.compile(booster, rep="oblivious")
    Xt = _rows(forest.num_features, 300)
    _check(cf, forest, Xt)
    np.testing.assert_allclose(cf.predict(Xt), booster.predict(xgboost.DMatrix(Xt)), rtol=1e-6, atol=1e-7)


def test_other_forests_are_refused_with_the_reason():
    xgboost = pytest.importorskip("xgboost")
    X, y = _data(600, nan=0.0)
    booster = xgboost.train({"max_depth": 3, "nthread": 1}, xgboost.DMatrix(X, y), 5)
    forest = sf.load_model(booster)
    why = registry().rep_class("oblivious").refuses(forest, "cpu")
    assert isinstance(why, str) and "is not symmetric" in why, why
    with pytest.raises(sf.InputError, match="oblivious representation cannot run this model: tree 0 is not symmetric"):
        sf.compile(forest, rep="oblivious")
    assert "runs on cpu targets" in registry().rep_class("oblivious").refuses(forest, "gpu")
    # A categorical split at a level, and a maximum of the trees: each named.
    model = _train("RMSE")
    cat = sf.load_model(model)
    tree = cat.trees[0]
    cat.trees[0] = dataclasses.replace(tree, categories={0: np.array([1, 2])})
    assert registry().rep_class("oblivious").refuses(cat, "cpu") == "tree 0 has categorical splits"
    largest = dataclasses.replace(sf.load_model(model), aggregation=Aggregation.MAX)
    assert "sums trees" in registry().rep_class("oblivious").refuses(largest, "cpu")


def test_lir_has_one_compare_a_level_and_no_walk():
    model = _train("RMSE")
    text = sf.compile(model, rep="oblivious").show("lir")
    assert "rep=oblivious" in text and "while" not in text.lower()
    assert text.count("ob_column[") == 4  # depth 4: one compare a level, unrolled


def _pruned(tree: Tree, cut: set[int], value: float) -> Tree:
    """``tree`` with the subtrees under the nodes ``cut`` replaced by leaves of ``value`` (a
    branch that stopped early), nodes renumbered in walk order."""
    order, remap = [], {}

    def visit(n):
        remap[n] = len(order)
        order.append(n)
        if n not in cut and tree.left[n] >= 0:
            visit(int(tree.left[n]))
            visit(int(tree.right[n]))
    visit(0)
    inner = [n not in cut and tree.left[n] >= 0 for n in order]
    return dataclasses.replace(
        tree,
        left=np.array([remap[int(tree.left[n])] if i else -1 for n, i in zip(order, inner)], np.int32),
        right=np.array([remap[int(tree.right[n])] if i else -1 for n, i in zip(order, inner)], np.int32),
        feature=np.array([tree.feature[n] if i else -1 for n, i in zip(order, inner)], np.int32),
        threshold=tree.threshold[order], op=tree.op[order], default_left=tree.default_left[order],
        zero_missing=tree.zero_missing[order],
        leaf_value=np.array([tree.leaf_value[n] if i or n not in cut else [value] * tree.leaf_value.shape[1]
                             for n, i in zip(order, inner)], np.float64),
        categories={}, node_ids=None if tree.node_ids is None else tree.node_ids[order],
        cover=None if tree.cover is None else tree.cover[order])


@pytest.mark.parametrize("loss", ["RMSE", "MultiClass"])
def test_trees_whose_branches_stop_early_are_padded_symmetric(loss):
    """A symmetric tree some of whose branches end above the last level (a level mixing splits
    and leaves) runs as a symmetric tree whose early leaves fill every leaf below them: exact."""
    forest = sf.load_model(_train(loss, "Min", LABELS[loss]))
    rng = np.random.default_rng(5)
    trees = []
    for k, tree in enumerate(forest.trees):
        inner = np.flatnonzero(tree.left >= 0)
        depth = tree.node_depths()
        # a few splits below the root cut, at different levels (none in every third tree)
        candidates = [int(n) for n in inner if depth[n] >= 1]
        cut = set(rng.choice(candidates, size=min(2, len(candidates)), replace=False).tolist()) if k % 3 else set()
        trees.append(_pruned(tree, cut, float(rng.normal())) if cut else tree)
    padded = dataclasses.replace(forest, trees=trees)
    assert any(len(t.left) < len(f.left) for t, f in zip(padded.trees, forest.trees))
    why = registry().rep_class("oblivious").refuses(padded, "cpu")
    assert why is None, why
    cf = sf.compile(padded, rep="oblivious")
    for n in BATCHES:
        _check(cf, padded, _rows(padded.num_features, n, seed=n + 40))
    # A level whose splits differ is still refused.
    tree = dataclasses.replace(trees[0], threshold=trees[0].threshold.copy())  # not cut: full
    second = np.flatnonzero((tree.left >= 0) & (tree.node_depths() == 1))
    tree.threshold[second[1]] += 1.0
    why = registry().rep_class("oblivious").refuses(dataclasses.replace(padded, trees=[tree]), "cpu")
    assert isinstance(why, str) and "level 1 has different splits" in why, why


def _many_thresholds_forest(rng, dtype, depth_of, outputs_of, trees=40, features=3):
    """Symmetric trees whose levels draw thresholds from 600 values a feature (a byte column
    holds 254: features of several byte columns), every op and missing rule."""
    pool = rng.normal(size=600)
    made = []
    for k in range(trees):
        tree = oblivious_tree(rng, depth_of(k), features, outputs_of(k))
        inner = tree.left >= 0
        threshold = tree.threshold.copy()
        # one threshold a level (the tree stays symmetric), drawn from the pool
        depth = tree.node_depths()
        for level in range(int(depth[inner].max()) + 1 if inner.any() else 0):
            threshold[inner & (depth == level)] = rng.choice(pool)
        made.append(dataclasses.replace(tree, threshold=threshold))
    outputs = 1 + max(max(t.outputs) for t in made)
    return Forest(trees=made, num_features=features, num_outputs=outputs,
                  base_score=np.linspace(-0.2, 0.2, outputs), aggregation=Aggregation.SUM,
                  transform=Transform(), threshold_dtype=dtype, accumulate_dtype="float64")


# (each vector unit once a dtype, the host's with both: 54 compiles over the whole matrix took
# 90 s of the suite, and a dtype changes the bins, not the registers)
@pytest.mark.parametrize("cpu,dtype", [(None, "float32"), (None, "float64"), ("x86-64-v3", "float64"),
                                       ("x86-64", "float32")])
def test_byte_program_equals_the_reference(cpu, dtype, monkeypatch):
    """Calls of more than 16 rows compare byte bins (blocks of 64 rows; a register of them for
    calls of up to 64, 32 on AVX2, 16 on SSE; its registers of values binned several side by
    side without AVX-512): features of more than 254 thresholds (several byte columns), trees of mixed
    depths in a group (padded leaf tables), one output a group or several a tree, NaN,
    infinities, zero as missing and values at the thresholds, spans of several blocks.  (These
    small forests would get one form and the float program: the plan's limit is lifted.)"""
    from silvanforge_rep_oblivious import cost, symmetric

    monkeypatch.setattr("silvanforge.plan.policy.PLAN_MIN_NS", 0.0)

    if cpu is None and not registry().vectors("cpu", None).isa.startswith("avx512"):
        pytest.skip("the host has no AVX-512")
    rng = np.random.default_rng(11)
    for first, outputs_of in ((True, lambda k: (0,)), (False, lambda k: (k % 3,)), (False, lambda k: (0, 1))):
        forest = _many_thresholds_forest(rng, dtype, lambda k: int(rng.integers(0, 9)), outputs_of)
        if not first:  # (averaged: the base score after the trees' sum, divided)
            forest = dataclasses.replace(forest, aggregation=Aggregation.AVERAGE, average_divisor=3.0)
        facts = symmetric.recognise(forest)
        binning = cost.symmetric_binned(facts, None)
        assert binning is not None and len(binning.thresholds) > forest.num_features  # split columns
        X = rng.choice(np.r_[np.nan, 0.0, -0.0, 1e-36, np.inf, -np.inf, rng.choice(forest.trees[0].threshold, 4)],
                       size=(300, forest.num_features))
        X = np.where(rng.random(X.shape) < 0.5, rng.normal(size=X.shape), X).astype(dtype)
        # (spans of several blocks and a call's register of a narrower unit: the first forest's;
        # the outputs' layouts do not meet them)
        for spans, batch in (({}, 300), ({"oblivious_chunk_bytes": 4096, "oblivious_span_rows": 128}, 300),
                             ({}, 40))[:3 if first else 1]:
            cf = sf.compile(forest, rep="oblivious", batch_size=batch, cpu=cpu,
                            options=sf.CompileOptions(rep_options=spans))
            lanes = 64 if cpu is None or batch > 64 else {"x86-64-v3": 32, "x86-64": 16}[cpu]
            assert f"lanes={lanes} " in cf.show("lir")
            for n in (17, 63, 64, 65, 300):
                _check(cf, forest, X[:n])


def test_byte_program_takes_large_calls_and_small_ones_keep_floats(monkeypatch):
    """Calls of up to 16 rows, trees deeper than a byte's paths and forests cheap enough for
    one form of every call size keep the float program."""
    from silvanforge_rep_oblivious import symmetric

    forest = sf.load_model(_train("RMSE"))
    assert "ob_bits" not in sf.compile(forest, rep="oblivious", batch_size=512).show("lir")  # cheap
    monkeypatch.setattr("silvanforge.plan.policy.PLAN_MIN_NS", 0.0)
    assert "ob_bits" not in sf.compile(forest, rep="oblivious", batch_size=16).show("lir")
    shown = sf.compile(forest, rep="oblivious", batch_size=512).show("lir")
    assert "ob_bits" in shown and "lw_search" in shown
    deep = dataclasses.replace(forest, trees=[oblivious_tree(np.random.default_rng(1), 9, 4, (0,))])
    assert isinstance(symmetric.bins(symmetric.recognise(deep)), str)  # paths past a byte: floats
    assert "ob_bits" not in sf.compile(deep, rep="oblivious", batch_size=512).show("lir")


def test_forests_of_leaf_indices_store_the_index_their_levels_build(monkeypatch):
    """``pred_leaf``'s forest (an output a tree, each leaf's value its index): every form
    (one row, vector lanes, byte bins) reads no leaf table and equals the reference and
    CatBoost's ``calc_leaf_indexes``; a model's own values are read from the table."""
    from silvanforge_rep_oblivious import symmetric

    monkeypatch.setattr("silvanforge.plan.policy.PLAN_MIN_NS", 0.0)
    model = _train("MultiClass", "Min", LABELS["MultiClass"])
    forest = sf.load_model(model)
    for f, indices in ((leaf_forest(forest), True), (forest, False)):
        facts = symmetric.recognise(f)
        table, base = symmetric.leaf_table(f, facts, np.dtype(f.accumulate_dtype))
        assert symmetric.leaves_are_indices(table, base, facts.depth, facts.groups) is indices
    leaves = leaf_forest(forest)
    for batch_size in (1, 16, 300):
        cf = sf.compile(leaves, rep="oblivious", batch_size=batch_size)
        assert "ob_leaf[" not in cf.show("lir")
        for n in (1, 7, 17, 64, 300):
            _check(cf, leaves, _rows(forest.num_features, n, seed=n))
    X = _rows(forest.num_features, 300, seed=3)
    cf = sf.compile(model)
    for n in (1, 7, 64, 300):
        got = cf.predict(X[:n], pred_leaf=True)
        np.testing.assert_array_equal(got, model.calc_leaf_indexes(catboost.Pool(X[:n])))
        assert got.dtype == np.uint32


@pytest.mark.parametrize("trees", [12, 14])
def test_a_block_of_leaf_indices_is_stored_row_major_from_a_lookup(trees, monkeypatch):
    """The 64-row form of ``pred_leaf``'s forest gathers four trees' stored paths row-major by
    a lookup (each row's ids one store) and the last ``trees % 4`` a row at a time; calls
    filling part of a block write only their rows, equal to CatBoost's."""
    monkeypatch.setattr("silvanforge.plan.policy.PLAN_MIN_NS", 0.0)  # byte paths for a small forest
    model = _train("RMSE", "Max", iterations=trees, depth=5)
    forest = sf.load_model(model)
    leaves = leaf_forest(forest)
    cf = sf.compile(leaves, rep="oblivious", batch_size=64)
    text = cf.show("lir")
    if "lookup ob_idx" not in text:
        pytest.skip("the 64-row form here compares floats, or its block is not 64 rows (no byte paths)")
    for n in (17, 30, 63, 64, 65, 200):
        X = _rows(forest.num_features, n, seed=n)
        _check(cf, leaves, X)
        got = cf.predict(X, output_margin=True).astype(np.uint32)
        np.testing.assert_array_equal(got, model.calc_leaf_indexes(catboost.Pool(X)))

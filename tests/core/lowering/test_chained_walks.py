"""Chained walks (``chainWalks``, silvanforge.lowering.chains): a row's interleaved lanes each walk
their own trees back to back, every leaf linked to its lane's next tree's root, and the trees'
values added in tree order afterwards.  Checked against the reference evaluator on random
forests (several outputs, every aggregation, NaN and infinities, categorical splits through set
and category columns, 1 to many rows, 1 and 2 threads), the layout's links and sinks, the
plain lowering where chains cannot be laid out, the chooser and the plan's one-row forms (leaf
ids and per-tree values included), artifacts, and a LightGBM model trained here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import categorical_forest, category_rows, forests, labelled_frame

import silvanforge as sf
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, LinearLeaves, Op, Tree
from silvanforge.lowering import walkcost
from silvanforge.lowering.chains import CHAIN_VALUES
from silvanforge.lowering.walksetup import set_columns
from silvanforge.options import split_rows
from silvanforge.runtime import reference
from silvanforge.testing import GRID, rows_for

pytestmark = pytest.mark.filterwarnings("ignore::silvanforge.ArtifactWarning")


def chained(cf) -> bool:
    return CHAIN_VALUES in cf.lir_module.buffers


def spine_forest(seed: int, trees: int = 300, features: int = 5, dtype: str = "float64",
                 outputs: int = 1) -> Forest:
    """Leaf-wise-like trees: a spine of 1 to 14 splits, each with a leaf on one side (a tree's
    depth far past its leaves' mean depth, where walks exit early); tree t feeds output t % outputs."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(trees):
        depth = int(rng.integers(1, 15))
        n = 2 * depth + 1
        left, right, feature = np.full(n, -1), np.full(n, -1), np.full(n, -1)
        threshold, value = np.zeros(n), np.zeros(n)
        leaves = iter(range(depth, n))
        for k in range(depth):
            deeper, leaf = (k + 1 if k + 1 < depth else next(leaves)), next(leaves)
            left[k], right[k] = (deeper, leaf) if rng.random() < 0.5 else (leaf, deeper)
            feature[k], threshold[k] = rng.integers(features), rng.choice(GRID)
        value[depth:] = rng.normal(size=n - depth).round(4)
        out.append(Tree.from_nodes(left, right, feature, threshold, value, op=Op.LE,
                                   default_left=bool(rng.random() < 0.5), outputs=(t % outputs,)))
    return Forest(trees=out, num_features=features, num_outputs=outputs, threshold_dtype=dtype,
                  accumulate_dtype=dtype, base_score=np.linspace(-0.5, 0.5, outputs))


def _exact(cf, forest, X, sizes=(1, 3, 50), threads=(1, 2)):
    want = reference.predict(forest, X, output_margin=True)
    for n in sizes:
        for t in threads:
            got = np.concatenate([cf.predict(X[i:i + n], output_margin=True, threads=t) for i in range(0, len(X), n)])
            np.testing.assert_array_equal(got, want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=20, max_depth=7, plain=True), lanes=st.sampled_from([2, 3, 8]))
def test_chained_walks_match_the_reference(forest, lanes):
    lanes = min(lanes, forest.num_trees)
    schedule = f"interleave(tree, {lanes})\nchainWalks(tree)\nparallel(batch)" if lanes > 1 else "chained-trees"
    cf = sf.compile(forest, rep="sparse", schedule=schedule)
    one_output_a_tree = all(len(t.outputs) == 1 for t in forest.trees)
    # Chains need leaves inline: one output a tree (the random forests' dtypes agree); a lone
    # tree is not interleaved (the canned schedule walks it plainly).
    assert chained(cf) == (one_output_a_tree and lanes > 1)
    X = rows_for(forest, np.random.default_rng(forest.num_trees), 120)
    _exact(cf, forest, X)


@pytest.mark.parametrize("sets", [True, False])
@pytest.mark.parametrize("rule", list(CategoryRule))
def test_categorical_splits_through_set_and_category_columns(sets, rule):
    forest = categorical_forest(3, 6, rule, Op.LE, "float64", trees=40)
    with set_columns(sets):
        cf = sf.compile(forest, rep="sparse", schedule="chained-trees")
    assert chained(cf) and ("set_words" in cf.lir_module.buffers) == sets
    _exact(cf, forest, category_rows(forest, 4, 90, share=0.2, more=(np.inf, -np.inf, np.nan)), sizes=(1, 7))


@pytest.mark.parametrize("aggregation", list(Aggregation))
def test_several_outputs_and_every_aggregation(aggregation):
    forest = spine_forest(8, trees=37, outputs=3)
    forest = Forest(**{**forest.__dict__, "aggregation": aggregation, "average_divisor": 12.0})
    cf = sf.compile(forest, rep="sparse", schedule="chained-trees")
    assert chained(cf)
    _exact(cf, forest, rows_for(forest, np.random.default_rng(1), 80), sizes=(1, 5))


def test_each_leaf_steps_to_its_lanes_next_root_and_the_last_to_a_sink():
    forest = spine_forest(2, trees=27, features=3)
    cf = sf.compile(forest, rep="sparse", schedule="interleave(tree, 4)\nchainWalks(tree)")
    buf = {name: b.data for name, b in cf.lir_module.buffers.items() if b.data is not None}
    roots, feature, threshold, child = (buf[k] for k in ("sparse_roots", "sparse_feature", "sparse_threshold",
                                                         "sparse_child"))
    # Offsets stay within a tree or to the next one (the sinks sit after their lanes): narrow.
    assert child.dtype == np.int8
    for t in range(forest.num_trees):
        lo = int(roots[t])
        size = forest.trees[t].num_nodes
        leaves = lo + np.flatnonzero(feature[lo:lo + size] < 0)
        to = leaves + child[leaves].astype(np.int64) + 1  # a leaf reads the NaN column: right
        if t + 4 < forest.num_trees:
            assert (to == roots[t + 4]).all() and roots[t + 4] == lo + size  # the lane's trees side by side
        else:
            (sink,) = set(to.tolist())
            assert sink == lo + size and feature[sink] >= 0 and np.isnan(threshold[sink]) and child[sink] == -1


@pytest.mark.parametrize("how", ["tiles", "array", "linear", "no split rows", "vector leaves"])
def test_where_chains_cannot_be_laid_out_the_loop_is_plainly_interleaved(how):
    forest = spine_forest(5, trees=30)
    options = {"rep": "sparse", "schedule": "chained-trees"}
    if how == "tiles":
        options["tile_size"] = 4
    elif how == "array":
        options["rep"] = "array"
    elif how == "no split rows":
        options["split_rows"] = False  # (a lowering knob: given through its context manager)
    elif how == "linear":
        def terms(t):  # each leaf 0.5 + 0.25 x0, no terms inside
            leaf = t.left < 0
            return LinearLeaves.from_lists(np.where(leaf, 0.5, 0.0), [[0] if f else [] for f in leaf],
                                           [[0.25] if f else [] for f in leaf])
        linear = [Tree.from_nodes(t.left, t.right, t.feature, t.threshold, t.leaf_value, op=Op.LE,
                                  linear=terms(t)) for t in forest.trees]
        forest = Forest(**{**forest.__dict__, "trees": linear})
    else:  # every tree adds to both outputs
        forest = Forest(**{**forest.__dict__, "num_outputs": 2, "base_score": np.zeros(2), "trees": [
            Tree.from_nodes(t.left, t.right, t.feature, t.threshold, np.hstack([t.leaf_value, -t.leaf_value]),
                            op=Op.LE, outputs=(0, 1)) for t in forest.trees]})
    with split_rows(options.pop("split_rows", None)):
        cf = sf.compile(forest, **options)
    assert not chained(cf) and "chainWalks" in cf.schedule.to_text()
    _exact(cf, forest, rows_for(forest, np.random.default_rng(0), 40), sizes=(1, 4), threads=(1,))


def test_the_chooser_chains_one_row_of_many_uneven_trees(monkeypatch):
    many, few = spine_forest(1, trees=300), spine_forest(1, trees=100)
    assert walkcost.chains_pay(many, 8) and not walkcost.chains_pay(few, 8)
    # Trees whose every leaf is as deep (no lane waits) are not chained.
    full = Forest(trees=[Tree.from_nodes(np.r_[1, 3, 5, -1, -1, -1, -1], np.r_[2, 4, 6, -1, -1, -1, -1],
                                         np.r_[0, 1, 2, -1, -1, -1, -1], np.r_[0.5, 1.0, -1.0, 0, 0, 0, 0],
                                         np.arange(7) * 0.25)] * 300, num_features=3)
    assert not walkcost.chains_pay(full, 8)
    # (the representation named: with few features the plan would answer one row otherwise)
    cf = sf.compile(many, batch_size=1, rep="sparse", threads=1)
    assert "chainWalks" in cf.form_for(1).text() and chained(cf)
    assert not chained(sf.compile(many, batch_size=4096, rep="sparse"))
    X = rows_for(many, np.random.default_rng(2), 60)
    for i in range(len(X)):
        np.testing.assert_array_equal(cf.predict(X[i:i + 1], output_margin=True),
                                      reference.predict(many, X[i:i + 1], output_margin=True))
    monkeypatch.setattr(walkcost, "CHAIN_MIN_TREES_PER_LANE", 1000)
    assert not chained(sf.compile(many, batch_size=1, rep="sparse", threads=1))


@pytest.mark.parametrize("trust", [True, False])
def test_chained_forms_survive_save_and_load(tmp_path, trust):
    forest = spine_forest(4, trees=300)
    cf = sf.compile(forest, batch_size=1, rep="sparse", threads=1)
    assert chained(cf)
    cf.save(tmp_path / "m.forge")
    back = sf.load_compiled(tmp_path / "m.forge", trust_code=trust)
    assert chained(back) and back.show("lir") == cf.show("lir")
    X = rows_for(forest, np.random.default_rng(3), 30)
    np.testing.assert_array_equal(back.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


def test_a_lightgbm_model_one_row_at_a_time_as_the_library_and_the_unchained_walks(monkeypatch):
    lgb = pytest.importorskip("lightgbm")
    pytest.importorskip("pandas")
    rng = np.random.default_rng(6)
    n = 4000
    frame = labelled_frame(rng, n, {"a": "normal", "b": 20, "c": "normal"})
    frame["d"] = rng.integers(0, 5, n).astype(float)
    for i in range(8):
        frame[f"e{i}"] = rng.exponential(size=n)
    frame.loc[rng.random(n) < 0.1, "a"] = np.nan
    # (a heavy tail: leaf-wise trees grow deep beside their leaves' mean depth, walks exit early)
    y = np.exp(frame["e0"]) * (frame["a"].fillna(1) > 0) + frame["b"].cat.codes % 3 + np.sin(frame["c"] * 3) \
        + rng.normal(size=n) * 0.1
    booster = lgb.train({"objective": "regression", "num_leaves": 63, "verbose": -1, "min_data_in_leaf": 2,
                         "learning_rate": 0.05}, lgb.Dataset(frame, y), num_boost_round=300)
    test = frame.sample(120, random_state=2).reset_index(drop=True)
    cf = sf.compile(booster, threads=1).wait()
    assert "chainWalks" in cf.form_for(1).text()
    # Leaf ids and per-tree values (built at their first request): their one-row forms chained too.
    leaf = np.concatenate([cf.predict(test.iloc[i:i + 1], pred_leaf=True) for i in range(len(test))])
    per_tree = np.concatenate([cf.predict(test.iloc[i:i + 1], per_tree=True) for i in range(len(test))])
    assert all(chained(cf._outputs[kind][0].forms[1]) for kind in ("pred_leaf", "per_tree"))
    monkeypatch.setattr(walkcost, "chains_pay", lambda forest, lanes: False)
    plain = sf.compile(booster, threads=1).wait()
    assert "chainWalks" not in plain.form_for(1).text()
    got = np.concatenate([cf.predict(test.iloc[i:i + 1]) for i in range(len(test))])
    np.testing.assert_array_equal(got, np.concatenate([plain.predict(test.iloc[i:i + 1]) for i in range(len(test))]))
    np.testing.assert_allclose(got, booster.predict(test), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(leaf, booster.predict(test, pred_leaf=True))
    np.testing.assert_array_equal(per_tree, plain.predict(test, per_tree=True))
    assert not chained(plain._outputs["per_tree"][0].forms[1])

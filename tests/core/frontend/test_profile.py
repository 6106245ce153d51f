"""Profiles (node hit counts), probability-based tiling of skewed trees (the probability-based
tiling draft) and tree reordering into depth / peel-depth groups with per-group peeled walks."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, rows_for
from support_profiles import categorical_lightgbm, train_xgboost, without_covers

import silvanforge as sf
from silvanforge.errors import IRVerificationError
from silvanforge.frontend import hir_passes, profiling, tiling
from silvanforge.ir.hir import Aggregation, Tree
from silvanforge.runtime import reference

xgb = pytest.importorskip("xgboost")


# ----------------------------------------------------------------------------- counting
def _skewed_rows(rng, X, hot_fraction=0.95, n=2000):
    """Rows of which ``hot_fraction`` repeat one row (every tree sends them to one leaf)."""
    rows = X[rng.integers(0, len(X), n)].copy()
    rows[rng.random(rows.shape) < 0.05] = np.nan
    hot = X[0].copy()
    hot[1] = np.nan
    rows[rng.random(n) < hot_fraction] = hot
    return rows


def test_profile_of_a_real_xgboost_model_matches_its_leaves(tmp_path, rng):
    booster, X = train_xgboost(rng)
    path = tmp_path / "m.json"
    booster.save_model(path)
    X = X.copy()
    X[rng.random(X.shape) < 0.1] = np.nan
    p = sf.profile(path, X)
    forest = sf.load_model(path)
    # XGBoost numbers its nodes otherwise: compare the counts per leaf as multisets.
    leaves = booster.predict(xgb.DMatrix(X), pred_leaf=True).astype(np.int64)
    for t, tree in enumerate(forest.trees):
        ours = np.sort(p.hits[t][tree.left < 0])
        theirs = np.bincount(leaves[:, t])
        theirs = np.sort(np.concatenate([theirs[theirs > 0], np.zeros(len(ours) - np.count_nonzero(theirs), int)]))
        np.testing.assert_array_equal(ours, theirs, err_msg=f"tree {t}")


def test_profile_of_a_real_lightgbm_model_matches_its_leaves(tmp_path, rng):
    lgb = pytest.importorskip("lightgbm")
    X = rng.normal(size=(2000, 5))
    X[:, 3] = rng.integers(0, 6, 2000)
    y = X[:, 0] - X[:, 1] * (X[:, 3] > 2)
    booster = lgb.train({"objective": "regression", "num_leaves": 15, "verbose": -1, "num_threads": 1,
                         "min_data_in_leaf": 5}, lgb.Dataset(X, y, categorical_feature=[3]), 8)
    path = tmp_path / "m.txt"
    booster.save_model(path)
    X[rng.random(X.shape) < 0.1] = np.nan
    forest = sf.load_model(path)
    p = sf.profile(forest, X)
    leaves = booster.predict(X, pred_leaf=True).astype(np.int64)
    for t, tree in enumerate(forest.trees):
        ours = np.sort(p.hits[t][tree.left < 0])
        theirs = np.sort(np.bincount(leaves[:, t], minlength=len(ours)))
        np.testing.assert_array_equal(ours, theirs, err_msg=f"tree {t}")


@pytest.mark.parametrize("suffix", [".npz", ".json", ".prof"])
def test_profile_files_round_trip(tmp_path, rng, suffix):
    forest = _skewed_forest()
    p = sf.profile(forest, rows_for(forest, rng, 300))
    path = tmp_path / f"p{suffix}"
    p.save(path)
    assert path.exists()  # no suffix added
    back = sf.load_profile(path)
    assert back.num_rows == p.num_rows and back.fingerprint == forest.fingerprint()
    for a, b in zip(back.hits, p.hits):
        np.testing.assert_array_equal(a, b)
    if suffix == ".json":
        doc = json.loads(path.read_text())
        assert doc["format"] == "silvanforge-profile" and len(doc["trees"]) == forest.num_trees


def test_bad_profiles_are_input_errors(tmp_path, rng):
    forest = _skewed_forest()
    other = _skewed_forest(depth=5)
    p = sf.profile(other, rows_for(other, rng, 50))
    with pytest.raises(sf.InputError, match="another model"):
        sf.compile(forest, tile_size=4, profile=p)
    mine = sf.profile(forest, rows_for(forest, rng, 50))
    with pytest.raises(sf.InputError, match="padding"):
        sf.compile(forest, rep="sparse", profile=mine, pad=True)
    with pytest.raises(sf.InputError, match="padding"):
        sf.compile(forest, tile_size=4, profile=mine, pad=True)
    with pytest.raises(sf.InputError, match="not found"):
        sf.compile(forest, tile_size=4, profile=tmp_path / "missing.npz")
    junk = tmp_path / "junk.json"
    junk.write_text("{\"hello\": 1}")
    with pytest.raises(sf.InputError, match="not a SilvanForge profile"):
        sf.load_profile(junk)
    truncated = tmp_path / "t.npz"
    mine.save(truncated)
    truncated.write_bytes(truncated.read_bytes()[:40])
    with pytest.raises(sf.InputError, match="t.npz"):
        sf.load_profile(truncated)
    with pytest.raises(sf.InputError, match="features"):
        sf.profile(forest, np.zeros((3, forest.num_features + 1)))


# ----------------------------------------------------------------------------- skew
def _comb_tree(depth: int) -> Tree:
    """A complete tree of ``depth`` levels of splits on feature 0, thresholds in array order."""
    size = 2 ** (depth + 1) - 1
    k = np.arange(size)
    inner = 2 * k + 2 < size
    # In-order thresholds: x < threshold goes left, so a large x always goes right.
    return Tree.from_nodes(np.where(inner, 2 * k + 1, -1), np.where(inner, 2 * k + 2, -1),
                           np.where(inner, 0, -1), np.where(inner, _in_order(size), 0.0), k * 0.25)


def _in_order(size: int) -> np.ndarray:
    out = np.zeros(size)
    counter = iter(range(size))

    def visit(k):
        if 2 * k + 2 < size:
            visit(2 * k + 1)
            out[k] = next(counter)
            visit(2 * k + 2)

    visit(0)
    return out


def _skewed_forest(depth: int = 6, trees: int = 3) -> sf.Forest:
    return sf.Forest(trees=[_comb_tree(depth) for _ in range(trees)], num_features=1)


def _expected_tile_steps(tree: Tree, tiled: tiling.TiledTree, hits: np.ndarray) -> float:
    """The probability-based tiling draft's objective: sum over leaves of p_l times the leaf's depth
    in tiles."""
    depth = {}
    for i in range(tiled.num_tiles):  # tiles are numbered breadth first
        d = depth.setdefault(i, 1)
        for c in tiled.child_tile[i]:
            if c >= 0:
                depth[int(c)] = d + 1
    # A leaf behind several slots (dummies) counts once per slot: divide by its slot count.
    slots = np.bincount(tiled.child_node[tiled.child_tile < 0], minlength=tree.num_nodes)
    weights = np.where(slots > 0, hits / np.maximum(slots, 1), 0)
    total = sum(weights[node] * depth[i] for i in range(tiled.num_tiles)
                for slot, node in enumerate(tiled.child_node[i]) if tiled.child_tile[i, slot] < 0)
    return total / hits[0]


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_greedy_tiles_follow_the_hot_path(n, rng):
    forest = _skewed_forest()
    hot = np.full((950, 1), 1e9)  # always right: the rightmost leaf
    X = np.concatenate([hot, rng.uniform(-1, 80, size=(50, 1))])
    p = sf.profile(forest, X)
    tree, hits = forest.trees[0], p.hits[0]
    assert profiling.is_skewed(tree, hits, profiling.ALPHA, profiling.BETA)
    assert p.skewed(forest).all()
    greedy = tiling.tile_tree_by_probability(tree, n, hits)
    uniform = tiling.tile_tree(tree, n)
    tiling.verify_tiled_tree(tree, greedy, n)
    # The root tile holds the hottest path: the root and its right spine, n nodes deep (the
    # spine has 6 internal nodes; larger tiles add other nodes after it).
    spine = [0]
    while len(spine) < min(n, 6):
        spine.append(2 * spine[-1] + 2)
    assert set(spine) <= set(greedy.nodes[0].tolist())
    assert _expected_tile_steps(tree, greedy, hits) <= _expected_tile_steps(tree, uniform, hits)
    if n > 1:
        assert _expected_tile_steps(tree, greedy, hits) < _expected_tile_steps(tree, uniform, hits)


def test_uniform_trees_are_not_skewed(rng):
    forest = _skewed_forest()
    X = rng.uniform(-1, 64, size=(2000, 1))  # every leaf about equally likely
    p = sf.profile(forest, X)
    assert not p.skewed(forest).any()
    ids = tiling.probability_tile_ids(forest, p.hits, 4)
    assert ids == [None] * forest.num_trees
    # Without skew the compiled model is the uniformly tiled one.
    cf = sf.compile(forest, tile_size=4, profile=p)
    assert cf.summary()["probability_tiled_trees"] == 0
    assert cf.show("hir") == sf.compile(forest, tile_size=4).show("hir")


def test_skew_thresholds():
    tree = _comb_tree(5)  # 32 leaves
    leaves = np.flatnonzero(tree.left < 0)
    hits = np.zeros(tree.num_nodes, np.int64)
    hits[leaves] = 1
    hits[leaves[:2]] = 100  # 2 leaves (6% of 32) take 200 of 230 rows (87%)
    assert profiling.leaves_covering(hits[leaves], 0.85) == 2
    assert not profiling.is_skewed(tree, hits, 0.05, 0.9)
    assert profiling.is_skewed(tree, hits, 0.07, 0.85)
    assert not profiling.is_skewed(tree, np.zeros(tree.num_nodes, np.int64), 0.05, 0.9)


# ----------------------------------------------------------------------------- compiled
@pytest.mark.parametrize("objective", ["reg:squarederror", "multi:softprob"])
def test_probability_tiled_xgboost_is_bit_exact(tmp_path, rng, objective):
    extra = {"num_class": 3} if objective.startswith("multi") else {}
    booster, X = train_xgboost(rng, objective=objective, rounds=8, **extra)
    path = tmp_path / "m.json"
    booster.save_model(path)
    rows = _skewed_rows(rng, X)
    p = sf.profile(path, rows)
    forest = sf.load_model(path)
    assert p.skewed(forest).sum() > 0
    margin = booster.predict(xgb.DMatrix(rows), output_margin=True)
    probs = booster.predict(xgb.DMatrix(rows))
    for n in (3, 4, 8):
        cf = sf.compile(path, tile_size=n, profile=p)
        assert cf.summary()["probability_tiled_trees"] == p.skewed(forest).sum()
        tiled = tiling.tile_forest(tiling.with_tile_ids(forest, cf.tile_ids), n)
        tiling.verify_tiled_forest(forest, tiled)
        np.testing.assert_array_equal(cf.predict(rows, output_margin=True), margin)
        np.testing.assert_allclose(cf.predict(rows), probs, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(cf.predict(rows, output_margin=True),
                                      reference.predict(forest, rows, output_margin=True))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(), n=st.integers(2, 8), seed=st.integers(0, 2**16),
       schedule=st.sampled_from([None, "default", "reorder(tree, batch)"]))
def test_probability_tiled_random_forests_match_reference(forest, n, seed, schedule):
    rng = np.random.default_rng(seed)
    # Half of the rows repeat one row: the trees it reaches deep are skewed.
    X = rows_for(forest, rng, 200)
    X[: 190] = X[0]
    p = sf.profile(forest, X)
    cf = sf.compile(forest, tile_size=n, profile=p, schedule=schedule)
    assert cf.summary()["probability_tiled_trees"] == int(p.skewed(forest).sum())
    Y = rows_for(forest, rng, 120)
    for rows in (X, Y):
        np.testing.assert_array_equal(cf.predict(rows, output_margin=True),
                                      reference.predict(forest, rows, output_margin=True))


def test_artifact_keeps_the_probability_tiling(tmp_path, rng):
    forest = _skewed_forest(depth=7)
    X = np.concatenate([np.full((900, 1), 1e9), rng.uniform(-1, 200, (100, 1))])
    cf = sf.compile(forest, tile_size=3, profile=sf.profile(forest, X))
    assert cf.summary()["probability_tiled_trees"] == forest.num_trees
    path = tmp_path / "m.forge"
    cf.save(path)
    back = sf.load_compiled(path)
    assert [None if i is None else i.tolist() for i in back.tile_ids] == [i.tolist() for i in cf.tile_ids]
    assert back.show("hir") == cf.show("hir") and "tiled by probability" in back.show("hir")
    assert back.show("hir") != sf.compile(forest, tile_size=3).show("hir")
    for name, buf in cf.lir_module.buffers.items():
        if buf.data is not None:
            np.testing.assert_array_equal(back.lir_module.buffers[name].data, buf.data, err_msg=name)
    np.testing.assert_array_equal(back.predict(X), reference.predict(forest, X))


# ----------------------------------------------------------------------------- node order
def _subtree_internal(tree: Tree, node: int) -> int:
    if tree.left[node] < 0:
        return 0
    return 1 + _subtree_internal(tree, tree.left[node]) + _subtree_internal(tree, tree.right[node])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=6), seed=st.integers(0, 2**16))
def test_hot_first_order_is_a_depth_first_walk_entering_the_hotter_child(forest, seed):
    p = sf.profile(forest, rows_for(forest, np.random.default_rng(seed), 60))
    for tree, hits, ranks in zip(forest.trees, p.hits, tiling.probability_order_ids(forest, p.hits)):
        internal = np.flatnonzero(tree.left >= 0)
        if not len(internal):
            assert ranks is None
            continue
        assert (ranks[tree.left < 0] == -1).all()
        assert sorted(ranks[internal].tolist()) == list(range(len(internal)))
        for n in internal:
            hot, cold = ((tree.right[n], tree.left[n]) if hits[tree.right[n]] > hits[tree.left[n]]
                         else (tree.left[n], tree.right[n]))
            if tree.left[hot] >= 0:
                assert ranks[hot] == ranks[n] + 1
            if tree.left[cold] >= 0:
                assert ranks[cold] == ranks[n] + 1 + _subtree_internal(tree, hot)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=8), seed=st.integers(0, 2**16), batch=st.sampled_from([1, None]),
       schedule=st.sampled_from([None, "split-trees"]))
def test_node_ordered_sparse_walks_match_reference(forest, seed, batch, schedule):
    rng = np.random.default_rng(seed)
    X = rows_for(forest, rng, 80)
    p = sf.profile(forest, X)
    cf = sf.compile(forest, rep="sparse", batch_size=batch, profile=p, threads=2,
                    schedule=schedule if batch == 1 else None)
    assert all(i is not None for i, t in zip(cf.tile_ids, forest.trees) if t.left[0] >= 0)
    for rows in (X, rows_for(forest, rng, 30)):
        want = reference.predict(forest, rows, output_margin=True)
        np.testing.assert_array_equal(cf.predict(rows, output_margin=True), want)
        one = np.concatenate([cf.predict(rows[i:i + 1], output_margin=True) for i in range(8)])
        np.testing.assert_array_equal(one.reshape(want[:8].shape), want[:8])


def test_a_profile_orders_the_one_row_walk_of_the_plan_and_is_kept(tmp_path, rng):
    """Without tiles a profile is a hint: the plan keeps its forms (by the cost model), the
    walks that can place nodes (sparse) are laid out hot child first, and the layout survives
    artifacts (lowered again to the same program), pickles and the code cache."""
    import pickle

    booster, path, X = categorical_lightgbm(tmp_path, rng)
    forest = sf.load_model(path)
    p = sf.profile(forest, X)
    from silvanforge.options import CompileOptions

    every_band = CompileOptions(threads=1, plan_min_ns=0)  # a small model still gets a plan of forms
    # Without the model's covers, the one-row walk of the plain compile is breadth-first.
    plain = sf.compile(without_covers(forest), options=every_band)
    cf = sf.compile(path, options=every_band, profile=p)
    assert len(cf.forms) == len(plain.forms) > 1
    ordered = [f for f in cf.forms if f.tile_ids is not None]
    assert ordered and all(f.options.rep == "sparse" for f in ordered)
    assert cf.form_for(1) in ordered and cf.form_for(1).digest != plain.form_for(1).digest
    # the same nodes in another order: the child offsets moved, the thresholds are a permutation
    ours, theirs = cf.form_for(1).lir_module.buffers, plain.form_for(1).lir_module.buffers
    assert not np.array_equal(ours["sparse_child"].data, theirs["sparse_child"].data)
    np.testing.assert_array_equal(np.sort(ours["sparse_threshold"].data), np.sort(theirs["sparse_threshold"].data))
    want = booster.predict(X)
    np.testing.assert_allclose(cf.predict(X), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.concatenate([cf.predict(X[i:i + 1]) for i in range(40)]), want[:40],
                               rtol=1e-12, atol=1e-12)
    art = tmp_path / "m.forge"
    cf.save(art)
    with pytest.warns(sf.ArtifactWarning, match="not run"):
        relowered = sf.load_compiled(art)
    trusted = sf.load_compiled(art, trust_code=True)
    cache = tmp_path / "cache"
    sf.compile(path, options=every_band, profile=p, cache=cache)
    hit = sf.compile(path, options=every_band, profile=p, cache=cache)
    for back in (relowered, trusted, pickle.loads(pickle.dumps(cf)), hit):
        assert [f.digest for f in back.forms] == [f.digest for f in cf.forms]
        np.testing.assert_array_equal(back.predict(X[:1]), cf.predict(X[:1]))
        np.testing.assert_array_equal(back.predict(X), cf.predict(X))
    # An order that does not rank the internal nodes is refused, never laid out.
    from silvanforge.plan.forms import build_form
    bad = [None if i is None else np.where(i >= 0, 0, i) for i in cf.form_for(1).tile_ids]
    with pytest.raises(IRVerificationError, match="rank"):
        build_form(forest, cf.form_for(1).options, tile_ids=bad)


def test_the_tuner_orders_the_one_row_walk(monkeypatch, tmp_path, rng):
    """The untuned plan's one-row walk (in the training covers' order) is tried laid out in the
    sample's order; timings faked so that the sample's order wins: kept, and exact."""
    from silvanforge.plan import tuning

    def fake(cf, pool, size, threads):
        form = cf.forms[0]
        walk = form.options.rep == "sparse" and form.options.batch_size == 1
        return 1e-3 * (1.0 if not walk else 0.2 if form.order_by == "profile" else 0.5)

    monkeypatch.setattr(tuning, "_per_call", fake)
    booster, path, X = categorical_lightgbm(tmp_path, rng)
    forest = sf.load_model(path)
    assert sf.compile(forest, threads=1).form_for(1).options.rep == "sparse"
    tuned = sf.tune(forest, rows=X, threads=1, budget_s=20, sizes=(1, 16))
    forms = [c["form"] for c in tuned.tuning["candidates"]]
    assert sum("nodes=profile order" in f for f in forms) == 1, forms
    assert tuned.form_for(1).order_by == "profile" and tuned.form_for(1).options.rep == "sparse"
    got = np.concatenate([tuned.predict(X[i:i + 1]) for i in range(30)])
    np.testing.assert_allclose(got, booster.predict(X[:30]), rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- reordering
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=16), key=st.sampled_from(["depth", "peel"]), pad=st.sampled_from([None, True, False]),
       seed=st.integers(0, 2**16), batch=st.sampled_from([None, 4]))
def test_peel_groups_compile_to_the_reference(forest, key, pad, seed, batch):
    rng = np.random.default_rng(seed)
    X = rows_for(forest, rng, 150)
    cf = sf.compile(forest, reorder=key, pad=pad, batch_size=batch)
    assert cf.reorder == key
    want = reference.predict(forest, X, output_margin=True)
    got = cf.predict(X, output_margin=True)
    if forest.aggregation in (Aggregation.MIN, Aggregation.MAX):
        np.testing.assert_array_equal(got, want)
    else:  # the same additions in group order
        tol = 1e-5 if forest.accumulate_dtype == "float32" else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    text = cf.schedule.to_text()
    groups = hir_passes.reorder_trees(hir_passes.pad_each_tree(forest) if cf.pad else forest, key)[1]
    assert text.count("split(") == len(groups) - 1
    assert text.count("peelWalk(") == sum(g.peel > 0 for g in groups)


def test_group_peel_is_legal_per_group_only():
    shallow = _comb_tree(1)
    deep = _comb_tree(4)
    forest = sf.Forest(trees=[deep, shallow, deep], num_features=1)
    new, groups, _ = hir_passes.reorder_trees(forest, "depth")
    assert [(g.start, g.stop, g.peel) for g in groups] == [(0, 1, 1), (1, 3, 4)]
    sf.compile(new, schedule="split(tree, a, b, 1)\npeelWalk(b, 4)")
    with pytest.raises(sf.ScheduleError, match="trees 0..0"):
        sf.compile(new, schedule="split(tree, a, b, 1)\npeelWalk(a, 2)")
    with pytest.raises(sf.ScheduleError, match="the forest has a leaf at depth 1"):
        sf.compile(new, schedule="peelWalk(tree, 4)")
    X = np.linspace(-2, 20, 50)[:, None]
    cf = sf.compile(forest, reorder="depth", pad=False)
    assert "peelWalk(g0, 1)" in cf.schedule.to_text() and "peelWalk(g0_rest, 4)" in cf.schedule.to_text()
    np.testing.assert_array_equal(cf.predict(X), reference.predict(forest, X))


def test_reordered_artifact_round_trip(tmp_path, rng):
    forest = sf.Forest(trees=[_comb_tree(4), _comb_tree(1), _comb_tree(3)], num_features=1,
                       aggregation=Aggregation.MAX)
    cf = sf.compile(forest, reorder="peel", pad=False)
    cf.save(tmp_path / "r.forge")
    back = sf.load_compiled(tmp_path / "r.forge")
    assert back.reorder == "peel" and back.schedule == cf.schedule
    X = rng.uniform(-1, 20, (64, 1))
    np.testing.assert_array_equal(back.predict(X), reference.predict(forest, X))
    with pytest.raises(sf.InputError, match="reordering"):
        sf.compile(forest, reorder="width")


# ----------------------------------------------------------------------------- command line
def test_cli_profile(tmp_path, capsys, monkeypatch, rng):
    from silvanforge import cli

    monkeypatch.setenv("COLUMNS", "200")
    booster, X = train_xgboost(rng, rounds=6)
    model = tmp_path / "m.json"
    booster.save_model(model)
    rows = _skewed_rows(rng, X, n=400)
    data = tmp_path / "X.csv"
    np.savetxt(data, rows, delimiter=",")

    def forge(*args):
        code = cli.main([str(a) for a in args])
        return code, *capsys.readouterr()

    code, text, err = forge("profile", model, "--data", data)
    assert code == 0, err
    default_out = tmp_path / "m.profile.npz"
    assert default_out.exists() and "skewed trees" in text and "m.profile.npz" in text
    p = sf.load_profile(default_out)
    forest = sf.load_model(model)
    assert f"{int(p.skewed(forest).sum())} of {forest.num_trees}" in text
    want = sf.profile(forest, np.loadtxt(data, delimiter=","))
    for a, b in zip(p.hits, want.hits):
        np.testing.assert_array_equal(a, b)
    code, _, _ = forge("profile", model, "--data", data, "--out", tmp_path / "p.json")
    assert code == 0 and sf.load_profile(tmp_path / "p.json").num_rows == len(rows)

    art, out = tmp_path / "m.forge", tmp_path / "y.npy"
    code, text, err = forge("compile", model, "--tile-size", 4, "--profile", default_out, "-o", art)
    assert code == 0 and "probability-tiled trees" in text, err
    code, _, err = forge("predict", art, "-i", data, "-o", out, "--margin")
    assert code == 0, err
    np.testing.assert_array_equal(np.load(out), booster.predict(xgb.DMatrix(np.loadtxt(data, delimiter=",")),
                                                                 output_margin=True))
    code, _, err = forge("predict", model, "-i", data, "--tile-size", 3, "--profile", tmp_path / "p.json",
                         "--reorder", "depth")
    assert code == 0, err

    # One-line errors.
    narrow = tmp_path / "narrow.csv"
    np.savetxt(narrow, rows[:, :3], delimiter=",")
    for args, message in [
        (("profile", model, "--data", tmp_path / "missing.csv"), "not found"),
        (("profile", model, "--data", narrow), "expects 6 features"),
        (("profile", tmp_path / "nope.json", "--data", data), "not found"),
        (("profile", model, "--data", data, "--out", tmp_path / "no" / "p.npz"), "does not exist"),
        (("compile", model, "--rep", "sparse", "--profile", tmp_path / "missing.npz"), "not found"),
        (("compile", model, "--tile-size", 4, "--profile", tmp_path / "missing.npz"), "not found"),
        (("predict", art, "-i", data, "--profile", default_out), "already compiled"),
    ]:
        code, _, err = forge(*args)
        assert code != 0 and err.startswith("error:") and err.count("\n") == 1 and message in err, (args, err)

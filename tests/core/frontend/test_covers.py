"""The covers a model file keeps of its training rows (XGBoost's hessian sums, LightGBM's and
scikit-learn's row counts): read by the importers, they lay out the untuned plan's one-row walk
hot child first, as a profile does."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support_profiles import categorical_lightgbm, train_xgboost, without_covers

import silvanforge as sf
from silvanforge.frontend import tiling
from silvanforge.runtime import reference

xgb = pytest.importorskip("xgboost")


def _covers_add_up(forest: sf.Forest, rtol: float) -> None:
    """Every tree has a cover, and an internal node's is its children's sum."""
    for t in forest.trees:
        assert t.cover is not None and t.cover.shape == (t.num_nodes,)
        inner = np.flatnonzero(t.left >= 0)
        np.testing.assert_allclose(t.cover[inner], t.cover[t.left[inner]] + t.cover[t.right[inner]], rtol=rtol)
        assert (t.cover >= 0).all() and t.cover[0] > 0


def test_importers_read_the_training_covers(tmp_path, rng):
    """XGBoost's hessian sums, LightGBM's row counts and scikit-learn's (weighted) samples per
    node come in as each node's cover, renumbered with the nodes."""
    booster, _X = train_xgboost(rng, objective="multi:softprob", num_class=3)
    for name in ("m.json", "m.ubj"):
        booster.save_model(tmp_path / name)
        _covers_add_up(sf.load_model(tmp_path / name), rtol=1e-3)  # float32 sums
    lgb_booster, path, _X = categorical_lightgbm(tmp_path, rng)
    forest = sf.load_model(path)
    _covers_add_up(forest, rtol=0)
    assert forest.trees[0].cover[0] == 1500  # every training row reaches the root
    # A LightGBM file without counts (hand-written) loads without covers.
    text = "\n".join(line for line in path.read_text().splitlines()
                     if not line.startswith(("internal_count=", "leaf_count=", "tree_sizes=")))
    assert all(t.cover is None for t in sf.load_model(text.encode()).trees)
    ensemble = pytest.importorskip("sklearn.ensemble")
    X = rng.normal(size=(400, 4))
    y = (X[:, 0] > 0).astype(int)
    for est in (ensemble.RandomForestClassifier(n_estimators=5, random_state=0).fit(X, y),
                ensemble.HistGradientBoostingClassifier(max_iter=5).fit(X, y)):
        _covers_add_up(sf.load_model(est), rtol=1e-9)


def test_the_untuned_one_row_walk_follows_the_training_covers(tmp_path, rng):
    """Without a profile, the plan's one-row walk is laid out hot child first by the model's
    covers: exact at 1, 2 and more rows, kept by artifacts, pickles and the code cache, and a
    model without covers (or a user's profile) decides as before."""
    import pickle

    from silvanforge.options import CompileOptions

    booster, X = train_xgboost(rng, rows=4000, rounds=30, depth=7)
    path = tmp_path / "m.json"
    booster.save_model(path)
    X = X[:300].copy()
    X[rng.random(X.shape) < 0.05] = np.nan
    forest = sf.load_model(path)
    every_band = CompileOptions(threads=1, plan_min_ns=0)
    cf = sf.compile(path, options=every_band)
    one = cf.form_for(1)
    assert one.options.rep == "sparse" and one.order_by == "cover" and "nodes=training order" in one.text()
    want = tiling.cover_order_ids(forest)
    assert all(np.array_equal(a, b) for a, b in zip(one.tile_ids, want))
    bfs = sf.compile(without_covers(forest), options=every_band).form_for(1)
    assert bfs.tile_ids is None and bfs.digest != one.digest
    assert not np.array_equal(one.lir_module.buffers["sparse_child"].data, bfs.lir_module.buffers["sparse_child"].data)
    expect = booster.predict(xgb.DMatrix(X))
    for n in (1, 2, 3, 300):
        np.testing.assert_allclose(cf.predict(X[:n]), expect[:n], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.concatenate([cf.predict(X[i:i + 1]) for i in range(50)]),
                                  reference.predict(forest, X[:50]).astype(np.float32))
    art = tmp_path / "m.forge"
    cf.save(art)
    with pytest.warns(sf.ArtifactWarning, match="not run"):
        relowered = sf.load_compiled(art)
    cache = tmp_path / "cache"
    sf.compile(path, options=every_band, cache=cache)
    for back in (relowered, sf.load_compiled(art, trust_code=True), pickle.loads(pickle.dumps(cf)),
                 sf.compile(path, options=every_band, cache=cache)):
        assert [f.digest for f in back.forms] == [f.digest for f in cf.forms]
        assert back.form_for(1).order_by == "cover"
        np.testing.assert_array_equal(back.predict(X[:1]), cf.predict(X[:1]))
    assert all(t.cover is not None for t in relowered.forest.trees)  # the artifact keeps them
    # Covers are not predictions: the fingerprint ignores them, the code cache does not.
    from silvanforge.api import cache_key, compile_options
    opts = compile_options(every_band)
    assert without_covers(forest).fingerprint() == forest.fingerprint()
    assert cache_key(without_covers(forest), opts) != cache_key(forest, opts)
    # A user's profile decides the order over the covers.
    profiled = sf.compile(path, options=every_band, profile=sf.profile(forest, X)).form_for(1)
    assert profiled.order_by == "profile" and "nodes=profile order" in profiled.text()


def test_a_damaged_node_order_field_is_refused(tmp_path, rng):
    import zipfile

    booster, _X = train_xgboost(rng, rounds=20, depth=6)
    booster.save_model(tmp_path / "m.json")
    from silvanforge.options import CompileOptions

    cf = sf.compile(tmp_path / "m.json", options=CompileOptions(threads=1, plan_min_ns=0))
    cf.save(tmp_path / "m.forge")
    with zipfile.ZipFile(tmp_path / "m.forge") as z:
        members = {n: z.read(n) for n in z.namelist()}
    plan = json.loads(members["plan.json"])
    entry = next(e for e in plan["forms"] if e is not None and e["node_order"] == "cover")
    entry["node_order"] = "magic"
    members["plan.json"] = json.dumps(plan).encode()
    with zipfile.ZipFile(tmp_path / "bad.forge", "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    with pytest.raises(sf.ArtifactError, match="node_order"):
        sf.load_compiled(tmp_path / "bad.forge")


def test_covers_that_tell_nothing_or_do_not_read_leave_breadth_first(tmp_path, rng):
    """Covers never refuse a model nor fix a left-first order: LightGBM counts that do not read
    are left out, and trees whose covers are all alike (a converter's zeros) stay breadth first."""
    import dataclasses

    _booster, path, X = categorical_lightgbm(tmp_path, rng)
    text = path.read_text()
    bad = "\n".join(line.replace("leaf_count=", "leaf_count=x ", 1) if line.startswith("leaf_count=") else line
                    for line in text.splitlines() if not line.startswith("tree_sizes="))
    forest = sf.load_model(bad.encode())
    assert all(t.cover is None for t in forest.trees)
    np.testing.assert_array_equal(sf.compile(forest, threads=1).predict(X), sf.compile(path, threads=1).predict(X))
    good = sf.load_model(path)
    flat = dataclasses.replace(good, trees=[dataclasses.replace(t, cover=np.zeros(t.num_nodes)) for t in good.trees])
    assert tiling.cover_order_ids(flat) is None
    one = dataclasses.replace(good, trees=[dataclasses.replace(good.trees[0], cover=np.full(good.trees[0].num_nodes, 7.0))]
                              + good.trees[1:])
    ids = tiling.cover_order_ids(one)
    assert ids[0] is None and all(i is not None for t, i in zip(one.trees[1:], ids[1:]) if t.left[0] >= 0)
    # Artifacts keep the covers of the trees that have them, and none for the others.
    from silvanforge.ir import hir_io

    some = dataclasses.replace(good, trees=[dataclasses.replace(good.trees[0], cover=None)] + good.trees[1:])
    back = hir_io.from_arrays(hir_io.to_arrays(some))
    assert back.trees[0].cover is None
    assert all(np.array_equal(a.cover, b.cover) for a, b in zip(back.trees[1:], some.trees[1:]))


def test_an_estimator_and_a_frame_get_the_covers_order(rng):
    """Users hold objects: an XGBRegressor compiled as it is carries its covers, orders its
    one-row walk by them, predicts a DataFrame as the estimator does, and keeps the order
    through a pickle."""
    import pickle

    pd = pytest.importorskip("pandas")
    from silvanforge.options import CompileOptions

    X = rng.normal(size=(3000, 6)).astype(np.float32)
    y = X[:, 0] + X[:, 1] ** 2
    est = xgb.XGBRegressor(n_estimators=30, max_depth=7, n_jobs=1).fit(X, y)
    frame = pd.DataFrame(X[:200], columns=[f"f{i}" for i in range(6)])
    cf = sf.compile(est, options=CompileOptions(threads=1, plan_min_ns=0))
    assert cf.form_for(1).order_by == "cover"
    back = pickle.loads(pickle.dumps(cf))
    assert back.form_for(1).order_by == "cover" and back.form_for(1).digest == cf.form_for(1).digest
    want = est.predict(frame.to_numpy())
    for model in (cf, back):
        np.testing.assert_allclose(model.predict(frame), want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.concatenate([model.predict(frame.iloc[i:i + 1]) for i in range(20)]),
                                   want[:20], rtol=1e-6, atol=1e-6)

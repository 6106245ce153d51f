"""The amd target (OpenCL) runs here on PoCL and equals the reference evaluator and the libraries.

Every representation under every canned GPU schedule and variants of the GPU template
(tree threads, shared reduction, rows per thread with interleaving, cached trees, atomic
reduction), on models with NaNs, categorical splits, several outputs and float64 thresholds;
random forests with hypothesis; the errors a GPU schedule can meet; the command line.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silvanforge_gpu.template import TemplateParams, candidates, gpu_template
from strategies import forests, rows_for
from support_common import assert_close, without_opencl
from support_gpu import gpu_models

import silvanforge as sf
from silvanforge.plugins import registry
from silvanforge.runtime import reference
from silvanforge.scheduler import GPU_CANNED

if not registry().target_available("amd")[0]:
    without_opencl(registry().target_available("amd")[1], module=True)

REPS = ["array", "sparse", "reorg"]


def _tolerance(forest):
    # Tree-parallel schedules add partial sums in another order than the reference.
    return (1e-5, 1e-5) if np.dtype(forest.accumulate_dtype) == np.float32 else (1e-12, 1e-12)


def assert_matches_reference(cf, forest, X):
    rtol, atol = _tolerance(forest)
    for margin in (True, False):
        got = cf.predict(X, output_margin=margin)
        want = reference.predict(forest, X, output_margin=margin)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return gpu_models(tmp_path_factory.mktemp("gpu"))


# Every schedule runs with sparse; array and reorg run where their hooks differ most: cached
# trees (their own cache_trees ranges), shared reductions and the default.
OTHER_REPS = {None, "tahoe-shared-forest", "tahoe-shared-partial-forest", "cached-tree-chunks",
              "tree-threads-shared", "atomic"}


def _pairs(schedules):
    return [(rep, s) for s in schedules for rep in REPS if rep == "sparse" or s in OTHER_REPS]


@pytest.mark.parametrize("rep,schedule", _pairs([None, *GPU_CANNED, "gpu-template"]))
def test_canned_gpu_schedules_match_reference(models, rep, schedule):
    for path, X in models.values():
        forest = sf.load_model(path)
        cf = sf.compile(forest, target="amd", rep=rep, schedule=schedule)
        assert_matches_reference(cf, forest, X)


TEMPLATES = {
    "tree-threads-shared": TemplateParams(rows_per_block=8, tree_threads=5, shared_reduce=True),
    "rows-per-thread-interleaved": TemplateParams(rows_per_block=16, rows_per_thread=4, tree_threads=3,
                                                  interleave=2, unroll_walk=2),
    "no-cache": TemplateParams(rows_per_block=32, tree_threads=2, cache_rows=False),
}


@pytest.mark.parametrize("rep,name", _pairs(TEMPLATES))
def test_template_variants_match_reference(models, rep, name):
    for path, X in models.values():
        forest = sf.load_model(path)
        cf = sf.compile(forest, target="amd", rep=rep, schedule=gpu_template(forest, TEMPLATES[name]))
        assert not cf.lir_module.info["gpu_fallbacks"], cf.lir_module.info["gpu_fallbacks"]
        assert_matches_reference(cf, forest, X)


def test_shared_reduction_lives_in_shared_memory(models):
    path, X = models["xgb_multi"]
    forest = sf.load_model(path)
    cf = sf.compile(forest, target="amd", schedule=gpu_template(forest, TEMPLATES["tree-threads-shared"]))
    shared = [b.name for b in cf.lir_module.shared_buffers()]
    assert any(name.startswith("partial") for name in shared), shared
    assert not cf.lir_module.scratch_buffers()
    source = cf.show("target")
    assert "__local" in source and "barrier(" in source
    assert_matches_reference(cf, forest, X)


SCHEDULES = {
    # trees cached in shared memory, a chunk per grid.y block row: the fold is its own kernel
    "cached-tree-chunks": "tile(batch, b0, b1, 32)\ntile(tree, t0, t1, 4)\nreorder(b0, t0, b1, t1)\n"
                          "cache(t0)\ngpuDimension(b0, grid.x)\ngpuDimension(t0, grid.y)\n"
                          "gpuDimension(b1, block.x)",
    "atomic": "tile(batch, b0, b1, 16)\ntile(tree, t0, t1, 3)\nreorder(b0, b1, t0, t1)\n"
              "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)\ngpuDimension(t0, block.y)\natomicReduce(t0)",
    "trees-outer-rows-on-grid": "reorder(tree, batch)\ntile(batch, b0, b1, 64)\n"
                                "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)",
    "cpu-schedule": "tile(batch, b0, b1, 64)\nreorder(b0, tree, b1)\ntile(b1, c0, c1, 8)\ninterleave(c1)\n"
                    "parallel(b0)",
    "specialized-trees": "tile(batch, b0, b1, 32)\nreorder(b0, b1, tree)\nspecialize(tree)\n"
                         "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)",
    # each tree's walk as nested branches (it read rows through a method GPU code did not take)
    "expanded-trees": "tile(batch, b0, b1, 32)\nreorder(b0, b1, tree)\nunroll(tree)\nexpandWalk(tree)\n"
                      "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)",
}


@pytest.mark.parametrize("rep,name", _pairs(SCHEDULES))
def test_other_gpu_schedules_match_reference(models, rep, name):
    for path, X in models.values():
        forest = sf.load_model(path)
        cf = sf.compile(forest, target="amd", rep=rep, schedule=SCHEDULES[name])
        assert_matches_reference(cf, forest, X)


def test_cached_trees_read_shared_memory(models):
    path, X = models["xgb_multi"]
    cf = sf.compile(path, target="amd", rep="sparse", schedule=SCHEDULES["cached-tree-chunks"])
    shared = [b.name for b in cf.lir_module.shared_buffers()]
    assert any(name.startswith("sparse_threshold") for name in shared), shared
    assert len(cf.lir_module.functions) >= 3  # init, walks, the fold across grid blocks
    assert_matches_reference(cf, cf.forest, X)


def test_library_cases_on_default_gpu_schedule(model_cases):
    for library in ("xgboost", "lightgbm", "onnx"):
        for case in model_cases[library].all(quick=True):
            cf = sf.compile(case.path, target="amd")
            forest = cf.forest
            rtol, atol = _tolerance(forest)
            case = dataclasses.replace(case, rtol=max(case.rtol, rtol), atol=max(case.atol, atol))
            assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=9, max_depth=5), rep=st.sampled_from(REPS), seed=st.integers(0, 2**16),
       rows_per_block=st.sampled_from([1, 4, 16]), rows_per_thread=st.sampled_from([1, 2, 4]),
       tree_threads=st.integers(1, 4), shared=st.booleans(), cache=st.booleans(),
       n=st.sampled_from([1, 5, 70]))
def test_random_forests_and_templates(forest, rep, seed, rows_per_block, rows_per_thread, tree_threads,
                                      shared, cache, n):
    params = TemplateParams(rows_per_block=rows_per_block, rows_per_thread=rows_per_thread,
                            tree_threads=tree_threads, shared_reduce=shared, cache_rows=cache,
                            interleave=rows_per_thread)
    X = rows_for(forest, np.random.default_rng(seed), n)
    cf = sf.compile(forest, target="amd", rep=rep, schedule=gpu_template(forest, params))
    assert_matches_reference(cf, forest, X)


def test_batch_edges_orders_and_threads(models):
    path, X = models["xgb_multi"]
    forest = sf.load_model(path)
    cf = sf.compile(path, target="amd", batch_size=64)
    want = reference.predict(forest, X)
    for rows in (X[:0], X[:1], np.asfortranarray(X), X[::3], X.astype(np.float64)):
        got = cf.predict(rows)
        np.testing.assert_allclose(got, reference.predict(forest, np.asarray(rows, np.float32)),
                                   rtol=1e-5, atol=1e-6)
    results = [None] * 4

    def work(i):
        results[i] = cf.predict(X)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for r in results:
        np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-6)
    assert set(cf.kernel.last_timing) == {"kernel", "total"}
    assert 0 < cf.kernel.last_timing["kernel"] <= cf.kernel.last_timing["total"]


def test_save_and_load(models, tmp_path):
    path, X = models["lgb_cat"]
    cf = sf.compile(path, target="amd", rep="reorg")
    cf.save(tmp_path / "m.forge")
    back = sf.load_compiled(tmp_path / "m.forge")
    assert back.target == "amd" and back.rep == "reorg"
    np.testing.assert_array_equal(back.predict(X), cf.predict(X))


def test_candidates_follow_algorithm_1(models):
    forest = sf.load_model(models["xgb_multi"][0])
    small = candidates(forest, 512)
    large = candidates(forest, 65536)
    assert {c.rows_per_block for c in small} == {8, 32} and {c.tree_threads for c in small} == {20, 50}
    assert {c.rows_per_block for c in large} == {32, 64} and {c.tree_threads for c in large} == {2, 10}
    assert {c.interleave for c in large} == {1, 2, 4}


# ----------------------------------------------------------------------------- errors
def test_gpu_schedule_errors(models):
    forest = sf.load_model(models["xgb_multi"][0])
    with pytest.raises(sf.ScheduleError, match="more than 1024"):
        sf.compile(forest, target="amd", schedule="tile(batch, b0, b1, 2048)\ngpuDimension(b0, grid.x)\n"
                                                  "gpuDimension(b1, block.x)")
    with pytest.raises(sf.ScheduleError, match="not under a loop mapped to block.y"):
        sf.compile(forest, target="amd", schedule="tile(batch, b0, b1, 32)\nsplit(tree, t0, t1, 5)\n"
                                                  "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)\n"
                                                  "gpuDimension(t0, block.y)")
    with pytest.raises(sf.ScheduleError, match="trip count"):
        sf.compile(forest, target="amd", schedule="gpuDimension(batch, block.x)")
    with pytest.raises(sf.ScheduleError, match="CPU"):
        sf.compile(forest, target="amd", tile_size=4)


def test_caches_that_do_not_fit_fall_back(tmp_path):
    import xgboost as xgb

    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 700)).astype(np.float32)
    y = X[:, 0] + X[:, 699]
    xgb.train({"max_depth": 3}, xgb.DMatrix(X, y), 5).save_model(tmp_path / "wide.json")
    forest = sf.load_model(tmp_path / "wide.json")
    cf = sf.compile(forest, target="amd", schedule="tile(batch, b0, b1, 64)\ngpuDimension(b0, grid.x)\n"
                                                   "gpuDimension(b1, block.x)\ncache(b0)")
    assert any("do not fit" in f for f in cf.lir_module.info["gpu_fallbacks"])
    assert_matches_reference(cf, forest, X)


# ----------------------------------------------------------------------------- command line
def test_cli_compile_predict_show(models, tmp_path, capsys, monkeypatch):
    from silvanforge import cli

    monkeypatch.setenv("COLUMNS", "200")

    def forge(*args):
        code = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    path, X = models["xgb_multi"]
    out = tmp_path / "m.forge"
    code, text, err = forge("compile", path, "--rep", "reorg", "--target", "amd", "-o", out)
    assert code == 0, err
    assert "reorg" in text and "amd" in text
    np.savetxt(tmp_path / "x.csv", X[:50], delimiter=",")
    code, text, err = forge("predict", out, "--input", tmp_path / "x.csv", "--output", tmp_path / "y.npy")
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), reference.predict(sf.load_model(path), X[:50]),
                               rtol=1e-5, atol=1e-6)
    code, text, _ = forge("show", path, "--level", "target", "--target", "amd")
    assert code == 0 and "__kernel void predict_" in text
    code, text, _ = forge("show", path, "--level", "target", "--target", "cuda")
    assert code == 0 and '__global__ void predict_' in text
    (tmp_path / "bad.sched").write_text("gpuDimension(batch, block.x)\n")
    code, text, err = forge("compile", path, "--target", "amd", "--schedule", tmp_path / "bad.sched")
    assert code != 0 and "Traceback" not in err + text and "trip count" in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1


def test_tune_times_candidates_and_keeps_the_fastest(models, tmp_path):
    from silvanforge_gpu.explore import explore

    path, X = models["xgb_multi"]
    forest = sf.load_model(path)
    params = [TemplateParams(rows_per_block=8, tree_threads=4), TemplateParams(rows_per_block=32, tree_threads=1)]
    result = explore(forest, "amd", 256, reps=("sparse",), params=params, repeat=1)
    # both candidates, then the best tree-threaded one again with shared reduction
    assert len(result.trials) == 3 and any(t.params.shared_reduce for t in result.trials)
    assert result.best.seconds == min(t.seconds for t in result.trials)
    cf = sf.compile(forest, target="amd", rep=result.best.rep, schedule=result.schedule)
    assert_matches_reference(cf, forest, X)


def test_forge_tune_gpu_comes_from_the_gpu_backend(models, tmp_path, capsys, monkeypatch):
    """`forge tune-gpu` is silvanforge-gpu's command (entry point silvanforge.commands): it times
    the candidates on the target and writes the fastest schedule, which compiles and matches
    (`forge tune` is the core's CPU plan search, which sends GPU targets here)."""
    from silvanforge_gpu import explore

    from silvanforge import cli

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(explore, "candidates", lambda forest, batch_size: [TemplateParams(rows_per_block=16)])
    path, X = models["xgb_multi"]
    out = tmp_path / "best.sched"
    code = cli.main(["tune-gpu", str(path), "--target", "amd", "--batch-size", "64", "--repeat", "1", "-o", str(out)])
    text, err = capsys.readouterr()
    assert code == 0, err
    assert "best: --rep" in text and "gpuDimension(b0, grid.x)" in out.read_text()
    rep = text.split("best: --rep ")[1].split()[0]
    assert_matches_reference(sf.compile(path, target="amd", rep=rep, schedule=out), sf.load_model(path), X)
    assert cli.main(["tune-gpu", str(path), "--target", "cpu"]) != 0
    assert "not a GPU target" in capsys.readouterr().err


def _two_candidates(monkeypatch, passed_over: bool = True):
    """Algorithm 1 reduced to one candidate per batch size (one for small requests, one for
    large), walked by one representation: few OpenCL builds.  ``passed_over``: with a second
    candidate of 1600 threads a block (50 tree threads) that the device refuses for a model of
    50 trees or more, recorded as passed over (a model of fewer trees takes fewer threads: it
    may run, and win every size, so a test of one band a size leaves it out)."""
    from silvanforge_gpu import explore

    monkeypatch.setattr(explore, "candidates", lambda forest, batch_size: [
        TemplateParams(rows_per_block=8 if batch_size <= 64 else 32)]
        + [TemplateParams(rows_per_block=32, tree_threads=50)] * passed_over)
    real = explore.explore
    monkeypatch.setattr(explore, "explore", lambda *a, **k: real(*a, **{**k, "reps": ("sparse",)}))


def test_sf_tune_on_a_gpu_target_keeps_a_plan_and_its_record(models, tmp_path, monkeypatch):
    """sf.tune on a GPU target runs Algorithm 1 per band of rows (the target's Target.tune) and
    keeps the winners and the record as a CPU plan does: saved, loaded without exploring, exact
    against the reference, and given up with a warning on another device."""
    from silvanforge_gpu import explore
    from silvanforge_target_amd import AmdTarget

    _two_candidates(monkeypatch)
    path, X = models["xgb_multi"]
    forest = sf.load_model(path)
    tuned = sf.tune(path, rows=X[:50], target="amd", sizes=(64, 512), budget_s=60)
    record = tuned.tuning
    assert record["target"] == "amd" and record["host"] == registry().target("amd").host_key()
    assert record["sizes"] == [64, 512] and record["rows"] == "the caller's sample"
    assert record["versions"]["silvanforge"] == sf.__version__
    timed = [c for c in record["candidates"] if "error" not in c]
    assert [set(c["us_per_call"]) for c in timed] == [{"64"}, {"512"}]
    assert "rows/block=8" in timed[0]["form"]
    errors = [c["error"] for c in record["candidates"] if "error" in c]
    assert len(errors) == 1 and "threads is more than 1024" in errors[0]  # 32 rows x 36 tree threads
    assert record["winners"] == [{"rows": "1-288", "candidate": record["candidates"].index(timed[0])},
                                 {"rows": "289+", "candidate": record["candidates"].index(timed[1])}]
    assert [(b.lo, b.hi) for b in tuned.bands] == [(1, 288), (289, None)] and len(tuned.forms) == 2
    assert [f.options.rep for f in tuned.forms] == ["sparse", "sparse"]
    assert "tile(batch, b0, b1, 8)" in tuned.forms[0].options.schedule.to_text()
    for n in (1, 5, 288, 289, 600):
        assert_matches_reference(tuned, forest, X[:n])

    out = tmp_path / "tuned.forge"
    tuned.save(out)
    monkeypatch.setattr(explore, "explore", lambda *a, **k: pytest.fail("a load explored again"))
    back = sf.load_compiled(out)
    assert back.tuning == record and [(b.lo, b.hi, b.form) for b in back.bands] == \
        [(b.lo, b.hi, b.form) for b in tuned.bands]
    assert [f.options.schedule.to_text() for f in back.forms] == [f.options.schedule.to_text() for f in tuned.forms]
    assert_matches_reference(back, forest, X)
    monkeypatch.setattr(AmdTarget, "host_key", lambda self: '{"device": "another GPU"}')
    with pytest.warns(sf.ArtifactWarning, match="tuned on another host"):
        elsewhere = sf.load_compiled(out)
    assert elsewhere.tuning is None and len(elsewhere.forms) == 1
    assert_matches_reference(elsewhere, forest, X)


def test_forge_tune_on_a_gpu_target(models, tmp_path, capsys, monkeypatch):
    from silvanforge import cli

    monkeypatch.setenv("COLUMNS", "200")
    _two_candidates(monkeypatch, passed_over=False)  # one candidate a size: a band each
    path, X = models["lgb_cat"]
    out = tmp_path / "t.forge"
    code = cli.main(["tune", str(path), "--target", "amd", "--budget", "60", "--sizes", "32,256", "-o", str(out)])
    text, err = capsys.readouterr()
    assert code == 0, err
    assert "plan (tuned on this host)" in text and "rows 1-144" in text
    assert cli.main(["show", str(out), "--tuning"]) == 0
    shown = capsys.readouterr().out
    assert "256 rows" in shown and "rows/block=8" in shown and "winners: 1-144 rows: candidate" in shown
    assert_matches_reference(sf.load_compiled(out), sf.load_model(path), X)

"""Tiled walks (the Treebeard paper draft, sections 'Tiling' to 'In Memory Representation of
Tiled Trees') compiled with the sparse representation against the reference evaluator and the
libraries (test_tiling_shapes.py, beside this file, tests the shapes, the look-up table and the
tiled trees)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, rows_for, seeded_forest, stump_forest
from support_common import assert_close

import silvanforge as sf
from silvanforge.runtime import reference


@pytest.mark.parametrize("bad", [0, 9, -1, 2.5, True, "4"])
def test_lower_checks_the_tile_size(bad):
    with pytest.raises(sf.InputError, match="tile_size"):
        sf.lower(stump_forest(), tile_size=bad)


SCHEDULES = [None, "reorder(tree, batch)", "interleaved", "tile(tree, t0, t1, 3)\nparallel(t0)"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(), n=st.integers(2, 8), schedule=st.sampled_from(SCHEDULES),
       seed=st.integers(0, 2**16), rows=st.sampled_from([0, 1, 9, 300]))
def test_tiled_walks_match_reference(forest, n, schedule, seed, rows):
    X = rows_for(forest, np.random.default_rng(seed), rows)
    cf = sf.compile(forest, rep="sparse", schedule=schedule, tile_size=n)
    assert cf.tile_size == n
    for margin in (True, False):
        got = cf.predict(X, output_margin=margin)
        want = reference.predict(forest, X, output_margin=margin)
        assert got.shape == want.shape
        if schedule is not None and "parallel(t0)" in schedule:
            # Trees summed in parts, then the parts: another order of the same additions.
            rtol = 1e-5 if forest.accumulate_dtype == "float32" else 1e-12
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [3, 5])
def test_padded_forest_with_peeled_tile_steps(n, rng):
    # Padding makes node depths uniform but not tile depths: peeled steps are capped at the
    # shallowest tile leaf, so the target's peeled default stays exact.
    forest = seeded_forest(7)
    X = rows_for(forest, rng, 200)
    want = reference.predict(forest, X)
    low = sf.lower(forest, pad=True, tile_size=n)
    assert "peelWalk" in low.schedule.to_text()
    for schedule in (None, "tile(batch, b0, b1, 4)\nreorder(b0, tree, b1)\ninterleave(b1)\nunrollWalk(b1, 2)"):
        cf = sf.compile(forest, pad=True, tile_size=n, schedule=schedule)
        np.testing.assert_array_equal(cf.predict(X), want)


def test_defaults_do_not_tile():
    forest = seeded_forest(3)
    cf = sf.compile(forest)
    assert cf.tile_size == 1 and cf.summary()["tile_size"] == 1
    assert "tile_lut" not in cf.lir_module.buffers and "tile_size" not in cf.show("lir").splitlines()[0]
    low = sf.lower(forest, tile_size=4)
    assert not low.pad  # padding never chosen for tiled walks
    assert "tile_lut" in low.lir.buffers and "tile_size=4" in sf.show(forest, "lir", tile_size=4)


def test_tile_steps_are_vector_code_without_categorical_splits():
    numeric = seeded_forest(3, categorical=False)
    text = sf.show(numeric, "lir", tile_size=4, schedule="default")
    assert "packbits(" in text and "f32x4" in text and "i32x4" in text
    # The tile's thresholds and flags are one load each (consecutive elements).
    assert "= sparse_threshold[(%node" in text and " +: 4]" in text
    categorical = seeded_forest(3, categorical=True)
    assert categorical.has_categorical()
    text = sf.show(categorical, "lir", tile_size=4, schedule="default")
    assert "packbits(" not in text and "x4" not in text


@pytest.mark.parametrize("rep", ["array", "reorg"])
def test_other_representations_refuse_tiles(rep):
    with pytest.raises(sf.UnsupportedModelError, match="sparse"):
        sf.compile(seeded_forest(1), rep=rep, tile_size=4)


def test_tiled_artifact_round_trip(tmp_path, rng):
    forest = seeded_forest(5)
    cf = sf.compile(forest, tile_size=4)
    path = tmp_path / "tiled.sfc"
    cf.save(path)
    back = sf.load_compiled(path)
    assert back.tile_size == 4 and "tile_lut" in back.lir_module.buffers
    X = rows_for(forest, rng, 100)
    np.testing.assert_array_equal(back.predict(X), reference.predict(forest, X))
    assert "tiling tile_size=4" in back.show("hir")


def test_show_hir_prints_tiles():
    text = sf.show(stump_forest(depth=2), "hir", tile_size=2)
    assert "tiling tile_size=2 shapes=2" in text and "tile 0 shape=" in text
    assert "tiling" not in sf.show(stump_forest(depth=2), "hir")


# ----------------------------------------------------------------------------- library models
@pytest.fixture(scope="module", params=["xgboost", "lightgbm", "onnx"])
def quick_cases(request, model_cases):
    return model_cases[request.param].all(quick=True)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_tiled_library_models(quick_cases, n):
    assert quick_cases
    for case in quick_cases:
        cf = sf.compile(case.path, tile_size=n)
        assert cf.rep == "sparse"
        assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)
        if case.expected_margin is not None:
            assert_close(cf.predict(case.X, output_margin=True, **case.predict_kwargs),
                         case.expected_margin, case, "margins")


# ----------------------------------------------------------------------------- command line
def test_cli_tile_size(tmp_path, capsys, monkeypatch):
    from silvanforge_bench import bench

    from silvanforge import cli

    monkeypatch.setenv("COLUMNS", "200")
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 4))
    y = X[:, 0] - X[:, 1]
    X[rng.random(X.shape) < 0.1] = np.nan
    booster = xgb.train({"max_depth": 4, "nthread": 1}, xgb.DMatrix(X, label=y), 5)
    model, art, rows, out = (tmp_path / name for name in ("m.json", "m.sfc", "X.npy", "y.npy"))
    booster.save_model(model)
    np.save(rows, X)

    def forge(*args):
        code = cli.main([str(a) for a in args])
        return code, *capsys.readouterr()

    code, text, _ = forge("compile", model, "--tile-size", 4, "-o", art)
    assert code == 0 and "tile size" in text
    code, _, _ = forge("predict", art, "-i", rows, "-o", out)
    assert code == 0
    want = booster.predict(xgb.DMatrix(X))
    np.testing.assert_allclose(np.load(out), want, rtol=1e-6, atol=1e-6)
    code, _, err = forge("predict", art, "-i", rows, "--tile-size", 2)
    assert code != 0 and "tile-size" in err
    code, text, _ = forge("show", model, "--level", "hir", "--tile-size", 3)
    assert code == 0 and "tiling tile_size=3" in text
    code, text, _ = forge("show", model, "--level", "lir", "--tile-size", 3)
    assert code == 0 and "tile_lut" in text
    code, _, err = forge("show", model, "--level", "lir", "--tile-size", 3, "--rep", "array")
    assert code != 0 and "sparse" in err
    report = bench.run_bench(model, [16], threads=1, repeat=1, min_time=0.0, peers=[], tile_size=4)
    assert report.tile_size == 4 and "tile size 4" in bench.describe(report)

"""The cuda target: its CUDA C compiles to PTX for sm_80 and sm_90 with nvcc (no GPU needed), and
on an NVIDIA GPU (tests marked ``gpu``) its predictions equal the reference and the libraries."""

from __future__ import annotations

import numpy as np
import pytest
from silvanforge_gpu.template import TemplateParams, gpu_template
from support_gpu import gpu_models, real_shaped_models

import silvanforge as sf
from silvanforge.runtime import reference
from silvanforge.scheduler import GPU_CANNED

cuda_target = pytest.importorskip("silvanforge_target_cuda")

SCHEDULES = {
    **{name: name for name in (*GPU_CANNED, "gpu-template")},
    "atomic": "tile(batch, b0, b1, 16)\ntile(tree, t0, t1, 3)\nreorder(b0, b1, t0, t1)\n"
              "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)\ngpuDimension(t0, block.y)\natomicReduce(t0)",
    "cached-tree-chunks": "tile(batch, b0, b1, 32)\ntile(tree, t0, t1, 4)\nreorder(b0, t0, b1, t1)\n"
                          "cache(t0)\ngpuDimension(b0, grid.x)\ngpuDimension(t0, grid.y)\n"
                          "gpuDimension(b1, block.x)",
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return gpu_models(tmp_path_factory.mktemp("cuda"))


def _schedule(forest, name):
    if name == "shared-template":
        return gpu_template(forest, TemplateParams(rows_per_block=8, tree_threads=5, shared_reduce=True,
                                                   rows_per_thread=2, interleave=2))
    return SCHEDULES[name]


@pytest.mark.skipif(cuda_target.find_nvcc() is None, reason="nvcc is not installed")
@pytest.mark.parametrize("rep,name", [("sparse", n) for n in [*SCHEDULES, "shared-template"]]
                         + [("array", "shared-template"), ("reorg", "cached-tree-chunks"),
                            ("array", "tahoe-shared-partial-forest")])
def test_cuda_source_compiles_to_ptx(models, rep, name):
    for path, _ in models.values():
        forest = sf.load_model(path)
        low = sf.lower(forest, target="cuda", rep=rep, schedule=_schedule(forest, name))
        source = cuda_target.source(low.lir)
        for arch in ("sm_80", "sm_90"):
            ptx = cuda_target.compile_ptx(source, arch)
            assert f".target {arch}" in ptx
            for fn in low.lir.functions:
                assert f".entry {fn.name}(" in ptx


def test_nvcc_errors_are_reported(monkeypatch):
    if cuda_target.find_nvcc() is None:
        with pytest.raises(sf.PluginError, match="nvcc"):
            cuda_target.compile_ptx("", "sm_80")
        return
    with pytest.raises(sf.PluginError, match="nvcc failed"):
        cuda_target.compile_ptx("this is not CUDA", "sm_80")


def test_unavailable_cuda_says_why(models):
    from silvanforge.plugins import registry

    ok, why = registry().target_available("cuda")
    if ok:
        pytest.skip("this machine can run CUDA")
    assert why
    with pytest.raises(sf.PluginError, match="cannot run on this machine"):
        sf.compile(models["xgb_multi"][0], target="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("rep", ["array", "sparse", "reorg"])
@pytest.mark.parametrize("name", [None, *SCHEDULES, "shared-template"])
def test_cuda_matches_reference(models, rep, name):
    for path, X in models.values():
        forest = sf.load_model(path)
        cf = sf.compile(forest, target="cuda", rep=rep, schedule=None if name is None else _schedule(forest, name))
        tol = 1e-5 if np.dtype(forest.accumulate_dtype) == np.float32 else 1e-12
        for margin in (True, False):
            np.testing.assert_allclose(cf.predict(X, output_margin=margin),
                                       reference.predict(forest, X, output_margin=margin), rtol=tol, atol=tol)
        assert cf.kernel.last_timing["kernel"] <= cf.kernel.last_timing["total"]


@pytest.mark.gpu
def test_cuda_save_load_and_library(models, tmp_path):
    import xgboost as xgb

    path, X = models["xgb_multi"]
    cf = sf.compile(path, target="cuda")
    cf.save(tmp_path / "m.forge")
    back = sf.load_compiled(tmp_path / "m.forge")
    np.testing.assert_array_equal(back.predict(X), cf.predict(X))
    booster = xgb.Booster(model_file=str(path))
    want = booster.predict(xgb.DMatrix(X, enable_categorical=True))
    np.testing.assert_allclose(cf.predict(X), want, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("copy", ["pageable", "staged", "registered"])
def test_cuda_every_way_of_copying_rows(models, copy):
    from silvanforge_target_cuda.copying import copy_settings

    with copy_settings(copy=copy, register_min_bytes=1 << 12):
        _every_model_exact_on_cuda(models)


def _every_model_exact_on_cuda(models):
    for path, X in models.values():
        forest = sf.load_model(path)
        cf = sf.compile(forest, target="cuda")
        rows = np.concatenate([X] * 8)  # past register_min_bytes
        rows = rows[np.random.default_rng(3).permutation(len(rows))]
        want = reference.predict(forest, rows, output_margin=True)
        tol = 1e-5 if np.dtype(forest.accumulate_dtype) == np.float32 else 1e-12
        for _ in range(2):  # buffers reused (and pages registered again) on the second call
            np.testing.assert_allclose(cf.predict(rows, output_margin=True), want, rtol=tol, atol=tol)
        half = np.asfortranarray(rows[: len(rows) // 2])  # column-major rows: strides passed through
        np.testing.assert_allclose(cf.predict(half, output_margin=True), want[: len(half)], rtol=tol, atol=tol)


@pytest.mark.skipif(cuda_target.find_nvcc() is None, reason="nvcc is not installed")
def test_real_shaped_models_compile_to_ptx_for_sm_90(tmp_path):
    """The CUDA code of every benchmark-shaped model, under the default GPU schedule for small
    and for large batches, compiles to PTX for sm_90 (one nvcc run: the kernels of each program
    renamed apart in one file)."""
    import re

    paths = real_shaped_models(tmp_path)
    sources, entries = [], []
    for name, path in paths.items():
        forest = sf.load_model(path)
        for batch in ((4096,) if forest.num_trees >= 1000 else (4096, 65536)):
            low = sf.lower(forest, target="cuda", batch_size=batch)
            prefix = f"{name}_{batch}_"
            source = re.sub(r"\bpredict_(\d+)\b", prefix + r"predict_\1", cuda_target.source(low.lir))
            sources.append(f"// {name}, batch {batch}\n{source}")
            entries += [prefix + fn.name for fn in low.lir.functions]
    assert "double" in next(s for s in sources if "lgb_float64" in s)
    ptx = cuda_target.compile_ptx("\n".join(sources), "sm_90")
    assert ".target sm_90" in ptx
    for entry in entries:
        assert f".entry {entry}(" in ptx


@pytest.mark.gpu
def test_real_shaped_models_match_reference_on_cuda(tmp_path):
    """Every benchmark-shaped model on the GPU, host rows and (with CuPy) device rows, equal to
    the reference evaluator."""
    from silvanforge.frontend.sampling import random_rows

    cp = None
    try:
        import cupy as cp
    except ImportError:
        pass
    for name, path in real_shaped_models(tmp_path).items():
        forest = sf.load_model(path)
        cf = sf.compile(path, target="cuda")
        X = random_rows(forest, 3000, seed=3).astype(cf.main.input_dtype)
        X[np.random.default_rng(4).random(X.shape) < 0.03] = np.nan
        for margin in (True, False):
            want = reference.predict(forest, X, output_margin=margin)
            np.testing.assert_allclose(cf.predict(X, output_margin=margin), want, rtol=1e-5, atol=1e-6, err_msg=name)
            if cp is not None:
                got = cf.predict(cp.asarray(X), output_margin=margin)
                np.testing.assert_allclose(cp.asnumpy(got), want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.gpu
def test_the_cuda_target_conforms():
    from silvanforge import testing

    result = testing.check_target("cuda", seeds=range(8))
    assert result.cases >= 8

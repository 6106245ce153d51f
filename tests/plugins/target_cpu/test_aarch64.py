"""AArch64 code for the importers' test models equals the reference evaluator, run under qemu.

Each model's plan (every form, as the untuned compile makes it) is compiled for AArch64 by the
cpu target's cross compiler and run by qemu-aarch64 through the core's runtime
(tests/support_qemu.py); margins must equal the reference's exactly.  Where qemu or the AArch64
cross compiler is missing the module skips, except under ``SILVANFORGE_REQUIRE_AARCH64=1``
(which ``.ci/run`` sets after installing them), where it fails: CI never passes without it.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import support_qemu

import silvanforge as sf
from silvanforge.inputs.rows import as_rows
from silvanforge.runtime import reference

why = support_qemu.missing()
if why:
    if os.environ.get("SILVANFORGE_REQUIRE_AARCH64", "") not in ("", "0"):
        pytest.fail(f"SILVANFORGE_REQUIRE_AARCH64 is set, but {why}", pytrace=False)
    pytest.skip(f"AArch64 under qemu: {why}", allow_module_level=True)

ROWS = 40


def _sklearn_cases(tmp_path):
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor

    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 6))
    y = X[:, 0] * X[:, 1] + np.sin(X[:, 2])
    return [("sklearn_rf", RandomForestRegressor(n_estimators=8, max_depth=6, random_state=0).fit(X, y), X),
            ("sklearn_gbc", GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0)
             .fit(X, y > 0), X)]


def _catboost_cases(tmp_path):
    catboost = pytest.importorskip("catboost")
    import pandas as pd

    rng = np.random.default_rng(5)
    n = 400
    frame = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n),
                          "c": rng.choice(["x", "y", "z", "w"], n)})
    y = (frame.a + (frame.c == "y") > 0.3).astype(int)
    model = catboost.CatBoostClassifier(iterations=12, depth=4, verbose=False, random_seed=0, allow_writing_files=False,
                                        cat_features=["c"], one_hot_max_size=2).fit(frame, y)
    return [("catboost_ctr", model, frame)]


def _models(tmp_path, model_cases):
    for library in ("xgboost", "lightgbm", "onnx"):
        # (every other quick case: each form of every representation still meets the cases'
        # objectives and layouts, at half the cost of running them all under qemu)
        for case in model_cases[library].all(quick=True)[::2]:
            yield case.name, case.path, case.X
    yield from _sklearn_cases(tmp_path)
    yield from _catboost_cases(tmp_path)


def test_every_importers_models_run_exactly_as_aarch64_code(tmp_path, model_cases):
    checked, libraries = 0, set()
    for name, model, X in _models(tmp_path, model_cases):
        cf = sf.compile(model, threads=1)
        forest = cf.forest
        head = X.iloc[:ROWS] if hasattr(X, "iloc") else X[:ROWS]
        # (the reference reads the rows as the user gives them: a CatBoost model's categories
        # are hashed from the frame's values)
        want = reference.predict(forest, head, output_margin=True)
        for form in cf.forms:
            rows = as_rows(head, forest, form.input_dtype)
            kernel = support_qemu.Aarch64Kernel(form.kernel)
            try:
                got = kernel.margins(rows, forest.num_outputs)
            finally:
                kernel.close()
            np.testing.assert_array_equal(got, want.reshape(got.shape), err_msg=f"{name}: {form.text()[:80]}")
            checked += 1
        libraries.add(name.split("_")[0])
    assert checked >= 15 and len(libraries) >= 5, (checked, libraries)


@pytest.mark.parametrize("cpu", ["neoverse-n1", "neoverse-v1", "apple-m1"])
def test_an_artifact_built_here_for_an_arm_cpu_carries_code_that_runs_there(tmp_path, cpu, model_cases):
    """``cpu=`` an AArch64 CPU: built and saved here for a fleet of ARM hosts, refused here with
    why, and the code the artifact carries (loaded back) equals the reference under qemu."""
    cases = model_cases["xgboost"]
    case = cases.get("binary_nan") if "binary_nan" in cases.names(quick=True) else cases.all(quick=True)[0]
    cf = sf.compile(case.path, cpu=cpu, threads=1)
    X = np.asarray(case.X, dtype=cf.main.input_dtype)[:ROWS]
    with pytest.raises(sf.PluginError, match=f"compiled for cpu '{cpu}' .aarch64."):
        cf.predict(X)
    cf.save(tmp_path / "arm.forge")
    loaded = sf.load_compiled(tmp_path / "arm.forge", trust_code=True)
    assert loaded.cpu == cpu and "code for cpu " + cpu in loaded.plan_text()
    want = reference.predict(cf.forest, X, output_margin=True)
    for form in loaded.forms:
        kernel = support_qemu.Aarch64Kernel(form.kernel)
        try:
            got = kernel.margins(X, cf.forest.num_outputs)
        finally:
            kernel.close()
        np.testing.assert_array_equal(got, want.reshape(got.shape), err_msg=f"{cpu}: {form.text()[:80]}")



def test_an_arm_host_runs_what_llvm_can_see_it_has(monkeypatch):
    """On an AArch64 host LLVM reports neon, crc, lse, sve, sve2, aes and sha2 only (never rcpc
    or dotprod): code for a Neoverse N1 runs on a Graviton 2; SVE code does not."""
    from silvanforge_target_cpu import cpus

    monkeypatch.setattr(cpus, "_triple", lambda: "aarch64-unknown-linux-gnu")
    monkeypatch.setattr(cpus, "host_features", lambda: frozenset({"neon", "crc", "lse", "aes", "sha2", "fp-armv8"}))
    assert cpus.refusal("neoverse-n1") is None and cpus.refusal("apple-m1") is None
    assert "sve" in cpus.refusal("neoverse-v1")
    assert cpus.refusal("generic-aarch64") is None
    with pytest.raises(sf.InputError, match="unknown cpu 'generic'"):
        cpus.canonical("generic")  # LLVM's name of AArch64's and x86's generic alike: ours says which


def _margins_under_qemu(cf, X) -> np.ndarray:
    """The margins of ``cf``'s main form for rows ``X``, its AArch64 code run under qemu."""
    kernel = support_qemu.Aarch64Kernel(cf.main.kernel)
    try:
        return kernel.margins(np.ascontiguousarray(X, dtype=cf.main.input_dtype), cf.forest.num_outputs)
    finally:
        kernel.close()


@pytest.mark.parametrize("rep", ["levelwise", "bitvector", "oblivious"])
def test_every_vector_forms_neon_code_equals_the_reference(rep, monkeypatch):
    """Each vector form as compiled for an ARM CPU (its NEON shape: 16-byte blocks, lookups by
    ``tbl``), for random forests (NaN, infinities, ties at thresholds; categorical splits where
    the form takes them), at 16 rows a call (float blocks) and large batches (the levelwise and
    symmetric byte programs: the plan's one-form limit lifted, which keeps small forests on
    floats), equal to the reference under qemu."""
    from silvanforge.testing import random_forest, rows_for

    monkeypatch.setattr("silvanforge.plan.policy.PLAN_MIN_NS", 0.0)

    done = 0
    for seed in range(40):
        forest = _symmetric(seed) if rep == "oblivious" else random_forest(seed, max_trees=6, max_depth=7, summed=True)
        for batch in (16, 4096):
            try:
                cf = sf.compile(forest, rep=rep, cpu="neoverse-n1", batch_size=batch, threads=1)
            except sf.InputError:  # a form this forest does not take (categorical, depth)
                break
            X = rows_for(forest, np.random.default_rng(seed), 70)
            want = reference.predict(forest, X, output_margin=True)
            got = _margins_under_qemu(cf, X)
            np.testing.assert_array_equal(got, want.reshape(got.shape), err_msg=f"{rep} seed {seed} batch {batch}")
            done += 1
        if done >= 6:
            break
    assert done >= 4, done


@pytest.mark.parametrize("expand", [False, True])
def test_the_bitvectors_byte_words_equal_the_reference_as_aarch64_code(expand):
    """The bitvector's narrow form in byte words on NEON (forced: blocks that fill less than a
    register take either word by cost): looped and expanded trees of one to 256 leaves (a full tree of depth 8: exit leaves past 127, counted unsigned), NaN, ties,
    categorical splits, equal to the reference under qemu."""
    from silvanforge.ir.hir import Forest, Tree
    from silvanforge.testing import random_forest, rows_for

    rng = np.random.default_rng(8)
    inner, n = 255, 511  # a complete tree of depth 8, nodes in level order
    index = np.arange(n)
    left, right = np.where(index < inner, 2 * index + 1, -1), np.where(index < inner, 2 * index + 2, -1)
    full = Tree.from_nodes(left, right, np.where(index < inner, index % 4, -1),
                           np.round(rng.normal(size=n), 1), rng.normal(size=(n, 1)), default_left=rng.random(n) < 0.5)
    forests = [random_forest(seed, max_trees=6, max_depth=7, plain=True, summed=True, categorical=seed % 2 == 0)
               for seed in range(5)]
    forests.append(Forest(trees=[full], num_features=4))
    options = sf.CompileOptions(rep_options={"narrow": True, "narrow_word": 8, "mask_tables": False,
                                             "expand_nodes": 10**9 if expand else -1})
    done = 0
    for forest in forests:
        try:
            cf = sf.compile(forest, rep="bitvector", cpu="neoverse-n1", batch_size=4096, threads=1, options=options)
        except sf.InputError:  # a forest the form does not take
            continue
        assert "words=8-bit" in cf.show("lir")
        X = rows_for(forest, rng, 300)
        want = reference.predict(forest, X, output_margin=True)
        got = _margins_under_qemu(cf, X)
        np.testing.assert_array_equal(got, want.reshape(got.shape))
        done += 1
    assert done >= 4 and forests[-1] is forest, done


def _symmetric(seed):
    """A random forest of symmetric trees (every split rule and missing direction), float32."""
    from strategies import oblivious_tree

    from silvanforge.ir.hir import Aggregation, Forest, Transform

    rng = np.random.default_rng(seed)
    trees = [oblivious_tree(rng, int(rng.integers(0, 6)), 4, (0,)) for _ in range(12)]
    return Forest(trees=trees, num_features=4, num_outputs=1, base_score=np.array([0.25]),
                  aggregation=Aggregation.SUM, transform=Transform(), threshold_dtype="float32",
                  accumulate_dtype="float32")


@pytest.mark.parametrize("features", [128, 968])
def test_walks_of_rows_cached_per_chunk_equal_the_reference_as_aarch64_code(features):
    """Rows of 512 bytes and more are cached and split a chunk at a time (the CPU default's
    ``cache(b0)``): the sparse walks of such rows, compiled for an ARM CPU, equal the reference
    under qemu (NaN, infinities, ties at thresholds)."""
    from silvanforge.ir.hir import Forest, Op
    from silvanforge.testing import rows_for
    from strategies import _tree

    rng = np.random.default_rng(features)
    trees = [_tree(rng, features, (0,), 6, [int(Op.LT)], categorical=False, zero_missing=False) for _ in range(6)]
    forest = Forest(trees=trees, num_features=features, threshold_dtype="float32", accumulate_dtype="float32")
    cf = sf.compile(forest, rep="sparse", cpu="neoverse-n1", batch_size=256, threads=1)
    assert "cache(b0)" in cf.schedule.to_text()
    X = rows_for(forest, rng, 150)
    want = reference.predict(forest, X, output_margin=True)
    got = _margins_under_qemu(cf, X)
    np.testing.assert_array_equal(got, want.reshape(got.shape))

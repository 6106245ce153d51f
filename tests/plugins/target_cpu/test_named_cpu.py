"""Code for a named CPU (``sf.compile(..., cpu="x86-64-v3")``, ``forge ... --cpu``): the CPU target
builds with LLVM's own features for that name, not the host's; its predictions equal the
reference evaluator's, the library's and the native code's; the artifact and the code cache
keep the CPU (code for one CPU is never taken for another's); a bad name is one clear error;
code for a CPU this host lacks is built and saved, and refused at predict (never a SIGILL).

Differential throughout: models trained here, compared with xgboost's and lightgbm's own
predict and with silvanforge.runtime.reference, never with numbers from an earlier run."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap

import llvmlite.binding as llvm
import numpy as np
import pytest

import silvanforge as sf
from silvanforge import ArtifactWarning, InputError, PluginError, api
from silvanforge.artifact import archive
from silvanforge.options import CompileOptions
from silvanforge.plugins import registry
from silvanforge.runtime import reference

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")
from silvanforge_target_cpu import cpus, jit  # noqa: E402

V3 = "x86-64-v3"
ROWS = (1, 16, 600)
KEY = "named-cpu-test-key"



def _runs_here(cpu: str) -> bool:
    return not cpus.missing_here(cpu)


# Named CPUs are x86-64 names: elsewhere they are refused (tested below), not built.
X86 = llvm.get_process_triple().startswith(("x86_64", "amd64"))
x86 = pytest.mark.skipif(not X86, reason="named CPUs are x86-64 CPUs")
needs_v3 = pytest.mark.skipif(not (X86 and _runs_here(V3)), reason="this host cannot run x86-64-v3 code")


# the command line as test_cli drives it (rich tables unwrapped, whatever the terminal)
from support_cli import forge, wide_console  # noqa: E402,F401  (an autouse fixture)
from support_plugins import CompileSpy  # noqa: E402


# ------------------------------------------------------------------ models trained here
def _rows(rng, n, d, nan=0.1):
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[rng.random(X.shape) < nan] = np.nan
    return X


def _xgb_binary(rng):
    X = _rows(rng, 400, 6)
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) * np.nan_to_num(X[:, 2]) > 0).astype(int)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 4, "eta": 0.3}, xgb.DMatrix(X, y), 20)
    return booster, lambda X: booster.predict(xgb.DMatrix(X)), 6


def _xgb_multiclass(rng):
    X = _rows(rng, 400, 5)
    y = np.digitize(np.nan_to_num(X[:, 0] + X[:, 3]), [-0.5, 0.5])
    booster = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 3}, xgb.DMatrix(X, y), 8)
    return booster, lambda X: booster.predict(xgb.DMatrix(X)), 5


def _lgb_categorical(rng):
    X = rng.normal(size=(600, 5))
    X[:, 0] = rng.integers(0, 8, size=600)  # a categorical feature: codes 0-7
    y = np.where(np.isin(X[:, 0], (1, 4, 6)), 2.0, -1.0) + X[:, 1]
    X[rng.random(X.shape) < 0.1] = np.nan
    booster = lgb.train({"objective": "regression", "num_leaves": 15, "min_data_in_leaf": 5, "verbose": -1},
                        lgb.Dataset(X, y, categorical_feature=[0]), 15)
    return booster, booster.predict, 5


def _lgb_multiclass(rng):
    X = rng.normal(size=(600, 4))
    y = np.digitize(X[:, 0] - X[:, 2], [-0.7, 0.7])
    X[rng.random(X.shape) < 0.1] = np.nan
    booster = lgb.train({"objective": "multiclass", "num_class": 3, "num_leaves": 7, "verbose": -1},
                        lgb.Dataset(X, y), 6)
    return booster, booster.predict, 4


MODELS = {"xgb_binary": _xgb_binary, "xgb_multiclass": _xgb_multiclass, "lgb_categorical": _lgb_categorical,
          "lgb_multiclass": _lgb_multiclass}


@pytest.fixture(scope="module")
def trained():
    rng = np.random.default_rng(20)
    return {name: make(rng) for name, make in MODELS.items()}


@pytest.fixture(scope="module")
def model_file(tmp_path_factory, trained):
    path = tmp_path_factory.mktemp("named_cpu") / "model.json"
    trained["xgb_binary"][0].save_model(path)
    return path


def _test_rows(features, seed, categorical=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(max(ROWS), features))
    if categorical:  # feature 0's codes, and one the model never saw (8)
        X[:, 0] = rng.integers(0, 9, size=len(X))
    X[rng.random(X.shape) < 0.1] = np.nan
    return X


# ------------------------------------------------------------------ predictions
@x86
@needs_v3
@pytest.mark.parametrize("name", sorted(MODELS))
def test_x86_64_v3_predicts_what_the_library_and_the_reference_do(trained, name):
    booster, library, features = trained[name]
    cf = sf.compile(booster, cpu=V3, threads=2)
    native = sf.compile(booster, threads=2)
    assert cf.cpu == V3 and native.cpu is None
    forest = cf.forest
    X = _test_rows(features, len(name), categorical=name == "lgb_categorical")
    dtype = np.float32 if forest.threshold_dtype == "float32" else np.float64
    for n in ROWS:
        rows = X[:n]
        got = cf.predict(rows)
        want = reference.predict(forest, rows.astype(dtype))
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype is np.float32 else 1e-12, atol=1e-7)
        np.testing.assert_allclose(got.reshape(np.shape(library(rows))), library(rows),
                                   rtol=1e-6 if dtype is np.float32 else 1e-12, atol=1e-7)
        # The same program on either CPU: the same numbers, bit for bit.
        np.testing.assert_array_equal(got, native.predict(rows))
        np.testing.assert_array_equal(cf.predict(rows, output_margin=True), native.predict(rows, output_margin=True))


@x86
def test_lookups_use_the_chosen_cpus_permutes_not_the_hosts(trained):
    """Table lookups (the levelwise form) use AVX-512 permutes for a CPU with AVX-512 and
    AVX2's (vpshufb, vpermps) for one without, whatever the host has; both give the reference's
    numbers."""
    booster, _, features = trained["xgb_binary"]
    forest = sf.load_model(booster)
    with_permutes = sf.show(forest, "target", rep="levelwise", cpu="skylake-avx512")
    without = sf.show(forest, "target", rep="levelwise", cpu="haswell")
    assert "llvm.x86.avx512" in with_permutes and "llvm.x86.avx512" not in without
    assert "llvm.x86.avx2.pshuf.b" in without and "llvm.x86.avx2.pshuf.b" not in with_permutes
    assert "llvm.x86.avx512" in sf.show(forest, "target", rep="levelwise", cpu="znver4")
    X = _test_rows(features, 3).astype(np.float32)
    for cpu in ("x86-64-v3", "x86-64-v4"):
        if not _runs_here(cpu):
            continue
        cf = sf.compile(forest, rep="levelwise", cpu=cpu)
        assert ("llvm.x86.avx512" in cf.show("target")) is (cpu == "x86-64-v4")
        for n in ROWS:
            np.testing.assert_array_equal(cf.predict(X[:n], output_margin=True),
                                          reference.predict(forest, X[:n], output_margin=True))


def test_the_table_agrees_with_the_code_llvm_generates():
    """For every named CPU, LLVM's code for it uses 256-bit integer vectors exactly where the
    table says AVX2, zmm registers where it says AVX-512F and vpermb where it says VBMI (in a
    child process: LLVM aborts on a name it does not know)."""
    if not X86:
        pytest.skip("named CPUs are x86-64 CPUs")
    probe = textwrap.dedent('''
        import json, sys
        import llvmlite.binding as llvm
        llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
        shuffle = ",".join(f"i32 {63 - k}" for k in range(64))
        ir = f"""
        define <8 x i32> @ints(<8 x i32> %a, <8 x i32> %b) {{ %c = add <8 x i32> %a, %b
          ret <8 x i32> %c }}
        define <16 x float> @floats(<16 x float> %a, <16 x float> %b) {{ %c = fadd <16 x float> %a, %b
          ret <16 x float> %c }}
        define <64 x i8> @bytes(<64 x i8> %a) {{
          %c = shufflevector <64 x i8> %a, <64 x i8> poison, <64 x i32> <{shuffle}>
          ret <64 x i8> %c }}
        """
        target = llvm.Target.from_triple(llvm.get_process_triple())
        out = {}
        for cpu in sys.argv[1:]:
            tm = target.create_target_machine(cpu=cpu, features="", opt=3)
            mod = llvm.parse_assembly(ir)
            mod.triple = llvm.get_process_triple()
            asm = tm.emit_assembly(mod)
            floats = asm[asm.index("floats:"):asm.index("bytes:")]
            out[cpu] = ["vpaddd\\t%ymm" in asm, "zmm" in floats, "vpermb" in asm]
        print(json.dumps(out))
    ''')
    names = cpus.x86_names()
    done = subprocess.run([sys.executable, "-c", probe, *names], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "not a recognized processor" not in done.stderr, done.stderr
    found = json.loads(done.stdout)
    for name in names:
        table = [cpus.has(name, "avx2"), cpus.has(name, "avx512f"), cpus.has(name, "avx512vbmi")]
        assert found[name] == table, f"{name}: LLVM {found[name]}, table {table} (avx2, avx512f, avx512vbmi)"


# ------------------------------------------------------------------ artifacts and pickles
@x86
@needs_v3
def test_the_cpu_is_recorded_and_kept_through_save_load_and_pickle(trained, tmp_path):
    booster, _, features = trained["lgb_categorical"]
    cf = sf.compile(booster, cpu=" X86-64-V3 ")  # spelt as LLVM spells it
    X = _test_rows(features, 5, categorical=True)
    want = cf.predict(X)
    assert cf.options.cpu == V3 and cf.summary()["cpu"] == V3 and f"cpu={V3}" in cf.options.describe()
    assert f"code for cpu {V3}" in cf.plan_text()
    assert all(form.kernel.cpu == V3 for form in cf.forms)
    path = tmp_path / "v3.forge"
    cf.save(path, key=KEY)
    art = archive.read(path, KEY)
    assert art.meta["cpu"] == V3 and all(entry is None or entry["cpu"] == V3 for entry in art.plan["forms"])
    # Signed: its code runs, mapped, not compiled.
    with CompileSpy() as spy:
        back = sf.load_compiled(path, key=KEY)
    assert spy.cpus == [] and back.cpu == V3 and all(form.kernel.cpu == V3 for form in back.forms)
    np.testing.assert_array_equal(back.predict(X), want)
    # Not signed: compiled again from the stored model, for the CPU it records (not this host's).
    with CompileSpy() as spy, pytest.warns(ArtifactWarning, match="not signed"):
        rebuilt = sf.load_compiled(path)
    assert spy.cpus and set(spy.cpus) == {V3} and rebuilt.cpu == V3
    np.testing.assert_array_equal(rebuilt.predict(X), want)
    again = pickle.loads(pickle.dumps(cf))
    assert again.cpu == V3 and all(form.kernel.cpu == V3 for form in again.forms)
    np.testing.assert_array_equal(again.predict(X), want)
    # A native model's artifact records no CPU, as before.
    native = sf.compile(booster)
    native.save(tmp_path / "native.forge")
    assert archive.read(tmp_path / "native.forge").meta["cpu"] is None and native.summary()["cpu"] == "native"
    assert sf.compile(booster, cpu="native").cpu is None


@x86
@needs_v3
def test_code_built_for_another_cpu_is_compiled_again(trained, tmp_path, monkeypatch):
    """Machine code whose CPU is not the one the artifact records (here: haswell code under an
    x86-64-v3 artifact) is never mapped: the forms are compiled again for the recorded CPU,
    with the warning code for another host gets."""
    booster, _, features = trained["xgb_binary"]
    cf = sf.compile(booster, cpu=V3)
    real = jit.signature
    with monkeypatch.context() as patch:
        patch.setattr(jit, "signature", lambda cpu=None: real("haswell" if cpu == V3 else cpu))
        cf.save(tmp_path / "m.forge", key=KEY)
    with CompileSpy() as spy, pytest.warns(ArtifactWarning, match="built for another host"):
        back = sf.load_compiled(tmp_path / "m.forge", key=KEY)
    assert len(spy.cpus) == len(back.forms) and set(spy.cpus) == {V3} and back.cpu == V3
    X = _test_rows(features, 7)
    np.testing.assert_array_equal(back.predict(X), cf.predict(X))
    # And native code (the host's signature) is never taken for x86-64-v3 code, nor back.
    assert jit.signature(V3) != jit.signature(None)
    native_blob = sf.compile(booster).main.kernel.artifact()
    assert jit.load_artifact(cf.main.kernel.module, native_blob, V3) is None
    assert jit.load_artifact(cf.main.kernel.module, cf.main.kernel.artifact(), None) is None


@x86
@needs_v3
def test_a_plan_tuned_on_another_host_falls_back_for_the_recorded_cpu(trained, tmp_path):
    from silvanforge.plan.tuning import compile_plan

    booster, _, features = trained["xgb_binary"]
    forest = sf.load_model(booster)
    record = {"host": "another host", "host_name": "another-cpu", "candidates": [], "winners": []}
    cf = compile_plan(forest, [(None, CompileOptions(cpu=V3))], tuning=record)
    cf.save(tmp_path / "tuned.forge", key=KEY)
    with pytest.warns(ArtifactWarning, match="tuned on another host"):
        back = sf.load_compiled(tmp_path / "tuned.forge", key=KEY)
    assert back.tuning is None and back.cpu == V3 and all(f.kernel.cpu == V3 for f in back.forms)
    X = _test_rows(features, 8).astype(np.float32)
    np.testing.assert_array_equal(back.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


# ------------------------------------------------------------------ the code cache
@x86
def test_the_code_cache_keeps_each_cpus_code_apart(trained, tmp_path):
    booster, _, features = trained["xgb_binary"]
    forest = sf.load_model(booster)
    keys = {cpu: api.cache_key(forest, api.compile_options(None, cpu=cpu)) for cpu in (None, V3, "haswell")}
    assert len(set(keys.values())) == 3
    assert api.cache_key(forest, api.compile_options(None, cpu="native")) == keys[None]
    cache = tmp_path / "cache"
    with CompileSpy() as spy:
        first = sf.compile(forest, cache=cache, cpu=V3)
        native = sf.compile(forest, cache=cache)
        hit = sf.compile(forest, cache=cache, cpu=V3)
    assert spy.cpus == [V3] * len(first.forms) + [None] * len(native.forms)  # the hit compiled nothing
    assert hit.cpu == V3 and all(f.kernel.cpu == V3 for f in hit.forms)
    assert all(f.kernel.cpu is None for f in native.forms)
    entries = [f for _, _, fs in os.walk(cache) for f in fs if f.endswith(".kernel")]
    assert len(entries) == 2
    if _runs_here(V3):
        X = _test_rows(features, 9)
        np.testing.assert_array_equal(hit.predict(X), native.predict(X))


# ------------------------------------------------------------------ bad names
def test_a_bad_cpu_name_is_one_clear_error(model_file):
    with pytest.raises(InputError, match="unknown cpu 'bogus'.*x86-64-v3"):
        sf.compile(model_file, cpu="bogus")
    with pytest.raises(InputError, match="AArch64 CPU this target does not know.*neoverse-v1"):
        sf.compile(model_file, cpu="neoverse-x9")
    with pytest.raises(InputError, match="cpu must be a CPU name"):
        sf.compile(model_file, cpu=3)
    with pytest.raises(InputError, match="unknown cpu"):
        sf.tune(model_file, cpu="pentium4", budget_s=1)  # a 32-bit CPU: LLVM would abort on it
    with pytest.raises(InputError, match="unknown cpu"):
        sf.show(model_file, "target", cpu="bogus")


def test_forge_refuses_a_bad_cpu_name_in_one_line(model_file, capsys):
    for args in (("compile", model_file, "--cpu", "bogus"), ("compile", model_file, "--cpu", "apple-m9"),
                 ("predict", model_file, "-i", "-", "--cpu", "bogus")):
        code, out, err = forge(capsys, *args)
        assert code != 0 and not out
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err


# ------------------------------------------------------------------ a CPU this host lacks
def _without_avx512(monkeypatch):
    """This host as one without AVX-512 (the kernels read the host's features through it)."""
    real = cpus.host_features()
    monkeypatch.setattr(cpus, "host_features", lambda: frozenset(f for f in real if not f.startswith("avx512")))


@x86
@pytest.mark.parametrize("cpu", ["skylake-avx512", "znver4"])
def test_code_for_a_cpu_the_host_lacks_builds_and_saves_but_predict_refuses(trained, tmp_path, monkeypatch,
                                                                             capsys, cpu):
    _without_avx512(monkeypatch)
    booster, _, features = trained["xgb_multiclass"]
    cf = sf.compile(booster, cpu=cpu)
    assert cf.cpu == cpu and "llvm.x86.avx512" in sf.show(cf.forest, "target", rep="levelwise", cpu=cpu)
    X = _test_rows(features, 11).astype(np.float32)
    for n in (0, *ROWS):  # the lean path of a few rows and the general one alike
        with pytest.raises(PluginError, match=f"compiled for cpu '{cpu}'.*lacks avx512"):
            cf.predict(X[:n])
    path = tmp_path / "fleet.forge"
    cf.save(path, key=KEY)
    assert archive.read(path, KEY).meta["cpu"] == cpu
    back = sf.load_compiled(path, key=KEY)  # its code maps (built for that CPU), and does not run
    assert back.cpu == cpu
    with pytest.raises(PluginError, match="lacks .*avx512f"):
        back.predict(X[:1])
    model = tmp_path / "m.json"
    booster.save_model(model)
    np.savetxt(tmp_path / "X.csv", X[:4], delimiter=",")
    code, out, err = forge(capsys, "predict", model, "-i", tmp_path / "X.csv", "--cpu", cpu)
    assert code != 0 and not out and err.startswith("error: ") and "avx512f" in err and "lacks" in err
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(PluginError, match="lacks .*avx512f"):
        sf.tune(model, cpu=cpu, budget_s=1, sizes=(1, 64))  # timing runs code: refused as predict is


@x86
def test_a_cpu_the_host_really_lacks_is_refused(trained):
    """Without a stand-in: the first CPU of these whose features this host lacks."""
    lacking = [c for c in ("sapphirerapids", "graniterapids", "skylake-avx512", "znver4", "x86-64-v4",
                           "x86-64-v3") if not _runs_here(c)]
    if not lacking:
        pytest.skip("this host has every feature of the CPUs tried")
    booster, _, features = trained["xgb_binary"]
    cf = sf.compile(booster, cpu=lacking[0])
    with pytest.raises(PluginError, match=f"compiled for cpu '{lacking[0]}'"):
        cf.predict(_test_rows(features, 12)[:16])


# ------------------------------------------------------------------ the command line
@x86
@needs_v3
def test_forge_compiles_predicts_and_shows_for_a_named_cpu(trained, model_file, tmp_path, capsys):
    booster, library, features = trained["xgb_binary"]
    X = _test_rows(features, 13)
    np.save(tmp_path / "X.npy", X)
    code, out, err = forge(capsys, "compile", model_file, "--cpu", V3, "-o", tmp_path / "v3.forge")
    assert code == 0 and V3 in out, err
    code, out, err = forge(capsys, "predict", tmp_path / "v3.forge", "-i", tmp_path / "X.npy",
                           "-o", tmp_path / "y.npy", "--trust-code")
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), library(X), rtol=1e-6, atol=1e-7)
    code, out, err = forge(capsys, "predict", model_file, "-i", tmp_path / "X.npy", "-o", tmp_path / "y2.npy",
                           "--cpu", V3)
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "y2.npy"), np.load(tmp_path / "y.npy"))
    code, out, err = forge(capsys, "show", tmp_path / "v3.forge", "--level", "plan")
    assert code == 0 and f"code for cpu {V3}" in out
    code, out, err = forge(capsys, "show", tmp_path / "v3.forge", "--level", "lir")
    assert code == 0 and f"cpu={V3}" in err
    # An artifact is what it was compiled for: another --cpu is an error naming both.
    code, out, err = forge(capsys, "predict", tmp_path / "v3.forge", "-i", tmp_path / "X.npy", "--cpu", "native")
    assert code != 0 and "cpu 'x86-64-v3'" in err and "--cpu native" in err
    code, out, err = forge(capsys, "show", model_file, "--level", "target", "--cpu", "skylake-avx512",
                           "--rep", "levelwise")
    assert code == 0 and "llvm.x86.avx512" in out and "cpu=skylake-avx512" in err


@x86
@needs_v3
def test_forge_bench_compiles_ours_for_the_cpu_and_the_peers_for_the_host(model_file):
    bench = pytest.importorskip("silvanforge_bench.bench")
    report = bench.run_bench(model_file, [1, 16], threads=1, repeat=1, min_time=0.0, peers=["xgboost"],
                             compile_batch="none", cpu=V3)
    assert report.cpu == V3 and f"code for cpu {V3}" in bench.describe(report)
    assert {m.engine for m in report.measurements if m.batch_size == 16} == {bench.OURS, "xgboost"}
    assert all(m.agrees for m in report.measurements if m.engine == "xgboost")


@x86
@pytest.mark.parametrize("rep", ["levelwise", "bitvector", "sparse", "array"])
def test_every_form_of_avx2_code_equals_the_reference(rep):
    """Random forests (NaN, infinities, ties at thresholds; categorical splits where the form
    takes them) compiled for x86-64-v3 at a large batch size, each form that takes them equal
    to the reference exactly, at 1, 16 and 300 rows."""
    from silvanforge.testing import random_forest, rows_for

    if not _runs_here("x86-64-v3"):
        pytest.skip("this host cannot run x86-64-v3 code")
    done = 0
    for seed in range(14):
        forest = random_forest(seed, max_trees=10, max_depth=7, summed=True)
        try:
            cf = sf.compile(forest, rep=rep, cpu="x86-64-v3", batch_size=4096)
        except InputError:  # a form this forest does not take (categorical, depth)
            continue
        X = rows_for(forest, np.random.default_rng(seed), 300)
        for n in (1, 16, 300):
            np.testing.assert_array_equal(cf.predict(X[:n], output_margin=True),
                                          reference.predict(forest, X[:n], output_margin=True),
                                          err_msg=f"{rep} seed {seed} {n} rows")
        done += 1
    assert done >= 3, done


# ------------------------------------------------------------------ forms and estimates per ISA
def test_each_cpu_names_its_vector_unit():
    """The target says which vector unit code for a CPU uses, as the lookups are lowered."""
    vectors = {cpu: registry().vectors("cpu", cpu) for cpu in ("x86-64-v3", "haswell", "skylake-avx512",
                                                               "icelake-server", "x86-64", "neoverse-v1")}
    assert (vectors["x86-64-v3"].isa, vectors["x86-64-v3"].bits) == ("avx2", 256) == \
        (vectors["haswell"].isa, vectors["haswell"].bits)
    assert vectors["skylake-avx512"].isa == "avx512" and not vectors["skylake-avx512"].byte_permute
    assert vectors["icelake-server"].byte_permute
    assert vectors["x86-64"].isa == "sse" and vectors["neoverse-v1"].isa == "neon"
    assert registry().vectors("cpu", None) == cpus.vectors(None)


@x86
def test_byte_lookups_without_vbmi_use_512_bit_shuffles_and_equal_the_reference(trained):
    """AVX-512 without VBMI (Skylake-SP, Cascade Lake) looks bytes up by 64-lane vpshufb, not
    by gathers; the levelwise byte program (large batches) equals the reference there."""
    booster, _, features = trained["xgb_binary"]
    forest = sf.load_model(booster)
    text = sf.show(forest, "target", rep="levelwise", cpu="skylake-avx512", batch_size=4096)
    assert "llvm.x86.avx512.pshuf.b.512" in text and "llvm.x86.avx512.permvar.qi" not in text
    if not _runs_here("skylake-avx512"):
        pytest.skip("this host cannot run skylake-avx512 code")
    cf = sf.compile(forest, rep="levelwise", cpu="skylake-avx512", batch_size=4096)
    X = _test_rows(features, 5).astype(np.float32)
    for n in ROWS:
        np.testing.assert_array_equal(cf.predict(X[:n], output_margin=True),
                                      reference.predict(forest, X[:n], output_margin=True))


def test_the_levelwise_form_is_shaped_for_the_vector_unit():
    """On AVX2 a block of the levelwise program is one 256-bit register (32 rows of bins, 8 of
    float32) and two trees walk side by side; on AVX-512 one 512-bit register and four."""
    from silvanforge_rep_oblivious import cost

    from silvanforge.testing import random_forest

    avx2, avx512 = cost.shape(registry().vectors("cpu", V3)), cost.shape(None)
    assert (avx2.bytes, avx2.interleave) == (32, 2) and (avx512.bytes, avx512.interleave) == (64, 4)
    forest = random_forest(3, max_trees=6, max_depth=5, summed=True, categorical=False)
    assert cost.levelwise_lanes(forest, 16, registry().vectors("cpu", V3)) == 32 // np.dtype(forest.threshold_dtype).itemsize
    assert "lanes=" in sf.show(forest, "lir", rep="levelwise", cpu=V3, batch_size=16)


def test_the_chooser_prices_forms_for_the_cpu_they_run_on():
    """A full-depth XGBoost model's 16-row calls (100 trees of depth 8 over 28 features, as
    benchmarks/make_models.py's xgb_100x8): a vector program (levelwise, bitvectors) on AVX-512
    code, a walk on AVX2 code (xgb_100x8's levelwise form there: 1.6 against the walks' 2.0 M
    rows/s); the estimates asked for AVX2 code price the vector forms higher than for
    AVX-512 code, the walks the same."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 28))
    y = (X[:, 0] + X[:, 1] * X[:, 2] - X[:, 3] ** 2 + rng.normal(size=4000) > 0).astype(int)
    booster = xgb.train({"max_depth": 8, "objective": "binary:logistic", "tree_method": "hist", "nthread": 1},
                        xgb.DMatrix(X, y), 100)
    forest = sf.load_model(booster)
    reg = registry()
    avx2, avx512 = reg.vectors("cpu", V3), reg.vectors("cpu", "icelake-server")
    at = {v.isa: {rep: ns for rep, ns, _ in reg.rep_costs(forest, "cpu", 4096, vectors=v) if ns} for v in (avx2, avx512)}
    for rep in ("levelwise", "bitvector"):
        if rep in at["avx512"]:
            assert at["avx2"][rep] > at["avx512"][rep]
    for rep in ("sparse", "array"):
        assert at["avx2"][rep] == at["avx512"][rep]
    small = {v.isa: choose_rep(forest, v) for v in (avx2, avx512)}
    assert reg.rep_kind(small["avx512"]) == "program" and reg.rep_kind(small["avx2"]) == "walk", small


def choose_rep(forest, vectors, rows=16):
    from silvanforge.lowering.choices import choose_representation

    return choose_representation(forest, "cpu", rows, vectors=vectors)


def test_a_representation_without_vectors_in_its_cost_is_priced_as_before():
    """The core passes ``vectors=`` only to a ``cost``/``program`` that takes it: a
    representation written before keeps working, priced the same on every vector unit."""
    from silvanforge.rep import ProgramRepresentation, cost_of, weighs_vectors
    from silvanforge.testing import random_forest

    seen = []

    class Old(ProgramRepresentation):
        name = "old"

        @classmethod
        def cost(cls, forest, target_kind, batch_size):
            return 5.0

    class New(ProgramRepresentation):
        name = "new"

        @classmethod
        def cost(cls, forest, target_kind, batch_size, vectors=None):
            seen.append(vectors)
            return 5.0 if vectors is None or vectors.bits >= 512 else 9.0

    forest = random_forest(1, max_trees=2, max_depth=3)
    avx2 = registry().vectors("cpu", V3)
    assert not weighs_vectors(Old.cost) and weighs_vectors(New.cost)
    assert cost_of(Old, forest, "cpu", 16, vectors=avx2) == 5.0
    assert cost_of(New, forest, "cpu", 16, vectors=avx2) == 9.0 and seen == [avx2]
    assert cost_of(New, forest, "cpu", 16) == 5.0 and seen[-1] is None

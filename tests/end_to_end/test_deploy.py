"""Taking a compiled model to production: artifacts that load without compiling, the shared
code cache, pickling (pickle, joblib, deepcopy, worker processes), Dask."""

from __future__ import annotations

import copy
import multiprocessing
import os
import pickle
import warnings

import numpy as np
import pytest
from strategies import make_forest, rows_for
from support_plugins import CompileSpy

import silvanforge as sf
from silvanforge.runtime import reference


@pytest.fixture(scope="module")
def forest():
    return make_forest(seed=21)


@pytest.fixture(scope="module")
def compiled(forest):
    return sf.compile(forest)


@pytest.fixture(scope="module")
def rows(forest):
    return rows_for(forest, np.random.default_rng(8), 700)


# ------------------------------------------------------------------ artifacts
def test_a_trusted_artifact_loads_without_compiling(tmp_path, compiled, rows):
    path = tmp_path / "m.forge"
    compiled.save(path, key="k")
    with CompileSpy() as spy:
        back = sf.load_compiled(path, key="k")
    assert spy.calls == 0
    np.testing.assert_array_equal(back.predict(rows), compiled.predict(rows))


def test_machine_code_of_another_host_is_compiled_again(tmp_path, compiled, rows, monkeypatch):
    from silvanforge_target_cpu import jit

    path = tmp_path / "m.forge"
    compiled.save(path, key="k")
    real = jit.host_signature()
    monkeypatch.setattr(jit, "host_signature", lambda: {**real, "cpu": real["cpu"] + "-other"})
    with CompileSpy() as spy, pytest.warns(sf.ArtifactWarning, match="built for another host"):
        back = sf.load_compiled(path, key="k")
    assert spy.calls == len(back.forms)  # every form compiled again
    np.testing.assert_array_equal(back.predict(rows), compiled.predict(rows))


def test_hosts_sharing_a_cache_keep_their_own_code(tmp_path, forest, rows, monkeypatch):
    from silvanforge_target_cpu import jit

    cache = tmp_path / "cache"
    sf.compile(forest, cache=cache)
    real = jit.host_signature()
    monkeypatch.setattr(jit, "host_signature", lambda: {**real, "cpu": real["cpu"] + "-other"})
    with CompileSpy() as spy:
        other = sf.compile(forest, cache=cache)
    assert spy.calls == len(other.forms)
    np.testing.assert_array_equal(other.predict(rows), sf.compile(forest).predict(rows))
    assert len(_entries(cache)) == 2


# ------------------------------------------------------------------ the code cache
def _entries(cache) -> list[str]:
    """The cache's entries (its secret and nothing else lies beside them)."""
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(cache) for f in fs if f.endswith(".kernel"))


def test_the_cache_reuses_code_across_compiles(tmp_path, forest, rows):
    cache = tmp_path / "cache"
    with CompileSpy() as spy:
        first = sf.compile(forest, cache=cache)
        second = sf.compile(forest, cache=cache)
        other = sf.compile(make_forest(num_outputs=1, seed=5), cache=cache)
    # the first and the other model; the second reused the first's code
    assert spy.calls == len(first.forms) + len(other.forms)
    np.testing.assert_array_equal(second.predict(rows), first.predict(rows))
    np.testing.assert_array_equal(second.predict(rows, output_margin=True),
                                  reference.predict(forest, rows, output_margin=True))
    assert os.stat(cache).st_mode & 0o777 == 0o700
    assert other.num_outputs == 1


def test_damaged_cache_entries_are_rebuilt_not_run(tmp_path, forest, rows):
    cache = tmp_path / "cache"
    sf.compile(forest, cache=cache)
    (entry,) = _entries(cache)
    raw = open(entry, "rb").read()
    for damaged in (raw[: len(raw) // 2], raw[:40] + bytes([raw[40] ^ 1]) + raw[41:], b""):
        with open(entry, "wb") as f:
            f.write(damaged)
        with CompileSpy() as spy:
            cf = sf.compile(forest, cache=cache)
        assert spy.calls == len(cf.forms)
        np.testing.assert_array_equal(cf.predict(rows, output_margin=True),
                                      reference.predict(forest, rows, output_margin=True))
        assert open(entry, "rb").read() == raw  # rebuilt, whole again


def _compile_into(args):
    cache, seed = args
    forest = make_forest(seed=seed)
    cf = sf.compile(forest, cache=cache)
    X = rows_for(forest, np.random.default_rng(1), 100)
    return bool(np.array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True)))


def test_processes_compiling_into_one_cache_at_once_all_succeed(tmp_path):
    cache = str(tmp_path / "cache")
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(_compile_into, [(cache, 9)] * 4)
    assert results == [True] * 4
    assert len(_entries(cache)) == 1


def test_a_cache_other_users_can_write_is_refused(tmp_path, forest):
    cache = tmp_path / "shared"
    cache.mkdir()
    os.chmod(cache, 0o777)
    with pytest.raises(sf.InputError, match="writable by other users"):
        sf.compile(forest, cache=cache)


@pytest.mark.parametrize("how", ["chmod", "symlink"])
def test_an_entry_planted_through_an_open_sub_directory_is_rebuilt_not_run(tmp_path, forest, rows, how):
    # Someone who can write into one of the cache's sub-directories puts there another
    # program's machine code, prefixed with the digest of its own body, under this model's name.
    other = make_forest(num_outputs=1, seed=5)
    sf.compile(forest, cache=tmp_path / "c")
    sf.compile(other, cache=tmp_path / "d").predict(rows_for(other, np.random.default_rng(0), 1))
    (mine,), foreign = _entries(tmp_path / "c"), _entries(tmp_path / "d")[0]
    body = open(foreign, "rb").read()[32:]
    import hashlib
    sub = os.path.dirname(mine)
    if how == "chmod":
        os.chmod(sub, 0o777)
    else:  # the sub-directory swapped for a link to one anybody can write
        elsewhere = tmp_path / "open"
        os.rename(sub, elsewhere)
        os.chmod(elsewhere, 0o777)
        os.symlink(elsewhere, sub)
    with open(mine, "wb") as f:
        f.write(hashlib.sha256(body).digest() + body)
    with CompileSpy() as spy:
        cf = sf.compile(forest, cache=tmp_path / "c")
    assert spy.calls == len(cf.forms)  # rebuilt, the planted code never mapped
    np.testing.assert_array_equal(cf.predict(rows, output_margin=True),
                                  reference.predict(forest, rows, output_margin=True))
    st = os.lstat(sub)
    assert not os.path.islink(sub) and st.st_mode & 0o777 == 0o700
    with CompileSpy() as spy:  # the rebuilt entry is used again
        sf.compile(forest, cache=tmp_path / "c")
    assert spy.calls == 0


def test_an_entry_copied_from_another_cache_is_not_trusted(tmp_path, forest):
    # Entries are bound to the cache's own secret: a whole valid entry from elsewhere fails.
    sf.compile(forest, cache=tmp_path / "c")
    sf.compile(forest, cache=tmp_path / "d")
    (mine,), (theirs,) = _entries(tmp_path / "c"), _entries(tmp_path / "d")
    assert open(mine, "rb").read() != open(theirs, "rb").read()
    with open(theirs, "wb") as f:
        f.write(open(mine, "rb").read())
    with CompileSpy() as spy:
        cf = sf.compile(forest, cache=tmp_path / "d")
    assert spy.calls == len(cf.forms)


def test_a_cache_secret_others_could_read_is_replaced(tmp_path, forest):
    # Entries signed under a secret someone else may have read are not trusted any more.
    cache = tmp_path / "c"
    sf.compile(forest, cache=cache)
    secret = cache / ".secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    old = secret.read_bytes()
    os.chmod(secret, 0o644)
    with CompileSpy() as spy:
        cf = sf.compile(forest, cache=cache)
    assert spy.calls == len(cf.forms)
    assert secret.stat().st_mode & 0o777 == 0o600 and secret.read_bytes() != old


# ------------------------------------------------------------------ pickling
def test_pickle_deepcopy_and_joblib_round_trips(tmp_path, compiled, rows):
    joblib = pytest.importorskip("joblib")
    want = compiled.predict(rows)
    with CompileSpy() as spy, warnings.catch_warnings():
        warnings.simplefilter("error", sf.ArtifactWarning)  # a pickle's code is trusted: no warning
        for back in (pickle.loads(pickle.dumps(compiled)), copy.deepcopy(compiled)):
            np.testing.assert_array_equal(back.predict(rows), want)
        joblib.dump(compiled, tmp_path / "m.joblib")
        np.testing.assert_array_equal(joblib.load(tmp_path / "m.joblib").predict(rows), want)
    assert spy.calls == 0


def _predict_with(model, X):
    return model.predict(X)


def test_worker_processes_receive_compiled_models(compiled, rows):
    joblib = pytest.importorskip("joblib")
    want = compiled.predict(rows)
    parts = joblib.Parallel(n_jobs=2, backend="loky")(
        joblib.delayed(_predict_with)(compiled, rows[i::2]) for i in range(2))
    np.testing.assert_array_equal(parts[0], want[0::2])
    np.testing.assert_array_equal(parts[1], want[1::2])
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        got = pool.starmap(_predict_with, [(compiled, rows[:300]), (compiled, rows[300:])])
    np.testing.assert_array_equal(np.concatenate(got), want)


# ------------------------------------------------------------------ Dask
@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as c, distributed.Client(c) as client:
        yield client


def test_dask_arrays_and_dataframes_on_a_cluster(cluster, compiled, rows):
    da = pytest.importorskip("dask.array")
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    import silvanforge.dask as sfd

    lazy = sfd.predict(compiled, da.from_array(rows, chunks=(100, rows.shape[1])))
    assert isinstance(lazy, da.Array) and lazy.shape == (len(rows), compiled.num_outputs)
    np.testing.assert_array_equal(lazy.compute(), compiled.predict(rows))
    frame = dd.from_pandas(pd.DataFrame(rows, index=np.arange(len(rows)) * 3), npartitions=4)
    scored = sfd.predict(compiled, frame)
    result = scored.compute()
    np.testing.assert_array_equal(result.to_numpy(), compiled.predict(rows))
    np.testing.assert_array_equal(result.index.to_numpy(), np.arange(len(rows)) * 3)
    # the model entered the graph once: every partition's task depends on one key
    graph = dict(scored.__dask_graph__())
    assert sum(1 for v in graph.values() if isinstance(v, type(compiled))) <= 1


def test_dask_one_output_models_give_series_and_vectors(cluster, rows):
    da = pytest.importorskip("dask.array")
    import silvanforge.dask as sfd

    forest = make_forest(num_outputs=1, seed=2)
    cf = sf.compile(forest)
    X = rows_for(forest, np.random.default_rng(3), 500)
    lazy = sfd.predict(cf, da.from_array(X, chunks=(128, 2)))  # column chunks: rechunked to rows
    assert lazy.ndim == 1
    np.testing.assert_array_equal(lazy.compute(), cf.predict(X))
    with pytest.raises(sf.InputError, match="dask array or dataframe"):
        sfd.predict(cf, X)


# ------------------------------------------------------------------ the command line
def test_cli_cache_and_trusted_artifacts(tmp_path, capsys, compiled, rows, monkeypatch):
    from support_cli import read_csv, write_csv

    from silvanforge import cli

    def forge(*args):
        code = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    X = write_csv(tmp_path / "X.csv", rows)
    art = tmp_path / "m.forge"
    compiled.save(art)
    want = read_csv(write_csv(tmp_path / "want.csv", compiled.predict(rows)))
    code, _, err = forge("predict", art, "-i", X, "-o", tmp_path / "a.csv")
    assert code == 0 and "not signed" in err  # compiled again, and said so
    with CompileSpy() as spy:
        code, _, err = forge("predict", art, "-i", X, "-o", tmp_path / "b.csv", "--trust-code")
    assert code == 0 and spy.calls == 0 and "not signed" not in err
    for name in ("a.csv", "b.csv"):
        np.testing.assert_array_equal(read_csv(tmp_path / name), want)
    model = tmp_path / "model.json"
    model.write_text(open("examples/model.json").read())
    cache = tmp_path / "cache"
    forms = len(sf.compile(str(model)).forms)
    with CompileSpy() as spy:
        for out in ("c1.csv", "c2.csv"):
            code, _, err = forge("predict", model, "-i", "examples/X.csv", "-o", tmp_path / out, "--cache", cache)
            assert code == 0, err
    assert spy.calls == forms
    assert (tmp_path / "c1.csv").read_text() == (tmp_path / "c2.csv").read_text()


@pytest.mark.parametrize("options", [{}, {"rep": "sparse"}, {"rep": "array"}, {"tile_size": 4},
                                     {"reorder": "depth"}, {"rep": "bitvector"}])
def test_a_trusted_load_lowers_nothing_until_asked(tmp_path, forest, rows, options, monkeypatch):
    from silvanforge_rep_bitvector import bitvector

    from silvanforge.lowering import program

    cf = sf.compile(forest, **options)
    path = tmp_path / "m.forge"
    cf.save(path, key="k")
    lowered = []
    real_lir, real_bv = program.lower_to_lir, bitvector.lower
    monkeypatch.setattr(program, "lower_to_lir", lambda *a, **k: lowered.append(1) or real_lir(*a, **k))
    monkeypatch.setattr(bitvector, "lower", lambda *a, **k: lowered.append(1) or real_bv(*a, **k))
    back = sf.load_compiled(path, key="k")
    assert lowered == []
    np.testing.assert_array_equal(back.predict(rows), cf.predict(rows))
    assert (back.rep, back.tile_size, back.reorder, back.pad) == (cf.rep, cf.tile_size, cf.reorder, cf.pad)
    assert back.show("lir") == cf.show("lir")  # lowered again, on demand
    assert lowered
    again = tmp_path / "again.forge"
    back.save(again, key="k")  # a loaded model saves as it was loaded
    np.testing.assert_array_equal(sf.load_compiled(again, key="k").predict(rows), cf.predict(rows))


def test_cache_paths_expand_home_and_bad_ones_are_input_errors(tmp_path, forest, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    sf.compile(forest, cache="~/codecache")
    assert (tmp_path / "home" / "codecache").is_dir()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(sf.InputError, match="cannot be used as a cache directory"):
        sf.compile(forest, cache=a_file)


def test_dask_frames_with_wrong_columns_fail_before_compute(rows):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    import silvanforge.dask as sfd

    forest = make_forest(seed=4)
    forest.feature_names = [f"f{i}" for i in range(forest.num_features)]
    cf = sf.compile(forest)
    frame = dd.from_pandas(pd.DataFrame(rows, columns=[f"g{i}" for i in range(rows.shape[1])]), npartitions=2)
    with pytest.raises(sf.InputError, match="missing 'f0'"):
        sfd.predict(cf, frame)


def test_dask_result_shapes_follow_the_transform_not_the_margins():
    """A binary scikit-learn classifier has one margin and two probabilities per row: the lazy
    result must be declared with what predict returns."""
    da = pytest.importorskip("dask.array")
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    ensemble = pytest.importorskip("sklearn.ensemble")
    import silvanforge.dask as sfd

    X = np.random.default_rng(6).normal(size=(300, 4))
    model = ensemble.GradientBoostingClassifier(n_estimators=5).fit(X, (X[:, 0] > 0).astype(int))
    cf = sf.compile(model)
    lazy = sfd.predict(cf, da.from_array(X, chunks=(100, 4)))
    assert lazy.shape == (300, 2) and lazy.dtype == cf.predict(X).dtype
    np.testing.assert_array_equal(lazy.compute(scheduler="sync"), model.predict_proba(X))
    frame = sfd.predict(cf, dd.from_pandas(pd.DataFrame(X), npartitions=3)).compute(scheduler="sync")
    np.testing.assert_array_equal(frame.to_numpy(), model.predict_proba(X))
    margins = sfd.predict(cf, da.from_array(X, chunks=(100, 4)), output_margin=True)
    assert margins.shape == cf.predict(X, output_margin=True).shape == (300,)
    np.testing.assert_array_equal(margins.compute(scheduler="sync"), cf.predict(X, output_margin=True))


def test_a_full_cache_disk_warns_once_and_predicts(tmp_path, capsys, forest, rows, monkeypatch):
    """A cache is an optimisation: when its disk is full (every write fails with ENOSPC) the
    compile warns once a directory and predicts exactly; the CLI says it in one note and writes
    the predictions."""
    import errno
    import types

    from support_cli import read_csv, write_csv

    from silvanforge import cli
    from silvanforge.artifact import codecache

    xgb = pytest.importorskip("xgboost")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    # the cache's own writes fail; the predictions file and everything else are written
    monkeypatch.setattr(codecache, "tempfile", types.SimpleNamespace(mkstemp=full))
    cache = tmp_path / "cache"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = sf.compile(forest, cache=cache)
        second = sf.compile(forest, cache=cache)
    said = [w for w in caught if issubclass(w.category, sf.CacheWarning)]
    assert len(said) == 1 and "No space left on device" in str(said[0].message)
    for cf in (first, second):
        np.testing.assert_array_equal(cf.predict(rows, output_margin=True),
                                      reference.predict(forest, rows, output_margin=True))
    # the disk full before the cache's own directories could be made
    real_mkdir = os.mkdir

    def no_new_directory(path, *args, **kwargs):
        if os.path.exists(path):
            return real_mkdir(path, *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "mkdir", no_new_directory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        third = sf.compile(forest, cache=tmp_path / "cache3")
    assert any(issubclass(w.category, sf.CacheWarning) for w in caught)
    np.testing.assert_array_equal(third.predict(rows), first.predict(rows))
    monkeypatch.setattr(os, "mkdir", real_mkdir)
    X = np.random.default_rng(3).normal(size=(50, 4))
    booster = xgb.train({"max_depth": 3, "objective": "binary:logistic"}, xgb.DMatrix(X, X[:, 0] > 0), 5)
    booster.save_model(tmp_path / "m.json")
    code = cli.main([str(a) for a in ("predict", tmp_path / "m.json", "-i", write_csv(tmp_path / "X.csv", X),
                                      "-o", tmp_path / "y.csv", "--cache", tmp_path / "cache2")])
    _, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err and "No space left on device" in err
    np.testing.assert_allclose(read_csv(tmp_path / "y.csv").ravel(), booster.predict(xgb.DMatrix(X)), rtol=1e-6)

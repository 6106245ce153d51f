"""``forge bench`` runs and reports; it measures, so nothing here asserts a speed."""

from __future__ import annotations

import os
import stat
import sys
import textwrap

import numpy as np
import pytest
import silvanforge as sf
from silvanforge import cli
from silvanforge.errors import InputError
from silvanforge_bench import bench, bench_peers
from silvanforge_bench.bench_peers import lleaves_peer, onedal_peer

xgb = pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 4))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.float32)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 3, "nthread": 1},
                        xgb.DMatrix(X, label=y), 5)
    path = tmp_path_factory.mktemp("bench") / "tiny.json"
    booster.save_model(path)
    return path


def _train_data():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 4))
    return X, (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.float64)


@pytest.fixture(scope="module")
def tiny_lgb(tmp_path_factory):
    lgb = pytest.importorskip("lightgbm")
    X, y = _train_data()
    path = tmp_path_factory.mktemp("bench") / "tiny.txt"
    lgb.train({"objective": "binary", "num_leaves": 7, "min_data_in_leaf": 5, "verbose": -1,
               "num_threads": 1}, lgb.Dataset(X, y), 5).save_model(path)
    return path


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory, tiny_model, tiny_lgb):
    """Binary, regression and multiclass models of both libraries."""
    lgb = pytest.importorskip("lightgbm")
    X, _ = _train_data()
    out = tmp_path_factory.mktemp("bench-models")
    reg, cls3 = X[:, 0] * 2 + 1, (X[:, 0] > 0) + (X[:, 1] > 0.5)
    xgb.train({"objective": "reg:squarederror", "max_depth": 3, "nthread": 1},
              xgb.DMatrix(X, label=reg), 4).save_model(out / "reg.json")
    xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 3, "nthread": 1},
              xgb.DMatrix(X, label=cls3), 3).save_model(out / "multi.json")
    params = {"num_leaves": 7, "min_data_in_leaf": 5, "verbose": -1, "num_threads": 1}
    lgb.train({**params, "objective": "regression"}, lgb.Dataset(X, reg), 4).save_model(out / "reg.txt")
    lgb.train({**params, "objective": "multiclass", "num_class": 3}, lgb.Dataset(X, cls3),
              3).save_model(out / "multi.txt")
    return [tiny_model, out / "reg.json", out / "multi.json", tiny_lgb, out / "reg.txt", out / "multi.txt"]


def _check_peer(report, peer):
    assert peer in report.engines(), report.notes
    for m in report.measurements:
        assert m.seconds > 0 and m.rows_per_second > 0
        if m.engine == peer:
            assert m.agrees, f"{peer} disagrees with us by {m.max_abs_diff} on {report.model}"


def test_bench_measures_ours_and_xgboost(tiny_model):
    seen = []
    report = bench.run_bench(tiny_model, [1, 16], threads=1, repeat=1, min_time=0.001,
                             peers=["xgboost"], progress=lambda what, done, total: seen.append((done, total)))
    assert report.batch_sizes == [1, 16]
    assert report.engines() == [bench.OURS, "xgboost"]
    assert len(report.measurements) == 4
    for m in report.measurements:
        assert m.seconds > 0 and m.rows_per_second > 0
        if m.engine == "xgboost":
            assert m.agrees, f"xgboost disagrees with us by {m.max_abs_diff}"
            assert m.max_abs_diff < 1e-6
    for b in (1, 16):
        ratio, peer = report.speedup(b)
        assert ratio > 0 and peer == "xgboost"
    assert seen and seen[-1][0] == seen[-1][1]  # progress reached its total

    rows = bench.table_rows(report)
    assert len(rows) == 4 and all(len(r) == len(bench.HEADERS) for r in rows)
    assert [r[:3] for r in rows] == [["1", "1", bench.OURS], ["1", "1", "xgboost"],
                                     ["1", "16", bench.OURS], ["1", "16", "xgboost"]]
    md = bench.to_markdown(report, "forge bench tiny.json")
    assert "forge bench tiny.json" in md and "| threads | batch |" in md and "CPUs" in md
    assert "xgboost " + xgb.__version__ in md and "Build times" in md


def test_bench_compiles_once_for_any_batch_when_asked(tiny_model):
    """--compile-batch none: one compile without a batch size (a service's), said in a note;
    a bad value is an input error."""
    report = bench.run_bench(tiny_model, [1, 16], threads=1, repeat=1, min_time=0.0,
                             peers=["xgboost"], compile_batch="none")
    assert [b.what for b in report.builds if b.engine == bench.OURS] == ["compile (1 compile)"]
    assert any("compiled once for any batch size" in n for n in report.notes)
    assert all(m.agrees for m in report.measurements if m.engine == "xgboost")
    with pytest.raises(InputError, match="compile batch"):
        bench.run_bench(tiny_model, [1], threads=1, repeat=1, min_time=0.0, peers=[], compile_batch=0)


def test_bench_all_installed_peers_agree(tiny_model):
    report = bench.run_bench(tiny_model, [8], threads=1, repeat=1, min_time=0.0,
                             cache_dir=str(tiny_model.parent / "cache"))
    assert bench.OURS in report.engines()
    for m in report.measurements:
        assert m.rows_per_second > 0
        if m.engine != bench.OURS:
            assert m.agrees, f"{m.engine} disagrees with us by {m.max_abs_diff}"
    # every applicable peer either ran or says why not
    for name, _, formats, _ in bench.PEERS:
        if "xgboost-json" in formats:
            assert name in report.engines() or any(n.startswith(name + ":") for n in report.notes)


def test_missing_peer_is_a_note(tiny_model, monkeypatch):
    real = bench._importable
    monkeypatch.setattr(bench, "_importable", lambda module: module != "xgboost" and real(module))
    report = bench.run_bench(tiny_model, [4], threads=1, repeat=1, min_time=0.0, peers=["xgboost"])
    assert report.engines() == [bench.OURS]
    assert any("xgboost" in n and "not installed" in n for n in report.notes)
    assert report.speedup(4) is None


def test_failing_peer_is_a_note(tiny_model, monkeypatch):
    def broken(*args):
        raise RuntimeError("cannot load\nthis model")

    monkeypatch.setattr(bench, "PEERS", [("xgboost", "xgboost", ("xgboost-json",), broken)])
    report = bench.run_bench(tiny_model, [4], threads=1, repeat=1, min_time=0.0)
    assert report.engines() == [bench.OURS]
    assert any("skipped" in n and "cannot load this model" in n for n in report.notes)


def test_unavailable_peer_says_why(tiny_model, monkeypatch):
    def unavailable(ctx):
        raise bench_peers.PeerUnavailable("xgboost: needs something; do this")

    monkeypatch.setattr(bench, "PEERS", [("xgboost", None, ("xgboost-json",), unavailable)])
    report = bench.run_bench(tiny_model, [4], threads=1, repeat=1, min_time=0.0)
    assert report.engines() == [bench.OURS]
    assert report.notes == ["xgboost: needs something; do this"]


def test_missing_optional_peers_are_notes(tiny_model, monkeypatch):
    real = bench._importable
    monkeypatch.setattr(bench, "_importable",
                        lambda module: module not in ("tl2cgen", "treelite", "hummingbird") and real(module))
    report = bench.run_bench(tiny_model, [4], threads=1, repeat=1, min_time=0.0,
                             peers=["tl2cgen", "treelite-gtil", "hummingbird"])
    assert report.engines() == [bench.OURS]
    for peer, hint in (("tl2cgen", "pip install treelite tl2cgen"), ("treelite-gtil", "pip install treelite"),
                       ("hummingbird", "pip install hummingbird-ml torch")):
        assert any(n.startswith(f"{peer}: not installed") and hint in n for n in report.notes), report.notes


def test_bench_thread_list(tiny_model):
    report = bench.run_bench(tiny_model, [1, 16], threads=[1, 2], repeat=1, min_time=0.0, peers=["xgboost"])
    assert report.threads == [1, 2]
    assert {(m.engine, m.threads, m.batch_size) for m in report.measurements} == {
        (e, t, b) for e in (bench.OURS, "xgboost") for t in (1, 2) for b in (1, 16)}
    rows = bench.table_rows(report)
    assert [r[0] for r in rows] == ["1"] * 4 + ["2"] * 4
    assert report.speedup(16, 2)[1] == "xgboost"
    assert "1, 2 threads" in bench.describe(report)
    assert sum(b.engine == bench.OURS for b in report.builds) == 1
    assert "compiles)" in bench.describe_builds(report)  # one per schedule and thread count


def test_treelite_peers(tiny_models, tmp_path):
    pytest.importorskip("treelite")
    pytest.importorskip("tl2cgen")
    cache = tmp_path / "cache"
    for model in tiny_models:
        report = bench.run_bench(model, [1, 16], threads=1, repeat=1, min_time=0.0,
                                 peers=["treelite-gtil", "tl2cgen"], cache_dir=str(cache))
        _check_peer(report, "treelite-gtil")
        _check_peer(report, "tl2cgen")
        build = [b for b in report.builds if b.engine == "tl2cgen"]
        assert len(build) == 1 and not build[0].cached and build[0].seconds > 0
        assert "tl2cgen" in report.versions and "gcc" in report.versions
    # the shared library is cached by the model's hash: a second run does not build
    assert len(list(cache.glob("tl2cgen-*.so"))) == len(tiny_models)
    # (OpenMP's process-wide limit lowered, as Hummingbird's torch.set_num_threads(1) leaves
    # it: TL2cgen's 2-thread predictor is still made)
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
        again = bench.run_bench(tiny_models[0], [4], threads=[1, 2], repeat=1, min_time=0.0,
                                peers=["tl2cgen"], cache_dir=str(cache))
    assert {m.threads for m in again.measurements if m.engine == "tl2cgen"} == {1, 2}
    _check_peer(again, "tl2cgen")
    assert [b.cached for b in again.builds if b.engine == "tl2cgen"] == [True]
    assert "tl2cgen gcc -O3 shared library: cached (built in " in bench.describe_builds(again)


def test_hummingbird_peer(tiny_models):
    pytest.importorskip("torch")
    pytest.importorskip("hummingbird.ml")
    for model in tiny_models:
        report = bench.run_bench(model, [1, 16], threads=1, repeat=1, min_time=0.0, peers=["hummingbird"])
        _check_peer(report, "hummingbird")
        assert "torch" in report.versions and "hummingbird-ml" in report.versions


# --------------------------------------------------------------------------- lleaves
@pytest.fixture
def no_lleaves_here(monkeypatch, tmp_path):
    """As if lleaves could not run in this environment and no environment had been built for it."""
    monkeypatch.setattr(lleaves_peer, "importable", lambda module: False)
    monkeypatch.delenv(lleaves_peer.VENV_ENV, raising=False)
    monkeypatch.setattr(lleaves_peer, "default_venv", lambda: str(tmp_path / "no-such-venv"))


def _lleaves_note(report):
    notes = [n for n in report.notes if n.startswith("lleaves:")]
    assert len(notes) == 1, report.notes
    return notes[0]


def test_lleaves_without_environment_is_a_note(tiny_lgb, no_lleaves_here):
    report = bench.run_bench(tiny_lgb, [4], threads=1, repeat=1, min_time=0.0, peers=["lleaves"])
    assert report.engines() == [bench.OURS]
    note = _lleaves_note(report)
    assert "llvmlite < 0.44" in note or "not installed" in note
    assert "benchmarks/lleaves_env.py" in note and "--lleaves-venv" in note


def test_lleaves_fake_environments_are_notes(tiny_lgb, no_lleaves_here, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    report = bench.run_bench(tiny_lgb, [4], threads=1, repeat=1, min_time=0.0, peers=["lleaves"],
                             lleaves_venv=str(empty))
    assert "is not a Python virtual environment" in _lleaves_note(report)

    broken = tmp_path / "broken"
    _fake_python(broken, "echo 'No module named lleaves' >&2; exit 1")
    monkeypatch.setenv(lleaves_peer.VENV_ENV, str(broken))  # the variable works like the option
    report = bench.run_bench(tiny_lgb, [4], threads=1, repeat=1, min_time=0.0, peers=["lleaves"])
    assert "not usable" in _lleaves_note(report) and "No module named lleaves" in _lleaves_note(report)

    built = []

    def cannot_build(venv, **kwargs):
        built.append(venv)
        raise bench_peers.PeerUnavailable(f"lleaves: could not build its environment {venv} (no network)")

    monkeypatch.setattr(lleaves_peer, "build_venv", cannot_build)
    missing = tmp_path / "to-build"
    report = bench.run_bench(tiny_lgb, [4], threads=1, repeat=1, min_time=0.0, peers=["lleaves"],
                             lleaves_venv=str(missing))
    assert built == [str(missing)]  # a path named explicitly is built on demand
    assert "could not build" in _lleaves_note(report) and report.engines() == [bench.OURS]


def _fake_python(venv, body):
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return python


def _fake_dists(site, lleaves_version):
    """lleaves' metadata (the worker asks for its version) and an llvmlite old enough."""
    dist = site / f"lleaves-{lleaves_version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: lleaves\nVersion: {lleaves_version}\n")
    (site / "llvmlite").mkdir()
    (site / "llvmlite" / "__init__.py").write_text("__version__ = '0.43.0'\n")


FAKE_LLEAVES = textwrap.dedent("""
    import os
    import lightgbm


    class Model:
        def __init__(self, model_file):
            self.booster = lightgbm.Booster(model_file=model_file)

        def compile(self, cache=None):
            if cache and not os.path.exists(cache):
                open(cache, "w").close()

        def predict(self, X, n_jobs=1):
            return self.booster.predict(X, num_threads=n_jobs)
""")


def test_lleaves_subprocess_protocol(tiny_lgb, no_lleaves_here, tmp_path):
    """The worker in another interpreter: a fake lleaves (LightGBM underneath) and llvmlite 0.43."""
    pytest.importorskip("lightgbm")
    site = tmp_path / "site"
    (site / "lleaves").mkdir(parents=True)
    (site / "lleaves" / "__init__.py").write_text(FAKE_LLEAVES)
    _fake_dists(site, "9.9.9")
    venv = tmp_path / "venv"
    _fake_python(venv, f'PYTHONPATH="{site}" exec "{sys.executable}" "$@"')
    cache = tmp_path / "cache"
    for run in range(2):
        report = bench.run_bench(tiny_lgb, [1, 16], threads=[1, 2], repeat=1, min_time=0.0,
                                 peers=["lleaves"], lleaves_venv=str(venv), cache_dir=str(cache))
        _check_peer(report, "lleaves")
        assert {(m.threads, m.batch_size) for m in report.measurements if m.engine == "lleaves"} == {
            (1, 1), (1, 16), (2, 1), (2, 16)}
        assert report.versions["lleaves"] == "9.9.9"
        assert report.versions["llvmlite (lleaves env)"] == "0.43.0"
        assert any("subprocess" in n for n in report.notes)
        assert [b.cached for b in report.builds if b.engine == "lleaves"] == [run == 1]
        assert ("lleaves LLVM compile: cached, loaded in" in bench.describe_builds(report)) == (run == 1)
    assert len(list(cache.glob("lleaves-*.o"))) == 1


def test_lleaves_worker_failure_is_a_note(tiny_lgb, no_lleaves_here, tmp_path):
    site = tmp_path / "site"
    (site / "lleaves").mkdir(parents=True)
    (site / "lleaves" / "__init__.py").write_text("class Model:\n    def __init__(self, model_file):\n"
                                                  "        raise ValueError('cannot parse this model')\n")
    _fake_dists(site, "1.0")
    venv = tmp_path / "venv"
    _fake_python(venv, f'PYTHONPATH="{site}" exec "{sys.executable}" "$@"')
    report = bench.run_bench(tiny_lgb, [4], threads=1, repeat=1, min_time=0.0, peers=["lleaves"],
                             lleaves_venv=str(venv))
    assert report.engines() == [bench.OURS]
    assert "skipped" in _lleaves_note(report) and "cannot parse this model" in _lleaves_note(report)


def test_real_lleaves_environment(tiny_lgb, tmp_path, monkeypatch):
    """Only where an lleaves environment has been built (python benchmarks/lleaves_env.py)."""
    venv = os.environ.get(lleaves_peer.VENV_ENV) or lleaves_peer.default_venv()
    if not os.path.isfile(lleaves_peer.venv_python(venv)):
        pytest.skip(f"no lleaves environment at {venv}")
    report = bench.run_bench(tiny_lgb, [1, 16], threads=1, repeat=1, min_time=0.0, peers=["lleaves"],
                             lleaves_venv=venv, cache_dir=str(tmp_path))
    _check_peer(report, "lleaves")


# --------------------------------------------------------------------------- oneDAL
@pytest.fixture(scope="module")
def daal4py_here():
    try:
        onedal_peer.import_daal4py()
    except ImportError as exc:
        pytest.skip(f"daal4py does not import here: {exc}")


def test_onedal_peer(tiny_models, daal4py_here):
    """Binary, regression and multiclass models of both libraries, at 1 and 2 threads."""
    for model in tiny_models:
        report = bench.run_bench(model, [1, 16], threads=[1, 2], repeat=1, min_time=0.0, peers=["onedal"])
        _check_peer(report, "onedal")
        assert {(m.threads, m.batch_size) for m in report.measurements if m.engine == "onedal"} == {
            (t, b) for t in (1, 2) for b in (1, 16)}
        assert "scikit-learn-intelex" in report.versions


@pytest.fixture(scope="module")
def models_onedal_cannot_predict(tmp_path_factory):
    """A LightGBM model with a categorical split and one with an exp link (gamma)."""
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(8)
    X = rng.normal(size=(400, 3))
    X[:, 2] = rng.integers(0, 12, len(X))
    effect = rng.normal(size=12)
    out = tmp_path_factory.mktemp("onedal")
    params = {"num_leaves": 7, "min_data_in_leaf": 5, "min_data_per_group": 5, "cat_smooth": 1,
              "max_cat_to_onehot": 2, "verbose": -1, "num_threads": 1}
    y = (effect[X[:, 2].astype(int)] + X[:, 0] > 0).astype(float)
    lgb.train({**params, "objective": "binary"}, lgb.Dataset(X, y, categorical_feature=[2]),
              4).save_model(out / "categorical.txt")
    lgb.train({**params, "objective": "gamma"}, lgb.Dataset(X[:, :2], np.exp(X[:, 0])),
              4).save_model(out / "gamma.txt")
    return out / "categorical.txt", out / "gamma.txt"


def test_onedal_says_what_it_cannot_predict(models_onedal_cannot_predict, daal4py_here):
    categorical, gamma = models_onedal_cannot_predict
    for model, why in ((categorical, "categorical splits"), (gamma, "objective gamma")):
        report = bench.run_bench(model, [4], threads=1, repeat=1, min_time=0.0, peers=["onedal"])
        assert report.engines() == [bench.OURS]
        assert [n for n in report.notes if n.startswith("onedal:")] == [
            n for n in report.notes if "skipped for this model" in n and why in n], report.notes


def test_onedal_disagreeing_is_skipped_not_timed(models_onedal_cannot_predict, daal4py_here, monkeypatch):
    """Let the gamma model through the up-front refusal: oneDAL, applying no exp link, then
    differs from ours, and forge bench skips it rather than timing wrong numbers."""
    monkeypatch.setattr(onedal_peer, "_IDENTITY_LGB", (*onedal_peer._IDENTITY_LGB, "gamma"))
    report = bench.run_bench(models_onedal_cannot_predict[1], [4], threads=1, repeat=1, min_time=0.0,
                             peers=["onedal"])
    assert report.engines() == [bench.OURS]
    assert any(n.startswith("onedal: skipped") and "differ from ours" in n for n in report.notes), report.notes


def test_onedal_missing_is_a_note(tiny_model, monkeypatch):
    real = bench._importable
    monkeypatch.setattr(bench, "_importable", lambda module: module != "daal4py" and real(module))
    report = bench.run_bench(tiny_model, [4], threads=1, repeat=1, min_time=0.0, peers=["onedal"])
    assert report.engines() == [bench.OURS]
    assert any(n.startswith("onedal: not installed") and "pip install scikit-learn-intelex" in n
               for n in report.notes), report.notes


def test_bench_cli_writes_markdown(tiny_model, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    md = tmp_path / "bench.md"
    args = ["bench", str(tiny_model), "--batch-sizes", "1,16", "--repeat", "1", "--min-time", "0",
            "--threads", "1,2", "--peers", "xgboost", "--markdown", str(md)]
    code = cli.main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "silvanforge" in out and "xgboost" in out and "rows/s" in out and "threads" in out
    assert "build times (not in rows/s)" in out and f"wrote {md}" in out
    text = md.read_text()
    assert text.startswith("# forge bench: tiny.json")
    assert "--markdown" in text and "--threads 1,2" in text
    assert "| 1 | 16 | xgboost |" in text and "| 2 | 16 | xgboost |" in text
    assert "- Machine: " in text and "- Versions: " in text and "- Date: " in text

    # an existing file is not replaced unless asked, and the refusal comes before any timing
    assert cli.main(args) != 0
    assert "--append" in capsys.readouterr().err and md.read_text() == text

    assert cli.main([*args[:-2], "--threads", "1", "--markdown", str(md), "--append"]) == 0
    assert "appended to" in capsys.readouterr().out
    appended = md.read_text()
    assert appended.startswith(text) and appended.count("forge bench: tiny.json") == 2
    assert "\n## forge bench: tiny.json" in appended[len(text):]

    assert cli.main([*args, "--overwrite"]) == 0
    capsys.readouterr()
    assert md.read_text().count("forge bench: tiny.json") == 1


def test_bench_cli_option_errors(tiny_model, tmp_path, capsys):
    base = ["bench", str(tiny_model), "--batch-sizes", "4", "--repeat", "1", "--min-time", "0",
            "--peers", "xgboost"]
    for extra, message in ((["--append"], "need --markdown"),
                           (["--threads", "0"], "threads"),
                           (["--threads", "1,x"], "threads"),
                           (["--markdown", str(tmp_path / "no" / "dir.md")], "directory does not exist"),
                           (["--markdown", str(tmp_path / "a.md"), "--append", "--overwrite"], "exclude"),
                           (["--missing", "2"], "--missing"), (["--missing", "0.5", "--output", "leaf"], "predict only")):
        assert cli.main([*base, *extra]) != 0, extra
        assert message in capsys.readouterr().err, extra


def test_parse_threads(monkeypatch):
    from silvanforge.runtime import threads

    monkeypatch.setattr(threads, "default_threads", lambda: 6)
    assert bench.parse_threads(None) is None
    assert bench.parse_threads("2") == [2]
    assert bench.parse_threads("1, all,1") == [1, 6]
    for bad in ("", "0", "1,-2", "two"):
        with pytest.raises(InputError):
            bench.parse_threads(bad)
    with pytest.raises(InputError):
        bench._thread_counts([1, 0])


def test_write_markdown_append_to_new_file(tiny_model, tmp_path):
    report = bench.run_bench(tiny_model, [4], threads=1, repeat=1, min_time=0.0, peers=[])
    md = tmp_path / "new.md"
    assert bench.write_markdown(str(md), report, "forge bench x", append=True) == "wrote"
    assert md.read_text().startswith("## forge bench: tiny.json")
    assert bench.write_markdown(str(md), report, "forge bench y", append=True) == "appended to"
    assert md.read_text().count("## forge bench") == 2


def test_machine_details():
    details = bench.machine_details()
    assert details["cpu"] and "logical CPUs" in details["cores"] and details["python"]
    assert "CPUs" in bench.machine_description()


def test_random_rows_and_compare(tiny_model):
    forest = sf.load_model(tiny_model)
    X = bench.random_rows(forest, 100)
    assert X.shape == (100, 4) and X.dtype == np.float32 and np.isfinite(X).all()
    ours = np.array([0.25, 0.5, np.nan])
    assert bench.compare(ours, np.array([[0.75, 0.25], [0.5, 0.5], [np.nan, np.nan]])) == (0.0, True)
    diff, agrees = bench.compare(ours, np.array([[0.25], [0.6], [np.nan]]))
    assert not agrees and diff == pytest.approx(0.1)


def test_parse_batch_sizes():
    assert bench.parse_batch_sizes("64, 1,64") == [1, 64]
    for bad in ("", "0", "1,-4", "1,x"):
        with pytest.raises(InputError):
            bench.parse_batch_sizes(bad)


def test_time_call_counts_calls():
    calls = []
    seconds = bench.time_call(calls.append, 1, repeat=2, min_time=0.001)
    assert seconds > 0 and len(calls) > 2


def test_time_call_cycles_through_batches():
    seen = []
    parts = [np.full(3, i) for i in range(5)]
    bench.time_call(lambda a: seen.append(int(a[0])), parts, repeat=2, min_time=0.001)
    assert set(seen) == set(range(5))
    counts = np.bincount(seen)
    assert counts.max() - counts.min() <= 2  # the calls go round, every batch about as often


def test_rotation_batches_are_distinct_and_bounded():
    from silvanforge_bench.bench_peers._timing import (ROTATE_BATCHES, ROTATE_BYTES, ROTATE_ROWS, pool_rows,
                                                       rotation)

    X = np.arange(40_000 * 2).reshape(40_000, 2)
    parts = rotation(X, 512)
    assert len(parts) == ROTATE_BATCHES and all(p.shape == (512, 2) for p in parts)
    assert len({int(p[0, 0]) for p in parts}) == len(parts)
    assert len(rotation(X[:700], 512)) == 1 and len(rotation(X[:100], 512)[0]) == 100
    assert pool_rows(4096, 64) == ROTATE_BATCHES * 4096
    assert pool_rows(4096, 8000) == ROTATE_BYTES // 8000  # wide rows: fewer batches
    assert pool_rows(4096, 10**9) == 4096  # never fewer rows than the largest batch
    # small batches rotate through ROTATE_ROWS distinct rows, not 16 batches a predictor learns
    assert pool_rows(16, 64) == ROTATE_ROWS
    ones = rotation(X, 1)
    assert len(ones) == ROTATE_ROWS and len({int(p[0, 0]) for p in ones}) == ROTATE_ROWS
    assert len(rotation(X, 16)) == ROTATE_ROWS // 16
    assert len(rotation(X[:100], 1)) == 100  # as many as there are


def test_bench_times_several_batches(tiny_model, monkeypatch):
    """Every engine is timed over the same rotation of different rows."""
    from silvanforge_bench import bench_peers

    seen = {}
    real = bench_peers._timing.time_call

    def spy(fn, args, repeat, min_time):
        seen.setdefault(len(args[0]) if isinstance(args, list) else -1, []).append(len(args))
        return real(fn, args, repeat, min_time)

    monkeypatch.setattr(bench, "time_call", spy)
    bench.run_bench(tiny_model, [4, 64], threads=1, repeat=1, min_time=0.0, peers=["xgboost"])
    # ours and xgboost, each over ROTATE_ROWS distinct rows (4096: 1024 batches of 4, 64 of 64)
    rows = bench_peers._timing.ROTATE_ROWS
    assert seen[4] == [rows // 4] * 2 and seen[64] == [rows // 64] * 2


# --------------------------------------------------------------------------- catboost
def test_catboost_peers(tmp_path):
    """CatBoost's predict and ONNX Runtime on CatBoost's ONNX export, on binary, multiclass and
    regression models (.cbm and JSON); a model with categorical features is a note."""
    cb = pytest.importorskip("catboost")
    pytest.importorskip("onnxruntime")
    pd = pytest.importorskip("pandas")
    X, y = _train_data()
    fit = dict(iterations=5, depth=3, verbose=0, thread_count=1, allow_writing_files=False)
    cb.CatBoostClassifier(**fit).fit(X, y.astype(int)).save_model(str(tmp_path / "bin.cbm"))  # ONNX wants integer labels
    cb.CatBoostClassifier(loss_function="MultiClass", **fit).fit(X, (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)).save_model(
        str(tmp_path / "multi.cbm"))
    reg = cb.CatBoostRegressor(**fit).fit(X, X[:, 0] * 2 + 1)
    reg.save_model(str(tmp_path / "reg.json"), format="json")
    for name in ("bin.cbm", "multi.cbm", "reg.json"):
        report = bench.run_bench(tmp_path / name, [1, 16], threads=1, repeat=1, min_time=0.0,
                                 peers=["catboost", "onnxruntime"])
        _check_peer(report, "catboost")
        _check_peer(report, "onnxruntime")
    frame = pd.DataFrame({"x": X[:, 0], "c": np.where(X[:, 1] > 0, "a", "b")})
    cb.CatBoostRegressor(cat_features=["c"], **fit).fit(frame, X[:, 0]).save_model(str(tmp_path / "cat.cbm"))
    report = bench.run_bench(tmp_path / "cat.cbm", [4], threads=1, repeat=1, min_time=0.0,
                             peers=["catboost", "onnxruntime"])
    assert any(n.startswith("catboost:") and "categorical" in n for n in report.notes), report.notes


def test_the_header_names_the_form_each_batch_size_ran(tiny_model):
    """Each batch size may be answered by a form of its own (a compile per batch size, and a
    plan's bands): the header names each one, not the first compile's alone."""
    from silvanforge_bench.report import describe

    report = bench.run_bench(tiny_model, [1, 16, 512], threads=1, repeat=1, min_time=0.0, peers=[])
    assert sorted(report.forms) == [1, 16, 512]
    for b, text in report.forms.items():  # (a form that walks nothing has no schedule)
        assert text.startswith("rep=") and "batch_size=" in text
    header = describe(report)
    if len(set(report.forms.values())) > 1:
        assert all(f"{b} rows {text}" in header for b, text in report.forms.items())
    else:
        assert f"rep {report.rep}" in header
    report.forms = {1: "rep=sparse schedule=a", 512: "rep=levelwise schedule=b"}
    assert "1 rows rep=sparse schedule=a; 512 rows rep=levelwise schedule=b" in describe(report)

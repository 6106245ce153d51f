"""Plans by request size: which form answers a call of n rows (dispatch at every band edge equal
to the reference), what keeps a plan (artifacts, pickles, the code cache), the tuner
(``sf.tune``, ``forge tune``) and its record.  No timing is asserted: the tuner's choices are
whatever this machine measured; only that they are kept and exact."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import xgboost as xgb
from strategies import make_forest, rows_for
from support_plugins import CompileSpy

import silvanforge as sf
from silvanforge import cli
from silvanforge.options import CompileOptions
from silvanforge.plan.bands import Band, check_bands, dispatch_table
from silvanforge.plan.policy import untuned_bands
from silvanforge.plan.tuning import compile_plan, estimate_errors
from silvanforge.plugins import registry
from silvanforge.runtime import reference


@pytest.fixture(scope="module")
def forest():
    return make_forest(num_outputs=3, seed=41)


@pytest.fixture(scope="module")
def planned(forest):
    """Three forms of three representations, so a wrong dispatch would show in the kernels."""
    return compile_plan(forest, [(2, CompileOptions(rep="sparse", batch_size=1, pad=False)),
                                 (20, CompileOptions(rep="array", batch_size=16)),
                                 (None, CompileOptions(rep="reorg"))])


@pytest.fixture(scope="module")
def booster():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 12)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) * np.nan_to_num(X[:, 2]) > 0).astype(int)
    return xgb.train({"max_depth": 6, "objective": "binary:logistic", "eta": 0.2}, xgb.DMatrix(X, y), 80)


EDGES = (0, 1, 2, 3, 15, 16, 17, 20, 21, 64, 300)


def test_bands_cover_every_request_size():
    check_bands([Band(1, 2, 0), Band(3, None, 1)], 2)
    for bad in ([Band(2, None, 0)], [Band(1, 2, 0), Band(4, None, 0)], [Band(1, 3, 0)], [Band(1, None, 3)],
                [Band(1, None, 0), Band(2, None, 0)]):
        with pytest.raises(sf.InputError):
            check_bands(bad, 2)
    assert dispatch_table([Band(1, 2, 1), Band(3, None, 0)], 4) == [1, 1, 1, 0, 0]
    # options the user gave decide the one program; a cheap forest gets one form
    small = make_forest(num_outputs=1, seed=3)
    assert len(untuned_bands(small, CompileOptions(rep="sparse"), 1e6)) == 1
    assert len(untuned_bands(small, CompileOptions(), 10.0)) == 1
    # ... unless another representation is estimated to save enough at a small band's size
    assert len(untuned_bands(small, CompileOptions(), 10.0, saving_ns=1e4)) == 3
    assert [b[2] for b in untuned_bands(small, CompileOptions(), 1e6)] == [1, 64, None]
    assert [b[2] for b in untuned_bands(small, CompileOptions(batch_size=100), 1e6)] == [1, 100]


def test_the_one_row_form_reaches_as_far_as_the_next_form_pays_its_block(monkeypatch):
    """The one-row band ends where the next band's form, called with that many rows, is no
    longer estimated ONE_ROW_MARGIN times a walk a row (its whole block on a few rows) up to
    ONE_ROW_REACH rows, ONE_ROW_FAR_MARGIN times up to SMALL_ROWS; the bands after it follow
    on, and a one-row band reaching SMALL_ROWS leaves no small band."""
    from silvanforge.plan import policy
    from silvanforge.plan.bands import SMALL_ROWS

    small = make_forest(num_outputs=1, seed=3)
    assert untuned_bands(small, CompileOptions(), 1e6, one_row=5)[:2] == [(1, 5, 1), (6, 256, 64)]
    assert untuned_bands(small, CompileOptions(), 1e6, small_band=True, one_row=6)[:2] == [(1, 6, 1), (7, 16, 16)]
    assert untuned_bands(small, CompileOptions(), 1e6, one_row=16)[:2] == [(1, 16, 1), (17, 256, 64)]
    assert untuned_bands(small, CompileOptions(), 1e6, small_band=True, one_row=16)[:2] == [(1, 15, 1), (16, 16, 16)]
    assert untuned_bands(small, CompileOptions(), 1e6, one_row=1)[0] == (1, policy.ONE_ROW_MAX, 1)
    assert untuned_bands(small, CompileOptions(batch_size=100), 1e6, one_row=4) == [(1, 4, 1), (5, None, 100)]
    # the estimates decide: a deep forest's next form far dearer a row at a few rows than a walk
    rng = np.random.default_rng(7)
    X = rng.normal(size=(3000, 8))
    deep = sf.load_model(xgb.train({"max_depth": 8, "eta": 0.1}, xgb.DMatrix(X, X[:, 0] * X[:, 1]), 100))
    reach = policy._untuned_spec(deep, CompileOptions(target="cpu"), "cpu")[0][1]
    assert policy.ONE_ROW_MAX <= reach <= SMALL_ROWS
    # the form priced is the one answering the next band: a compile's batch size up to MID_MAX
    # has no small or mid band, its main form is next
    asked = []
    called = policy.called_cost_of
    monkeypatch.setattr(policy, "called_cost_of", lambda cls, *a: asked.append(a[2]) or called(cls, *a))
    for batch, lowered in ((100, 100), (5, 5), (None, None)):
        asked.clear()
        spec = policy._untuned_spec(deep, CompileOptions(target="cpu", batch_size=batch), "cpu")
        check_bands([Band(lo, hi, 0) for lo, hi, _ in spec], 1)
        if lowered is not None:
            assert asked[1:] and set(asked[1:]) == {lowered}
        else:
            assert set(asked[1:]) <= {16, 64}
    monkeypatch.setattr(policy, "called_cost_of", called)
    monkeypatch.setattr(policy, "ONE_ROW_MARGIN", 1e9)  # never worth it: the band as it was
    assert policy._untuned_spec(deep, CompileOptions(target="cpu"), "cpu")[0][1] == policy.ONE_ROW_MAX
    monkeypatch.setattr(policy, "ONE_ROW_MARGIN", 0.0)  # always up to ONE_ROW_REACH, never past it
    monkeypatch.setattr(policy, "ONE_ROW_FAR_MARGIN", 1e9)
    assert policy._untuned_spec(deep, CompileOptions(target="cpu"), "cpu")[0][1] == policy.ONE_ROW_REACH
    monkeypatch.setattr(policy, "ONE_ROW_FAR_MARGIN", 0.0)  # always: every small request, no small band
    spec = policy._untuned_spec(deep, CompileOptions(target="cpu"), "cpu")
    assert spec[0][1] == SMALL_ROWS and spec[1][0] == SMALL_ROWS + 1, spec


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dispatch_by_request_size_matches_the_reference_at_every_band_edge(forest, planned, dtype):
    assert [f.options.rep for f in planned.forms] == ["sparse", "array", "reorg"]
    assert [(b.lo, b.hi, b.form) for b in planned.bands] == [(1, 2, 0), (3, 20, 1), (21, None, 2)]
    rng = np.random.default_rng(9)
    for n in EDGES:
        X = rows_for(forest, rng, n).astype(dtype)
        assert planned.form_for(n) is planned.forms[0 if n <= 2 else 1 if n <= 20 else 2]
        np.testing.assert_array_equal(planned.predict(X), reference.predict(forest, X))
        np.testing.assert_array_equal(planned.predict(X, output_margin=True),
                                      reference.predict(forest, X, output_margin=True))
        # the general path of the same form (a frame-like copy, a missing value) agrees
        np.testing.assert_array_equal(planned.predict(np.asfortranarray(X), missing=-12345.0),
                                      reference.predict(forest, X))


def test_the_untuned_plan_compiles_and_times_nothing_on_its_first_requests(booster, monkeypatch):
    cf = sf.compile(booster)
    assert len(cf.forms) >= 2, cf.plan_text()  # a one-row form beside the main one
    assert cf.bands[0].lo == 1 and cf.forms[cf.bands[0].form].options.batch_size == 1
    assert cf.main.options.batch_size is None
    X = np.random.default_rng(2).normal(size=(300, 12)).astype(np.float32)
    import time as time_module

    def no_clock():
        raise AssertionError("a request looked at the clock")

    with CompileSpy() as spy:
        monkeypatch.setattr(time_module, "perf_counter", no_clock)
        got = [cf.predict(X[:n]) for n in (1, 2, 3, 17, 300)]
        monkeypatch.undo()
    assert spy.calls == 0
    for n, y in zip((1, 2, 3, 17, 300), got):
        np.testing.assert_allclose(y, booster.predict(xgb.DMatrix(X[:n])), rtol=1e-6, atol=1e-7)
    assert "rows" in cf.plan_text() and "form 0" in cf.plan_text()


def _same_plan(a, b):
    assert [(x.lo, x.hi, x.form) for x in a.bands] == [(x.lo, x.hi, x.form) for x in b.bands]
    assert [f.options.rep for f in a.forms] == [f.options.rep for f in b.forms]
    assert [f.digest for f in a.forms] == [f.digest for f in b.forms]


def test_the_plan_survives_artifacts_pickles_and_the_code_cache(tmp_path, forest, planned):
    rng = np.random.default_rng(4)
    path = tmp_path / "m.forge"
    planned.save(path, key="k")
    with CompileSpy() as spy:
        loaded = sf.load_compiled(path, key="k")
        unpickled = pickle.loads(pickle.dumps(planned))
    assert spy.calls == 0
    with pytest.warns(sf.ArtifactWarning, match="not signed"):
        untrusted = sf.load_compiled(path)  # compiled again from the recorded options
    for cf in (loaded, unpickled, untrusted):
        _same_plan(cf, planned)
        for n in EDGES:
            X = rows_for(forest, rng, n)
            np.testing.assert_array_equal(cf.predict(X), reference.predict(forest, X))
    cache = tmp_path / "cache"
    first = sf.compile(forest, cache=cache, batch_size=4096)
    with CompileSpy() as spy:
        again = sf.compile(forest, cache=cache, batch_size=4096)
    assert spy.calls == 0
    _same_plan(again, first)
    other = sf.compile(forest, cache=cache, batch_size=64)  # other options: another entry
    assert other.batch_size == 64


@pytest.mark.parametrize("challenger, kept", [(0.99, True), (0.5, False)])
def test_the_tuner_keeps_the_untuned_form_unless_clearly_beaten(booster, monkeypatch, challenger, kept):
    """Timings are faked (the untuned plan's forms 1 ms a call, every other ``challenger`` ms):
    a form 1% faster does not displace the untuned plan's (timing noise is larger), one twice
    as fast does; either way the plan is exact."""
    from silvanforge.plan import tuning

    untuned = {f.digest for f in sf.compile(booster, threads=1).forms}
    monkeypatch.setattr(tuning, "_per_call", lambda cf, pool, size, threads:
                        1e-3 if cf.forms[0].digest in untuned else challenger * 1e-3)
    tuned = sf.tune(booster, threads=1, budget_s=30)
    assert ({f.digest for f in tuned.forms} <= untuned) == kept
    X = np.random.default_rng(5).normal(size=(40, 12)).astype(np.float32)
    for n in (1, 2, 16, 40):
        np.testing.assert_array_equal(tuned.predict(X[:n]), reference.predict(sf.load_model(booster), X[:n]))


@pytest.mark.parametrize("first, kept", [(1.10, False), (1.30, True)])
def test_the_tuner_times_close_forms_again_before_deciding(booster, monkeypatch, first, kept):
    """Timings faked: the untuned plan's forms take 1 ms a call; every other form is timed
    ``first`` ms the first time at a size (a slow spell of the machine) and 0.5 ms after.  One
    timed within the contest's margin of the fastest is timed again and wins; one timed far
    slower is not, and the untuned plan keeps the size."""
    from silvanforge.plan import tuning

    untuned = {f.digest for f in sf.compile(booster, threads=1).forms}
    seen = set()

    def fake(cf, pool, size, threads):
        digest = cf.forms[0].digest
        if digest in untuned:
            return 1e-3
        again = (digest, size) in seen
        seen.add((digest, size))
        return 0.5e-3 if again else first * 1e-3

    monkeypatch.setattr(tuning, "_per_call", fake)
    # (The untuned plan's other forms tie with its own here, ahead of every challenger.)
    tuned = sf.tune(booster, threads=1, budget_s=30)
    assert ({f.digest for f in tuned.forms} <= untuned) == kept
    X = np.random.default_rng(6).normal(size=(40, 12)).astype(np.float32)
    for n in (1, 2, 16, 40):
        np.testing.assert_array_equal(tuned.predict(X[:n]), reference.predict(sf.load_model(booster), X[:n]))


def test_contenders_are_the_untuned_form_and_the_close_ones():
    from silvanforge.plan.tuning import CONTENDERS, Candidate, contenders

    def cand(us):
        return Candidate(None, None, seconds={} if us is None else {16: us * 1e-6})

    timed = [cand(10), cand(9), cand(9.5), cand(10.2), cand(20), cand(None)]
    assert contenders(timed, 16, 0) == [0, 1, 2][:CONTENDERS]  # the base, then fastest first
    assert contenders(timed, 16, 4) == [4, 1, 2][:CONTENDERS]  # a slow base still contends
    assert contenders([cand(10), cand(30)], 16, 0) == []  # nothing close: nothing to decide
    assert contenders(timed, 16, 5) == []  # the base was not timed at this size
    # The untuned plan's forms (1, 2) tie ahead: the fastest form outside it still contends.
    assert contenders(timed, 16, 0, frozenset({0, 1, 2})) == [0, 1, 3][:CONTENDERS]


def test_a_tuned_plan_is_kept_and_exact_and_gives_way_on_another_host(tmp_path, booster, monkeypatch):
    from silvanforge_target_cpu import jit

    sample = np.random.default_rng(3).normal(size=(500, 12)).astype(np.float32)
    tuned = sf.tune(booster, rows=sample, threads=1, budget_s=4)
    record = tuned.tuning
    assert record["threads"] == 1 and record["rows"] == "the caller's sample"
    assert record["host"] and record["winners"] and record["candidates"]
    timed = [c for c in record["candidates"] if c["us_per_call"]]
    assert {w["candidate"] for w in record["winners"]} <= set(range(len(timed)))
    assert all(set(c["us_per_call"]) >= {"1", "16", "64", "256", "4096"} for c in timed)
    # Every timed form's estimate at each size is kept beside its timings, as the cost model gave it.
    for c in timed:
        rep = c["form"].split()[0].removeprefix("rep=")
        assert set(c["estimates_ns"]) == {"1", "16", "64", "256", "4096"}
        assert c["estimates_ns"]["64"] == pytest.approx(
            {name: ns for name, ns, _ in registry().rep_costs(sf.load_model(booster), "cpu", 64)}[rep], rel=1e-3)
    errors = estimate_errors(record)
    assert {(k, size) for k, size, _ in errors} == {(k, int(s)) for k, c in enumerate(record["candidates"])
                                                   for s in c.get("estimates_ns", {}) if s in c["us_per_call"]}
    k, size, ratio = errors[0]
    c = record["candidates"][k]
    assert ratio == pytest.approx(c["us_per_call"][str(size)] * 1e3 / size / c["estimates_ns"][str(size)])
    X = np.random.default_rng(8).normal(size=(400, 12)).astype(np.float32)
    want = booster.predict(xgb.DMatrix(X))
    for n in (1, 2, 5, 16, 17, 100, 257, 400):
        np.testing.assert_allclose(tuned.predict(X[:n]), want[:n], rtol=1e-6, atol=1e-7)
    path = tmp_path / "tuned.forge"
    tuned.save(path, key="k")
    back = sf.load_compiled(path, key="k")
    assert back.tuning == record
    _same_plan(back, tuned)
    real = jit.host_signature()
    monkeypatch.setattr(jit, "host_signature", lambda: {**real, "cpu": real["cpu"] + "-other"})
    with pytest.warns(sf.ArtifactWarning, match="tuned on another host"):
        elsewhere = sf.load_compiled(path, key="k")
    assert elsewhere.tuning is None
    _same_plan(elsewhere, sf.compile(booster, threads=1))
    np.testing.assert_allclose(elsewhere.predict(X), want, rtol=1e-6, atol=1e-7)


def test_forge_tune_and_show(tmp_path, booster, capsys):
    model = tmp_path / "m.json"
    booster.save_model(model)

    def forge(*args):
        code = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = forge("tune", model, "--budget", "2", "--threads", "1", "--sizes", "1,64,4096",
                           "-o", tmp_path / "t.forge")
    assert code == 0, err
    assert "plan (tuned on this host)" in out
    code, out, err = forge("show", tmp_path / "t.forge", "--tuning")
    assert code == 0 and "winners:" in out and "candidate" in out and "measured / estimated" in out
    code, out, err = forge("show", model, "--level", "plan")
    assert code == 0 and out.startswith("plan (untuned")
    for args, says in (((tmp_path / "nosuch.json",), "not found"),
                       ((model, "--budget", "0"), "budget"),
                       ((model, "--target", "nosuch"), "nosuch"),
                       ((model, "--threads", "0"), "threads"),
                       ((model, "--sizes", "16,x"), "--sizes takes positive row counts"),
                       ((model, "--sizes", "0"), "--sizes takes positive row counts"),
                       ((tmp_path / "t.forge", "--rows", tmp_path / "none.csv"), "not found")):
        code, out, err = forge("tune", *args)
        lines = err.strip().splitlines()
        assert code != 0 and len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], err
    code, out, err = forge("show", model, "--tuning")
    assert code != 0 and err.startswith("error:") and "not a compiled artifact" in err
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sf.load_compiled(tmp_path / "t.forge", trust_code=True).tuning is not None

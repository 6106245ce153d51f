"""The CPU target's native worker pool (silvanforge_target_cpu.pool): shares of a phase run on
native threads; results equal the reference however the calls arrive (many threads, several
callers at once, sleeping workers, a forked child, tree-parallel phases)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from silvanforge_target_cpu import pool
from strategies import numeric_forest, rows_for
from support_common import REPOSITORY, TESTS

import silvanforge as sf
from silvanforge.runtime import reference

# Linux always has the pool: a pool that fails to build there is a failure, not a skip (a pool
# that silently falls back to the Python one is slower for every call after it).
pytestmark = pytest.mark.skipif(pool.native_pool() is None and not sys.platform.startswith("linux"),
                                reason="no native worker pool on this host")


def test_the_native_pool_builds_on_linux():
    if pool.native_pool() is None:
        pool._broken = False  # try again to see why
        pool.NativePool()  # raises what made it fall back
    assert pool.native_pool() is not None


def test_every_thread_count_matches_the_reference():
    forest = numeric_forest(1)
    cf = sf.compile(forest)
    assert cf.kernel.run_shares is not None
    X = rows_for(forest, np.random.default_rng(2), 1000)
    want = reference.predict(forest, X, output_margin=True)
    for threads in (1, 2, 3, 5, 8, 16):
        np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads), want)
    assert pool.native_pool().workers >= 15


def test_tree_parallel_phases_run_on_native_workers(monkeypatch):
    """A phase whose parallel loop is the trees (``tree-parallel``: every share covers all rows
    for some trees, then a reduction phase) runs its shares on the native pool too."""
    forest = numeric_forest(3, trees=9)
    cf = sf.compile(forest, schedule="tree-parallel")
    assert any(p.parallel == "loop" for p in cf.kernel.phases)
    shares = []
    run_shares = cf.kernel.run_shares
    monkeypatch.setattr(cf.kernel, "run_shares", lambda *a: (shares.append(list(a[4])), run_shares(*a))[1])
    X = rows_for(forest, np.random.default_rng(4), 300)
    np.testing.assert_allclose(cf.predict(X, output_margin=True, threads=2),
                               reference.predict(forest, X, output_margin=True), rtol=1e-6, atol=1e-6)
    assert any(all(s[:2] == (0, 300) for s in call) and len(call) == 2 for call in shares), shares


def test_several_callers_at_once():
    """Callers that find the pool busy run their shares on the Python pool: every result right."""
    forest = numeric_forest(5)
    cf = sf.compile(forest)
    rng = np.random.default_rng(6)
    batches = [rows_for(forest, rng, n) for n in (64, 200, 777, 1500)]
    wants = [reference.predict(forest, X, output_margin=True) for X in batches]
    errors = []

    def work(k):
        try:
            for r in range(30):
                X, want = batches[(k + r) % 4], wants[(k + r) % 4]
                np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=2 + k % 3), want)
        except Exception as exc:  # reported below, with the thread
            errors.append((k, exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors


def test_sleeping_workers_wake_for_the_next_call():
    """With no spinning, every worker sleeps between calls and must be woken each time."""
    forest = numeric_forest(7)
    cf = sf.compile(forest)
    X = rows_for(forest, np.random.default_rng(8), 400)
    want = reference.predict(forest, X, output_margin=True)
    native = pool.native_pool()
    native.set_spin(0)
    try:
        for _ in range(20):
            time.sleep(0.002)
            np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=4), want)
    finally:
        native.set_spin(pool.SPIN_NS)


def test_a_spin_set_reaches_workers_spinning_already():
    """The spin is read at each check of a spinning worker's clock (its growth kept as a
    multiple of it): set to 0, workers spinning for long after their last share fall asleep."""
    import ctypes

    forest = numeric_forest(7)
    cf = sf.compile(forest)
    X = rows_for(forest, np.random.default_rng(8), 400)
    native = pool.native_pool()
    sleepers = ctypes.c_int64.from_address(native._engine.get_global_value_address("sleepers"))
    native.set_spin(10**10)  # (10 s)
    try:
        for _ in range(3):
            cf.predict(X, output_margin=True, threads=2)
        assert native.workers >= 1
        native.set_spin(0)
        for _ in range(500):  # (bounded: each worker checks its clock every 256 polls)
            if sleepers.value == native.workers:
                break
            time.sleep(0.002)
        assert sleepers.value == native.workers
    finally:
        native.set_spin(pool.SPIN_NS)


def _child_predicts(path, X, queue):
    cf = sf.load_compiled(path)
    queue.put(cf.predict(X, output_margin=True, threads=2))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_makes_its_own_workers(tmp_path):
    forest = numeric_forest(9)
    cf = sf.compile(forest)
    X = rows_for(forest, np.random.default_rng(10), 500)
    want = reference.predict(forest, X, output_margin=True)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=2), want)  # parent's workers up
    cf.save(tmp_path / "m.sfm")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_predicts, args=(str(tmp_path / "m.sfm"), X, queue))
    child.start()
    got = queue.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    np.testing.assert_array_equal(got, want)


def test_switched_off_by_environment(tmp_path):
    """SILVANFORGE_NATIVE_POOL=0: kernels leave their shares to the core's Python pool."""
    code = ("import numpy as np, silvanforge as sf\n"
            "from silvanforge_target_cpu import pool\n"
            "cf = sf.compile('examples/model.json')\n"
            "assert pool.native_pool() is None and cf.kernel.run_shares is None\n"
            "X = np.random.default_rng(0).normal(size=(600, cf.num_features))\n"
            "assert np.array_equal(cf.predict(X, threads=2), cf.predict(X, threads=1))\n")
    env = {**os.environ, "SILVANFORGE_NATIVE_POOL": "0"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_more_threads_than_the_pool_holds_run_in_rounds(monkeypatch):
    """threads past the pool's MAX_WORKERS + 1 (hosts with more CPUs, or a large ``threads=``)
    run their shares in rounds on the native workers; once they hung, indexing past the
    mailboxes.  Run in a child with a time limit so a hang fails instead of stalling the suite."""
    code = """
import numpy as np, silvanforge as sf
from silvanforge.runtime import reference
from silvanforge_target_cpu import pool
sf.set_config(thread_steps=1, share_steps=1, min_share_rows=1)
import sys; sys.path.insert(0, TESTS)
from strategies import numeric_forest, rows_for
forest = numeric_forest(11)
cf = sf.compile(forest)
X = rows_for(forest, np.random.default_rng(3), 3000)
want = reference.predict(forest, X, output_margin=True)
shares = []
run_shares = cf.kernel.run_shares
cf.kernel.run_shares = lambda *a: shares.append(len(a[-1])) or run_shares(*a)
for threads in (pool.MAX_WORKERS + 2, 300, 700):
    np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads), want)
assert max(shares) > pool.MAX_WORKERS + 1, shares
assert pool.native_pool().workers == pool.MAX_WORKERS
print("ok")
"""
    code = code.replace("TESTS", repr(str(TESTS)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPOSITORY)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity to pin a process with")
def test_shares_no_worker_started_are_taken_back():
    """A process pinned to one CPU: a worker cannot start its share while the caller runs (as on
    a host whose every core is busy), so the caller takes shares back and runs them itself;
    every call equals the reference."""
    code = """
import os, numpy as np, silvanforge as sf
from silvanforge.runtime import reference
from silvanforge_target_cpu import pool
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
sf.set_config(thread_steps=1, share_steps=1, min_share_rows=1)
import sys; sys.path.insert(0, TESTS)
from strategies import numeric_forest, rows_for
forest = numeric_forest(13)
cf = sf.compile(forest).wait()
X = rows_for(forest, np.random.default_rng(5), 400)
want = reference.predict(forest, X, output_margin=True)
for threads in (2, 3) * 20:
    np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads), want)
assert pool.native_pool().taken() > 0
print("ok")
"""
    code = code.replace("TESTS", repr(str(TESTS)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPOSITORY)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize("bad", ["x", 0, -3, 2.5, True, None.__class__])
def test_thread_counts_that_are_not_positive_integers_are_input_errors(bad):
    cf = sf.compile(numeric_forest(12))
    X = rows_for(cf.forest, np.random.default_rng(4), 10)
    with pytest.raises(sf.InputError, match="threads must be a positive integer"):
        cf.predict(X, threads=bad)
    with pytest.raises(sf.InputError, match="threads must be a positive integer"):
        sf.compile(cf.forest, threads=bad)

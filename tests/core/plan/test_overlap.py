"""The plan's other forms started while the main form's machine code is made
(silvanforge.plan.overlap): a target's native work is heard once, on the compiling thread only;
forms' builds take turns at their Python, a turn passing on as native work starts;
the idle-core measure stays within the process's CPUs; a plan started early is the eager plan,
answering exactly meanwhile and after.  No timing is asserted."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import silvanforge as sf
from silvanforge.options import CompileOptions
from silvanforge.plan import overlap
from silvanforge.plan.policy import plan_threads
from silvanforge.runtime import cpu_quota, reference
from silvanforge.target import native_work
from silvanforge.testing import random_forest, rows_for

EVERY_BAND = CompileOptions(plan_min_ns=0)
SIZES = [1, 2, 3, 16, 17, 64, 256, 257, 600]


def test_native_work_is_heard_once_and_on_the_listening_thread_only():
    heard = []
    with overlap.on_native_work(lambda: heard.append(threading.current_thread().name)):
        other = threading.Thread(target=lambda: native_work().__enter__(), name="other")
        other.start()
        other.join()
        assert heard == []
        for _ in range(3):
            with native_work():
                pass
    assert heard == [threading.current_thread().name]
    with native_work():  # nobody listens now
        pass
    assert len(heard) == 1


def test_a_listener_that_fails_never_fails_the_native_work():
    def fails():
        raise RuntimeError("can't start new thread")

    done = []
    with overlap.on_native_work(fails), native_work():
        done.append(True)
    assert done == [True]


def test_a_turn_passes_to_the_next_thread_as_native_work_starts():
    """Two forms' builds taking turns: the second's Python runs while the first's native work
    does, and the first's build goes on after."""
    turns, log = overlap.Turns(), []
    in_native, second_done = threading.Event(), threading.Event()

    def first():
        with turns.turn():
            log.append("first lowered")
            with native_work():
                in_native.set()
                second_done.wait(30)  # (the second has its turn meanwhile)
            log.append("first compiled")

    def second():
        in_native.wait(30)
        with turns.turn():
            log.append("second lowered")
        second_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert log == ["first lowered", "second lowered", "first compiled"]


def test_a_turn_without_native_work_ends_with_its_build_or_its_error():
    """A build that never announces native work holds its turn to its end (the next waits),
    and one that fails hands the turn on."""
    turns, log = overlap.Turns(), []
    holding, waiting = threading.Event(), threading.Event()

    def first():
        with turns.turn():
            holding.set()
            waiting.wait(30)
            other.join(0.2)  # (it stays blocked on the turn: no timing is asserted)
            log.append("first built")

    def second():
        holding.wait(30)
        waiting.set()
        with turns.turn():
            log.append("second built")

    other = threading.Thread(target=second)
    mine = threading.Thread(target=first)
    mine.start()
    other.start()
    mine.join(60)
    other.join(60)
    assert log == ["first built", "second built"]
    with pytest.raises(RuntimeError, match="refused"), turns.turn():
        raise RuntimeError("refused")
    with turns.turn():  # (the failed build's turn was handed on)
        log.append("third built")
    assert log[-1] == "third built"


@pytest.mark.skipif(plan_threads() < 2, reason="one CPU: the plan is built on one thread")
def test_a_main_form_that_fails_stops_the_builder_started_early(monkeypatch):
    """The main form's build raises (a refusal, which a band's build takes as a value) after the
    other forms started beside it: compile raises that error, and the builder stops at its next
    step rather than building every band."""
    from silvanforge.plan import forms as plan_forms
    from silvanforge.plan import lateforms

    forest = random_forest(12, max_trees=20, max_depth=5, summed=True)
    monkeypatch.setattr(overlap.IdleCores, "a_core_free", lambda self: True)
    started = []
    real_start = lateforms.LateForms.start
    monkeypatch.setattr(lateforms.LateForms, "start", lambda self: started.append(self) or real_start(self))
    real_build = plan_forms.Builds.build
    main_thread = threading.current_thread()

    main_failed, built = threading.Event(), []

    def build(self, *args, **kwargs):
        if threading.current_thread() is not main_thread:
            main_failed.wait(60)  # (a band's build under way as the main form fails)
            built.append(1)
        form = real_build(self, *args, **kwargs)
        if threading.current_thread() is main_thread:
            raise sf.UnsupportedModelError("the main form refused")
        return form

    monkeypatch.setattr(plan_forms.Builds, "build", build)
    with pytest.raises(sf.UnsupportedModelError, match="the main form refused"):
        sf.compile(forest, options=EVERY_BAND)
    main_failed.set()
    assert len(started) == 1
    late = started[0]
    late._finished.wait(60)
    assert len(built) == 1
    assert isinstance(late.error, RuntimeError) and "main form was not built" in str(late.error)


def test_idle_cores_are_a_share_of_the_process_cpus():
    meter = overlap.IdleCores()
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:  # this thread busy, as a compile's is
        pass
    idle = meter.idle()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if idle is None:  # no /proc/stat, one CPU, or too few ticks counted
        assert not meter.a_core_free()
    else:
        assert 0.0 <= idle <= cpus + 1e-9
        assert meter.a_core_free() == (idle >= overlap.IDLE_CORE)


@pytest.mark.skipif(plan_threads() < 2, reason="one CPU: the plan is built on one thread")
@pytest.mark.parametrize("free", [True, False])
def test_a_plan_started_early_is_the_eager_plan(monkeypatch, free):
    forest = random_forest(11, max_trees=30, max_depth=6, summed=True)
    rows = rows_for(forest, np.random.default_rng(5), max(SIZES))
    eager = sf.compile(forest, options=EVERY_BAND, forms="eager")
    asked = []
    monkeypatch.setattr(overlap.IdleCores, "a_core_free", lambda self: asked.append(True) or free)
    cf = sf.compile(forest, options=EVERY_BAND)  # background: asked as the main form's code is made
    during = [cf.predict(rows[:n]) for n in SIZES]
    cf.wait()
    assert asked == [True]
    assert [f.digest for f in cf.forms] == [f.digest for f in eager.forms] and cf.bands == eager.bands
    for n, got in zip(SIZES, during):
        want = eager.predict(rows[:n])
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(cf.predict(rows[:n]), want)
    np.testing.assert_array_equal(cf.predict(rows[:257]), reference.predict(forest, rows[:257]))


def _fake_kernel(root, cgroup, files, cpus=8):
    """A root holding /proc/self/cgroup, a /proc/stat of ``cpus`` CPUs (all counts zero) and
    ``files`` (path -> text)."""
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    _fake_stat(root, [(0, 0)] * cpus)
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def _fake_stat(root, busy_idle):
    """/proc/stat with each CPU's (user, idle) ticks."""
    lines = [f"cpu  {sum(b for b, _ in busy_idle)} 0 0 {sum(i for _, i in busy_idle)} 0 0 0 0 0 0"]
    lines += [f"cpu{k} {b} 0 0 {i} 0 0 0 0 0 0" for k, (b, i) in enumerate(busy_idle)]
    (root / "proc/stat").write_text("\n".join(lines + ["intr 0", ""]))


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _after_a_second(root, meter, clock, busy_idle, files=None):
    """The meter's idle cores once the CPUs counted ``busy_idle`` more ticks (and ``files``
    changed) over one second."""
    _fake_stat(root, busy_idle)
    for path, text in (files or {}).items():
        (root / path).write_text(text)
    clock.now += 1.0
    return meter.idle()


# The caller's core busy, seven more idle for a second (100 ticks each).
ONE_BUSY = [(100, 0)] + [(0, 100)] * 7


def test_idle_cores_without_a_quota_count_the_affinity_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    _fake_kernel(tmp_path, "0::/\n", {"sys/fs/cgroup/cpu.max": "max 100000\n"})
    clock = _Clock()
    meter = overlap.IdleCores(str(tmp_path), clock)
    assert cpu_quota.cpu_quota(str(tmp_path)) is None
    # CPUs 4-7 are not this process's: their idle time is not counted
    assert _after_a_second(tmp_path, meter, clock, ONE_BUSY) == pytest.approx(3.0)
    assert meter.a_core_free()


@pytest.mark.parametrize("quota", ["100000 100000\n", "150000 100000\n"])
def test_a_quota_under_two_cores_never_frees_a_core(tmp_path, monkeypatch, quota):
    """A container limited to one (or one and a half) CPUs on an idle host of eight."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    _fake_kernel(tmp_path, "0::/\n", {"sys/fs/cgroup/cpu.max": quota,
                                      "sys/fs/cgroup/cpu.stat": "usage_usec 0\nuser_usec 0\n"})
    clock = _Clock()
    meter = overlap.IdleCores(str(tmp_path), clock)
    assert meter.idle() is None
    assert _after_a_second(tmp_path, meter, clock, ONE_BUSY) is None
    assert not meter.a_core_free()


def test_a_quota_bounds_the_idle_cores_by_the_cgroup_usage(tmp_path, monkeypatch):
    """Four CPUs' quota on an idle host of eight: the cgroup's processes used 2.5 CPU seconds
    in the second, so 1.5 cores are left, however idle the host."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    stat = "sys/fs/cgroup/kubepods/cpu.stat"  # (the limiting cgroup's count: all its processes)
    _fake_kernel(tmp_path, "0::/kubepods/pod1\n", {
        "sys/fs/cgroup/kubepods/cpu.max": "400000 100000\n",  # (a parent's limit binds too)
        "sys/fs/cgroup/kubepods/pod1/cpu.max": "max 100000\n",
        "sys/fs/cgroup/kubepods/pod1/cpu.stat": "usage_usec 0\n", stat: "usage_usec 7000000\n"})
    quota = cpu_quota.cpu_quota(str(tmp_path))
    assert quota.cores == 4.0
    clock = _Clock()
    meter = overlap.IdleCores(str(tmp_path), clock)
    idle = _after_a_second(tmp_path, meter, clock, ONE_BUSY, {stat: "usage_usec 9500000\n"})
    assert idle == pytest.approx(1.5)
    assert meter.a_core_free()
    # 4.5 CPU seconds more in the next second: less than IDLE_CORE left on average since
    idle = _after_a_second(tmp_path, meter, clock, ONE_BUSY, {stat: "usage_usec 14000000\n"})
    assert idle == pytest.approx(4 - (14.0 - 7.0) / 2) and not meter.a_core_free()


def test_a_cgroup_v1_quota_without_a_usage_count_leaves_the_quota_less_the_callers_core(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    _fake_kernel(tmp_path, "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n", {
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "250000\n",
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "sys/fs/cgroup/memory/cpu.cfs_quota_us": "100000\n"})  # (not the cpu controller's)
    assert cpu_quota.cpu_quota(str(tmp_path)) == cpu_quota.CpuQuota(2.5)
    clock = _Clock()
    meter = overlap.IdleCores(str(tmp_path), clock)
    assert _after_a_second(tmp_path, meter, clock, ONE_BUSY) == pytest.approx(1.5)
    (tmp_path / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us").write_text("-1\n")  # no limit
    assert cpu_quota.cpu_quota(str(tmp_path)) is None


def test_unreadable_cgroup_files_set_no_quota(tmp_path):
    _fake_kernel(tmp_path, "0::/\n", {"sys/fs/cgroup/cpu.max": "lots\n"})
    assert cpu_quota.cpu_quota(str(tmp_path)) is None
    assert cpu_quota.cpu_quota(str(tmp_path / "nowhere")) is None


def test_default_threads_and_plan_builds_keep_to_the_cgroup_quota(monkeypatch):
    """A quota of 1.5 CPUs on a host of more: one thread a call and one building the plan (a
    second would take turns with the first); no quota: the CPUs the process may run on."""
    from silvanforge.runtime import threads

    monkeypatch.setattr(cpu_quota, "cpu_quota", lambda root="/": cpu_quota.CpuQuota(1.5))
    cpu_quota.quota_cores.cache_clear()
    try:
        assert cpu_quota.quota_cores() == 1
        assert threads.default_threads() == 1 and plan_threads() == 1
        monkeypatch.setattr(cpu_quota, "cpu_quota", lambda root="/": None)
        cpu_quota.quota_cores.cache_clear()
        assert cpu_quota.quota_cores() is None
        assert threads.default_threads() == len(os.sched_getaffinity(0))
    finally:
        cpu_quota.quota_cores.cache_clear()

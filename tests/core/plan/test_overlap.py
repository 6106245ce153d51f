"""The plan's other forms started while the main form's machine code is made
(silvanforge.plan.overlap): a target's native work is heard once, on the compiling thread only;
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
from silvanforge.runtime import reference
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

"""Forms built after the compile returns (silvanforge.plan.lateforms, ``sf.compile(..., forms=)``) and
forms built on two threads: the same predictions as the eager compile at every request size,
while the forms build (from several threads) and after; artifacts, pickles and the code cache
hold every form; ``show("plan")`` says which are built; two threads build what one builds.
No timing is asserted."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest
from support_common import errors_in_threads

import silvanforge as sf
from silvanforge.api import compile_options
from silvanforge.options import CompileOptions
from silvanforge.plan.policy import untuned_plan
from silvanforge.runtime import reference
from silvanforge.testing import random_forest, rows_for

# A form for every band (plan_min_ns=0), so a wrong dispatch shows.
EVERY_BAND = CompileOptions(plan_min_ns=0)
SIZES = [0, 1, 2, 3, 5, 15, 16, 17, 40, 64, 255, 256, 257, 700]


@pytest.fixture(scope="module")
def forest():
    return random_forest(5, max_trees=40, max_depth=7, summed=True)


@pytest.fixture(scope="module")
def rows(forest):
    return rows_for(forest, np.random.default_rng(3), max(SIZES))


@pytest.fixture(scope="module")
def eager(forest):
    return sf.compile(forest, options=EVERY_BAND, forms="eager")


def _plan(cf):
    return [f.digest for f in cf.forms], cf.bands


def _answers(cf, rows):
    return [cf.predict(rows[:n]) for n in SIZES] + [cf.predict(rows[:n], output_margin=True) for n in SIZES]


def test_eager_plan_has_several_forms(eager):
    assert len(eager.forms) >= 2 and eager.forms_built
    assert "every program built" in eager.show("plan")


@pytest.mark.parametrize("mode", ["background", "lazy"])
def test_late_forms_answer_as_eager_at_every_size(forest, rows, eager, mode):
    cf = sf.compile(forest, options=EVERY_BAND, forms=mode)
    want = _answers(eager, rows)
    during = _answers(cf, rows)  # (while the forms build, or before a lazy build started)
    cf.wait()
    after = _answers(cf, rows)
    for a, b, c in zip(want, during, after):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(want[SIZES.index(257)], reference.predict(forest, rows[:257]))
    assert _plan(cf) == _plan(eager)  # the eager compile's forms and bands


def test_calls_from_threads_while_forms_build(forest, rows, eager):
    want = {n: eager.predict(rows[:n]) for n in SIZES}
    cf = sf.compile(forest, options=EVERY_BAND)  # background, the default

    def call(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):  # until after the forms are built, where that takes this long
            n = int(rng.choice(SIZES))
            np.testing.assert_array_equal(cf.predict(rows[:n]), want[n])

    errors = errors_in_threads(call, range(4))
    assert not errors, errors[0]
    assert _plan(cf.wait()) == _plan(eager)


@pytest.mark.parametrize("mode", ["background", "lazy"])
def test_saved_and_pickled_with_every_form(forest, rows, eager, tmp_path, mode):
    cf = sf.compile(forest, options=EVERY_BAND, forms=mode)
    path = tmp_path / "m.forge"
    cf.save(path)  # waits for (or, lazy, builds) the forms first
    for back in (sf.load_compiled(path, trust_code=True), pickle.loads(pickle.dumps(
            sf.compile(forest, options=EVERY_BAND, forms=mode)))):
        assert back.forms_built and _plan(back) == _plan(eager)
        for n in SIZES:
            np.testing.assert_array_equal(back.predict(rows[:n]), eager.predict(rows[:n]))


def test_code_cache_entry_holds_every_form(forest, eager, tmp_path):
    # (with a cache, the forms are built within the call unless forms= says otherwise)
    first = sf.compile(forest, options=EVERY_BAND, cache=tmp_path / "a")
    assert first.forms_built
    late = sf.compile(forest, options=EVERY_BAND, cache=tmp_path / "b", forms="background").wait()
    for cache in ("a", "b"):
        for _ in range(200):  # "b": the entry is written on the builder's thread after the plan
            hit = sf.compile(forest, options=EVERY_BAND, cache=tmp_path / cache)
            if len(hit._plan[0]) > 1:
                break
            time.sleep(0.05)
        assert hit.forms_built and _plan(hit) == _plan(eager) == _plan(first) == _plan(late)


def test_show_plan_says_which_forms_are_built(forest, rows):
    cf = sf.compile(forest, options=EVERY_BAND, forms="lazy")
    cf.predict(rows[:1000])  # large requests never start a lazy build
    text = cf.show("plan")
    assert "the main program built" in text and "not built yet" in text and "rows 1+: form 0" in text
    cf.predict(rows[:3])  # a small one does
    assert "not built yet" not in cf.show("plan")
    cf.wait()
    text = cf.show("plan")
    assert "every program built" in text and "rows 1+" not in text


def test_forms_option_is_checked(forest):
    with pytest.raises(sf.InputError, match="forms must be one of"):
        sf.compile(forest, forms="soon")


def test_two_threads_build_what_one_builds(forest):
    """Forms built on two threads are the serial build's: programs, bands and machine code."""
    opts = compile_options(EVERY_BAND)
    one_forms, one_bands = untuned_plan(forest, opts, threads=1)
    two_forms, two_bands = untuned_plan(forest, opts, threads=2)
    assert one_bands == two_bands
    assert [f.digest for f in one_forms] == [f.digest for f in two_forms]
    assert [f.kernel.artifact() for f in one_forms] == [f.kernel.artifact() for f in two_forms]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_fork_while_forms_build(forest, rows, eager):
    """A child forked while the forms build builds them itself when it needs them (its
    parent's builder did not survive the fork) and answers as the eager compile."""
    cf = sf.compile(forest, options=EVERY_BAND)
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when every answer is right
        status = 1
        try:
            for n in SIZES:
                np.testing.assert_array_equal(cf.predict(rows[:n]), eager.predict(rows[:n]))
            cf.wait()
            for n in SIZES:
                np.testing.assert_array_equal(cf.predict(rows[:n]), eager.predict(rows[:n]))
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert _plan(cf.wait()) == _plan(eager)


def test_exit_while_forms_build():
    """A script that compiles and ends at once exits cleanly: the builder stops after its step."""
    script = ("import numpy as np, silvanforge as sf\n"
              "from silvanforge.options import CompileOptions\n"
              "from silvanforge.testing import random_forest\n"
              "cf = sf.compile(random_forest(5, max_trees=40, max_depth=7, summed=True),\n"
              "                options=CompileOptions(plan_min_ns=0))\n"
              "print(cf.predict(np.zeros((1, cf.num_features))).shape)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("(1")

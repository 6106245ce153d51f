"""The run-time settings (silvanforge.runtime.threads): ``config_context`` applies its values in the block
and restores them on exit (also when the block raises), ``set_config`` sets the process-wide ones
that other threads see, a block stays on its own thread, and bad names or values are refused
before anything changes."""

from __future__ import annotations

import dataclasses
import threading

import pytest

import silvanforge as sf
from silvanforge.errors import InputError
from silvanforge.runtime.threads import DEFAULT


def _in_thread(fn):
    """``fn()`` run on a new thread (outside every block of this one), its result."""
    out = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def test_a_block_applies_its_values_and_restores_the_others():
    before = sf.get_config()  # the suite's own block (tests/conftest.py)
    with sf.config_context(scratch_bytes=1 << 20):
        assert sf.get_config() == {**before, "scratch_bytes": 1 << 20}
        with sf.config_context(thread_steps=7, scratch_bytes=2 << 20):
            assert sf.get_config() == {**before, "thread_steps": 7, "scratch_bytes": 2 << 20}
        assert sf.get_config() == {**before, "scratch_bytes": 1 << 20}
    assert sf.get_config() == before


def test_a_block_restores_when_it_raises():
    before = sf.get_config()
    with pytest.raises(KeyError):
        with sf.config_context(share_steps=3):
            raise KeyError("inside")
    assert sf.get_config() == before


def test_a_block_stays_on_its_thread_and_set_config_reaches_every_thread():
    process = _in_thread(sf.get_config)
    assert process == dataclasses.asdict(DEFAULT)  # the suite lowers its bars in a block only
    with sf.config_context(min_share_rows=99):
        assert _in_thread(sf.get_config)["min_share_rows"] == process["min_share_rows"]
    try:
        sf.set_config(min_share_rows=5)
        assert _in_thread(sf.get_config)["min_share_rows"] == 5
        assert sf.get_config()["min_share_rows"] != 5  # this thread's block keeps its values
    finally:
        sf.set_config(**process)
    assert _in_thread(sf.get_config) == process


@pytest.mark.parametrize("given, error", [
    ({"threads_steps": 1}, "no run-time setting 'threads_steps'"),
    ({"thread_steps": 0}, "thread_steps must be a positive integer, got 0"),
    ({"scratch_bytes": -1}, "scratch_bytes must be a positive integer"),
    ({"share_steps": 1.5}, "share_steps must be a positive integer"),
    ({"min_share_rows": True}, "min_share_rows must be a positive integer"),
    ({"thread_steps": "10"}, "thread_steps must be a positive integer"),
])
def test_bad_settings_are_refused_and_change_nothing(given, error):
    before, process = sf.get_config(), _in_thread(sf.get_config)
    with pytest.raises(InputError, match=error):
        with sf.config_context(**given):
            pass
    with pytest.raises(InputError, match=error):
        sf.set_config(**{"thread_steps": 3, **given})
    assert sf.get_config() == before and _in_thread(sf.get_config) == process

"""Shared fixtures.  Models are trained inside the tests on generated data; nothing is pasted.

Two layers of tests share this file: ``tests/core`` tests the core package alone (no target,
no first-party representation: tests/test_core_alone.py runs it with them blocked), and the
rest of ``tests`` tests the plugins shipped here.  The fixtures that patch a plugin's constants
patch it only where it can be imported, and ``tests/core/conftest.py`` turns them off there.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

# The helper modules (strategies.py, support_*.py) live here; tests in subfolders import them too.
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def pytest_collection_modifyitems(config, items):
    # GPU tests run only where a CUDA driver and pycuda are present (the device machine).
    try:
        import pycuda.driver as drv  # noqa: F401

        drv.init()
        have_gpu = drv.Device.count() > 0
    except Exception:
        have_gpu = False
    if not have_gpu:
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU with pycuda")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def plugin_module(name: str):
    """The plugin module ``name``, or None where that plugin is not installed (or is blocked)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


@pytest.fixture(autouse=True)
def split_small_batches(monkeypatch):
    """The suite's models are tiny: the runtime would keep their predictions on one thread
    (``runtime.THREAD_STEPS``, ``pool.SHARE_STEPS`` of the native workers), so the tests lower
    those bars to exercise the threaded paths.  They decide how a call is split over threads,
    never the code compiled."""
    from silvanforge import runtime

    monkeypatch.setattr(runtime, "THREAD_STEPS", 1)
    pool = plugin_module("silvanforge_target_cpu.pool")
    if pool is not None:
        monkeypatch.setattr(pool, "SHARE_STEPS", 1)
        monkeypatch.setattr(pool, "MIN_SHARE_ROWS", 8)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)

"""Shared fixtures.  Models are trained inside the tests on generated data; nothing is pasted."""

from __future__ import annotations

import numpy as np
import pytest


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


@pytest.fixture(autouse=True)
def split_small_batches(monkeypatch):
    """The suite's models are tiny: the compiler would keep their predictions on one thread
    (``lowering.THREAD_STEPS``, ``pool.SHARE_STEPS`` of the native workers), so the tests lower
    those bars to exercise the threaded paths."""
    from silvanforge import lowering
    from silvanforge_target_cpu import pool

    monkeypatch.setattr(lowering, "THREAD_STEPS", 1)
    monkeypatch.setattr(pool, "SHARE_STEPS", 1)
    monkeypatch.setattr(pool, "MIN_SHARE_ROWS", 8)


@pytest.fixture(autouse=True)
def walks_by_default(monkeypatch):
    """The suite's tiny forests are what the CPU default evaluates by bitvectors: the walk tests
    test walks, so the chooser keeps to them unless a test asks (tests/test_bitvector.py)."""
    from silvanforge_rep_bitvector import bitvector

    monkeypatch.setattr(bitvector, "AUTO_CHOOSE", False)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)

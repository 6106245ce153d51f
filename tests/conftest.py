"""Shared fixtures.  Models are trained inside the tests on generated data; nothing is pasted.

Two layers of tests share this file: ``tests/core`` tests the core package alone (no target,
no first-party representation: tests/test_core_alone.py runs it with them blocked), and the
rest of ``tests`` tests the plugins shipped here.  The run-time settings the whole suite runs
under (:func:`split_small_batches`) are the core's; ``tests/core/conftest.py`` lowers only the
bar the core itself reads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import silvanforge

# No test writes the user's own artifact key into their home, nor signs with one found there
# (tests of the key turn it on with a home of their own: tests/test_user_key.py).
os.environ["SILVANFORGE_USER_KEY"] = "0"

# The helper modules (strategies.py, support_*.py) live here; tests in subfolders import them too.
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


# The fast subset (``python -m pytest -m fast``, under 2 minutes on 2 cores): a quick module or
# two for every stage (IRs and passes in tests/core, import, lowering, the targets' contract,
# runtime inputs, artifacts and keys, the CLI, plugins and layering), each under ~10 s in CI.
FAST = {"test_layering.py", "test_repository_text.py", "test_plugins.py", "test_memo.py", "test_frame_schemas.py",
        "test_target_contract.py", "test_user_key.py", "test_import_onnx.py", "test_compile_random.py",
        "test_split_trees.py", "test_rep_oblivious.py", "test_options.py", "test_core_alone.py",
        "test_artifacts.py", "test_artifact_bombs.py", "test_hir_passes.py", "test_vector_walk.py", "test_cli.py",
        "test_covers.py", "test_import_xgboost.py", "test_serve.py", "test_gpu_lowering.py", "test_cuda_copying.py"}


def pytest_collection_modifyitems(config, items):
    fast = pytest.mark.fast
    for item in items:
        path = item.path
        if path.name in FAST or path.parent.name == "core":
            item.add_marker(fast)
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
def split_small_batches():
    """The suite's models are tiny: the runtime would keep their predictions on one thread (the
    run-time settings ``thread_steps`` and, for the native workers, ``share_steps``), so the
    tests lower those bars to exercise the threaded paths.  They decide how a call is split over
    threads, never the code compiled."""
    with silvanforge.config_context(thread_steps=1, share_steps=1, min_share_rows=8):
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(12345)

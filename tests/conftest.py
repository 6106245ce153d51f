"""Shared fixtures.  Models are trained inside the tests on generated data; nothing is pasted.

The folders mirror the code:

- ``tests/core/<stage>/`` tests one stage of the core package, ``core/<stage>/`` (frontend,
  lowering, plan, runtime, inputs, artifact, cli, ir, scheduler, reduction), and
  ``tests/core/test_<module>.py`` one of its top-level modules (options, plugins, target,
  testing, sklearn);
- ``tests/plugins/<plugin>/`` tests one plugin, ``plugins/<plugin>/`` (``importers/<format>``,
  ``rep_*``, ``target_*``, ``gpu``, ``bench``, ``serve``; ``importers/fuzz`` fuzzes them all);
- ``tests/end_to_end/`` tests the compiler as users call it, across the stages: the predict API,
  random and trained models compiled, request sizes, deploying;
- ``tests/repository/`` checks the repository as a whole: layering, its text, the core alone.

The helper modules (strategies.py, support_*.py) sit here, beside this file, and tests in every
folder import them by name.  Test modules never import each other.

The core alone: a module of ``tests/core`` that needs no target and no first-party
representation says so, ``pytestmark = pytest.mark.core_alone``, and
tests/repository/test_core_alone.py runs exactly those (``-m core_alone``) with the shipped
targets and representations blocked from import.  The rest of ``tests/core`` compiles and runs
its stage on the CPU target.  The run-time settings the suite runs under
(:func:`split_small_batches`) are the core's; the core-alone tests lower only the bar the core
itself reads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import silvanforge

# No test writes the user's own artifact key into their home, nor signs with one found there
# (tests of the key turn it on with a home of their own: tests/core/artifact/test_user_key.py).
os.environ["SILVANFORGE_USER_KEY"] = "0"

# The helper modules (strategies.py, support_*.py) live here; tests in every folder import them.
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from support_common import CaseCache  # noqa: E402  (found through the line above)

# The fast subset (``python -m pytest -m fast``, under 2 minutes on 2 cores): every core-alone
# test (IRs and passes) and, named by file name wherever the file sits, a quick module or two for
# every other stage (import, lowering, the targets' contract, runtime inputs, artifacts and keys,
# the CLI, plugins and layering), each under ~10 s in CI.
FAST = {"test_layering.py", "test_repository_text.py", "test_plugins.py", "test_memo.py", "test_frame_schemas.py",
        "test_target_contract.py", "test_user_key.py", "test_import_onnx.py", "test_compile_random.py",
        "test_split_trees.py", "test_rep_oblivious.py", "test_options.py", "test_core_alone.py",
        "test_artifacts.py", "test_artifact_bombs.py", "test_hir_passes.py", "test_vector_walk.py", "test_cli.py",
        "test_covers.py", "test_import_xgboost.py", "test_serve.py", "test_gpu_lowering.py", "test_cuda_copying.py"}


def pytest_collection_modifyitems(config, items):
    fast = pytest.mark.fast
    for item in items:
        if item.path.name in FAST or item.get_closest_marker("core_alone"):
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
            if item.get_closest_marker("gpu"):  # (the marker: tests/plugins/gpu is a keyword too)
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def split_small_batches(request):
    """The suite's models are tiny: the runtime would keep their predictions on one thread (the
    run-time settings ``thread_steps`` and, for the native workers, ``share_steps``), so the
    tests lower those bars to exercise the threaded paths.  They decide how a call is split over
    threads, never the code compiled.  A core-alone test runs no target's worker pool: only the
    core's bar is lowered there."""
    if request.node.get_closest_marker("core_alone"):
        settings = dict(thread_steps=1)
    else:
        settings = dict(thread_steps=1, share_steps=1, min_share_rows=8)
    with silvanforge.config_context(**settings):
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def model_cases(tmp_path_factory) -> CaseCache:
    """The model factories' cases (support_xgboost.py, support_lightgbm.py, support_onnx.py),
    each trained once a session however many modules read it:
    ``model_cases["lightgbm"].get("binary")``, ``model_cases["xgboost"].all(quick=True)``."""
    return CaseCache(tmp_path_factory.mktemp("model_cases"))

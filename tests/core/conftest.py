"""Tests of the core package alone: the IRs, HIR passes, MIR and the scheduler, the reference
evaluator, loading, artifacts and LIR lowering.  Nothing here runs a target or needs a
first-party representation; a test that lowers walks uses the out-of-tree example
representation ``linked`` (examples/rep_linked) and skips where it is not installed.
tests/test_core_alone.py runs this folder with the CPU target and every ``silvanforge_rep_*``
package but the example blocked."""

from __future__ import annotations

import pytest

import silvanforge


@pytest.fixture(autouse=True)
def split_small_batches():
    """Only the core's bar: no target's worker pool runs here."""
    with silvanforge.config_context(thread_steps=1):
        yield

"""The core's MIR -> LIR walk generator through the representation contract alone: random
forests under every CPU canned schedule lower, with the out-of-tree example representation
``linked`` (examples/rep_linked), to LIR that verifies and survives the artifact's encoding.
No target runs the code here (tests/core/test_conformance.py runs it)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from silvanforge.ir import lir, lir_io, mir
from silvanforge.lowering.walkgen import lower_to_lir
from silvanforge.plugins import registry
from silvanforge.scheduler import CANNED, GPU_CANNED, canned, lower_to_mir
from strategies import forests

pytestmark = pytest.mark.core_alone  # needs no target and no shipped representation

pytest.importorskip("silvanforge_rep_linked", reason="the example representation is not installed")

CPU_CANNED = sorted(set(CANNED) - set(GPU_CANNED) - {"peel-groups"})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(), name=st.sampled_from(CPU_CANNED))
def test_walks_lower_to_verified_lir(forest, name):
    fn = lower_to_mir(forest, canned(name, forest))
    mir.verify(fn)
    module = lower_to_lir(forest, fn, "linked", registry().hook)
    lir.verify(module)
    assert {"linked_left", "linked_right", "leaf_values"} <= set(module.buffers)
    raw, arrays = lir_io.to_parts(module)
    assert lir_io.to_parts(lir_io.from_parts(raw, arrays))[0] == raw

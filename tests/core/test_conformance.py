"""The conformance kit (silvanforge.testing) on every first-party representation and the CPU
and AMD (OpenCL) targets: what a third-party plugin runs in its own tests."""

from __future__ import annotations

import numpy as np
import pytest
from support_common import without_opencl

from silvanforge import testing
from silvanforge.plugins import registry
from silvanforge.runtime import reference


@pytest.mark.parametrize("rep", ["sparse", "array", "reorg", "bitvector"])
def test_first_party_representations_conform(rep, monkeypatch):
    result = testing.check_representation(rep, seeds=range(6))
    assert result.cases >= 6
    if rep == "sparse":  # the layout that takes tiles takes every case
        assert not result.refused, result.refused


def test_the_cpu_target_conforms():
    result = testing.check_target("cpu", seeds=range(4))
    assert result.cases >= 4 * 2


def test_the_amd_target_conforms_on_opencl():
    ok, why = registry().target_available("amd")
    if not ok:
        without_opencl(why)
    result = testing.check_target("amd", reps=["sparse"], seeds=range(3))
    assert result.cases >= 3


def test_a_wrong_representation_fails_the_kit():
    """The kit catches a representation that computes something else: sparse's class with leaf
    values one too large, installed under its own name, fails with the seed in the message."""
    import types

    from silvanforge_rep_sparse import SparseLayout

    from silvanforge import hookimpl, plugins
    from silvanforge.rep import Bin, Builder

    class Mutant(SparseLayout):
        name = "sparse_mutant"

        def leaf_value(self, b, tree, node, slot):
            return Bin("+", super().leaf_value(b, tree, node, slot), Builder.const(1.0, b.buffers["leaf_values"].type))

    mutant = types.ModuleType("sf_test_sparse_mutant")

    @hookimpl
    def silvanforge_representation_types():
        return [Mutant]

    mutant.silvanforge_representation_types = silvanforge_representation_types
    try:
        registry().register(mutant, name="sf_test_sparse_mutant")
        with pytest.raises(AssertionError, match="seed"):
            testing.check_representation("sparse_mutant", seeds=range(3), schedules=[None], tile_sizes=(1,))
    finally:
        plugins.reset_registry()


def test_random_forests_are_reproducible_and_varied():
    a, b = testing.random_forest(5), testing.random_forest(5)
    X = testing.rows_for(a, np.random.default_rng(0), 30)
    np.testing.assert_array_equal(reference.predict(a, X, output_margin=True),
                                  reference.predict(b, X, output_margin=True))
    shapes = {(f.num_outputs, f.aggregation, f.threshold_dtype, f.has_categorical())
              for f in map(testing.random_forest, range(40))}
    assert len(shapes) >= 8

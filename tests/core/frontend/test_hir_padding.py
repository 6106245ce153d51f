"""Padding trees to one depth keeps every prediction (test_hir_passes.py, beside this file,
compiles padded walks)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import forests, rows_for

from silvanforge.frontend.hir_passes import leaf_depth_range, pad_trees, padded_nodes
from silvanforge.ir import hir
from silvanforge.runtime import reference

pytestmark = pytest.mark.core_alone  # needs no target and no shipped representation


@settings(max_examples=60, deadline=None)
@given(forest=forests(max_depth=5))
def test_padding_keeps_every_prediction(forest):
    padded = pad_trees(forest)
    hir.verify(padded)
    depth = forest.max_depth()
    assert leaf_depth_range(padded) == (depth, depth)
    assert sum(t.num_nodes for t in padded.trees) == padded_nodes(forest)
    X = rows_for(forest, np.random.default_rng(0), 300)
    np.testing.assert_array_equal(reference.predict(padded, X, output_margin=True),
                                  reference.predict(forest, X, output_margin=True))

"""Node-array widths: narrow feature indices and child offsets, leaves kept in the threshold
slot, and the CPU schedule chooser (test_node_widths.py, beside this file: float32 thresholds for
LightGBM's float64 ones).

Every representation with every width setting is compared with the reference evaluator on
random forests (NaNs, categorical splits, several outputs) and with the libraries on trained
models; chosen schedules are compiled for many model shapes and batch sizes and checked exact.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, make_forest, rows_for
from support_common import assert_close

import silvanforge as sf
from silvanforge.lowering.walksetup import node_widths
from silvanforge.runtime import reference

WIDTHS = {
    "narrow": {},  # the default: narrowest exact, leaves inline where possible
    "wide": {"feature": "int32", "index": "int32", "inline_leaves": False},
    "narrow-leaves-apart": {"inline_leaves": False},
}
REPS = ["array", "sparse", "reorg"]


def _compile(model, rep, widths, **kw):
    with node_widths(**WIDTHS[widths]):
        return sf.compile(model, rep=rep, **kw)


# ----------------------------------------------------------------------------- widths: exactness
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=6, max_depth=5, max_features=300), rep=st.sampled_from(REPS),
       widths=st.sampled_from(list(WIDTHS)), seed=st.integers(0, 2**16))
def test_every_representation_and_width_matches_reference(forest, rep, widths, seed):
    X = rows_for(forest, np.random.default_rng(seed), 150)
    cf = _compile(forest, rep, widths, schedule="interleaved")
    for margin in (True, False):
        np.testing.assert_array_equal(cf.predict(X, output_margin=margin),
                                      reference.predict(forest, X, output_margin=margin))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=6, max_depth=5, max_features=200), widths=st.sampled_from(list(WIDTHS)),
       tile=st.sampled_from([2, 4]), seed=st.integers(0, 2**16))
def test_tiled_sparse_widths_match_reference(forest, widths, tile, seed):
    X = rows_for(forest, np.random.default_rng(seed), 100)
    cf = _compile(forest, "sparse", widths, tile_size=tile)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True),
                                  reference.predict(forest, X, output_margin=True))


def test_narrow_buffers_are_chosen():
    from silvanforge.ir.hir import Forest, Tree

    rng = np.random.default_rng(0)
    for features, want in ((8, "i8"), (300, "i16")):
        tree = Tree.from_nodes([1, -1, -1], [2, -1, -1], [features - 1, 0, 0], [0.5, 0, 0],
                               np.array([[0.0], [1.0], [2.0]]))
        forest = Forest(trees=[tree], num_features=features)
        cf = sf.compile(forest, rep="sparse")
        bufs = cf.lir_module.buffers
        assert bufs["sparse_feature"].type == want and bufs["sparse_child"].type == "i8"
        assert "leaves inline" in cf.lir_module.info["widths"]
        X = rng.normal(size=(20, features))
        np.testing.assert_array_equal(cf.predict(X, output_margin=True),
                                      reference.predict(forest, X, output_margin=True))


@pytest.fixture(scope="module", params=["xgboost", "lightgbm"])
def library_cases(request, model_cases):
    return model_cases[request.param].all(quick=True)


@pytest.mark.parametrize("widths", list(WIDTHS))
@pytest.mark.parametrize("rep", REPS)
def test_widths_equal_the_libraries(library_cases, rep, widths):
    """Trained models with NaNs and categorical splits (the importer tests' quick cases)."""
    for case in library_cases:
        try:
            cf = _compile(case.path, rep, widths)
        except sf.UnsupportedModelError as exc:  # array/reorg refuse trees too deep to pad
            assert rep != "sparse" and "sparse" in str(exc), f"{case.name}: {exc}"
            continue
        assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)


# ----------------------------------------------------------------------------- the chooser
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest=forests(max_trees=10, max_depth=7, max_features=40),
       batch=st.sampled_from([None, 1, 8, 64, 512, 4096]), seed=st.integers(0, 2**16))
def test_chosen_schedules_are_legal_and_exact(forest, batch, seed):
    cf = sf.compile(forest, batch_size=batch)  # representation, padding, schedule chosen
    X = rows_for(forest, np.random.default_rng(seed), 300)
    for threads in (1, 2):
        np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads),
                                      reference.predict(forest, X, output_margin=True))


def test_row_chunks_follow_row_width():
    from silvanforge_target_cpu import row_chunk

    from silvanforge.ir.hir import Forest

    def shaped(features, dtype):
        f = Forest.__new__(Forest)
        f.num_features, f.threshold_dtype = features, dtype
        return f

    assert row_chunk(shaped(8, "float32")) == 64
    assert row_chunk(shaped(2000, "float32")) == 32
    assert row_chunk(shaped(2000, "float64")) == 16
    assert row_chunk(shaped(100_000, "float64")) == 16


def test_padding_choice_follows_size():
    from silvanforge.frontend.hir_passes import padded_nodes
    from silvanforge.lowering.choices import PAD_SMALL_BYTES, choose_padding

    f = make_forest()
    nodes, padded = sum(t.num_nodes for t in f.trees), padded_nodes(f)
    small = padded * (np.dtype(f.threshold_dtype).itemsize + 4) <= PAD_SMALL_BYTES
    assert choose_padding(f) == (padded <= 2 * nodes or (padded <= 8 * nodes and small))

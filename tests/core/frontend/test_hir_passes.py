"""Padding lets compiled walks drop leaf checks and stay exact (test_hir_padding.py, beside this
file: padding keeps every prediction)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from strategies import forests, make_forest, rows_for

import silvanforge as sf
from silvanforge.frontend.hir_passes import pad_trees, padded_nodes
from silvanforge.runtime import reference


@settings(max_examples=20, deadline=None)
@given(forest=forests(max_depth=5))
def test_padded_walks_skip_leaf_checks_and_stay_exact(forest):
    depth = forest.max_depth()
    schedule = f"tile(batch, b0, b1, 8)\nreorder(b0, tree, b1)\ninterleave(b1)\npeelWalk(b1, {depth})"
    cf = sf.compile(forest, schedule=schedule if depth else None, pad=True)
    if depth:
        assert "while" not in cf.show("lir")  # fully peeled: no walk loop, no leaf test
    X = rows_for(forest, np.random.default_rng(1), 211)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True),
                                  reference.predict(forest, X, output_margin=True))
    assert cf.forest is forest or cf.forest.fingerprint() == forest.fingerprint()


def test_default_pads_cheap_forests_and_saves_the_original(tmp_path):
    from silvanforge.lowering.choices import choose_padding

    sparse = make_forest()  # padding more than doubles its nodes: the chooser decides (size)
    assert padded_nodes(sparse) > 2 * sum(t.num_nodes for t in sparse.trees)
    assert sf.compile(sparse, rep="sparse").pad == choose_padding(sparse)  # padding is the walks'
    forest = pad_trees(make_forest())  # complete trees: padding is free, so it is chosen
    cf = sf.compile(forest, rep="sparse")
    assert cf.pad and "peelWalk" in cf.schedule.to_text()
    cf.save(tmp_path / "m.forge")
    back = sf.load_compiled(tmp_path / "m.forge")
    assert back.pad and back.forest.fingerprint() == forest.fingerprint()
    X = rows_for(forest, np.random.default_rng(2), 500)
    np.testing.assert_array_equal(back.predict(X), reference.predict(forest, X))

"""The example representation passes the conformance kit: random forests with NaN, categorical
and zero-as-missing splits, several outputs, under every CPU schedule family, exact against the
reference evaluator (tiles are refused: the class does not lay them out)."""

import numpy as np

import silvanforge as sf
from silvanforge import testing
from silvanforge.runtime import reference


def test_passes_the_conformance_kit():
    result = testing.check_representation("linked", seeds=range(6))
    assert result.cases > 0
    assert all("tile" in what for what in result.refused)  # only the tiled cases are refused


def test_is_listed_and_never_the_default():
    from silvanforge.plugins import registry

    assert "linked" in registry().representations()
    forest = testing.random_forest(3)
    assert sf.compile(forest).rep != "linked"
    cf = sf.compile(forest, rep="linked")
    X = testing.random_rows(forest, 100, seed=1)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))

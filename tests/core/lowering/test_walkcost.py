"""The walks' cost model (core/lowering/walkcost.py): what a step costs more for the width of
the rows it reads."""

from __future__ import annotations

import numpy as np
import pytest

from silvanforge.ir.hir import Forest, Op
from silvanforge.lowering import walkcost
from strategies import _tree

pytestmark = pytest.mark.core_alone


def _forest(features: int, dtype: str = "float32") -> Forest:
    rng = np.random.default_rng(features)
    trees = [_tree(rng, features, (0,), 4, [int(Op.LT)], categorical=False, zero_missing=False) for _ in range(4)]
    return Forest(trees=trees, num_features=features, threshold_dtype=dtype, accumulate_dtype=dtype)


def test_rows_past_l1_cost_more_a_kb_only_in_interleaved_walks():
    """Interleaved walks (calls of WALK_INTERLEAVED_ROWS rows and more) of rows that pass the L1
    cache together pay WALK_STEP_NS_PER_ROW_KB_PAST_L1 a KB; a row at a time, or rows that fit
    (xgb_multiclass_8's 54 features), the KB rate they always paid."""
    wide, narrow = _forest(2000), _forest(54)
    kb = 2000 * 4 / 1000
    assert walkcost.row_step_ns(wide) == pytest.approx(walkcost.WALK_STEP_NS_PER_ROW_KB_PAST_L1 * kb)
    assert walkcost.row_step_ns(wide, 16) == walkcost.row_step_ns(wide, None)
    assert walkcost.row_step_ns(wide, 1) == pytest.approx(walkcost.WALK_STEP_NS_PER_ROW_KB * kb)
    assert walkcost.row_step_ns(narrow) == pytest.approx(walkcost.WALK_STEP_NS_PER_ROW_KB * 54 * 4 / 1000)
    assert walkcost.walk_estimate_ns(wide) > walkcost.walk_estimate_ns(wide, 1)
    assert walkcost.walk_estimate_ns(narrow) == walkcost.walk_estimate_ns(narrow, 1)


def test_split_rows_count_twice_toward_the_l1_cache():
    """Walks read exact forests' rows split (2F+1 values): 600 float32 features pass L1 with
    WALK_ROWS_IN_FLIGHT rows in flight; with an infinite threshold (no split rows) they fit."""
    forest = _forest(600)
    assert walkcost.row_step_ns(forest) == pytest.approx(walkcost.WALK_STEP_NS_PER_ROW_KB_PAST_L1 * 2.4)
    inner = np.flatnonzero(forest.trees[0].left >= 0)
    forest.trees[0].threshold[inner[0]] = np.inf
    forest = Forest(trees=forest.trees, num_features=600, threshold_dtype="float32", accumulate_dtype="float32")
    assert walkcost.row_step_ns(forest) == pytest.approx(walkcost.WALK_STEP_NS_PER_ROW_KB * 2.4)

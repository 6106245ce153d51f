"""Hypothesis strategies for random HIR forests and the rows to feed them.

Random forests exercise every rule of the HIR at once: mixed comparison ops, default
directions, LightGBM's zero-as-missing, categorical splits under each category rule, several
outputs per tree and every aggregation.  Thresholds come from a small grid so that rows hit
them exactly (ties are where ``<`` and ``<=`` differ).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, Op, Transform, Tree
from silvanforge.testing import GRID, random_tree, rows_for  # noqa: F401 - the suite's names for them


# One generator of random trees: the conformance kit's (silvanforge.testing).
_tree = random_tree


@st.composite
def forests(draw, max_trees: int = 12, max_depth: int = 6, max_features: int = 6, plain: bool = False):
    """Random forests; ``plain``: numerical splits of one op (< or <=), no zero-as-missing
    (what split rows need, :func:`silvanforge.lowering.walksetup.can_split_rows`)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    num_features = draw(st.integers(1, max_features))
    num_outputs = draw(st.sampled_from([1, 1, 2, 3]))
    multi_output_trees = num_outputs > 1 and draw(st.booleans())
    aggregation = draw(st.sampled_from(list(Aggregation)))
    ops = draw(st.sampled_from([[Op.LT], [Op.LE]] + ([] if plain else [[Op.LT, Op.LE, Op.EQ]])))
    categorical = not plain and draw(st.booleans())
    zero_missing = not plain and draw(st.booleans())
    dtype = draw(st.sampled_from(["float32", "float64"]))
    n_trees = draw(st.integers(1, max_trees))
    trees = []
    for i in range(n_trees):
        outputs = tuple(range(num_outputs)) if multi_output_trees else (i % num_outputs,)
        trees.append(_tree(rng, num_features, outputs, draw(st.integers(0, max_depth)),
                           [int(o) for o in ops], categorical, zero_missing))
    transform = draw(st.sampled_from(["identity", "sigmoid"] + (["softmax"] if num_outputs > 1 else [])))
    return Forest(
        trees=trees, num_features=num_features, num_outputs=num_outputs,
        base_score=np.round(rng.normal(size=num_outputs), 2), aggregation=aggregation,
        average_divisor=float(max(1, n_trees // num_outputs)), transform=Transform(transform),
        threshold_dtype=dtype, accumulate_dtype=dtype,
        category_rule=draw(st.sampled_from(list(CategoryRule))), source="random",
    )


# ----------------------------------------------------------------------------- fixed forests
def stump_forest(depth: int = 1) -> Forest:
    """A complete tree of ``depth`` levels of splits on feature 0 (thresholds 0, 1, 2, ...)."""
    size = 2 ** (depth + 1) - 1
    k = np.arange(size)
    inner = 2 * k + 2 < size
    tree = Tree.from_nodes(np.where(inner, 2 * k + 1, -1), np.where(inner, 2 * k + 2, -1),
                           np.where(inner, 0, -1), k.astype(float), k * 0.5 + 1)
    return Forest(trees=[tree], num_features=1)


def seeded_forest(seed: int, categorical: bool = True) -> Forest:
    """Ten random trees of depth 1 to 6 on 4 features, float32 (the tiling tests' forest)."""
    rng = np.random.default_rng(seed)
    trees = [_tree(rng, 4, (0,), int(rng.integers(1, 7)), [0, 1], categorical, True) for _ in range(10)]
    return Forest(trees=trees, num_features=4, threshold_dtype="float32", accumulate_dtype="float32")

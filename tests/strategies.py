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

GRID = np.array([-2.0, -1.0, -0.5, 0.0, 1e-36, 0.5, 1.0, 2.0, 3.0, 70.0])


def _tree(rng: np.random.Generator, num_features: int, outputs: tuple[int, ...], max_depth: int,
          ops: list[int], categorical: bool, zero_missing: bool) -> Tree:
    left, right, feature, threshold, op, dleft, zmiss, leaf = [], [], [], [], [], [], [], []
    cats: dict[int, list[int]] = {}

    def new(depth: int) -> int:
        node = len(left)
        left.append(-1), right.append(-1), feature.append(-1), threshold.append(0.0)
        op.append(int(Op.LT)), dleft.append(False), zmiss.append(False)
        leaf.append(np.round(rng.normal(size=len(outputs)), 3))
        if depth < max_depth and (depth == 0 or rng.random() < 0.75):
            feature[node] = int(rng.integers(num_features))
            threshold[node] = float(rng.choice(GRID))
            op[node] = int(rng.choice(ops))
            dleft[node] = bool(rng.random() < 0.5)
            zmiss[node] = zero_missing and bool(rng.random() < 0.3)
            if categorical and rng.random() < 0.3:
                cats[node] = sorted(set(rng.integers(0, 80, size=rng.integers(1, 6)).tolist()))
            l_child = new(depth + 1)
            r_child = new(depth + 1)
            left[node], right[node] = l_child, r_child
        return node

    new(0)
    return Tree.from_nodes(left, right, feature, threshold, np.array(leaf), op=op, default_left=dleft,
                           zero_missing=zmiss, outputs=outputs, categories=cats)


@st.composite
def forests(draw, max_trees: int = 12, max_depth: int = 6, max_features: int = 6, plain: bool = False):
    """Random forests; ``plain``: numerical splits of one op (< or <=), no zero-as-missing
    (what split rows need, :func:`silvanforge.lowering.can_split_rows`)."""
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


def rows_for(forest: Forest, rng: np.random.Generator, n: int) -> np.ndarray:
    """Rows mixing grid values (exact ties), random values, NaN, +-inf and fractional categories."""
    choices = np.concatenate([GRID, [np.nan, np.inf, -np.inf, 2.7, -0.3, 5.0, 64.0, 1e-40, -0.0, 1e-35, -1e-35, 1.5e-35, 1.00000002e-35, -1.00000002e-35]])
    X = rng.choice(choices, size=(n, forest.num_features))
    noise = rng.random((n, forest.num_features)) < 0.3
    X[noise] = rng.normal(scale=3, size=int(noise.sum()))
    return X

"""Hypothesis strategies for random HIR forests and the rows to feed them, and the fixed forests
the tests share.

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
def forests(draw, max_trees: int = 12, max_depth: int = 6, max_features: int = 6, plain: bool = False,
            aggregations: tuple = tuple(Aggregation)):
    """Random forests; ``plain``: numerical splits of one op (< or <=), no zero-as-missing
    (what split rows need, :func:`silvanforge.lowering.walksetup.can_split_rows`);
    ``aggregations``: how the trees' values may be combined (any, unless told)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    num_features = draw(st.integers(1, max_features))
    num_outputs = draw(st.sampled_from([1, 1, 2, 3]))
    multi_output_trees = num_outputs > 1 and draw(st.booleans())
    aggregation = draw(st.sampled_from(list(aggregations)))
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


def categorical_forest(seed: int, features: int, rule: CategoryRule, op: Op, dtype: str, trees: int = 6) -> Forest:
    """``trees`` random trees of depth 6 with categorical splits (categories up to 79) among
    numerical ones of one op, no zero-as-missing (the split rows' tests)."""
    rng = np.random.default_rng(seed)
    return Forest(trees=[_tree(rng, features, (0,), 6, [int(op)], categorical=True, zero_missing=False)
                         for _ in range(trees)],
                  num_features=features, threshold_dtype=dtype, accumulate_dtype=dtype, category_rule=rule,
                  source="random")


def category_rows(forest: Forest, seed: int, n: int, share: float = 0.15, more=()) -> np.ndarray:
    """The suite's rows with a ``share`` of values replaced by categories no split names (above
    the largest, 79), fractional and negative ones, values at and past each rule's bounds, and
    ``more``."""
    rng = np.random.default_rng(seed)
    X = rows_for(forest, rng, n)
    odd = rng.random(X.shape) < share
    X[odd] = rng.choice([79.0, 80.0, 81.0, 100.5, 0.5, -0.5, -1.0, 2.0**24, 2.0**24 - 1, 2.0**31, 3e9, -3e9, *more],
                        size=int(odd.sum()))
    return X


def labelled_frame(rng: np.random.Generator, n: int, columns: dict):
    """A pandas frame of ``n`` rows, its columns in ``columns``' order: a count makes a column of
    that many labels ``c0``, ``c1``, ... as pandas categories, ``"normal"`` normal values."""
    import pandas as pd

    out = {}
    for name, kind in columns.items():
        if kind == "normal":
            out[name] = rng.normal(size=n)
        else:
            labels = [f"c{i}" for i in range(kind)]
            out[name] = pd.Categorical(rng.choice(labels, n), categories=labels)
    return pd.DataFrame(out)


def numeric_forest(seed: int, trees: int = 12, features: int = 7) -> Forest:
    """``trees`` random trees of depth 5 with numerical splits (< and <=), no categories and no
    zero-as-missing (the native worker pool's tests, also in a child process)."""
    rng = np.random.default_rng(seed)
    return Forest(trees=[_tree(rng, features, (0,), 5, [int(Op.LT), int(Op.LE)], categorical=False,
                               zero_missing=False) for _ in range(trees)], num_features=features)


def make_forest(num_outputs=3, dtype="float32", seed=7) -> Forest:
    """Thirty trees of depth 5 on 5 features with categorical splits, softmax over ``num_outputs``
    (sigmoid for one): the fixed forest of the API, artifact and plan tests."""
    rng = np.random.default_rng(seed)
    trees = [_tree(rng, 5, (i % num_outputs,), 5, [int(Op.LT)], True, False) for i in range(30)]
    return Forest(trees=trees, num_features=5, num_outputs=num_outputs,
                  base_score=np.linspace(-0.5, 0.5, num_outputs), aggregation=Aggregation.SUM,
                  transform=Transform("softmax" if num_outputs > 1 else "sigmoid"),
                  threshold_dtype=dtype, accumulate_dtype=dtype, category_rule=CategoryRule.XGBOOST)


def oblivious_tree(rng, depth: int, features: int, outputs: tuple, op=None) -> Tree:
    """A complete tree whose every level tests one split drawn at random: ops, missing
    directions and zero-as-missing vary from level to level."""
    splits = [(int(rng.integers(features)), float(rng.choice([-1.0, 0.0, 0.5, rng.normal()])),
               int(rng.integers(2)) if op is None else int(op), bool(rng.integers(2)), bool(rng.integers(2)))
              for _ in range(depth)]
    n = 2 ** (depth + 1) - 1
    left, right = np.full(n, -1), np.full(n, -1)
    feature, threshold = np.full(n, -1), np.zeros(n)
    ops, dl, zm = np.zeros(n, np.uint8), np.zeros(n, bool), np.zeros(n, bool)
    for node in range(2 ** depth - 1):
        level = int(np.log2(node + 1))
        left[node], right[node] = 2 * node + 1, 2 * node + 2
        feature[node], threshold[node], ops[node], dl[node], zm[node] = splits[level]
    values = rng.normal(size=(n, len(outputs)))
    return Tree(left.astype(np.int32), right.astype(np.int32), feature.astype(np.int32), threshold, ops, dl, zm,
                values, outputs)

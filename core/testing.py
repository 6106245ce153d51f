"""A conformance kit for representation and target plugins: run it in your plugin's own tests.

    from silvanforge import testing

    def test_my_layout_conforms():
        testing.check_representation("my_layout")          # walks: every schedule family, tiles

    def test_my_target_conforms():
        testing.check_target("my_target")

It compiles random forests that exercise every rule of the HIR (``<``, ``<=`` and ``==`` splits,
both default directions, NaN, +-inf and values exactly on thresholds, categorical splits under
each category rule, several outputs, every aggregation, float32 and float64, linear leaves for
plugins that say they run them) and compares the
compiled margins with the core's reference evaluator (:mod:`silvanforge.runtime.reference`), exactly
where the schedule keeps the reference's summation order and to the dtype's rounding where it
reorders sums.  A forest the plugin refuses with :class:`~silvanforge.errors.UnsupportedModelError`
(or, for options it cannot take, an InputError) is skipped and counted, never hidden: the result
says how many ran and why the rest did not.

Only NumPy is needed; every forest comes from a seed, and a failure names the seed, the forest's
shape and the options, so it can be reproduced with :func:`random_forest`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge import api
from silvanforge.errors import InputError, UnsupportedModelError
from silvanforge.frontend.sampling import random_rows  # noqa: F401 - plugins' tests import it from the kit
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, LinearLeaves, Op, Transform, Tree
from silvanforge.plugins import registry
from silvanforge.runtime import reference

# Thresholds come from this grid so that rows hit them exactly (where < and <= differ).
GRID = np.array([-2.0, -1.0, -0.5, 0.0, 1e-36, 0.5, 1.0, 2.0, 3.0, 70.0])
# Schedule families a walk representation must run under on CPU targets (canned names).
CPU_SCHEDULES = (None, "default", "xgboost", "interleaved", "interleaved-trees", "chained-trees",
                 "one-tree-at-a-time", "tree-parallel", "split-trees")
# Schedules whose partial sums reach the reference's order only up to rounding.
REORDERING = ("tree-parallel",)


def random_tree(rng: np.random.Generator, num_features: int, outputs: tuple[int, ...], max_depth: int,
                ops: list[int], categorical: bool, zero_missing: bool) -> Tree:
    """A random tree over ``num_features`` features adding to ``outputs``: each node splits with
    probability 0.75 below the root, thresholds from :data:`GRID`, ops from ``ops``, a third of
    the splits categorical (sets of up to five categories below 80) when ``categorical``."""
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


def random_linear(rng: np.random.Generator, tree: Tree, num_features: int) -> LinearLeaves:
    """Random linear models for ``tree``'s leaves: a constant and up to three terms each."""
    leaf = tree.left < 0
    sizes = np.where(leaf, rng.integers(0, 4, size=tree.num_nodes), 0)
    return LinearLeaves.from_lists(
        np.where(leaf, np.round(rng.normal(size=tree.num_nodes), 3), 0.0),
        [rng.integers(0, num_features, size=k).tolist() for k in sizes],
        [np.round(rng.normal(size=k), 3).tolist() for k in sizes])


def random_forest(seed: int, max_trees: int = 12, max_depth: int = 6, max_features: int = 6,
                  plain: bool = False, summed: bool = False, categorical: bool | None = None,
                  linear: bool = False) -> Forest:
    """The random forest of ``seed``.  ``plain``: ``<`` or ``<=`` splits only, no zero-as-missing
    and (unless ``categorical``) no categorical splits; ``summed``: single-output trees summed;
    ``categorical``: categorical splits or not (default: as the seed draws); ``linear``: linear
    models at every leaf (:func:`random_linear`; trees of one output each, summed)."""
    if linear:
        forest = random_forest(seed, max_trees, max_depth, max_features, plain, True, categorical)
        rng = np.random.default_rng([seed, 1])
        for tree in forest.trees:
            tree.linear = random_linear(rng, tree, forest.num_features)
        return forest
    rng = np.random.default_rng(seed)
    num_features = int(rng.integers(1, max_features + 1))
    num_outputs = int(rng.choice([1, 1, 2, 3]))
    multi_output_trees = num_outputs > 1 and not summed and bool(rng.random() < 0.5)
    aggregation = Aggregation.SUM if summed else list(Aggregation)[int(rng.integers(len(Aggregation)))]
    op_sets = [[Op.LT], [Op.LE]] + ([] if plain else [[Op.LT, Op.LE, Op.EQ]])
    ops = [int(o) for o in op_sets[int(rng.integers(len(op_sets)))]]
    drawn = bool(rng.random() < 0.5)
    categorical = (not plain and drawn) if categorical is None else categorical
    zero_missing = not plain and bool(rng.random() < 0.5)
    dtype = str(rng.choice(["float32", "float64"]))
    n_trees = int(rng.integers(1, max_trees + 1))
    trees = []
    for i in range(n_trees):
        outputs = tuple(range(num_outputs)) if multi_output_trees else (i % num_outputs,)
        trees.append(random_tree(rng, num_features, outputs, int(rng.integers(0, max_depth + 1)), ops,
                                 categorical, zero_missing))
    transforms = ["identity", "sigmoid"] + (["softmax"] if num_outputs > 1 else [])
    rules = list(CategoryRule)
    return Forest(
        trees=trees, num_features=num_features, num_outputs=num_outputs,
        base_score=np.round(rng.normal(size=num_outputs), 2), aggregation=aggregation,
        average_divisor=float(max(1, n_trees // num_outputs)),
        transform=Transform(transforms[int(rng.integers(len(transforms)))]),
        threshold_dtype=dtype, accumulate_dtype=dtype,
        category_rule=rules[int(rng.integers(len(rules)))], source=f"silvanforge.testing seed {seed}",
    )


def rows_for(forest: Forest, rng: np.random.Generator, n: int) -> np.ndarray:
    """Rows mixing grid values (exact ties), random values, NaN, +-inf, signed zeros, tiny values
    and fractional, negative and large categories."""
    choices = np.concatenate([GRID, [np.nan, np.inf, -np.inf, 2.7, -0.3, 5.0, 64.0, 1e-40, -0.0, 1e-35,
                                     -1e-35, 1.5e-35, 1.00000002e-35, -1.00000002e-35]])
    X = rng.choice(choices, size=(n, forest.num_features))
    noise = rng.random((n, forest.num_features)) < 0.3
    X[noise] = rng.normal(scale=3, size=int(noise.sum()))
    return X


@dataclasses.dataclass
class Conformance:
    """What a check ran: ``cases`` compiled and compared, ``refused`` (options -> the plugin's
    reason) skipped because the plugin refused the forest with UnsupportedModelError."""
    cases: int = 0
    refused: dict = dataclasses.field(default_factory=dict)


def _compare(forest: Forest, cf, X: np.ndarray, exact: bool, what: str) -> None:
    got = cf.predict(X, output_margin=True)
    want = reference.predict(forest, X, output_margin=True)
    if exact:
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        tol = 1e-5 if np.dtype(forest.accumulate_dtype) == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)


def _run(result: Conformance, forest: Forest, X: np.ndarray, exact: bool, what: str, **options) -> None:
    try:
        cf = api.compile(forest, **options)
    except (UnsupportedModelError, InputError) as exc:
        result.refused[what] = str(exc)
        return
    _compare(forest, cf, X, exact, what)
    result.cases += 1


def _run_linear(result: Conformance, seed: int, rows: int, what: str, **options) -> None:
    """The linear-leaf forest of ``seed`` (every leaf a model), for plugins that run them."""
    forest = random_forest(seed, linear=True)
    X = rows_for(forest, np.random.default_rng(seed), rows)
    _run(result, forest, X, True, f"seed {seed} linear leaves ({forest.threshold_dtype}), {what}", **options)


def check_representation(rep: str, target: str | None = None, seeds=range(12), rows: int = 48,
                         tile_sizes=(1, 2, 4), schedules=None) -> Conformance:
    """Compile ``seeds`` random forests with representation ``rep`` on ``target`` and compare
    with the reference: a walk representation under every schedule family (:data:`CPU_SCHEDULES`
    or ``schedules``) and tile size (refusals of tiles are counted), a program representation
    as it builds itself.  Raises AssertionError naming the seed and options on a mismatch;
    returns what ran (:class:`Conformance`).  At least one case must run."""
    reg = registry()
    reg.check_representation(rep)
    walks = reg.rep_kind(rep) == "walk"
    result = Conformance()
    for seed in seeds:
        forest = random_forest(seed, summed=not walks)
        X = rows_for(forest, np.random.default_rng(seed), rows)
        base = f"seed {seed} ({forest.num_trees} trees, {forest.num_outputs} outputs, {forest.threshold_dtype})"
        if not walks:  # the full forest (often refused), then a plain sum of trees
            _run(result, forest, X, True, f"{base}, rep={rep}", target=target, rep=rep)
            simple = random_forest(seed, plain=True, summed=True, categorical=bool(seed % 2))
            _run(result, simple, rows_for(simple, np.random.default_rng(seed), rows), True,
                 f"seed {seed} plain, summed, categorical={bool(seed % 2)}, rep={rep}", target=target, rep=rep)
            continue
        for schedule in (CPU_SCHEDULES if schedules is None else schedules):
            _run(result, forest, X, schedule not in REORDERING, f"{base}, rep={rep}, schedule={schedule}",
                 target=target, rep=rep, schedule=schedule)
        for tile in tile_sizes:
            if tile > 1:
                _run(result, forest, X, True, f"{base}, rep={rep}, tile_size={tile}",
                     target=target, rep=rep, tile_size=tile)
        if reg.rep_class(rep).linear_leaves:
            _run_linear(result, seed, rows, f"rep={rep}", target=target, rep=rep)
    if not result.cases:
        raise AssertionError(f"representation {rep!r} refused every forest: {result.refused}")
    return result


def check_target(target: str, reps=None, seeds=range(8), rows: int = 48) -> Conformance:
    """Compile ``seeds`` random forests for ``target`` with each representation (default: every
    installed one, the chooser's choice included) and compare with the reference: exactly on
    CPU targets, to the dtype's rounding on GPU ones (their templates reorder sums)."""
    reg = registry()
    reg.check_target(target)
    # GPU templates sum a row's trees in parallel partial sums: equal up to rounding.
    exact = reg.target_kind(target) == "cpu"
    result = Conformance()
    for seed in seeds:
        forest = random_forest(seed)
        X = rows_for(forest, np.random.default_rng(seed), rows)
        base = f"seed {seed} ({forest.num_trees} trees, {forest.num_outputs} outputs, {forest.threshold_dtype})"
        _run(result, forest, X, exact, f"{base}, target={target}, rep chosen", target=target)
        for rep in (reg.representations() if reps is None else reps):
            _run(result, forest, X, exact, f"{base}, target={target}, rep={rep}", target=target, rep=rep)
        if reg.target(target).linear_leaves:
            _run_linear(result, seed, rows, f"target={target}, rep chosen", target=target)
    if not result.cases:
        raise AssertionError(f"target {target!r} refused every forest: {result.refused}")
    return result

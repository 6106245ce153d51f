"""Outputs of a model other than its predictions, as forests the compiler builds like any other:
the leaf each row reaches in each tree (``predict(X, pred_leaf=True)``, as XGBoost's and
LightGBM's ``pred_leaf``, CatBoost's ``calc_leaf_indexes`` and scikit-learn's ``apply`` give it)
and each tree's own values (``predict(X, per_tree=True)``, as Treelite's ``predict_per_tree``).

Each is a model-level transformation of the HIR (the SilvanForge paper draft, section
'Optimizations on High-Level IR'): tree ``t`` of the new forest adds to outputs of its own, so
every margin holds exactly one term (zero plus the leaf's value: exact in any precision) and
nothing is reduced over trees.  The whole compiler then builds it unchanged: the
representations' costs choose a layout (one that cannot run it refuses it as any forest), the
schedules walk it, every target runs it.  Leaf numbers are floats in the program, exact below
2**53 (float64 margins), and converted to the library's integer type on the way out.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.errors import InputError, UnsupportedModelError
from silvanforge.ir.hir import Aggregation, Forest, Transform

KINDS = ("pred_leaf", "per_tree")

# What each library's leaf indices are (numpy dtype): XGBoost's ``pred_leaf`` gives float32
# node ids, LightGBM's int32 leaf indices, CatBoost's ``calc_leaf_indexes`` uint32,
# scikit-learn's ``apply`` int64 node ids (ONNX, and models built here, as scikit-learn).
LEAF_DTYPES = {"xgboost": np.float32, "lightgbm": np.int32, "catboost": np.uint32}


def forest_of(forest: Forest, kind: str) -> Forest:
    """The forest whose margins are ``kind`` of ``forest`` (:data:`KINDS`)."""
    if kind == "pred_leaf":
        if forest.source == "onnx":
            # (an ONNX graph's nodes are numbered per attribute layout, and onnxruntime gives no
            # leaf indices to agree with: a number here would be one no library returns)
            raise UnsupportedModelError("pred_leaf: an ONNX model has no leaf numbering its runtime "
                                        "returns; compile the model from its training library for leaf indices")
        return leaf_forest(forest)
    if kind == "per_tree":
        return per_tree_forest(forest)
    raise InputError(f"unknown output {kind!r}; choose one of {', '.join(KINDS)}")


def _plain(forest: Forest, trees: list, outputs: int, accumulate: str) -> Forest:
    """``forest`` with ``trees`` whose margins are the values themselves: no base score, no
    averaging, no transform, every output a column of a matrix."""
    return dataclasses.replace(
        forest, trees=trees, num_outputs=max(outputs, 1), base_score=np.zeros(max(outputs, 1)),
        aggregation=Aggregation.SUM, average_divisor=1.0, transform=Transform(), accumulate_dtype=accumulate,
        output_shape="matrix", class_labels=None)


def leaf_forest(forest: Forest) -> Forest:
    """Tree ``t`` answers output ``t`` with the library's number of the leaf a row reaches
    (``Tree.node_ids``, else the leaf's index)."""
    trees, largest = [], 0
    for t, tree in enumerate(forest.trees):
        ids = tree.node_ids if tree.node_ids is not None else np.arange(tree.num_nodes)
        value = np.where(tree.left < 0, ids, 0).astype(np.float64).reshape(-1, 1)
        largest = max(largest, int(value.max(initial=0)))
        trees.append(dataclasses.replace(tree, leaf_value=value, outputs=(t,), linear=None, tile_id=None))
    # float32 margins hold every id below 2**24 exactly, at half the memory a row's (n, trees)
    # margins take (4096 rows of a 1000-tree model: 16 MB, not 32)
    return _plain(forest, trees, len(trees), "float32" if largest < 2 ** 24 else "float64")


def per_tree_forest(forest: Forest) -> Forest:
    """Tree ``t`` answers its own values: output ``t`` where every tree adds to one output,
    else outputs ``t * K .. t * K + K - 1`` (``K`` the model's outputs).  A random forest's
    trees answer their own values, not divided by the number of trees."""
    K = forest.num_outputs
    single = all(len(tree.outputs) == 1 for tree in forest.trees)
    trees = [dataclasses.replace(tree, outputs=(t,) if single else tuple(t * K + o for o in tree.outputs),
                                 tile_id=None)
             for t, tree in enumerate(forest.trees)]
    return _plain(forest, trees, len(trees) * (1 if single else K), forest.accumulate_dtype)


def shaped(forest: Forest, kind: str, margins: np.ndarray) -> np.ndarray:
    """The margins of :func:`forest_of` as the library returns ``kind``: ``(n, trees)`` leaf
    numbers in the library's dtype; ``(n, trees)`` values (``(n, trees, outputs)`` where a tree
    adds to several outputs)."""
    return shaper(forest, kind)(margins)


def shaper(forest: Forest, kind: str):
    """:func:`shaped` of ``forest`` and ``kind`` as a function of the margins alone, its choices
    made once (a compiled model keeps it: a one-row call's leaf ids then cost a reshape and a
    conversion, not the library's rules again)."""
    trees = forest.num_trees
    if trees == 0:  # (a forest of no trees, as XGBoost trains for 0 rounds: a column of none)
        dtype = LEAF_DTYPES.get(forest.source, np.int64) if kind == "pred_leaf" else np.dtype(forest.accumulate_dtype)
        return lambda margins: np.zeros((margins.shape[0], 0), dtype)
    if kind == "pred_leaf":
        if forest.source == "sklearn" and forest.objective.startswith("GradientBoosting"):
            # ``apply`` of scikit-learn's gradient boosting: float64, (n, stages, trees a stage)
            # for a classifier, (n, stages) for a regressor
            per_stage = () if forest.objective.startswith("GradientBoostingRegressor") else (forest.num_outputs,)
            stages = trees // max(1, int(np.prod(per_stage)))  # (named: a reshape of no rows cannot infer it)
            return lambda margins: margins.reshape(margins.shape[0], stages, *per_stage).astype(np.float64)
        if forest.source == "sklearn" and forest.objective.startswith(("DecisionTree", "ExtraTree(")):
            return lambda margins: margins.reshape(margins.shape[0]).astype(np.int64)  # a single tree's apply: (n,)
        dtype = LEAF_DTYPES.get(forest.source, np.int64)
        # Every id below 2**23 (a node's number at most; CatBoost's leaves below 2**16).
        small_ids = max(tree.num_nodes for tree in forest.trees) < 2**23

        def leaf_ids(margins):
            if dtype is np.uint32 and margins.dtype == np.float32 and small_ids:
                # The ids converted where they lie (the margins are this call's own array): 2**23
                # added, each id is the low bits of its float's mantissa, so its bits less 2**23's
                # are the id.  A converted copy cost as much again in fresh pages as the kernel's
                # output (16 MB at 4096 rows of 1000 trees: 3-20 ms of page faults, as the host moves).
                np.add(margins, np.float32(2**23), out=margins)
                ids = margins.view(np.int32)
                np.subtract(ids, np.int32(0x4B000000), out=ids)
                return ids.reshape(margins.shape[0], trees).view(np.uint32)
            if dtype is np.uint32 and margins.dtype == np.float32:
                # (float32 margins hold ids below 2**24, :func:`leaf_forest`: NumPy converts them to
                # int32 with vector instructions, to uint32 an element at a time, 2.6x slower)
                return margins.reshape(margins.shape[0], trees).astype(np.int32).view(np.uint32)
            # (no copy where the margins are of the library's dtype already: XGBoost's float32)
            return margins.reshape(margins.shape[0], trees).astype(dtype, copy=False)
        return leaf_ids
    if all(len(tree.outputs) == 1 for tree in forest.trees):
        return lambda margins: margins.reshape(margins.shape[0], trees)
    return lambda margins: margins.reshape(margins.shape[0], trees, forest.num_outputs)

"""Saving a HIR forest as plain arrays and JSON (no pickle), for compiled-model artifacts."""

from __future__ import annotations

import json

import numpy as np

from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, LinearLeaves, Transform, Tree

_NODE_FIELDS = ("left", "right", "feature", "threshold", "op", "default_left", "zero_missing")


def to_arrays(forest: Forest) -> dict[str, np.ndarray]:
    """Everything in the forest as a dict of NumPy arrays (meta as a JSON byte string)."""
    trees = forest.trees
    out: dict[str, np.ndarray] = {
        "tree_nodes": np.array([t.num_nodes for t in trees], dtype=np.int64),
        "tree_outputs_len": np.array([len(t.outputs) for t in trees], dtype=np.int64),
        "tree_outputs": np.array([o for t in trees for o in t.outputs], dtype=np.int64),
        "leaf_value": np.concatenate([t.leaf_value.reshape(-1) for t in trees]) if trees else np.zeros(0),
        "base_score": np.asarray(forest.base_score, dtype=np.float64),
    }
    for f in _NODE_FIELDS:
        out[f] = np.concatenate([getattr(t, f) for t in trees]) if trees else np.zeros(0)
    cat_tree, cat_node, cat_len, cat_vals = [], [], [], []
    for i, t in enumerate(trees):
        for node, cats in sorted(t.categories.items()):
            cat_tree.append(i), cat_node.append(node), cat_len.append(len(cats)), cat_vals.append(cats)
    out["cat_index"] = np.array([cat_tree, cat_node, cat_len], dtype=np.int64).reshape(3, -1)
    out["cat_values"] = np.concatenate(cat_vals).astype(np.int64) if cat_vals else np.zeros(0, np.int64)
    if any(t.cover is not None for t in trees):  # only then, as linear leaves below
        # NaN over the nodes of a tree without covers (read back as None)
        out["cover"] = np.concatenate([np.full(t.num_nodes, np.nan) if t.cover is None else t.cover
                                       for t in trees]).astype(np.float64)
    if any(t.node_ids is not None for t in trees):
        # -1 over the nodes of a tree the import did not renumber (read back as None)
        out["node_ids"] = np.concatenate([np.full(t.num_nodes, -1, np.int64) if t.node_ids is None else t.node_ids
                                          for t in trees]).astype(np.int64)
    linear = [(i, t.linear) for i, t in enumerate(trees) if t.linear is not None]
    if linear:  # only then: artifacts of other models keep the arrays they always had
        out["linear_trees"] = np.array([i for i, _ in linear], dtype=np.int64)
        for name, dtype in (("const", np.float64), ("begin", np.int64), ("feature", np.int32), ("coeff", np.float64)):
            out[f"linear_{name}"] = np.concatenate([getattr(lin, name) for _, lin in linear]).astype(dtype)
    meta = {
        "num_features": forest.num_features, "num_outputs": forest.num_outputs,
        "aggregation": forest.aggregation.value, "average_divisor": forest.average_divisor,
        "transform": [forest.transform.name, [list(p) for p in forest.transform.params]],
        "threshold_dtype": forest.threshold_dtype, "accumulate_dtype": forest.accumulate_dtype,
        "category_rule": forest.category_rule.value, "feature_names": forest.feature_names,
        "source": forest.source, "objective": forest.objective, "output_shape": forest.output_shape,
        "class_labels": forest.class_labels,
        "feature_categories": None if forest.feature_categories is None else
        [[int(f), list(labels)] for f, labels in sorted(forest.feature_categories.items())],
        "unseen_category_error": forest.unseen_category_error, "wider_rows": forest.wider_rows,
        "hashed_categories": None if forest.hashed_categories is None else
        [[int(f), [int(h) for h in hashes]] for f, hashes in sorted(forest.hashed_categories.items())],
        "hashed_combinations": forest.hashed_combinations,
    }
    if forest.missing is not None:  # (only then: other artifacts keep the meta they always had)
        meta["missing"] = forest.missing
    out["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return out


def from_arrays(arrs) -> Forest:
    meta = json.loads(bytes(arrs["meta"]).decode())
    nodes = arrs["tree_nodes"]
    outs_len = arrs["tree_outputs_len"]
    node_starts = np.concatenate([[0], np.cumsum(nodes)])
    out_starts = np.concatenate([[0], np.cumsum(outs_len)])
    leaf_starts = np.concatenate([[0], np.cumsum(nodes * outs_len)])
    cat_tree, cat_node, cat_len = arrs["cat_index"]
    cat_starts = np.concatenate([[0], np.cumsum(cat_len)])
    linear = _linear_from_arrays(arrs, nodes)
    cover = np.asarray(arrs["cover"], dtype=np.float64) if "cover" in arrs else None
    if cover is not None and len(cover) != int(node_starts[-1]):
        raise ValueError("the node covers do not match the trees' nodes")
    node_ids = np.asarray(arrs["node_ids"], dtype=np.int64) if "node_ids" in arrs else None
    if node_ids is not None and len(node_ids) != int(node_starts[-1]):
        raise ValueError("the node ids do not match the trees' nodes")
    trees = []
    for i in range(len(nodes)):
        a, z = node_starts[i], node_starts[i + 1]
        outputs = tuple(int(o) for o in arrs["tree_outputs"][out_starts[i]:out_starts[i + 1]])
        fields = {f: np.asarray(arrs[f][a:z]) for f in _NODE_FIELDS}
        leaf = np.asarray(arrs["leaf_value"][leaf_starts[i]:leaf_starts[i + 1]]).reshape(nodes[i], len(outputs))
        cats = {int(cat_node[j]): np.asarray(arrs["cat_values"][cat_starts[j]:cat_starts[j + 1]])
                for j in np.flatnonzero(cat_tree == i)}
        trees.append(Tree(
            left=fields["left"].astype(np.int32), right=fields["right"].astype(np.int32),
            feature=fields["feature"].astype(np.int32), threshold=fields["threshold"].astype(np.float64),
            op=fields["op"].astype(np.uint8), default_left=fields["default_left"].astype(bool),
            zero_missing=fields["zero_missing"].astype(bool), leaf_value=leaf.astype(np.float64),
            outputs=outputs, categories=cats, linear=linear.get(i),
            cover=None if cover is None or np.isnan(cover[a:z]).all() else cover[a:z].copy(),
            node_ids=None if node_ids is None or (node_ids[a:z] < 0).all() else node_ids[a:z].copy()))
    name, params = meta["transform"]
    return Forest(
        trees=trees, num_features=meta["num_features"], num_outputs=meta["num_outputs"],
        base_score=np.asarray(arrs["base_score"], dtype=np.float64),
        aggregation=Aggregation(meta["aggregation"]), average_divisor=meta["average_divisor"],
        transform=Transform(name, tuple((k, v) for k, v in params)),
        threshold_dtype=meta["threshold_dtype"], accumulate_dtype=meta["accumulate_dtype"],
        category_rule=CategoryRule(meta["category_rule"]), feature_names=meta["feature_names"],
        source=meta["source"], objective=meta["objective"], output_shape=meta["output_shape"],
        class_labels=meta["class_labels"],
        feature_categories=None if meta.get("feature_categories") is None else
        {int(f): list(labels) for f, labels in meta["feature_categories"]},
        unseen_category_error=bool(meta.get("unseen_category_error", False)),
        wider_rows=bool(meta.get("wider_rows", False)),
        hashed_categories=None if meta.get("hashed_categories") is None else
        {int(f): [int(h) for h in hashes] for f, hashes in meta["hashed_categories"]},
        hashed_combinations=meta.get("hashed_combinations"),
        missing=None if meta.get("missing") is None else float(meta["missing"]),
    )


def _linear_from_arrays(arrs, nodes: np.ndarray) -> dict[int, LinearLeaves]:
    """Tree index -> its linear leaves, from the arrays :func:`to_arrays` wrote (none: {}).
    Each tree's arrays follow the previous one's: ``n`` constants, ``n + 1`` offsets (from 0)
    and as many features and coefficients as its last offset says."""
    if "linear_trees" not in arrs:
        return {}
    which = np.asarray(arrs["linear_trees"], dtype=np.int64)
    if len(which) and (which.min() < 0 or which.max() >= len(nodes) or len(np.unique(which)) != len(which)):
        raise ValueError("linear_trees names trees the forest does not have")
    const, begin = np.asarray(arrs["linear_const"]), np.asarray(arrs["linear_begin"])
    feature, coeff = np.asarray(arrs["linear_feature"]), np.asarray(arrs["linear_coeff"])
    out: dict[int, LinearLeaves] = {}
    at_const = at_begin = at_term = 0
    for i in which.tolist():
        n = int(nodes[i])
        c, b = const[at_const:at_const + n], begin[at_begin:at_begin + n + 1]
        if len(c) != n or len(b) != n + 1:
            raise ValueError("the linear leaf arrays are shorter than their trees")
        terms = int(b[-1])
        out[i] = LinearLeaves(const=c.astype(np.float64), begin=b.astype(np.int64),
                              feature=feature[at_term:at_term + terms].astype(np.int32),
                              coeff=coeff[at_term:at_term + terms].astype(np.float64))
        at_const, at_begin, at_term = at_const + n, at_begin + n + 1, at_term + terms
    return out

"""The tree ensemble's attributes (opset 1 and 3 TreeEnsembleRegressor / Classifier, opset 5
TreeEnsemble) read into one spec of nodes, trees and weights (a part of
:class:`.onnx_trees._Importer`)."""

from __future__ import annotations

import numpy as np

from .onnx_spec import _AGG, _AGG_V5, _FREE_OUTPUTS, _LEAF, _MEMBER, _POST_NAMES, _V3_MODES


class EnsembleAttributes:
    """The attribute-parsing methods of :class:`.onnx_trees._Importer`."""

    # ------------------------------------------------------------------ V3
    def _parse_v3(self):
        op = self.op
        classifier = op == "TreeEnsembleClassifier"
        treeids = self.ints("nodes_treeids")
        n = len(treeids)
        nodeids = self.ints("nodes_nodeids")
        modes_s = self.strs("nodes_modes")
        feats = self.ints("nodes_featureids")
        trues = self.ints("nodes_truenodeids")
        falses = self.ints("nodes_falsenodeids")
        values = self.floats_or_tensor("nodes_values")
        if values is None:
            values = np.zeros(0)
        mvt = self.ints("nodes_missing_value_tracks_true")
        self.check_len(n, nodes_nodeids=nodeids, nodes_modes=modes_s, nodes_featureids=feats,
                       nodes_truenodeids=trues, nodes_falsenodeids=falses, nodes_values=values)
        if len(mvt) > n:
            self.fail(f"{op}: nodes_missing_value_tracks_true has {len(mvt)} entries for {n} nodes")
        mvt = mvt + [0] * (n - len(mvt))
        modes = []
        for s in modes_s:
            if s not in _V3_MODES:
                self.fail(f"{op}: unknown node mode {s!r}")
            modes.append(_LEAF if s == "LEAF" else _V3_MODES.index(s))
        prefix = "class" if classifier else "target"
        w_ids = self.ints(f"{prefix}_ids")
        w_nodes = self.ints(f"{prefix}_nodeids")
        w_trees = self.ints(f"{prefix}_treeids")
        w_vals = self.floats_or_tensor(f"{prefix}_weights")
        if w_vals is None:
            w_vals = np.zeros(0)
        self.check_len(len(w_ids), **{f"{prefix}_nodeids": w_nodes, f"{prefix}_treeids": w_trees,
                                      f"{prefix}_weights": w_vals})
        base = self.floats_or_tensor("base_values")
        base = [] if base is None else list(base)
        post_name = self.str_("post_transform", "NONE")
        if post_name not in _POST_NAMES:
            self.fail(f"{op}: unknown post_transform {post_name!r}")
        post = _POST_NAMES.index(post_name)
        if classifier:
            labels_i = self.ints("classlabels_int64s")
            labels_s = self.strs("classlabels_strings")
            labels = labels_s if labels_s else labels_i
            if not labels:
                self.fail(f"{op}: no class labels (classlabels_int64s / classlabels_strings)")
            n_out = len(labels)
            agg = "SUM"
        else:
            labels = None
            n_out = self.int_("n_targets", 0)
            if n_out <= 0:
                self.fail(f"{op}: n_targets must be positive, got {n_out}")
            self._check_output_count(n_out, len(w_vals) + len(base))
            agg = self.str_("aggregate_function", "SUM")
            if agg not in _AGG:
                self.fail(f"{op}: unknown aggregate_function {agg!r}")
        for t in w_ids:
            if not 0 <= t < n_out:
                self.fail(f"{op}: {prefix} id {t} is outside 0..{n_out - 1}")

        # Index the nodes by (tree id, node id) as onnxruntime does.
        index = {}
        for i in range(n):
            key = (treeids[i], nodeids[i])
            if key in index:
                self.fail(f"{op}: node {nodeids[i]} of tree {treeids[i]} is defined twice")
            index[key] = i
        children = []
        for i in range(n):
            if modes[i] == _LEAF:
                children.append(None)
                continue
            kids = []
            for cid, what in ((trues[i], "true"), (falses[i], "false")):
                j = index.get((treeids[i], cid))
                if j is None or not 0 <= cid < n:
                    self.fail(f"{op}: node {nodeids[i]} of tree {treeids[i]} has a {what} child "
                              f"{cid} that does not exist")
                if j == i:
                    self.fail(f"{op}: node {nodeids[i]} of tree {treeids[i]} is its own child")
                kids.append(j)
            children.append(tuple(kids))
        weights = [[] for _ in range(n)]
        for t, nd, tr, w in zip(w_ids, w_nodes, w_trees, w_vals):
            j = index.get((tr, nd))
            if j is None:
                self.fail(f"{op}: a weight refers to node {nd} of tree {tr}, which does not exist")
            if modes[j] == _LEAF:  # onnxruntime ignores weights on internal nodes
                weights[j].append((int(t), float(w)))
        roots = [i for i in range(n) if i == 0 or treeids[i] != treeids[i - 1]]
        self._check_acyclic(children, roots)
        nodes = [(modes[i], feats[i], float(values[i]), mvt[i] == 1) for i in range(n)]
        # Classifier weights count as positive the way onnxruntime checks them: every entry
        # (internal nodes' too), and only ``w < 0`` counts against it, so NaN is positive.
        return {"kind": "classifier" if classifier else "regressor", "nodes": nodes,
                    "children": children, "leaves": weights, "leaf_fallback": [float(v) for v in values],
                    "roots": roots, "n_out": n_out, "agg": agg, "post": post, "base": base, "labels": labels,
                    "class_ids": w_ids, "all_positive": not any(w < 0 for w in w_vals), "members": {},
                    "out_f32": True}

    def _check_output_count(self, n_out, held):
        """Outputs cost memory for every row: beyond ``_FREE_OUTPUTS`` the file must hold a
        value per output, so that a small file cannot claim millions of them."""
        if n_out > max(_FREE_OUTPUTS, held):
            self.unsupported(f"{self.op}: n_targets={n_out} with {held} weights: at most "
                             f"{max(_FREE_OUTPUTS, held)} outputs are supported here")

    def _check_acyclic(self, children, roots):
        state = {}
        for r in roots:
            if state.get(r) == 2:
                continue
            stack = [(r, 0)]
            while stack:
                i, k = stack.pop()
                if k == 0:
                    if state.get(i) == 1:
                        self.fail(f"{self.op}: the trees contain a cycle")
                    if state.get(i) == 2:
                        continue
                    state[i] = 1
                    stack.append((i, 1))
                    for c in children[i] or ():
                        if state.get(c) == 1:
                            self.fail(f"{self.op}: the trees contain a cycle")
                        if state.get(c) != 2:
                            stack.append((c, 0))
                else:
                    state[i] = 2

    # ------------------------------------------------------------------ V5
    def _parse_v5(self):
        op = self.op
        for name in ("nodes_modes", "nodes_splits", "leaf_weights"):
            if name not in self.attrs:
                self.fail(f"{op}: required attribute {name} is missing")
        modes_raw = self.tensor("nodes_modes")
        n = len(modes_raw)
        feats = self.ints("nodes_featureids")
        splits = self.tensor("nodes_splits")
        trues = self.ints("nodes_truenodeids")
        falses = self.ints("nodes_falsenodeids")
        tleaf = self.ints("nodes_trueleafs")
        fleaf = self.ints("nodes_falseleafs")
        mvt = self.ints("nodes_missing_value_tracks_true")
        self.check_len(n, nodes_featureids=feats, nodes_splits=splits, nodes_truenodeids=trues,
                       nodes_falsenodeids=falses, nodes_trueleafs=tleaf, nodes_falseleafs=fleaf)
        if mvt and len(mvt) != n:
            self.fail(f"{op}: nodes_missing_value_tracks_true has {len(mvt)} entries for {n} nodes")
        mvt = mvt or [0] * n
        want = np.float64 if self.double else np.float32
        for name, arr in (("nodes_splits", splits),):
            if arr.dtype != want:
                self.unsupported(f"{op}: {name} has type {arr.dtype}, the input is "
                                 f"{np.dtype(want).name}; onnxruntime needs them equal")
        splits = self._in_threshold_type(splits)
        leaf_t = self.ints("leaf_targetids")
        leaf_w = self.tensor("leaf_weights")
        if leaf_w.dtype != want:
            self.unsupported(f"{op}: leaf_weights has type {leaf_w.dtype}, the input is "
                             f"{np.dtype(want).name}; onnxruntime needs them equal")
        leaf_w = self._in_threshold_type(leaf_w)
        self.check_len(len(leaf_w), leaf_targetids=leaf_t)
        n_out = self.int_("n_targets", 0)
        if n_out <= 0:
            self.fail(f"{op}: n_targets must be positive, got {n_out}")
        self._check_output_count(n_out, len(leaf_w))
        for t in leaf_t:
            if not 0 <= t < n_out:
                self.fail(f"{op}: leaf target id {t} is outside 0..{n_out - 1}")
        agg_code = self.int_("aggregate_function", 1)
        if agg_code not in _AGG_V5:
            self.fail(f"{op}: unknown aggregate_function {agg_code}")
        post = self.int_("post_transform", 0)
        if not 0 <= post < len(_POST_NAMES):
            self.fail(f"{op}: unknown post_transform {post}")
        modes = []
        for m in modes_raw.tolist():
            if not 0 <= int(m) <= 6:
                self.fail(f"{op}: unknown node mode {m}")
            modes.append(int(m))
        members = {}
        if _MEMBER in modes:
            if "membership_values" not in self.attrs:
                self.fail(f"{op}: BRANCH_MEMBER nodes but no membership_values")
            mv = self.tensor("membership_values")
            if mv.dtype != want:
                self.unsupported(f"{op}: membership_values has type {mv.dtype}, the input is "
                                 f"{np.dtype(want).name}; onnxruntime needs them equal")
            mv = mv.astype(np.float64)
            pos = 0
            for i, m in enumerate(modes):
                if m != _MEMBER:
                    continue
                vals = []
                while pos < len(mv) and not np.isnan(mv[pos]):
                    vals.append(float(mv[pos]))
                    pos += 1
                pos += 1
                if not vals:
                    self.fail(f"{op}: BRANCH_MEMBER node {i} has no member values")
                members[i] = vals
        roots_attr = self.ints("tree_roots")
        if not roots_attr:
            self.fail(f"{op}: tree_roots is empty")
        # Nodes are indexes 0..n-1, leaves n..n+L-1 in the common representation below.
        n_leaves = len(leaf_w)
        children = []
        for i in range(n):
            kids = []
            for cid, is_leaf, what in ((trues[i], tleaf[i], "true"), (falses[i], fleaf[i], "false")):
                if is_leaf:
                    if not 0 <= cid < n_leaves:
                        self.fail(f"{op}: node {i} has {what} leaf {cid}, outside 0..{n_leaves - 1}")
                    kids.append(n + cid)
                else:
                    if not 0 <= cid < n:
                        self.fail(f"{op}: node {i} has {what} node {cid}, outside 0..{n - 1}")
                    if cid == i:
                        self.fail(f"{op}: node {i} is its own child")
                    kids.append(cid)
            children.append(tuple(kids))
        for r in roots_attr:
            if not 0 <= r < n:
                self.fail(f"{op}: tree root {r} is outside 0..{n - 1}")
        nodes = [(modes[i], feats[i], float(splits[i]), mvt[i] == 1) for i in range(n)]
        nodes += [(_LEAF, 0, 0.0, False)] * n_leaves
        children += [None] * n_leaves
        leaves = [[] for _ in range(n)] + [[(int(t), float(w))] for t, w in zip(leaf_t, leaf_w)]
        self._check_acyclic(children, roots_attr)
        return {"kind": "regressor", "nodes": nodes, "children": children, "leaves": leaves,
                    "leaf_fallback": [0.0] * len(nodes), "roots": roots_attr, "n_out": n_out,
                    "agg": _AGG_V5[agg_code], "post": post, "base": [], "labels": None, "class_ids": leaf_t,
                    "all_positive": True, "members": members, "out_f32": not self.double}

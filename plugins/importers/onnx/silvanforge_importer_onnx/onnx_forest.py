"""The HIR forest built from an ensemble's spec: trees expanded from their roots, leaves and
outputs, aggregation and post-transform (a part of :class:`.onnx_trees._Importer`)."""

from __future__ import annotations

import numpy as np

from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, Op, Transform, Tree

from .onnx_spec import (
    _AGG,
    _EQ,
    _EXACT_MAX_COUNT,
    _EXACT_MAX_MEMBER,
    _GT,
    _GTE,
    _LEQ,
    _LT,
    _MAX_NODES,
    _MEMBER,
    _NEQ,
    _POST_NAMES,
    _PROBIT,
)


class ForestBuilding:
    """The forest-building methods of :class:`.onnx_trees._Importer`."""

    # ------------------------------------------------------------------ building
    def _build(self, spec, nfeat_graph) -> Forest:
        members = spec["members"]
        # Membership sets: exact ones (x == m) and truncating ones (int32(x) in set).
        exact_sets, trunc_sets = {}, {}
        for i, vals in members.items():
            for v in vals:
                if v != np.floor(v) or not -2.0**31 <= v < 2.0**31:
                    self.unsupported(f"{self.op}: BRANCH_MEMBER value {v!r} is not a 32-bit integer "
                                     "(onnxruntime only implements integer members)")
            if len(vals) <= _EXACT_MAX_COUNT and all(0 <= v <= _EXACT_MAX_MEMBER for v in vals):
                exact_sets[i] = sorted({int(v) for v in vals})
            else:
                if min(vals) < 0:
                    self.unsupported(
                        f"{self.op}: BRANCH_MEMBER with negative member values "
                        f"({min(vals):g}): onnxruntime truncates the feature to int32, and the "
                        "HIR has no negative categories")
                trunc_sets[i] = sorted({int(v) for v in vals})
        if trunc_sets:
            rule = CategoryRule.LIGHTGBM
            cat_sets, eq_chains = trunc_sets, exact_sets
        else:
            rule = CategoryRule.EXACT
            cat_sets, eq_chains = exact_sets, {}

        builders = []
        total = 0
        for r in spec["roots"]:
            b = _TreeBuilder()
            self._expand(spec, r, b, cat_sets, eq_chains)
            total += len(b.left)
            if total > _MAX_NODES:
                self.unsupported(f"{self.op}: copying shared subtrees would make more than "
                                 f"{_MAX_NODES} nodes")
            builders.append(b)

        # onnxruntime refuses a row with no more columns than the largest feature a reachable
        # decision node names (one whose two children are the same included): that is the
        # narrowest input it runs, and with a fixed feature dimension the only one.
        max_feat = self._max_feature(spec)
        if max_feat > 2**31 - 2:  # onnxruntime narrows feature ids to int, wrapping larger ones
            self.fail(f"{self.op}: nodes_featureids holds {max_feat}, not a 32-bit feature index")
        if nfeat_graph is not None:
            if max_feat >= nfeat_graph:
                self.fail(f"{self.op}: a node names feature {max_feat} but the graph input has "
                          f"{nfeat_graph} features")
            num_features = nfeat_graph
        else:
            num_features = max_feat + 1
        num_features = max(num_features, 1)

        kind, n_out = spec["kind"], spec["n_out"]
        acc = "float64" if self.double else "float32"
        thr = "float32" if (not self.double or self.f32_values) else "float64"
        post = spec["post"]
        common = {"num_features": num_features, "wider_rows": nfeat_graph is None,
                  "threshold_dtype": thr, "accumulate_dtype": acc,
                      "category_rule": rule, "source": "onnx",
                      "objective": f"{self.op}:{_POST_NAMES[post]}", "output_shape": "matrix",
                      "class_labels": list(spec["labels"]) if spec["labels"] is not None else None}
        out_f32 = spec["out_f32"] or self.cast_to_float
        n_trees = len(builders)
        if kind == "classifier":
            if n_out == 1:
                self.unsupported(f"{self.op} with a single class label is not supported")
            if n_out == 2:
                return self._binary(spec, builders, common, out_f32)
            return self._multi(spec, builders, common, out_f32, "SUM", n_trees, classifier=True)
        if n_out == 1:
            return self._single(spec, builders, common, out_f32, n_trees)
        return self._multi(spec, builders, common, out_f32, spec["agg"], n_trees, classifier=False)

    @staticmethod
    def _max_feature(spec) -> int:
        """The largest feature of a decision node reachable from a root (0 if none)."""
        nodes, children = spec["nodes"], spec["children"]
        best, seen, stack = 0, set(), list(spec["roots"])
        while stack:
            i = stack.pop()
            if i in seen or children[i] is None:
                continue
            seen.add(i)
            best = max(best, int(nodes[i][1]))
            stack.extend(children[i])
        return best

    def _expand(self, spec, root, b, cat_sets, eq_chains):
        """Copy the tree under ``root`` into ``b`` in canonical HIR form."""
        nodes, children, leaves, fallback = (spec["nodes"], spec["children"], spec["leaves"],
                                             spec["leaf_fallback"])
        f32 = self.f32_values
        stack = [(root, None, 0)]  # (source node, parent HIR node, 0 = left / 1 = right)
        while stack:
            src, parent, side = stack.pop()
            # A node whose two children are the same needs no decision.
            while children[src] is not None and children[src][0] == children[src][1]:
                src = children[src][0]
            mode, feat, value, mvt = nodes[src]
            if children[src] is None:
                me = b.leaf(leaves[src], fallback[src])
            else:
                t, f = children[src]
                if mode == _MEMBER and src in eq_chains:
                    me = self._eq_chain(b, feat, eq_chains[src], mvt, t, f, stack)
                    b.attach(parent, side, me)
                    if len(b.left) > _MAX_NODES:
                        self.unsupported(f"{self.op}: expanding membership sets would make more "
                                         f"than {_MAX_NODES} nodes")
                    continue
                if mode == _MEMBER:
                    me = b.node(feat, 0.0, Op.EQ, mvt, cats=cat_sets[src])
                    left, right = t, f
                else:
                    op, swap = {_LEQ: (Op.LE, False), _LT: (Op.LT, False), _GTE: (Op.LT, True),
                                _GT: (Op.LE, True), _EQ: (Op.EQ, False), _NEQ: (Op.EQ, True)}[mode]
                    nan_true = mvt or mode == _NEQ
                    thr = _f32_threshold(op, value) if f32 else value
                    me = b.node(feat, thr, op, (not nan_true) if swap else nan_true)
                    left, right = (f, t) if swap else (t, f)
                stack.append((right, me, 1))
                stack.append((left, me, 0))
            b.attach(parent, side, me)
            if len(b.left) > _MAX_NODES:
                self.unsupported(f"{self.op}: copying shared subtrees would make more than "
                                 f"{_MAX_NODES} nodes")

    def _eq_chain(self, b, feat, values, mvt, t, f, stack):
        """x in {m1..mk} exactly, as ``x == m1 ? T : (x == m2 ? T : ... F)``."""
        first = prev = None
        for k, m in enumerate(values):
            me = b.node(feat, float(m), Op.EQ, mvt)
            if prev is None:
                first = me
            else:
                b.attach(prev, 1, me)
            stack.append((t, me, 0))
            prev = me
        stack.append((f, prev, 1))
        return first

    # ------------------------------------------------------------------ outputs
    def _single(self, spec, builders, common, out_f32, n_trees) -> Forest:
        """One target: each leaf holds its first weight (or its own nodes_values entry)."""
        trees = []
        for b in builders:
            vals = [(ws[0][1] if ws else fb) if ws is not None else 0.0
                    for ws, fb in zip(b.payload, b.fallback)]
            trees.append(b.tree(np.asarray(vals, dtype=np.float64).reshape(-1, 1), (0,)))
        base = spec["base"]
        if len(base) not in (0, 1):
            self.fail(f"{self.op}: base_values has {len(base)} entries for 1 target")
        origin = float(base[0]) if base else 0.0
        agg, divisor = self._aggregation(spec["agg"], n_trees, origin != 0.0)
        post = spec["post"] if spec["post"] == _PROBIT else 0
        return Forest(trees=trees, num_outputs=1, base_score=np.array([origin]),
                      aggregation=agg, average_divisor=divisor,
                      transform=Transform("onnx", (("k", 1.0), ("post", float(post)),
                                                   ("f32", float(out_f32)))),
                      **common)

    def _aggregation(self, name, n_trees, has_base):
        if name == "AVERAGE":
            return Aggregation.AVERAGE, float(max(n_trees, 1))
        if name == "SUM" and has_base:
            # onnxruntime adds the base value after the trees: AVERAGE with divisor 1.
            return Aggregation.AVERAGE, 1.0
        return _AGG[name], 1.0

    def _reach(self, builders, n_out):
        """Per output: 'always' (some tree has a weight for it in every leaf), 'never', or
        'sometimes' (depends on the row)."""
        state = ["never"] * n_out
        for b in builders:
            leaf_sets = [{t for t, _ in ws} for ws in b.payload if ws is not None]
            union = set().union(*leaf_sets) if leaf_sets else set()
            inter = set.intersection(*leaf_sets) if leaf_sets else set()
            for k in union:
                if k in inter:
                    state[k] = "always"
                elif state[k] == "never":
                    state[k] = "sometimes"
        return state

    def _leaf_table(self, b, outs, agg, indicators):
        """leaf_value rows for the outputs ``outs`` (targets) then indicator columns."""
        n = len(b.left)
        table = np.zeros((n, len(outs) + len(indicators)), dtype=np.float64)
        empty = np.inf if agg == "MIN" else (-np.inf if agg == "MAX" else 0.0)
        col = {k: j for j, k in enumerate(outs)}
        for i, ws in enumerate(b.payload):
            if ws is None:
                continue
            got = {}
            for t, w in ws:
                if t not in got:
                    got[t] = w
                elif agg == "MIN":
                    got[t] = min(got[t], w)
                elif agg == "MAX":
                    got[t] = max(got[t], w)
                else:
                    got[t] = got[t] + w
            for k in outs:
                table[i, col[k]] = got.get(k, empty)
            for j, k in enumerate(indicators):
                table[i, len(outs) + j] = (-1.0 if agg == "MIN" else 1.0) if k in got else 0.0
        return table

    def _trees_for(self, builders, n_out, agg, indicators):
        trees = []
        ind_col = {k: n_out + j for j, k in enumerate(indicators)}
        for b in builders:
            touched = sorted({t for ws in b.payload if ws is not None for t, _ in ws})
            if not touched:
                continue  # contributes to nothing (still counted by AVERAGE's divisor)
            inds = [k for k in indicators if k in touched]
            table = self._leaf_table(b, touched, agg, inds)
            trees.append(b.tree(table, tuple(touched) + tuple(ind_col[k] for k in inds)))
        return trees

    def _multi(self, spec, builders, common, out_f32, agg_name, n_trees, classifier) -> Forest:
        n_out = spec["n_out"]
        base = [float(v) for v in spec["base"]]
        if classifier:
            if len(base) > n_out:
                self.fail(f"{self.op}: base_values has {len(base)} entries for {n_out} classes")
            base = base + [0.0] * (n_out - len(base))
            reach = ["always"] * n_out  # classifiers with 3+ classes write every score
        else:
            if len(base) not in (0, n_out):
                self.fail(f"{self.op}: base_values has {len(base)} entries for {n_out} targets")
            base = base or [0.0] * n_out
            reach = self._reach(builders, n_out)
        indicators = []
        for k in range(n_out):
            if reach[k] == "never":
                base[k] = 0.0  # onnxruntime writes 0 for an output no leaf has a weight for
            elif reach[k] == "sometimes" and (base[k] != 0.0 or agg_name in ("MIN", "MAX")):
                indicators.append(k)
        trees = self._trees_for(builders, n_out, agg_name, indicators)
        agg, divisor = self._aggregation(agg_name, n_trees, any(v != 0.0 for v in base))
        params = [("k", float(n_out)), ("post", float(spec["post"])), ("f32", float(out_f32))]
        params += [(f"mask{k}", float(n_out + j)) for j, k in enumerate(indicators)]
        return Forest(trees=trees, num_outputs=n_out + len(indicators),
                      base_score=np.array(base + [0.0] * len(indicators)),
                      aggregation=agg, average_divisor=divisor,
                      transform=Transform("onnx", tuple(params)), **common)

    def _binary(self, spec, builders, common, out_f32) -> Forest:
        base = [float(v) for v in spec["base"]]
        if len(base) > 2:
            self.fail(f"{self.op}: base_values has {len(base)} entries for 2 classes")
        post = spec["post"]
        reach = self._reach(builders, 2)
        binary_case = len(set(spec["class_ids"])) == 1
        indicators = [k for k in (0, 1) if reach[k] == "sometimes"]
        params = [("nb", float(len(base))), ("post", float(post)), ("f32", float(out_f32))]
        params += [(f"b{k}", v) for k, v in enumerate(base)]
        for k in (0, 1):
            if k in indicators:
                params.append((f"h{k}col", float(2 + indicators.index(k))))
            else:
                params.append((f"h{k}", 1.0 if reach[k] == "always" else 0.0))
        if len(base) < 2 and reach[1] != "always":
            # Some rows keep a single score, which onnxruntime writes as two.
            if binary_case:
                wa = 0 if spec["all_positive"] else 2
            elif not base:
                wa = 3
            else:
                self.unsupported(
                    f"{self.op}: two classes, one base value and rows that reach no class-1 "
                    "weight: onnxruntime writes only the first score then (the second is "
                    "uninitialised memory)")
            if post == _PROBIT:
                self.unsupported(
                    f"{self.op}: PROBIT on a binary classifier whose rows can have a single "
                    "score: onnxruntime writes only the first score then (the second is "
                    "uninitialised memory)")
            params.append(("wa", float(wa)))
        trees = self._trees_for(builders, 2, "SUM", indicators)
        return Forest(trees=trees, num_outputs=2 + len(indicators),
                      base_score=np.zeros(2 + len(indicators)), aggregation=Aggregation.SUM,
                      transform=Transform("onnx_binary", tuple(params)), **common)


class _TreeBuilder:
    """HIR node arrays under construction; leaves keep their (target, weight) entries."""

    def __init__(self):
        self.left, self.right, self.feature, self.threshold = [], [], [], []
        self.op, self.default_left = [], []
        self.payload, self.fallback = [], []
        self.cats = {}

    def node(self, feat, thr, op, default_left, cats=None):
        i = len(self.left)
        self.left.append(-1)
        self.right.append(-1)
        self.feature.append(int(feat))
        self.threshold.append(float(thr))
        self.op.append(int(op))
        self.default_left.append(bool(default_left))
        self.payload.append(None)
        self.fallback.append(0.0)
        if cats is not None:
            self.cats[i] = cats
        return i

    def leaf(self, weights, fallback):
        i = self.node(-1, 0.0, Op.LT, False)
        self.payload[i] = list(weights)
        self.fallback[i] = float(fallback)
        return i

    def attach(self, parent, side, child):
        if parent is None:
            return
        if side == 0:
            self.left[parent] = child
        else:
            self.right[parent] = child

    def tree(self, leaf_value, outputs) -> Tree:
        return Tree(
            left=np.asarray(self.left, dtype=np.int32),
            right=np.asarray(self.right, dtype=np.int32),
            feature=np.asarray(self.feature, dtype=np.int32),
            threshold=np.asarray(self.threshold, dtype=np.float64),
            op=np.asarray(self.op, dtype=np.uint8),
            default_left=np.asarray(self.default_left, dtype=np.bool_),
            zero_missing=np.zeros(len(self.left), dtype=np.bool_),
            leaf_value=np.asarray(leaf_value, dtype=np.float64),
            outputs=tuple(int(o) for o in outputs),
            categories={k: np.asarray(v, dtype=np.int64) for k, v in self.cats.items()},
        )


def _f32_threshold(op: Op, t: float) -> float:
    """A float32 threshold giving, for float32 ``x``, the decision ``x OP t`` made in double."""
    f = np.float32(t)
    with np.errstate(over="ignore"):
        if op == Op.LE:  # largest float32 <= t
            if float(f) > t:
                f = np.nextafter(f, np.float32(-np.inf))
        elif op == Op.LT:  # smallest float32 >= t
            if float(f) < t:
                f = np.nextafter(f, np.float32(np.inf))
        elif float(f) != t:  # EQ: a double no float32 equals
            return float("nan")
    return float(f)

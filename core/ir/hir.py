"""HIR: the forest of binary decision trees every importer produces.

The HIR states the *exact* semantics of a model, independent of the library that trained it.
Importers canonicalise their format into it (for example ONNX ``BRANCH_GT`` becomes ``LE`` with
the children swapped, LightGBM's missing type ``None`` becomes a fixed default direction), so
the reference evaluator and every code generator implement one small set of rules:

For an internal node with feature ``f``, threshold ``t`` and input value ``x = row[f]``
(``x`` first converted to ``Forest.threshold_dtype``):

1. *missing*: ``x`` is NaN, or ``zero_missing[node]`` and ``|x| <= ZERO_THRESHOLD``
   (LightGBM's missing type ``Zero``; the threshold is its ``kZeroThreshold``, ``1e-35f``).  A missing value goes left iff ``default_left[node]``.
2. *categorical* (``node in categories``): the value is converted to a category as
   ``Forest.category_rule`` says (:class:`CategoryRule`); it goes left iff that category is in
   ``categories[node]``.  Values that are no valid category go right.
3. *numerical*: goes left iff ``x OP t`` with ``OP = op[node]`` (``<``, ``<=`` or ``==``).

A tree's leaves carry one value per output it contributes to (``Tree.outputs``); the margin of
output ``k`` aggregates the leaves reached in every tree contributing to ``k`` (:class:`Forest`).
A tree may instead carry a linear model at each leaf (:class:`LinearLeaves`, LightGBM's linear
trees): the leaf then contributes its model's value for the row.

Over 600 lines: the IR's types, their rules and :func:`verify` (checked over all trees' nodes
at once, then tree by tree to name a breach) belong together.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from operator import attrgetter
from typing import Iterable

import numpy as np

from silvanforge.errors import IRVerificationError
from silvanforge.plan.memo import memoised

# LightGBM's kZeroThreshold, the float literal 1e-35f widened to double: values with
# |x| <= ZERO_THRESHOLD count as zero.
ZERO_THRESHOLD = float(np.float32(1e-35))


class Op(enum.IntEnum):
    """Comparison of a numerical split: the row goes left iff ``x OP threshold``."""

    LT = 0
    LE = 1
    EQ = 2

    @property
    def symbol(self) -> str:
        return {Op.LT: "<", Op.LE: "<=", Op.EQ: "=="}[self]


class CategoryRule(enum.Enum):
    """How a feature value becomes a category index at a categorical split.

    XGBOOST: values ``< 0`` or ``>= 2**24`` are no category; others truncate to an integer.
    LIGHTGBM: the value truncates towards zero (so ``-0.5`` is category 0); a negative result or
      one beyond the int32 range is no category.
    EXACT: only an exactly integral value ``>= 0`` is a category (ONNX set membership).
    """

    XGBOOST = "xgboost"
    LIGHTGBM = "lightgbm"
    EXACT = "exact"

    @property
    def bounds(self) -> tuple[float, bool, float]:
        """(low, whether low itself is inside, high): values outside ``[low, high)`` (or
        ``(low, high)``) are no category; EXACT also wants an integral value.  One definition
        for the code generators (the reference evaluator spells the rule out on its own)."""
        return {CategoryRule.XGBOOST: (0.0, True, 2.0**24), CategoryRule.LIGHTGBM: (-1.0, False, 2.0**31),
                CategoryRule.EXACT: (0.0, True, 2.0**31)}[self]


class Aggregation(enum.Enum):
    """How the leaves reached in all trees of one output are combined into its margin.

    SUM starts from the base score and adds trees in order (XGBoost's float32 order).
    AVERAGE sums the trees, divides by ``Forest.average_divisor`` and then adds the base score.
    MIN / MAX take the extreme leaf value over the trees contributing to an output (0 when no
    tree contributes) and then add the base score.
    """

    SUM = "sum"
    AVERAGE = "average"
    MIN = "min"
    MAX = "max"


@dataclasses.dataclass(frozen=True)
class Transform:
    """The output transform applied to margins.  ``name`` is a key of :mod:`silvanforge.runtime.transforms`."""

    name: str = "identity"
    params: tuple[tuple[str, float], ...] = ()

    def param(self, key: str, default: float) -> float:
        # A scan, not a dict: a transform has a handful of parameters and a one-row predict
        # asks for them every call.
        for name, value in self.params:
            if name == key:
                return value
        return default


@dataclasses.dataclass
class LinearLeaves:
    """A linear model at every leaf of a one-output tree (LightGBM's ``linear_tree``), in CSR
    form over the tree's nodes: node ``n``'s terms are ``begin[n] .. begin[n + 1] - 1``, each a
    feature index and its coefficient (internal nodes have none).

    The value leaf ``n`` contributes for a row, in the accumulation dtype, is LightGBM's
    (``Tree::Predict``): if any of its features is NaN in the row, the leaf's plain
    ``Tree.leaf_value``; otherwise ``const[n]``, then each term added in order,
    ``acc = acc + coeff[i] * z(x[feature[i]])``, with ``x`` the input converted to
    ``Forest.threshold_dtype`` and ``z(x) = 0.0`` where ``|x| <= ZERO_THRESHOLD`` (LightGBM's
    dense-row reader drops such values before the trees see them), ``x`` otherwise, infinities
    included.  A multiply and an add, each rounded: never fused.
    """

    const: np.ndarray  # float64 (n_nodes,)
    begin: np.ndarray  # int64 (n_nodes + 1,), begin[0] == 0
    feature: np.ndarray  # int32 (begin[-1],)
    coeff: np.ndarray  # float64 (begin[-1],)

    @classmethod
    def from_lists(cls, const, features, coeffs) -> "LinearLeaves":
        """From per-node lists: ``const[n]``, ``features[n]`` and ``coeffs[n]`` (empty inside)."""
        sizes = [len(f) for f in features]
        return cls(
            const=np.asarray(const, dtype=np.float64),
            begin=np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64),
            feature=np.asarray([f for fs in features for f in fs], dtype=np.int32),
            coeff=np.asarray([c for cs in coeffs for c in cs], dtype=np.float64),
        )

    def terms(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        """(features, coefficients) of node ``node``'s model."""
        a, z = int(self.begin[node]), int(self.begin[node + 1])
        return self.feature[a:z], self.coeff[a:z]

    def take(self, source: np.ndarray) -> "LinearLeaves":
        """The models of a tree whose node ``k`` is this tree's node ``source[k]`` (``-1``: a
        node without one), for passes that copy, drop or reorder nodes."""
        source = np.asarray(source, dtype=np.int64)
        has = source >= 0
        safe = np.where(has, source, 0)
        sizes = np.where(has, self.begin[safe + 1] - self.begin[safe], 0)
        starts = self.begin[safe]
        pick = np.concatenate([np.arange(a, a + k) for a, k in zip(starts.tolist(), sizes.tolist())]
                              + [np.zeros(0, np.int64)]).astype(np.int64)
        return LinearLeaves(
            const=np.where(has, self.const[safe], 0.0),
            begin=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            feature=self.feature[pick].astype(np.int32), coeff=self.coeff[pick].astype(np.float64))


@dataclasses.dataclass
class Tree:
    """One binary tree stored as parallel node arrays; node 0 is the root.

    Leaves have ``left == right == -1`` and ``feature == -1``.  ``leaf_value`` has one row per
    node and one column per entry of ``outputs`` (rows of internal nodes are ignored).
    """

    left: np.ndarray  # int32
    right: np.ndarray  # int32
    feature: np.ndarray  # int32
    threshold: np.ndarray  # float64
    op: np.ndarray  # uint8 of Op
    default_left: np.ndarray  # bool
    zero_missing: np.ndarray  # bool
    leaf_value: np.ndarray  # float64 (n_nodes, len(outputs))
    outputs: tuple[int, ...] = (0,)
    categories: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    # A tiling chosen for this tree by a HIR pass (the Treebeard paper draft, section 'Tiled Trees':
    # a tiling transformation gives every node a tile id): the tile of each internal node, -1 on
    # leaves; None tiles uniformly (:mod:`silvanforge.frontend.tiling`).  Only how walks step, never
    # predictions: not fingerprinted.
    tile_id: np.ndarray | None = None
    # Linear models at the leaves (LightGBM linear trees), or None: leaves are their values.
    linear: LinearLeaves | None = None
    # How much of the training data reached each node, as the model file records it (XGBoost's
    # hessian sums, LightGBM's and scikit-learn's row counts), or None: the untuned plan lays out
    # one-row walks hot child first by it (silvanforge.frontend.tiling.hot_first_order).  Only where
    # nodes sit, never predictions: not fingerprinted.
    cover: np.ndarray | None = None
    # The number the model's library gives each node (XGBoost's node ids, LightGBM's leaf
    # indices, CatBoost's leaf indices), where the import renumbered them, or None: the node's
    # index.  ``predict(X, pred_leaf=True)`` answers a leaf by it (silvanforge.frontend.outputs);
    # never predictions: not fingerprinted.
    node_ids: np.ndarray | None = None

    @property
    def num_nodes(self) -> int:
        return len(self.left)

    def is_leaf(self, node: int) -> bool:
        return self.left[node] < 0

    def node_depths(self) -> np.ndarray:
        """Depth of every node (root 0), level by level with NumPy (trees may be large); read
        only, computed once a tree within a compile (:mod:`silvanforge.plan.memo`)."""
        return memoised(self, "node_depths", self._node_depths)

    def _node_depths(self) -> np.ndarray:
        depth = np.zeros(self.num_nodes, dtype=np.int64)
        frontier = np.array([0])
        level = 0
        while frontier.size:
            depth[frontier] = level
            inner = frontier[self.left[frontier] >= 0]
            frontier = np.concatenate([self.left[inner], self.right[inner]])
            level += 1
        depth.flags.writeable = False
        return depth

    def depth(self) -> int:
        """Number of edges on the longest root-to-leaf path."""
        return int(self.node_depths().max())

    def categorical_mask(self) -> np.ndarray:
        """Which nodes are categorical splits."""
        mask = np.zeros(self.num_nodes, dtype=bool)
        if self.categories:  # (asked of every tree by some passes: most have none)
            mask[list(self.categories)] = True
        return mask

    @property
    def num_leaves(self) -> int:
        return int(np.count_nonzero(self.left < 0))

    @classmethod
    def from_nodes(
        cls,
        left,
        right,
        feature,
        threshold,
        leaf_value,
        *,
        op=Op.LT,
        default_left=False,
        zero_missing=False,
        outputs: tuple[int, ...] = (0,),
        categories: dict[int, Iterable[int]] | None = None,
        linear: LinearLeaves | None = None,
        cover=None,
        node_ids=None,
    ) -> "Tree":
        """Build a tree from lists, broadcasting scalar ``op`` / ``default_left`` / ``zero_missing``."""
        n = len(left)
        as_arr = lambda v, dt: np.broadcast_to(np.asarray(v, dtype=dt), (n,)).copy()  # noqa: E731
        leaf = np.asarray(leaf_value, dtype=np.float64)
        if leaf.ndim == 1:
            leaf = leaf.reshape(n, 1)
        return cls(
            left=as_arr(left, np.int32),
            right=as_arr(right, np.int32),
            feature=as_arr(feature, np.int32),
            threshold=as_arr(threshold, np.float64),
            op=as_arr(op, np.uint8),
            default_left=as_arr(default_left, np.bool_),
            zero_missing=as_arr(zero_missing, np.bool_),
            leaf_value=leaf,
            outputs=tuple(int(o) for o in outputs),
            categories={
                int(k): np.unique(np.asarray(list(v), dtype=np.int64))
                for k, v in (categories or {}).items()
            },
            linear=linear,
            cover=None if cover is None else np.asarray(cover, dtype=np.float64).ravel(),  # hir.verify checks it
            node_ids=None if node_ids is None else np.asarray(node_ids, dtype=np.int64).ravel(),
        )


@dataclasses.dataclass
class Forest:
    """A whole model: trees, how their leaves combine into margins, and the output transform."""

    trees: list[Tree]
    num_features: int
    num_outputs: int = 1
    base_score: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(1))
    aggregation: Aggregation = Aggregation.SUM
    average_divisor: float = 1.0
    transform: Transform = Transform()
    # Precision the source library compares in: inputs are converted to it first.
    threshold_dtype: str = "float32"
    # Precision the source library accumulates leaf values in.
    accumulate_dtype: str = "float32"
    category_rule: CategoryRule = CategoryRule.XGBOOST
    feature_names: list[str] | None = None
    # Where the model came from, for printing and for choosing defaults.
    source: str = "unknown"
    objective: str = ""
    # Shape of ``predict``: "vector" gives (n,) for one output, "matrix" always (n, num_outputs).
    output_shape: str = "auto"
    # Class labels for classifiers that carry them (ONNX, scikit-learn estimators); None otherwise.
    class_labels: list | None = None
    # Category labels of features trained from categorical columns (pandas ``category``, as
    # LightGBM's ``pandas_categorical`` or XGBoost's stored categories record them): feature
    # index -> labels in code order (label ``i`` is category ``i``).  ``predict`` maps a frame's
    # categorical column through them (silvanforge.inputs.rows); an unseen label is a missing value.
    # Labels are str, int, float or bool (JSON-representable, saved in artifacts).
    feature_categories: dict[int, list] | None = None
    # What a label outside ``feature_categories`` is: a missing value (LightGBM, scikit-learn)
    # or an error (XGBoost refuses categories it was not trained with).
    unseen_category_error: bool = False
    # Categorical features known by hash (CatBoost): feature index -> the 32-bit hashes of the
    # categories the model tests on the column itself, in code order (hash ``i`` is category
    # ``i``; CatBoost's importer lists none: its splits read computed columns).  ``predict``
    # hashes each value of these columns as CatBoost does (silvanforge.inputs.category_hash: strings,
    # integers, pandas categories) and reads the code, NaN for a hash not listed.
    hashed_categories: dict[int, list[int]] | None = None
    # Columns computed from the input (CatBoost's CTRs and one-hot tests): column
    # ``input_features + j`` holds the answer for the row's key of ``hashed_combinations[j]``, a
    # dict with ``elements`` (what the key hashes, in order: ``["cat", column]`` the column's
    # category hash, ``["float", column, border, nan_true]`` whether ``x > border`` in float32
    # (NaN: ``nan_true``), ``["onehot", column, hash]`` whether the category hash is ``hash``)
    # and ``keys`` (the known 64-bit keys, sorted or in code order), and either ``values`` (a
    # number a key: the answer, ``unknown`` for any other key or a row missing a category) or
    # none (the answer is the key's code, NaN for any other).  Rows given to ``predict`` have
    # ``input_features`` columns (silvanforge.inputs.hashed_rows).
    hashed_combinations: list[dict] | None = None
    # A value the model's estimator reads as missing besides NaN (XGBoost's ``missing=``): what
    # ``predict`` takes as missing unless told otherwise; None: NaN only.
    missing: float | None = None
    # Rows may have more columns than ``num_features``; the extra ones are never read (ONNX
    # models whose input width is dynamic: onnxruntime takes any row at least that wide).
    wider_rows: bool = False

    def predict(self, *args, **kwargs):
        """A Forest is the imported model, not a compiled one: say so instead of an AttributeError."""
        raise TypeError("a Forest is an imported model and does not predict: compile it first, "
                        "sf.compile(forest).predict(X) (or silvanforge.runtime.reference.predict(forest, X), "
                        "the plain evaluator)")

    @property
    def num_trees(self) -> int:
        return len(self.trees)

    @property
    def input_features(self) -> int:
        """Columns of the rows users pass: ``num_features`` less the computed ones."""
        return self.num_features - len(self.hashed_combinations or ())

    # A compile asks these of its forest again and again (a scan of every tree each time: a
    # second or more of a 100,000-tree model's compile); within its scope they are kept
    # (:mod:`silvanforge.plan.memo`: nothing in a compile changes a forest in place).

    def max_depth(self) -> int:
        """Number of edges on the longest root-to-leaf path of any tree."""
        return memoised(self, "max_depth", lambda: len(level_order(self)[3]) - 1 if self.trees else 0)

    def has_categorical(self) -> bool:
        return memoised(self, "has_categorical", lambda: any(t.categories for t in self.trees))

    def trees_own_outputs(self) -> bool:
        """Whether no two trees add to the same output (the forests of leaf ids and of per-tree
        values, :mod:`silvanforge.frontend.outputs`): walks of different trees then never write
        the same margin, so splitting trees over threads needs no fold."""
        def own():
            outputs = [o for t in self.trees for o in t.outputs]
            return len(outputs) == len(set(outputs))
        return memoised(self, "trees_own_outputs", own)

    def has_linear(self) -> bool:
        """Whether a tree has linear models at its leaves (:class:`LinearLeaves`)."""
        return memoised(self, "has_linear", lambda: any(t.linear is not None for t in self.trees))

    def fingerprint(self) -> str:
        """A stable hash of everything that affects predictions (for artifact staleness checks)."""
        h = hashlib.sha256()
        meta = (
            self.num_features, self.num_outputs, self.aggregation.value, self.average_divisor,
            self.transform, self.threshold_dtype, self.accumulate_dtype, self.category_rule.value,
            self.output_shape,
        )
        h.update(repr(meta).encode())
        h.update(np.asarray(self.base_score, dtype=np.float64).tobytes())
        if self.hashed_categories:
            h.update(repr(sorted((int(f), list(map(int, v))) for f, v in self.hashed_categories.items())).encode())
        if self.hashed_combinations:
            h.update(repr(self.hashed_combinations).encode())
        if self.missing is not None:  # (predict's default missing value: only then, so others' stay)
            h.update(f"missing={self.missing!r}".encode())
        for t in self.trees:
            for arr in (t.left, t.right, t.feature, t.threshold, t.op, t.default_left,
                        t.zero_missing, t.leaf_value):
                h.update(np.ascontiguousarray(arr).tobytes())
            h.update(repr(t.outputs).encode())
            for k in sorted(t.categories):
                h.update(repr(k).encode())
                h.update(t.categories[k].tobytes())
            if t.linear is not None:
                h.update(b"linear")
                for arr in (t.linear.const, t.linear.begin, t.linear.feature, t.linear.coeff):
                    h.update(np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()


def level_order(forest: Forest) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Every tree's nodes in one numbering (tree ``k``'s node ``n`` is ``offset[k] + n``): the
    offsets, children in that numbering (-1 at leaves), and the nodes of each level, all trees
    at once, so passes over 1000-tree forests take a numpy step a level, not a loop a tree.
    Computed once a compile (several passes ask): the arrays are read-only."""
    return memoised(forest, "level_order", lambda: _level_order(forest))


def _level_order(forest: Forest) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    trees = forest.trees
    sizes = np.fromiter(map(len, map(attrgetter("left"), trees)), dtype=np.int64, count=len(trees))
    offset = np.concatenate([[0], np.cumsum(sizes)])
    root = np.repeat(offset[:-1], sizes)  # each node's tree's root
    # All trees' children in one numpy step each (a step a tree: 2 s of a 100,000-tree model).
    left = np.concatenate([t.left for t in trees] or [np.zeros(0, np.int64)]).astype(np.int64)
    right = np.concatenate([t.right for t in trees] or [np.zeros(0, np.int64)]).astype(np.int64)
    left = np.where(left >= 0, left + root, -1)
    right = np.where(right >= 0, right + root, -1)
    levels, frontier = [], offset[:-1]
    while frontier.size:
        levels.append(frontier)
        inner = frontier[left[frontier] >= 0]
        frontier = np.concatenate([left[inner], right[inner]])
    for a in (offset, left, right, *levels):
        a.flags.writeable = False
    return offset, left, right, levels


def verify(forest: Forest) -> None:
    """Check the structural invariants of a forest; raise IRVerificationError on the first breach."""

    def fail(msg: str):
        raise IRVerificationError(f"HIR verification failed: {msg}")

    if forest.num_features <= 0:
        fail(f"num_features must be positive, got {forest.num_features}")
    if forest.num_outputs <= 0:
        fail(f"num_outputs must be positive, got {forest.num_outputs}")
    if np.shape(forest.base_score) != (forest.num_outputs,):
        fail(f"base_score has shape {np.shape(forest.base_score)}, expected ({forest.num_outputs},)")
    if forest.threshold_dtype not in ("float32", "float64"):
        fail(f"threshold_dtype {forest.threshold_dtype!r}")
    if forest.accumulate_dtype not in ("float32", "float64"):
        fail(f"accumulate_dtype {forest.accumulate_dtype!r}")
    for f, hashes in (forest.hashed_categories or {}).items():
        if not 0 <= f < forest.num_features:
            fail(f"hashed categories for feature {f}, outside 0..{forest.num_features - 1}")
        if hashes and (min(hashes) < 0 or max(hashes) >= 2**32) or len(set(hashes)) != len(hashes):
            fail(f"hashed categories of feature {f} must be distinct 32-bit hashes")
    width = forest.input_features
    if width <= 0:
        fail(f"{len(forest.hashed_combinations)} computed columns leave no input column")
    for j, combo in enumerate(forest.hashed_combinations or ()):
        elements = combo.get("elements") if isinstance(combo, dict) else None
        if not elements or any(not isinstance(e, (list, tuple)) or len(e) < 2 or e[0] not in ("cat", "float", "onehot")
                               or not 0 <= int(e[1]) < width for e in elements):
            fail(f"hashed combination {j}: elements must be cat / float / onehot on input columns")
        keys = combo.get("keys")
        if not isinstance(keys, list) or keys and (min(keys) < 0 or max(keys) >= 2**64) or len(set(keys)) != len(keys):
            fail(f"hashed combination {j}: keys must be distinct 64-bit keys")
    if forest.aggregation is Aggregation.AVERAGE and not forest.average_divisor > 0:
        fail("average aggregation needs a positive average_divisor")
    if _trees_sound(forest):
        return
    # Something is wrong: found again tree by tree, for the message that names it.
    for i, t in enumerate(forest.trees):
        n = t.num_nodes
        if n == 0:
            fail(f"tree {i} has no nodes")
        for name in ("right", "feature", "threshold", "op", "default_left", "zero_missing"):
            if len(getattr(t, name)) != n:
                fail(f"tree {i}: {name} has {len(getattr(t, name))} entries for {n} nodes")
        if t.leaf_value.shape != (n, len(t.outputs)):
            fail(f"tree {i}: leaf_value shape {t.leaf_value.shape}, expected {(n, len(t.outputs))}")
        if not t.outputs or any(not 0 <= o < forest.num_outputs for o in t.outputs):
            fail(f"tree {i}: outputs {t.outputs} outside 0..{forest.num_outputs - 1}")
        internal = t.left >= 0
        if np.any((t.right >= 0) != internal):
            fail(f"tree {i}: a node has exactly one child")
        if np.any(t.left[internal] >= n) or np.any(t.right[internal] >= n):
            fail(f"tree {i}: child index out of range")
        feats = t.feature[internal]
        if np.any(feats < 0) or np.any(feats >= forest.num_features):
            fail(f"tree {i}: feature index outside 0..{forest.num_features - 1}")
        if np.any(t.op[internal] > max(Op)):
            fail(f"tree {i}: unknown comparison op")
        # Every node reachable exactly once from the root: a tree, not a DAG or a cycle.  In
        # numpy, whatever the depth: every node but the root has one parent, and climbing
        # parents (pointer jumping) leads every node to the root.
        parents = np.flatnonzero(internal)
        children = np.concatenate([t.left[internal], t.right[internal]])
        indegree = np.bincount(children, minlength=n)
        twice = np.flatnonzero(indegree > 1)
        if indegree[0] or twice.size:
            fail(f"tree {i}: node {0 if indegree[0] else int(twice[0])} is reached twice (not a tree)")
        up = np.arange(n)
        up[children] = np.concatenate([parents, parents])
        for _ in range(max(1, int(n).bit_length())):
            up = up[up]
        if (up != 0).any():
            fail(f"tree {i}: nodes {np.flatnonzero(up != 0)[:5].tolist()} are unreachable")
        if t.tile_id is not None and np.shape(t.tile_id) != (n,):
            fail(f"tree {i}: tile_id has shape {np.shape(t.tile_id)} for {n} nodes")
        if t.cover is not None and np.shape(t.cover) != (n,):
            fail(f"tree {i}: cover has shape {np.shape(t.cover)} for {n} nodes")
        if t.node_ids is not None and np.shape(t.node_ids) != (n,):
            fail(f"tree {i}: node_ids has shape {np.shape(t.node_ids)} for {n} nodes")
        _verify_tree(forest, i, t)


def _trees_sound(forest: Forest) -> bool:
    """Whether every tree passes :func:`verify`'s checks, decided over all trees' nodes at once
    (a tree at a time cost about 20 us of numpy calls a tree: 2 s of a 100,000-tree model's
    load); False sends :func:`verify` tree by tree to name the first breach.  Trees with linear
    leaves or categorical splits are checked tree by tree here too (few in any model)."""
    trees = forest.trees
    if not trees:
        return True
    # The sizes compared a field at a time, with map and attrgetter (no Python a tree).
    sizes = list(map(len, map(attrgetter("left"), trees)))
    ns = np.array(sizes, dtype=np.int64)
    if (ns == 0).any():
        return False
    for name in ("right", "feature", "threshold", "op", "default_left", "zero_missing"):
        if list(map(len, map(attrgetter(name), trees))) != sizes:
            return False
    widths = list(map(len, map(attrgetter("outputs"), trees)))
    if 0 in widths or list(map(attrgetter("leaf_value.shape"), trees)) != list(zip(sizes, widths)):
        return False
    for name in ("tile_id", "cover", "node_ids"):
        given = list(map(attrgetter(name), trees))
        kinds = set(map(type, given))
        if kinds == {type(None)}:
            continue
        if kinds == {np.ndarray}:
            if list(map(attrgetter("shape"), given)) != [(n,) for n in sizes]:
                return False
        elif any(g is not None and np.shape(g) != (n,) for g, n in zip(given, sizes)):
            return False
    outputs = {o for t in trees for o in t.outputs}
    if any(not 0 <= o < forest.num_outputs for o in outputs):
        return False
    # Children of another dtype (unsigned, float) are left to the tree-by-tree checks: a cast
    # to int64 could turn 2**64 - 1 into a leaf's -1.
    if any(t.left.dtype.kind != "i" or t.right.dtype.kind != "i" for t in trees):
        return False
    offset = np.concatenate([[0], np.cumsum(ns)[:-1]])
    size = np.repeat(ns, ns)  # each node's tree's size
    root = np.repeat(offset, ns)  # each node's tree's root
    left = np.concatenate([t.left for t in trees]).astype(np.int64)
    right = np.concatenate([t.right for t in trees]).astype(np.int64)
    internal = left >= 0
    if ((right >= 0) != internal).any() or (left[internal] >= size[internal]).any() \
            or (right[internal] >= size[internal]).any():
        return False
    feats = np.concatenate([t.feature for t in trees])[internal]
    if (feats < 0).any() or (feats >= forest.num_features).any():
        return False
    if (np.concatenate([t.op for t in trees])[internal] > max(Op)).any():
        return False
    # A tree, not a DAG or a cycle: as verify checks it, over the whole forest.
    N = int(ns.sum())
    parents = np.flatnonzero(internal)
    children = np.concatenate([left[internal] + root[internal], right[internal] + root[internal]])
    indegree = np.bincount(children, minlength=N)
    if indegree[offset].any() or (indegree > 1).any():
        return False
    up = np.arange(N)
    up[children] = np.concatenate([parents, parents])
    for _ in range(max(1, int(ns.max()).bit_length())):
        up = up[up]
    if (up != root).any():
        return False
    for i, t in enumerate(trees):
        if t.categories or t.linear is not None:
            try:
                _verify_tree(forest, i, t)
            except IRVerificationError:
                return False
    return True


def _verify_tree(forest: Forest, i: int, t: Tree) -> None:
    """:func:`verify`'s categorical and linear-leaf checks of tree ``i``."""
    def fail(msg: str):
        raise IRVerificationError(f"HIR verification failed: {msg}")

    n = t.num_nodes
    for node, cats in t.categories.items():
        if not (0 <= node < n) or t.left[node] < 0:
            fail(f"tree {i}: categorical split on node {node}, which is not internal")
        if len(cats) and cats.min() < 0:
            fail(f"tree {i}: negative category at node {node}")
    if t.linear is not None:
        _verify_linear(i, t, forest.num_features, fail)


def _verify_linear(i: int, t: Tree, num_features: int, fail) -> None:
    lin, n = t.linear, t.num_nodes
    if len(t.outputs) != 1:
        fail(f"tree {i}: linear leaves on a tree of {len(t.outputs)} outputs (one only)")
    if np.shape(lin.const) != (n,) or np.shape(lin.begin) != (n + 1,):
        fail(f"tree {i}: linear leaves have {np.shape(lin.const)} constants and {np.shape(lin.begin)} "
             f"offsets for {n} nodes")
    sizes = np.diff(lin.begin)
    if lin.begin[0] != 0 or (sizes < 0).any() or np.shape(lin.feature) != (lin.begin[-1],) \
            or np.shape(lin.coeff) != (lin.begin[-1],):
        fail(f"tree {i}: linear leaf offsets do not partition their {len(lin.feature)} features "
             f"and {len(lin.coeff)} coefficients")
    if (sizes[t.left >= 0] != 0).any():
        fail(f"tree {i}: an internal node has linear terms")
    if len(lin.feature) and (lin.feature.min() < 0 or lin.feature.max() >= num_features):
        fail(f"tree {i}: a linear leaf reads a feature outside 0..{num_features - 1}")
    if not (np.isfinite(lin.const).all() and np.isfinite(lin.coeff).all()):
        fail(f"tree {i}: a linear leaf has a non-finite constant or coefficient")


def format_forest(forest: Forest, max_trees: int | None = 3) -> str:
    """A readable text form of the HIR (``forge show --level hir``)."""
    lines = [
        f"forest source={forest.source} objective={forest.objective!r} trees={forest.num_trees} "
        f"features={forest.num_features} outputs={forest.num_outputs} max_depth={forest.max_depth()}",
        f"  aggregation={forest.aggregation.value} base_score={np.asarray(forest.base_score).tolist()} "
        f"transform={forest.transform.name}{dict(forest.transform.params) or ''}",
        f"  compare_in={forest.threshold_dtype} accumulate_in={forest.accumulate_dtype} "
        f"categories={forest.category_rule.value}",
    ]
    shown = forest.trees if max_trees is None else forest.trees[:max_trees]
    for i, t in enumerate(shown):
        lines.append(f"  tree {i} outputs={list(t.outputs)} nodes={t.num_nodes} depth={t.depth()}")
        lines += _format_tree(t, indent="    ")
    if max_trees is not None and forest.num_trees > max_trees:
        lines.append(f"  ... {forest.num_trees - max_trees} more trees")
    return "\n".join(lines)


def _format_tree(t: Tree, indent: str) -> list[str]:
    out = []
    stack = [(0, 0)]
    while stack:
        node, level = stack.pop()
        pad = indent + "  " * level
        if t.is_leaf(node):
            vals = ", ".join(f"{v:.6g}" for v in t.leaf_value[node])
            model = ""
            if t.linear is not None:
                feats, coeffs = t.linear.terms(node)
                terms = "".join(f" + {c:.6g}*x[{f}]" for f, c in zip(feats.tolist(), coeffs.tolist()))
                model = f" linear {t.linear.const[node]:.6g}{terms} (NaN among them -> the value)"
            out.append(f"{pad}%{node} leaf [{vals}]{model}")
            continue
        miss = "left" if t.default_left[node] else "right"
        if t.zero_missing[node]:
            miss += ",zero-is-missing"
        if node in t.categories:
            cond = f"x[{t.feature[node]}] in {{{', '.join(map(str, t.categories[node][:16]))}" + (
                ", ...}" if len(t.categories[node]) > 16 else "}")
        else:
            cond = f"x[{t.feature[node]}] {Op(t.op[node]).symbol} {t.threshold[node]:.9g}"
        out.append(f"{pad}%{node} if {cond} (missing->{miss}) then %{t.left[node]} else %{t.right[node]}")
        stack.append((int(t.right[node]), level + 1))
        stack.append((int(t.left[node]), level + 1))
    return out

"""SHAP contributions by a target's compiled kernel: the model's leaf paths, pattern tables and
split rules as flat arrays (made once a model, :func:`arrays`), and the calls that split a
request's rows or trees over threads (:func:`contributions`).

The kernel is the target's (:meth:`silvanforge.target.Target.contributions_kernel`; the CPU
target's is one LLVM function for every model, in that plugin's ``treeshap`` module): it reads
the arrays below by name through one int64 block of their addresses, in the order its
``arg_layout`` names them, so the model stays data and nothing is compiled per model.  The
mathematics is :mod:`silvanforge.runtime.contributions`' (whose NumPy evaluation answers where no
installed target has a kernel); these arrays lay the same paths out in the order a depth-first
walk meets their leaves, each path saying how many of its first nodes it shares with the one
before, so a row decides each node of a tree once.

The arrays (P paths, per tree ``tree_paths``):

- ``tree_paths`` (trees + 1): each tree's first path; ``prefix`` (P): nodes shared with the path
  before; ``path_nodes`` (P + 1): each path's first entry of ``step``, one int32 for each of its
  nodes past the prefix (all a tree's paths need: the rest is the path before's): the node's
  split counted in its tree (bits 8 and up), whether the path goes left there (bit 7) and which
  of the path's distinct features it tests (bits 0-6).
- ``depth`` (P): distinct features ``d``; ``path_features`` (P): the first of its ``d`` entries of
  ``feature``, ``zero`` (the cover fraction following the path there) and ``ratio`` (``(1 - z) /
  z``); ``table_at`` (P): where its pattern table (``2**d`` values of ``U``) starts in ``table``,
  -2 where none is kept (past the budget) and the kernel makes one for a call of enough rows,
  -1 where it has none (a zero fraction, or ``d`` above ``TABLE_MAX_D``).
- ``path_values`` (P + 1): each path's first entry of ``column`` (``output * (features + 1)``)
  and ``value`` (the leaf's value for that output, scaled for averages).
- Per split (a tree's internal nodes in preorder, ``tree_splits`` (trees + 1) each tree's
  first; ``step`` and ``level_node`` count splits, ``step`` from its tree's first):
  ``split_record``, two int64 words a split, so that deciding it reads one record: the
  threshold's float64 bits (the threshold in the model's comparison dtype, widened exactly), or for a categorical split
  where its set starts in ``category_bits`` (uint32 words, a bit a category) and the number of
  categories above it (high 32 bits); then the feature (low 32 bits), the op
  (:class:`~silvanforge.ir.hir.Op`, bits 32-39), default left (bit 40), zero as missing (bit
  48) and categorical (bit 56).  ``max_splits``: the most splits of a tree (a call's scratch
  holds that many decisions a row).
- ``quad_at`` (by d), ``quad_t``, ``quad_w``: Gauss-Legendre points and weights on [0, 1],
  ``(d + 1) // 2`` of them for paths of ``d`` features (exact for the degree ``d - 1`` integrand);
  ``coalition_at`` (by d), ``coalition_w``: the Shapley weights of coalitions of 0 to ``d``.
- Symmetric trees tabled by leaf: ``tree_levels`` (0: walked by paths), ``level_at`` and
  ``level_node`` (a split of each level), ``leaf_table_at``, ``leaf_table`` (a row a leaf),
  ``column_at``, ``table_columns`` and ``leaf_column`` (the phi column of each entry).
- Counts: ``row_stride``, ``phi_stride``, ``category_rule`` (0 XGBoost, 1 LightGBM, 2 exact),
  ``use_tables`` (0: every path by its integral), ``zero_bound`` (ZERO_THRESHOLD's float64 bits).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from silvanforge.ir.hir import ZERO_THRESHOLD, Aggregation, CategoryRule, Forest
from silvanforge.runtime import contributions as paths_math
from silvanforge.runtime.shap_view import explained, preordered, symmetric_levels
from silvanforge.runtime.threads import _get_pool, check_threads, default_threads

_RULES = {CategoryRule.XGBOOST: 0, CategoryRule.LIGHTGBM: 1, CategoryRule.EXACT: 2}
# Requests of fewer rows than this split the trees instead of the rows, whatever the thread
# count (each share its own output, added in share order: the answer is the same for every
# thread count).
TREE_SPLIT_ROWS = 8
# Tree shares of a small request, whatever the thread count (threads take them in turn).
TREE_SHARES = 4
# Rows a call takes at most: its rows' outputs stay in cache while each tree's paths go by.
ROWS_PER_CALL = 64


@dataclasses.dataclass
class Arrays:
    """A model's flat arrays (see the module docstring) and what the calls need besides."""

    named: dict  # name -> array (kept alive here) or int
    bias: np.ndarray  # (outputs,)
    num_trees: int
    num_outputs: int
    num_features: int
    max_path: int  # nodes of the longest path
    max_depth: int  # distinct features of the path with most
    _blocks: dict = dataclasses.field(default_factory=dict)  # (layout, use_tables) -> int64 args

    def block(self, layout: tuple[str, ...], use_tables: bool) -> np.ndarray:
        """The int64 args of a kernel with ``layout``: addresses of the arrays, the counts."""
        key = (layout, use_tables)
        got = self._blocks.get(key)
        if got is None:
            values = dict(self.named, use_tables=int(use_tables))
            got = np.array([v.ctypes.data if isinstance(v, np.ndarray) else int(v) for v in
                            (values[name] for name in layout)], np.int64)
            self._blocks[key] = got
        return got


def saved(a: Arrays, layout: tuple[str, ...]) -> tuple[dict, dict]:
    """``a`` as an artifact keeps it: its arrays (and the bias), and a JSON-able record of the
    kernel argument ``layout`` they were made for, the counts and the sizes."""
    arrays = {name: v for name, v in a.named.items() if isinstance(v, np.ndarray)}
    arrays["bias"] = np.asarray(a.bias, np.float64)
    return arrays, {"layout": list(layout), "counts": {k: int(v) for k, v in a.named.items()
                                                       if not isinstance(v, np.ndarray)},
                    "sizes": [a.num_trees, a.num_outputs, a.num_features, a.max_path, a.max_depth]}


def restored(arrays: dict, record: dict, layout: tuple[str, ...]) -> Arrays | None:
    """The :class:`Arrays` :func:`saved` kept, or None where they were made for another kernel
    argument ``layout`` (or are not whole): the caller makes them again."""
    try:
        if record["layout"] != list(layout):
            return None
        named = {k: int(v) for k, v in record["counts"].items()}
        named.update({k: v for k, v in arrays.items() if k != "bias"})
        if any(name not in named for name in layout if name != "use_tables"):
            return None
        trees, outputs, features, longest, most = (int(v) for v in record["sizes"])
        return Arrays(named, np.asarray(arrays["bias"], np.float64), trees, outputs, features, longest, most)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def arrays(forest: Forest, table_bytes: int = paths_math.TABLE_BYTES, kernel=None) -> Arrays:
    """The flat arrays of ``forest`` (raises ``UnsupportedModelError`` where
    :func:`~silvanforge.runtime.contributions.refusal` says why), with tables for up to
    ``table_bytes`` (symmetric trees' by leaf first, made by ``kernel``'s ``leaf_table`` where
    it has one)."""
    why = paths_math.refusal(forest)
    if why is not None:
        from silvanforge.errors import UnsupportedModelError

        raise UnsupportedModelError(f"pred_contribs: {why}")
    forest = explained(forest)
    forest = dataclasses.replace(forest, trees=[preordered(tree) for tree in forest.trees])
    K, F = forest.num_outputs, forest.input_features  # (F: the columns contributions go to)
    source = paths_math.attributed_features(forest)
    scale = 1.0 / forest.average_divisor if forest.aggregation is Aggregation.AVERAGE else 1.0
    bias = np.asarray(forest.base_score, np.float64) * 1.0 + np.zeros(K)
    by_leaf, leaf_bias = _leaf_tables(forest, scale, table_bytes, getattr(kernel, "leaf_table", None))
    bias += leaf_bias
    splits = _split_records(forest)
    tree_paths, path_nodes, prefix, step, longest = [0], [0], [], [], 0
    depth, path_features, feature, zero = [], [0], [], []
    path_values, column, value = [0], [], []
    for t, tree in enumerate(forest.trees):
        if by_leaf["tree_levels"][t] > 0:  # a table by leaf: its paths are never walked
            tree_paths.append(len(depth))
            continue
        # (the tree as lists: Python reads their items several times faster than NumPy's)
        # (a computed column's splits are its input feature's: attributed_features)
        fraction, feature_of = paths_math.fractions(tree).tolist(), source[tree.feature].tolist()
        leaf_values = (tree.leaf_value * scale).tolist()
        columns = [o * (F + 1) for o in tree.outputs]
        split_of = (np.cumsum(tree.left >= 0) - 1).tolist()  # a node's split, counted in its tree
        expected = [0.0] * len(columns)
        before: list = []
        for leaf, nodes, sides in paths_math.leaf_paths(tree):
            shared = 0
            for a, c in zip(zip(nodes, sides), before):
                if a != c:
                    break
                shared += 1
            before = list(zip(nodes, sides))
            features, zeros, slots = paths_math.merged(feature_of, nodes, sides, fraction)
            vals = leaf_values[leaf]
            reach = math.prod(zeros)
            for o, v in enumerate(vals):
                expected[o] += v * reach
            prefix.append(shared)
            step.extend([split_of[n] << 8 | left << 7 | k for n, left, k in
                         zip(nodes[shared:], sides[shared:], slots[shared:])])
            path_nodes.append(len(step))
            longest = max(longest, len(nodes))
            depth.append(len(features))
            feature.extend(features)
            zero.extend(zeros)
            path_features.append(len(feature))
            column.extend(columns)
            value.extend(vals)
            path_values.append(len(value))
        bias[list(tree.outputs)] += expected
        tree_paths.append(len(depth))
    depth_a = np.array(depth, np.int32)
    zero_a = np.array(zero, np.float64)
    fstart = np.array(path_features[:-1], np.int64)
    table_at, table = _tables(depth_a, fstart, zero_a, table_bytes - by_leaf["leaf_table"].nbytes)
    made_d = min(paths_math.TABLE_MAX_D, getattr(kernel, "max_table_d", 0))
    if made_d and depth_a.size:  # paths the kernel makes a table for per call (of enough rows)
        lowest = np.minimum.reduceat(np.append(zero_a, 1.0), fstart) if zero_a.size else np.ones(depth_a.size)
        table_at[(table_at < 0) & (depth_a > 0) & (depth_a <= made_d) & (lowest > 0)] = -2
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(zero_a > 0, (1.0 - zero_a) / zero_a, 0.0)
    quad_at, quad_t, quad_w = _quadrature(int(depth_a.max(initial=0)))
    coalition_w = [_coalition_weights(d) for d in range(int(depth_a.max(initial=0)) + 1)]
    named = dict(
        row_stride=forest.num_features, phi_stride=K * (F + 1),
        tree_paths=np.array(tree_paths, np.int64), path_nodes=np.array(path_nodes, np.int64),
        prefix=np.array(prefix, np.int32), step=np.array(step, np.int32), depth=depth_a, path_features=fstart, feature=np.array(feature, np.int32),
        zero=zero_a, ratio=ratio, table_at=table_at, table=table,
        path_values=np.array(path_values, np.int64), column=np.array(column, np.int64),
        value=np.array(value, np.float64), **splits, category_rule=_RULES[forest.category_rule],
        quad_at=quad_at, quad_t=quad_t, quad_w=quad_w, **by_leaf,
        coalition_at=np.cumsum([0] + [w.size for w in coalition_w[:-1]]).astype(np.int64),
        coalition_w=np.concatenate(coalition_w),
        zero_bound=int(np.float64(ZERO_THRESHOLD).view(np.int64)))
    # (every array non-empty: the kernel is handed addresses, and an empty array may have none)
    named = {k: (np.zeros(1, v.dtype) if isinstance(v, np.ndarray) and v.size == 0 else v) for k, v in named.items()}
    named["pattern_stride"] = longest + 1
    return Arrays(named, bias, forest.num_trees, K, F, longest, int(depth_a.max(initial=0)))


# Symmetric trees of up to this many levels are tabled by leaf (a row of the table a leaf).
LEAF_TABLE_LEVELS = 12


def _leaf_tables(forest, scale: float, budget: int, fill=None) -> tuple[dict, np.ndarray]:
    """The tables by leaf of the symmetric trees (:func:`~silvanforge.runtime.shap_view.symmetric_levels`,
    up to ``LEAF_TABLE_LEVELS`` levels), in tree order while they fit in ``budget`` bytes, and
    those trees' share of the bias.  A table has a row for each of the tree's ``2**levels``
    leaves (bit i: the row goes right at level i) and an entry for each (output, feature) of
    the tree: what a row reaching that leaf gets, summed over the tree's paths with their
    values (a row's pattern on a path depends on its leaf alone).  Made from the levels: path
    ``p`` (to the leaf at position ``p``) and a row reaching leaf ``r`` part at the levels of
    the bits of ``r ^ p``.  ``fill``: a kernel's ``leaf_table``, or None (NumPy's)."""
    T, K, F = forest.num_trees, forest.num_outputs, forest.input_features
    source = paths_math.attributed_features(forest)  # (a computed column's splits: its input feature's)
    levels_of, level_at, table_at, column_at, columns = (np.zeros(T + 1, np.int64) for _ in range(5))
    level_node, parts, leaf_column, used = [], [], [], 0
    first_split = np.cumsum([0] + [int((t.left >= 0).sum()) for t in forest.trees])
    bias = np.zeros(K)
    for t, tree in enumerate(forest.trees):
        level_at[t], table_at[t], column_at[t] = len(level_node), used // 8, len(leaf_column)
        levels = symmetric_levels(tree)
        if levels is None or not 1 < len(levels) <= LEAF_TABLE_LEVELS + 1:
            continue
        L, R = len(levels) - 1, 1 << (len(levels) - 1)
        nodes = [int(level[0]) for level in levels[:-1]]
        feats, slot = [], []  # the distinct features in path order, each level's slot among them
        for f in source[tree.feature[nodes]].tolist():
            if f not in feats:
                feats.append(f)
            slot.append(feats.index(f))
        d, outs = len(feats), len(tree.outputs)
        if used + (8 * outs * d << L) > budget:
            continue
        cover = tree.cover if tree.cover is not None else np.ones(tree.num_nodes)
        p = np.arange(R)
        zeros = np.ones((R, d))
        for i in range(L):  # the cover fraction following path p at level i, as paths_math.fractions
            here = cover[levels[i][p & ((1 << i) - 1)]].astype(np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                zeros[:, slot[i]] *= np.where(here > 0, cover[levels[i + 1][p & ((2 << i) - 1)]] / here, 0.0)
        vals = tree.leaf_value[levels[-1]] * scale  # (R, outs)
        off = np.zeros(R, np.int64)  # the slots a row leaves path p at, by r ^ p
        for i in range(L):
            off |= ((p >> i) & 1) << slot[i]
        table = _leaf_shares(off, zeros, vals, d, fill).reshape(R, outs * d)
        bias[list(tree.outputs)] += zeros.prod(axis=1) @ vals
        levels_of[t], columns[t] = L, outs * d
        level_node.extend(int(first_split[t] + (tree.left[:n] >= 0).sum()) for n in nodes)  # (their splits)
        for o in tree.outputs:
            leaf_column.extend(o * (F + 1) + f for f in feats)
        parts.append(table.ravel())
        used += table.nbytes
    return dict(tree_levels=levels_of, level_at=level_at, level_node=np.array(level_node or [0], np.int64),
                leaf_table_at=table_at, leaf_table=np.concatenate(parts) if parts else np.zeros(1),
                column_at=column_at, table_columns=columns,
                leaf_column=np.array(leaf_column or [0], np.int64)), bias


def _leaf_shares(off: np.ndarray, zeros: np.ndarray, vals: np.ndarray, d: int, fill=None) -> np.ndarray:
    """(R, outputs, d): each leaf's row of a symmetric tree's table, from ``off`` (R: the slots
    a row leaves path ``p`` at when its leaf is ``r``, by ``r ^ p``), the paths' fractions
    ``zeros`` (R, d) and values ``vals`` (R, outputs).  Paths whose fractions are all above
    zero by their pattern tables (the kernel's ``fill`` where given); the others by their
    polynomial, or not at all where their values are 0 (a path CatBoost never walks,
    :mod:`silvanforge.runtime.shap_view`)."""
    R = off.size
    table = np.zeros((R, vals.shape[1], d))
    able = (zeros > 0).all(axis=1)
    r = np.arange(R)[:, None]
    pattern = lambda paths: ((1 << d) - 1) & ~off[r ^ paths[None, :]]  # noqa: E731  (R, paths)
    if fill is not None:
        fill(off, np.ascontiguousarray(zeros), np.ascontiguousarray(vals), _coalition_weights(d), table)
    elif able.any():
        tabled = np.flatnonzero(able)
        U, ratio = paths_math._pattern_tables(zeros[tabled], d)
        U = U.ravel()
        st = pattern(tabled)
        at = np.arange(tabled.size)[None, :] * (1 << d)
        shares = np.empty((R, tabled.size, d))
        for k in range(d):
            on = (st >> k) & 1
            shares[:, :, k] = np.where(on == 1, ratio[None, :, k] * U[at + (st ^ (1 << k))], -U[at + st])
        table += np.einsum("rpk,po->rok", shares, vals[tabled])
    other = np.flatnonzero(~able & (vals != 0).any(axis=1))
    if other.size:
        follows = ((pattern(other)[:, :, None] >> np.arange(d)) & 1).astype(bool)
        table += np.einsum("rpk,po->rok", paths_math._polynomial_shares(follows, zeros[other], d), vals[other])
    return table


_COALITION_WEIGHTS: dict[int, np.ndarray] = {}


def _coalition_weights(d: int) -> np.ndarray:
    """(d + 1,): the Shapley weight of a coalition of each size (0 for all d)."""
    got = _COALITION_WEIGHTS.get(d)
    if got is None:
        got = _COALITION_WEIGHTS[d] = np.append(paths_math._weights(d), 0.0)
    return got


def _tables(depth: np.ndarray, fstart: np.ndarray, zero: np.ndarray, budget: int):
    """Each path's pattern table's start in one array (-1: none), and that array: the paths of
    fewest features first, those with every fraction above zero, up to ``budget`` bytes."""
    table_at = np.full(depth.size, -1, np.int64)
    parts, used = [], 0
    for d in range(1, paths_math.TABLE_MAX_D + 1):
        at = np.flatnonzero(depth == d)
        if not at.size:
            continue
        z = zero[fstart[at, None] + np.arange(d)]
        able = (z > 0).all(axis=1)
        at, z = at[able], z[able]
        take = min(at.size, max(0, (budget - used) // (8 << d)))
        if not take:
            continue
        U, _ = paths_math._pattern_tables(z[:take], d)
        table_at[at[:take]] = used // 8 + np.arange(take, dtype=np.int64) * (1 << d)
        parts.append(U.ravel())
        used += U.nbytes
    return table_at, (np.concatenate(parts) if parts else np.zeros(1))


def _split_records(forest: Forest) -> dict:
    """Every tree's splits (internal nodes, in preorder) as one record each (see the module
    docstring), their categories' bit sets, each tree's first split and the most of a tree."""
    records, bits, tree_splits = [], [], [0]
    used = 0
    for tree in forest.trees:
        inner = np.flatnonzero(tree.left >= 0)
        record = np.zeros((inner.size, 2), np.int64)
        with np.errstate(over="ignore"):  # (the threshold in the comparison dtype, as the reference compares)
            threshold = tree.threshold[inner].astype(forest.threshold_dtype).astype(np.float64)
        record[:, 0] = threshold.view(np.int64)
        record[:, 1] = (tree.feature[inner].astype(np.int64) & 0xFFFFFFFF) \
            | (tree.op[inner].astype(np.int64) << 32) | (tree.default_left[inner].astype(np.int64) << 40) \
            | (tree.zero_missing[inner].astype(np.int64) << 48)
        where = {int(n): k for k, n in enumerate(inner.tolist())}
        for n, cats in tree.categories.items():
            cats = np.asarray(cats, np.int64)
            cats = cats[cats >= 0]
            size = int(cats.max(initial=-1)) + 1
            words = np.zeros(-(-size // 32), np.uint32)
            np.bitwise_or.at(words, cats >> 5, (np.uint32(1) << (cats & 31).astype(np.uint32)))
            k = where[int(n)]
            record[k, 0] = used | (size << 32)
            record[k, 1] |= 1 << 56
            bits.append(words)
            used += words.size
        records.append(record)
        tree_splits.append(tree_splits[-1] + inner.size)
    counts = np.diff(tree_splits)
    return {"split_record": np.concatenate(records).ravel() if records else np.zeros(2, np.int64),
            "category_bits": np.concatenate(bits) if bits else np.zeros(1, np.uint32),
            "tree_splits": np.array(tree_splits, np.int64), "max_splits": int(counts.max(initial=0))}


def _quadrature(max_d: int):
    """Gauss-Legendre points and weights on [0, 1], ``(d + 1) // 2`` of them for each d."""
    at, ts, ws = [0], [], []
    for d in range(0, max_d + 1):
        m = (d + 1) // 2
        if m:
            x, w = np.polynomial.legendre.leggauss(m)
            ts.extend((x + 1) / 2)
            ws.extend(w / 2)
        at.append(len(ts))
    return np.array(at[:-1], np.int64), np.array(ts or [0.0]), np.array(ws or [0.0])


def fits(a: Arrays, kernel) -> bool:
    """Whether ``kernel`` takes the paths of ``a`` (its longest, its most features)."""
    return a.max_path <= kernel.max_path and a.max_depth <= kernel.max_depth


def kernel_for(target: str):
    """The contributions kernel of target ``target``, else of any installed target that has
    one (they all run on the host), else None."""
    from silvanforge.plugins import registry

    r = registry()
    names = [target] + [name for name in r.targets() if name != target]
    for name in names:
        try:
            kernel = r.target(name).contributions_kernel()
        except Exception:  # a target that cannot build it here (no LLVM): the next one
            continue
        if kernel is not None:
            return kernel
    return None


def contributions(a: Arrays, kernel, X: np.ndarray, threads: int | None, use_tables: bool = True) -> np.ndarray:
    """(n, outputs, features + 1) of rows ``X`` (in the model's comparison dtype) by ``kernel``
    (:meth:`silvanforge.target.Target.contributions_kernel`), over up to ``threads`` threads."""
    threads = default_threads() if threads is None else check_threads(threads)
    X = np.ascontiguousarray(X, np.float64)
    n, K, F = X.shape[0], a.num_outputs, a.num_features
    phi = np.zeros((n, K, F + 1))
    args = a.block(kernel.arg_layout, use_tables)
    base, T = args.ctypes.data, a.num_trees
    if n == 0:
        return phi
    if n < TREE_SPLIT_ROWS:
        # Few rows: the trees in shares, each share's sums apart, then added in share order.
        bounds = [T * k // TREE_SHARES for k in range(TREE_SHARES + 1)]
        parts = np.zeros((TREE_SHARES, n, K, F + 1))
        calls = [(lambda k=k: _run(kernel, a, base, X, 0, n, bounds[k], bounds[k + 1], parts[k]))
                 for k in range(TREE_SHARES)]
        _in_parallel(calls, threads)
        for part in parts:
            phi += part
    else:
        parts = max(min(threads, n // TREE_SPLIT_ROWS), -(-n // ROWS_PER_CALL))
        bounds = [n * k // parts for k in range(parts + 1)]
        ranges = list(zip(bounds[:-1], bounds[1:]))
        calls = [(lambda lo=lo, hi=hi: _run(kernel, a, base, X, lo, hi, 0, T, phi)) for lo, hi in ranges]
        _in_parallel(calls, threads)
    phi[:, :, F] += a.bias
    return phi


def _run(kernel, a: Arrays, args: int, X: np.ndarray, row_begin: int, row_end: int, tree_begin: int,
         tree_end: int, phi: np.ndarray) -> None:
    """One kernel call, with its own scratch (a tree's decisions for each of its rows)."""
    scratch = np.empty(max(1, (row_end - row_begin) * a.named["max_splits"]), np.int8)
    kernel.run(args, X.ctypes.data, row_begin, row_end, tree_begin, tree_end, phi.ctypes.data, scratch.ctypes.data)


def _in_parallel(calls: list, threads: int) -> None:
    """Run ``calls`` over up to ``threads`` threads (this one takes the first)."""
    if threads == 1 or len(calls) == 1:
        for call in calls:
            call()
        return
    width = min(threads, len(calls))
    groups = [calls[k::width] for k in range(width)]
    pool = _get_pool(threads)
    futures = [pool.submit(lambda g=g: [c() for c in g]) for g in groups[1:]]
    try:
        for c in groups[0]:
            c()
    finally:
        for f in futures:
            f.result()

"""Every tree of an XGBoost document read at once: each node field of all trees gathered into
one NumPy array, checked, renumbered and cut into HIR trees in NumPy steps over all nodes.

Read a tree at a time (:func:`.xgboost_json._tree`) a model costs about 80 us of Python a
tree, whatever its size: 8 s of a 100,000-tree model's load.  Here the Python left a tree is
gathering its fields' lists and building its :class:`Tree` from slices of the shared arrays.

:func:`read_trees` reads only what it reads exactly as ``_tree`` does, tree for tree, bit
for bit.  Anything else (a field of another type or length in some tree, a check that fails,
vector leaves, a mix of trees with and without an optional field) answers None, and the
caller reads the trees one at a time, which also names what is wrong in the words of the
per-tree checks.  So this module never raises a model's error itself.
"""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

from silvanforge.errors import ModelFormatError
from silvanforge.ir.hir import Op, Tree

_CATEGORY_KEYS = ("categories_nodes", "categories_segments", "categories_sizes", "categories")
# The element types a JSON field may hold to be read whole: the per-tree reader's np.asarray
# of a tree's list then gives the same numbers as one over every tree's (a list mixing ints
# and floats, or ints beyond int64, may not: such files are read a tree at a time).
_ELEMENTS = {"int": (int, bool), "bool": (int, bool), "float": (float,)}
_KINDS = {"int": "iub", "bool": "iub", "float": "iubf"}


class _Unread(Exception):
    """Something the per-tree reader reads otherwise than this module would (or refuses)."""


def read_trees(trees_json: list, picked: list[int], groups: np.ndarray, weights: np.ndarray | None,
               num_feature: int, num_outputs: int,
               categories_of: Callable[[dict, int, int, np.ndarray], dict],
               release: Callable[[], None] | None = None) -> list[Tree] | None:
    """The HIR trees of ``trees_json[p]`` for each ``p`` in ``picked``, as ``_tree`` reads them,
    or None where this module cannot vouch for reading them so.

    ``groups``: each picked tree's output (``tree_info``); ``weights``: dart's float32 weight of
    each picked tree, or None; ``categories_of(tree_json, k, num_nodes, split_type)``: the
    per-tree reader's node -> category set of picked tree ``k`` (``ModelFormatError`` if bad);
    ``release()``: called once everything is read from ``trees_json`` and checked (so the trees
    will be returned), before the HIR's trees are made."""
    if not picked:
        return []
    try:
        nodes, bounds, outputs, categories = _gather(trees_json, picked, groups, weights, num_feature,
                                                     num_outputs, categories_of)
    # (a malformed document may fail a step here before a check names it: the per-tree reader,
    # reading it next, names it)
    except (_Unread, ModelFormatError, LookupError, TypeError, ValueError, OverflowError):
        return None
    if release is not None:
        release()
    # Each tree's arrays are slices of the shared ones (a view: no copy, no allocation a tree
    # but the view's).
    left, right, feature, threshold, op, default_left, zero_missing, leaf_value, cover, node_ids = nodes
    trees = []
    for k in range(len(picked)):
        a, z = bounds[k], bounds[k + 1]
        trees.append(Tree(left=left[a:z], right=right[a:z], feature=feature[a:z], threshold=threshold[a:z],
                          op=op[a:z], default_left=default_left[a:z], zero_missing=zero_missing[a:z],
                          leaf_value=leaf_value[a:z], outputs=outputs[k], categories=categories.get(k, {}),
                          cover=None if cover is None else cover[a:z], node_ids=node_ids[a:z]))
    return trees


def _gather(trees_json, picked, groups, weights, num_feature, num_outputs, categories_of):
    """Every picked tree's nodes in the HIR's terms, tree after tree: (the node arrays of
    :class:`Tree` over all trees' nodes, from ``left`` to ``cover`` (None: no cover) and XGBoost's node ids, where each
    tree's nodes start and the last ends, each tree's outputs, tree -> its categorical nodes'
    sets)."""
    tjs = [trees_json[p] for p in picked]
    count = len(tjs)
    if any(type(tj) is not dict for tj in tjs):
        raise _Unread
    params = [tj.get("tree_param") for tj in tjs]
    if any(type(p) is not dict for p in params):
        raise _Unread
    sizes = _integers([p.get("num_nodes") for p in params])
    leaf_sizes = _integers([p.get("size_leaf_vector", 1) for p in params])
    if (sizes <= 0).any() or (leaf_sizes > 1).any():  # vector leaves: a tree at a time
        raise _Unread
    groups = np.asarray(groups, dtype=np.int64)
    if ((groups < 0) | (groups >= num_outputs)).any():
        raise _Unread

    left = _field(tjs, "left_children", "int", sizes)
    right = _field(tjs, "right_children", "int", sizes)
    feature = _field(tjs, "split_indices", "int", sizes)
    with np.errstate(over="ignore"):  # XGBoost reads numbers beyond float32 as +-inf too
        cond = _field(tjs, "split_conditions", "float", sizes).astype(np.float32)
    default_left = _field(tjs, "default_left", "bool", sizes)
    split_type = _optional(tjs, "split_type", "int", sizes)
    total = int(sizes.sum())
    if split_type is None:
        split_type = np.zeros(total, dtype=np.int64)
    hessians = _optional(tjs, "sum_hessian", "float", sizes)

    starts = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(sizes, out=starts[1:])
    tree_of = np.repeat(np.arange(count), sizes)
    categories = _categories(tjs, sizes, starts, tree_of, split_type, categories_of)

    # Reachable nodes renumbered in pre-order (left subtree first), as the per-tree walk does.
    old, new_sizes = _preorder(left, right, sizes, starts, tree_of)
    new_starts = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(new_sizes, out=new_starts[1:])
    new_tree = np.repeat(np.arange(count), new_sizes)
    new_id = np.full(total, -1, dtype=np.int64)  # new (in-tree) number of each old node
    new_id[old] = np.arange(old.size) - new_starts[new_tree]

    internal = left[old] != -1
    leaf = ~internal
    raw_type = split_type[old]
    if (internal & (raw_type != 0) & (raw_type != 1)).any():
        raise _Unread
    has_categories = np.zeros(count, dtype=bool)
    has_categories[np.fromiter(categories, dtype=np.int64, count=len(categories))] = True
    # With no category stored, XGBoost evaluates every split of the tree numerically.
    is_cat = internal & (raw_type == 1) & has_categories[new_tree]
    feat = np.where(internal, feature[old], -1)
    if (internal & ((feat < 0) | (feat >= num_feature))).any():
        raise _Unread
    root = starts[new_tree]
    lo = np.where(internal, new_id[np.where(internal, left[old], 0) + root], -1)
    hi = np.where(internal, new_id[np.where(internal, right[old], 0) + root], -1)
    # XGBoost sends a category in the set right; the HIR sends it left: swap, flip default.
    out_left = np.where(is_cat, hi, lo).astype(np.int32)
    out_right = np.where(is_cat, lo, hi).astype(np.int32)
    out_default = np.where(is_cat, ~default_left[old], default_left[old]) & internal
    out_threshold = np.where(internal & ~is_cat, cond[old], 0).astype(np.float64)
    values = cond[old[leaf]]
    if weights is not None:  # dart: XGBoost multiplies each tree's float32 output by its weight
        with np.errstate(over="ignore", invalid="ignore"):
            values = (values * np.asarray(weights, dtype=np.float32)[new_tree[leaf]]).astype(np.float32)
    out_leaf = np.zeros((old.size, 1), dtype=np.float64)
    out_leaf[leaf, 0] = values
    nodes = (out_left, out_right, feat.astype(np.int32), out_threshold, np.full(old.size, Op.LT, dtype=np.uint8),
             out_default, np.zeros(old.size, dtype=bool), out_leaf, None if hessians is None else hessians[old],
             old - starts[new_tree])  # XGBoost's node ids (pred_leaf gives them), before renumbering
    bounds = new_starts.tolist()
    # A categorical node without an entry gets an empty set (everything goes left), as in XGBoost.
    tree_categories = {}
    for k, by_node in categories.items():
        a, z = bounds[k], bounds[k + 1]
        start = int(starts[k])
        tree_categories[k] = {int(new_id[node]): by_node.get(int(node) - start, np.zeros(0, dtype=np.int64))
                              for node in old[a:z][is_cat[a:z]].tolist()}
    return nodes, bounds, [(g,) for g in groups.tolist()], tree_categories


def _integers(values: list) -> np.ndarray:
    """``tree_param`` counts, as decimal strings (XGBoost's parameters) or integers."""
    kinds = set(map(type, values))
    if kinds <= {str}:
        try:
            return np.array([int(v) for v in values], dtype=np.int64)
        except (ValueError, OverflowError):
            raise _Unread from None
    if kinds <= {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            raise _Unread from None
    raise _Unread


def _optional(tjs: list, key: str, kind: str, sizes: np.ndarray) -> np.ndarray | None:
    """A field some files leave out: every tree has it, or none (None)."""
    present = sum(key in tj for tj in tjs)
    if present == 0:
        return None
    if present != len(tjs):
        raise _Unread
    return _field(tjs, key, kind, sizes)


def _field(tjs: list, key: str, kind: str, sizes: np.ndarray) -> np.ndarray:
    """Field ``key`` of every tree, one after the other, as ``_Fields.array`` reads each tree's:
    int64, float64 or (``kind="bool"``) whether the value is 1."""
    try:
        parts = [tj[key] for tj in tjs]
    except KeyError:
        raise _Unread from None
    target = np.float64 if kind == "float" else np.int64
    containers = set(map(type, parts))
    if containers == {list}:
        if np.any(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)) != sizes):
            raise _Unread
        flat = list(itertools.chain.from_iterable(parts))
        if not set(map(type, flat)) <= set(_ELEMENTS[kind]):
            raise _Unread
        try:
            arr = np.array(flat, dtype=target)
        except OverflowError:  # an integer beyond int64
            raise _Unread from None
    elif containers == {np.ndarray}:  # UBJSON's typed arrays
        if any(p.ndim != 1 for p in parts) \
                or any(t.kind not in _KINDS[kind] for t in {p.dtype for p in parts}):
            raise _Unread
        if np.any(np.fromiter((p.size for p in parts), dtype=np.int64, count=len(parts)) != sizes):
            raise _Unread
        # Each tree's values cast to the target as the per-tree reader's astype casts them.
        arr = np.concatenate(parts, dtype=target, casting="unsafe")
    else:
        raise _Unread
    return arr == 1 if kind == "bool" else arr


def _categories(tjs, sizes, starts, tree_of, split_type, categories_of) -> dict[int, dict]:
    """Tree -> (node -> category set) for the trees that store categories.  A tree storing
    none is numerical, but one that lacks the fields while marking a split categorical is
    refused by the per-tree reader (as is any entry it would refuse)."""
    out: dict[int, dict] = {}
    categorical_splits = np.bincount(tree_of[split_type == 1], minlength=len(tjs)).tolist()
    keys = frozenset(_CATEGORY_KEYS)
    for k, tj in enumerate(tjs):
        if not keys <= tj.keys():
            if categorical_splits[k]:
                raise _Unread
            continue
        fields = [tj[key] for key in _CATEGORY_KEYS]
        if set(map(type, fields)) == {list}:  # (JSON: four lists, most often empty)
            if not any(fields):
                continue
        elif not any(map(_held, fields)):
            continue
        a, z = int(starts[k]), int(starts[k + 1])
        by_node = categories_of(tj, k, int(sizes[k]), split_type[a:z])
        if by_node:
            out[k] = by_node
    return out


def _held(value) -> bool:
    """Whether a category field holds anything (or may not be an empty array)."""
    if type(value) is list:
        return bool(value)
    return not (type(value) is np.ndarray and value.ndim == 1 and value.size == 0)


def _preorder(left: np.ndarray, right: np.ndarray, sizes: np.ndarray, starts: np.ndarray,
              tree_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reachable nodes of every tree in pre-order, tree after tree (as indices into the
    gathered arrays), and how many each tree has.  A level of all trees a step; a child out
    of its tree or reached twice is refused (the per-tree walk names it)."""
    total = int(sizes.sum())
    seen = np.zeros(total, dtype=bool)
    slot = np.zeros(total, dtype=np.int64)  # a level's children: each one's place among them
    roots = starts[:-1]
    seen[roots] = True
    frontier = roots
    steps = []  # (parents, their left children, their right children) a level
    while frontier.size:
        parents = frontier[left[frontier] != -1]
        if not parents.size:
            break
        n = sizes[tree_of[parents]]
        lo, hi = left[parents], right[parents]
        if ((lo < 0) | (lo >= n) | (hi < 0) | (hi >= n)).any():
            raise _Unread
        base = starts[tree_of[parents]]
        lo, hi = lo + base, hi + base
        children = np.concatenate([lo, hi])
        if seen[children].any():
            raise _Unread
        seen[children] = True
        # A child listed twice in the level keeps only its last place.
        slot[children] = np.arange(children.size)
        if (slot[children] != np.arange(children.size)).any():
            raise _Unread
        steps.append((parents, lo, hi))
        frontier = children
    # Subtree sizes bottom-up, then each node's place: a left child follows its parent, a
    # right child follows its parent's left subtree.
    subtree = seen.astype(np.int64)
    for parents, lo, hi in reversed(steps):
        subtree[parents] = 1 + subtree[lo] + subtree[hi]
    place = np.zeros(total, dtype=np.int64)
    for parents, lo, hi in steps:
        place[lo] = place[parents] + 1
        place[hi] = place[parents] + 1 + subtree[lo]
    new_sizes = subtree[roots]
    new_starts = np.concatenate([[0], np.cumsum(new_sizes)[:-1]])
    reached = np.flatnonzero(seen)
    old = np.empty(reached.size, dtype=np.int64)
    old[new_starts[tree_of[reached]] + place[reached]] = reached
    return old, new_sizes

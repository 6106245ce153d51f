"""LightGBM trees as the HIR's node arrays (:class:`silvanforge.ir.hir.Tree`'s fields): from a
tree's parsed lists, or every tree's at once where each is plain (a tree at a time took a third
of a 1000-tree 255-leaf model's load); :mod:`.lightgbm_text` parses and checks the lists."""

from __future__ import annotations

import numpy as np

from silvanforge.ir.hir import Op, Tree

from .text_arrays import set_bits, within

# LightGBM's kZeroThreshold is the float literal 1e-35f stored in a double.
_KZ = float(np.float32(1e-35))
_BELOW_NEG_KZ = float(np.nextafter(-_KZ, -np.inf))

_MISSING_NONE, _MISSING_ZERO, _MISSING_NAN = 0, 1, 2


def node_arrays(num_leaves: np.ndarray, split_feature, thr, dtype, lc, rc, leaf_value) -> dict[str, np.ndarray]:
    """The HIR node arrays (:class:`Tree`'s fields) of trees of ``num_leaves`` leaves each, from
    their lists joined (each tree's internal nodes' in turn, then the leaf values likewise), and
    joined the same way: a tree's internal nodes, then its leaves (leaf ~c after the internal
    nodes), then the next tree's.  The lists are sound (:meth:`.lightgbm_text._Parser.tree`'s checks)."""
    n_int = num_leaves - 1
    n = n_int + num_leaves
    starts = np.cumsum(n) - n
    inner = np.repeat(starts, n_int) + within(n_int)
    leaves = np.repeat(starts + n_int, num_leaves) + within(num_leaves)
    size = int(n.sum())
    feature = np.full(size, -1, dtype=np.int32)
    threshold = np.zeros(size, dtype=np.float64)
    left = np.full(size, -1, dtype=np.int32)
    right = np.full(size, -1, dtype=np.int32)
    default_left = np.zeros(size, dtype=bool)
    zero_missing = np.zeros(size, dtype=bool)
    values = np.zeros((size, 1), dtype=np.float64)
    values[leaves, 0] = leaf_value
    # Leaf ~c is stored after the internal nodes.
    inner_n = np.repeat(n_int, n_int)
    left[inner] = np.where(lc >= 0, lc, inner_n + ~lc)
    right[inner] = np.where(rc >= 0, rc, inner_n + ~rc)
    feature[inner] = split_feature
    is_cat = (dtype & 1).astype(bool)
    bit_default_left = (dtype & 2).astype(bool)
    missing = (dtype >> 2) & 3
    # Inputs with |x| <= kZ reach the trees as 0.0: fold that into the threshold.
    canon = np.where((thr >= -_KZ) & (thr < 0), _BELOW_NEG_KZ, thr)
    canon = np.where((thr >= 0) & (thr < _KZ), _KZ, canon)
    num = ~is_cat
    threshold[inner] = np.where(num, canon, 0.0)
    with np.errstate(invalid="ignore"):
        none_left = 0.0 <= thr
    default_left[inner] = num & np.where(missing == _MISSING_NONE, none_left, bit_default_left)
    zero_missing[inner] = num & (missing == _MISSING_ZERO)
    # LightGBM numbers splits and leaves apart (pred_leaf gives the leaf's): leaf ~c sits after
    # the internal nodes here
    node_ids = np.empty(size, np.int64)
    node_ids[inner] = within(n_int)
    node_ids[leaves] = within(num_leaves)
    return {"left": left, "right": right, "feature": feature, "threshold": threshold,
            "op": np.full(size, Op.LE, dtype=np.uint8), "default_left": default_left,
            "zero_missing": zero_missing, "leaf_value": values, "node_ids": node_ids}


def joined_trees(blocks, lists, num_features, k) -> list[Tree] | None:
    """Every tree read at once (:func:`node_arrays`), where each is plain: not linear, every list
    it reads parsed (:meth:`.lightgbm_text._Parser.lists`) with the entries it should have, and nothing :meth:`.lightgbm_text._Parser.tree`
    would refuse; else None (read a tree at a time, which names what is wrong).  (A tree at
    a time took a third of a 1000-tree 255-leaf model's load.)"""
    if not blocks or any(block.get("is_linear", "0").strip() != "0" for _, block in blocks):
        return None

    def joined(key, lengths, dtype=np.int64):
        # the lists of ``key`` of the trees reading it (length > 0), joined; None where one
        # is not parsed or has another length
        parts = []
        for parsed, length in zip(lists, lengths.tolist()):
            if length:
                arr = parsed.get(key)
                if arr is None or len(arr) != length:
                    return None
                parts.append(arr)
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    T = len(blocks)
    num_leaves = joined("num_leaves", np.ones(T, np.int64))
    has_cat = np.array(["num_cat" in block for _, block in blocks])
    num_cat = np.zeros(T, np.int64)
    cats = joined("num_cat", has_cat.astype(np.int64))
    if num_leaves is None or cats is None or (num_leaves < 1).any():
        return None
    num_cat[has_cat] = cats
    n_int = num_leaves - 1
    leaf_value = joined("leaf_value", num_leaves, np.float64)
    split_feature, thr, dtype, lc, rc = (joined(key, n_int, np.float64 if key == "threshold" else np.int64)
                                         for key in ("split_feature", "threshold", "decision_type",
                                                     "left_child", "right_child"))
    if any(a is None for a in (leaf_value, split_feature, thr, dtype, lc, rc)) or (num_cat[n_int == 0] != 0).any():
        return None
    tree_of = np.repeat(np.arange(T), n_int)  # each internal node's tree
    inner_n, leaves_n = n_int[tree_of], num_leaves[tree_of]
    if ((split_feature < 0) | (split_feature >= num_features) | (dtype < 0) | (dtype > 15)
            | (lc >= inner_n) | (lc < -leaves_n) | (rc >= inner_n) | (rc < -leaves_n)
            | (((dtype >> 2) & 3) == 3)).any():
        return None
    categories = joined_categories(blocks, lists, num_cat, thr, np.flatnonzero(dtype & 1), tree_of, n_int)
    if categories is None:
        return None
    # covers: the trees that have them (both lists, or a stump's leaf counts)
    has_cover = np.array(["leaf_count" in block and (n == 0 or "internal_count" in block)
                          for (_, block), n in zip(blocks, n_int.tolist())], bool)
    inner_counts = joined("internal_count", np.where(has_cover, n_int, 0))
    leaf_counts = joined("leaf_count", np.where(has_cover, num_leaves, 0))
    if inner_counts is None or leaf_counts is None:
        return None
    nodes = node_arrays(num_leaves, split_feature, thr, dtype, lc, rc, leaf_value)
    n = n_int + num_leaves
    cover = np.zeros(int(n.sum()))
    starts = np.cumsum(n) - n
    cover[(np.repeat(starts, n_int) + within(n_int))[has_cover[tree_of]]] = inner_counts
    cover[(np.repeat(starts + n_int, num_leaves) + within(num_leaves))[np.repeat(has_cover, num_leaves)]] = \
        leaf_counts
    trees = []
    for t, (a, b) in enumerate(zip(starts.tolist(), (starts + n).tolist())):
        trees.append(Tree(**{key: arr[a:b] for key, arr in nodes.items()}, outputs=(t % k,),
                          categories=categories[t], cover=cover[a:b] if has_cover[t] else None))
    return trees

def joined_categories(blocks, lists, num_cat, thr, nodes, tree_of, n_int) -> list[dict] | None:
    """Each tree's categorical splits' categories (:meth:`.lightgbm_text._Parser.categories`), every tree's at once
    (``nodes``: the categorical ones among the joined internal nodes); None where a tree's
    lists are not parsed or :meth:`.lightgbm_text._Parser.categories` would refuse them."""
    out: list[dict] = [{} for _ in blocks]
    if not len(nodes):
        return out
    trees = np.unique(tree_of[nodes])
    bounds, words, bound_at, word_at = [], [], np.zeros(len(blocks), np.int64), np.zeros(len(blocks), np.int64)
    b_at = w_at = 0
    for t in trees.tolist():
        b, w = lists[t].get("cat_boundaries"), lists[t].get("cat_threshold")
        if num_cat[t] < 1 or b is None or w is None or len(b) != num_cat[t] + 1 or b[0] != 0 \
                or (np.diff(b) < 0).any() or b[-1] != len(w):
            return None
        bounds.append(b)
        words.append(w)
        bound_at[t], word_at[t] = b_at, w_at
        b_at, w_at = b_at + len(b), w_at + len(w)
    words = np.concatenate(words)
    bounds = np.concatenate(bounds)
    t = thr[nodes]
    mine = tree_of[nodes]
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(t) & (t >= 0) & (t < num_cat[mine]))
    if bad.any() or ((words < 0) | (words >= 2**32)).any():
        return None
    ci = bound_at[mine] + t.astype(np.int64)
    found = set_bits(words, (word_at[mine] + bounds[ci]) * 32, (word_at[mine] + bounds[ci + 1]) * 32)
    first = (np.cumsum(n_int) - n_int)[mine]
    for tree, node, cats in zip(mine.tolist(), (nodes - first).tolist(), found):
        out[tree][node] = cats
    return out

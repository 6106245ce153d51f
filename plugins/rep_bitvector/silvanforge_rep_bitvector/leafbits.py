"""Leaves as bits of words, the encoding every form of bitvector evaluation shares: leaf ``k``
from the left of a tree is bit ``bits - 1 - k % bits`` of word ``k // bits`` (64-bit words, or
the narrow form's 32-bit ones), and a node that sends a row right clears the bits of the leaves
in its left subtree, so the exit leaf is the leftmost bit left standing."""

from __future__ import annotations

import numpy as np

from silvanforge.ir import hir
from silvanforge.plan.memo import memoised

WORD = 64
MAX_WORDS = 4
MAX_LEAVES = WORD * MAX_WORDS
# The narrow form's words (:func:`.choose.narrow_form`): 16-bit bins, 32-bit words; code for
# vector units of 256 bits or fewer takes bytes instead where they fill a register, either
# where they fill less, by cost (:func:`.choose.narrow_word`).
NARROW_WORD = 32
BYTE_WORD = 8


def leaf_spans(forest: hir.Forest) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per tree: its leaves from left to right (node ids), and each node's range of leaf
    positions [first, last).  Every tree at once, level by level in numpy (a level loop per tree
    took a third of a second on 1000 leaf-wise trees 37 deep); read only, found once a compile
    (the mask tables and every form's plan ask)."""
    return memoised(forest, "bitvector leaf spans", lambda: _leaf_spans(forest))


def _leaf_spans(forest: hir.Forest) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    offset, left, right, levels = hir.level_order(forest)
    levels = [level[left[level] >= 0] for level in levels]  # the internal nodes
    count = np.ones(len(left), np.int64)  # leaves under each node, deepest level first
    for inner in reversed(levels):
        count[inner] = count[left[inner]] + count[right[inner]]
    first = np.zeros(len(left), np.int64)
    for inner in levels:
        first[left[inner]] = first[inner]
        first[right[inner]] = first[inner] + count[left[inner]]
    spans = []
    for k, t in enumerate(forest.trees):
        f = first[offset[k]:offset[k + 1]]
        is_leaf = t.left < 0
        leaves = np.flatnonzero(is_leaf)[np.argsort(f[is_leaf], kind="stable")]
        span = (leaves, f, f + count[offset[k]:offset[k + 1]])
        for a in span:
            a.flags.writeable = False  # shared by every caller in the compile
        spans.append(span)
    return spans

def word_applications(forest: hir.Forest, bits: int) -> tuple[int, int, int]:
    """(numeric, categorical) node applications of every tree in words of ``bits`` leaves (a
    node clears its left leaves' bits in each word they reach), and the words of every tree:
    what a plan in such words holds, counted from the leaf spans without making it.  Read
    only, found once a compile for each ``bits``."""
    return memoised(forest, ("bitvector word applications", bits), lambda: _word_applications(forest, bits))


def _word_applications(forest: hir.Forest, bits: int) -> tuple[int, int, int]:
    _, left, _, _ = hir.level_order(forest)
    spans = leaf_spans(forest)
    first = np.concatenate([s[1] for s in spans])
    last = np.concatenate([s[2] for s in spans])
    categorical = np.concatenate([t.categorical_mask() for t in forest.trees])
    inner = left >= 0
    child = left[inner]
    reached = (last[child] - 1) // bits - first[child] // bits + 1
    words = sum(-(-len(s[0]) // bits) for s in spans)
    return int(reached[~categorical[inner]].sum()), int(reached[categorical[inner]].sum()), words


def all_left_masks(first: np.ndarray, last: np.ndarray, words: int, bits: int = WORD) -> tuple[np.ndarray, np.ndarray]:
    """For nodes whose left leaves are positions [first, last), per word of ``bits`` bits (0 to
    ``words - 1``): which have leaves in it (``hit``) and the mask clearing those (signed,
    ``bits`` wide, as int64; -1 where not hit).  (words, nodes) arrays, made in numpy passes over
    the (word, node) pairs hit only: a node's leaves reach one or two words, of up to 16 of a
    narrow form's (every pair's pass took a tenth of a 1000-tree 255-leaf model's lowering)."""
    first, last = np.asarray(first, np.int64), np.asarray(last, np.int64)
    hit = np.zeros((words, len(first)), bool)
    cleared = np.full((words, len(first)), -1, np.int64)
    # the words a node's leaves reach: first // bits to (last - 1) // bits, within 0..words - 1
    lo_w = np.clip(first // bits, 0, words)
    hi_w = np.clip(np.where(last > first, (last - 1) // bits + 1, lo_w), lo_w, words)
    counts = hi_w - lo_w
    node = np.repeat(np.arange(len(first)), counts)
    word = np.repeat(lo_w, counts) + (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts))
    start = word * bits
    hi = np.minimum(last[node], start + bits)
    width = (hi - np.maximum(first[node], start)).astype(np.uint64)
    with np.errstate(over="ignore"):
        ones = np.where(width == WORD, ~np.uint64(0), (np.uint64(1) << (width % np.uint64(WORD))) - np.uint64(1))
    mask = ~(ones << (start + bits - hi).astype(np.uint64))
    if bits == WORD:
        mask = mask.view(np.int64)
    else:
        mask = (mask & np.uint64((1 << bits) - 1)).astype(np.int64)
        mask = np.where(mask >= 1 << (bits - 1), mask - (1 << bits), mask)
    hit[word, node] = True
    cleared[word, node] = mask
    return hit, cleared


__all__ = ["WORD", "MAX_WORDS", "MAX_LEAVES", "NARROW_WORD", "BYTE_WORD", "leaf_spans", "word_applications",
           "all_left_masks"]

"""Profiles: how many rows of a data set reach each node of each tree (the probability-based tiling
draft).

``profile(model, X)`` walks every row through every tree with the HIR semantics of the
reference evaluator, vectorised over rows (one NumPy step per tree level), and counts the visits
of every node, internal nodes and leaves alike.  A node's count divided by the number of rows is
its probability ``p_v``; a parent's count is the sum of its children's.  Probability-based
tiling (:mod:`silvanforge.frontend.tiling`) reads the counts, and its :func:`~silvanforge.frontend.tiling.is_skewed`
tells which trees it tiles (a fraction ``alpha`` of the leaves covers a fraction ``beta`` of
the rows).

File format (``Profile.save``, ``load_profile``), chosen by the file name:

* ``.json``: ``{"format": "silvanforge-profile", "version": 1, "num_rows": N, "fingerprint":
  HEX, "num_features": F, "trees": [[hits of node 0, node 1, ...], ...]}`` (node numbers are the
  HIR's: ``forge show MODEL --level hir`` prints them);
* anything else: a NumPy ``.npz`` archive with ``version``, ``num_rows``, ``num_features``,
  ``fingerprint`` (the hex string's bytes), ``tree_nodes`` (nodes per tree) and ``hits`` (all
  trees' counts, concatenated in tree order), all int64 but the fingerprint.

The fingerprint is the model's (:meth:`Forest.fingerprint`): a profile of another model is refused.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zipfile

import numpy as np

from silvanforge.errors import InputError
from silvanforge.frontend.loading import load_model
from silvanforge.frontend.tiling import ALPHA, BETA, is_skewed, leaves_covering
from silvanforge.ir.hir import ZERO_THRESHOLD, CategoryRule, Forest, Op, Tree
from silvanforge.runtime.reference import category_of
from silvanforge.inputs.rows import as_rows
from silvanforge.runtime.threads import check_rows

PROFILE_FORMAT = "silvanforge-profile"
PROFILE_VERSION = 1


@dataclasses.dataclass
class Profile:
    """Visit counts of every node of every tree over ``num_rows`` rows."""

    num_rows: int
    hits: list[np.ndarray]  # per tree: int64 (num_nodes,)
    fingerprint: str  # the profiled model's Forest.fingerprint()
    num_features: int = 0

    @property
    def num_trees(self) -> int:
        return len(self.hits)

    def leaf_hits(self, forest: Forest, tree: int) -> np.ndarray:
        return self.hits[tree][forest.trees[tree].left < 0]

    def skewed(self, forest: Forest, alpha: float | None = None, beta: float | None = None) -> np.ndarray:
        """Which trees are skewed (bool per tree); see :func:`is_skewed`."""
        a = ALPHA if alpha is None else alpha
        b = BETA if beta is None else beta
        return np.array([is_skewed(t, h, a, b) for t, h in zip(forest.trees, self.hits)], dtype=bool)

    def check(self, forest: Forest, where: str = "profile") -> None:
        """Raise InputError unless this profile was taken on ``forest``."""
        shapes = [len(h) for h in self.hits]
        if shapes != [t.num_nodes for t in forest.trees] or self.fingerprint != forest.fingerprint():
            raise InputError(f"{where} was taken on another model ({self.num_trees} trees, "
                             f"fingerprint {self.fingerprint[:12]}); profile this model with "
                             "`forge profile MODEL --data X.csv`")

    # ---------------------------------------------------------------- files
    def save(self, path) -> None:
        """Write the profile to ``path``: JSON for a ``.json`` name, else ``.npz`` (see module doc)."""
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise InputError(f"cannot write {path}: directory {directory} does not exist")
        try:
            if path.lower().endswith(".json"):
                doc = {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "num_rows": self.num_rows,
                       "num_features": self.num_features, "fingerprint": self.fingerprint,
                       "trees": [h.tolist() for h in self.hits]}
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(doc, f)
            else:
                buf = io.BytesIO()
                np.savez_compressed(
                    buf, version=np.int64(PROFILE_VERSION), num_rows=np.int64(self.num_rows),
                    num_features=np.int64(self.num_features),
                    fingerprint=np.frombuffer(self.fingerprint.encode(), np.uint8),
                    tree_nodes=np.array([len(h) for h in self.hits], np.int64),
                    hits=np.concatenate(self.hits).astype(np.int64) if self.hits else np.zeros(0, np.int64))
                with open(path, "wb") as f:  # a file object: numpy would append ".npz" to a name
                    f.write(buf.getvalue())
        except OSError as exc:
            raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


def load_profile(path) -> Profile:
    """Read a profile written by :meth:`Profile.save`; problems are InputErrors naming the file."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(f"profile file not found: {path}")
    try:
        with open(path, "rb") as f:
            head = f.read(2)
        if head == b"PK":  # a zip: .npz
            with np.load(path, allow_pickle=False) as z:
                if int(z["version"]) != PROFILE_VERSION:
                    raise InputError(f"{path}: profile version {int(z['version'])}, expected {PROFILE_VERSION}")
                nodes = z["tree_nodes"].astype(np.int64)
                flat = z["hits"].astype(np.int64)
                if nodes.sum() != len(flat):
                    raise ValueError("hit counts do not add up to the trees' nodes")
                hits = np.split(flat, np.cumsum(nodes)[:-1]) if len(nodes) else []
                return _valid(path, Profile(int(z["num_rows"]), [np.array(h) for h in hits],
                                            bytes(z["fingerprint"]).decode(), int(z["num_features"])))
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
            raise InputError(f"{path}: not a SilvanForge profile (write one with `forge profile`)")
        if doc.get("version") != PROFILE_VERSION:
            raise InputError(f"{path}: profile version {doc.get('version')}, expected {PROFILE_VERSION}")
        hits = [np.asarray(h, dtype=np.int64) for h in doc["trees"]]
        return _valid(path, Profile(int(doc["num_rows"]), hits, str(doc["fingerprint"]),
                                    int(doc.get("num_features", 0))))
    except InputError:
        raise
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{path}: not a readable SilvanForge profile ({exc})") from None


def _valid(path: str, p: Profile) -> Profile:
    if p.num_rows < 0 or any(h.ndim != 1 or (len(h) and h.min() < 0) for h in p.hits):
        raise InputError(f"{path}: a profile's counts must be non-negative")
    return p


# --------------------------------------------------------------------------- counting
def _goes_left(tree: Tree, node: np.ndarray, x: np.ndarray, rule: CategoryRule) -> np.ndarray:
    """The reference evaluator's decision (:func:`silvanforge.runtime.reference.goes_left`), vectorised
    over rows also for categorical splits (one NumPy step per categorical node, not per row)."""
    thr = tree.threshold[node].astype(x.dtype)
    op = tree.op[node]
    with np.errstate(invalid="ignore"):
        decision = np.select([op == Op.LT, op == Op.LE, op == Op.EQ], [x < thr, x <= thr, x == thr])
    if tree.categories:
        cat_nodes = np.fromiter(tree.categories, dtype=np.int64, count=len(tree.categories))
        is_cat = np.isin(node, cat_nodes)
        if is_cat.any():
            where = np.flatnonzero(is_cat)
            cats = category_of(x[where], rule)
            nodes = node[where]
            in_set = np.zeros(len(where), dtype=bool)
            for c in np.unique(nodes).tolist():
                m = nodes == c
                in_set[m] = (cats[m] >= 0) & np.isin(cats[m], tree.categories[c])
            decision[where] = in_set
    missing = np.isnan(x) | (tree.zero_missing[node] & (x >= -ZERO_THRESHOLD) & (x <= ZERO_THRESHOLD))
    return np.where(missing, tree.default_left[node], decision)


def tree_hits(tree: Tree, X: np.ndarray, rule: CategoryRule) -> np.ndarray:
    """Visits of every node of ``tree`` by the rows of ``X`` (already in the comparison dtype)."""
    hits = np.zeros(tree.num_nodes, dtype=np.int64)
    rows = np.arange(X.shape[0])
    node = np.zeros(X.shape[0], dtype=np.int64)
    while node.size:
        hits += np.bincount(node, minlength=tree.num_nodes)
        inner = tree.left[node] >= 0
        rows, node = rows[inner], node[inner]
        if not node.size:
            break
        left = _goes_left(tree, node, X[rows, tree.feature[node]], rule)
        node = np.where(left, tree.left[node], tree.right[node]).astype(np.int64)
    return hits


def profile(model, X, *, check_features: bool = True) -> Profile:
    """Profile ``model`` (a model file, a HIR Forest or a CompiledForest) on the rows ``X``:
    per tree, how many rows visit each node (see the module doc).  ``X``: rows as ``predict``
    takes them; ``check_features=False``: rows the kernels read already (a model's computed
    columns in them), as the tuner holds them."""
    if isinstance(model, Forest):
        forest = model
    elif hasattr(model, "forest") and isinstance(model.forest, Forest):
        forest = model.forest
    else:
        forest = load_model(model)
    # (as predict reads them: frames, records, and a model's computed columns made from its input)
    dtype = np.dtype(forest.threshold_dtype)
    rows = as_rows(X, forest, dtype) if check_features else check_rows(X, forest.num_features, dtype)
    hits = [tree_hits(t, rows, forest.category_rule) for t in forest.trees]
    return Profile(int(rows.shape[0]), hits, forest.fingerprint(), forest.num_features)


def as_profile(value, forest: Forest) -> Profile:
    """A Profile from a Profile or a path, checked to belong to ``forest``."""
    if isinstance(value, Profile):
        p, where = value, "the profile"
    elif isinstance(value, (str, os.PathLike)):
        p, where = load_profile(value), os.fspath(value)
    else:
        raise InputError(f"profile must be a Profile or the path of a profile file, got {type(value).__name__}")
    p.check(forest, where)
    return p


# --------------------------------------------------------------------------- skew
def summary(forest: Forest, p: Profile, alpha: float | None = None, beta: float | None = None) -> dict:
    """What ``forge profile`` prints: skewed trees and how concentrated the leaves are."""
    a = ALPHA if alpha is None else alpha
    b = BETA if beta is None else beta
    skewed = p.skewed(forest, a, b)
    fractions, unreached, leaves_total = [], 0, 0
    for t, h in zip(forest.trees, p.hits):
        leaf = h[t.left < 0]
        leaves_total += len(leaf)
        unreached += int(np.count_nonzero(leaf == 0))
        if leaf.sum():
            fractions.append(leaves_covering(leaf, b) / len(leaf))
    return {"rows": p.num_rows, "trees": p.num_trees, "skewed": int(skewed.sum()), "alpha": a, "beta": b,
            "leaves": leaves_total, "unreached_leaves": unreached,
            "median_leaf_fraction": float(np.median(fractions)) if fractions else 0.0}

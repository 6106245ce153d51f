"""LightGBM text models (``Booster.save_model`` / ``model_to_string``) -> HIR Forest.

A file is a header of ``key=value`` lines starting with ``tree`` and ``version=vN``, one
``Tree=i`` block per tree, ``end of trees``, and then sections (feature importances,
parameters) that do not affect predictions.  Each tree stores its internal nodes and its
leaves in separate arrays; a child index ``c < 0`` means leaf ``~c``.

How LightGBM predicts, and how each rule is canonicalised into the HIR (:mod:`silvanforge.ir.hir`):

* Inputs are widened to float64 and compared with float64 thresholds, ``x <= threshold`` goes
  left.  Before any tree sees a row, LightGBM's dense-row reader drops values with
  ``|x| <= kZeroThreshold`` (``1e-35f`` widened to double), so they reach the trees as 0.0.
  For a threshold ``t`` the numerical decision is therefore ``zeroed(x) <= t``; rewriting
  ``t`` in ``[-kZ, 0)`` to the double below ``-kZ`` and ``t`` in ``[0, kZ)`` to ``kZ`` makes
  it ``x <= t'`` for every ``x`` (all other thresholds are unchanged).
* ``decision_type`` bit 0: categorical; bit 1: default left; bits 2-3: missing type.
  - missing type NaN: NaN takes the default direction -> ``default_left`` from the bit.
  - missing type Zero: NaN becomes 0, and zero takes the default direction ->
    ``zero_missing`` plus ``default_left`` from the bit.
  - missing type None: NaN becomes 0.0 and is then compared -> a fixed default direction
    ``default_left = (0.0 <= t)``.
* Categorical splits: ``int(threshold)`` indexes ``cat_boundaries`` into the 32-bit words of
  ``cat_threshold``; a category whose bit is set goes left, anything else (NaN, negatives,
  categories past the bitset) goes right; values truncate toward zero
  (:attr:`CategoryRule.LIGHTGBM`).
* Tree ``i`` adds to output ``i % num_tree_per_iteration``; margins are float64 sums from 0
  in tree order (``boost_from_average`` is already in the first trees' leaves).  For
  ``average_output`` (``boosting=rf``) the margin (``raw_score``) stays that sum and ``predict``
  divides it by the number of iterations before the transform (``margin_divisor``).
* The objective line names the output transform (see ``_transform``).

* Linear trees (``is_linear=1``, ``linear_tree=True``): each leaf also holds a linear model,
  ``leaf_const``, ``num_features`` (terms a leaf), ``leaf_features`` and ``leaf_coeff`` (every
  leaf's terms in turn), read as LightGBM's ``Tree`` reads them (a missing ``leaf_const`` or
  ``num_features`` is zeros) into :class:`silvanforge.ir.hir.LinearLeaves`, whose rule is
  LightGBM's ``Tree::Predict`` (a NaN among a leaf's features gives its ``leaf_value``).  A
  single-leaf tree is linear too.  Counts that do not add up, features outside the model and
  non-finite constants or coefficients are refused, naming the tree and the field.

The file is read as LightGBM reads it (its lines, trees of at most 22 lines ended by a blank
line, ``tree_sizes`` byte offsets, numbers in the forms it writes); an edited file that LightGBM
would read another way than its lines say (a tree ``tree_sizes`` does not lead to, ``0x10`` or
``1_0`` for a number) is refused, never read one way when LightGBM reads it another.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

import numpy as np

from silvanforge.errors import ModelFormatError, UnsupportedModelError
from silvanforge.frontend.loading import read_model_file
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, LinearLeaves, Transform, Tree

from .nodes import joined_trees, node_arrays
from .text_arrays import I64, plain_lists, set_bits, split_lines

# Outputs a model may have beyond its number of trees (each costs memory for every row).
_FREE_OUTPUTS = 4096
# LightGBM's Tree reads at most this many key=value lines of a tree block.
_TREE_LINES = 22
# Numbers as LightGBM writes them (and reads them the same way Python does); anything else
# (hex, underscores, trailing text, which LightGBM's parsers read differently) is refused.
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|nan|inf|infinity)",
                    re.IGNORECASE)
# Whole space-separated lists of them, checked in one match (a match per token took half of a
# 1000-tree 255-leaf model's load).
_INT_LIST = re.compile(rf" *(?:{_INT.pattern})(?: +(?:{_INT.pattern}))* *")
_FLOAT_LIST = re.compile(rf" *(?:{_FLOAT.pattern})(?: +(?:{_FLOAT.pattern}))* *", re.IGNORECASE)
# The lists a tree's nodes are read from, and their types: parsed a field at a time over every
# tree (:meth:`_Parser.lists`).
_JOINED = {"num_leaves": np.int64, "num_cat": np.int64, "leaf_value": np.float64, "split_feature": np.int64,
           "threshold": np.float64, "decision_type": np.int64, "left_child": np.int64, "right_child": np.int64,
           "internal_count": np.int64, "leaf_count": np.int64, "cat_boundaries": np.int64, "cat_threshold": np.int64}
_PLAIN_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


# Objective name (and its aliases) -> transform name; "regression-like" ones honour "sqrt".
_SQRT_CAPABLE = {"regression", "regression_l1", "huber", "fair", "quantile", "mape"}
_IDENTITY = _SQRT_CAPABLE | {"lambdarank", "rank_xendcg", "custom"}
_EXP = {"poisson", "gamma", "tweedie"}
_ALIASES = {
    "regression_l2": "regression", "l2": "regression", "mean_squared_error": "regression",
    "mse": "regression", "l2_root": "regression", "root_mean_squared_error": "regression",
    "rmse": "regression", "l1": "regression_l1", "mean_absolute_error": "regression_l1",
    "mae": "regression_l1", "mean_absolute_percentage_error": "mape",
    "xentropy": "cross_entropy", "xentlambda": "cross_entropy_lambda",
    "softmax": "multiclass", "multiclass_ova": "multiclassova", "ova": "multiclassova",
    "ovr": "multiclassova", "xendcg": "rank_xendcg", "xe_ndcg": "rank_xendcg",
    "xe_ndcg_mart": "rank_xendcg", "xendcg_mart": "rank_xendcg", "none": "custom",
    "null": "custom", "na": "custom",
}


def detect(path, head) -> bool:
    """A LightGBM text model starts with a ``tree`` line and has a ``version=v`` header line."""
    try:
        if isinstance(head, str):
            head = head.encode("utf-8", "replace")
        h = bytes(head)
        if h.startswith(b"\xef\xbb\xbf"):
            h = h[3:]
        h = h.lstrip()
        first, _, rest = h.partition(b"\n")
        return first.strip() == b"tree" and b"version=v" in rest
    except Exception:  # never raise for files that are not ours
        return False


def load(path) -> Forest:
    """Import the LightGBM text model at ``path``."""
    return loads(read_model_file(path, "LightGBM model"), os.fspath(path))


def loads(data: bytes | str, name: str = "the model") -> Forest:
    """Import a LightGBM text model from its contents (``Booster.model_to_string()``); ``name``
    is what error messages call it."""
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ModelFormatError(
                f"{name}: not a LightGBM text model (byte {exc.start} is not UTF-8 text)"
            ) from exc
    return _Parser(name).parse(text)


class _Parser:
    def __init__(self, path: str):
        self.path = path

    def fail(self, msg: str):
        raise ModelFormatError(f"{self.path}: {msg}")

    # ------------------------------------------------------------------ file structure
    def parse(self, text: str) -> Forest:
        """The file read the way LightGBM's ``GBDT::LoadModelFromString`` reads it: lines end at
        ``\\n``, ``\\r\\n`` or ``\\r``; the header runs to the first ``Tree=`` line; a tree is
        at most 22 ``key=value`` lines up to a blank line; with ``tree_sizes`` LightGBM finds the
        trees by byte offsets.  What LightGBM would read differently from the lines as they
        stand (a tree where ``tree_sizes`` does not put it, a line without ``=`` inside a tree)
        is refused, never read another way."""
        text = text.lstrip("\ufeff")
        if "\0" in text:  # LightGBM's line reader stops at NUL (and loops there)
            self.fail("not a LightGBM text model (the file holds a NUL byte)")
        offsets, lines = split_lines(text)
        first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
        if first is None or lines[first].strip() != "tree":
            self.fail("not a LightGBM text model (the first line is not 'tree')")
        header: dict[str, str] = {}
        i = first + 1
        n = len(lines)
        while i < n and not lines[i].startswith("Tree="):
            ln = lines[i]
            parts = [part for part in ln.split("=") if part]
            if len(parts) == 1:
                header[parts[0]] = ""
            elif len(parts) == 2:
                header[parts[0]] = parts[1]
            elif parts and parts[0] in ("feature_names", "monotone_constraints"):
                header[parts[0]] = ln[len(parts[0]) + 1:]
            elif parts:
                self.fail(f"line {i + 1}: header line {ln[:40]!r} has several '='")
            i += 1
        if "version" not in header or not header["version"].startswith("v"):
            self.fail("not a LightGBM text model (no 'version=v...' header line)")

        if "end of trees" not in lines:
            started = sum(1 for ln in lines[i:] if ln.startswith("Tree="))
            self.fail(f"the file is truncated: no 'end of trees' line after {started} tree block(s)")

        blocks: list[tuple[int, dict[str, str]]] = []
        starts: list[int] = []
        while True:
            while i < n and not lines[i]:
                i += 1
            if i >= n or not lines[i].startswith("Tree="):
                break
            start_line = i + 1
            label = lines[i][len("Tree="):]
            expect = len(blocks)
            if not label.isascii() or not label.isdigit():
                self.fail(f"line {start_line}: malformed tree header {lines[i][:40]!r}")
            if int(label) != expect:
                self.fail(f"line {start_line}: found Tree={label} where Tree={expect} was expected")
            starts.append(i)
            block: dict[str, str] = {}
            i += 1
            count = 0
            while i < n and lines[i]:
                key, eq, value = lines[i].partition("=")
                if not eq:
                    self.fail(f"line {i + 1}: unexpected text {lines[i][:40]!r} in tree block")
                if count == _TREE_LINES:
                    self.fail(f"line {i + 1}: Tree={expect} has more than {_TREE_LINES} lines "
                              "(LightGBM reads no more)")
                block[key] = value
                count += 1
                i += 1
            blocks.append((start_line, block))
        if i >= n and not blocks:  # no tree at all: the header ran through 'end of trees'
            i = lines.index("end of trees")
        elif i >= n:
            self.fail(f"the file is truncated: no 'end of trees' line after {len(blocks)} tree block(s)")
        # A tree ends at its first blank line: what follows that is not a tree is reported after
        # the trees read so far (a tree cut short by a blank line is missing a field).
        forest = self.build(header, blocks)
        if lines[i] != "end of trees":
            self.fail(f"line {i + 1}: unexpected text {lines[i][:40]!r} between trees")
        if "tree_sizes" in header:
            self.check_tree_sizes(header["tree_sizes"], [offsets[k] for k in starts])
        forest.feature_categories = self.pandas_categories(lines[i:], forest.num_features)
        if forest.feature_names == [f"Column_{j}" for j in range(forest.num_features)]:
            # LightGBM's names for a model trained without names: it predicts by position, so do we.
            forest.feature_names = None
        return forest

    def check_tree_sizes(self, value: str, starts: list[int]) -> None:
        """LightGBM reads tree ``k`` at the first tree's byte offset plus the sizes before it:
        they must lead to the tree blocks as they stand."""
        sizes = [t for t in value.split(" ") if t]
        if len(sizes) != len(starts):
            self.fail(f"tree_sizes lists {len(sizes)} trees but the file has {len(starts)} tree "
                      "blocks (truncated or edited?)")
        if not all(t.isascii() and t.isdigit() for t in sizes):
            self.fail(f"tree_sizes {value[:40]!r} is not a list of byte counts")
        at = starts[0] if starts else 0
        for k, (size, start) in enumerate(zip(sizes, starts)):
            if start != at:
                self.fail(f"tree_sizes puts Tree={k} at byte {at}, but it starts at byte {start} "
                          "(edited file?)")
            at += int(size)

    def pandas_categories(self, tail: list[str], num_features: int) -> dict[int, list] | None:
        """The category labels of features trained from pandas ``category`` columns.

        LightGBM writes ``pandas_categorical:`` (one label list per categorical column, in column
        order) after the parameters and ``[categorical_feature: i,j]`` among them; its predict
        maps a frame's categorical columns through the lists in order.  When the two counts
        differ (categorical features given as integer codes too) the lists cannot be tied to
        features, and frames' categorical columns are read by their own codes."""
        cats = next((ln[len("pandas_categorical:"):] for ln in tail
                     if ln.startswith("pandas_categorical:")), None)
        if cats is None:
            return None
        try:
            lists = json.loads(cats)
        except ValueError:
            self.fail("the pandas_categorical line is not JSON")
        if not lists:
            return None
        if not isinstance(lists, list) or not all(isinstance(c, list) for c in lists):
            self.fail("pandas_categorical is not a list of category lists")
        param = next((ln[len("[categorical_feature:"):-1] for ln in tail
                      if ln.startswith("[categorical_feature:") and ln.endswith("]")), "")
        try:
            features = [int(t) for t in param.replace(",", " ").split()]
        except ValueError:
            return None  # categorical features given by name: no index to tie the lists to
        if len(features) != len(lists) or not all(0 <= f < num_features for f in features):
            return None
        return {f: list(labels) for f, labels in zip(features, lists)}

    # ------------------------------------------------------------------ header
    def header_int(self, header, key, default=None) -> int:
        if key not in header:
            if default is None:
                self.fail(f"the header has no '{key}=' line")
            return default
        value = header[key].strip(" ")
        if not _INT.fullmatch(value) or not -2**31 <= int(value) < 2**31:
            self.fail(f"header '{key}={header[key][:40]}' is not a 32-bit integer")
        return int(value)

    def build(self, header, blocks) -> Forest:
        num_class = self.header_int(header, "num_class", 1)
        k = self.header_int(header, "num_tree_per_iteration", num_class)
        if num_class < 1 or k < 1:
            self.fail(f"num_class={num_class} and num_tree_per_iteration={k} must be positive")
        if num_class != k:  # LightGBM writes num_class columns but fills k of them
            self.fail(f"num_class={num_class} differs from num_tree_per_iteration={k}")
        num_features = self.header_int(header, "max_feature_idx") + 1
        if num_features < 1:
            self.fail(f"max_feature_idx={num_features - 1} is negative")
        names = header.get("feature_names")
        if names is None:  # (LightGBM refuses such a file; its feature count is then unchecked)
            self.fail("the header has no feature_names line, which LightGBM requires")
        feature_names = [t for t in names.split(" ") if t]
        if feature_names is not None and len(feature_names) != num_features:
            self.fail(
                f"feature_names has {len(feature_names)} names for {num_features} features "
                f"(max_feature_idx={num_features - 1})"
            )
        if k > max(_FREE_OUTPUTS, len(blocks)):
            raise UnsupportedModelError(
                f"{self.path}: num_tree_per_iteration={k} for a model of {len(blocks)} trees: at "
                f"most {max(_FREE_OUTPUTS, len(blocks))} outputs are supported here")
        if len(blocks) % k:
            self.fail(f"{len(blocks)} trees is not a multiple of num_tree_per_iteration={k}")

        objective, transform = self.objective(header.get("objective"), k)

        lists = self.lists(blocks)
        trees = self.joined_trees(blocks, lists, num_features, k)
        if trees is None:  # (a tree to refuse, or one read otherwise: a tree at a time)
            trees = [self.tree(idx, line, block, num_features, idx % k, parsed)
                     for idx, ((line, block), parsed) in enumerate(zip(blocks, lists))]
        average = "average_output" in header
        iterations = len(blocks) // k
        if average and iterations == 0:
            self.fail("an average_output (random forest) model without trees")
        return Forest(
            trees=trees,
            num_features=num_features,
            num_outputs=k,
            base_score=np.zeros(k),
            aggregation=Aggregation.SUM,
            # raw_score of an average_output model is the plain sum; predict divides it first.
            transform=dataclasses.replace(
                transform, params=transform.params + (("margin_divisor", float(iterations)),))
            if average else transform,
            threshold_dtype="float64",
            accumulate_dtype="float64",
            category_rule=CategoryRule.LIGHTGBM,
            feature_names=feature_names,
            source="lightgbm",
            objective=objective,
        )

    def objective(self, line: str | None, k: int) -> tuple[str, Transform]:
        """The objective's name and the transform LightGBM's ConvertOutput applies."""
        if line is None or not line.strip():
            # Models trained with a custom objective have no objective line; predict is raw.
            return "custom", Transform("identity")
        tokens = [t for t in line.split(" ") if t]  # LightGBM splits on spaces only
        name = _ALIASES.get(tokens[0], tokens[0])
        params: dict[str, str] = {}
        bare: set[str] = set()
        for tok in tokens[1:]:
            key, colon, value = tok.partition(":")
            if colon:
                params[key] = value
            else:
                bare.add(tok)

        def number(key: str) -> float:
            if key not in params:
                self.fail(f"objective '{line}' has no '{key}:' parameter")
            if not _PLAIN_FLOAT.fullmatch(params[key]):
                self.fail(f"objective '{line}': '{key}:{params[key]}' is not a number")
            return float(params[key])

        def sigmoid_alpha() -> Transform:
            alpha = number("sigmoid")
            if not alpha > 0:
                self.fail(f"objective '{line}': sigmoid parameter must be positive")
            return Transform("sigmoid", (("alpha", alpha),))

        def check_classes():
            n = number("num_class")
            if n != k:
                self.fail(f"objective '{line}' has num_class:{params['num_class']} but the model "
                          f"has num_tree_per_iteration={k}")

        if k != 1 and name not in ("multiclass", "multiclassova"):
            self.fail(f"objective {name!r} with num_tree_per_iteration={k} (expected 1)")
        if name in _SQRT_CAPABLE:
            return name, Transform("signed_square" if "sqrt" in bare else "identity")
        if name in _IDENTITY:
            return name, Transform("identity")
        if name in _EXP:
            return name, Transform("exp")
        if name == "binary":
            return name, sigmoid_alpha()
        if name == "multiclass":
            check_classes()
            return name, Transform("softmax")
        if name == "multiclassova":
            check_classes()
            return name, sigmoid_alpha()
        if name == "cross_entropy":
            return name, Transform("sigmoid")
        if name == "cross_entropy_lambda":
            return name, Transform("log1p_exp")
        raise UnsupportedModelError(f"{self.path}: LightGBM objective {tokens[0]!r} is not supported")

    # ------------------------------------------------------------------ trees
    def lists(self, blocks) -> list[dict[str, np.ndarray]]:
        """Each tree's lists of the fields :data:`_JOINED` names, parsed a field at a time over
        every tree (:func:`.text_arrays.plain_lists`); a field whose lists are not all plain is left out, for
        :meth:`array` to read (or refuse) a list at a time."""
        parsed: list[dict[str, np.ndarray]] = [{} for _ in blocks]
        for key, dtype in _JOINED.items():
            have = [k for k, (_, block) in enumerate(blocks) if key in block]
            arrays = plain_lists([blocks[k][1][key] for k in have], dtype)
            for k, arr in zip(have, arrays or ()):
                parsed[k][key] = arr
        return parsed

    def array(self, block, key, dtype, length, where, lists=None):
        """The list ``key`` of a tree's ``block`` as an array of ``dtype`` (``length`` entries
        unless None); ``lists``: the tree's lists parsed already (:meth:`lists`)."""
        if key not in block:
            self.fail(f"{where}: missing '{key}=' (truncated file?)")
        arr = lists.get(key) if lists else None
        if arr is not None and (length is None or len(arr) == length):
            return arr
        text = block[key]
        # A list the pattern matches is parsed by NumPy in C, as float() and int() do (checked
        # in the tests); NumPy clamps an integer past int64 to its limits, so a list reaching
        # them takes the checked path below.
        arr = None
        if (_INT_LIST if dtype is np.int64 else _FLOAT_LIST).fullmatch(text):
            arr = np.fromstring(text, dtype=dtype, sep=" ")
            if dtype is np.int64 and len(arr) and (arr.max() == I64.max or arr.min() == I64.min):
                arr = None
        if arr is not None:
            if length is not None and len(arr) != length:
                self.fail(f"{where}: '{key}' has {len(arr)} entries, expected {length} (truncated file?)")
            return arr
        tokens = [t for t in text.split(" ") if t]  # LightGBM splits on spaces only
        pattern = _INT if dtype is np.int64 else _FLOAT
        bad = next((t for t in tokens if not pattern.fullmatch(t)
                    or (dtype is np.int64 and not -2**63 <= int(t) < 2**63)), None)
        if bad is not None:
            kind = "an integer" if dtype is np.int64 else "a number"
            self.fail(f"{where}: '{key}' holds {bad[:30]!r}, which is not {kind}")
        arr = np.array([int(t) if dtype is np.int64 else float(t) for t in tokens], dtype=dtype)
        if length is not None and len(arr) != length:
            self.fail(f"{where}: '{key}' has {len(arr)} entries, expected {length} (truncated file?)")
        return arr

    def tree(self, idx, line, block, num_features, output, lists=None) -> Tree:
        where = f"Tree={idx} (line {line})"
        is_linear = block.get("is_linear", "0").strip()
        if is_linear not in ("0", "1"):
            self.fail(f"{where}: is_linear={is_linear[:20]!r} is neither 0 nor 1")
        num_leaves = int(self.array(block, "num_leaves", np.int64, 1, where, lists)[0])
        if num_leaves < 1:
            self.fail(f"{where}: num_leaves={num_leaves} must be at least 1")
        num_cat = int(self.array(block, "num_cat", np.int64, 1, where, lists)[0]) if "num_cat" in block else 0
        n_int = num_leaves - 1
        leaf_value = self.array(block, "leaf_value", np.float64, num_leaves, where, lists)
        categories: dict[int, np.ndarray] = {}
        split_feature, dtype, lc, rc = (np.zeros(0, np.int64) for _ in range(4))
        thr = np.zeros(0)
        if n_int:
            split_feature = self.array(block, "split_feature", np.int64, n_int, where, lists)
            thr = self.array(block, "threshold", np.float64, n_int, where, lists)
            dtype = self.array(block, "decision_type", np.int64, n_int, where, lists)
            lc = self.array(block, "left_child", np.int64, n_int, where, lists)
            rc = self.array(block, "right_child", np.int64, n_int, where, lists)
            bad = (split_feature < 0) | (split_feature >= num_features)
            if bad.any():
                self.fail(f"{where}: split_feature {int(split_feature[bad][0])} is outside "
                          f"0..{num_features - 1}")
            if ((dtype < 0) | (dtype > 15)).any():
                self.fail(f"{where}: unknown decision_type {int(dtype[(dtype < 0) | (dtype > 15)][0])}")
            for name, c in (("left_child", lc), ("right_child", rc)):
                bad = (c >= n_int) | (c < -num_leaves)
                if bad.any():
                    self.fail(f"{where}: {name} {int(c[bad][0])} refers to no node "
                              f"({n_int} internal nodes, {num_leaves} leaves)")
            missing = (dtype >> 2) & 3
            if (missing == 3).any():
                self.fail(f"{where}: decision_type {int(dtype[missing == 3][0])} has an unknown missing type")
            is_cat = (dtype & 1).astype(bool)
            if is_cat.any():
                categories = self.categories(block, where, num_cat, thr, np.flatnonzero(is_cat), lists)
        elif num_cat:
            self.fail(f"{where}: num_cat={num_cat} in a tree without splits")

        nodes = node_arrays(np.array([num_leaves]), split_feature, thr, dtype, lc, rc, leaf_value)
        linear = self.linear(block, where, num_leaves, num_features, n_int) if is_linear == "1" else None
        return Tree(**nodes, outputs=(output,), categories=categories, linear=linear,
                    cover=self.cover(block, where, n_int, num_leaves, lists))

    def joined_trees(self, blocks, lists, num_features, k) -> list[Tree] | None:
        """Every tree read at once where each is plain (:func:`.nodes.joined_trees`), else None."""
        return joined_trees(blocks, lists, num_features, k)

    def cover(self, block, where, n_int, num_leaves, lists=None) -> np.ndarray | None:
        """The training rows that reached each node (internal nodes, then leaves), the order of
        the untuned plan's one-row walks; None where the file has none (hand-written) or they do
        not read as counts: they never change a prediction, so they never refuse a model."""
        if "leaf_count" not in block or (n_int and "internal_count" not in block):
            return None
        try:
            counts = [self.array(block, "internal_count", np.int64, n_int, where, lists)] if n_int else []
            return np.concatenate(counts + [self.array(block, "leaf_count", np.int64, num_leaves, where, lists)]).astype(np.float64)
        except ModelFormatError:
            return None

    def linear(self, block, where, num_leaves, num_features, n_int) -> LinearLeaves:
        """The leaves' linear models of a tree with ``is_linear=1`` (module docstring); leaf ``k``
        is node ``n_int + k``."""
        const = (self.array(block, "leaf_const", np.float64, num_leaves, where) if "leaf_const" in block
                 else np.zeros(num_leaves))
        counts = (self.array(block, "num_features", np.int64, num_leaves, where) if "num_features" in block
                  else np.zeros(num_leaves, np.int64))
        if (counts < 0).any():
            self.fail(f"{where}: 'num_features' holds {int(counts[counts < 0][0])}, a negative count of terms")
        total = int(counts.sum())
        if total:
            for key in ("leaf_features", "leaf_coeff"):
                if key not in block:
                    self.fail(f"{where}: 'num_features' counts {total} terms but there is no '{key}=' line")
            features = self.array(block, "leaf_features", np.int64, total, where)
            coeff = self.array(block, "leaf_coeff", np.float64, total, where)
        else:
            features, coeff = np.zeros(0, np.int64), np.zeros(0)
        bad = (features < 0) | (features >= num_features)
        if bad.any():
            self.fail(f"{where}: 'leaf_features' holds feature {int(features[bad][0])}, outside "
                      f"0..{num_features - 1}")
        for key, arr in (("leaf_const", const), ("leaf_coeff", coeff)):
            if not np.isfinite(arr).all():
                self.fail(f"{where}: '{key}' holds {float(arr[~np.isfinite(arr)][0])!r}, which is not finite")
        n = n_int + num_leaves
        sizes = np.zeros(n, np.int64)
        sizes[n_int:] = counts
        full_const = np.zeros(n)
        full_const[n_int:] = const
        return LinearLeaves(const=full_const, begin=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                            feature=features.astype(np.int32), coeff=coeff)

    def categories(self, block, where, num_cat, thr, nodes, lists=None) -> dict[int, np.ndarray]:
        if num_cat < 1:
            self.fail(f"{where}: categorical splits but num_cat={num_cat}")
        bounds = self.array(block, "cat_boundaries", np.int64, num_cat + 1, where, lists)
        words = self.array(block, "cat_threshold", np.int64, None, where, lists)
        if bounds[0] != 0 or (np.diff(bounds) < 0).any() or bounds[-1] != len(words):
            self.fail(f"{where}: cat_boundaries {bounds.tolist()[:8]} do not partition the "
                      f"{len(words)} words of cat_threshold")
        if ((words < 0) | (words >= 2**32)).any():
            self.fail(f"{where}: cat_threshold holds a value that is not a 32-bit word")
        t = thr[nodes]
        with np.errstate(invalid="ignore"):
            bad = ~(np.isfinite(t) & (t >= 0) & (t < num_cat))
        if bad.any():
            node = int(nodes[bad][0])
            self.fail(f"{where}: categorical split {node} refers to bitset {thr[node]!r} of {num_cat}")
        ci = t.astype(np.int64)  # (finite and non-negative: truncated as int() does)
        return dict(zip(nodes.tolist(), set_bits(words, bounds[ci] * 32, bounds[ci + 1] * 32)))


"""HistGradientBoostingClassifier / HistGradientBoostingRegressor
(``sklearn/ensemble/_hist_gradient_boosting``: ``gradient_boosting.py``, ``_predictor.pyx``).

``_raw_predict`` fills float64 margins with ``_baseline_prediction`` and adds the predictors
of every iteration in order, predictor ``k`` of an iteration to column ``k`` (``Aggregation.SUM``
from the baseline, in float64).  A predictor walks its ``nodes`` on rows widened to float64
(``threshold_dtype="float64"``):

* NaN goes to the side ``missing_go_to_left`` names;
* a numerical node sends ``x <= num_threshold`` left (``num_threshold`` may be +inf: a split
  of the numbers from the NaNs);
* a categorical node tests ``raw_left_cat_bitsets[bitset_idx]``: a category in it goes left,
  another known category (``known_cat_bitsets``) right, anything else is treated as missing.

Categorical features pass through ``_preprocessor`` first (scikit-learn >= 1.4: an
``OrdinalEncoder`` in a ``ColumnTransformer``): raw values are matched *exactly* against the
training categories (``encoder.categories_``) and become their position, the code; anything
unmatched (unknown, fractional, NaN) becomes NaN.  The transformer also puts the categorical
columns first, so predictor feature indices are mapped back to input columns here.

In the HIR a categorical split names the categories that go left, and a value that is no
category goes right.  Both directions of sklearn's missing values come out exactly:

* missing goes right: the left set as it is; NaN right (``default_left`` False);
* missing goes left: the complement of the left set among the known categories, with the
  children swapped, so "known and not left" is the only way to the (new) left; unknowns, NaN
  and values that are no category all reach the old left child on the right.

Which categories the HIR names (``CategoryRule.EXACT``: a value is a category only if it is an
exact non-negative integer):

* numeric training categories that are non-negative integers: the raw values themselves, so
  numpy input is matched as the encoder matches it (``2.5``, ``-1`` or an unseen ``7`` are no
  category, i.e. missing).  ``Forest.feature_categories`` then lists ``0 .. max`` as labels
  (label ``v`` is category ``v``), so a pandas ``category`` column of those numbers maps to
  the same values (up to ``IDENTITY_LABELS_MAX`` labels; beyond, none are listed);
* any other numeric categories (negative, fractional): refused, since no HIR rule matches
  them exactly on numeric input;
* non-numeric categories (strings from pandas ``category`` columns, ``categorical_features=
  "from_dtype"``): the codes, with the labels in code order in ``Forest.feature_categories``
  (``predict`` maps a frame's labels through them; an unseen label is missing, as in sklearn).
  Numeric input for such a feature is read as codes.

Before scikit-learn 1.4 (which brought the encoder) the predictors read raw category values
themselves, negative ones as missing: models with categorical features fitted by those
versions (no ``_preprocessor``) are refused rather than read by rules they did not follow.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from silvanforge.errors import UnsupportedModelError
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, Op, Tree

from . import links, metadata

# Feature categories listed as 0 .. max for numeric categories up to this many labels.
IDENTITY_LABELS_MAX = 1 << 16
_EXACT_HIGH = CategoryRule.EXACT.bounds[2]


@dataclasses.dataclass
class _Categorical:
    """One categorical feature: the training categories in code order, and whether the HIR
    names them by their values (numeric) or by their codes (labels)."""

    labels: list
    by_value: bool

    def hir_categories(self, codes: np.ndarray) -> np.ndarray:
        if self.by_value:
            return np.array([int(self.labels[c]) for c in codes], dtype=np.int64)
        return np.asarray(codes, dtype=np.int64)


def read(est, classifier: bool) -> Forest:
    k = int(est.n_trees_per_iteration_)
    n_features = int(est.n_features_in_)
    column_of, categorical = _columns(est, n_features)
    known = _known_categories(est, categorical)
    trees = [_tree(p, out, column_of, categorical, known, est)
             for iteration in est._predictors for out, p in enumerate(iteration)]
    feature_categories = {}
    for j, cat in categorical.items():
        if not cat.by_value:
            feature_categories[int(column_of[j])] = cat.labels
        elif cat.labels and max(cat.labels) < IDENTITY_LABELS_MAX:
            feature_categories[int(column_of[j])] = list(range(int(max(cat.labels)) + 1))
    # Classifiers' predict_proba and regressors' predict are both the loss's inverse link, on
    # margins kept in Fortran order.
    transform = links.transform_for(est, fortran_margins=True)
    return Forest(
        trees=trees,
        num_features=n_features,
        num_outputs=k,
        base_score=np.asarray(est._baseline_prediction, dtype=np.float64).reshape(k).copy(),
        aggregation=Aggregation.SUM,
        transform=transform,
        threshold_dtype="float64",
        accumulate_dtype="float64",
        category_rule=CategoryRule.EXACT,
        output_shape="auto",
        feature_categories=feature_categories or None,
        **metadata.of(est, classifier, f"loss={est.loss!r}"),
    )


def _columns(est, n_features: int) -> tuple[np.ndarray, dict[int, _Categorical]]:
    """Input column of each predictor feature, and the categorical ones (by predictor index)."""
    pre = getattr(est, "_preprocessor", None)
    if pre is None:
        if getattr(est, "is_categorical_", None) is not None and np.any(est.is_categorical_):
            raise UnsupportedModelError(
                f"the {type(est).__name__} has categorical features but was fitted with "
                "scikit-learn older than 1.4 (no category encoder), whose category rules "
                "SilvanForge does not reproduce; refit it with scikit-learn >= 1.4")
        return np.arange(n_features), {}
    column_of = np.full(n_features, -1, dtype=np.int64)
    categorical: dict[int, _Categorical] = {}
    for name, transformer, columns in pre.transformers_:
        out = pre.output_indices_[name]
        cols = np.asarray(columns)
        cols = np.flatnonzero(cols) if cols.dtype == bool else cols.astype(np.int64)
        if out.stop - out.start != len(cols):
            raise UnsupportedModelError(
                f"the {type(est).__name__}'s preprocessor step {name!r} maps {len(cols)} "
                f"columns to {out.stop - out.start} features")
        column_of[out.start:out.stop] = cols
        if name == "encoder":
            for j, (col, cats) in enumerate(zip(cols, transformer.categories_)):
                categorical[out.start + j] = _categorical(est, int(col), cats)
    if (column_of < 0).any() or len(set(column_of.tolist())) != n_features:
        raise UnsupportedModelError(
            f"the {type(est).__name__}'s preprocessor does not map its {n_features} input "
            "columns one to one onto the predictors' features")
    return column_of, categorical


def _categorical(est, column: int, categories) -> _Categorical:
    labels = [metadata.plain(c) for c in categories]
    # The encoder lists NaN last when the training column had missing values; the
    # predictors treat NaN as missing, not as a category.
    if labels and isinstance(labels[-1], float) and labels[-1] != labels[-1]:
        labels = labels[:-1]
    if labels and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in labels):
        bad = [v for v in labels if not (0 <= v < _EXACT_HIGH and float(v).is_integer())]
        if bad:
            raise UnsupportedModelError(
                f"categorical feature {_name(est, column)} of the {type(est).__name__} has "
                f"categories that are not non-negative integers ({bad[:5]}); SilvanForge matches "
                "numeric categories as non-negative integers only: recode the feature (for "
                "example as a pandas 'category' column of strings, or as codes 0, 1, 2, ...)")
        return _Categorical([int(v) for v in labels], by_value=True)
    odd = [v for v in labels if not isinstance(v, (str, bool, int, float))]
    if odd:
        raise UnsupportedModelError(
            f"categorical feature {_name(est, column)} of the {type(est).__name__} has category "
            f"labels of type {type(odd[0]).__name__}; SilvanForge stores labels that are strings, "
            "numbers or booleans")
    return _Categorical(labels, by_value=False)


def _name(est, column: int) -> str:
    names = getattr(est, "feature_names_in_", None)
    return repr(str(names[column])) if names is not None else f"at column {column}"


def _bitset_members(words: np.ndarray) -> np.ndarray:
    """The members of a scikit-learn bitset (uint32 words; ``c`` is bit ``c % 32`` of word
    ``c // 32``, ``sklearn/utils/_bitset.pyx``)."""
    bits = np.unpackbits(np.asarray(words, dtype="<u4").view(np.uint8), bitorder="little")
    return np.flatnonzero(bits)


def _known_categories(est, categorical: dict[int, _Categorical]) -> dict[int, np.ndarray]:
    """Known category codes of each categorical predictor feature, as the predictor reads them
    (``_bin_mapper.make_known_categories_bitsets``)."""
    if not categorical:
        return {}
    bitsets, f_idx_map = est._bin_mapper.make_known_categories_bitsets()
    return {j: _bitset_members(bitsets[f_idx_map[j]]) for j in categorical}


def _tree(predictor, out: int, column_of, categorical, known, est) -> Tree:
    nodes = predictor.nodes
    n = len(nodes)
    leaf = nodes["is_leaf"].astype(bool)
    left = np.where(leaf, -1, nodes["left"].astype(np.int64))
    right = np.where(leaf, -1, nodes["right"].astype(np.int64))
    feature = np.where(leaf, -1, column_of[np.where(leaf, 0, nodes["feature_idx"])])
    threshold = np.where(leaf, 0.0, nodes["num_threshold"].astype(np.float64))
    default_left = nodes["missing_go_to_left"].astype(bool) & ~leaf
    categories: dict[int, np.ndarray] = {}
    for node in np.flatnonzero(nodes["is_categorical"].astype(bool) & ~leaf):
        j = int(nodes["feature_idx"][node])
        cat = categorical.get(j)
        if cat is None:
            raise UnsupportedModelError(
                f"the {type(est).__name__} splits feature {j} by categories, but its "
                "preprocessor does not encode that feature")
        goes_left = _bitset_members(predictor.raw_left_cat_bitsets[nodes["bitset_idx"][node]])
        if default_left[node]:
            # Missing goes left: name the known categories that go right, swap the children.
            categories[int(node)] = cat.hir_categories(np.setdiff1d(known[j], goes_left))
            left[node], right[node] = right[node], left[node]
        else:
            categories[int(node)] = cat.hir_categories(goes_left)
        default_left[node] = False  # NaN now reaches the missing side on the right
    value = nodes["value"].astype(np.float64).reshape(n, 1)
    # The training rows that reached each node (the predictor keeps them): the order of one-row walks.
    cover = nodes["count"] if "count" in (nodes.dtype.names or ()) else None
    return Tree.from_nodes(left, right, feature, threshold, value, op=Op.LE,
                           default_left=default_left, outputs=(out,), categories=categories, cover=cover)

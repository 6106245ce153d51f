"""CatBoost loss functions -> the output transform of what users call ``predict`` for.

A compiled model returns what the fitted estimator's ``predict`` / ``predict_proba`` returns:
probabilities for classification losses (``predict_proba``; the sklearn wrapper turns them
into ``Class`` labels), the exponent of the formula for Poisson and Tweedie (CatBoostRegressor's
``predict`` default, ``prediction_type="Exponent"``) and the raw formula value
(``RawFormulaVal``) for everything else.  ``output_margin=True`` always gives
``RawFormulaVal``.  CatBoost computes these in float64, as the registered transforms do.

Losses not listed here are refused by name: a guessed transform would give wrong numbers.
"""

from __future__ import annotations

from silvanforge.errors import UnsupportedModelError
from silvanforge.ir.hir import Transform

# The formula value itself (regression and ranking scores).
_RAW = frozenset({
    "RMSE", "MAE", "Quantile", "Expectile", "MAPE", "Huber", "Lq", "LogCosh", "LogLinQuantile",
    "MultiRMSE", "MultiQuantile", "Cox",
    "YetiRank", "YetiRankPairwise", "PairLogit", "PairLogitPairwise", "QueryRMSE", "QuerySoftMax",
    "QueryCrossEntropy", "StochasticRank", "StochasticFilter", "LambdaMart", "GroupQuantile",
})
# One sigmoid per dimension: Logloss' P(class 1), OneVsAll's and MultiLogloss' per class.
_SIGMOID = frozenset({"Logloss", "CrossEntropy", "MultiClassOneVsAll", "MultiLogloss", "MultiCrossEntropy"})
_SOFTMAX = frozenset({"MultiClass"})
# exp of the formula (CatBoostRegressor.predict's default for these losses).
_EXPONENT = frozenset({"Poisson", "Tweedie"})


def transform(loss: str, num_outputs: int) -> Transform:
    """The output transform for CatBoost's loss ``loss`` (its name without parameters)."""
    if loss in _RAW:
        return Transform("identity")
    if loss in _SIGMOID:
        return Transform("sigmoid")
    if loss in _SOFTMAX:
        return Transform("softmax") if num_outputs > 1 else Transform("identity")
    if loss in _EXPONENT:
        return Transform("exp")
    known = sorted(_RAW | _SIGMOID | _SOFTMAX | _EXPONENT)
    raise UnsupportedModelError(f"CatBoost loss function {loss!r} is not supported (its prediction "
                                f"type is not implemented); supported: {', '.join(known)}")


def loss_name(spec: str) -> str:
    """``"Tweedie:variance_power=1.5"`` -> ``"Tweedie"``."""
    return spec.split(":", 1)[0].strip()

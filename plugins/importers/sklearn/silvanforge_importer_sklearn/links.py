"""The output transform of a boosting model: its loss's inverse link, as scikit-learn applies it.

Both boosting families keep their loss object (``est._loss``, from ``sklearn._loss``) and turn
raw predictions into what ``predict`` / ``predict_proba`` return with ``loss.link.inverse`` (or
``loss.predict_proba``, which is built on it).  The link's class says which:

==================  =========================================  ==============================
link                losses                                     transform
==================  =========================================  ==============================
IdentityLink        squared/absolute error, huber, quantile     identity
LogLink             poisson, gamma (HistGradientBoosting)       ``exp`` (NumPy's exp, as used)
LogitLink           binary log-loss                             ``sklearn_binary`` [1-p, p]
HalfLogitLink       GradientBoosting ``exponential``            ``sklearn_binary`` on 2 * raw
MultinomialLogit    multiclass log-loss                         ``sklearn_softmax``
==================  =========================================  ==============================
"""

from __future__ import annotations

from silvanforge.errors import UnsupportedModelError
from silvanforge.ir.hir import Transform

_BY_LINK = {
    "IdentityLink": Transform("identity"),
    "LogLink": Transform("exp"),
    "LogitLink": Transform("sklearn_binary"),
    "HalfLogitLink": Transform("sklearn_binary", (("scale", 2.0),)),
}


def transform_for(est, *, fortran_margins: bool) -> Transform:
    """The transform of ``est``'s loss.  ``fortran_margins``: the estimator keeps its raw
    predictions in Fortran order (HistGradientBoosting), which decides how softmax sums."""
    loss = getattr(est, "_loss", None)
    link = getattr(loss, "link", None)
    if link is None:
        # Boosting models fitted before scikit-learn moved them onto its common loss module
        # (sklearn._loss) kept losses of another kind, whose rounding is not reproduced here.
        raise UnsupportedModelError(
            f"the {type(est).__name__} has no scikit-learn loss object with a link function "
            "(fitted with scikit-learn older than 1.3?): refit it with scikit-learn >= 1.3")
    name = type(link).__name__
    if name == "MultinomialLogit":
        return Transform("sklearn_softmax", (("fortran", 1.0 if fortran_margins else 0.0),))
    if name not in _BY_LINK:
        raise UnsupportedModelError(
            f"the {type(est).__name__}'s loss {type(loss).__name__} has the link {name}, which "
            "SilvanForge does not implement (known: "
            f"{', '.join(sorted(_BY_LINK))}, MultinomialLogit)")
    return _BY_LINK[name]

"""What every forest of this plugin takes from its estimator the same way: feature names,
class labels and a readable objective, as plain Python values (artifacts store them as JSON)."""

from __future__ import annotations


def plain(value):
    """A numpy scalar as the Python value it holds (class labels and category labels are
    stored in artifacts as JSON)."""
    return value.item() if hasattr(value, "item") else value


def of(est, classifier: bool, detail: str) -> dict:
    """The Forest fields every reader fills the same way: source, objective, names, labels."""
    names = getattr(est, "feature_names_in_", None)
    labels = [plain(c) for c in est.classes_] if classifier else None
    return {
        "source": "sklearn",
        "objective": f"{type(est).__name__}({detail})",
        "feature_names": None if names is None else [str(n) for n in names],
        "class_labels": labels,
    }

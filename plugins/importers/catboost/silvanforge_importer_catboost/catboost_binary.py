"""CatBoost's binary model format (``.cbm``, ``save_model(path)``'s default) and fitted CatBoost
models in memory, read through the ``catboost`` package: it exports them to its JSON format,
which :mod:`.catboost_json` reads.  The binary format is CatBoost's own flatbuffers layout with
its CTR tables; reading it through the library keeps one reader of CatBoost's semantics."""

from __future__ import annotations

import os
import sys
import tempfile

from silvanforge.errors import ModelFormatError, UnsupportedModelError
from silvanforge.frontend.loading import read_model_file
from silvanforge.ir.hir import Forest

from . import catboost_json

MAGIC = b"CBM1"


def detect(path, head) -> bool:
    return isinstance(head, (bytes, bytearray, memoryview)) and bytes(head[:4]) == MAGIC


def load(path) -> Forest:
    path = os.fspath(path)
    return loads(read_model_file(path, "CatBoost model"), path)


def _catboost(what: str):
    try:
        import catboost
    except ImportError:
        raise UnsupportedModelError(f"{what} is a CatBoost binary model (.cbm): reading it needs "
                                    f"the catboost package (pip install catboost), or export it "
                                    f"with save_model(path, format=\"json\")") from None
    return catboost


def loads(data: bytes, name: str) -> Forest:
    cb = _catboost(name)
    model = cb.CatBoost()
    try:
        model.load_model(blob=bytes(data))
    except Exception as exc:  # CatBoostError, and whatever its reader raises on garbage
        raise ModelFormatError(f"{name}: not a valid CatBoost model (catboost: {str(exc).strip()[:300]})") from None
    return from_model(model, name)


def from_model(model, name: str) -> Forest:
    """A fitted ``catboost.CatBoost`` (or estimator) through its JSON export."""
    for kind in ("text", "embedding"):  # (refused by name: CatBoost's JSON export refuses them vaguely)
        indices = getattr(model, f"get_{kind}_feature_indices", lambda: [])()
        if indices is not None and len(indices):
            names = getattr(model, "feature_names_", None) or []
            shown = ", ".join(repr(names[i]) if i < len(names) else str(i) for i in list(indices)[:8])
            raise UnsupportedModelError(f"{name}: CatBoost {kind} features are not supported ({shown}): their "
                                        "feature calcers have no exact form here; train without them")
    with tempfile.TemporaryDirectory(prefix="silvanforge-catboost-") as tmp:
        path = os.path.join(tmp, "model.json")
        try:
            model.save_model(path, format="json")
        except Exception as exc:
            raise UnsupportedModelError(f"{name}: CatBoost cannot export this model to JSON "
                                        f"({str(exc).strip()[:300]})") from None
        return catboost_json.load_named(path, name)


def from_object(obj) -> Forest | None:
    """Fitted CatBoost models (``CatBoost``, ``CatBoostClassifier``, ``CatBoostRegressor``,
    ``CatBoostRanker``); None for anything else."""
    # Looked up in sys.modules only: a CatBoost object exists only once the user imported it.
    cb = sys.modules.get("catboost")
    if cb is None or not isinstance(obj, cb.CatBoost):
        return None
    what = f"the {type(obj).__name__}"
    if not obj.is_fitted():
        raise UnsupportedModelError(f"{what} is not fitted: call fit first")
    forest = from_model(obj, what)
    classes = getattr(obj, "classes_", None) if isinstance(obj, cb.CatBoostClassifier) else None
    if classes is not None and len(classes):
        forest.class_labels = [c.item() if hasattr(c, "item") else c for c in classes]
    return forest

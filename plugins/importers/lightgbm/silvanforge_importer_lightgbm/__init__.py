"""SilvanForge's LightGBM importer: model text files, and LightGBM boosters and estimators held
in memory (``model_to_string()``, read like a file).

Installable alone (``pip install ./plugins/importers/lightgbm``): it needs neither lightgbm, which
a model file does not, nor the other formats' libraries.
"""

from __future__ import annotations

import sys

from silvanforge.errors import UnsupportedModelError
from silvanforge.frontend.loading import Format, FormatImporter
from silvanforge.ir.hir import Forest

from . import lightgbm_text


def _from_object(obj) -> Forest | None:
    # Looked up in sys.modules only: a LightGBM object exists only once the user imported it.
    lgb = sys.modules.get("lightgbm")
    if lgb is None:
        return None
    labels = None
    if isinstance(obj, lgb.LGBMModel):
        if not getattr(obj, "fitted_", False) and getattr(obj, "_Booster", None) is None:
            raise UnsupportedModelError(f"the {type(obj).__name__} is not fitted: call fit first")
        booster = obj.booster_
        if isinstance(obj, lgb.LGBMClassifier):
            classes = getattr(obj, "classes_", None)
            labels = None if classes is None else [c.item() if hasattr(c, "item") else c for c in classes]
    elif isinstance(obj, lgb.Booster):
        booster = obj
    else:
        return None
    # model_to_string() keeps the best iteration only when early stopping found one, as
    # predict does by default.
    forest = lightgbm_text.loads(booster.model_to_string(), f"the {type(obj).__name__}")
    if labels is not None:
        forest.class_labels = labels
    return forest


# The plugin object the entry point names: the hooks over this table (silvanforge.frontend.loading).
plugin = FormatImporter({"lightgbm-text": Format(lightgbm_text.detect, lightgbm_text.load, lightgbm_text.loads)},
                        from_object=_from_object)

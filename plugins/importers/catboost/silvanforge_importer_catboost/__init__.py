"""SilvanForge's CatBoost importer: CatBoost JSON exports (read without catboost), binary
``.cbm`` files and fitted CatBoost models in memory (read through catboost, which exports them
to JSON).

Installable alone (``pip install ./plugins/importers/catboost``): JSON files need nothing but
the core; ``pip install catboost`` adds ``.cbm`` files and in-memory models.
"""

from __future__ import annotations

from silvanforge.frontend.loading import Format, FormatImporter

from . import catboost_binary, catboost_json

# The plugin object the entry point names: the hooks over this table (silvanforge.frontend.loading).
plugin = FormatImporter({
    "catboost-json": Format(catboost_json.detect, catboost_json.load, catboost_json.loads),
    "catboost-cbm": Format(catboost_binary.detect, catboost_binary.load, catboost_binary.loads),
}, from_object=catboost_binary.from_object)

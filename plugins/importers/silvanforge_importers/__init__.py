"""``silvanforge-importers``: every shipped model format at once.

The formats live in distributions of their own (``silvanforge-importer-xgboost``, ``-lightgbm``,
``-onnx``, ``-sklearn``, ``-catboost``; each needs only its own format's libraries), which this one depends on.
It registers no hook of its own: its entry point is there so that ``forge plugins`` shows it and
says which of its members are installed (``STATUS``).
"""

from __future__ import annotations

from importlib import metadata

MEMBERS = ("silvanforge-importer-xgboost", "silvanforge-importer-lightgbm",
           "silvanforge-importer-onnx", "silvanforge-importer-sklearn",
           "silvanforge-importer-catboost")


def _status() -> str:
    missing = []
    for name in MEMBERS:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        return f"missing {', '.join(missing)}: pip install ./plugins/importers/<format>"
    return "every shipped format: " + ", ".join(name.rsplit("-", 1)[1] for name in MEMBERS)


STATUS = _status()

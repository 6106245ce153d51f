"""The reorg representation: trees interleaved level by level (seed: the "reorg" layout).

Not implemented yet.  The plugin is installed and discovered through its entry point so the
packaging is exercised, but it claims no representation name until its hooks exist:
``silvanforge_representations`` returns an empty list, ``--rep reorg`` is rejected as unknown, and
``forge plugins`` shows :data:`STATUS` for it.
"""

from __future__ import annotations

from silvanforge import hookimpl

NAME = "reorg"
# Shown by `forge plugins` next to the plugin (an optional attribute any plugin may define).
STATUS = "not implemented yet"


@hookimpl
def silvanforge_representations():
    return []  # becomes [NAME] when the buffer/load hooks below are written

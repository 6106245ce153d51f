"""Plugin modules made inside a test: what a third party's package would register, built from
classes the test defines."""

from __future__ import annotations

import types

from silvanforge import hookimpl


def target_module(name: str, *classes):
    """A plugin module named ``name`` whose ``silvanforge_targets`` hook lists target ``classes``."""
    mod = types.ModuleType(name)

    @hookimpl
    def silvanforge_targets():
        return list(classes)

    mod.silvanforge_targets = silvanforge_targets
    return mod

"""Plugin modules made inside a test: what a third party's package would register, built from
classes the test defines; and a spy on the CPU target's compiles."""

from __future__ import annotations

import types

from silvanforge import hookimpl
from silvanforge.plugins import registry


def target_module(name: str, *classes):
    """A plugin module named ``name`` whose ``silvanforge_targets`` hook lists target ``classes``."""
    mod = types.ModuleType(name)

    @hookimpl
    def silvanforge_targets():
        return list(classes)

    mod.silvanforge_targets = silvanforge_targets
    return mod


class CompileSpy:
    """Counts the CPU target's compiles (LLVM runs) and the CPU each was for, while active."""

    def __enter__(self):
        self.target = registry().target("cpu")
        self.cpus = []
        real = self.target.compile

        def spy(module, options):
            self.cpus.append(options.get("cpu"))
            return real(module, options)

        self.target.compile = spy  # on the instance: the registry hands out this one
        return self

    def __exit__(self, *exc):
        del self.target.compile

    @property
    def calls(self) -> int:
        return len(self.cpus)

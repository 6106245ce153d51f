"""Kernels the installed targets offer for reading inputs on the host (every target's run
there): the first that one gives, the CPU target's asked first."""

from __future__ import annotations


def first_kernel(make) -> tuple:
    """(the first kernel ``make(target, name)`` gives, not None, and its target's name), or
    (None, None): no installed target has one here."""
    from silvanforge.plugins import registry

    r = registry()
    for name in sorted(r.targets(), key=lambda t: t != "cpu"):
        try:
            kernel = make(r.target(name), name)
        except Exception:  # noqa: BLE001, S112 - a target that cannot build it here (no LLVM): the next one
            continue
        if kernel is not None:
            return kernel, name
    return None, None

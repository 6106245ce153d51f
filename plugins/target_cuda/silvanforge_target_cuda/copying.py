"""How a call's rows reach the GPU: a run-time setting of the CUDA target, like the core's
:func:`silvanforge.config_context` (it never changes generated code, only how the launch copies
host rows in).

- ``copy``: ``"pageable"`` (cuMemcpyHtoD from the caller's array; the driver stages it),
  ``"staged"`` (one numpy copy into a pinned buffer, then an asynchronous DMA) or
  ``"registered"`` (the caller's pages pinned in place for the call, one DMA).  On the H100
  machine the host's memory copies, not the PCIe link, set the pace (the DMA alone moved 38-53
  GB/s, every way that copies or pins host memory 9-15 GB/s), and pageable was fastest at 8 and
  16 MB (0.57 / 1.14 ms, against 0.77 / 1.64 staged and 0.61 / 1.15 registered;
  ``benchmarks/gpu_explore.py``, copies).  The environment variable ``SILVANFORGE_CUDA_COPY``
  sets the process default.
- ``register_min_bytes``: ``"registered"`` pins the caller's rows from this size (smaller
  batches are staged).

``with silvanforge_target_cuda.copy_settings(copy="registered"):`` sets them for the block on
the calling thread (a :mod:`contextvars` variable) and restores them on exit.  This module
imports no CUDA library.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from typing import Iterator

from silvanforge.errors import InputError

MODES = ("pageable", "staged", "registered")


@dataclasses.dataclass(frozen=True)
class CopySettings:
    copy: str = "pageable"
    register_min_bytes: int = 1 << 22

    def __post_init__(self):
        if self.copy not in MODES:
            raise InputError(f"CUDA row copy must be one of {', '.join(MODES)}, got {self.copy!r}")
        if isinstance(self.register_min_bytes, bool) or not isinstance(self.register_min_bytes, int) \
                or self.register_min_bytes < 0:
            raise InputError(f"register_min_bytes must be a non-negative integer, got {self.register_min_bytes!r}")


def _default() -> CopySettings:
    return CopySettings(copy=os.environ.get("SILVANFORGE_CUDA_COPY", "pageable"))


_current: contextvars.ContextVar[CopySettings | None] = contextvars.ContextVar("silvanforge_cuda_copy", default=None)


def current() -> CopySettings:
    """The settings in effect on this thread (the process default outside a block)."""
    return _current.get() or _default()


@contextlib.contextmanager
def copy_settings(**changes) -> Iterator[CopySettings]:
    """Set ``copy`` and/or ``register_min_bytes`` for the block (checked; restored on exit)."""
    unknown = set(changes) - {f.name for f in dataclasses.fields(CopySettings)}
    if unknown:
        raise InputError(f"unknown CUDA copy settings: {', '.join(sorted(unknown))} "
                         f"(known: copy, register_min_bytes)")
    settings = dataclasses.replace(current(), **changes)
    token = _current.set(settings)
    try:
        yield settings
    finally:
        _current.reset(token)


__all__ = ["MODES", "CopySettings", "copy_settings", "current"]

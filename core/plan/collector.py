"""Python's cyclic garbage collector during a compile: collected less often.

A compile allocates hundreds of thousands of small objects that live until it ends (LIR
expressions, llvmlite's instructions, which point at their blocks and back), so the
collector's default thresholds (a young collection every 700 allocations, a full one every
hundred of those) traverse them again and again: a third of a 100-tree model's compile
(docs/benchmarks.md, "Measurements behind the defaults").  Within
:func:`relaxed` the young generation is collected every 100,000 allocations and the old ones
rarely: cycles are still collected, later.  The thresholds are the process's, so the outermost
of overlapping compiles (threads, a background builder) sets them and the last to end puts
back what it found, unless someone else changed them meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

COMPILE_THRESHOLDS = (100_000, 20, 100)

_lock = threading.Lock()
_depth = 0
_saved: tuple | None = None


@contextlib.contextmanager
def relaxed() -> Iterator[None]:
    """The collector at :data:`COMPILE_THRESHOLDS` while any compile of the process runs."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*COMPILE_THRESHOLDS)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                if gc.get_threshold() == COMPILE_THRESHOLDS and _saved is not None:
                    gc.set_threshold(*_saved)
                _saved = None


__all__ = ["COMPILE_THRESHOLDS", "relaxed"]

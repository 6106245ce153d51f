"""What a compile derives from a model more than once, kept for that compile alone.

An untuned compile asks every representation for its estimate at three batch sizes, chooses
each band's representation, then lowers two or three forms: the same statistics of the same
forest (tree depths, the mask tables' shape, the bitvector plan, every representation's cost)
were computed 2-8 times, a third of a 1000-tree model's compile.  Within a
:func:`compile_scope` they are computed once per object and key.

The cache lives only while the scope is open, and holds the objects it is keyed by (so no id
is reused for another object during the scope): a model changed after one compile is seen
afresh by the next.  Nothing in a compile changes a forest or tree in place (transforms make
new ones), which is what makes keying by identity sound within it.

A scope is per thread; a compile that builds forms on other threads (a pool, or the forms left
to a background thread: :mod:`silvanforge.plan.lateforms`) hands them its cache (:func:`current`,
``compile_scope(cache)``).  Two threads may then compute one value twice, each keeping a
result equal to the other's: never a wrong one.  While a scope is open the cyclic garbage
collector runs less often (:func:`relaxed`): a compile allocates hundreds of thousands of small
objects that live until it ends (LIR expressions, llvmlite's instructions, which point at their
blocks and back), so the collector's default thresholds (a young collection every 700
allocations, a full one every hundred of those) traverse them again and again: a third of a
100-tree model's compile (docs/benchmarks.md, "Measurements behind the defaults").  Relaxed,
the young generation is collected every 100,000 allocations and the old ones rarely: cycles
are still collected, later.  The thresholds are the process's, so the outermost of
overlapping compiles (threads, a background builder) sets them and the last to end puts back
what it found, unless someone else changed them meanwhile.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
from typing import Any, Callable, Hashable, Iterator

__all__ = ["compile_scope", "current", "in_compile_scope", "memoised", "COMPILE_THRESHOLDS", "relaxed"]


_state = threading.local()


@contextlib.contextmanager
def compile_scope(cache: dict | None = None) -> Iterator[None]:
    """Memoise :func:`memoised` results until the outermost scope of this thread closes;
    ``cache``: another scope's (:func:`current`), shared (where this thread has no scope open)."""
    outer = getattr(_state, "cache", None)
    if outer is not None:
        yield
        return
    _state.cache = {} if cache is None else cache
    try:
        # (and the garbage collector collects less often: relaxed, below)
        with relaxed():
            yield
    finally:
        _state.cache = None


def current() -> dict | None:
    """The cache of this thread's open scope (None: no scope), to share with other threads."""
    return getattr(_state, "cache", None)


def in_compile_scope(fn: Callable) -> Callable:
    """``fn`` run inside a :func:`compile_scope` (a compile's entry points)."""
    @functools.wraps(fn)
    def scoped(*args, **kwargs):
        with compile_scope():
            return fn(*args, **kwargs)
    return scoped


def memoised(owner: Any, key: Hashable, compute: Callable[[], Any]) -> Any:
    """``compute()``, or its result for the same ``owner`` object and ``key`` earlier in this
    compile scope (outside a scope: always ``compute()``)."""
    cache = getattr(_state, "cache", None)
    if cache is None:
        return compute()
    slot = (id(owner), key)
    hit = cache.get(slot)
    if hit is not None and hit[0] is owner:
        return hit[1]
    value = compute()
    cache[slot] = (owner, value)
    return value


# The garbage collector while any compile runs (see the module docstring).
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

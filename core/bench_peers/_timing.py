"""Best-of-R timing shared by ``forge bench`` and the lleaves worker (which runs in another
environment without SilvanForge, so this module imports nothing but the standard library)."""

from __future__ import annotations

import time


def time_call(fn, arg, repeat: int, min_time: float) -> float:
    """Best-of-``repeat`` seconds per call, each timing run lasting at least ``min_time``."""
    fn(arg)  # warm up
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn(arg)
        elapsed = time.perf_counter() - start
        if elapsed >= min_time or calls >= 1 << 24:
            break
        calls = min(calls * 10, max(calls * 2, int(calls * min_time / max(elapsed, 1e-9) * 1.2)))
    best = elapsed / calls
    for _ in range(repeat - 1):
        start = time.perf_counter()
        for _ in range(calls):
            fn(arg)
        best = min(best, (time.perf_counter() - start) / calls)
    return best

"""Best-of-R timing shared by ``forge bench`` and the lleaves worker (which runs in another
environment without SilvanForge, so this module imports nothing but the standard library)."""

from __future__ import annotations

import itertools
import time

# Timed calls cycle through ROTATE_BATCHES different batches, or as many as hold ROTATE_ROWS
# rows where batches are small (of at most ROTATE_BYTES together): predicting one small batch
# over and over lets the branch predictor learn its paths (seen: lleaves ran 2.9x faster on one
# repeated 512-row batch than on 4096 distinct rows) and keeps it in cache, neither of which
# production inference gets.  16 one-row batches were still learnt: 1-row calls over 16 rows
# ran 2.0x (flight 100x31), 2.4x (taxi 100x31) and 1.7x (x100) faster than over 4096 rows.
ROTATE_BATCHES = 16
ROTATE_ROWS = 4096
ROTATE_BYTES = 64 << 20


def pool_rows(largest_batch: int, row_bytes: int) -> int:
    """Rows of random input to draw so every batch size can rotate (see ROTATE_BATCHES)."""
    wanted = max(ROTATE_BATCHES * largest_batch, ROTATE_ROWS)
    return max(largest_batch, min(wanted, ROTATE_BYTES // max(row_bytes, 1)))


def rotation(X, batch: int) -> list:
    """The distinct ``batch``-row slices of ``X`` a timing cycles through (at least one):
    ROTATE_BATCHES of them, or enough to hold ROTATE_ROWS rows."""
    count = max(1, min(max(ROTATE_BATCHES, ROTATE_ROWS // batch), len(X) // batch))
    return [X[i * batch:(i + 1) * batch] for i in range(count)]


def time_call(fn, args, repeat: int, min_time: float) -> float:
    """Best-of-``repeat`` seconds per call, each timing run lasting at least ``min_time``;
    ``args`` is one argument or a list the calls cycle through."""
    args = args if isinstance(args, list) else [args]
    for a in args:  # warm up
        fn(a)
    following = itertools.cycle(args).__next__  # round and round, across the timing runs
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn(following())
        elapsed = time.perf_counter() - start
        if elapsed >= min_time or calls >= 1 << 24:
            break
        calls = min(calls * 10, max(calls * 2, int(calls * min_time / max(elapsed, 1e-9) * 1.2)))
    best = elapsed / calls
    for _ in range(repeat - 1):
        start = time.perf_counter()
        for _ in range(calls):
            fn(following())
        best = min(best, (time.perf_counter() - start) / calls)
    return best

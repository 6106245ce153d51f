"""Running a compiled kernel on rows: validation of inputs and parallel row chunks.

A *kernel* is what a target's ``compile`` returns (:class:`silvanforge.runtime.kernel.Kernel`);
the compiled model asks it for a batch's margins (``Kernel.margins``).  A kernel of phases
(:class:`silvanforge.runtime.kernel.PhaseKernel`) has them split over threads here
(:func:`run_phases`); one that releases the GIL (ctypes calls do) runs its chunks truly in
parallel.  How few rows a thread or share may take, and how much scratch a block of rows may
use, are the run-time settings below, read as each call starts.

Run-time settings: how a ``predict`` call splits its rows over threads.

They never change the code a compile generates (that is :class:`silvanforge.options.CompileOptions`,
recorded in the compiled model and its artifact); they decide, when a call runs, how many rows a
thread or a share must get before a batch is split, and how much scratch a block of rows may
use.  The interface follows XGBoost's (``xgboost.config_context``, ``set_config``,
``get_config``) and scikit-learn's::

    import silvanforge as sf
    with sf.config_context(thread_steps=50_000):   # split smaller batches, in this block
        y = cf.predict(X, threads=4)
    sf.set_config(scratch_bytes=16 << 20)          # for the whole process
    sf.get_config()                                # {'min_share_rows': 16, ...}

The settings, each a positive integer:

- ``thread_steps`` (default 500,000): walk steps a thread should get before a call is split
  over Python's thread pool: below about this much work (~0.2 ms) handing rows to a second
  thread costs more than it saves (a 100-tree depth-6 model at 512 rows ran 1.15x faster on two
  threads at best, slower on average).
- ``share_steps`` (default 16,384) and ``min_share_rows`` (default 16): the walk steps and rows
  a share should hold where the kernel hands shares off itself (``run_shares``: the CPU
  target's native workers, which start a share in microseconds, not tens): two threads ran
  32-row shares of a 100-tree model (376 steps a row) 1.19x faster than one thread, 128-row
  shares 1.4-1.7x (Zen 4, 2 vCPUs).  A loop over trees (``split-trees``: each share walks every row
  through part of the trees) is split where the call's rows take ``share_steps`` walk steps a
  share, one row of a long model included.
- ``scratch_bytes`` (default 64 MiB): a batch whose scratch buffers (split rows, privatised
  partial sums) would pass this runs in blocks of rows, each block every phase in turn.

A kernel's program records only its walk steps a row; the bars above are read when a call
starts (:func:`silvanforge.runtime.threads.run_phases`), so a compiled model follows the settings in
effect at each call, whenever it was compiled.

:func:`config_context` sets values for the block on the calling thread (a
:mod:`contextvars` variable: an asyncio task sees its own; a thread started inside the block does
not see them) and restores what was there on exit; :func:`set_config` sets the process-wide
values, which every thread sees where no block of its own overrides them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from silvanforge.errors import InputError
from silvanforge.ir import lir
from silvanforge.runtime import aligned
from silvanforge.runtime.cpu_quota import quota_cores

__all__ = ["RuntimeConfig", "DEFAULT", "current", "get_config", "set_config", "config_context"]


# Fewer rows than this per thread costs more in hand-off than the walk saves.
MIN_ROWS_PER_THREAD = 256


def rows_per_thread(walk_steps_per_row: int) -> int:
    """The rows a thread should get, for the ``thread_steps`` walk steps of the run-time
    settings in effect (below), of a kernel whose rows take
    ``walk_steps_per_row`` steps (its module's ``info``; 0: unknown, no bar)."""
    steps = int(walk_steps_per_row or 0)
    return -(-current().thread_steps // steps) if steps > 0 else 0


def rows_per_share(walk_steps_per_row: int) -> int:
    """The rows a share should get where a kernel hands shares off itself: ``share_steps`` walk
    steps and at least ``min_share_rows`` rows (below)."""
    settings = current()
    steps = int(walk_steps_per_row or 0)
    return max(settings.min_share_rows, -(-settings.share_steps // steps) if steps > 0 else 0)


def rows_per_loop_share(walk_steps_per_row: int, shares: int) -> int:
    """The rows a call should hold for a parallel tree loop to be split in ``shares`` shares
    handed off natively: each share's part of the rows' walk steps at least ``share_steps``."""
    steps = int(walk_steps_per_row or 0)
    return -(-current().share_steps * shares // steps) if steps > 0 else MIN_ROWS_PER_THREAD


_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def default_threads() -> int:
    """The CPUs this process may run on, no more than its cgroup's CPU quota allows."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cpus, quota_cores() or cpus)


def _get_pool(size: int) -> ThreadPoolExecutor:
    """One persistent pool for the process, grown (never shrunk) to the largest request."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < size:
            # The old pool is not shut down: another thread may still be submitting to it.  Its
            # idle workers exit once the last reference to it is gone.
            _pool, _pool_size = ThreadPoolExecutor(max_workers=size, thread_name_prefix="silvanforge"), size
        return _pool


def check_threads(threads) -> int:
    """A thread count as an int; anything but a positive integer is an InputError."""
    if isinstance(threads, (bool, np.bool_)) or not isinstance(threads, (int, np.integer)) or threads <= 0:
        raise InputError(f"threads must be a positive integer, got {threads!r} (None, the default: all usable CPUs)")
    return int(threads)


def _not_rows(X) -> str | None:
    """Why ``X`` is no batch of rows at all (None, a library's own data container, a scalar),
    naming what was passed and what to pass instead; None where it may be one."""
    kind = f"{type(X).__module__}.{type(X).__qualname__}"
    rows = "a 2-D NumPy array (rows, features) or a data frame (pandas, polars, pyarrow)"
    if X is None:
        return f"predict got None: pass the rows to score as {rows}"
    if type(X).__module__.split(".")[0] in ("xgboost", "lightgbm", "catboost"):
        # DMatrix, lightgbm.Dataset, catboost.Pool: training containers that hide their rows
        return (f"predict got a {kind}, the training library's own data container: pass the array "
                f"or data frame it was built from ({rows})")
    if isinstance(X, (str, bytes, dict, set)) or np.isscalar(X):
        return f"predict got a {kind}: pass {rows}"
    if isinstance(X, tuple) and X and isinstance(X[0], dict):
        return "predict got a tuple of dicts: records are a dict or a list of dicts (list(records))"
    return None


def check_rows(X, num_features: int, dtype: np.dtype, wider: bool = False) -> np.ndarray:
    """Validate a batch and view it in the kernel's input dtype, copying only when needed;
    ``wider``: rows may have more columns, of which the first ``num_features`` are read."""
    if type(X) is np.ndarray and X.dtype == dtype and X.ndim == 2 and X.shape[1] == num_features \
            and X.flags.c_contiguous:
        return X  # the common case, checked in a fraction of a microsecond (small batches)
    if hasattr(X, "to_numpy") and not isinstance(X, np.ndarray):  # pandas / polars frames
        X = X.to_numpy()
    not_rows = _not_rows(X)
    if not_rows:
        raise InputError(not_rows)
    if type(X).__name__ == "generator":
        raise InputError("predict got a generator: pass the rows themselves, a 2-D array (np.array(list(rows)))")
    try:
        X = np.asarray(X)
    except ValueError as exc:  # (lists of rows of several lengths)
        raise InputError(f"the rows are not a 2-D array ({str(exc).splitlines()[0][:120]}): rows of several "
                         "lengths?") from None
    if X.dtype == object or X.dtype.kind in "mM" or not (np.issubdtype(X.dtype, np.number) or X.dtype == np.bool_):
        raise InputError(f"inputs must be numeric (float32 or float64), got dtype {X.dtype}")
    if np.issubdtype(X.dtype, np.complexfloating):
        raise InputError(f"inputs must be real numbers, got dtype {X.dtype}")
    if X.ndim != 2:
        raise InputError(f"inputs must be a 2-D array (rows, features), got shape {X.shape}")
    if wider and X.shape[1] > num_features:
        X = X[:, :num_features]  # a view: the kernel reads rows by their strides
    if X.shape[1] != num_features:
        at_least = "at least " if wider else ""
        raise InputError(f"the model expects {at_least}{num_features} features per row, got {X.shape[1]}")
    rows = np.asarray(X, dtype=dtype)
    # The kernel indexes rows by element strides: any view with non-negative strides that are
    # whole elements works as it is (C, Fortran, sliced); anything else is copied once.
    if rows.strides[0] % rows.itemsize or rows.strides[1] % rows.itemsize or min(rows.strides) < 0:
        rows = np.ascontiguousarray(rows)
    return rows


OUTPUT_ON_LINE_BYTES = 4096


def run_phases(kernel, rows: np.ndarray, num_outputs: int, threads: int | None) -> np.ndarray:
    """Margins (n, num_outputs) of all rows: a :class:`~silvanforge.runtime.kernel.PhaseKernel`'s phases
    in order, each split over threads.

    The kernel has ``phases`` (each with ``parallel`` = ``rows`` or ``loop``, ``row_parallel``
    and ``trip``), ``scratch`` (buffers with ``per_row`` and ``fill``) and ``run(phase, rows, out,
    scratch, row_begin, row_end, iter_begin, iter_end)``.
    """
    threads = default_threads() if threads is None else check_threads(threads)
    n = rows.shape[0]
    # (outputs on cache lines from OUTPUT_ON_LINE_BYTES: the aligned array's 2-3 us made a 2-thread
    # 20-64-row call 10% slower, and is nothing beside a call of thousands of rows)
    dtype = np.dtype(kernel.output_dtype)
    out = (aligned.empty if n * num_outputs * dtype.itemsize >= OUTPUT_ON_LINE_BYTES else np.empty)(
        (n, num_outputs), dtype)
    if n == 0:
        return out
    if not kernel.scratch:
        _run_block(kernel, rows, out, threads)
        return out
    # Scratch grows with the rows: a batch whose scratch would pass the ``scratch_bytes``
    # setting runs in blocks of rows (rows are independent, so each block runs every phase).
    row_bytes = sum(buf.per_row * np.dtype(_scratch_dtype(kernel, buf)).itemsize for buf in kernel.scratch)
    block = max(MIN_ROWS_PER_THREAD * threads, current().scratch_bytes // max(row_bytes, 1))
    for start in range(0, n, block):
        _run_block(kernel, rows[start:start + block], out[start:start + block], threads)
    return out


def _scratch_dtype(kernel, buf):
    # Privatised margins are kept in the output dtype; other scratch in its own element type.
    return kernel.output_dtype if buf.fill is not None else lir.LIR_TO_NUMPY[buf.type]


# Per thread, per kernel: the scratch arrays of its last call, reused by the next one (a fresh
# multi-megabyte array costs a page fault per 4 KiB page on first touch, every call).
_scratch_cache = threading.local()


def _scratch(kernel, n: int) -> list[np.ndarray]:
    """The scratch buffers of a call over ``n`` rows: unfilled ones as they are, the others set
    to their fill value."""
    if not kernel.scratch:
        return []
    cache = _scratch_cache.__dict__.setdefault("arrays", weakref.WeakKeyDictionary())
    try:
        held = cache.get(kernel) or []
    except TypeError:  # a kernel that cannot be weakly referenced: nothing is reused
        held = None
    arrays, views = [], []
    for k, buf in enumerate(kernel.scratch):
        size = (n + buf.pad_rows) * buf.per_row if buf.fill is None else n * buf.per_row
        dtype = np.dtype(_scratch_dtype(kernel, buf))
        a = held[k] if held and k < len(held) else None
        if a is None or a.size < size or a.dtype != dtype:
            a = aligned.empty(size, dtype)
        arrays.append(a)
        views.append(a[:size])
        if buf.fill is not None:
            views[-1].fill(buf.fill)
    if held is not None and arrays:
        cache[kernel] = arrays
    return views


def _shares(total: int, parts: int) -> list[tuple[int, int]]:
    """``[0, total)`` cut into ``parts`` ranges as even as whole numbers allow."""
    bounds = [total * k // parts for k in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def _run_block(kernel, rows: np.ndarray, out: np.ndarray, threads: int) -> None:
    n = rows.shape[0]
    scratch = _scratch(kernel, n)
    # A kernel may ask for more rows per thread (a cheap model: a hand-off costs more than the
    # rows it would take, the ``thread_steps`` setting).
    min_rows = loop_rows = max(MIN_ROWS_PER_THREAD, int(kernel.min_rows_per_thread or 0))
    # A kernel with a hand-off of its own (``run_shares``, native workers) says how few rows a
    # share may hold: microseconds per hand-off instead of tens.
    run_shares = kernel.run_shares
    if run_shares is not None:
        min_rows = max(1, int(kernel.min_rows_per_share))
        # A share of a tree loop walks all the rows through part of the trees: one row's walks
        # may be worth a hand-off where they are long (1000 deep trees: 70 us).
        loop_rows = rows_per_loop_share(kernel.walk_steps_per_row, min(threads, 2))
    for i, phase in enumerate(kernel.phases):
        if phase.parallel == "loop":
            # Every call covers all rows for a share of the parallel tree loop's iterations.
            chunks = min(threads, phase.trip) if n >= loop_rows else 1
            tasks = [(0, n, a, b) for a, b in _shares(phase.trip, chunks)]
        else:
            chunks = min(threads, max(1, n // min_rows)) if phase.row_parallel else 1
            tasks = [(a, b, 0, 0) for a, b in _shares(n, chunks)]
        if len(tasks) == 1:
            kernel.run(i, rows, out, scratch, *tasks[0])
            continue
        if run_shares is not None and run_shares(i, rows, out, scratch, tasks):
            continue
        # The calling thread runs the first share itself: one hand-off fewer per phase.
        pool = _get_pool(threads)
        futures = [pool.submit(kernel.run, i, rows, out, scratch, *t) for t in tasks[1:]]
        try:
            kernel.run(i, rows, out, scratch, *tasks[0])
        finally:
            for f in futures:
                f.result()


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """The settings (see the module docstring)."""

    thread_steps: int = 500_000
    share_steps: int = 16_384
    min_share_rows: int = 16
    scratch_bytes: int = 64 << 20


DEFAULT = RuntimeConfig()
NAMES = tuple(f.name for f in dataclasses.fields(RuntimeConfig))

_process = DEFAULT
_process_lock = threading.Lock()
# What config_context blocks set, over the process-wide values (None: no block).
_block: contextvars.ContextVar = contextvars.ContextVar("silvanforge_runtime_config", default=None)


def _checked(settings: dict) -> dict:
    unknown = sorted(set(settings) - set(NAMES))
    if unknown:
        raise InputError(f"no run-time setting {unknown[0]!r} (the settings: {', '.join(NAMES)})")
    for name, value in settings.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"run-time setting {name} must be a positive integer, got {value!r}")
    return settings


def current() -> RuntimeConfig:
    """The settings in effect on this thread: its innermost :func:`config_context`, else the
    process-wide ones."""
    block = _block.get()
    return _process if block is None else block


def get_config() -> dict:
    """The settings in effect on this thread, by name."""
    return dataclasses.asdict(current())


def set_config(**settings) -> None:
    """Set run-time settings for the whole process (names and values: the module docstring);
    a bad name or value is an InputError and changes nothing.  A block of
    :func:`config_context` already entered keeps the values it started with."""
    global _process
    _checked(settings)
    with _process_lock:
        _process = dataclasses.replace(_process, **settings)


@contextlib.contextmanager
def config_context(**settings):
    """Use these run-time settings for the calls made in the block (on this thread or asyncio
    task), the others as they were; restored on exit, also when the block raises.  A bad name
    or value is an InputError before the block runs."""
    _checked(settings)
    token = _block.set(dataclasses.replace(current(), **settings))
    try:
        yield
    finally:
        _block.reset(token)

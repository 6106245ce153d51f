"""Run-time settings: how a ``predict`` call splits its rows over threads.

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
import threading

from silvanforge.errors import InputError


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


__all__ = ["RuntimeConfig", "DEFAULT", "current", "get_config", "set_config", "config_context"]

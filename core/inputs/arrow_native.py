"""The C++ reader of pyarrow Tables (``arrow_rows.cpp``, which says why it exists), compiled on
this machine against the installed pyarrow and kept in the user's cache.

Arrow's C++ ABI changes with every pyarrow release, so the module cannot ship built: it is compiled
with the C++ compiler found (``$CXX``, else ``c++``, ``g++``, ``clang++``) against pyarrow's headers
and libarrow, once per pyarrow and Python (2-5 s), in the private directory
``~/.cache/silvanforge/arrow-rows`` (:func:`silvanforge.artifact.userdirs.private_dir`: a library
another user could write would be loaded and run; the directory and the file are checked again
just before the load).  Where it cannot be built (no compiler, no Python headers, not Linux)
tables are read by pyarrow's own conversions, as before it: the same rows, more slowly at a few
rows.  A cache directory refused or unusable is said once, as a :class:`CacheWarning`.

The first table a process reads starts the compile (or the load of the kept module) on a thread of
its own, and calls are answered by the Python reader until it is ready, as
:func:`silvanforge.inputs.arrow_frames.columns_kernel` does: a process's first table must not
wait seconds for what saves microseconds (the build and its cache: :mod:`silvanforge.inputs.native`).
``SILVANFORGE_ARROW_NATIVE=0`` turns it off.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from silvanforge.inputs.native import FirstUse, NativeUnavailable, load_module
from silvanforge.inputs.native import compiler as _compiler

SOURCE = Path(__file__).with_name("arrow_rows.cpp")
MODULE = "_arrow_rows"  # (the name its PyInit function carries)


def reader(wait: bool = False):
    """The compiled module (``plan``, ``set_labels``, ``read``), or None while it is being built
    or where it cannot be (``wait``: until it is known, for tests and benchmarks)."""
    return _NATIVE.get(wait)


def load(cache: str | os.PathLike | None = None):
    """The module, built into ``cache`` (the user's cache by default) if it is not there; raises
    :class:`NativeUnavailable` with the reason where it cannot be had."""
    if os.environ.get("SILVANFORGE_ARROW_NATIVE", "1") == "0":
        raise NativeUnavailable("turned off (SILVANFORGE_ARROW_NATIVE=0)")
    import pyarrow

    from silvanforge.artifact.userdirs import cache_home

    libarrow = _libarrow(pyarrow)
    return load_module(SOURCE, MODULE, cache if cache is not None else os.path.join(cache_home(), "arrow-rows"),
                       _compiler(), [f"-I{pyarrow.get_include()}", libarrow,
                                     f"-Wl,-rpath,{os.path.dirname(libarrow)}"],
                       [pyarrow.__version__, libarrow])


def _libarrow(pyarrow) -> str:
    """The path of the libarrow the installed pyarrow loads (``libarrow.so.<ABI version>``)."""
    for directory in pyarrow.get_library_dirs():
        found = sorted(p for p in glob.glob(os.path.join(directory, "libarrow.so.*")) if p.rsplit(".", 1)[-1].isdigit())
        if found:
            return found[0]
    raise NativeUnavailable("no libarrow.so beside pyarrow")


# (``load`` looked up at the build: tests put another in its place)
_NATIVE = FirstUse(lambda: load(), "the C++ reader of arrow tables")

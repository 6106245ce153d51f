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
wait seconds for what saves microseconds.  The compiler runs in a session of its own and renames
its output into place itself, so a process that ends first (a script's one table) leaves the
module built for the next rather than a half-written file; a forked child asks again.
``SILVANFORGE_ARROW_NATIVE=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from pathlib import Path

from silvanforge.errors import CacheWarning

SOURCE = Path(__file__).with_name("arrow_rows.cpp")
MODULE = "_arrow_rows"  # (the name its PyInit function carries)

_FOUND: list = []  # the module, or None where it cannot be had: once known
_LOCK = threading.Lock()
_BUILD: threading.Thread | None = None


def reader(wait: bool = False):
    """The compiled module (``plan``, ``set_labels``, ``read``), or None while it is being built
    or where it cannot be (``wait``: until it is known, for tests and benchmarks)."""
    if _FOUND:
        return _FOUND[0]
    global _BUILD
    with _LOCK:
        if _BUILD is None:
            _BUILD = threading.Thread(target=_find, name="arrow-rows-build", daemon=True)
            _BUILD.start()
    if wait:
        _BUILD.join()
    return _FOUND[0] if _FOUND else None


def _find() -> None:
    try:
        module = load()
    except NativeUnavailable:  # (no compiler, not Linux, turned off: the Python reader answers)
        module = None
    except Exception as exc:  # noqa: BLE001 - a cache refused or unusable, a build that failed to load
        warnings.warn(CacheWarning(f"the C++ reader of arrow tables is not used: {exc}"), stacklevel=2)
        module = None
    _FOUND.append(module)


def _after_fork() -> None:
    # (a child forked while the build's thread ran has no such thread: it asks again)
    global _BUILD
    if not _FOUND:
        _BUILD = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def load(cache: str | os.PathLike | None = None):
    """The module, built into ``cache`` (the user's cache by default) if it is not there; raises
    :class:`NativeUnavailable` with the reason where it cannot be had."""
    if os.environ.get("SILVANFORGE_ARROW_NATIVE", "1") == "0":
        raise NativeUnavailable("turned off (SILVANFORGE_ARROW_NATIVE=0)")
    if not sys.platform.startswith("linux"):
        raise NativeUnavailable(f"built on Linux only, not {sys.platform}")
    import pyarrow

    libarrow = _libarrow(pyarrow)
    compiler = _compiler()
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    digest = hashlib.sha256(b"\0".join([SOURCE.read_bytes(), pyarrow.__version__.encode(), libarrow.encode(),
                                        suffix.encode(), compiler.encode()])).hexdigest()[:24]
    from silvanforge.artifact.userdirs import cache_home, private_dir

    directory = private_dir(cache if cache is not None else os.path.join(cache_home(), "arrow-rows"))
    path = os.path.join(directory, f"{MODULE}-{digest}{suffix}")
    if not _usable(path):
        _build(path, compiler, libarrow, pyarrow.get_include())
    private_dir(directory)  # (again, and the file: the build took seconds)
    if not _usable(path):
        raise NativeUnavailable(f"{path} is not a file of this user's that only this user can write")
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class NativeUnavailable(RuntimeError):
    """The C++ reader cannot be built or loaded here (the reason in the message)."""


def _libarrow(pyarrow) -> str:
    """The path of the libarrow the installed pyarrow loads (``libarrow.so.<ABI version>``)."""
    for directory in pyarrow.get_library_dirs():
        found = sorted(p for p in glob.glob(os.path.join(directory, "libarrow.so.*")) if p.rsplit(".", 1)[-1].isdigit())
        if found:
            return found[0]
    raise NativeUnavailable("no libarrow.so beside pyarrow")


def _compiler() -> str:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        found = name and shutil.which(name)
        if found:
            return found
    raise NativeUnavailable("no C++ compiler (set CXX)")


def _usable(path: str) -> bool:
    """Whether ``path`` is a regular file of this user's that no one else can write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    import stat

    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _build(path: str, compiler: str, libarrow: str, arrow_include: str) -> None:
    """Compile into a temporary file beside ``path``, which the compiler's shell renames into place
    (processes building at once both succeed; one that ends first leaves it built)."""
    python_include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(python_include, "Python.h")):
        raise NativeUnavailable(f"no Python.h in {python_include} (the Python development headers)")
    directory = os.path.dirname(path)
    _remove_stale(directory)
    fd, temporary = tempfile.mkstemp(dir=directory, suffix=PART)
    os.close(fd)
    command = [compiler, "-O3", "-DNDEBUG", "-std=c++20", "-shared", "-fPIC", "-fvisibility=hidden",
               f"-I{arrow_include}", f"-I{python_include}", str(SOURCE), "-o", temporary, libarrow,
               f"-Wl,-rpath,{os.path.dirname(libarrow)}"]
    # "$@" is the compile; then its output is made the user's alone and renamed into place, or removed
    script = 'if "$@"; then chmod 700 "$PART" && mv -f "$PART" "$FINAL"; else s=$?; rm -f "$PART"; exit $s; fi'
    try:
        process = subprocess.Popen(["/bin/sh", "-c", script, "sh", *command], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True,
                                   env={**os.environ, "PART": temporary, "FINAL": path})
    except OSError as exc:
        os.unlink(temporary)
        raise NativeUnavailable(f"cannot run {compiler}: {exc}") from None
    try:
        _, errors = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise NativeUnavailable("the compile took over 300 s") from None
    if process.returncode:
        raise NativeUnavailable(f"{os.path.basename(compiler)} failed: {errors.strip()[-2000:]}")


PART = ".so.part"  # (a compile's output until it is renamed into place)
STALE_SECONDS = 3600


def _remove_stale(directory: str) -> None:
    """Remove compile outputs an hour old (a compile killed with its process) from ``directory``."""
    now = time.time()
    for name in os.listdir(directory):
        if name.endswith(PART):
            with contextlib.suppress(OSError):
                if now - os.lstat(os.path.join(directory, name)).st_mtime > STALE_SECONDS:
                    os.unlink(os.path.join(directory, name))

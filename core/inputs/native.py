"""C++ modules of the input readers, compiled on the user's machine at first use and kept in the
user's cache: what :mod:`silvanforge.inputs.arrow_native` (tables and Arrow-backed frames, against
the installed pyarrow) and :mod:`silvanforge.inputs.records` (records, against Python alone) share.

A module is compiled with the C++ compiler found (``$CXX``, else ``c++``, ``g++``, ``clang++``)
into a private directory of the user's cache (:func:`silvanforge.artifact.userdirs.private_dir`: a
library another user could write would be loaded and run; the directory and the file are checked
again just before the load), named by a digest of its source and of what it was built against.
The compiler runs in a session of its own and renames its output into place itself, so a process
that ends first leaves the module built for the next rather than a half-written file.

A process's first use starts the build (or the load of the kept module) on a thread of its own
(:class:`FirstUse`), and callers read the Python way until it is ready: a first call must not wait
seconds for what saves microseconds.  Where a module cannot be had (no compiler, no Python
headers, not Linux, turned off) the Python readers answer: the same rows, more slowly.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings

from silvanforge.errors import CacheWarning

PART = ".so.part"  # (a compile's output until it is renamed into place)
STALE_SECONDS = 3600


class NativeUnavailable(RuntimeError):
    """A C++ module cannot be built or loaded here (the reason in the message)."""


def load_module(source, module: str, cache: str | os.PathLike, compiler: str, flags: list[str],
                built_against: list[str]):
    """The module ``module`` (its PyInit function's name) compiled from ``source`` with
    ``flags`` into the private directory ``cache``, built there first if it is not;
    ``built_against``: what else the build depends on (a library's version), in its file's name."""
    if not sys.platform.startswith("linux"):
        raise NativeUnavailable(f"built on Linux only, not {sys.platform}")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    digest = hashlib.sha256(b"\0".join([source.read_bytes(), *(s.encode() for s in built_against),
                                        suffix.encode(), compiler.encode()])).hexdigest()[:24]
    from silvanforge.artifact.userdirs import private_dir

    directory = private_dir(cache)
    path = os.path.join(directory, f"{module}-{digest}{suffix}")
    if not usable(path):
        build(path, [compiler, "-O3", "-DNDEBUG", "-std=c++20", "-shared", "-fPIC", "-fvisibility=hidden",
                     f"-I{python_include()}", str(source), *flags])
    private_dir(directory)  # (again, and the file: the build took seconds)
    if not usable(path):
        raise NativeUnavailable(f"{path} is not a file of this user's that only this user can write")
    spec = importlib.util.spec_from_file_location(module, path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def python_include() -> str:
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise NativeUnavailable(f"no Python.h in {include} (the Python development headers)")
    return include


def compiler() -> str:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        found = name and shutil.which(name)
        if found:
            return found
    raise NativeUnavailable("no C++ compiler (set CXX)")


def usable(path: str) -> bool:
    """Whether ``path`` is a regular file of this user's that no one else can write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def build(path: str, command: list[str]) -> None:
    """Run the compile ``command`` (its output named last, by ``-o``) into a temporary file beside
    ``path``, which the compiler's shell renames into place (processes building at once both
    succeed; one that ends first leaves it built)."""
    directory = os.path.dirname(path)
    remove_stale(directory)
    fd, temporary = tempfile.mkstemp(dir=directory, suffix=PART)
    os.close(fd)
    # "$@" is the compile; then its output is made the user's alone and renamed into place, or removed
    script = 'if "$@"; then chmod 700 "$PART" && mv -f "$PART" "$FINAL"; else s=$?; rm -f "$PART"; exit $s; fi'
    try:
        process = subprocess.Popen(["/bin/sh", "-c", script, "sh", *command, "-o", temporary],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True, env={**os.environ, "PART": temporary, "FINAL": path})
    except OSError as exc:
        os.unlink(temporary)
        raise NativeUnavailable(f"cannot run {command[0]}: {exc}") from None
    try:
        _, errors = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise NativeUnavailable("the compile took over 300 s") from None
    if process.returncode:
        raise NativeUnavailable(f"{os.path.basename(command[0])} failed: {errors.strip()[-2000:]}")


def remove_stale(directory: str) -> None:
    """Remove compile outputs an hour old (a compile killed with its process) from ``directory``."""
    now = time.time()
    for name in os.listdir(directory):
        if name.endswith(PART):
            with contextlib.suppress(OSError):
                if now - os.lstat(os.path.join(directory, name)).st_mtime > STALE_SECONDS:
                    os.unlink(os.path.join(directory, name))


class FirstUse:
    """A module had by ``load()`` (which raises :class:`NativeUnavailable` where it cannot be) on
    a thread of its own, started at the first :meth:`get`; ``what`` names it in the warning of a
    cache refused or unusable (said once)."""

    def __init__(self, load, what: str):
        self._load, self._what = load, what
        self.found: list = []  # the module, or None where it cannot be had: once known
        self.build: threading.Thread | None = None
        self._lock = threading.Lock()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self.after_fork)

    def get(self, wait: bool = False):
        """The module, or None while it is being built or where it cannot be (``wait``: until it is
        known, for tests and benchmarks)."""
        found = self.found
        if found:
            return found[0]
        with self._lock:
            if self.build is None:
                self.build = threading.Thread(target=self._find, name=f"{self._what} build", daemon=True)
                self.build.start()
        if wait:
            self.build.join()
        return self.found[0] if self.found else None

    def _find(self) -> None:
        try:
            module = self._load()
        except NativeUnavailable:  # (no compiler, not Linux, turned off: the Python reader answers)
            module = None
        except Exception as exc:  # noqa: BLE001 - a cache refused or unusable, a build that failed to load
            warnings.warn(CacheWarning(f"{self._what} is not used: {exc}"), stacklevel=2)
            module = None
        self.found.append(module)

    def after_fork(self) -> None:
        # (a child forked while the build's thread ran has no such thread: it asks again)
        if not self.found:
            self.build = None

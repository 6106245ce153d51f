"""A directory of compiled machine code shared by processes: ``compile(..., cache=DIR)``.

An entry is the target's kernel artifact (object code and the host it was built for) for one
program, named by a digest of everything the code depends on: the SilvanForge version, the target,
the host (CPU name and features, LLVM version: the target's ``silvanforge_target_host``) and
the LIR digest (the lowered program: model buffers' types and shapes, loop nest,
representation).  The target checks the host again when it maps the code; a mismatch compiles
again and replaces the entry.  Entries start with
the SHA-256 of their body: a truncated or damaged entry is rebuilt, never run.  Writes go to a
private temporary file renamed into place, so processes compiling the same model at once both
succeed.  The directory must be private to the user (:func:`silvanforge.userdirs.private_dir`):
its code is run without a signature because only the user can have put it there.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile

from . import __version__
from .userdirs import private_dir

_DIGEST = 32  # bytes of SHA-256 before each entry's body


def key(target: str, lir_digest: str, host: str | None) -> str:
    """An entry's name: the version, the target, the host the code runs on (the target's
    ``silvanforge_target_host``), the program's LIR digest."""
    return hashlib.sha256(f"silvanforge {__version__}\0{target}\0{host}\0{lir_digest}".encode()).hexdigest()


def _path(directory: str, entry: str) -> str:
    return os.path.join(directory, entry[:2], entry + ".kernel")


def get(directory: str | os.PathLike, entry: str) -> bytes | None:
    """The stored body of ``entry``, or None when absent or damaged (then removed)."""
    path = _path(private_dir(directory), entry)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    body = raw[_DIGEST:]
    if len(raw) <= _DIGEST or hashlib.sha256(body).digest() != raw[:_DIGEST]:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    return body


def put(directory: str | os.PathLike, entry: str, body: bytes) -> None:
    """Store ``body`` under ``entry`` atomically (a concurrent writer of the same entry writes
    the same bytes; the last rename wins)."""
    directory = private_dir(directory)
    sub = private_dir(os.path.dirname(_path(directory, entry)))
    fd, tmp = tempfile.mkstemp(dir=sub, prefix=".entry-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(hashlib.sha256(body).digest() + body)
        os.replace(tmp, _path(directory, entry))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

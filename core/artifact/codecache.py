"""A directory of compiled machine code shared by processes: ``compile(..., cache=DIR)``.

An entry is the target's kernel artifact (object code and the host it was built for) for one
program, named by a digest of everything the code depends on: the SilvanForge version, the target,
the host (CPU name and features, LLVM version, the code generator: the target's ``host_key()``) and
the LIR digest (the lowered program: model buffers' types and shapes, loop nest,
representation).  The target checks the host again when it maps the code; a mismatch compiles
again and replaces the entry.

The cache's code runs unsigned, so everything it reads is checked first:

- the top directory is private to the user (:func:`silvanforge.artifact.userdirs.private_dir`), and so is
  every two-character sub-directory entries live in: a real directory (not a link), owned by the
  user, not writable by group or others.  A sub-directory that fails is never read from; the next
  store removes it (a link is unlinked, never followed) and makes it again, private;
- each entry starts with an HMAC-SHA256 of its name and body under a random per-user secret kept
  in the top directory (``.secret``, 0600).  Whoever could write into a sub-directory cannot read
  the secret, so cannot make an entry that passes; a truncated, damaged or planted entry is
  deleted and rebuilt, never run.  The entry is opened without following links and must be a
  regular file of the user's.

Writes go to a private temporary file renamed into place, so processes compiling the same model
at once both succeed.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import shutil
import stat
import tempfile
import threading
import warnings

from silvanforge import __version__
from silvanforge.errors import CacheWarning, InputError
from silvanforge.artifact.userdirs import UnusableDirError, private_dir

_TAG = 32  # bytes of HMAC-SHA256 before each entry's body
_SECRET_NAME = ".secret"
_SECRET_BYTES = 32


def key(target: str, lir_digest: str, host: str | None) -> str:
    """An entry's name: the version, the target, the host the code runs on (the target's
    ``host_key()``), the program's LIR digest."""
    return hashlib.sha256(f"silvanforge {__version__}\0{target}\0{host}\0{lir_digest}".encode()).hexdigest()


def _mine(st: os.stat_result, kind, forbidden: int) -> bool:
    """Whether ``st`` (an lstat) is a ``kind`` of this user's with none of the ``forbidden`` bits."""
    owner_ok = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    return kind(st.st_mode) and owner_ok and not st.st_mode & forbidden


_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _tag(secret: bytes, entry: str, body: bytes) -> bytes:
    # The name is bound too: a valid entry copied under another program's name does not pass.
    return hmac.new(secret, entry.encode() + b"\0" + body, hashlib.sha256).digest()


def _secret(top: str) -> bytes:
    """The per-user secret in ``top``; made on first use, replaced when it is not a private
    regular file of the right length (then entries made under the old one are rebuilt)."""
    path = os.path.join(top, _SECRET_NAME)
    for _ in range(3):
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            _make_secret(top, path)
            continue
        except OSError:  # a link (ELOOP) or something else unreadable: replace it
            data = None
        else:
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read(_SECRET_BYTES + 1)
            if _mine(st, stat.S_ISREG, 0o077) and len(data) == _SECRET_BYTES:
                return data
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        _make_secret(top, path)
    raise InputError(f"{path}: cannot keep the code cache's secret there")


def _make_secret(top: str, path: str) -> None:
    # Written whole under a temporary name, then linked to the real one: a concurrent reader
    # sees no secret or the whole of one, and of two processes making it at once one wins.
    fd, tmp = tempfile.mkstemp(dir=top, prefix=".secret-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(_SECRET_BYTES))
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _sub(top: str, entry: str) -> str:
    return os.path.join(top, entry[:2])


def _sub_is_private(sub: str) -> bool:
    try:
        return _mine(os.lstat(sub), stat.S_ISDIR, _OTHERS_WRITE)
    except OSError:
        return False


def _private_sub(top: str, entry: str) -> str:
    """The entry's sub-directory, made private: one that is not (a link, a file, a directory
    others can write to or own) is removed with what it holds and made again."""
    sub = _sub(top, entry)
    for _ in range(3):
        try:
            os.mkdir(sub, 0o700)
        except FileExistsError:
            pass  # (any other OSError, a full or read-only disk, is put's to warn of)
        if _sub_is_private(sub):
            return sub
        try:
            st = os.lstat(sub)
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(sub)  # the fd-based rmtree: never follows a link inside
            else:
                os.unlink(sub)  # a link is removed, not what it points to
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise InputError(f"{sub}: writable by other users and cannot be removed "
                             f"({exc.strerror}); refusing to keep code there") from None
    raise InputError(f"{sub}: cannot be made private to you; refusing to keep code there")


def _path(top: str, entry: str) -> str:
    return os.path.join(_sub(top, entry), entry + ".kernel")


def _get(directory: str | os.PathLike, entry: str) -> bytes | None:
    """The stored body of ``entry``, or None when absent, damaged or not provably ours (a damaged
    entry in a private sub-directory is removed; a sub-directory that is not private is never
    read, and the next :func:`put` replaces it)."""
    top = private_dir(directory)
    if not _sub_is_private(_sub(top, entry)):
        return None
    path = _path(top, entry)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError:
        raw, st = b"", None
    else:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read() if _mine(st, stat.S_ISREG, _OTHERS_WRITE) else b""
    body = raw[_TAG:]
    if len(raw) <= _TAG or not hmac.compare_digest(raw[:_TAG], _tag(_secret(top), entry, body)):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    return body


_warned: set = set()
_warned_lock = threading.Lock()


def _warn_once(directory, what: str, exc: OSError) -> None:
    """Say once a directory that the cache failed: a cache is an optimisation, and a job whose
    cache disk is full must still deliver its predictions."""
    top = os.path.abspath(os.fspath(directory))
    with _warned_lock:
        if top in _warned:
            return
        _warned.add(top)
    why = getattr(exc, "strerror", None) or exc
    warnings.warn(CacheWarning(f"code cache {top}: cannot {what} ({why}); compiling without it"), stacklevel=3)


def get(directory: str | os.PathLike, entry: str) -> bytes | None:
    """The stored body of ``entry``, or None when absent, damaged, not provably ours, or the
    cache cannot be read (a :class:`~silvanforge.errors.CacheWarning`, once a directory)."""
    try:
        return _get(directory, entry)
    except (OSError, UnusableDirError) as exc:
        _warn_once(directory, "read", exc)
        return None


def put(directory: str | os.PathLike, entry: str, body: bytes) -> None:
    """Store ``body`` under ``entry`` atomically; where the cache cannot be written (a full
    disk), a :class:`~silvanforge.errors.CacheWarning` once a directory, and nothing stored."""
    try:
        _put(directory, entry, body)
    except (OSError, UnusableDirError) as exc:
        _warn_once(directory, "write", exc)


def _put(directory: str | os.PathLike, entry: str, body: bytes) -> None:
    """Store ``body`` under ``entry`` atomically (a concurrent writer of the same entry writes
    the same bytes; the last rename wins)."""
    top = private_dir(directory)
    tag = _tag(_secret(top), entry, body)
    sub = _private_sub(top, entry)
    fd, tmp = tempfile.mkstemp(dir=sub, prefix=".entry-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(tag + body)
        os.replace(tmp, _path(top, entry))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

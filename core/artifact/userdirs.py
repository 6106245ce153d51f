"""The user's own directories for caches: created private (0700) and checked before use.

A directory another local user owns or can write to could hold a planted library or artifact
that we would then load and run, so such a directory is refused, never used.
"""

from __future__ import annotations

import os
import stat

from silvanforge.errors import InputError


class UnusableDirError(InputError):
    """The file system would not make or read the directory (full, read-only, no permission):
    a cache then warns and goes on, where a directory refused for its owner or permissions
    stays an error."""


def cache_home() -> str:
    """``$XDG_CACHE_HOME/silvanforge`` (``~/.cache/silvanforge``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "silvanforge")


def private_dir(path: str | os.PathLike) -> str:
    """``path`` as a directory only this user can write: made (with parents) 0700 if missing;
    an existing one must be owned by this user and not writable by group or others."""
    path = os.path.expanduser(os.fspath(path))
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        # A file in the way is the caller's mistake; a full, read-only or forbidden disk is not.
        kind = InputError if isinstance(exc, (FileExistsError, NotADirectoryError)) else UnusableDirError
        raise kind(f"{path}: cannot be used as a cache directory "
                   f"({exc.strerror or type(exc).__name__})") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: not a directory (a link or file is not used as a cache)")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise InputError(f"{path}: owned by another user; refusing to keep or load code there")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InputError(f"{path}: writable by other users; refusing to keep or load code there "
                         f"(chmod go-w {path})")
    return path

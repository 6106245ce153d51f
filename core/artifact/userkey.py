"""The user's own artifact key: artifacts this user saves are signed with it, so that loading
them runs their machine code at once (milliseconds) instead of compiling their model again, as
Jupyter signs its users' notebooks.  Artifacts signed by another key, or by none, still compile
again unless ``key=`` / ``SILVANFORGE_ARTIFACT_KEY`` or ``trust_code=True`` says otherwise.

The key is 32 random bytes (hex) in ``$XDG_CONFIG_HOME/silvanforge/artifact.key``
(``~/.config/silvanforge/artifact.key``), made by the first save, in a directory only this user
can write (0700) and a file only this user can read (0600).  A key file others can read or
write is refused with an error, never used: whoever can read it can sign code this user's
loads would run.  ``SILVANFORGE_KEY_FILE`` names another file (a fleet's, provisioned on each
host); ``SILVANFORGE_USER_KEY=0`` turns the per-user key off (the test suite does, so a run
never writes into the user's home).  ``forge key show|rotate|export`` manages it.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
import warnings

from silvanforge.errors import ArtifactWarning, InputError
from silvanforge.artifact.userdirs import private_dir

KEY_FILE_ENV = "SILVANFORGE_KEY_FILE"
ENABLE_ENV = "SILVANFORGE_USER_KEY"
_BYTES = 32


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def path() -> str:
    """Where the key is kept (whether or not it exists yet)."""
    given = os.environ.get(KEY_FILE_ENV)
    if given:
        return os.path.expanduser(given)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "silvanforge", "artifact.key")


def load(create: bool = False) -> bytes | None:
    """The user's key, made first where ``create`` and there is none; None where the per-user
    key is off, or there is none and ``create`` is false.  An InputError where the file is not
    a private regular file of this user's or does not hold a key."""
    if not enabled():
        return None
    where = path()
    try:
        fd = os.open(where, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        if not create:
            return None
        if os.environ.get(KEY_FILE_ENV):
            # A fleet's key that is not there (a typo, a volume not mounted): a fresh random key
            # would sign artifacts no other host of the fleet trusts, silently.
            raise InputError(f"{KEY_FILE_ENV} names {where}, which does not exist: provision the fleet's "
                             "key there (forge key export on the host that has it), or unset it") from None
        try:
            return _make(where)
        except (OSError, InputError) as exc:  # no home to keep it in (a service user, a read-only root)
            warnings.warn(ArtifactWarning(
                f"cannot make your artifact key {where} ({exc}): saved unsigned, so loading it compiles "
                f"its model again (set {KEY_FILE_ENV} to a writable place, or SILVANFORGE_ARTIFACT_KEY)"),
                stacklevel=4)
            return None
    except OSError as exc:
        raise InputError(f"the artifact key {where} cannot be read ({exc.strerror or exc}): a link or "
                         "unreadable file is not used as a key") from None
    with os.fdopen(fd, "rb") as f:
        _check(where, os.fstat(f.fileno()))  # before reading: a pipe there is never read
        text = f.read(64 << 10)  # a fleet's key may be longer than ours
    try:
        key = text.decode("ascii").strip()
        raw = bytes.fromhex(key)
    except (UnicodeDecodeError, ValueError):
        raw = b""
    if len(raw) < 16:
        raise InputError(f"the artifact key {where} does not hold a key (hex, 16 bytes or more): "
                         "forge key rotate makes a new one")
    # The hex text itself is the key, as SILVANFORGE_ARTIFACT_KEY's value is: what forge key
    # export prints, set there on another host, signs and checks the same.
    return key.encode("ascii")


def _check(where: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"the artifact key {where} is not a regular file")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise InputError(f"the artifact key {where} belongs to another user: refused (a key others hold "
                         "signs code your loads would run)")
    if st.st_mode & 0o077:
        raise InputError(f"the artifact key {where} can be read or written by others (mode "
                         f"{stat.S_IMODE(st.st_mode):04o}): refused; chmod 600 {where}, or forge key rotate "
                         "if others may have read it")


def _make(where: str, replace: bool = False) -> bytes:
    private_dir(os.path.dirname(where) or ".")
    key = secrets.token_hex(_BYTES).encode("ascii")
    tmp = f"{where}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key + b"\n")
        if replace:
            os.replace(tmp, where)
        else:
            try:
                os.link(tmp, where)  # of two processes making it at once, one wins
            except FileExistsError:
                return load(create=False) or key
            except OSError:  # a file system without hard links: renamed (a race may then lose a key)
                if os.path.exists(where):
                    return load(create=False) or key
                os.replace(tmp, where)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return key


def rotate() -> bytes:
    """A new key in place of the old: artifacts signed with the old one compile again on load."""
    if not enabled():
        raise InputError(f"the per-user artifact key is off ({ENABLE_ENV}=0)")
    return _make(path(), replace=True)


def fingerprint(key: bytes) -> str:
    """What ``forge key show`` prints of a key: enough to compare two hosts', nothing to sign with."""
    return hashlib.sha256(b"silvanforge artifact key\0" + key).hexdigest()[:16]

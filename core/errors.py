"""The errors SilvanForge raises for user mistakes.

Every error a user can cause derives from :class:`SilvanForgeError`, so the CLI can print the
message as one line and exit non-zero without a traceback, and library callers can catch one
type.  Internal bugs stay ordinary exceptions and keep their tracebacks.
"""

from __future__ import annotations


class SilvanForgeError(Exception):
    """Base class of every error caused by user input (a file, an argument, a schedule)."""


class ModelFormatError(SilvanForgeError):
    """A model file is malformed, truncated, or of a format no installed importer reads."""


class UnsupportedModelError(SilvanForgeError):
    """A model uses a feature SilvanForge does not support; the message names the feature."""


class InputError(SilvanForgeError):
    """Inputs to ``predict`` have the wrong shape, dtype or contents."""


class PluginError(SilvanForgeError):
    """An unknown plugin was asked for, or a plugin cannot run here."""


class ScheduleError(SilvanForgeError):
    """A schedule is malformed or is not legal for this model and target."""


class IRVerificationError(Exception):
    """An IR failed its verifier.  This is a compiler bug, not a user error."""


class ArtifactError(SilvanForgeError):
    """A saved compiled model is corrupt, from another version, or for another machine."""


class ArtifactWarning(UserWarning):
    """A saved compiled model was loaded without running its machine code (it was compiled
    again): the artifact is not signed with the loader's key, or is from an older version."""


class CacheWarning(UserWarning):
    """The code cache could not be read or written (a full disk, a read-only directory): the
    model was compiled and predicts as without a cache, and this is said once a directory."""

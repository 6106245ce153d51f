"""SilvanForge: a schedule-guided compiler for decision-forest inference.

    import silvanforge as sf
    forest = sf.load_model("model.json")
    cf = sf.compile(forest)            # for this machine's CPU
    y = cf.predict(X)

Run-time settings (how calls split rows over threads; never the code compiled):
:func:`config_context`, :func:`set_config`, :func:`get_config` (:mod:`silvanforge.runtime.threads`).
"""

from __future__ import annotations

from silvanforge.errors import (
    ArtifactError,
    ArtifactWarning,
    CacheWarning,
    InputError,
    ModelFormatError,
    PluginError,
    ScheduleError,
    SilvanForgeError,
    UnsupportedModelError,
)
from silvanforge.frontend.loading import load_model
from silvanforge.hookspecs import hookimpl
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, Op, Transform, Tree
from silvanforge.runtime.threads import config_context, get_config, set_config

__version__ = "0.1.0"

__all__ = [
    "ArtifactError", "ArtifactWarning", "CacheWarning", "InputError", "ModelFormatError", "PluginError", "ScheduleError",
    "SilvanForgeError", "UnsupportedModelError", "hookimpl", "Aggregation", "CategoryRule",
    "Forest", "Op", "Transform", "Tree", "load_model", "compile", "load_compiled",
    "CompiledForest", "lower", "show", "tune", "profile", "load_profile", "Profile", "CompileOptions",
    "config_context", "set_config", "get_config", "__version__",
]


def __dir__():
    # The lazily imported names (compile, ...) are part of the API: list them too.
    return sorted(set(globals()) | set(__all__))


def __getattr__(name):
    # The compiler pulls in the scheduler and lowering; import it only when first used so
    # `import silvanforge` inside a plugin stays cheap and free of cycles.
    if name in ("compile", "load_compiled", "CompiledForest", "lower", "show"):
        from silvanforge import api

        return getattr(api, name)
    if name == "tune":
        from silvanforge.plan import tuning

        return tuning.tune
    if name == "CompileOptions":
        from silvanforge.options import CompileOptions

        return CompileOptions
    if name in ("profile", "load_profile", "Profile"):
        from silvanforge.frontend import profiling

        return getattr(profiling, name)
    raise AttributeError(name)

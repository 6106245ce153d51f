"""The AMD target: LIR -> OpenCL C, built and launched through pyopencl (ROCm on AMD GPUs, PoCL on
CPUs).

Code generation is not implemented yet, so this plugin registers the ``amd`` target and reports
honestly why it cannot run: ``forge plugins`` shows whether pyopencl and an OpenCL platform are
present, followed by the missing code generator.
"""

from __future__ import annotations

import importlib.util

from silvanforge import hookimpl
from silvanforge.errors import PluginError

NAME = "amd"
NOT_IMPLEMENTED = "OpenCL code generation is not implemented yet"


def platforms() -> tuple[list[str], str | None]:
    """(names of the OpenCL platforms with a device, the problem if there are none)."""
    if importlib.util.find_spec("pyopencl") is None:
        return [], "pyopencl is not installed (pip install pyopencl)"
    try:
        import pyopencl as cl

        found = []
        for p in cl.get_platforms():
            try:
                if p.get_devices():
                    found.append(p.name.strip())
            except Exception:  # a platform without devices raises on some ICDs
                continue
    except Exception as exc:  # no ICD loader, or no platform at all
        return [], f"no OpenCL platform found ({' '.join(str(exc).split())[:160]})"
    if not found:
        return [], "no OpenCL platform with a device found (install ROCm, or pocl-binary-distribution for CPUs)"
    return found, None


def problems() -> list[str]:
    names, problem = platforms()
    found = [problem] if problem else []
    found.append(NOT_IMPLEMENTED + (f" (OpenCL platforms here: {', '.join(names)})" if names else ""))
    return found


@hookimpl
def silvanforge_targets():
    return [NAME]


@hookimpl
def silvanforge_target_available(target):
    if target != NAME:
        return None
    missing = problems()
    return (not missing), "; ".join(missing)


@hookimpl
def silvanforge_target_compile(target, module, options):
    if target != NAME:
        return
    raise PluginError(f"target 'amd' cannot run: {'; '.join(problems())}")


@hookimpl
def silvanforge_target_source(target, module):
    if target != NAME:
        return
    raise PluginError(f"target 'amd': {NOT_IMPLEMENTED}")

"""The AMD target: LIR -> OpenCL C, built and launched through pyopencl.

It runs on AMD GPUs under ROCm and on any OpenCL platform, including PoCL on a CPU (where CI
runs it).  The GPU backend it shares with the cuda target (silvanforge-gpu) lowers the MIR
(:mod:`silvanforge_gpu.lowering`) and writes the C (:mod:`silvanforge_gpu.c_dialect`, the OpenCL
dialect); the launching around it is :class:`silvanforge_gpu.runtime.GpuKernel`.
``SILVANFORGE_OPENCL_DEVICE`` (a substring of a platform or device name) picks a device;
otherwise GPUs come first.
"""

from __future__ import annotations

import importlib.util

from silvanforge import hookimpl
from silvanforge_gpu.hooks import target_hooks

NAME = "amd"


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


@hookimpl
def silvanforge_targets():
    return [NAME]


@hookimpl
def silvanforge_target_kind(target):
    return "gpu" if target == NAME else None


@hookimpl
def silvanforge_target_available(target):
    if target != NAME:
        return None
    _, problem = platforms()
    if problem is None:
        from .opencl import build_problem

        problem = build_problem()
    return (problem is None), problem or ""


# The default schedule (the GPU template), the lowering and the template's named schedules:
# as every GPU target has them (silvanforge_gpu.hooks).
(silvanforge_target_default_schedule, silvanforge_target_lower,
 silvanforge_schedules) = target_hooks(NAME)


@hookimpl
def silvanforge_target_source(target, module):
    if target != NAME:
        return None
    from silvanforge_gpu.c_dialect import OPENCL, emit

    return emit(module, OPENCL)


@hookimpl
def silvanforge_target_compile(target, module, options):
    if target != NAME:
        return None
    from .opencl import OpenCLKernel

    return OpenCLKernel(module)


@hookimpl
def silvanforge_target_load_kernel(target, module, blob, options):
    if target != NAME:
        return None
    return None  # OpenCL programs are rebuilt from the LIR (drivers cache their binaries)

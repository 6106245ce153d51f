"""The CUDA target: LIR -> CUDA C, compiled and launched through pycuda (NVIDIA GPUs).

Code generation is not implemented yet, so this plugin registers the ``cuda`` target and
reports honestly why it cannot run: ``forge plugins`` shows what is missing on this machine
(pycuda, the CUDA driver, a GPU) followed by the missing code generator.  pycuda is imported only
to check and (later) to launch kernels, so the distribution installs on machines without CUDA.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util

from silvanforge import hookimpl
from silvanforge.errors import PluginError

NAME = "cuda"
NOT_IMPLEMENTED = "CUDA code generation is not implemented yet"


def _driver_problem() -> str | None:
    """Why the CUDA driver is unusable, or None if it initialises and sees a GPU."""
    lib = None
    for candidate in ("libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda"), "nvcuda.dll"):
        if not candidate:
            continue
        try:
            lib = ctypes.CDLL(candidate)
            break
        except OSError:
            continue
    if lib is None:
        return "no CUDA driver (libcuda) found"
    try:
        if lib.cuInit(0) != 0:
            return "the CUDA driver failed to initialise (cuInit)"
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
            return "the CUDA driver sees no GPU"
    except (AttributeError, OSError) as exc:  # a stub or broken libcuda
        return f"the CUDA driver is unusable ({exc})"
    return None


def problems() -> list[str]:
    """Everything standing between this machine and running the ``cuda`` target."""
    found = []
    if importlib.util.find_spec("pycuda") is None:
        found.append("pycuda is not installed (pip install pycuda)")
    driver = _driver_problem()
    if driver:
        found.append(driver)
    found.append(NOT_IMPLEMENTED)
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
    raise PluginError(f"target 'cuda' cannot run: {'; '.join(problems())}")


@hookimpl
def silvanforge_target_source(target, module):
    if target != NAME:
        return
    raise PluginError(f"target 'cuda': {NOT_IMPLEMENTED}")

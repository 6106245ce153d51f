"""The AMD target: LIR -> OpenCL C, built and launched through pyopencl.

It runs on AMD GPUs under ROCm and on any OpenCL platform, including PoCL on a CPU (where CI
runs it).  The GPU backend it shares with the cuda target (silvanforge-gpu) lowers the MIR
(:mod:`silvanforge_gpu.lowering`) and writes the C (:mod:`silvanforge_gpu.c_dialect`, the OpenCL
dialect), through :class:`AmdTarget`'s base :class:`silvanforge_gpu.target.GpuTarget`; the
launching around it is :class:`silvanforge_gpu.runtime.GpuKernel`.
``SILVANFORGE_OPENCL_DEVICE`` (a substring of a platform or device name) picks a device;
otherwise GPUs come first.
"""

from __future__ import annotations

import importlib.util

from silvanforge import hookimpl
from silvanforge_gpu.target import GpuTarget, silvanforge_schedules  # noqa: F401  (a hook: the template's names)

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
        return [], ("no OpenCL platform with a device found (install ROCm; for CPUs, Debian's or Ubuntu's "
                    "pocl-opencl-icd, or pip's pocl-binary-distribution)")
    return found, None


class AmdTarget(GpuTarget):
    """OpenCL C built and launched through pyopencl.  Its kernels have no artifact: a saved
    model's program is built again from the LIR when loaded (drivers cache their binaries)."""

    name = NAME

    def c_dialect(self):
        from silvanforge_gpu.c_dialect import OPENCL

        return OPENCL

    def can_run_here(self) -> tuple[bool, str]:
        _, problem = platforms()
        if problem is None:
            from .opencl import build_problem

            problem = build_problem()
        return (problem is None), problem or ""

    def host_key(self) -> str | None:
        """The OpenCL device, its driver and platform (a plan tuned on another device falls
        back), or None where no device can run here."""
        if platforms()[1] is not None:
            return None
        try:
            from .opencl import device_key

            return device_key()
        except Exception:  # noqa: BLE001 - no usable device: no key
            return None

    def compile(self, module, options):
        from .opencl import OpenCLKernel

        return OpenCLKernel(module)


@hookimpl
def silvanforge_targets():
    return [AmdTarget]

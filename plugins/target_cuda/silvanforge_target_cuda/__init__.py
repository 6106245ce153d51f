"""The CUDA target: LIR -> CUDA C -> PTX (nvcc), launched through pycuda on NVIDIA GPUs.

Generating and compiling the code needs no GPU and no pycuda: ``forge show --level target``
prints the CUDA C anywhere, and :func:`compile_ptx` turns it into PTX wherever nvcc is installed
(the tests do so for sm_80 and sm_90).  pycuda is imported only to run kernels.  The GPU
backend it shares with the amd target (silvanforge-gpu) lowers the MIR
(:mod:`silvanforge_gpu.lowering`) and writes the C (:mod:`silvanforge_gpu.c_dialect`, the CUDA
dialect), through :class:`CudaTarget`'s base :class:`silvanforge_gpu.target.GpuTarget`; the
launching around it is :class:`silvanforge_gpu.runtime.GpuKernel`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util

from silvanforge import hookimpl
from silvanforge_gpu.target import GpuTarget, silvanforge_schedules  # noqa: F401  (a hook: the template's names)

from .nvcc import compile_ptx, find_nvcc  # noqa: F401  (public: tests and users compile PTX)

NAME = "cuda"


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


def device_key() -> str | None:
    """The GPU the kernels run on (name, compute capability, driver version) as JSON, or None
    where the driver sees none: read through the driver API (ctypes), without pycuda."""
    import json

    if _driver_problem() is not None:
        return None
    lib = ctypes.CDLL("libcuda.so.1")
    name = ctypes.create_string_buffer(256)
    major, minor, driver, dev = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if lib.cuDeviceGet(ctypes.byref(dev), 0) != 0 or lib.cuDeviceGetName(name, 256, dev) != 0:
        return None
    lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
    lib.cuDriverGetVersion(ctypes.byref(driver))
    return json.dumps({"device": name.value.decode(errors="replace"), "arch": f"sm_{major.value}{minor.value}",
                       "driver": driver.value})


def problems() -> list[str]:
    """Everything standing between this machine and running the ``cuda`` target."""
    found = []
    if importlib.util.find_spec("pycuda") is None:
        found.append("pycuda is not installed (pip install pycuda)")
    driver = _driver_problem()
    if driver:
        found.append(driver)
    if find_nvcc() is None:
        found.append("nvcc (the CUDA toolkit) is not on PATH or in CUDA_HOME")
    return found


def source(module) -> str:
    from silvanforge_gpu.c_dialect import CUDA, emit

    from .finish import SOURCE as FINISH

    # The output transforms of device-array calls ride in every module (one nvcc run, one PTX
    # an artifact keeps): .finish says when they are used.
    return emit(module, CUDA) + FINISH


class CudaTarget(GpuTarget):
    """CUDA C compiled to PTX by nvcc, launched through pycuda (imported only by ``compile``
    and ``load_kernel``: generating and compiling to PTX need neither pycuda nor a GPU)."""

    name = NAME

    def c_dialect(self):
        from silvanforge_gpu.c_dialect import CUDA

        return CUDA

    def can_run_here(self) -> tuple[bool, str]:
        missing = problems()
        return (not missing), "; ".join(missing)

    def host_key(self) -> str | None:
        """The GPU (device 0: the one kernels run on), its architecture and driver."""
        try:
            return device_key()
        except OSError:
            return None

    def compile(self, module, options):
        from .launch import CudaKernel

        return CudaKernel(module)

    def load_kernel(self, module, blob, options):
        from .launch import CudaKernel

        return CudaKernel.from_artifact(module, blob)


@hookimpl
def silvanforge_targets():
    return [CudaTarget]

"""CUDA C -> PTX with nvcc (no GPU and no pycuda needed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from silvanforge.errors import PluginError


def find_nvcc() -> str | None:
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


def compile_ptx(source: str, arch: str = "sm_80") -> str:
    """PTX for ``arch`` (``sm_80``, ``sm_90`` ...).  No fast-math flags: NaN tests and float
    comparisons must stay exact."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise PluginError("nvcc (the CUDA toolkit) is not on PATH or in CUDA_HOME")
    with tempfile.TemporaryDirectory(prefix="silvanforge-cuda-") as tmp:
        src, out = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as f:
            f.write(source)
        proc = subprocess.run([nvcc, "-ptx", f"-arch={arch}", "-O3", "-o", out, src],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise PluginError(f"nvcc failed for {arch}:\n{proc.stderr.strip()[:4000]}")
        with open(out) as f:
            return f.read()

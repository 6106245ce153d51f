"""Object code of an LIR module for another architecture (AArch64), built on this host.

What for: the generated kernels must stay correct on the CPUs users run, ARM ones (AWS
Graviton, Ampere, Apple silicon under Linux) included, which no CI machine here is.  The path is
the one ``compile(..., cpu="neoverse-n1")`` takes (:func:`.jit.compile_module` makes a
:class:`.jit.ForeignKernel`): the same LLVM IR, generated without x86 intrinsics, optimised by
the O3 pipeline for the AArch64 target machine, emitted as an ELF object.  The tests link it into
a small driver and run it under ``qemu-aarch64`` against the reference evaluator
(tests/support_qemu.py).  Timings there mean nothing; correctness does.
"""

from __future__ import annotations

from silvanforge.ir import lir

from . import codegen, cpus, jit


def object_code(module: lir.Module, cpu: str = "generic-aarch64") -> bytes:
    """``module`` compiled to an AArch64 ELF object for ``cpu`` (a name :mod:`.cpus` knows:
    ``generic-aarch64``, ``neoverse-n1``, ``neoverse-v1``, ``apple-m1``...).  Its functions are the
    module's phases, with the native kernels' calling convention (lir.SCALAR_PARAMS)."""
    cpu = cpus.canonical(cpu)
    if cpus.triple(cpu) != cpus.AARCH64_TRIPLE:
        raise ValueError(f"{cpu!r} is not an AArch64 CPU")
    kernel = jit.compile_module(module, str(codegen.generate(module, cpu=cpu)), cpu)
    return kernel.object_code

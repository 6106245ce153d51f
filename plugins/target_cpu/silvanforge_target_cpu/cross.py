"""Object code of an LIR module for another architecture (AArch64), built on this host.

What for: the generated kernels must stay correct on the CPUs users run, ARM ones (AWS
Graviton, Ampere, Apple silicon under Linux) included, which no CI machine here is.  This module
turns a module the cpu target lowered into an AArch64 ELF object (the same LLVM IR the JIT
compiles, generated without x86 intrinsics, optimised by the O3 pipeline for the AArch64 target
machine); the tests link it into a small driver and run it under ``qemu-aarch64`` against the
reference evaluator (tests/support_qemu.py).  Timings there mean nothing; correctness does.
"""

from __future__ import annotations

import threading

import llvmlite.binding as llvm

from silvanforge.ir import lir

from .codegen import LLVMCodegen

AARCH64 = "aarch64-unknown-linux-gnu"

_lock = threading.Lock()
_ready = False


def _init() -> None:
    global _ready
    with _lock:
        if not _ready:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _ready = True


def object_code(module: lir.Module, triple: str = AARCH64, cpu: str = "generic") -> bytes:
    """``module`` compiled to an ELF object for ``triple`` and ``cpu`` (LLVM's names: for
    AArch64 ``generic``, ``neoverse-n1``, ``neoverse-v1``, ``apple-m1``...).  Its functions are
    the module's phases, with the native kernels' calling convention (lir.SCALAR_PARAMS)."""
    _init()
    # No x86 lookups: table lookups become the portable gathers LLVM lowers for the target.
    ir_text = str(LLVMCodegen(module, permutes=False, byte_permutes=False, avx2_permutes=False).generate())
    target = llvm.Target.from_triple(triple)
    tm = target.create_target_machine(cpu=cpu, features="", opt=3, reloc="pic", codemodel="default")
    mod = llvm.parse_assembly(ir_text)
    mod.triple = triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pb = llvm.create_pass_builder(tm, llvm.PipelineTuningOptions(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_object(mod)

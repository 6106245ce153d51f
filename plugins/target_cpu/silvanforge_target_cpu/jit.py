"""Optimise LLVM IR with the new pass manager at O3, JIT it for this host, and call it via ctypes.

ctypes releases the GIL for the duration of a foreign call, so the core's thread pool runs
row chunks of one kernel truly in parallel.  The kernel holds no mutable state: it is safe to
call from many threads at once.
"""

from __future__ import annotations

import ctypes
import json
import threading

import llvmlite.binding as llvm
import numpy as np

from silvanforge.ir import lir

_lock = threading.Lock()
_initialised = False


def _init():
    global _initialised
    with _lock:
        if not _initialised:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialised = True


def host_signature() -> dict:
    """What machine code depends on: a saved kernel is reused only on an identical host."""
    _init()
    return {"triple": llvm.get_process_triple(), "cpu": llvm.get_host_cpu_name(),
            "features": llvm.get_host_cpu_features().flatten(), "llvm": list(llvm.llvm_version_info)}


def _target_machine():
    _init()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, codemodel="jitdefault")


def optimise(ir_text: str):
    """Parse, verify and run the O3 module pipeline; returns (module, target machine)."""
    tm = _target_machine()
    mod = llvm.parse_assembly(ir_text)
    mod.triple = llvm.get_process_triple()
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.PipelineTuningOptions(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod, tm


class CpuKernel:
    """A JIT-compiled predict function plus the model buffers it reads."""

    def __init__(self, module: lir.Module, llvm_module, tm):
        self.module = module
        self._llvm_module = llvm_module
        self._engine = llvm.create_mcjit_compiler(llvm_module, tm)
        self._engine.finalize_object()
        addr = self._engine.get_function_address(module.function.name)
        in_ct = ctypes.c_float if module.input_type == "f32" else ctypes.c_double
        out_ct = ctypes.c_float if module.output_type == "f32" else ctypes.c_double
        proto = ctypes.CFUNCTYPE(None, ctypes.POINTER(in_ct), ctypes.c_int64, ctypes.c_int64,
                                 ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(out_ct),
                                 ctypes.POINTER(ctypes.c_void_p))
        self._fn = proto(addr)
        self._in_ptr, self._out_ptr = ctypes.POINTER(in_ct), ctypes.POINTER(out_ct)
        # Keep the arrays alive as long as the kernel: the pointer table refers to them.
        self._buffers = [b.data for b in module.model_buffers()]
        self._table = (ctypes.c_void_p * max(1, len(self._buffers)))(
            *[a.ctypes.data for a in self._buffers])
        self.input_dtype = lir.LIR_TO_NUMPY[module.input_type]
        self.output_dtype = lir.LIR_TO_NUMPY[module.output_type]

    def __call__(self, rows: np.ndarray, out: np.ndarray, begin: int, end: int) -> None:
        """Margins of rows[begin:end] into out[begin:end]; ``rows`` may be C or Fortran ordered."""
        item = rows.itemsize
        rs, cs = rows.strides[0] // item, rows.strides[1] // item
        self._fn(rows.ctypes.data_as(self._in_ptr), rs, cs, begin, end,
                 out.ctypes.data_as(self._out_ptr), self._table)

    def artifact(self) -> bytes:
        """Optimised bitcode plus the host it was optimised for (see ``host_signature``)."""
        meta = json.dumps(host_signature()).encode()
        return len(meta).to_bytes(4, "little") + meta + self._llvm_module.as_bitcode()


def compile_module(module: lir.Module, ir_text: str) -> CpuKernel:
    mod, tm = optimise(ir_text)
    return CpuKernel(module, mod, tm)


def load_artifact(module: lir.Module, blob: bytes) -> CpuKernel | None:
    """Rebuild a kernel from saved bitcode, or None if it was built for another host."""
    n = int.from_bytes(blob[:4], "little")
    meta = json.loads(blob[4:4 + n])
    if meta != host_signature():
        return None
    mod = llvm.parse_bitcode(blob[4 + n:])
    return CpuKernel(module, mod, _target_machine())

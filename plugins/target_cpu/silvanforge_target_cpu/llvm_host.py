"""LLVM set up for this host: the native target (initialised once per process), the target
machine for this host's CPU or a named one (:mod:`.cpus`) and the optimisation pipeline: what
the JIT (jit.py) and the native pool (pool.py) share.  ``cpu`` below is a name
:func:`.cpus.canonical` gave, or None: this host.

:func:`object_code` is a kernel's whole trip through LLVM (parse, optimise, machine code), in an
LLVM context of its own, so that two threads compile two forms on two cores at once:
llvmlite runs every call under one process-wide lock, which LLVM itself needs only for what
threads share (a context, a module): the three long calls on the private module run without it.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

import llvmlite.binding as llvm
from llvmlite.binding import ffi
from llvmlite.binding.module import ModuleRef

from . import cpus

_lock = threading.Lock()
_initialised = False


def init() -> None:
    global _initialised
    with _lock:
        if not _initialised:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            # (inline assembly, :mod:`.transpose`: parsed for this host's architecture only)
            llvm.initialize_native_asmparser()
            _initialised = True


def host_has_avx512(feature: str = "avx512f", cpu: str | None = None) -> bool:
    """Whether the CPU the code is for (None: the host) has AVX-512 (F; or ``feature`` of it):
    the CPU codegen then does table lookups with permutes."""
    return cpus.has(cpu, feature)


def target_machine(gathers: bool = False, cpu: str | None = None):
    """The target machine for ``cpu``: the host's name and feature flags (None), or a named
    CPU's name with no feature flags, so LLVM derives them from the name (the host's flags would
    let it use instructions the named CPU lacks).  ``gathers``: the module walks with vector
    gathers, which LLVM otherwise splits into scalar loads on CPUs it does not tune as
    fast-gather (AMD Zen); measured faster there for vector walks (docs/benchmarks.md, "Vector
    walks")."""
    init()
    if cpus.foreign(cpu):  # another architecture's code, built here for a fleet
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(cpus.triple(cpu))
    if cpu is None:
        features = llvm.get_host_cpu_features()
        flat = features.flatten()
        has_avx2 = features.get("avx2")
    else:
        flat, has_avx2 = "", cpus.has(cpu, "avx2")
    if gathers and has_avx2:
        flat = f"{flat},+fast-gather" if flat else "+fast-gather"
    return target.create_target_machine(cpu=cpus.llvm_name(cpu) or llvm.get_host_cpu_name(), features=flat,
                                        opt=3, codemodel="jitdefault")


# A module whose info sets "light_optimisation" (long straight-line code that is already what
# the machine should run: expanded bitvector trees) gets these function passes instead of O3,
# whose InstCombine alone took a third of lgb_cancer's compile for the same machine code.
LIGHT_PASSES = ("sroa", "simplify_cfg", "new_gvn", "dead_code_elimination")


def optimise(ir_text: str, gathers: bool = False, light: bool = False, cpu: str | None = None):
    """Parse, verify and run the O3 module pipeline (``light``: :data:`LIGHT_PASSES`) for
    ``cpu`` (None: the host); returns (module, target machine)."""
    tm = target_machine(gathers, cpu)
    mod = llvm.parse_assembly(ir_text)
    _optimise(mod, tm, light, cpu, _locked)
    return mod, tm


def object_code(ir_text: str, gathers: bool = False, light: bool = False, cpu: str | None = None,
                machine_scheduler: bool = True) -> tuple[bytes, object]:
    """:func:`optimise`, then the module's machine code as an object file (what MCJIT makes of
    the same module: the same bytes), all in an LLVM context of this call's, freed before it
    returns; the parse, the pipeline and the code generation run outside llvmlite's lock (see
    the module's docstring).  ``machine_scheduler`` False: the code generation keeps the order
    of the optimised IR (:func:`_machine_scheduler`).  Returns (object code, target machine)."""
    with _machine_scheduler(machine_scheduler):
        return _object_code(ir_text, gathers, light, cpu)


class _Scheduling:
    """Whether LLVM's machine scheduler runs (the process-wide option ``-enable-misched``), and
    how many code generations use that setting now, and how many wait for each setting."""

    condition = threading.Condition()
    on, users = True, 0
    waiting = {True: 0, False: 0}


@contextlib.contextmanager
def _machine_scheduler(on: bool):
    """LLVM's (pre-register-allocation) machine scheduler on or off while the block runs.  Off,
    the code keeps the optimised IR's order: the levelwise byte program on AVX2 emits its
    levels' lookups, picks and compares in an order whose registers fit, which the scheduler
    interleaved for parallelism until the allocator spilled (xgb_100x8: 52 spill stores and 396
    vector loads a loop of two trees, 15 and 350 without it).  The option is the process's, so a
    compile wanting the other setting waits for those running to finish (compiles of one
    setting still run side by side, but none joins them while one waits for the other: a steady
    stream of one setting would hold the other off), and the last one off turns it on again.
    LLVM's other users here (the column and SHAP kernels' MCJIT) do not wait: one compiled
    meanwhile may be scheduled without it, which changes its speed, never its results."""
    state = _Scheduling
    with state.condition:
        state.waiting[on] += 1
        # (the other setting waits for those running and for those already waiting for this
        # one; this setting joins those running unless the other waits)
        while (state.on != on and (state.users or state.waiting[state.on])) or \
                (state.on == on and state.users and state.waiting[not on]):
            state.condition.wait()
        state.waiting[on] -= 1
        if state.on != on:
            _set_machine_scheduler(on)
        state.users += 1
    try:
        yield
    finally:
        with state.condition:
            state.users -= 1
            if not state.users:
                if state.waiting[not state.on]:  # (their turn: set for them)
                    _set_machine_scheduler(not state.on)
                elif not state.on and not state.waiting[False]:
                    _set_machine_scheduler(True)
            state.condition.notify_all()


def _set_machine_scheduler(on: bool) -> None:
    llvm.set_option("", f"-enable-misched={int(on)}")
    _Scheduling.on = on


def _object_code(ir_text: str, gathers: bool, light: bool, cpu: str | None) -> tuple[bytes, object]:
    tm = target_machine(gathers, cpu)
    context = llvm.create_context()
    try:
        with ffi.OutputString() as err:
            text = ctypes.c_char_p(ir_text.encode())
            mod = ModuleRef(_unlocked(ffi.lib.LLVMPY_ParseAssembly)(context, text, err), context)
            if err:
                mod.close()
                raise RuntimeError(f"LLVM IR parsing error\n{err}")
        try:
            _optimise(mod, tm, light, cpu, _unlocked)
            with ffi.OutputString() as err:
                buffer = _unlocked(ffi.lib.LLVMPY_TargetMachineEmitToMemory)(tm, mod, 1, err)
                if not buffer:
                    raise RuntimeError(str(err))
            try:
                code = ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer), ffi.lib.LLVMPY_GetBufferSize(buffer))
            finally:
                ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)
        finally:
            mod.close()
    finally:
        context.close()
    return code, tm


def _optimise(mod, tm, light: bool, cpu: str | None, call) -> None:
    """:func:`optimise`'s pipeline on a parsed ``mod``; ``call(fn)``: llvmlite's foreign function
    ``fn`` as the pipeline's runs call it (:func:`_locked` or :func:`_unlocked`)."""
    mod.triple = cpus.triple(cpu)
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.PipelineTuningOptions(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    if light:
        fpm = llvm.create_new_function_pass_manager()
        for name in LIGHT_PASSES:
            getattr(fpm, f"add_{name}_pass")()
        run = call(ffi.lib.LLVMPY_RunNewFunctionPassManager)
        for fn in mod.functions:
            if not fn.is_declaration:
                run(fpm, fn, pb)
    else:
        call(ffi.lib.LLVMPY_RunNewModulePassManager)(pb.getModulePassManager(), mod, pb)


def _locked(fn):
    """llvmlite's foreign function ``fn``, called as llvmlite calls it (under its lock)."""
    return fn


def _unlocked(fn):
    """llvmlite's foreign function ``fn`` without its lock (the ctypes function it wraps; ``fn``
    itself, locked, where an llvmlite wraps them otherwise): only for objects of a context no
    other thread uses."""
    return getattr(fn, "_cfn", fn)



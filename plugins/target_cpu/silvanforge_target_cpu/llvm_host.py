"""LLVM set up for this host: the native target (initialised once per process), its target
machine and the optimisation pipeline: what the JIT (jit.py) and the native pool (pool.py) share."""

from __future__ import annotations

import threading

import llvmlite.binding as llvm

_lock = threading.Lock()
_initialised = False


def init() -> None:
    global _initialised
    with _lock:
        if not _initialised:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialised = True


def host_has_avx512(feature: str = "avx512f") -> bool:
    """Whether the host has AVX-512 (F; or ``feature`` of it): the CPU codegen then does table
    lookups with permutes."""
    init()
    return bool(llvm.get_host_cpu_features().get(feature))


def target_machine(gathers: bool = False):
    """The host's target machine.  ``gathers``: the module walks with vector gathers, which
    LLVM otherwise splits into scalar loads on hosts it does not tune as fast-gather (AMD Zen);
    measured faster there for vector walks (docs/benchmarks.md, "Vector walks")."""
    init()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    features = llvm.get_host_cpu_features()
    flat = features.flatten()
    if gathers and features.get("avx2"):
        flat += ",+fast-gather"
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=flat,
                                        opt=3, codemodel="jitdefault")


# A module whose info sets "light_optimisation" (long straight-line code that is already what
# the machine should run: expanded bitvector trees) gets these function passes instead of O3,
# whose InstCombine alone took a third of lgb_cancer's compile for the same machine code.
LIGHT_PASSES = ("sroa", "simplify_cfg", "new_gvn", "dead_code_elimination")


def optimise(ir_text: str, gathers: bool = False, light: bool = False):
    """Parse, verify and run the O3 module pipeline (``light``: :data:`LIGHT_PASSES`); returns
    (module, target machine)."""
    tm = target_machine(gathers)
    mod = llvm.parse_assembly(ir_text)
    mod.triple = llvm.get_process_triple()
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.PipelineTuningOptions(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    if light:
        fpm = llvm.create_new_function_pass_manager()
        for name in LIGHT_PASSES:
            getattr(fpm, f"add_{name}_pass")()
        for fn in mod.functions:
            if not fn.is_declaration:
                fpm.run(fn, pb)
    else:
        pb.getModulePassManager().run(mod, pb)
    return mod, tm



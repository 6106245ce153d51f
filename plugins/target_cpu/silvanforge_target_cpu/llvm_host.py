"""LLVM set up for this host: the native target (initialised once per process), the target
machine for this host's CPU or a named one (:mod:`.cpus`) and the optimisation pipeline: what
the JIT (jit.py) and the native pool (pool.py) share.  ``cpu`` below is a name
:func:`.cpus.canonical` gave, or None: this host."""

from __future__ import annotations

import threading

import llvmlite.binding as llvm

from . import cpus

_lock = threading.Lock()
_initialised = False


def init() -> None:
    global _initialised
    with _lock:
        if not _initialised:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
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
    mod.triple = cpus.triple(cpu)
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



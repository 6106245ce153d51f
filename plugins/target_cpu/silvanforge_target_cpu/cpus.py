"""Named CPUs (``compile(..., cpu="x86-64-v3")``): the x86-64 CPU names this target compiles for,
the instruction-set features LLVM enables for each, and whether this host can run their code.

llvmlite tells the host's CPU name and features (``get_host_cpu_name``,
``get_host_cpu_features``) but not the features LLVM derives from a CPU *name*, so this module
keeps them: the processor table of LLVM's ``llvm/lib/TargetParser/X86TargetParser.cpp`` for the
well-known 64-bit names, with its feature implications (``avx512vbmi`` implies ``avx512bw``,
which implies ``avx512f``, ...).  The code generator asks it whether a CPU has AVX2, AVX-512F and
AVX-512 VBMI; tests/plugins/target_cpu/test_named_cpu.py checks those columns against the code LLVM
generates for every name.

The names are an allow-list, not a convenience: LLVM takes any name, says "'bogus' is not a
recognized processor for this target" on stderr and then aborts the process (a processor
without 64-bit support asked for 64-bit code), so a name is checked here before LLVM sees it.
"""

from __future__ import annotations

from silvanforge import InputError

# "native" (or None): this host, its own CPU name and features, as without ``cpu=``.
NATIVE = "native"

# Features another feature implies (LLVM's ImpliedFeatures), so that a CPU's set below is whole.
_IMPLIES = {
    "sse2": ("sse",), "sse3": ("sse2",), "ssse3": ("sse3",), "sse4.1": ("ssse3",), "sse4.2": ("sse4.1",),
    "sse4a": ("sse3",), "avx": ("sse4.2",), "avx2": ("avx",), "f16c": ("avx",), "fma": ("avx",),
    "fma4": ("avx", "sse4a"), "xop": ("fma4",), "aes": ("sse2",), "pclmul": ("sse2",), "sha": ("sse2",),
    "gfni": ("sse2",), "vaes": ("aes", "avx2"), "vpclmulqdq": ("avx", "pclmul"), "avxvnni": ("avx2",),
    "avx512f": ("avx2", "f16c", "fma"),
    "avx512cd": ("avx512f",), "avx512dq": ("avx512f",), "avx512bw": ("avx512f",), "avx512vl": ("avx512f",),
    "avx512ifma": ("avx512f",), "avx512vnni": ("avx512f",), "avx512vpopcntdq": ("avx512f",),
    "avx512vp2intersect": ("avx512f",), "avx512bf16": ("avx512bw",), "avx512bitalg": ("avx512bw",),
    "avx512vbmi": ("avx512bw",), "avx512vbmi2": ("avx512bw",), "avx512fp16": ("avx512bw",),
    "xsavec": ("xsave",), "xsaveopt": ("xsave",), "xsaves": ("xsave",),
}


def _s(text: str) -> frozenset:
    return frozenset(text.split())


# The processors, built up as LLVM's table builds them (its Features* sets, by the same names).
_X86_64 = _s("64bit cmov cx8 fxsr mmx sse sse2")
_X86_64_V2 = _X86_64 | _s("sahf popcnt crc32 sse4.2 cx16")
_X86_64_V3 = _X86_64_V2 | _s("avx2 bmi bmi2 f16c fma lzcnt movbe xsave")
_X86_64_V4 = _X86_64_V3 | _s("avx512bw avx512cd avx512dq avx512vl")
_NEHALEM = _X86_64 | _s("cx16 sahf ssse3 sse4.1 popcnt crc32 sse4.2")
_WESTMERE = _NEHALEM | _s("pclmul")
_SANDYBRIDGE = _WESTMERE | _s("avx xsave xsaveopt")
_IVYBRIDGE = _SANDYBRIDGE | _s("f16c fsgsbase rdrnd")
_HASWELL = _IVYBRIDGE | _s("avx2 bmi bmi2 fma invpcid lzcnt movbe")
_BROADWELL = _HASWELL | _s("adx prfchw rdseed")
_SKYLAKE = _BROADWELL | _s("aes clflushopt xsavec xsaves sgx")
_SKYLAKE_AVX512 = (_SKYLAKE - {"sgx"}) | _s("avx512f avx512cd avx512dq avx512bw avx512vl clwb pku")
_CASCADELAKE = _SKYLAKE_AVX512 | _s("avx512vnni")
_COOPERLAKE = _CASCADELAKE | _s("avx512bf16")
_CANNONLAKE = _SKYLAKE | _s("avx512f avx512cd avx512dq avx512bw avx512vl avx512ifma avx512vbmi pku sha")
_ICELAKE_CLIENT = _CANNONLAKE | _s("avx512bitalg avx512vbmi2 avx512vnni avx512vpopcntdq gfni rdpid vaes vpclmulqdq")
_ROCKETLAKE = _ICELAKE_CLIENT - {"sgx"}
_ICELAKE_SERVER = _ICELAKE_CLIENT | _s("clwb pconfig wbnoinvd")
_TIGERLAKE = _ICELAKE_CLIENT | _s("avx512vp2intersect movdir64b clwb movdiri shstk kl widekl")
_SAPPHIRERAPIDS = _ICELAKE_SERVER | _s(
    "amx-bf16 amx-int8 amx-tile avx512bf16 avx512fp16 avxvnni cldemote enqcmd movdir64b movdiri ptwrite "
    "serialize shstk tsxldtrk uintr waitpkg")
_GRANITERAPIDS = _SAPPHIRERAPIDS | _s("amx-fp16 prefetchi")
_ALDERLAKE = _WESTMERE | _s(
    "prfchw rdrnd movbe aes clflushopt fsgsbase rdseed sha xsave xsavec xsaveopt xsaves ptwrite rdpid sgx "
    "clwb gfni adx bmi bmi2 f16c fma invpcid lzcnt pconfig pku serialize shstk vaes vpclmulqdq movdir64b "
    "movdiri waitpkg avxvnni hreset widekl avx avx2")
_ZNVER1 = _s(
    "adx aes avx avx2 bmi bmi2 clflushopt clzero cx8 cx16 crc32 64bit f16c fma fsgsbase fxsr lzcnt mmx "
    "movbe mwaitx pclmul popcnt prfchw rdrnd rdseed sahf sha sse sse2 sse3 ssse3 sse4.1 sse4.2 sse4a "
    "xsave xsavec xsaveopt xsaves cmov")
_ZNVER2 = _ZNVER1 | _s("clwb rdpid rdpru wbnoinvd")
_ZNVER3 = _ZNVER2 | _s("invpcid pku vaes vpclmulqdq")
_ZNVER4 = _ZNVER3 | _s(
    "avx512f avx512cd avx512dq avx512bw avx512vl avx512ifma avx512vbmi avx512vbmi2 avx512vnni "
    "avx512bitalg avx512vpopcntdq avx512bf16 gfni shstk")
_ZNVER5 = _ZNVER4 | _s("avxvnni movdiri movdir64b avx512vp2intersect prefetchi")

# name -> (its features, the first LLVM major version that knows it).  Older LLVMs abort on a
# name they do not know (see the module docstring), so a name is refused below its version.
_TABLE = {
    "x86-64": (_X86_64, 1), "x86-64-v2": (_X86_64_V2, 12), "x86-64-v3": (_X86_64_V3, 12),
    "x86-64-v4": (_X86_64_V4, 12),
    "nehalem": (_NEHALEM, 1), "westmere": (_WESTMERE, 1), "sandybridge": (_SANDYBRIDGE, 1),
    "ivybridge": (_IVYBRIDGE, 1), "haswell": (_HASWELL, 1), "broadwell": (_BROADWELL, 1),
    "skylake": (_SKYLAKE, 1), "skylake-avx512": (_SKYLAKE_AVX512, 1), "cascadelake": (_CASCADELAKE, 8),
    "cooperlake": (_COOPERLAKE, 9), "cannonlake": (_CANNONLAKE, 1), "icelake-client": (_ICELAKE_CLIENT, 7),
    "icelake-server": (_ICELAKE_SERVER, 7), "tigerlake": (_TIGERLAKE, 10), "rocketlake": (_ROCKETLAKE, 13),
    "alderlake": (_ALDERLAKE, 12), "raptorlake": (_ALDERLAKE, 15), "meteorlake": (_ALDERLAKE, 15),
    "sapphirerapids": (_SAPPHIRERAPIDS, 12), "emeraldrapids": (_SAPPHIRERAPIDS, 18),
    "graniterapids": (_GRANITERAPIDS, 16),
    "znver1": (_ZNVER1, 4), "znver2": (_ZNVER2, 9), "znver3": (_ZNVER3, 12), "znver4": (_ZNVER4, 16),
    "znver5": (_ZNVER5, 19),
}

# Features the generated code may use (LLVM picks instructions from them: vector and scalar
# arithmetic, bit manipulation, loads, compares), checked against the host before code for a
# named CPU runs.  The others (SGX, key locker, AMX tiles, cache and TLB control, user
# interrupts, ...) are system features LLVM never emits for this code, which hypervisors often
# hide: checking them would refuse code the host runs.
_CODE_FEATURES = _s(
    "cmov cx8 cx16 sahf popcnt crc32 lzcnt movbe bmi bmi2 adx tbm prfchw "
    "sse sse2 sse3 ssse3 sse4.1 sse4.2 sse4a avx avx2 fma fma4 xop f16c aes pclmul sha gfni vaes "
    "vpclmulqdq avxvnni avxifma avxvnniint8 avxvnniint16 avxneconvert sha512 sm3 sm4")

# AArch64 CPUs (LLVM's AArch64 target), for Linux (ELF objects): code for them is built here
# ahead of time (for a fleet of ARM servers) and runs only on such a host.  Their features: what
# the code LLVM makes for them may use beyond the base (checked against an AArch64 host).
AARCH64_TRIPLE = "aarch64-unknown-linux-gnu"
_AARCH64_TABLE = {
    "generic-aarch64": (_s("neon"), 1), "cortex-a72": (_s("neon crc"), 1),
    "cortex-a76": (_s("neon crc lse rcpc dotprod"), 7), "neoverse-n1": (_s("neon crc lse rcpc dotprod"), 9),
    "neoverse-n2": (_s("neon crc lse rcpc dotprod sve sve2"), 12),
    "neoverse-v1": (_s("neon crc lse rcpc dotprod sve"), 12),
    "neoverse-v2": (_s("neon crc lse rcpc dotprod sve sve2"), 16),
    "apple-m1": (_s("neon crc lse rcpc dotprod"), 13), "apple-m2": (_s("neon crc lse rcpc dotprod"), 16),
    "ampere1": (_s("neon crc lse rcpc dotprod"), 16),
}
_AARCH64_REPORTED = _s("neon crc lse sve sve2 aes sha2")
# Other AArch64 names, refused with a message of their own.
_AARCH64_PREFIXES = ("neoverse", "cortex-", "apple-", "thunderx", "a64fx", "ampere", "kryo", "exynos",
                     "falkor", "saphira", "tsv110", "carmel", "oryon", "armv8", "armv9")


def _closed(features) -> frozenset:
    """``features`` with every feature they imply."""
    out, todo = set(features), list(features)
    while todo:
        for implied in _IMPLIES.get(todo.pop(), ()):
            if implied not in out:
                out.add(implied)
                todo.append(implied)
    return frozenset(out)


CPUS = {name: _closed(features) for name, (features, _since) in _TABLE.items()}
CPUS.update({name: features for name, (features, _since) in _AARCH64_TABLE.items()})


def names() -> list[str]:
    """The named CPUs this LLVM compiles for, in the table's order (x86-64, then AArch64)."""
    return [name for name, (_f, since) in (*_TABLE.items(), *_AARCH64_TABLE.items()) if since <= _llvm_major()]


def llvm_name(cpu: str | None) -> str | None:
    """The name LLVM knows ``cpu`` by (``generic-aarch64`` is AArch64's ``generic``)."""
    return "generic" if cpu == "generic-aarch64" else cpu


def x86_names() -> list[str]:
    """The x86-64 CPUs of :func:`names`."""
    return [name for name, (_f, since) in _TABLE.items() if since <= _llvm_major()]


def triple(cpu: str | None) -> str:
    """The target triple of code for ``cpu`` (None: this host's)."""
    return AARCH64_TRIPLE if cpu in _AARCH64_TABLE else _triple()


def foreign(cpu: str | None) -> bool:
    """Whether code for ``cpu`` is for another architecture than this host's (built here, run
    elsewhere: never mapped into this process)."""
    return cpu is not None and _arch(triple(cpu)) != _arch(_triple())


def _arch(t: str) -> str:
    arch = t.split("-", 1)[0]
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)


def canonical(cpu) -> str | None:
    """The CPU name ``cpu=`` gives, checked: None for this host (None or ``"native"``), else the
    table's name (case and surrounding spaces ignored).  One InputError says why another name
    cannot be compiled for."""
    if cpu is None:
        return None
    if not isinstance(cpu, str):
        raise InputError(f"cpu must be a CPU name such as 'x86-64-v3' or 'native', got {type(cpu).__name__}")
    name = cpu.strip().lower()
    if name in ("", NATIVE):
        return None
    if name in ("aarch64", "arm64"):
        name = "generic-aarch64"
    if name in _AARCH64_TABLE:
        if _AARCH64_TABLE[name][1] > _llvm_major():
            raise InputError(f"cpu {cpu!r} needs LLVM {_AARCH64_TABLE[name][1]} or newer; llvmlite here has "
                             f"LLVM {_llvm_major()}: upgrade llvmlite, or name an older CPU")
        return name
    if name.startswith(_AARCH64_PREFIXES):
        known = [n for n, (_f, since) in _AARCH64_TABLE.items() if since <= _llvm_major()]
        raise InputError(f"cpu {cpu!r} is an AArch64 CPU this target does not know; it compiles for "
                         f"{', '.join(known)}")
    if name not in _TABLE:
        raise InputError(f"unknown cpu {cpu!r}: the cpu target compiles for native (this host) or one of "
                         f"{', '.join(names())}")
    if _TABLE[name][1] > _llvm_major():
        raise InputError(f"cpu {cpu!r} needs LLVM {_TABLE[name][1]} or newer; llvmlite here has LLVM "
                         f"{_llvm_major()}: upgrade llvmlite, or name an older CPU")
    here = _triple()
    if not here.startswith(("x86_64", "amd64")):
        raise InputError(f"cpu {cpu!r} is an x86-64 CPU; this host ({here}) builds code for itself only "
                         "(compile without cpu=, or on an x86-64 host)")
    return name


def host_features() -> frozenset:
    """The features this host has, as LLVM detects them (with the operating system's support:
    no AVX-512 where the kernel does not save its registers)."""
    import llvmlite.binding as llvm

    return frozenset(name for name, on in llvm.get_host_cpu_features().items() if on)


def features(cpu: str | None) -> frozenset:
    """The features code for ``cpu`` may use: the host's (None), or the named CPU's."""
    return host_features() if cpu is None else CPUS[cpu]


def has(cpu: str | None, feature: str) -> bool:
    """Whether ``cpu`` (None: this host) has ``feature`` (LLVM's name: ``avx2``, ``avx512f``)."""
    return feature in features(cpu)


def missing_here(cpu: str | None) -> list[str]:
    """The features code for ``cpu`` may use that this host lacks (none for the host itself)."""
    if cpu is None:
        return []
    here = host_features()
    if cpu in _AARCH64_TABLE:
        # Only what LLVM reports of an AArch64 host (Linux: neon, crc, lse, sve, sve2, aes, sha2;
        # never rcpc or dotprod; nothing on macOS): a feature it cannot see is not held against it.
        return sorted(f for f in CPUS[cpu] if f in _AARCH64_REPORTED and here and f not in here)
    return sorted(f for f in CPUS[cpu] if (f in _CODE_FEATURES or f.startswith("avx512")) and f not in here)


def refusal(cpu: str | None) -> str | None:
    """Why this host cannot run code built for ``cpu``, or None where it can: running it anyway
    would stop the process on the first instruction it lacks (SIGILL)."""
    import llvmlite.binding as llvm

    if foreign(cpu):
        return (f"this model's code was compiled for cpu {cpu!r} ({_arch(triple(cpu))}), and this host is "
                f"{_arch(_triple())}: predict on such a machine (the artifact carries the code), or compile "
                "it for this one (without cpu= or --cpu, or with cpu='native')")
    missing = missing_here(cpu)
    if not missing:
        return None

    shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
    return (f"this model's code was compiled for cpu {cpu!r}, and this host ({llvm.get_host_cpu_name()}) "
            f"lacks {shown}: predict on a machine with that CPU, or compile it for this one "
            "(without cpu= or --cpu, or with cpu='native')")


def _llvm_major() -> int:
    import llvmlite.binding as llvm

    return int(llvm.llvm_version_info[0])


def _triple() -> str:
    import llvmlite.binding as llvm

    return llvm.get_process_triple()


def vectors(cpu: str | None):
    """The vector unit of code for ``cpu`` (None: this host), as the representations' estimates
    weigh it: what :func:`.codegen.generate` lowers lookups to on that CPU (AVX-512 permutes, of
    bytes with VBMI; AVX2's ``vpermps``/``vpshufb``; NEON's 16-byte registers)."""
    from silvanforge.target import Vectors

    have = features(cpu)
    if triple(cpu).startswith(("aarch64", "arm64")):
        return Vectors("neon", 128, byte_permute=False, lane_permute=False)
    if "avx512f" in have:
        return Vectors("avx512", 512, byte_permute="avx512vbmi" in have and "avx512bw" in have)
    if "avx2" in have:
        return Vectors("avx2", 256)
    return Vectors("sse", 128, lane_permute=False)

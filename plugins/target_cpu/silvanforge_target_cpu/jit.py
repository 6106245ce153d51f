"""Optimise LLVM IR with the new pass manager at O3, JIT it for this host's CPU or a named one
(:mod:`.cpus`), and call it via ctypes.

ctypes releases the GIL for the duration of a foreign call, so the core's thread pool runs
row chunks of one kernel truly in parallel.  The kernel holds no mutable state: it is safe to
call from many threads at once.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import pathlib
import threading

import llvmlite.binding as llvm
import numpy as np

from silvanforge import PluginError
from silvanforge.ir import lir
from silvanforge.runtime import aligned
from silvanforge.runtime.kernel import PhaseKernel
from silvanforge.target import native_work

from . import cpus, pool
from .llvm_host import LIGHT_PASSES, init as _init, object_code, optimise, target_machine as _target_machine  # noqa: F401


def host_signature() -> dict:
    """What machine code depends on: a saved kernel is reused only on an identical host, made by
    the same code generator."""
    _init()
    return {"triple": llvm.get_process_triple(), "cpu": llvm.get_host_cpu_name(),
            "features": llvm.get_host_cpu_features().flatten(), "llvm": list(llvm.llvm_version_info),
            "generator": generator_digest()}


@functools.cache
def generator_digest() -> str:
    """A digest of this package's sources.  Why: machine code depends on the code generator as
    well as on the program and the host, and a development install changes the generator without
    a new version, so code saved or cached before would be mapped again unchanged."""
    h = hashlib.sha256()
    for path in sorted(pathlib.Path(__file__).parent.iterdir()):
        if path.suffix not in (".py", ".c"):
            continue
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def signature(cpu: str | None = None) -> dict:
    """What machine code for ``cpu`` depends on: the host's signature (None), or for a named CPU
    the triple, the name and LLVM, with no feature flags (LLVM derives them from the name): such
    code is reused on any host of the same triple and LLVM, and runs where the host has the
    CPU's features (:func:`.cpus.refusal`).  A named CPU's signature never equals a host's (its
    features are empty), so code for ``x86-64-v3`` is never taken for native code or back."""
    if cpu is None:
        return host_signature()
    _init()
    return {"triple": cpus.triple(cpu), "cpu": cpu, "features": "", "llvm": list(llvm.llvm_version_info),
            "generator": generator_digest()}


def uses_gathers(module: lir.Module) -> bool:
    return bool(module.info.get("vector_walk"))


class CpuKernel(PhaseKernel):
    """JIT-compiled phase functions plus the model buffers they read: a
    :class:`silvanforge.runtime.kernel.Kernel` whose phases the core's runtime splits over threads
    (:class:`~silvanforge.runtime.kernel.PhaseKernel`), with a lean path for small requests
    (:meth:`small_calls`) and its object code as its artifact."""

    def __init__(self, module: lir.Module, llvm_module, tm, object_code: bytes | None = None,
                 cpu: str | None = None):
        """From an optimised ``llvm_module`` (compiled now), or from ``object_code`` made for the
        same CPU (:func:`compile_module`'s, or an earlier compile's saved: mapped, not compiled,
        in milliseconds).  ``cpu``: the named CPU the code is for (None: this host); code this host
        cannot run is built, mapped and saved, never called (:meth:`margins` refuses)."""
        self.module = module
        self.cpu = cpu
        self.refusal = cpus.refusal(cpu)
        if object_code is None:
            self._engine = llvm.create_mcjit_compiler(llvm_module, tm)
            # Keep the object code MCJIT makes, so an artifact can carry it (see artifact()).
            self._engine.set_object_cache(self._keep_object, lambda _module: None)
        else:
            self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
            self._object = object_code
        self._engine.finalize_object()
        i64 = ctypes.c_int64
        scalars = [i64] * len(lir.SCALAR_PARAMS)
        # Rows, margins and the pointer table are passed as addresses (no ctypes pointer objects
        # per call; the native pool passes the same words).
        proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, *scalars, ctypes.c_void_p, ctypes.c_void_p)
        self._addresses = [self._engine.get_function_address(f.name) for f in module.functions]
        self._fns = [proto(a) for a in self._addresses]
        # Keep the arrays alive as long as the kernel: the pointer table refers to them.
        # Each padded by GATHER_PAD bytes: a vector walk gathers narrow fields as 4-byte words.
        self._buffers = [_padded(b.data) for b in module.model_buffers()]
        self._model_ptrs = [a.ctypes.data for a in self._buffers]
        self._tables: dict = {}  # scratch addresses -> pointer table
        self.phases = module.functions
        self.scratch = module.scratch_buffers()
        if pool.native_pool() is None:
            self.run_shares = None  # the core's Python pool runs the shares
        self.input_dtype = lir.LIR_TO_NUMPY[module.input_type]
        self.output_dtype = lir.LIR_TO_NUMPY[module.output_type]

    def margins(self, rows: np.ndarray, num_outputs: int, threads: int | None = None) -> np.ndarray:
        if self.refusal is not None:  # code for a CPU this host lacks: refused, never a SIGILL
            raise PluginError(self.refusal)
        return super().margins(rows, num_outputs, threads)

    def _bound(self, rows: np.ndarray, out: np.ndarray, scratch: list) -> tuple:
        """What every share of a call passes: rows, strides, row count, out, the pointer table
        (addresses as integers; each costs about a microsecond to read, so once per call)."""
        item = rows.itemsize
        key = tuple(_address(a) for a in scratch)
        table = self._tables.get(key)
        if table is None:  # scratch is reused between calls: so is its pointer table
            ptrs = self._model_ptrs + list(key)
            table = (ctypes.c_void_p * max(1, len(ptrs)))(*ptrs)
            if len(self._tables) > 64:
                self._tables.clear()
            self._tables[key] = table
        return (_address(rows), rows.strides[0] // item, rows.strides[1] // item, rows.shape[0],
                _address(out), ctypes.addressof(table))

    @staticmethod
    def _share(bound: tuple, row_begin: int, row_end: int, iter_begin: int, iter_end: int) -> tuple:
        """The kernel's arguments for one share, in lir.SCALAR_PARAMS order."""
        rows, rs, cs, n, out, table = bound
        return rows, rs, cs, row_begin, row_end, iter_begin, iter_end, n, out, table

    def run(self, phase: int, rows: np.ndarray, out: np.ndarray, scratch: list, row_begin: int,
            row_end: int, iter_begin: int = 0, iter_end: int = 0) -> None:
        """One call of one phase; ``rows`` may be C or Fortran ordered, or a strided view."""
        bound = self._bound(rows, out, scratch)
        self._fns[phase](*self._share(bound, row_begin, row_end, iter_begin, iter_end))

    def run_shares(self, phase: int, rows: np.ndarray, out: np.ndarray, scratch: list,
                   shares: list[tuple]) -> bool:
        """Every share ``(row_begin, row_end, iter_begin, iter_end)`` of one phase in parallel on
        the native pool (:mod:`.pool`), the first on this thread; False (nothing run) when the
        pool is busy with another caller or cannot run here: the core's Python pool runs them."""
        native = pool.native_pool()
        if native is None:
            return False
        bound = self._bound(rows, out, scratch)
        return native.try_run(self._addresses[phase], [self._share(bound, *share) for share in shares])

    def small_calls(self, max_rows: int, transform=None, flat: bool = False, threads: int = 1):
        """A function ``(rows, apply) -> (values, applied)`` for up to ``max_rows`` rows of the
        input dtype, on the calling thread: the margins, or where ``apply`` and the entry can
        (:func:`.small.entry_transform`), the transformed values (``applied``); (n, outputs),
        or (n,) where ``flat`` (one output).

        A one-row request should cost what the walk costs: the rows are copied into staging
        arrays of this thread whose addresses, like its scratch and pointer table, are fixed,
        and one foreign call of two arguments (:mod:`.small`) runs every phase and the
        transform (the runtime's general path spends ten microseconds on threads and scratch;
        the phases' own ten-argument calls and the transform in NumPy cost seven).

        ``threads`` above 1, for a kernel with a phase looping over trees (orderedReduce): that
        phase's second half of the trees runs on a native pool worker while this thread walks
        the first, where the pool is free (else this thread walks them all).

        A thread's staging holds :data:`STAGED_ROWS` rows at first, grown to the power of two at
        or above a call's rows where it brings more (up to ``max_rows``: the core's one-thread
        calls of hundreds of rows, :func:`silvanforge.plan.bands.lean_rows`), so threads making
        small requests stage a few rows only."""
        from . import small

        if self.refusal is not None:  # every request goes through margins, which refuses
            return None
        features, outputs = self.module.num_features, self.module.num_outputs
        phases = [(address, int(phase.trip) if phase.parallel == "loop" else 0)
                  for address, phase in zip(self._addresses, self.phases)]
        split = threads > 1 and any(trip > 1 for _, trip in phases) and pool.native_pool() is not None
        applies = small.entry_transform(transform, self.output_dtype)
        guarded = small.guarded_transform(transform, self.output_dtype)
        alpha = transform.param("alpha", 1.0) if "sigmoid" in (applies, guarded) else 1.0
        if guarded and abs(alpha) > 1.0:  # the entry's bound on the margins holds for |alpha| <= 1
            guarded = None
        local = threading.local()
        entry = []  # looked up (compiled once a process) on the first call
        native = small.foreign_call()  # the C calls (None where they were not built: ctypes then)
        fast = native.run if native is not None else None

        def staging(n: int = 1):
            """This thread's staging, for calls of up to ``n`` rows at least (:data:`STAGED_ROWS`,
            a power of two above; at most ``max_rows``)."""
            staged = min(max_rows, max(STAGED_ROWS, 1 << (n - 1).bit_length()))
            # Lanes past the rows may be read (a block is 8-32 lanes): staging has room for them.
            room = staged + 64
            ins = aligned.zeros((room, features), self.input_dtype)
            out = aligned.zeros((room, outputs), self.output_dtype)
            final = aligned.zeros((room, outputs), self.output_dtype)
            scratch, fills = [], []
            for buf in self.scratch:  # as runtime._scratch lays them out, for ``room`` rows
                dtype = self.output_dtype if buf.fill is not None else lir.LIR_TO_NUMPY[buf.type]
                a = aligned.zeros((room + buf.pad_rows) * buf.per_row, dtype)
                if buf.fill is not None:
                    # Privatised slices: a call's fold resets every element its reduces wrote
                    # (silvanforge.reduction.legalize), so filling them once here keeps every
                    # call's start at the fill, whatever its row count.
                    a.fill(buf.fill)
                scratch.append(a)
            ptrs = self._model_ptrs + [a.ctypes.data for a in scratch]
            table = (ctypes.c_void_p * max(1, len(ptrs)))(*ptrs)  # held by the staging: alive
            block = np.zeros(small.PHASES + 2 * len(phases) + int(split), np.int64)
            block[:small.PHASES] = [ins.ctypes.data, out.ctypes.data, ctypes.addressof(table),
                                    final.ctypes.data, features, outputs]
            block[small.PHASES:small.PHASES + 2 * len(phases)] = np.array(phases, np.int64).reshape(-1)
            # Views for every row count, made once: slicing at each call cost a third of a
            # microsecond more.
            shaped = (lambda a: a.reshape(-1)) if flat else (lambda a: a)
            views = [(ins[:k], shaped(out[:k]), shaped(final[:k])) for k in range(staged + 1)]
            # The C call's description of this staging (fills are staged in Python: none of
            # the CPU forms' small kernels has any, but a schedule may ask for them).
            state = None
            if fast is not None and not fills:
                state = small.call_state(compiled(), block, ins, out, final, staged, guarded, alpha)
            st = local.staging = (views, block.ctypes.data, fills, state,
                                  (scratch, table, block, ins, out, final))
            local.state = state
            return st

        def compiled():
            if not entry:
                entry.append(small.entry(len(phases), self.module.output_type, applies, alpha, guarded is not None,
                                         split))
            return entry[0]

        out_dtype = self.output_dtype
        shapes = [(n,) if flat else (n, outputs) for n in range(max_rows + 1)]
        # The C call's mode for ``apply``: margins, the entry's transform, or the guard.
        modes = (0, 2 if guarded else 1 if applies not in (None, "identity") else 0)

        # What each ``apply`` returns as ``applied`` from the C call (modes 0 and 1).
        reports = (False, applies is not None)

        def staged(rows: np.ndarray, apply: bool) -> tuple[np.ndarray, bool]:
            """The call through NumPy staging and ctypes (no C module, fills, other layouts,
            more rows than staged: the staging grown, for this call and the C call's next)."""
            n = rows.shape[0]
            st = local.__dict__.get("staging")
            if st is None or n >= len(st[0]):
                st = staging(n)
            views, block, fills, _, _ = st
            ins, out, final = views[n]
            ins[...] = rows
            for a, per_row, value in fills:
                a[:n * per_row] = value
            run = (entry[0] if entry else compiled()).call
            if guarded and apply:
                if run(block, n, 1):  # no margin can overflow exp: the ufuncs without errstate
                    return small.numpy_transform(guarded, alpha, out, np.empty_like(out)), True
                return out.copy(), False
            applied = apply and applies is not None and applies != "identity"
            if not run(block, n, applied):  # a softmax left to NumPy: the margins
                return out.copy(), False
            return (final if applied else out).copy(), apply and applies is not None

        def call(rows: np.ndarray | list, apply: bool = False,
                 threads: int | None = None) -> tuple[np.ndarray, bool] | None:
            # (Written for speed: a 1-row call of a 100-tree model takes about 1.3 us in all.)
            # ``threads``: taken as the split call takes it; these calls run on this thread.
            # ``rows`` a list: row tuples of Python numbers, which only the C call reads (None
            # where it does not: the caller reads them otherwise).
            state = local.__dict__.get("state")
            if state is None:
                state = (local.__dict__.get("staging") or staging())[3]
                if state is None:  # no C module, or fills
                    return staged(rows, apply) if type(rows) is not list else None
            values = np.empty(shapes[len(rows)], out_dtype)
            mode = modes[apply]
            taken = fast(state, rows, values, mode)
            if taken < 0:  # rows the C call does not take (not C-ordered, more than staged)
                return staged(rows, apply) if type(rows) is not list else None
            if mode != 2:  # (mode 1 returns 0 for a softmax left to NumPy: the margins)
                return values, reports[apply] and taken != 0
            # float64 sigmoid / exp: NumPy's exp where no margin can overflow it
            if taken != 1:  # 2: transformed through NumPy's own exp loop; 0: margins
                return values, taken == 2
            np.exp(values, values)
            if guarded == "sigmoid":
                native.sigmoid_tail(values)
            return values, True

        # Row tuples (silvanforge.runtime.kernel.Kernel.small_calls) are read by the C call alone.
        call.reads_tuples = fast is not None
        if not split:
            return call

        def call_split(rows: np.ndarray | list, apply: bool = False,
                       threads: int | None = None) -> tuple[np.ndarray, bool] | None:
            # The pool word is set only while this thread holds the pool: another caller (or
            # none grown) leaves it 0, and the entry walks every tree itself; so does a call
            # asked to run on one thread.
            if threads == 1:
                return call(rows, apply)
            block = (local.__dict__.get("staging") or staging())[4][2]
            native = pool.native_pool()  # looked up each call: a forked child makes its own
            if native is None or not native.lock.acquire(blocking=False):
                return call(rows, apply)
            try:
                if native.grow(1):
                    block[-1] = native.run_address
                return call(rows, apply)
            finally:
                block[-1] = 0
                native.lock.release()

        call_split.reads_tuples = call.reads_tuples
        return call_split

    def _keep_object(self, _module, data: bytes) -> None:
        self._object = bytes(data)

    def artifact(self) -> bytes:
        """The object code plus the host or CPU it was built for (see :func:`signature`)."""
        meta = json.dumps({**signature(self.cpu), "code": "object"}).encode()
        return len(meta).to_bytes(4, "little") + meta + self._object


# Rows a thread's small-call staging holds at first (the core's small requests,
# silvanforge.plan.bands.SMALL_ROWS); grown for calls of more.
STAGED_ROWS = 16


def _address(a: np.ndarray) -> int:
    """The address of ``a``'s first element: through ctypes' buffer view where numpy allows it
    (a quarter of ``a.ctypes.data``'s microsecond, which small batches feel), else numpy's."""
    if a.flags.writeable and a.flags.c_contiguous and a.size:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    return a.ctypes.data


GATHER_PAD = 8


def _padded(data: np.ndarray) -> np.ndarray:
    """``data`` in a buffer with GATHER_PAD zero bytes after its end (codegen.gather), starting on
    a cache line (:mod:`silvanforge.runtime.aligned`)."""
    raw = aligned.zeros(data.nbytes + GATHER_PAD, np.uint8)
    raw[:data.nbytes] = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return raw[:data.nbytes].view(data.dtype)


def compile_module(module: lir.Module, ir_text: str, cpu: str | None = None):
    """``ir_text`` (the module's LLVM IR, generated for ``cpu``) compiled for ``cpu`` (None: the
    host): a :class:`CpuKernel`, or for another architecture's CPU a :class:`ForeignKernel`."""
    # Machine code made in a context of its own (llvm_host.object_code: two forms compile on two
    # cores at once), then mapped as saved code is: the same bytes MCJIT makes of the module.
    with native_work():  # (the compile may start its other forms meanwhile)
        code, tm = object_code(ir_text, uses_gathers(module), bool(module.info.get("light_optimisation")), cpu,
                               machine_scheduler=module.info.get("machine_scheduler", True) is not False)
    if cpus.foreign(cpu):
        return ForeignKernel(module, code, cpu)
    return CpuKernel(module, None, tm, object_code=code, cpu=cpu)


class ForeignKernel(PhaseKernel):
    """Object code for another architecture's CPU (AArch64 built on x86-64): saved in artifacts
    like a :class:`CpuKernel`'s, loaded by one on a host of that architecture, never mapped nor
    run here (:meth:`margins` refuses, with why)."""

    def __init__(self, module: lir.Module, object_code: bytes, cpu: str):
        self.module, self.cpu, self._object = module, cpu, bytes(object_code)
        self.refusal = cpus.refusal(cpu)
        self.phases = module.functions
        self.scratch = module.scratch_buffers()
        self.input_dtype = lir.LIR_TO_NUMPY[module.input_type]
        self.output_dtype = lir.LIR_TO_NUMPY[module.output_type]

    def margins(self, rows: np.ndarray, num_outputs: int, threads: int | None = None) -> np.ndarray:
        raise PluginError(self.refusal)

    def run(self, phase, rows, out, scratch, row_begin, row_end, iter_begin=0, iter_end=0):
        raise PluginError(self.refusal)

    @property
    def object_code(self) -> bytes:
        """The ELF object (its functions are the module's phases: tests run it under qemu)."""
        return self._object

    artifact = CpuKernel.artifact


def load_artifact(module: lir.Module, blob: bytes, cpu: str | None = None) -> CpuKernel | None:
    """A kernel from saved object code (or, from older artifacts, bitcode), or None if it was
    built for another host or CPU than ``cpu`` here (None: this host): the caller then
    compiles the program again."""
    n = int.from_bytes(blob[:4], "little")
    meta = json.loads(blob[4:4 + n])
    code = meta.pop("code", "bitcode") if isinstance(meta, dict) else None
    if meta != signature(cpu):
        return None
    if cpus.foreign(cpu):  # kept for saving again, never mapped here
        return ForeignKernel(module, blob[4 + n:], cpu) if code == "object" else None
    tm = _target_machine(uses_gathers(module), cpu)
    if code == "object":
        return CpuKernel(module, None, tm, object_code=blob[4 + n:], cpu=cpu)
    return CpuKernel(module, llvm.parse_bitcode(blob[4 + n:]), tm, cpu=cpu)

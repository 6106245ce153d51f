"""The entry of small requests (1-16 rows): one foreign call of two arguments runs every phase
of a kernel on rows staged by the caller and applies the output transform in machine code.

Why: a ctypes call costs about 0.15 us an argument, so the ten arguments of a phase function
cost 1.8 us of a 1-row call whose walks take under one; the output transform through NumPy
(an ``errstate`` and four ufunc calls on one value) cost 5 us more.  The entry takes the
address of a per-thread block of words (staged rows, margins, pointer table, results, the
kernel's widths, each phase's address and trip) and the row count, so it is a small module
compiled once a process for each shape of kernel (phases, accumulation type, transform), on
the first small call that needs it (a few milliseconds).

Transforms are computed in machine code only where the result is the reference's
(:mod:`silvanforge.runtime.transforms`) bit for bit: IEEE operations in the accumulation type as NumPy
does them, and exp only for float32 outputs, evaluated in double and rounded once as the
reference does (NumPy's float64 exp and the C library's disagree in the last bit of a few
percent of values; rounded to float32 they agree); float32 softmax of finite margins, its
exponentials summed in a double in class order as the reference sums them.  float64 sigmoid and exp stay NumPy's, but
the entry tells whether every margin is small enough that no exp overflows: then the caller
runs the reference's ufuncs on its staged arrays without the ``errstate`` (0.75 us) that
silences overflow (:func:`guarded_transform`).  Others are left to NumPy whole.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from silvanforge.ir import lir

from .llvm_host import target_machine
from .pool import SHARE_WORDS

# The words of a thread's block (int64 each), in order; then each phase's address and trip.
INS, OUT, TABLE, FINAL, FEATURES, OUTPUTS, PHASES = range(7)


def entry_transform(transform, output_dtype: np.dtype) -> str | None:
    """The transform the entry applies itself (``identity``, ``hinge``, float32 ``sigmoid``,
    ``exp`` and ``softmax``), or None where NumPy must (any other, or a margin divisor)."""
    if transform is None or transform.param("margin_divisor", 1.0) != 1.0:
        return None
    name = transform.name
    if name in ("identity", "hinge"):
        return name
    if name in ("sigmoid", "exp", "softmax") and np.dtype(output_dtype) == np.float32:
        return name
    return None


def guarded_transform(transform, output_dtype: np.dtype) -> str | None:
    """float64 ``sigmoid`` and ``exp``: NumPy's ufuncs after the entry, where it reports every
    margin below :data:`GUARD` in magnitude (no exp overflows), else None."""
    if transform is None or transform.param("margin_divisor", 1.0) != 1.0:
        return None
    if transform.name in ("sigmoid", "exp") and np.dtype(output_dtype) == np.float64:
        return transform.name
    return None


# |margin| below this (times alpha, at most 1 apart from LightGBM's sigmoid parameter, checked
# by the caller) keeps exp finite in float64 (it overflows past 709.78).
GUARD = 700.0


_libm_lock = threading.Lock()
_libm_ready = False


def _bind_exp() -> None:
    """Resolve ``exp`` to the C library's for the JIT (a libcall llvm.exp may become)."""
    global _libm_ready
    with _libm_lock:
        if not _libm_ready:
            libm = ctypes.CDLL(ctypes.util.find_library("m") or None)
            llvm.add_symbol("exp", ctypes.cast(libm.exp, ctypes.c_void_p).value)
            _libm_ready = True


def _ir(phases: int, acc: str, transform: str | None, alpha: float, guard: bool = False,
        split: bool = False) -> str:
    """IR of ``i64 entry(i64* block, i64 n, i64 apply)``: each of the ``phases`` phases (its
    address and trip in the block) over rows [0, n), then, if ``apply``, the transform of the
    n x outputs margins into FINAL; or, with ``guard``, whether every margin is below
    :data:`GUARD` in magnitude (1 or 0).  Everything of a kernel is read from the block, so one
    compiled entry serves every kernel of the same shape (:func:`entry`).  Returns 1, or for
    ``softmax`` 0 where a row is left to NumPy (a margin not finite; FINAL is then unused).

    ``split``: the block has one word more, the native pool's ``sf_pool_run`` (:mod:`.pool`) or
    0; where it is set, a phase that loops over trees (a trip of 2 or more) runs its first half
    of the iterations here and its second on a pool worker (the caller holds the pool)."""
    i64, i8p = ir.IntType(64), ir.IntType(8).as_pointer()
    t = ir.FloatType() if acc == "f32" else ir.DoubleType()
    mod = ir.Module(name="silvanforge_small")
    phase_t = ir.FunctionType(ir.VoidType(), [i8p] + [i64] * len(lir.SCALAR_PARAMS) + [i8p, i8p])
    fn = ir.Function(mod, ir.FunctionType(i64, [i64.as_pointer(), i64, i64]), "silvanforge_small_entry")
    block, n, apply = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    word = [b.load(b.gep(block, [ir.Constant(i64, k)])) for k in range(PHASES + 2 * phases + int(split))]
    ins, out, table = (b.inttoptr(word[k], i8p) for k in (INS, OUT, TABLE))
    features, outputs = word[FEATURES], word[OUTPUTS]
    zero, one = ir.Constant(i64, 0), ir.Constant(i64, 1)
    shares = b.alloca(ir.ArrayType(i64, 2 * SHARE_WORDS)) if split else None
    for k in range(phases):
        callee = b.inttoptr(word[PHASES + 2 * k], phase_t.as_pointer())
        trip = word[PHASES + 2 * k + 1]
        # rows, row stride, column stride, row_begin, row_end, iter_begin, iter_end, n, out, table
        args = [ins, features, one, zero, n, zero, trip, n, out, table]
        if not split:
            b.call(callee, args)
            continue
        run = word[PHASES + 2 * phases]
        halves = b.and_(b.icmp_signed("!=", run, zero), b.icmp_signed(">=", trip, ir.Constant(i64, 2)))
        pooled, alone, after = (fn.append_basic_block(f"{name}{k}") for name in ("pooled", "alone", "after"))
        b.cbranch(halves, pooled, alone)
        b.position_at_end(pooled)
        half = b.sdiv(trip, ir.Constant(i64, 2))
        words = [b.ptrtoint(a, i64) if isinstance(a.type, ir.PointerType) else a for a in args]
        for s, (lo, hi) in enumerate(((zero, half), (half, trip))):
            share = words[:5] + [lo, hi] + words[7:]
            for j, w in enumerate(share):
                b.store(w, b.gep(shares, [zero, ir.Constant(i64, s * SHARE_WORDS + j)]))
        pool_t = ir.FunctionType(ir.VoidType(), [i8p, i64, i8p])
        b.call(b.inttoptr(run, pool_t.as_pointer()),
               [b.bitcast(callee, i8p), ir.Constant(i64, 2), b.bitcast(shares, i8p)])
        b.branch(after)
        b.position_at_end(alone)
        b.call(callee, args)
        b.branch(after)
        b.position_at_end(after)
    if (transform is None or transform == "identity") and not guard:
        b.ret(one)
        return str(mod)
    if transform == "softmax":
        _softmax(mod, b, b.bitcast(out, ir.FloatType().as_pointer()),
                 b.inttoptr(word[FINAL], ir.FloatType().as_pointer()), n, outputs, apply)
        return str(mod)
    loop, done = fn.append_basic_block("transform"), fn.append_basic_block("done")
    count = b.mul(n, outputs)
    start = b.block
    b.cbranch(b.and_(b.icmp_signed("!=", apply, zero), b.icmp_signed(">", count, zero)), loop, done)
    b.position_at_end(loop)
    k = b.phi(i64)
    k.add_incoming(zero, start)
    if guard:  # all(|m| < GUARD) so far; NaN is not below it
        safe = b.phi(ir.IntType(1))
        safe.add_incoming(ir.Constant(ir.IntType(1), 1), start)
    margins = b.bitcast(out, t.as_pointer())
    m = b.load(b.gep(margins, [k]))
    if guard:
        fabs = mod.declare_intrinsic("llvm.fabs", [t])
        below = b.and_(safe, b.fcmp_ordered("<", b.call(fabs, [m]), ir.Constant(t, GUARD)))
        following = b.add(k, one)
        k.add_incoming(following, loop)
        safe.add_incoming(below, loop)
        b.cbranch(b.icmp_signed("<", following, count), loop, done)
        b.position_at_end(done)
        result = b.phi(ir.IntType(1))
        result.add_incoming(ir.Constant(ir.IntType(1), 1), start)
        result.add_incoming(below, loop)
        b.ret(b.zext(result, i64))
        return str(mod)
    final = b.inttoptr(word[FINAL], t.as_pointer())
    unit = ir.Constant(t, 1.0)
    if transform == "hinge":  # (m > 0) as a number; NaN is not > 0
        value = b.select(b.fcmp_ordered(">", m, ir.Constant(t, 0.0)), unit, ir.Constant(t, 0.0))
    else:
        double = ir.DoubleType()
        exp = mod.declare_intrinsic("llvm.exp", [double])
        # sigmoid: 1 / (1 + exp(-alpha * m)), each operation rounded to float32 as NumPy's are
        x = m if transform == "exp" else (b.fneg(m) if alpha == 1.0 else b.fmul(ir.Constant(t, -alpha), m))
        e = b.fptrunc(b.call(exp, [b.fpext(x, double)]), t)
        value = e if transform == "exp" else b.fdiv(unit, b.fadd(unit, e))
    b.store(value, b.gep(final, [k]))
    following = b.add(k, one)
    k.add_incoming(following, loop)
    b.cbranch(b.icmp_signed("<", following, count), loop, done)
    b.position_at_end(done)
    b.ret(one)
    return str(mod)


def _counted(b, trip, body, carried=()):
    """A loop ``for j in range(trip)`` (``trip`` at least 1) at the builder's position:
    ``body(j, values)`` emits an iteration and returns the carried values' next ones
    (``carried``: ``(type, first value)`` pairs).  Returns the carried values after the last."""
    i64 = ir.IntType(64)
    fn, before = b.function, b.block
    loop, after = fn.append_basic_block("loop"), fn.append_basic_block("after")
    b.branch(loop)
    b.position_at_end(loop)
    j = b.phi(i64)
    j.add_incoming(ir.Constant(i64, 0), before)
    phis = []
    for typ, first in carried:
        phi = b.phi(typ)
        phi.add_incoming(first, before)
        phis.append(phi)
    following = body(j, phis)
    j_next = b.add(j, ir.Constant(i64, 1))
    j.add_incoming(j_next, b.block)
    for phi, value in zip(phis, following):
        phi.add_incoming(value, b.block)
    b.cbranch(b.icmp_signed("<", j_next, trip), loop, after)
    b.position_at_end(after)
    return following


def _softmax(mod, b, margins, final, n, outputs, apply) -> None:
    """Float32 softmax of each of ``n`` rows of ``outputs`` margins into ``final``, as the
    reference computes it (:func:`silvanforge.runtime.transforms._softmax`): ``z = m - max(m)`` in
    float32, ``e = exp(z)`` evaluated in double and rounded once, the row's ``e`` summed in a
    double in class order and rounded to float32, then ``e / sum``.  Returns 0 (the caller runs
    NumPy's) at the first row with a margin not finite (NaN and infinities as NumPy makes them), else 1."""
    i1, i64, f32, f64 = ir.IntType(1), ir.IntType(64), ir.FloatType(), ir.DoubleType()
    fn = b.function
    exp = mod.declare_intrinsic("llvm.exp", [f64])
    true = ir.Constant(i1, 1)
    bail, done = fn.append_basic_block("softmax_bail"), fn.append_basic_block("softmax_done")
    rows = fn.append_basic_block("softmax_rows")
    b.cbranch(b.and_(b.icmp_signed("!=", apply, ir.Constant(i64, 0)),
                     b.icmp_signed(">", b.mul(n, outputs), ir.Constant(i64, 0))), rows, done)
    b.position_at_end(rows)

    def row(r, _):
        first = b.mul(r, outputs)

        def at(j):
            return b.add(first, j)

        def scan(j, acc):  # the largest margin; every margin finite (m - m is 0 only then)
            big, finite = acc
            m = b.load(b.gep(margins, [at(j)]))
            return [b.select(b.fcmp_ordered(">", m, big), m, big),
                    b.and_(finite, b.fcmp_ordered("==", b.fsub(m, m), ir.Constant(f32, 0.0)))]

        big, finite = _counted(b, outputs, scan, [(f32, b.load(b.gep(margins, [first]))), (i1, true)])

        def exps(j, acc):  # each exponential into FINAL, summed in a double in class order
            (total,) = acc
            e = b.fptrunc(b.call(exp, [b.fpext(b.fsub(b.load(b.gep(margins, [at(j)])), big), f64)]), f32)
            b.store(e, b.gep(final, [at(j)]))
            return [b.fadd(total, b.fpext(e, f64))]

        (total,) = _counted(b, outputs, exps, [(f64, ir.Constant(f64, 0.0))])
        divide = fn.append_basic_block("softmax_divide")
        b.cbranch(finite, divide, bail)
        b.position_at_end(divide)
        denominator = b.fptrunc(total, f32)

        def quotient(j, _):
            slot = b.gep(final, [at(j)])
            b.store(b.fdiv(b.load(slot), denominator), slot)
            return []

        _counted(b, outputs, quotient)
        return []

    _counted(b, n, row)
    b.branch(done)
    b.position_at_end(bail)
    b.ret(ir.Constant(i64, 0))
    b.position_at_end(done)
    b.ret(ir.Constant(i64, 1))


class SmallEntry:
    """A compiled entry (kept alive as long as the process: :func:`entry` shares it)."""

    def __init__(self, phases: int, acc: str, transform: str | None, alpha: float, guard: bool,
                 split: bool = False):
        _bind_exp()
        tm = target_machine()
        mod = llvm.parse_assembly(_ir(phases, acc, transform, alpha, guard, split))
        mod.triple = llvm.get_process_triple()
        mod.data_layout = str(tm.target_data)
        mod.verify()
        pb = llvm.create_pass_builder(tm, llvm.PipelineTuningOptions(speed_level=2))
        pb.getModulePassManager().run(mod, pb)
        self._engine = llvm.create_mcjit_compiler(mod, tm)
        self._engine.finalize_object()
        self.address = address = self._engine.get_function_address("silvanforge_small_entry")
        self.call = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(address)


_entries: dict[tuple, SmallEntry] = {}
_entries_lock = threading.Lock()


def entry(phases: int, acc: str, transform: str | None, alpha: float, guard: bool,
          split: bool = False) -> SmallEntry:
    """The compiled entry of kernels of this shape: compiled once a process (a few ms; a
    compile each kernel made the suite's thousands of small models a third slower)."""
    key = (phases, acc, transform, float(alpha), bool(guard), bool(split))
    with _entries_lock:
        found = _entries.get(key)
        if found is None:
            found = _entries[key] = SmallEntry(*key)
        return found


def foreign_call():
    """The C module of small requests (``_smallcall``: ``run``, ``sigmoid_tail``), or None where
    the target was installed without it (no C compiler): small calls then go through ctypes."""
    try:
        from . import _smallcall
    except ImportError:
        return None
    return _smallcall


def call_state(compiled: SmallEntry, block: np.ndarray, ins: np.ndarray, margins: np.ndarray,
               final: np.ndarray, max_rows: int, guarded: str | None = None,
               alpha: float = 1.0) -> bytes:
    """The bytes of ``_smallcall.c``'s State for a thread's staging (its arrays stay alive
    with the staging) and the compiled entry (alive as long as the process)."""
    loop = numpy_exp_loop() if guarded else (0, 0)
    words = [compiled.address, block.ctypes.data, ins.ctypes.data, margins.ctypes.data,
             final.ctypes.data, ins.strides[0], margins.strides[0], max_rows,
             {None: 0, "exp": 1, "sigmoid": 2}[guarded], *loop,
             ins.shape[1], ins.itemsize if ins.dtype.kind == "f" and ins.itemsize in (4, 8) else 0]
    return np.array(words, np.int64).tobytes() + np.array([-alpha], np.float64).tobytes()


_exp_loop: tuple[int, int] | None = None
_exp_loop_lock = threading.Lock()


def numpy_exp_loop() -> tuple[int, int]:
    """``(function, data)``: the inner loop ``np.exp`` runs on float64 arrays, or ``(0, 0)``.

    Why: float64 sigmoid must be NumPy's exp bit for bit (the reference's), and a ufunc call
    costs 0.65 us on one value, more than a 100-tree walk; the loop itself costs nanoseconds.
    It is the first float64 -> float64 loop of the ufunc (what NumPy's type resolution picks:
    its CPU-dispatched one), found by the C module through NumPy's C API
    (``_smallcall.unary_float64_loop``), and used only after it returned np.exp's very bits
    on a probe of every range and length class.  Only the C call runs it: without the C
    module small calls take NumPy's ufunc (:func:`numpy_transform`), and this is ``(0, 0)``."""
    global _exp_loop
    with _exp_loop_lock:
        if _exp_loop is None:
            try:
                _exp_loop = _find_exp_loop()
            except Exception:  # noqa: BLE001 - any surprise in the layout: NumPy's ufunc then
                _exp_loop = (0, 0)
        return _exp_loop


_LOOP = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_ssize_t),
                         ctypes.POINTER(ctypes.c_ssize_t), ctypes.c_void_p)


def _find_exp_loop() -> tuple[int, int]:
    native = foreign_call()
    if native is None:
        return 0, 0
    fn, dat = native.unary_float64_loop(np.exp)
    return (fn, dat) if fn and _same_as_numpy(fn, dat or None) else (0, 0)


def _same_as_numpy(fn: int, dat) -> bool:
    """Whether loop ``fn`` gives np.exp's bits, run in place as the C call runs it: every length
    1-17 (SIMD tails) and 40,000 values over exp's whole finite range, its edges and specials."""
    rng = np.random.default_rng(2026)
    probe = np.concatenate([rng.uniform(-745.2, 709.8, 20000), rng.normal(0, 5, 20000),
                            [0.0, -0.0, 1e-300, -1e-300, 709.78, -708.4, -745.13, np.inf, -np.inf, np.nan]])
    loop = _LOOP(fn)
    cuts = list(range(1, 18)) + [len(probe)]
    for n in cuts:
        got = probe[:n].copy()
        args = (ctypes.c_void_p * 2)(got.ctypes.data, got.ctypes.data)
        loop(args, (ctypes.c_ssize_t * 1)(n), (ctypes.c_ssize_t * 2)(8, 8), dat)
        with np.errstate(all="ignore"):
            want = np.exp(probe[:n])
        if not np.array_equal(got.view(np.int64), want.view(np.int64)):
            return False
    return True


def numpy_transform(name: str, alpha: float, margins: np.ndarray, out: np.ndarray) -> np.ndarray:
    """:mod:`silvanforge.runtime.transforms`' float64 ``sigmoid`` / ``exp`` ufunc by ufunc into ``out``
    (same shape), without its ``errstate``: for margins the entry found overflow-free."""
    if name == "exp":
        return np.exp(margins, out)
    # 1 / (1 + exp(-alpha * m)), as transforms._sigmoid computes it.  Operands are arrays and
    # passed by position: a Python scalar or keyword costs a ufunc call a third more.
    if alpha != 1.0:
        np.multiply(margins, np.full(1, -alpha), out)
    else:
        np.negative(margins, out)
    np.exp(out, out)
    np.add(out, _ONE, out)
    return np.divide(_ONE, out, out)


_ONE = np.ones(1)

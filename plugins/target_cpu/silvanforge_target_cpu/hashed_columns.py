"""The CPU's kernel of computed columns (CatBoost's CTRs and one-hot tests over categories known
by hash): functions in LLVM IR, compiled once a process, that read a model's combinations as
the flat arrays of :mod:`silvanforge.inputs.hashed_rows` (the model is data, so no model is
compiled).

``hashed_columns_f32(args, row_begin, row_end)`` (and ``_f64``, for rows of float64, in a
module of its own compiled at its first call) fills,
for rows ``[row_begin, row_end)``, every computed column of the row array.  For each *chain*
(an element list several columns share) it mixes the row's key element by element with
CatBoost's ``CalcHash(key, value) = M * (key + M * value)`` (64-bit, wrapping), the value being
the row's category hash sign-extended (``cat``: the call's hash of the row's code in that
column), ``x > border`` of the float32 input with NaN as the element says (``float``), or
whether the hash is the element's (``onehot``), the first element setting the key; finds the
key in the chain's cuckoo table (a key in one of its two slots, :data:`WAYS`; an empty slot
answers the unknown index); and writes each of the chain's columns' answer for that slot (the last answer: a key
not found, or a row missing a category the key hashes).  Rows go in blocks of :data:`BLOCK`, a
chain at a time over a block and an element at a time over its rows (loops LLVM vectorises:
codes and floats come a column at a time, its rows contiguous), so a chain's table stays in
cache for the block.  A chain whose elements take fewer combinations of values in a call
than it has rows (a category's distinct values in the call, a bit's two) is read instead by a
table of the call's own (``hashed_columns_tables(args)``, run first: each combination's key
looked up once), indexed by the row's digits (its code of each category, its bits): 0.75x the
time of hashing each row on 4096 rows of benchmarks/catboost_categories.py's model; its index
is computed in 32 bits (the table has fewer entries than the call has rows).  The machine code
of rows of float32 and of the tables is saved with a compiled model (:meth:`HashedColumnsKernel.artifact`)
and mapped again by a trusted load on the same host.  ``args`` is the int64 block of
:data:`ARG_LAYOUT`.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import threading

import llvmlite.binding as llvm
import llvmlite.ir as ir

from . import pool
from .jit import host_signature
from .llvm_host import optimise, target_machine
from .treeshap import _Vars

i1, i8, i32, i64, f32, f64 = (ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType(),
                              ir.DoubleType())

# The args block, in order: (name, element type of the array it points to, or None: a count).
# ``rows`` points to the row array of the function's dtype.
ARG_LAYOUT = (
    ("rows", i8), ("row_stride", None), ("column_stride", None),  # the row array (elements' strides)
    ("floats", f32), ("float_stride", None),  # (columns, float_stride): the inputs as float32
    # A call's distinct categories: a row's code of its value in a column, (columns, code_stride),
    # -1 for a missing one, and each column's distinct values' hashes, sign-extended (``distinct``
    # from ``distinct_at``, ``distinct_count`` of them, the last a missing value's, >= 2**31: no
    # category); a chain read by its table of the call (``dense_at``, -1: by hashing each row)
    # finds its answer at ``dense[dense_at + (code << bits | bits)]``.
    ("codes", i32), ("code_stride", None),
    ("distinct", i64), ("distinct_at", i64), ("distinct_count", i64),
    ("dense_at", i64), ("dense", i32),
    ("chains", None),
    ("chain_elements", i64),  # (chains + 1,): each chain's first element
    ("element_kind", i8), ("element_column", i32), ("element_border", f32), ("element_nan_true", i8),
    ("element_hash", i64),  # a one-hot element's hash, sign-extended
    ("chain_table", i64),  # (chains,): the chain's first slot in ``slot_key`` / ``slot_answer``
    ("chain_shift", i64),  # (chains,): 64 - log2 of its table's size (a power of 2)
    ("chain_unknown", i64),  # (chains,): the answer index of a key not found (the chain's key count)
    ("slot_key", i64), ("slot_answer", i32),  # the tables: a slot's key and its answer index
    ("chain_columns", i64),  # (chains + 1,): each chain's first column in ``column_out``, ``column_answers``
    ("column_out", i64),  # the row array's column a computed column is written to
    ("column_answers", i64),  # its first answer in ``answers``
    ("answers", f64),
    ("answers_f32", f32),  # the same rounded to float32, which rows of float32 read
)
ARG_INDEX = {name: k for k, (name, _) in enumerate(ARG_LAYOUT)}
CAT, FLOAT, ONEHOT = 0, 1, 2
MAGIC = 0x4906BA494954CB65
# Rows a block (see the module docstring): with rows a column at a time, 1024 took 0.95x the
# time of 256 to fill 512 and 4096 rows of benchmarks/catboost_categories.py's model (2048 as 1024).
BLOCK = 1024
# Elements a chain read by a table of the call's may have (the table's digits).
MAX_ELEMENTS = 16
# A key's two slots in a table of 2**(64 - shift): ((k ^ k >> fold) * multiplier) >> shift.
WAYS = ((32, 0x9E3779B97F4A7C15), (29, 0xC2B2AE3D27D4EB4F))


class _Emit:
    """What both functions share: the args, loops, CatBoost's mix, an element's bit and a
    chain's table lookup."""

    def __init__(self, module, name: str, row_type=None, params=(i64, i64)):
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64.as_pointer(), *params]), name)
        self.b = b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.v = _Vars(self.fn, b)
        self.A = {}
        for k, (arg, ty) in enumerate(ARG_LAYOUT):
            word = b.load(b.gep(self.fn.args[0], [c64(k)]), name=arg)
            pointee = row_type if arg == "rows" and row_type is not None else ty
            self.A[arg] = word if ty is None else b.inttoptr(word, pointee.as_pointer(), name=arg)

    def at(self, arg, index):
        return self.b.load(self.b.gep(self.A[arg], [index]))

    def mix(self, key, value):
        b, magic = self.b, c64(MAGIC)
        return b.mul(magic, b.add(key, b.mul(magic, value)))

    def lookup(self, c, k):
        """Chain ``c``'s answer index of key ``k`` (its unknown index where absent): a key lies
        in one of its two slots (a cuckoo table), an empty slot answers the unknown index; two
        compares and selects, no branch."""
        b, at = self.b, self.at
        base = b.gep(self.A["slot_key"], [at("chain_table", c)])
        answers_at = b.gep(self.A["slot_answer"], [at("chain_table", c)])
        shift = at("chain_shift", c)
        answer = at("chain_unknown", c)
        for fold, multiplier in WAYS:
            s = b.lshr(b.mul(b.xor(k, b.lshr(k, c64(fold))), c64(multiplier)), shift)
            hit = b.icmp_unsigned("==", b.load(b.gep(base, [s])), k)
            answer = b.select(hit, b.sext(b.load(b.gep(answers_at, [s])), i64), answer)
        return answer

    def by_kind(self, e, cat, flt, onehot):
        """Branch on element ``e``'s kind: ``cat()``, ``flt()``, ``onehot()`` emit each case."""
        b = self.b
        kind = self.at("element_kind", e)
        blocks = [b.append_basic_block(n) for n in ("cat", "other", "float", "onehot", "done")]
        b.cbranch(b.icmp_unsigned("==", kind, ir.Constant(i8, CAT)), blocks[0], blocks[1])
        b.position_at_end(blocks[1])
        b.cbranch(b.icmp_unsigned("==", kind, ir.Constant(i8, FLOAT)), blocks[2], blocks[3])
        for block, emit in zip((blocks[0], blocks[2], blocks[3]), (cat, flt, onehot)):
            b.position_at_end(block)
            emit()
            b.branch(blocks[4])
        b.position_at_end(blocks[4])


def c64(k):
    return ir.Constant(i64, k)


def c32(k):
    return ir.Constant(i32, k)


def _columns_function(module, name: str, row_type) -> None:
    """``name(args, row_begin, row_end)``: the computed columns of those rows (module docstring)."""
    E = _Emit(module, name, row_type)
    b, v, A, at = E.b, E.v, E.A, E.at
    row_begin, row_end = E.fn.args[1], E.fn.args[2]
    with b.goto_entry_block():
        keys = b.alloca(ir.ArrayType(i64, BLOCK), name="keys")
        oks = b.alloca(ir.ArrayType(i8, BLOCK), name="oks")
        slots = b.alloca(ir.ArrayType(i64, BLOCK), name="slots")
        index = b.alloca(ir.ArrayType(i32, BLOCK), name="index")

    def cell(array, r):
        return b.gep(array, [c64(0), r])

    def bit_loops(e, lo, m, update):
        """``update(r, bit)`` for each row of the block: the bit of float or one-hot element ``e``."""
        column = b.sext(at("element_column", e), i64)

        def flt():
            border = at("element_border", e)
            nan_true = b.icmp_unsigned("!=", at("element_nan_true", e), ir.Constant(i8, 0))
            fcol = b.gep(A["floats"], [b.add(b.mul(column, A["float_stride"]), lo)])
            with v.loop(c64(0), m, "rf") as r:
                x = b.load(b.gep(fcol, [r]))
                update(r, b.or_(b.fcmp_ordered(">", x, border), b.and_(b.fcmp_unordered("uno", x, x), nan_true)))

        def onehot():
            value = at("element_hash", e)
            with v.loop(c64(0), m, "ro") as r:
                update(r, b.icmp_signed("==", row_hash(column, lo, r), value))
        return column, flt, onehot

    def row_code(column, lo, r):
        """The row's code of its value in ``column`` (i32), a missing one's the last."""
        code = b.load(b.gep(A["codes"], [b.add(b.add(b.mul(column, A["code_stride"]), lo), r)]))
        last = b.trunc(b.sub(at("distinct_count", column), c64(1)), i32)
        return b.select(b.icmp_signed("<", code, c32(0)), last, code)

    def row_hash(column, lo, r):
        """The row's hash of its value in ``column`` (sign-extended; >= 2**31: no category)."""
        return b.load(b.gep(A["distinct"], [b.add(at("distinct_at", column), b.zext(row_code(column, lo, r), i64))]))

    one = c64(1)
    blocks = b.udiv(b.add(b.sub(row_end, row_begin), c64(BLOCK - 1)), c64(BLOCK))
    with v.loop(c64(0), blocks, "block") as block:
        lo = b.add(row_begin, b.mul(block, c64(BLOCK)))
        end = b.add(lo, c64(BLOCK))
        m = b.sub(b.select(b.icmp_signed("<", end, row_end), end, row_end), lo)  # the block's rows
        with v.loop(c64(0), A["chains"], "chain") as c:
            first, last = at("chain_elements", c), at("chain_elements", b.add(c, one))
            dense_at = at("dense_at", c)
            dense, hashed, looked_up = (b.append_basic_block(n) for n in ("dense", "hashed", "looked_up"))
            b.cbranch(b.icmp_signed(">=", dense_at, c64(0)), dense, hashed)

            # By the call's table: a digit an element, the row's code of its category (in base
            # the call's count of distinct values) or its bit, the first element's the most
            # significant; in 32 bits (a table has fewer entries than rows), the first element
            # setting the index where the others update it (a pass less over the block).
            b.position_at_end(dense)

            def dense_element(e, init):
                def shifted(r, bit):
                    digit = b.zext(bit, i32)
                    b.store(digit if init else b.or_(b.shl(b.load(cell(index, r)), c32(1)), digit), cell(index, r))
                column, flt, onehot = bit_loops(e, lo, m, shifted)

                def cat():
                    radix = b.trunc(at("distinct_count", column), i32)
                    with v.loop(c64(0), m, "rk") as r:
                        digit = row_code(column, lo, r)
                        b.store(digit if init else b.add(b.mul(b.load(cell(index, r)), radix), digit), cell(index, r))
                E.by_kind(e, cat, flt, onehot)
            dense_element(first, True)
            with v.loop(b.add(first, one), last, "ed") as e:
                dense_element(e, False)
            table = b.gep(A["dense"], [dense_at])
            with v.loop(c64(0), m, "rt") as r:
                b.store(b.sext(b.load(b.gep(table, [b.load(cell(index, r))])), i64), cell(slots, r))
            b.branch(looked_up)

            # By hashing each row's key, the first element setting it where the others mix it in.
            b.position_at_end(hashed)

            def hashed_element(e, init):
                def mixed(r, bit):
                    key = E.mix(c64(0) if init else b.load(cell(keys, r)), b.zext(bit, i64))
                    b.store(key, cell(keys, r))
                    if init:
                        b.store(ir.Constant(i8, 1), cell(oks, r))
                column, flt, onehot = bit_loops(e, lo, m, mixed)

                def cat():
                    with v.loop(c64(0), m, "rc") as r:
                        h = row_hash(column, lo, r)
                        present = b.zext(b.icmp_signed("<", h, c64(1 << 31)), i8)
                        b.store(present if init else b.and_(b.load(cell(oks, r)), present), cell(oks, r))
                        b.store(E.mix(c64(0) if init else b.load(cell(keys, r)), h), cell(keys, r))
                E.by_kind(e, cat, flt, onehot)
            hashed_element(first, True)
            with v.loop(b.add(first, one), last, "e") as e:
                hashed_element(e, False)
            unknown = at("chain_unknown", c)
            with v.loop(c64(0), m, "rl") as r:
                answer = E.lookup(c, b.load(cell(keys, r)))
                present = b.icmp_unsigned("!=", b.load(cell(oks, r)), ir.Constant(i8, 0))
                b.store(b.select(present, answer, unknown), cell(slots, r))
            b.branch(looked_up)

            # the chain's columns
            b.position_at_end(looked_up)
            with v.loop(at("chain_columns", c), at("chain_columns", b.add(c, one)), "j") as j:
                answers = b.gep(A["answers" if row_type is f64 else "answers_f32"], [at("column_answers", j)])
                at_column = b.mul(at("column_out", j), A["column_stride"])
                out = b.gep(A["rows"], [b.add(b.mul(lo, A["row_stride"]), at_column)])
                with v.loop(c64(0), m, "rw") as r:
                    value = b.load(b.gep(answers, [b.load(cell(slots, r))]))
                    b.store(value, b.gep(out, [b.mul(r, A["row_stride"])]))
    b.ret_void()


def _tables_function(module) -> None:
    """``hashed_columns_tables(args)``: the call's table of each chain read by one (``dense_at``
    >= 0): for each index (a digit an element, as the rows compute it: a category's code among
    the call's distinct values, a bit), the answer index of the key those values make, the
    unknown one where a category is missing."""
    E = _Emit(module, "hashed_columns_tables", params=())
    b, v, A, at = E.b, E.v, E.A, E.at
    one = c64(1)
    with b.goto_entry_block():
        digits = b.alloca(ir.ArrayType(i64, MAX_ELEMENTS), name="digits")
    with v.loop(c64(0), A["chains"], "chain") as c:
        dense_at = at("dense_at", c)
        build, skip = b.append_basic_block("build"), b.append_basic_block("skip")
        b.cbranch(b.icmp_signed(">=", dense_at, c64(0)), build, skip)
        b.position_at_end(build)
        first, last = at("chain_elements", c), at("chain_elements", b.add(c, one))
        size = v.var(i64, "size", one)
        with v.loop(first, last, "es") as e:
            column = b.sext(at("element_column", e), i64)
            is_cat = b.icmp_unsigned("==", at("element_kind", e), ir.Constant(i8, CAT))
            radix = b.select(is_cat, at("distinct_count", column), c64(2))
            b.store(b.mul(b.load(size), radix), size)
        unknown = at("chain_unknown", c)
        with v.loop(c64(0), b.load(size), "t") as t:
            rest = v.var(i64, "rest", t)
            with v.loop(c64(0), b.sub(last, first), "eb") as k:  # the digits, last element first
                e = b.sub(b.sub(last, one), k)
                column = b.sext(at("element_column", e), i64)
                is_cat = b.icmp_unsigned("==", at("element_kind", e), ir.Constant(i8, CAT))
                radix = b.select(is_cat, at("distinct_count", column), c64(2))
                b.store(b.urem(b.load(rest), radix), b.gep(digits, [c64(0), b.sub(e, first)]))
                b.store(b.udiv(b.load(rest), radix), rest)
            key = v.var(i64, "key", c64(0))
            present = v.var(i1, "present", ir.Constant(i1, 1))
            with v.loop(first, last, "ef") as e:
                digit = b.load(b.gep(digits, [c64(0), b.sub(e, first)]))
                column = b.sext(at("element_column", e), i64)
                is_cat = b.icmp_unsigned("==", at("element_kind", e), ir.Constant(i8, CAT))
                h = b.load(b.gep(A["distinct"], [b.add(at("distinct_at", column), digit)]))
                value = b.select(is_cat, h, digit)
                b.store(b.and_(b.load(present), b.or_(b.not_(is_cat), b.icmp_signed("<", h, c64(1 << 31)))),
                        present)
                b.store(E.mix(b.load(key), value), key)
            answer = b.select(b.load(present), E.lookup(c, b.load(key)), unknown)
            b.store(b.trunc(answer, i32), b.gep(A["dense"], [b.add(dense_at, t)]))
        b.branch(skip)
        b.position_at_end(skip)
    b.ret_void()


def _share_function(module, name: str) -> None:
    """``name + "_share"``: function ``name`` called with the arguments of a share of the native
    pool (:mod:`.pool`: a pointer, seven words, two pointers), its first three (the args block,
    the row bounds), so the pool's workers run a call's rows as they run a form's."""
    fn = module.get_global(name)
    share = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64.as_pointer()] + [i64] * (pool.SHARE_WORDS - 3)
                                                + [i8.as_pointer()] * 2), name + "_share")
    b = ir.IRBuilder(share.append_basic_block("entry"))
    b.call(fn, share.args[:3])
    b.ret_void()


def build_ir(rows: str = "f32") -> str:
    """The kernel's LLVM IR (see the module docstring): the function for rows of float32 and
    the tables' (``rows="f32"``), or the one for rows of float64 (``"f64"``); each with its
    entry for the native pool's workers (:func:`_share_function`)."""
    module = ir.Module(f"hashed_columns_{rows}")
    _columns_function(module, f"hashed_columns_{rows}", f32 if rows == "f32" else f64)
    _share_function(module, f"hashed_columns_{rows}")
    if rows == "f32":
        _tables_function(module)
    return str(module)


_lock = threading.Lock()
_kernel = None
_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


class HashedColumnsKernel:
    """The compiled kernel (one a process): :meth:`run` calls it through ctypes, which releases
    the GIL, so threads may run their rows in parallel.  Rows of float32 (what compiled models
    read) and the tables are compiled at once (0.3 s, or mapped in milliseconds from the object
    code of an earlier compile on the same host: :meth:`artifact`, which a compiled model's
    artifact carries); rows of float64 (the plain reference evaluator) at their first call
    (0.3-0.6 s under load, half the compile)."""

    arg_layout = tuple(name for name, _ in ARG_LAYOUT)
    ways = WAYS
    max_elements = MAX_ELEMENTS
    kinds = {"cat": CAT, "float": FLOAT, "onehot": ONEHOT}

    def __init__(self, code: bytes | None = None):
        """Compiled now, or from ``code`` (:meth:`artifact`'s object code for this host)."""
        self._engines = []
        self._object = code
        self.mapped = code is not None  # (made from saved code, not compiled)
        self._fns = {4: self._compile("f32", code)}  # row bytes -> (ctypes call, its pool entry's address)
        self._tables = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._engines[0].get_function_address(
            "hashed_columns_tables"))

    def _compile(self, rows: str, code: bytes | None = None) -> tuple:
        if code is not None:
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
            engine.add_object_file(llvm.ObjectFileRef.from_data(code))
        else:
            mod, tm = optimise(build_ir(rows))
            engine = llvm.create_mcjit_compiler(mod, tm)
            if rows == "f32":  # (its object code kept for artifacts)
                engine.set_object_cache(self._keep_object, lambda _module: None)
        engine.finalize_object()
        self._engines.append(engine)
        name = f"hashed_columns_{rows}"
        return _CALL(engine.get_function_address(name)), engine.get_function_address(name + "_share")

    def _keep_object(self, _module, data: bytes) -> None:
        self._object = bytes(data)

    def artifact(self) -> bytes:
        """The object code of rows of float32 and the tables, with the host it was built for
        (:func:`.jit.signature`), which :func:`kernel` maps on the same host."""
        meta = json.dumps({**host_signature(), "code": "object", "ir": _ir_digest()}).encode()
        return len(meta).to_bytes(4, "little") + meta + (self._object or b"")

    def tables(self, args: int) -> None:
        """The call's tables of the chains read by one (``dense_at``); before :meth:`run`."""
        self._tables(args)

    def _function(self, row_bytes: int) -> tuple:
        found = self._fns.get(row_bytes)
        if found is None:
            with _lock:
                found = self._fns.get(row_bytes)
                if found is None:
                    found = self._fns[row_bytes] = self._compile("f64")
        return found

    def run(self, args: int, row_begin: int, row_end: int, row_bytes: int = 8) -> None:
        """One call over rows ``[row_begin, row_end)`` of a row array of float32 (``row_bytes``
        4) or float64 (8); ``args``: the address of the block."""
        self._function(row_bytes)[0](args, row_begin, row_end)

    def run_shares(self, args: int, bounds: list[int], row_bytes: int = 8) -> bool:
        """Rows ``[bounds[k], bounds[k + 1])`` for each k in parallel on the native pool's
        workers (:mod:`.pool`, the first share on this thread), which take a share in
        microseconds where Python's pool wakes a thread in tens (and a worker still spinning
        after a form's walk would hold the CPU that thread waits for); False (nothing run)
        where the pool is busy with another caller or cannot run here."""
        native = pool.native_pool()
        if native is None:
            return False
        # The kernel compiled (a float64 one on first use) before the pool is taken: other
        # callers meanwhile keep the pool.
        address = self._function(row_bytes)[1]
        rest = (0,) * (pool.SHARE_WORDS - 3)
        return native.try_run(address, [(args, lo, hi, *rest) for lo, hi in itertools.pairwise(bounds)])


def _ir_digest() -> str:
    """A digest of the kernel's IR: code saved by another version of this module is not mapped."""
    global _digest
    if _digest is None:
        _digest = hashlib.sha256(build_ir("f32").encode()).hexdigest()[:16]
    return _digest


_digest = None


def _saved_code(blob: bytes) -> bytes | None:
    """The object code in ``blob`` (:meth:`HashedColumnsKernel.artifact`) where it was made on a
    host like this one by this kernel's IR, else None."""
    try:
        n = int.from_bytes(blob[:4], "little")
        meta = json.loads(blob[4:4 + n])
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(meta, dict) or meta.pop("code", None) != "object" or meta.pop("ir", None) != _ir_digest():
        return None
    return blob[4 + n:] if meta == host_signature() and len(blob) > 4 + n else None


def kernel(saved: bytes | None = None) -> HashedColumnsKernel:
    """The process's kernel, compiled at its first request, or mapped from ``saved`` (an
    :meth:`HashedColumnsKernel.artifact` of this host) where that is the first."""
    global _kernel
    with _lock:
        if _kernel is None:
            code = _saved_code(saved) if saved else None
            if code is not None:
                try:
                    _kernel = HashedColumnsKernel(code)
                except Exception:  # noqa: BLE001 - code that does not map: compiled instead
                    _kernel = None
            if _kernel is None:
                _kernel = HashedColumnsKernel()
        return _kernel

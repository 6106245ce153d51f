"""The CPU's kernel of computed columns (CatBoost's CTRs and one-hot tests over categories known
by hash): functions in LLVM IR, compiled once a process, that read a model's combinations as
the flat arrays of :mod:`silvanforge.inputs.hashed_rows` (the model is data, so no model is
compiled).

``hashed_columns_f32(args, row_begin, row_end)`` (and ``_f64``, for rows of float64) fills,
for rows ``[row_begin, row_end)``, every computed column of the row array.  For each *chain*
(an element list several columns share) it mixes the row's key element by element with
CatBoost's ``CalcHash(key, value) = M * (key + M * value)`` (64-bit, wrapping), the value being
the row's category hash sign-extended (``cat``), ``x > border`` of the float32 input with NaN
as the element says (``float``), or whether the hash is the element's (``onehot``); finds the
key in the chain's cuckoo table (a key in one of its two slots, :data:`WAYS`; an empty slot
answers the unknown index); and writes each of the chain's columns' answer for that slot (the last answer: a key
not found, or a row missing a category the key hashes).  Rows go in blocks of :data:`BLOCK`, a
chain at a time over a block and an element at a time over its rows (loops LLVM vectorises:
hashes and floats come transposed, a column's values contiguous), so a chain's table stays in
cache for the block.  ``args`` is the int64 block of :data:`ARG_LAYOUT`.
"""

from __future__ import annotations

import ctypes
import threading

import llvmlite.binding as llvm
import llvmlite.ir as ir

from .llvm_host import optimise
from .treeshap import _Vars

i1, i8, i32, i64, f32, f64 = (ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType(),
                              ir.DoubleType())

# The args block, in order: (name, element type of the array it points to, or None: a count).
# ``rows`` points to the row array of the function's dtype.
ARG_LAYOUT = (
    ("rows", i8), ("row_stride", None), ("column_stride", None),  # the row array (elements' strides)
    ("hashes", i64), ("hash_stride", None),  # (columns, hash_stride): sign-extended hashes, >= 2**31: none
    ("floats", f32), ("float_stride", None),  # (columns, float_stride): the inputs as float32
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
)
ARG_INDEX = {name: k for k, (name, _) in enumerate(ARG_LAYOUT)}
CAT, FLOAT, ONEHOT = 0, 1, 2
MAGIC = 0x4906BA494954CB65
# Rows a block (see the module docstring).
BLOCK = 256
# A key's two slots in a table of 2**(64 - shift): ((k ^ k >> fold) * multiplier) >> shift.
WAYS = ((32, 0x9E3779B97F4A7C15), (29, 0xC2B2AE3D27D4EB4F))


def _function(module, name: str, row_type) -> None:
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64.as_pointer(), i64, i64]), name)
    args, row_begin, row_end = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    v = _Vars(fn, b)
    c64 = lambda k: ir.Constant(i64, k)  # noqa: E731
    A = {}
    for k, (arg, ty) in enumerate(ARG_LAYOUT):
        word = b.load(b.gep(args, [c64(k)]), name=arg)
        A[arg] = word if ty is None else b.inttoptr(word, (row_type if arg == "rows" else ty).as_pointer(), name=arg)

    def at(arg, index):
        return b.load(b.gep(A[arg], [index]))

    with b.goto_entry_block():
        keys = b.alloca(ir.ArrayType(i64, BLOCK), name="keys")
        oks = b.alloca(ir.ArrayType(i8, BLOCK), name="oks")
        slots = b.alloca(ir.ArrayType(i64, BLOCK), name="slots")

    def cell(array, r):
        return b.gep(array, [c64(0), r])

    def mix(key, value):
        magic = c64(MAGIC)
        return b.mul(magic, b.add(key, b.mul(magic, value)))

    one = c64(1)
    blocks = b.udiv(b.add(b.sub(row_end, row_begin), c64(BLOCK - 1)), c64(BLOCK))
    with v.loop(c64(0), blocks, "block") as block:
        lo = b.add(row_begin, b.mul(block, c64(BLOCK)))
        end = b.add(lo, c64(BLOCK))
        m = b.sub(b.select(b.icmp_signed("<", end, row_end), end, row_end), lo)  # the block's rows
        with v.loop(c64(0), A["chains"], "chain") as c:
            with v.loop(c64(0), m, "r0") as r:
                b.store(c64(0), cell(keys, r))
                b.store(ir.Constant(i8, 1), cell(oks, r))
            with v.loop(at("chain_elements", c), at("chain_elements", b.add(c, one)), "e") as e:
                kind = at("element_kind", e)
                column = b.sext(at("element_column", e), i64)
                cat, other, flt, onehot, mixed = (b.append_basic_block(n) for n in
                                                  ("cat", "other", "float", "onehot", "mixed"))
                hcol = b.gep(A["hashes"], [b.add(b.mul(column, A["hash_stride"]), lo)])
                b.cbranch(b.icmp_unsigned("==", kind, ir.Constant(i8, CAT)), cat, other)
                b.position_at_end(other)
                b.cbranch(b.icmp_unsigned("==", kind, ir.Constant(i8, FLOAT)), flt, onehot)
                b.position_at_end(cat)
                with v.loop(c64(0), m, "rc") as r:
                    h = b.load(b.gep(hcol, [r]))
                    present = b.zext(b.icmp_signed("<", h, c64(1 << 31)), i8)
                    b.store(b.and_(b.load(cell(oks, r)), present), cell(oks, r))
                    b.store(mix(b.load(cell(keys, r)), h), cell(keys, r))
                b.branch(mixed)
                b.position_at_end(flt)
                border = at("element_border", e)
                nan_true = b.icmp_unsigned("!=", at("element_nan_true", e), ir.Constant(i8, 0))
                fcol = b.gep(A["floats"], [b.add(b.mul(column, A["float_stride"]), lo)])
                with v.loop(c64(0), m, "rf") as r:
                    x = b.load(b.gep(fcol, [r]))
                    bit = b.or_(b.fcmp_ordered(">", x, border), b.and_(b.fcmp_unordered("uno", x, x), nan_true))
                    b.store(mix(b.load(cell(keys, r)), b.zext(bit, i64)), cell(keys, r))
                b.branch(mixed)
                b.position_at_end(onehot)
                value = at("element_hash", e)
                with v.loop(c64(0), m, "ro") as r:
                    h = b.load(b.gep(hcol, [r]))
                    b.store(mix(b.load(cell(keys, r)), b.zext(b.icmp_signed("==", h, value), i64)), cell(keys, r))
                b.branch(mixed)
                b.position_at_end(mixed)
            # each row's key looked up: its answer index, or the chain's unknown one.  A key
            # lies in one of its two slots (a cuckoo table), and an empty slot answers the
            # unknown index: two compares and selects, no branch.
            base = b.gep(A["slot_key"], [at("chain_table", c)])
            answers_at = b.gep(A["slot_answer"], [at("chain_table", c)])
            shift = at("chain_shift", c)
            unknown = at("chain_unknown", c)
            with v.loop(c64(0), m, "rl") as r:
                k = b.load(cell(keys, r))
                answer = unknown
                for way, (fold, multiplier) in enumerate(WAYS):
                    s = b.lshr(b.mul(b.xor(k, b.lshr(k, c64(fold))), c64(multiplier)), shift)
                    hit = b.icmp_unsigned("==", b.load(b.gep(base, [s])), k)
                    answer = b.select(hit, b.sext(b.load(b.gep(answers_at, [s])), i64), answer)
                present = b.icmp_unsigned("!=", b.load(cell(oks, r)), ir.Constant(i8, 0))
                b.store(b.select(present, answer, unknown), cell(slots, r))
            # the chain's columns
            with v.loop(at("chain_columns", c), at("chain_columns", b.add(c, one)), "j") as j:
                answers = b.gep(A["answers"], [at("column_answers", j)])
                out = b.gep(A["rows"], [b.add(b.mul(lo, A["row_stride"]), b.mul(at("column_out", j), A["column_stride"]))])
                with v.loop(c64(0), m, "rw") as r:
                    value = b.load(b.gep(answers, [b.load(cell(slots, r))]))
                    if row_type is not f64:
                        value = b.fptrunc(value, row_type)
                    b.store(value, b.gep(out, [b.mul(r, A["row_stride"])]))
    b.ret_void()


def build_ir() -> str:
    """The kernel's LLVM IR (see the module docstring): one function for rows of float32, one
    for float64."""
    module = ir.Module("hashed_columns")
    _function(module, "hashed_columns_f32", f32)
    _function(module, "hashed_columns_f64", f64)
    return str(module)


_lock = threading.Lock()
_kernel = None


class HashedColumnsKernel:
    """The compiled kernel (one a process): :meth:`run` calls it through ctypes, which releases
    the GIL, so threads may run their rows in parallel."""

    arg_layout = tuple(name for name, _ in ARG_LAYOUT)
    ways = WAYS
    kinds = {"cat": CAT, "float": FLOAT, "onehot": ONEHOT}

    def __init__(self):
        mod, tm = optimise(build_ir())
        self._engine = llvm.create_mcjit_compiler(mod, tm)
        self._engine.finalize_object()
        kind = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
        self._fns = {size: kind(self._engine.get_function_address(f"hashed_columns_f{8 * size}")) for size in (4, 8)}

    def run(self, args: int, row_begin: int, row_end: int, row_bytes: int = 8) -> None:
        """One call over rows ``[row_begin, row_end)`` of a row array of float32 (``row_bytes``
        4) or float64 (8); ``args``: the address of the block."""
        self._fns[row_bytes](args, row_begin, row_end)


def kernel() -> HashedColumnsKernel:
    """The process's kernel, compiled at its first request."""
    global _kernel
    with _lock:
        if _kernel is None:
            _kernel = HashedColumnsKernel()
        return _kernel

"""LIR -> LLVM IR with llvmlite's IR builder.

The generated function is::

    void predict(T *rows, i64 row_stride, i64 col_stride, i64 row_begin, i64 row_end,
                 A *margins, i8 **model_buffers)

Model buffers arrive as one array of pointers (in ``Module.model_buffers()`` order) so the
model's data never becomes LLVM constants: compile time stays independent of model size.
Mutable LIR locals become allocas in the entry block, which ``mem2reg``/SROA at O3 promote.
"""

from __future__ import annotations

import functools

from llvmlite import ir

from silvanforge.ir import lir

from . import blends, cpus, irlines, transpose
from .llvm_host import host_has_avx512

_INT_BITS = {"i1": 1, "i8": 8, "u8": 8, "i16": 16, "u16": 16, "i32": 32, "u32": 32, "i64": 64}
_UNSIGNED = {"u8", "u16", "u32", "i1"}


@functools.cache  # (asked for every value generated: tens of thousands a form)
def llvm_type(t: str) -> ir.Type:
    if lir.lanes_of(t) > 1:
        return ir.VectorType(llvm_type(lir.element_type(t)), lir.lanes_of(t))
    if t == "f32":
        return ir.FloatType()
    if t == "f64":
        return ir.DoubleType()
    return ir.IntType(_INT_BITS[t])


def is_float(t: str) -> bool:
    return lir.element_type(t) in lir.FLOAT_TYPES


def is_unsigned(t: str) -> bool:
    return lir.element_type(t) in _UNSIGNED


class _Splat(ir.Constant):
    """A vector constant with one value in every lane, printed ``splat (T v)`` (LLVM 19+): a
    fraction of the text of the lane-by-lane form, which expanded kernels hold thousands of."""

    def __init__(self, typ: ir.VectorType, value):
        super().__init__(typ, None)
        self._lane = ir.Constant(typ.element, value)

    def get_reference(self) -> str:
        return f"splat ({self._lane})"

    def _to_string(self) -> str:
        return f"{self.type} {self.get_reference()}"


class LLVMCodegen:
    """Generates one LLVM function per LIR function (phase) into one LLVM module."""

    def __init__(self, module: lir.Module, permutes: bool = False, byte_permutes: bool = False,
                 avx2_permutes: bool = False, byte_shuffle_bits: int = 0, neon: bool = False):
        """``permutes``: the CPU has AVX-512, whose register permutes do :class:`lir.Lookup`
        (``byte_permutes``: of bytes too, AVX-512 VBMI); else ``avx2_permutes``: it has AVX2,
        whose 8-lane permutes do lookups of 4-byte elements in small tables.
        ``byte_shuffle_bits``: where byte lookups have no VBMI permute, the width of the
        ``vpshufb`` that does them (512: AVX-512BW, 256: AVX2; 0: none, a gather).  ``neon``:
        AArch64 code, whose ``tbl`` looks bytes up in tables of up to 64 (four registers)."""
        self.lmod = module
        self.permutes, self.byte_permutes = permutes, byte_permutes
        self.avx2_permutes = avx2_permutes and not permutes
        self.byte_shuffle_lanes = 0 if byte_permutes else byte_shuffle_bits // 8
        self.neon = neon
        self._transposes = transpose.Columns() if (self.avx2_permutes or permutes) and transpose.BUILT_HERE else None
        self.mod = ir.Module(name="silvanforge")
        self._prefetch = None
        self._gathers: dict[str, ir.Function] = {}
        # Constants by type and value, each made and printed once: an expanded form's nodes
        # repeat a few hundred thresholds and masks thousands of times.
        self._constants: dict[tuple, ir.Constant] = {}

    def generate(self) -> ir.Module:
        for fn in self.lmod.functions:
            self._function(fn)
        return self.mod

    def _function(self, lfn: lir.Function) -> None:
        module = self.lmod
        ptr = lambda t: ir.PointerType(llvm_type(t))  # noqa: E731
        i8pp = ir.PointerType(ir.PointerType(ir.IntType(8)))
        i64 = ir.IntType(64)
        scalars = [i64] * len(lir.SCALAR_PARAMS)
        fnty = ir.FunctionType(ir.VoidType(), [ptr(module.input_type), *scalars,
                                              ptr(module.output_type), i8pp])
        self.fn = ir.Function(self.mod, fnty, name=lfn.name)
        n = len(lir.SCALAR_PARAMS)
        rows_arg, margins_arg, table_arg = self.fn.args[0], self.fn.args[n + 1], self.fn.args[n + 2]
        for arg in (rows_arg, margins_arg, table_arg):
            arg.add_attribute("noalias")
        entry = self.fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)
        body = self.fn.append_basic_block("body")
        self.b = ir.IRBuilder(body)
        names = [p.name for p in lir.SCALAR_PARAMS]
        self.scalars = dict(zip(names, self.fn.args[1:n + 1]))
        self.ptrs = {"rows": rows_arg, "margins": margins_arg}
        for i, buf in enumerate(module.table_buffers()):
            raw = self.alloca_builder.load(self.alloca_builder.gep(table_arg, [ir.Constant(i64, i)]))
            self.ptrs[buf.name] = self.alloca_builder.bitcast(raw, ptr(buf.type), name=buf.name)
        for buf in module.local_buffers():
            arr = self.alloca_builder.alloca(llvm_type(buf.type), size=ir.Constant(i64, buf.size),
                                             name=buf.name)
            arr.align = 64  # vector loads and stores of whole cache lines
            self.ptrs[buf.name] = arr
        self.vars: dict[str, ir.Value] = {}
        # Within one basic block a local's value is kept as a value, stored to its slot only
        # before control flow: straight-line code (expanded bitvector trees: thousands of
        # assignments in a row) then costs a third of the instructions to build and optimise.
        self._values: dict[str, ir.Value] = {}
        self._dirty: dict[str, None] = {}  # (in assignment order: a set's follows the hash seed)
        for name, t in lfn.locals.items():
            self.vars[name] = self.alloca_builder.alloca(llvm_type(t), name=name)
        self.block(lfn.body)
        self._flush()
        self.b.ret_void()
        self.alloca_builder.branch(body)

    # ------------------------------------------------------------------ statements
    def block(self, stmts):
        for s in stmts:
            getattr(self, "s_" + type(s).__name__)(s)

    def _flush(self) -> None:
        """Store the locals assigned in this basic block; the code that follows starts another."""
        for name in self._dirty:
            self.b.store(self._values[name], self.vars[name])
        self._dirty.clear()
        self._values.clear()

    def _enter(self, block) -> None:
        self.b.position_at_end(block)
        self._values.clear()

    def s_Assign(self, s: lir.Assign):
        self._values[s.var.name] = self.expr(s.value)
        self._dirty[s.var.name] = None

    def s_Store(self, s: lir.Store):
        ptr = self.b.gep(self.ptrs[s.buffer], [self.index(s.index)])
        value = self.expr(s.value)
        if lir.lanes_of(s.value.type) > 1:  # contiguous lanes, as vector loads read them
            ptr = self.b.bitcast(ptr, ir.PointerType(value.type))
            self.b.store(value, ptr, align=lir.LIR_TO_NUMPY[lir.element_type(s.value.type)].itemsize)
            return
        self.b.store(value, ptr)

    def s_For(self, s: lir.For):
        b = self.b
        ty = llvm_type(s.var.type)
        slot = self.alloca_builder.alloca(ty, name=s.var.name)
        outer = self.vars.get(s.var.name)
        self.vars[s.var.name] = slot
        b.store(self.cast(self.expr(s.start), s.start.type, s.var.type), slot)
        stop = self.cast(self.expr(s.stop), s.stop.type, s.var.type)
        cond_bb = b.append_basic_block(f"for.{s.var.name}.cond")
        body_bb = b.append_basic_block(f"for.{s.var.name}.body")
        end_bb = b.append_basic_block(f"for.{s.var.name}.end")
        self._flush()
        b.branch(cond_bb)
        self._enter(cond_bb)
        b.cbranch(b.icmp_signed("<", b.load(slot), stop), body_bb, end_bb)
        self._enter(body_bb)
        self.block(s.body)
        self._flush()
        b.store(b.add(b.load(slot), ir.Constant(ty, s.step)), slot)
        b.branch(cond_bb)
        self._enter(end_bb)
        if outer is None:
            del self.vars[s.var.name]
        else:
            self.vars[s.var.name] = outer

    def s_While(self, s: lir.While):
        b = self.b
        cond_bb = b.append_basic_block("while.cond")
        body_bb = b.append_basic_block("while.body")
        end_bb = b.append_basic_block("while.end")
        self._flush()
        b.branch(cond_bb)
        self._enter(cond_bb)
        b.cbranch(self.expr(s.cond), body_bb, end_bb)
        self._enter(body_bb)
        self.block(s.body)
        self._flush()
        b.branch(cond_bb)
        self._enter(end_bb)

    def s_AtomicAdd(self, s: lir.AtomicAdd):
        ptr = self.b.gep(self.ptrs[s.buffer], [self.index(s.index)])
        op = "fadd" if is_float(self.lmod.buffers[s.buffer].type) else "add"
        self.b.atomic_rmw(op, ptr, self.expr(s.value), "monotonic")

    def s_Prefetch(self, s: lir.Prefetch):
        b = self.b
        if self._prefetch is None:
            i8p, i32 = ir.PointerType(ir.IntType(8)), ir.IntType(32)
            self._prefetch = ir.Function(self.mod, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                         name="llvm.prefetch.p0")
        ptr = b.bitcast(b.gep(self.ptrs[s.buffer], [self.index(s.index)]), ir.PointerType(ir.IntType(8)))
        i32 = ir.IntType(32)
        # read access, high temporal locality, data cache
        b.call(self._prefetch, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])

    def s_If(self, s: lir.If):
        b = self.b
        cond = self.expr(s.cond)
        self._flush()
        with b.if_else(cond) as (then, orelse):
            with then:
                self.block(s.then)
                self._flush()
            with orelse:
                self.block(s.orelse)
                self._flush()
        self._values.clear()

    # ------------------------------------------------------------------ expressions
    def index(self, e) -> ir.Value:
        return self.cast(self.expr(e), e.type, "i64")

    def expr(self, e) -> ir.Value:
        b = self.b
        if isinstance(e, lir.Const):
            return self.constant(e)
        if isinstance(e, lir.Vector):
            return transpose.vector(b, e, llvm_type(e.type), self.expr, self._transposes)
        if isinstance(e, lir.PackBits):
            # <N x i1> reinterpreted as iN puts lane k in bit k (x86: one movmsk).
            n = lir.lanes_of(e.a.type)
            return b.zext(b.bitcast(self.expr(e.a), ir.IntType(n)), ir.IntType(32))
        if isinstance(e, lir.Gather):
            return self.gather(e)
        if isinstance(e, lir.Lookup):
            return self.lookup(e)
        if isinstance(e, lir.Clz):
            v = self.expr(e.a)
            name = f"llvm.ctlz.{_intrinsic_suffix(v.type)}"
            fn = self._gathers.get(name)
            if fn is None:
                fn = self._gathers[name] = ir.Function(
                    self.mod, ir.FunctionType(v.type, [v.type, ir.IntType(1)]), name=name)
            return b.call(fn, [v, ir.Constant(ir.IntType(1), 0)])  # zero in: the width
        if isinstance(e, lir.Extract):
            if isinstance(e.a, lir.Load) and _word_lanes(e.a.type):
                return self._word_lane(e.a, e.lane)
            return b.extract_element(self.expr(e.a), ir.Constant(ir.IntType(32), e.lane))
        if isinstance(e, lir.Var):
            if e.name in self.scalars:
                return self.scalars[e.name]
            value = self._values.get(e.name)
            if value is None:
                value = self._values[e.name] = b.load(self.vars[e.name])
            return value
        if isinstance(e, lir.Load):
            ptr = irlines.element(b, self.ptrs[e.buffer], self.index(e.index))
            if lir.lanes_of(e.type) > 1:  # contiguous lanes, aligned as one element
                vec = irlines.bitcast(b, ptr, ir.PointerType(llvm_type(e.type)))
                return irlines.load(b, vec, lir.LIR_TO_NUMPY[lir.element_type(e.type)].itemsize)
            return irlines.load(b, ptr)
        if isinstance(e, lir.Cast):
            return self.cast(self.expr(e.a), e.a.type, e.type)
        if isinstance(e, lir.IsNan):
            v = self.expr(e.a)
            return b.fcmp_unordered("uno", v, v)
        if isinstance(e, lir.Select):
            if self.avx2_permutes and (blended := blends.bit_select(b, e, self.expr, self._intrinsic)) is not None:
                return blended
            return irlines.select(b, self.expr(e.cond), self.expr(e.a), self.expr(e.b))
        if isinstance(e, lir.Cmp):
            x, y = self.expr(e.a), self.expr(e.b)
            predicate = irlines.PREDICATE[e.op]
            if is_float(e.a.type):
                # Ordered compares (NaN -> false) except != which, as in C, is true for NaN.
                return irlines.compare(b, "fcmp", ("u" if e.op == "!=" else "o") + predicate, x, y)
            if e.op not in ("==", "!="):
                predicate = ("u" if is_unsigned(e.a.type) else "s") + predicate
            return irlines.compare(b, "icmp", predicate, x, y)
        if isinstance(e, lir.Bin):
            return self.binop(e.op, self.expr(e.a), self.expr(e.b), e.a.type)
        raise TypeError(f"cannot generate LLVM for {e!r}")

    def constant(self, e: lir.Const) -> ir.Value:
        """``e`` as an LLVM constant, one object for every use of the same type and value (its
        text made once).  Values told apart as printed: 0.0 and -0.0 are two; NaNs, whose
        payloads print, are not kept."""
        key = (e.type, type(e.value), repr(e.value))
        value = self._constants.get(key)
        if value is None:  # (a splat: the value in every lane)
            value = (_Splat if lir.lanes_of(e.type) > 1 else ir.Constant)(llvm_type(e.type), e.value)
            if e.value == e.value:
                self._constants[key] = value
        return value

    def gather(self, e: lir.Gather) -> ir.Value:
        """``llvm.masked.gather`` with every lane on: one vector of addresses (a GEP of the
        buffer with a vector index), which the backend turns into ``vgather`` where the target
        has it (x86 AVX2, AVX-512) and into scalar loads elsewhere.

        Model buffers hold fewer than 2**31 elements, so their indices are gathered as ``i32``
        (x86: one 8-lane ``vpgatherdd``).  Elements narrower than 4 bytes (feature indices,
        flags, child offsets) have no gather of their own: the 4-byte word starting at the
        element is gathered and truncated; the kernel pads every model buffer so the word's
        last bytes stay inside it (``jit.GATHER_PAD``)."""
        b, n = self.b, lir.lanes_of(e.type)
        et = lir.element_type(e.type)
        size = lir.LIR_TO_NUMPY[et].itemsize
        buf = self.lmod.buffers[e.buffer]
        base = self.ptrs[e.buffer]
        if buf.kind == "model":
            idx = self.cast(self.expr(e.index), e.index.type, lir.vector_type("i32", n))
            if size < 4:
                i8p = ir.PointerType(ir.IntType(8))
                offset = b.mul(idx, ir.Constant(ir.VectorType(ir.IntType(32), n), [size] * n))
                ptrs = self._vector_gep(b.bitcast(base, i8p), offset, n)
                word = self._masked_gather(b.bitcast(ptrs, ir.VectorType(ir.PointerType(ir.IntType(32)), n)),
                                           ir.IntType(32), n, 1)
                return b.trunc(word, llvm_type(e.type))
        else:
            idx = self.cast(self.expr(e.index), e.index.type, lir.vector_type("i64", n))
        return self._masked_gather(self._vector_gep(base, idx, n), llvm_type(et), n, size)

    def lookup(self, e: lir.Lookup) -> ir.Value:
        """A table lookup: with AVX-512 and 512-bit vectors, the table's vectors loaded and each
        pair permuted by ``vpermi2ps``/``vpermi2pd`` (one vector by ``vpermps``), the pairs
        then picked by the index's higher bits; otherwise a gather at ``at + index``."""
        b, n = self.b, lir.lanes_of(e.type)
        et = lir.element_type(e.type)
        size = lir.LIR_TO_NUMPY[et].itemsize
        if self.avx2_permutes and et in _AVX2_PERMUTE and n % 8 == 0 and e.size <= AVX2_TABLE_MAX:
            return self._avx2_lookup(e, n, et)
        if self.neon and n % (16 // size) == 0 and size in (1, 4) and e.size * size <= NEON_TABLE_BYTES \
                and lir.element_type(e.index.type) in ("i8", "u8", "i32", "u32", "i64", "u64", "i16", "u16"):
            return self._neon_lookup(e, n, size)
        width = self.byte_shuffle_lanes
        if width and et in ("i8", "u8") and n % width == 0 and e.size <= AVX2_BYTE_TABLE_MAX:
            return self._shuffle_byte_lookup(e, n, width)
        if not (self.permutes and n * size == 64 and et in _PERMUTE_SUFFIX and e.size <= 8 * n
                and (size > 1 or self.byte_permutes)):
            at = lir.broadcast(e.at, n) if lir.lanes_of(e.at.type) == 1 else e.at
            index = lir.Cast(e.index, lir.vector_type("i64", n)) if e.index.type != lir.vector_type("i64", n) else e.index
            return self.gather(lir.Gather(e.buffer, lir.Bin("+", at, index), e.type))
        vt = llvm_type(e.type)
        it = ir.VectorType(ir.IntType(8 * size), n)
        index = self.cast(self.expr(e.index), e.index.type, lir.vector_type(f"i{8 * size}", n))
        base = b.gep(self.ptrs[e.buffer], [self.index(e.at)])
        tables = [b.load(b.bitcast(b.gep(base, [ir.Constant(ir.IntType(64), k * n)]), ir.PointerType(vt)),
                         align=size) for k in range(max(1, e.size // n))]
        suffix = _PERMUTE_SUFFIX[et]
        if len(tables) == 1:
            return b.call(self._intrinsic(f"llvm.x86.avx512.permvar.{suffix[0]}.512", vt, [vt, it]),
                          [tables[0], index])
        pick = self._intrinsic(f"llvm.x86.avx512.vpermi2var.{suffix[1]}.512", vt, [vt, it, vt])
        values = [b.call(pick, [tables[k], index, tables[k + 1]]) for k in range(0, len(tables), 2)]
        bit = 2 * n  # the pairs by the index's bits above a pair's
        while len(values) > 1:
            high = b.icmp_unsigned("!=", b.and_(index, ir.Constant(it, [bit] * n)), ir.Constant(it, [0] * n))
            values = [b.select(high, values[k + 1], values[k]) for k in range(0, len(values), 2)]
            bit *= 2
        return values[0]

    def _avx2_lookup(self, e: lir.Lookup, n: int, et: str) -> ir.Value:
        """A lookup of 4-byte elements on AVX2 (no AVX-512): the table's 8-element chunks, each
        8 lanes of the index permuted through every chunk by ``vpermps``/``vpermd`` (its low
        three bits), the chunks then picked by the index's higher bits.  Why: LLVM lowers the
        gather otherwise used to ``vgatherdps``, slower on AVX2 CPUs (Zen 2-4, Intel client
        cores) for the small tables the levelwise form searches (docs/benchmarks.md, "AVX2-only
        CPUs")."""
        v8 = ir.VectorType(llvm_type(et), 8)
        perm = self._intrinsic(_AVX2_PERMUTE[et], v8, [v8, ir.VectorType(ir.IntType(32), 8)])
        index = self.cast(self.expr(e.index), e.index.type, lir.vector_type("i32", n))
        return self._chunked_lookup(e, index, 8, lambda chunk: chunk, lambda table, part: self.b.call(perm, [table, part]))

    def _shuffle_byte_lookup(self, e: lir.Lookup, n: int, width: int) -> ir.Value:
        """A lookup of bytes without AVX-512 VBMI (AVX2; AVX-512 before Ice Lake, such as
        Skylake-SP and Cascade Lake servers): the table's 16-byte chunks, each copied into every
        128-bit lane, looked up ``width`` lanes at a time by ``vpshufb`` (32 lanes: AVX2's; 64:
        AVX-512BW's; the index's low four bits; indices below 128 never set the bit that
        zeroes), the chunks picked by the higher bits.  Why: the gather otherwise used reads a
        4-byte word a lane (eight ``vpgatherdd`` for 64 lanes): the levelwise form's node
        lookups ran 6x slower than with VBMI's ``vpermb`` on AVX2 code, 4-6x on Skylake-SP code
        (docs/benchmarks.md, "AVX2-only CPUs")."""
        b = self.b
        v16, vw = ir.VectorType(ir.IntType(8), 16), ir.VectorType(ir.IntType(8), width)
        name = "llvm.x86.avx2.pshuf.b" if width == 32 else "llvm.x86.avx512.pshuf.b.512"
        shuffle = self._intrinsic(name, vw, [vw, vw])
        every = ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(16)) * (width // 16))
        low = ir.Constant(vw, [15] * width)
        index = self.cast(self.expr(e.index), e.index.type, lir.vector_type(lir.element_type(e.type), n))
        return self._chunked_lookup(
            e, index, width, lambda chunk: b.shuffle_vector(chunk, ir.Constant(v16, None), every),
            lambda table, part: b.call(shuffle, [table, b.and_(part, low)]), chunk=16)

    def _neon_lookup(self, e: lir.Lookup, n: int, size: int) -> ir.Value:
        """A lookup on AArch64 by NEON's ``tbl``: the table's bytes in 16-byte registers, four a
        ``tbl`` (64 bytes), a register of byte indices a call; ``tbl`` gives 0 where an index is
        past its tables, so a table of 128 bytes is two calls ORed, the second's indices less
        64 (those below wrap past 191).  Elements of 4 bytes look up their four bytes: lane
        ``k``'s byte ``j`` at ``4 index_k + j``.  Why: LLVM lowers the gather otherwise used to
        a scalar load a lane on NEON (no gathers before SVE)."""
        b = self.b
        i8, i32 = ir.IntType(8), ir.IntType(32)
        v16 = ir.VectorType(i8, 16)
        per = 16 // size  # lanes a register of bytes answers
        base = b.bitcast(b.gep(self.ptrs[e.buffer], [self.index(e.at)]), ir.PointerType(i8))
        count = -(-e.size * size // 16)
        # A table smaller than a register reads past its end, within the buffer (as every
        # lookup's padding allows); its indices never reach the bytes past it.
        tables = [b.load(b.bitcast(b.gep(base, [ir.Constant(ir.IntType(64), 16 * k)]), ir.PointerType(v16)), align=1)
                  for k in range(count)]
        it = lir.vector_type("i32" if size == 4 else "u8", n)
        index = self.cast(self.expr(e.index), e.index.type, it)
        parts = []
        for h in range(n // per):
            part = b.shuffle_vector(index, ir.Constant(index.type, None),
                                    ir.Constant(ir.VectorType(i32, per), list(range(per * h, per * h + per))))
            if size == 4:  # byte j of lane k: 4 index + j, as bytes
                v4 = ir.VectorType(i32, 4)
                word = b.mul(b.shl(part, ir.Constant(v4, [2] * 4)), ir.Constant(v4, [0x01010101] * 4))
                part = b.bitcast(b.add(word, ir.Constant(v4, [0x03020100] * 4)), v16)
            got = None
            for g in range(0, count, 4):
                group = tables[g:g + 4]
                name = f"llvm.aarch64.neon.tbl{len(group)}.v16i8"
                tbl = self._intrinsic(name, v16, [v16] * (len(group) + 1))
                at = part if g == 0 else b.sub(part, ir.Constant(v16, [16 * g] * 16))
                value = b.call(tbl, group + [at])
                got = value if got is None else b.or_(got, value)
            parts.append(b.bitcast(got, ir.VectorType(llvm_type(lir.element_type(e.type)), per)))
        while len(parts) > 1:  # join neighbours: 4 + 4 -> 8, ...
            m = parts[0].type.count
            mask = ir.Constant(ir.VectorType(i32, 2 * m), list(range(2 * m)))
            parts = [b.shuffle_vector(parts[k], parts[k + 1], mask) for k in range(0, len(parts), 2)]
        return parts[0]

    def _chunked_lookup(self, e: lir.Lookup, index, lanes: int, widen, permute, chunk: int | None = None):
        """The AVX2 lookups' common part: the table loaded in chunks of ``chunk`` elements
        (default ``lanes``), each made a register by ``widen``; every ``lanes`` lanes of
        ``index`` looked up in each chunk by ``permute(table, lanes_of_index)``, the chunk picked
        by the index's bits above a chunk's, and the parts joined back to the index's width.  A
        table smaller than a chunk reads past its end, within the buffer, as the AVX-512 path
        does."""
        b = self.b
        chunk = chunk or lanes
        n = index.type.count
        elem = index.type.element
        base = b.gep(self.ptrs[e.buffer], [self.index(e.at)])
        count = 1
        while count * chunk < e.size:
            count *= 2
        vt = ir.VectorType(llvm_type(lir.element_type(e.type)), chunk)
        tables = [widen(b.load(b.bitcast(b.gep(base, [ir.Constant(ir.IntType(64), chunk * k)]), ir.PointerType(vt)),
                               align=lir.LIR_TO_NUMPY[lir.element_type(e.type)].itemsize)) for k in range(count)]
        pick = ir.VectorType(elem, lanes)
        parts = []
        for h in range(n // lanes):
            part = b.shuffle_vector(index, ir.Constant(index.type, None),
                                    ir.Constant(ir.VectorType(ir.IntType(32), lanes), list(range(lanes * h, lanes * h + lanes))))
            values = [permute(t, part) for t in tables]
            bit = chunk
            while len(values) > 1:
                if self.avx2_permutes and elem == ir.IntType(8) and blends.takes(lanes, bit):
                    values = blends.pairs(b, part, bit, values, self._intrinsic)
                else:
                    high = b.icmp_unsigned("!=", b.and_(part, ir.Constant(pick, [bit] * lanes)), ir.Constant(pick, [0] * lanes))
                    values = [b.select(high, values[k + 1], values[k]) for k in range(0, len(values), 2)]
                bit *= 2
            parts.append(values[0])
        while len(parts) > 1:  # join neighbours: 8 + 8 -> 16, ...
            m = parts[0].type.count
            mask = ir.Constant(ir.VectorType(ir.IntType(32), 2 * m), list(range(2 * m)))
            parts = [b.shuffle_vector(parts[k], parts[k + 1], mask) for k in range(0, len(parts), 2)]
        return parts[0]

    def _intrinsic(self, name: str, result: ir.Type, args: list) -> ir.Function:
        fn = self._gathers.get(name)
        if fn is None:
            fn = self._gathers[name] = ir.Function(self.mod, ir.FunctionType(result, args), name=name)
        return fn

    def _vector_gep(self, base, idx, n):
        gep = self.b.gep(base, [ir.Constant(ir.IntType(64), 0)], inbounds=True)
        # llvmlite types a GEP by scalar indices only: give the vector GEP its vector type.
        gep.operands[1] = idx
        gep.indices = [idx]
        gep.type = ir.VectorType(base.type, n)
        return gep

    def _masked_gather(self, ptrs, elem, n, align):
        bits = {ir.FloatType: "f32", ir.DoubleType: "f64"}.get(type(elem)) or f"i{elem.width}"
        name = f"llvm.masked.gather.v{n}{bits}.v{n}p0"
        fn = self._gathers.get(name)
        if fn is None:
            fnty = ir.FunctionType(ir.VectorType(elem, n), [
                ptrs.type, ir.IntType(32), ir.VectorType(ir.IntType(1), n), ir.VectorType(elem, n)])
            fn = self._gathers[name] = ir.Function(self.mod, fnty, name=name)
        mask = ir.Constant(ir.VectorType(ir.IntType(1), n), [1] * n)
        return self.b.call(fn, [ptrs, ir.Constant(ir.IntType(32), align), mask,
                                ir.Constant(ir.VectorType(elem, n), ir.Undefined)])

    def binop(self, op, x, y, t):
        b = self.b
        if op in ("min", "max"):
            kind, sign = ("fcmp", "o") if is_float(t) else ("icmp", "u" if is_unsigned(t) else "s")
            less = irlines.compare(b, kind, sign + irlines.PREDICATE["<" if op == "min" else ">"], x, y)
            return irlines.select(b, less, x, y)
        if is_float(t):
            return irlines.arithmetic(b, irlines.FLOAT_OPS[op], x, y)
        name = irlines.INT_OPS.get(op) or irlines.INT_OPS[op, is_unsigned(t)]
        return irlines.arithmetic(b, name, x, y)

    def _word_lane(self, load: lir.Load, lane: int):
        """Lane ``lane`` of a small integer vector in memory (:func:`_word_lanes`) read as one
        integer load and a shift: LLVM keeps the wide load (GVN shares it between the lanes)
        and takes each lane with an ALU instruction, where a vector load's lanes become a
        narrow load each.  Loads go three a cycle on Zen 4, ALU instructions four: the
        oblivious program's leaf sums read a byte index a lane and row."""
        b = self.b
        bits = _INT_BITS[lir.element_type(load.type)]
        word = ir.IntType(bits * lir.lanes_of(load.type))
        ptr = b.gep(self.ptrs[load.buffer], [self.index(load.index)])
        value = b.load(b.bitcast(ptr, ir.PointerType(word)), align=bits // 8)
        if lane:
            value = b.lshr(value, ir.Constant(word, bits * lane))
        return b.trunc(value, ir.IntType(bits))

    def cast(self, v, src: str, dst: str):
        if src == dst:
            return v
        b, to = self.b, llvm_type(dst)
        if is_float(src) and is_float(dst):
            return b.fpext(v, to) if lir.element_type(dst) == "f64" else b.fptrunc(v, to)
        if is_float(src):
            return b.fptoui(v, to) if is_unsigned(dst) else b.fptosi(v, to)
        if is_float(dst):
            return b.uitofp(v, to) if is_unsigned(src) else b.sitofp(v, to)
        sb, db = _INT_BITS[lir.element_type(src)], _INT_BITS[lir.element_type(dst)]
        if sb == db:
            return v
        if sb > db:
            return b.trunc(v, to)
        return b.zext(v, to) if is_unsigned(src) else b.sext(v, to)


def _word_lanes(t: str) -> bool:
    """Whether a vector of type ``t`` in memory has its lanes read from one integer load
    (:meth:`LLVMCodegen._word_lane`): integer lanes, 64 bits in all at most (little-endian
    hosts: lane 0 in the low bits)."""
    lanes, element = lir.lanes_of(t), lir.element_type(t)
    return lanes > 1 and element in _INT_BITS and element != "i1" and _INT_BITS[element] * lanes <= 64


def _intrinsic_suffix(t: ir.Type) -> str:
    """LLVM's overload suffix of an integer or integer-vector type: ``i64``, ``v8i64``."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}i{t.element.width}"
    return f"i{t.width}"


# LLVM's AVX-512 permutes by element type: (one table, two tables).  Bytes need AVX-512 VBMI
# (``vpermb``, ``vpermi2b``: Ice Lake, Zen 4 and later).
_PERMUTE_SUFFIX = {"f32": ("sf", "ps"), "i32": ("si", "d"), "u32": ("si", "d"), "f64": ("df", "pd"),
                   "i64": ("di", "q"), "i8": ("qi", "qi"), "u8": ("qi", "qi")}


# AVX2's 8-lane permutes of 4-byte elements, and the largest table they look up in (chunks of 8
# picked by selects past it; a gather beyond).
_AVX2_PERMUTE = {"f32": "llvm.x86.avx2.permps", "i32": "llvm.x86.avx2.permd", "u32": "llvm.x86.avx2.permd"}
AVX2_TABLE_MAX = 32
# Byte tables looked up by vpshufb, 16 a chunk (the levelwise form's node tables: 128 at most).
AVX2_BYTE_TABLE_MAX = 128
# Tables NEON's tbl looks up (two calls of four 16-byte registers; 32 float32, 128 bytes).
NEON_TABLE_BYTES = 128


def generate(module: lir.Module, permutes: bool | None = None, cpu: str | None = None) -> ir.Module:
    """``module`` as LLVM IR for ``cpu`` (None: the host; else a name :mod:`.cpus` knows);
    ``permutes``: use AVX-512 permutes for lookups (None: where that CPU has AVX-512; of bytes
    where it has VBMI too).  The CPU the code is for decides, not the host that builds it: code
    built here for a fleet must not use instructions its CPU lacks."""
    if permutes is None:
        permutes = host_has_avx512(cpu=cpu)
    shuffle_bits = 512 if permutes and cpus.has(cpu, "avx512bw") else 256 if cpus.has(cpu, "avx2") else 0
    return LLVMCodegen(module, permutes, permutes and host_has_avx512("avx512vbmi", cpu),
                       avx2_permutes=cpus.has(cpu, "avx2"), byte_shuffle_bits=shuffle_bits,
                       neon=cpus.triple(cpu).startswith(("aarch64", "arm64"))).generate()

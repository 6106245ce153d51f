"""The CPU's SHAP contributions kernel: one function in LLVM IR, compiled once a process, that
evaluates path-dependent TreeSHAP over the flat arrays :mod:`silvanforge.runtime.shap_arrays`
builds for a model (the model's paths and tables are data, so no model is compiled).

``treeshap(args, X, row_begin, row_end, tree_begin, tree_end, phi, scratch)`` adds, for rows
``[row_begin, row_end)`` and trees ``[tree_begin, tree_end)``, every leaf path's share to each
feature of ``phi`` (rows of ``outputs * (features + 1)`` float64, the bias column left alone);
``args`` is the int64 block of the arrays of :mod:`silvanforge.runtime.shap_arrays` in the order
of :data:`ARG_LAYOUT` (their addresses and a few counts).  Trees are the outer loop, then a tree's paths, then the call's
rows, so a path's tables and values are read once for the rows of a call.

Each row first decides every split of a tree once, into ``scratch`` (a byte a split: the
paths meet each split twice, once a side), each from its one packed record, without branches
(a categorical split's set a bit a category), so the decisions of a tree overlap their reads.
The paths of a tree come in the order a depth-first walk meets their leaves; a path shares its
first ``prefix`` nodes with the one before, so each row keeps its pattern (bit ``i``: whether it
follows the path at the path's ``i``-th distinct feature) per depth and reads only the
decisions of the nodes past the prefix.  A symmetric tree with a table by leaf (``tree_levels``
above 0) is read instead as the row's leaf (one decision a level) and that leaf's row of the
table.

A split's decision is the HIR's rule (:func:`silvanforge.runtime.reference.goes_left`): a missing value (NaN, or near zero where the node
counts zero as missing) takes the default direction, a categorical node tests membership of the
value's category (by the forest's category rule), others compare in float64, which orders the
model's float32 values and thresholds exactly as float32 does.  A tabled path then reads its
shares from its pattern table (``(1 - z_j) / z_j * U(s - {j})`` or ``-U(s)``): a table kept
with the model (read by calls of ``KEPT_TABLE_ROWS`` rows or more: one row's reads miss the
cache more than its integral costs), or one the call makes for its rows (a path past the
budget, in calls of ``MADE_TABLE_ROWS`` rows or more).  The others integrate
``prod_{i != j} (z_i (1 - t) + o_i t)`` over ``[0, 1]`` by Gauss-Legendre, exact for its degree
(the Shapley weights are the Beta integrals of that polynomial's terms), every ``j`` from one
forward and one backward product a point: unrolled, its points constants, for paths of up to
``UNROLLED_D`` features (a loop for longer ones).

``leaf_table(...)`` is a second function: a symmetric tree's table by leaf, made once a model
(:func:`_build_leaf_table`).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

import llvmlite.binding as llvm
import numpy as np
import llvmlite.ir as ir

from .llvm_host import optimise

i1, i8, i32, i64, f64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.DoubleType()

# The args block, in order: (name, element type of the array it points to, or None: a count).
ARG_LAYOUT = (
    ("row_stride", None), ("phi_stride", None),
    ("tree_paths", i64),  # (trees + 1,): each tree's first path
    ("path_nodes", i64),  # (paths + 1,): each path's first entry in ``step``
    ("prefix", i32),  # (paths,): nodes shared with the path before (same tree)
    ("step", i32),  # each node past the prefix: its split in the tree << 8 | goes left << 7 | feature slot
    ("depth", i32),  # (paths,): distinct features d
    ("path_features", i64),  # (paths,): first of the path's d entries in ``feature``, ``zero``, ``ratio``
    ("feature", i32), ("zero", f64), ("ratio", f64),
    # (paths,): the path's pattern table in ``table``; -2: none kept, made by a call of
    # MADE_TABLE_ROWS rows or more (into scratch); -1: none (a zero fraction, or too many features)
    ("table_at", i64),
    ("table", f64),
    ("path_values", i64),  # (paths + 1,): each path's first (column, value) in ``column``, ``value``
    ("column", i64), ("value", f64),  # the phi column of an output (output * (features + 1)), the leaf's value there
    # each split's record (two words: threshold or category set; feature and flags), the
    # categories' bit sets, each tree's first split, the most splits of a tree
    ("split_record", i64), ("category_bits", i32), ("tree_splits", i64), ("max_splits", None),
    ("category_rule", None),
    ("quad_at", i64), ("quad_t", f64), ("quad_w", f64),  # Gauss-Legendre points for d, at quad_at[d]
    ("coalition_at", i64), ("coalition_w", f64),  # Shapley weights of coalitions of 0..d, at coalition_at[d]
    ("use_tables", None),
    ("pattern_stride", None),  # the model's longest path + 1: the patterns a row keeps
    # Symmetric trees (every node of a level the same split): levels (0: a tree walked by
    # paths), each level's split (a node of it), and the tree's table by leaf: a row per leaf,
    # an entry per (output, feature) column of the tree, at ``leaf_column``.
    ("tree_levels", i64), ("level_at", i64), ("level_node", i64),
    ("leaf_table_at", i64), ("leaf_table", f64), ("column_at", i64), ("table_columns", i64), ("leaf_column", i64),
    ("zero_bound", None),  # the float64 bits of ZERO_THRESHOLD in the model's dtype
)
ARG_INDEX = {name: k for k, (name, _) in enumerate(ARG_LAYOUT)}
# Paths may be this long (the pattern kept per depth lives on the stack).
MAX_PATH = 256
# A path without a kept pattern table has one made by a call of this many rows or more (about
# what 3-4 rows' integrals cost at 6 features), if it has at most MAX_TABLE_D features.
MADE_TABLE_ROWS = 4
# Kept pattern tables are read by calls of this many rows or more: one row's reads of them
# miss the cache more than its integrals cost (lgb_flight_1000x255: 60 ms integrated, 79 read).
KEPT_TABLE_ROWS = 2
MAX_TABLE_D = 12
# Paths of up to this many features have their integral's code unrolled (the points constants).
UNROLLED_D = 8
# Op codes (silvanforge.ir.hir.Op) and category rules, as the args block gives them.
OP_LT, OP_LE, OP_EQ = 0, 1, 2
RULE_XGBOOST, RULE_LIGHTGBM, RULE_EXACT = 0, 1, 2


def _points(d: int) -> tuple[list[float], list[float]]:
    """The Gauss-Legendre points and weights on [0, 1] of paths of ``d`` features, the values
    :func:`silvanforge.runtime.shap_arrays._quadrature` gives the loop."""
    x, w = np.polynomial.legendre.leggauss((d + 1) // 2)
    return [float(t) for t in (x + 1) / 2], [float(u) for u in w / 2]


def _pattern_table(b: ir.IRBuilder, v, z, d, weight, C, U) -> None:
    """Emit the pattern table ``U`` (``2**d`` doubles) of a path whose ``d`` cover fractions are
    at ``z``, as :func:`silvanforge.runtime.contributions._pattern_tables` makes it: ``C[u]``
    the product of ``z_i`` over the bits ``i`` of ``u``, ``U[t] = weight(|t|) C[full ^ t]``
    (``weight``: a function of the i64 coalition size giving the Shapley weight, 0 for all
    ``d``), then the subset sums one feature at a time.  ``C``: ``2**d`` doubles of scratch."""
    c64 = lambda k: ir.Constant(i64, k)  # noqa: E731
    load = lambda ptr, i: b.load(b.gep(ptr, [i]))  # noqa: E731
    size = b.shl(c64(1), d)
    full = b.sub(size, c64(1))
    b.store(ir.Constant(f64, 1.0), C)
    with v.loop(c64(0), d, "ci") as i:
        bit = b.shl(c64(1), i)
        zi = load(z, i)
        with v.loop(bit, b.shl(bit, c64(1)), "cu") as u:
            b.store(b.fmul(load(C, b.sub(u, bit)), zi), b.gep(C, [u]))
    with v.loop(c64(0), size, "ut") as t:
        b.store(b.fmul(weight(b.ctpop(t)), load(C, b.xor(full, t))), b.gep(U, [t]))
    with v.loop(c64(0), d, "si") as i:
        bit = b.shl(c64(1), i)
        with v.loop(c64(0), size, "st") as t:
            with b.if_then(b.icmp_unsigned("!=", b.and_(t, bit), c64(0))):
                cell = b.gep(U, [t])
                b.store(b.fadd(b.load(cell), load(U, b.xor(t, bit))), cell)


class _Vars:
    """Loop counters and scalars as stack slots (SROA makes them registers)."""

    def __init__(self, fn, b: ir.IRBuilder):
        self._entry = fn.entry_basic_block
        self.b = b

    def var(self, ty, name, init=None):
        with self.b.goto_block(self._entry):
            self.b.position_at_start(self._entry)
            slot = self.b.alloca(ty, name=name)
        if init is not None:
            self.b.store(init, slot)
        return slot

    @contextlib.contextmanager
    def loop(self, lo, hi, name):
        """``for name in range(lo, hi)``: yields the counter's value in the body."""
        b = self.b
        counter = self.var(lo.type, name, lo)
        head = b.append_basic_block(f"{name}.head")
        body = b.append_basic_block(f"{name}.body")
        end = b.append_basic_block(f"{name}.end")
        b.branch(head)
        b.position_at_end(head)
        b.cbranch(b.icmp_signed("<", b.load(counter), hi), body, end)
        b.position_at_end(body)
        yield b.load(counter)
        b.store(b.add(b.load(counter), ir.Constant(lo.type, 1)), counter)
        b.branch(head)
        b.position_at_end(end)


def build_ir() -> str:
    """The kernel's LLVM IR (see the module docstring)."""
    module = ir.Module("treeshap")
    p64 = f64.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64.as_pointer(), p64, i64, i64, i64, i64, p64,
                                                             i8.as_pointer()]), "treeshap")
    args, X, row_begin, row_end, tree_begin, tree_end, phi, scratch = fn.args
    for a in (args, X, phi, scratch):
        a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    v = _Vars(fn, b)
    c64 = lambda k: ir.Constant(i64, k)  # noqa: E731
    cf = lambda k: ir.Constant(f64, k)  # noqa: E731

    A = {}
    for k, (name, ty) in enumerate(ARG_LAYOUT):
        word = b.load(b.gep(args, [c64(k)]), name=name)
        A[name] = word if ty is None else b.inttoptr(word, ty.as_pointer(), name=name)

    def at(name, index, ty=i64):
        """``A[name][index]`` widened to ``ty`` (integers) or as it is (doubles)."""
        value = b.load(b.gep(A[name], [index]))
        if isinstance(value.type, ir.IntType) and value.type.width < ty.width:
            return b.sext(value, ty) if name in ("step", "feature", "prefix", "depth") \
                else b.zext(value, ty)
        return value

    zero_bound = b.bitcast(A["zero_bound"], f64)

    def goes_left(split, xrow):
        """The HIR's decision at ``split`` (a global split index) for the row at ``xrow``: an
        i1, true for left.  Without branches, from the split's one record: a categorical
        split's set is read at word 0 for a numeric one, so a tree's decisions overlap their
        reads."""
        record = b.gep(A["split_record"], [b.shl(split, c64(1))])
        word0, word1 = b.load(record), b.load(b.gep(record, [c64(1)]))
        flag = lambda bit: b.icmp_unsigned("!=", b.and_(b.lshr(word1, c64(bit)), c64(1)), c64(0))  # noqa: E731
        x = b.load(b.gep(xrow, [b.sext(b.trunc(word1, i32), i64)]))
        nan = b.fcmp_unordered("uno", x, x)
        near_zero = b.and_(b.fcmp_ordered(">=", x, b.fneg(zero_bound)), b.fcmp_ordered("<=", x, zero_bound))
        missing = b.or_(nan, b.and_(flag(48), near_zero))
        # categorical: the value's category, valid by the forest's rule and below the set's size
        rule = A["category_rule"]
        lo = b.select(b.icmp_signed("==", rule, c64(RULE_LIGHTGBM)), cf(-1.0), cf(0.0))
        hi = b.select(b.icmp_signed("==", rule, c64(RULE_XGBOOST)), cf(2.0 ** 24), cf(2.0 ** 31))
        above = b.select(b.icmp_signed("==", rule, c64(RULE_LIGHTGBM)),
                         b.fcmp_ordered(">", x, lo), b.fcmp_ordered(">=", x, lo))
        valid = b.and_(above, b.fcmp_ordered("<", x, hi))
        # (a value outside the range is converted as 0: it is tested invalid anyway)
        safe = b.select(valid, x, cf(0.0))
        cat = b.fptosi(safe, i64)  # truncates toward zero, as the rule does
        whole = b.fcmp_ordered("==", b.sitofp(cat, f64), safe)
        valid = b.and_(valid, b.or_(b.icmp_signed("!=", rule, c64(RULE_EXACT)), whole))
        valid = b.and_(b.and_(valid, flag(56)), b.icmp_signed("<", cat, b.lshr(word0, c64(32))))
        word = b.select(valid, b.add(b.and_(word0, c64(0xFFFFFFFF)), b.lshr(cat, c64(5))), c64(0))
        bits = b.zext(b.load(b.gep(A["category_bits"], [word])), i64)
        member = b.icmp_unsigned("!=", b.and_(b.lshr(bits, b.and_(cat, c64(31))), c64(1)), c64(0))
        # numeric: the op's comparison in float64
        t = b.bitcast(word0, f64)
        op = b.and_(b.lshr(word1, c64(32)), c64(0xFF))
        lt, le, eq = b.fcmp_ordered("<", x, t), b.fcmp_ordered("<=", x, t), b.fcmp_ordered("==", x, t)
        numeric = b.select(b.icmp_unsigned("==", op, c64(OP_LT)), lt,
                           b.select(b.icmp_unsigned("==", op, c64(OP_LE)), le, eq))
        decided = b.select(flag(56), b.and_(valid, member), numeric)
        return b.select(missing, flag(40), decided)

    stride = A["pattern_stride"]
    patterns = b.alloca(i64, b.mul(b.sub(row_end, row_begin), stride), name="patterns")
    # an integral's factors, products before each factor, and sums (a path's features at most)
    factors, befores, sums_at = (b.alloca(f64, c64(64), name=n) for n in ("factors", "befores", "sums"))
    made_c = b.alloca(f64, c64(1 << MAX_TABLE_D), name="made_c")  # a pattern table made by the call
    made_u = b.alloca(f64, c64(1 << MAX_TABLE_D), name="made_u")
    many_rows = b.icmp_signed(">=", b.sub(row_end, row_begin), c64(MADE_TABLE_ROWS))
    rows_for_kept = b.icmp_signed(">=", b.sub(row_end, row_begin), c64(KEPT_TABLE_ROWS))

    def add_share(single, column, value, path, phirow, feat, share):
        """``phi[column + feat] += value * share`` for each of the path's leaf values (one,
        ``column`` and ``value``, where ``single``)."""
        with b.if_else(single) as (one, several):
            with one:
                cell = b.gep(phirow, [b.add(column, feat)])
                b.store(b.fadd(b.load(cell), b.fmul(value, share)), cell)
            with several:
                with v.loop(at("path_values", path), at("path_values", b.add(path, c64(1))), "val") as k:
                    cell = b.gep(phirow, [b.add(at("column", k), feat)])
                    b.store(b.fadd(b.load(cell), b.fmul(at("value", k), share)), cell)

    def by_leaf(t):
        """A symmetric tree: the row's leaf from one decision a level, then its row of the
        tree's table (every feature's share, each output's)."""
        levels, first_level = at("tree_levels", t), at("level_at", t)
        columns, first_column = at("table_columns", t), at("column_at", t)
        table = b.gep(A["leaf_table"], [at("leaf_table_at", t)])
        with v.loop(row_begin, row_end, "lrow") as r:
            xrow = b.gep(X, [b.mul(r, A["row_stride"])])
            phirow = b.gep(phi, [b.mul(r, A["phi_stride"])])
            leaf = v.var(i64, "leaf", c64(0))
            with v.loop(c64(0), levels, "level") as i:
                right = b.zext(b.not_(goes_left(at("level_node", b.add(first_level, i)), xrow)), i64)
                b.store(b.or_(b.load(leaf), b.shl(right, i)), leaf)
            entries = b.gep(table, [b.mul(b.load(leaf), columns)])
            with v.loop(c64(0), columns, "entry") as k:
                cell = b.gep(phirow, [at("leaf_column", b.add(first_column, k))])
                b.store(b.fadd(b.load(cell), b.load(b.gep(entries, [k]))), cell)

    def by_path(t):
        """Any tree: path by path, the rows of the call through each (the path's tables and
        values read once for them)."""
        first_split = at("tree_splits", t)
        splits = b.sub(at("tree_splits", b.add(t, c64(1))), first_split)
        with v.loop(row_begin, row_end, "prow") as r:
            b.store(c64(-1), b.gep(patterns, [b.mul(b.sub(r, row_begin), stride)]))
            # every split of the tree decided once first (paths meet each twice), into scratch
            xrow = b.gep(X, [b.mul(r, A["row_stride"])])
            went = b.gep(scratch, [b.mul(b.sub(r, row_begin), A["max_splits"])])
            with v.loop(c64(0), splits, "split") as k:
                b.store(b.zext(goes_left(b.add(first_split, k), xrow), i8), b.gep(went, [k]))
        with v.loop(at("tree_paths", t), at("tree_paths", b.add(t, c64(1))), "path") as p:
            prefix = at("prefix", p)
            step_begin = b.sub(at("path_nodes", p), prefix)  # (step k of the path: step_begin + k)
            length = b.add(prefix, b.sub(at("path_nodes", b.add(p, c64(1))), at("path_nodes", p)))
            d = at("depth", p)
            mask = b.sub(b.shl(c64(1), d), c64(1))
            fb = at("path_features", p)
            table_at = at("table_at", p)
            first_value = at("path_values", p)
            single = b.icmp_signed("==", b.sub(at("path_values", b.add(p, c64(1))), first_value), c64(1))
            column, value = at("column", first_value), at("value", first_value)
            use = b.icmp_signed("!=", A["use_tables"], c64(0))
            kept = b.and_(b.and_(b.icmp_signed(">=", table_at, c64(0)), use), rows_for_kept)
            made = b.and_(b.and_(b.icmp_signed("==", table_at, c64(-2)), use), many_rows)
            with b.if_then(made):  # its table made once for the call's rows
                first_w = at("coalition_at", d)
                _pattern_table(b, v, b.gep(A["zero"], [fb]), d,
                               lambda k: at("coalition_w", b.add(first_w, k)), made_c, made_u)
            tabled = b.or_(kept, made)
            base = b.select(made, made_u, b.gep(A["table"], [b.select(kept, table_at, c64(0))]))
            q = at("quad_at", d)
            points = b.sdiv(b.add(d, c64(1)), c64(2))
            with v.loop(row_begin, row_end, "row") as r:
                xrow = b.gep(X, [b.mul(r, A["row_stride"])])
                phirow = b.gep(phi, [b.mul(r, A["phi_stride"])])
                stack = b.gep(patterns, [b.mul(b.sub(r, row_begin), stride)])
                s = v.var(i64, "s", b.load(b.gep(stack, [prefix])))
                with v.loop(prefix, length, "k") as k:
                    entry = at("step", b.add(step_begin, k))
                    went = b.load(b.gep(scratch, [b.add(b.mul(b.sub(r, row_begin), A["max_splits"]),
                                                        b.ashr(entry, c64(8)))]))
                    off = b.icmp_unsigned("!=", b.zext(went, i64), b.and_(b.lshr(entry, c64(7)), c64(1)))
                    clear = b.shl(c64(1), b.and_(entry, c64(0x7F)))
                    now = b.select(off, b.and_(b.load(s), b.not_(clear)), b.load(s))
                    b.store(now, s)
                    b.store(now, b.gep(stack, [b.add(k, c64(1))]))
                bits = b.and_(b.load(s), mask)
                with b.if_else(tabled) as (table_way, integral_way):
                    with table_way:
                        minus_u = b.fneg(b.load(b.gep(base, [bits])))
                        with v.loop(c64(0), d, "j") as jj:
                            bit = b.shl(c64(1), jj)
                            on = b.icmp_unsigned("!=", b.and_(bits, bit), c64(0))
                            without = b.load(b.gep(base, [b.xor(bits, bit)]))
                            share = b.select(on, b.fmul(at("ratio", b.add(fb, jj)), without), minus_u)
                            add_share(single, column, value, p, phirow, at("feature", b.add(fb, jj)), share)
                    with integral_way:
                        integral(d, bits, fb, q, points, lambda feat, share: add_share(
                            single, column, value, p, phirow, feat, share))

    def integral(d, bits, fb, q, points, add):
        """Each feature's share of a path by the integral (``add(feature, share)`` for each):
        each point's factors ``z_i (1 - t) + o_i t``, the products before each ``i`` (times
        the weight) forward, then after each ``i`` backward, every ``j``'s product without its
        own factor in ``3 d`` steps a point.  Paths of up to :data:`UNROLLED_D` features take
        code of their own, unrolled with the points as constants (their products stay in
        registers); the others a loop."""
        unrolled = {dd: b.append_basic_block(f"integral{dd}") for dd in range(1, UNROLLED_D + 1)}
        looped = b.append_basic_block("integral_loop")
        done = b.append_basic_block("integral_done")
        switch = b.switch(d, looped)
        for dd, block in unrolled.items():
            switch.add_case(c64(dd), block)
            b.position_at_end(block)
            z = [at("zero", b.add(fb, c64(i))) for i in range(dd)]
            o = [b.icmp_unsigned("!=", b.and_(bits, c64(1 << i)), c64(0)) for i in range(dd)]
            sums = [None] * dd
            ts, ws = _points(dd)
            for tm, wm in zip(ts, ws):
                factor = [b.fadd(b.fmul(z[i], cf(1.0 - tm)), b.select(o[i], cf(tm), cf(0.0))) for i in range(dd)]
                before = [cf(wm)]
                for i in range(dd - 1):
                    before.append(b.fmul(before[i], factor[i]))
                after = cf(1.0)
                for k in range(dd - 1, -1, -1):
                    term = b.fmul(before[k], after)
                    sums[k] = term if sums[k] is None else b.fadd(sums[k], term)
                    after = b.fmul(after, factor[k])
            for jj in range(dd):
                add(at("feature", b.add(fb, c64(jj))),
                    b.fmul(b.fsub(b.select(o[jj], cf(1.0), cf(0.0)), z[jj]), sums[jj]))
            b.branch(done)
        b.position_at_end(looped)
        with v.loop(c64(0), d, "j0") as jj:
            b.store(cf(0.0), b.gep(sums_at, [jj]))
        with v.loop(c64(0), points, "m") as m:
            tm = at("quad_t", b.add(q, m))
            rest = b.fsub(cf(1.0), tm)
            before = v.var(f64, "before", at("quad_w", b.add(q, m)))
            with v.loop(c64(0), d, "i") as i:
                o = b.icmp_unsigned("!=", b.and_(bits, b.shl(c64(1), i)), c64(0))
                factor = b.fadd(b.fmul(at("zero", b.add(fb, i)), rest), b.select(o, tm, cf(0.0)))
                b.store(factor, b.gep(factors, [i]))
                b.store(b.load(before), b.gep(befores, [i]))
                b.store(b.fmul(b.load(before), factor), before)
            after = v.var(f64, "after", cf(1.0))
            with v.loop(c64(0), d, "i2") as i:
                k = b.sub(b.sub(d, c64(1)), i)
                cell = b.gep(sums_at, [k])
                b.store(b.fadd(b.load(cell), b.fmul(b.load(b.gep(befores, [k])), b.load(after))), cell)
                b.store(b.fmul(b.load(after), b.load(b.gep(factors, [k]))), after)
        with v.loop(c64(0), d, "j") as jj:
            oj = b.icmp_unsigned("!=", b.and_(bits, b.shl(c64(1), jj)), c64(0))
            add(at("feature", b.add(fb, jj)),
                b.fmul(b.fsub(b.select(oj, cf(1.0), cf(0.0)), at("zero", b.add(fb, jj))), b.load(b.gep(sums_at, [jj]))))
        b.branch(done)
        b.position_at_end(done)

    with v.loop(tree_begin, tree_end, "tree") as t:
        with b.if_else(b.icmp_signed(">", at("tree_levels", t), c64(0))) as (symmetric, other):
            with symmetric:
                by_leaf(t)
            with other:
                by_path(t)
    b.ret_void()
    _build_leaf_table(module)
    return str(module)


def _build_leaf_table(module: ir.Module) -> None:
    """``leaf_table(R, d, outs, off, zeros, vals, weights, scratch, table)``: a symmetric tree's
    table by leaf (:func:`silvanforge.runtime.shap_arrays._leaf_tables`), ``R`` leaves and as
    many paths, ``d`` distinct features, ``outs`` outputs.  ``off`` (R): the slots a row
    leaves path ``p`` at when its leaf is ``r``, by ``r ^ p``; ``zeros`` (R, d): each path's
    cover fractions; ``vals`` (R, outs): its values; ``weights`` (d + 1): the Shapley weight
    of a coalition of each size (0 for all ``d``); ``scratch``: ``2 * 2**d``
    doubles.  Adds to ``table`` (R, outs, d) each path whose fractions are all above zero and
    whose values are not all zero: its pattern table ``U`` made as
    :func:`silvanforge.runtime.contributions._pattern_tables` makes it, then each leaf's
    shares from it."""
    p64 = f64.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64, i64, i64, i64.as_pointer(), p64, p64, p64, p64,
                                                             p64]), "leaf_table")
    R, d, outs, off, zeros, vals, weights, scratch, table = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    v = _Vars(fn, b)
    c64 = lambda k: ir.Constant(i64, k)  # noqa: E731
    cf = lambda k: ir.Constant(f64, k)  # noqa: E731
    size = b.shl(c64(1), d)
    full = b.sub(size, c64(1))
    C, U = scratch, b.gep(scratch, [size])
    load = lambda ptr, i: b.load(b.gep(ptr, [i]))  # noqa: E731
    with v.loop(c64(0), R, "p") as p:
        z = b.gep(zeros, [b.mul(p, d)])
        val = b.gep(vals, [b.mul(p, outs)])
        able = v.var(i1, "able", ir.Constant(i1, 1))
        with v.loop(c64(0), d, "i") as i:
            b.store(b.and_(b.load(able), b.fcmp_ordered(">", load(z, i), cf(0.0))), able)
        some = v.var(i1, "some", ir.Constant(i1, 0))
        with v.loop(c64(0), outs, "o") as o:
            b.store(b.or_(b.load(some), b.fcmp_unordered("une", load(val, o), cf(0.0))), some)
        with b.if_then(b.and_(b.load(able), b.load(some))):
            _pattern_table(b, v, z, d, lambda k: load(weights, k), C, U)
            with v.loop(c64(0), R, "r") as r:
                pattern = b.and_(full, b.not_(load(off, b.xor(r, p))))
                minus_u = b.fneg(load(U, pattern))
                row = b.gep(table, [b.mul(b.mul(r, outs), d)])
                with v.loop(c64(0), d, "k") as k:
                    bit = b.shl(c64(1), k)
                    on = b.icmp_unsigned("!=", b.and_(pattern, bit), c64(0))
                    zk = load(z, k)
                    ratio = b.fdiv(b.fsub(cf(1.0), zk), zk)
                    share = b.select(on, b.fmul(ratio, load(U, b.xor(pattern, bit))), minus_u)
                    with v.loop(c64(0), outs, "ko") as o:
                        cell = b.gep(row, [b.add(b.mul(o, d), k)])
                        b.store(b.fadd(b.load(cell), b.fmul(load(val, o), share)), cell)
    b.ret_void()


_lock = threading.Lock()
_kernel = None


class TreeShapKernel:
    """The compiled kernel (one a process): :meth:`run` calls it through ctypes, which releases
    the GIL, so threads run their rows or trees in parallel."""

    arg_layout = tuple(name for name, _ in ARG_LAYOUT)
    max_path = MAX_PATH
    max_depth = 62  # distinct features a path may have: its pattern is one int64's bits
    max_table_d = MAX_TABLE_D  # paths of up to this many features may have tables made per call

    def __init__(self):
        mod, tm = optimise(build_ir())
        self._engine = llvm.create_mcjit_compiler(mod, tm)
        self._engine.finalize_object()
        address = self._engine.get_function_address("treeshap")
        i64_ = ctypes.c_int64
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, i64_, i64_, i64_, i64_,
                                    ctypes.c_void_p, ctypes.c_void_p)(address)
        self._leaf_table = ctypes.CFUNCTYPE(None, i64_, i64_, i64_, *[ctypes.c_void_p] * 6)(
            self._engine.get_function_address("leaf_table"))

    def leaf_table(self, off, zeros, vals, weights, table) -> None:
        """A symmetric tree's table by leaf (see :func:`_build_leaf_table`), NumPy arrays:
        ``off`` int64 (R,), ``zeros`` (R, d), ``vals`` (R, outs), ``weights`` (d + 1,), ``table``
        (R, outs, d) added to; all float64 and C-ordered."""
        R, d = zeros.shape
        scratch = np.empty(2 << d)
        self._leaf_table(R, d, vals.shape[1], off.ctypes.data, zeros.ctypes.data, vals.ctypes.data,
                         weights.ctypes.data, scratch.ctypes.data, table.ctypes.data)

    def run(self, args: int, X: int, row_begin: int, row_end: int, tree_begin: int, tree_end: int,
            phi: int, scratch: int) -> None:
        """One call over rows and trees; ``args``, ``X``, ``phi``, ``scratch`` (``max_splits``
        bytes a row of the call, its own): addresses."""
        self._fn(args, X, row_begin, row_end, tree_begin, tree_end, phi, scratch)


def kernel() -> TreeShapKernel:
    """The process's kernel, compiled at its first request."""
    global _kernel
    with _lock:
        if _kernel is None:
            _kernel = TreeShapKernel()
        return _kernel

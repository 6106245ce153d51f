"""The symmetric program on bytes, as CatBoost's own evaluator runs: a block's columns binned
once (:mod:`.binning`), then a tree's level is one compare of a register of byte bins (64 rows
on AVX-512, 32 on AVX2, 16 on NEON and SSE) with the level's threshold bin, where the float
program (:mod:`.codegen`) compares 16 float32 values: a quarter of the compares and loads for
the leaf indices, which fit a byte (trees of up to 8 levels).  The leaf sums are the float
program's (two phases, a scalar add a lane); phase one stores the paths as bytes and phase two
adds each tree's leaf table's first element.  The byte columns and threshold bins are
:func:`.symmetric.bins`'s; trees shallower than their group's depth get leaf tables as deep as
the group's, each leaf filling every index below it, so their padding levels' bits never matter.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir import hir, lir
from silvanforge.ir.lir import Assign, Bin, Builder, Cast, Cmp, Extract, For, If, Load, Lookup, Select, Store, Var, Vector

from . import codegen, cost
from .binning import BinColumns, signed_thresholds
from .codegen import _Lowering
from .options import DEFAULT, ObliviousOptions
from .symmetric import BYTE_DEPTH, Facts, SymmetricBins


# A forest of leaf indices whose span is one block of rows keeps the block's paths of tree
# ``p`` at ``p * lanes`` of ob_idx: this many trees' paths are one byte table of a lookup (256
# entries at most: a byte index), which gathers them row-major, so each row's ids of these trees
# go out in one store (the transpose done in registers: two ``vpermi2b`` on AVX-512 VBMI),
# where a row at a time reads each tree's path on its own (a gathered lane an id).
TRANSPOSED_TREES = 4


class ByteLowering(BinColumns, _Lowering):
    """The symmetric program with byte columns, byte thresholds and byte paths (the module
    docstring)."""

    # Bins less 128 in signed bytes, and ``bin >= t`` as ``bin - 128 > t - 129``: AVX2 has
    # signed byte compares only (``vpcmpgtb``; unsigned ones took a max and an equality).
    index_t, bin_bias, right_op = "u8", -128, ">"
    # Sums of four lanes a vector add (each lane's leaf a scalar load into it: vmovsd, vmovhpd,
    # vinsertf128 on AVX2), where a scalar add a lane had the two floating-point add pipes
    # (Zen 4) the second phase's bound: cb_1000x8, 4096 rows, in one process, 1 thread, Zen 4
    # (load 7-8), AVX2 code 1.41-1.53 -> 1.34-1.37 ms, AVX-512 1.21 -> 1.11-1.12 (two lanes
    # a vector about as fast, eight slower).
    sum_width = 4

    def __init__(self, forest: hir.Forest, binning: SymmetricBins, lanes: int, options=DEFAULT, vectors=None):
        signed = signed_thresholds(binning.facts.threshold)
        super().__init__(forest, dataclasses.replace(binning.facts, threshold=signed), lanes, options)
        self.binning, self.thresholds = binning, binning.thresholds
        self.vectors, self.form = vectors, cost.shape(vectors)
        self.column_t = "i8"
        self.x_t = lir.vector_type("i8", lanes)
        self.path_t = "u8"

    def missing_bin(self, column) -> int:
        return 255 if column.nan_right else 0

    def estimate_ns(self, batch_size: int | None) -> float:
        return cost.symmetric_bytes_ns(self.binning, batch_size, self.vectors)

    def _tables(self) -> None:
        super()._tables()
        self._search_buffer()
        self.b.buffer("ob_bits", (1 << np.arange(8)).astype(np.uint8))

    def _leaf_facts(self) -> Facts:
        depth = np.zeros_like(self.facts.depth)
        for group in self.facts.groups:
            depth[group.trees] = max(group.depth, 1)
        return dataclasses.replace(self.facts, depth=depth)

    def _columns(self, span0: Var, U: int) -> None:
        # The levels' bits, read from a table once a span (see _with_bit).
        self.bits = [self.b.local("bit", lir.vector_type(self.path_t, self.lanes)) for _ in range(BYTE_DEPTH)]
        for level, bit in enumerate(self.bits):
            self.b.emit(Assign(bit, self.vector((Load("ob_bits", Builder.const(level, "i64"), "u8"),) * self.lanes)))
        super()._columns(span0, U)

    def _with_bit(self, idx: Var, right: lir.Expr, level: int) -> lir.Expr:
        """``idx`` plus the level's bit in the lanes going ``right``: a masked add on AVX-512
        (``vpaddb``; a masked OR of bytes is a blend and an OR).  The bits are read from a
        table, so LLVM cannot see that the add sets a free bit and turn it back into the OR."""
        return Select(right, Bin("+", idx, self.bits[level]), idx)

    def _stored_margins(self, span0: Var, first: int = 0) -> None:
        """The stored paths' margins (a forest of leaf indices: a path is its leaf's id),
        :data:`TRANSPOSED_TREES` trees at a time, a lookup gathering the block's paths of
        those trees row-major: each row's ids one vector store.  Where the span is wider than
        a block, the tables are not side by side (or the trees' outputs are not), a row at a
        time (the float program's)."""
        L, Q = self.lanes, TRANSPOSED_TREES
        groups = self.facts.groups
        outputs = [grp.outputs[0] for grp in groups]
        whole = len(groups) // Q * Q
        if self.span_rows != L or L * Q > 256 or L % Q or whole == 0 \
                or outputs != list(range(outputs[0], outputs[0] + len(groups))):
            return super()._stored_margins(span0)
        c, i64, C, R = Builder.const, "i64", self.forest.num_outputs, L // Q
        # (a lookup may read a vector past its table: the paths' buffer holds one more)
        idx = self.buffers["ob_idx"]
        self.buffers["ob_idx"] = dataclasses.replace(idx, size=idx.size + L)
        q = Var("ob_q", i64)
        body = []
        for h in range(Q):  # the block's rows R at a time: lane j of a lookup is row j // Q, tree j % Q
            index = Vector(tuple(c((j % Q) * L + h * R + j // Q, "u8") for j in range(L)))
            ids = self.b.local("ids", lir.vector_type(self.acc_t, L))
            body.append(Assign(ids, Cast(Lookup("ob_idx", Bin("+", Bin("*", q, c(L, i64)), self.acc_at), index, Q * L,
                                                lir.vector_type(self.index_t, L)), ids.type)))
            for r in range(R):
                row = Bin("+", self.block0, c(h * R + r, i64))
                at = Bin("+", Bin("*", row, c(C, i64)), Bin("+", q, c(outputs[0], i64)))
                body.append(If(Cmp("<", row, lir.ROW_END),
                               [Store("margins", at, Vector(tuple(Extract(ids, r * Q + k) for k in range(Q))))]))
        self.b.emit(self._blocks(span0, [For(q, c(0, i64), c(whole, i64), Q, body)]))
        if whole < len(groups):
            super()._stored_margins(span0, whole)

    def _stored_leaf(self, t: Var, at: lir.Expr, lane: int, K: int = 1) -> lir.Expr:
        """The tree's first leaf plus the lane's path, read from a word of eight lanes' paths:
        the CPU target loads the word once and takes each byte with an ALU instruction
        (``movzbl``, ``bextr``), where a byte load a lane and row made the loads the sums'
        bound."""
        word = Load("ob_idx", Bin("+", at, Builder.const(lane - lane % 4, "i64")), lir.vector_type("u8", 4))
        path = Cast(Extract(word, lane % 4), "i64")
        if K > 1:  # a leaf's K values side by side
            path = Bin("*", path, Builder.const(K, "i64"))
        return Bin("+", Cast(Load("ob_leaf_base", t, "i32"), "i64"), path)


def lower(forest: hir.Forest, facts: Facts, batch_size: int | None = None, lanes: int | None = None,
          options: ObliviousOptions = DEFAULT, vectors=None) -> lir.Module:
    """The LIR module of ``forest`` (symmetric, :func:`.symmetric.recognise` gave ``facts``)
    for ``batch_size`` rows a call (None: large batches): on bytes where the cost model takes
    them (:func:`.cost.symmetric_binned`; :func:`.cost.byte_lanes` rows a block), else the float program
    (:func:`.codegen.lower`; ``lanes`` rows a block, None: the cost model's choice)."""
    binning = cost.symmetric_binned(facts, batch_size) if lanes is None else None
    if binning is None:
        return codegen.lower(forest, facts, batch_size, lanes, options, vectors)
    return ByteLowering(forest, binning, cost.byte_lanes(batch_size, vectors), options, vectors).lower(batch_size)


__all__ = ["ByteLowering", "lower"]

"""MIR: the loop nest a schedule produces, still silent about how trees are stored.

Operations (the SilvanForge paper draft, sections 'Compiler Overview', 'Reductions' and
'Caching Implementation'):

* ``Loop``: ``for``/``par.for`` over rows (``batch``) or trees (``tree``), with inferred
  ``start``/``stop``/``step`` (index expressions over the enclosing loops), an optional GPU
  dimension and the attributes the schedule set (unroll, specialize, interleave, cache);
* ``WalkDecisionTree``: walk a tree for a row (``unroll_depth``/``peel_depth`` steps unrolled /
  without leaf checks), or, interleaved, for every iteration of the innermost loop at once;
* ``CacheRows`` / ``CacheTrees``: bring the working set of one iteration closer (CPU: prefetch;
  GPU: shared memory);
* ``Reduce``: accumulate a leaf value into the margins of a row; the reduction dialect
  (:mod:`silvanforge.reduction`) rewrites it when parallel loops over trees conflict;
* ``InitMargins`` / ``FinalizeMargins``: start and finish the aggregation of a row.

Index expressions are tiny trees: ``int``, ``str`` (a loop index or ``row_begin``/``row_end``),
or ``(op, a, b)`` with op ``+``, ``*`` or ``min``.
"""

from __future__ import annotations

import dataclasses

from silvanforge.errors import IRVerificationError
from silvanforge.reduction.ops import PrivateBuffer, Reduce, ReduceDimension  # noqa: F401  (part of MIR)

IndexExpr = object  # int | str | tuple


def fmt(e) -> str:
    if isinstance(e, tuple):
        op, a, b = e
        return f"min({fmt(a)}, {fmt(b)})" if op == "min" else f"({fmt(a)} {op} {fmt(b)})"
    return str(e)


@dataclasses.dataclass
class Loop:
    index: str
    dimension: str  # "batch" or "tree"
    start: IndexExpr
    stop: IndexExpr
    step: int
    body: list
    parallel: bool = False
    gpu: str | None = None
    unroll: bool = False
    specialize: bool = False
    max_trip: int | None = None  # known bound on the trip count (unroll / interleave / specialize)
    interleave: int = 0  # walks of this (innermost) loop in flight together
    reduce: str | None = None  # how a conflicting loop's reductions combine: atomic/shared/vector
    vector_width: int = 0


@dataclasses.dataclass
class WalkDecisionTree:
    tree: IndexExpr
    row: IndexExpr
    result: str
    unroll_depth: int = 0
    peel_depth: int = 0
    expand: bool = False  # nested branches with the (constant) tree's nodes as constants
    chain: bool = False  # its interleaved lanes walk chains of trees (chainWalks)


@dataclasses.dataclass
class CacheRows:
    start: IndexExpr
    stop: IndexExpr


@dataclasses.dataclass
class CacheTrees:
    start: IndexExpr
    stop: IndexExpr


@dataclasses.dataclass
class InitMargins:
    row: str


@dataclasses.dataclass
class FinalizeMargins:
    row: str


@dataclasses.dataclass
class MirFunction:
    body: list
    num_trees: int
    num_outputs: int
    schedule_text: str = ""
    buffers: list = dataclasses.field(default_factory=list)  # PrivateBuffer


def walk(ops: list):
    """Yield every operation in a MIR body, depth first."""
    for op in ops:
        yield op
        if isinstance(op, Loop):
            yield from walk(op.body)


def verify(fn: MirFunction) -> None:
    """Indices are bound by enclosing loops and not rebound; every walk reaches a reduce."""

    def fail(msg):
        raise IRVerificationError(f"MIR verification failed: {msg}")

    def names(e):
        if isinstance(e, tuple):
            return names(e[1]) | names(e[2])
        return {e} if isinstance(e, str) else set()

    params = {"row_begin", "row_end"}

    def check(ops, bound: set):
        for op in ops:
            if isinstance(op, Loop):
                if op.index in bound:
                    fail(f"index {op.index} bound twice in one nest")
                if op.dimension not in ("batch", "tree") or op.step <= 0:
                    fail(f"loop {op.index}: dimension {op.dimension}, step {op.step}")
                if not (names(op.start) | names(op.stop)) <= bound | params:
                    fail(f"loop {op.index} range uses unbound indices")
                check(op.body, bound | {op.index})
            elif isinstance(op, (WalkDecisionTree, Reduce)):
                if not (names(op.tree) | names(op.row)) <= bound:
                    fail(f"{type(op).__name__} uses unbound indices")
            elif isinstance(op, (InitMargins, FinalizeMargins)):
                if op.row not in bound:
                    fail(f"{type(op).__name__} outside a batch loop")
            elif not isinstance(op, (ReduceDimension, CacheRows, CacheTrees)):
                fail(f"unknown MIR operation {op!r}")

    check(fn.body, set())
    for op in walk(fn.body):
        if isinstance(op, Reduce) and op.target not in {"margins"} | {b.name for b in fn.buffers}:
            fail(f"reduce into undeclared buffer {op.target}")
    if not any(isinstance(op, WalkDecisionTree) for op in walk(fn.body)):
        fail("no tree is walked")


def format_function(fn: MirFunction) -> str:
    lines = [f"// MIR: {fn.num_trees} trees, {fn.num_outputs} outputs",
             *(f"// schedule: {line}" for line in fn.schedule_text.splitlines() if line.strip()),
             "model = ensemble(...)"]
    for buf in fn.buffers:
        lines.append(f"{buf.name} = alloc<{'x'.join(map(str, buf.extents))}xbatchxoutputs>")

    def emit(ops, pad):
        for op in ops:
            if isinstance(op, Loop):
                kw = "par.for" if op.parallel else "for"
                attrs = [a for a, on in (("unroll", op.unroll), ("specialize", op.specialize)) if on]
                if op.gpu:
                    attrs.append(op.gpu)
                if op.interleave:
                    attrs.append(f"interleave={op.interleave}")
                tail = f" <{', '.join(attrs)}>" if attrs else ""
                lines.append(f"{pad}{kw} {op.index} = {fmt(op.start)} to {fmt(op.stop)} step {op.step}{tail} {{")
                emit(op.body, pad + "  ")
                lines.append(f"{pad}}}")
            elif isinstance(op, WalkDecisionTree):
                attrs = []
                if op.unroll_depth:
                    attrs.append(f"unrollDepth = {op.unroll_depth}")
                if op.peel_depth:
                    attrs.append(f"peelDepth = {op.peel_depth}")
                if op.expand:
                    attrs.append("expand")
                if op.chain:
                    attrs.append("chain")
                tail = f" <{', '.join(attrs)}>" if attrs else ""
                lines.append(f"{pad}T = getTree(model, {fmt(op.tree)})")
                lines.append(f"{pad}{op.result} = walkDecisionTree(T, input[{fmt(op.row)}]){tail}")
            elif isinstance(op, Reduce):
                where = "".join(f"[{fmt(i)}]" for i in op.private)
                kind = " atomic" if op.atomic else ""
                lines.append(f"{pad}reduce({op.target}{where}[{fmt(op.row)}, outputs({fmt(op.tree)})], "
                             f"{op.value}) <'{op.op}'{kind}>")
            elif isinstance(op, ReduceDimension):
                name = "reduce_dimension_inplace" if op.inplace else "reduce_dimension"
                outer = "".join(f"[{fmt(i)}]" for i in op.outer)
                vec = f" <vector={op.vector_width}>" if op.vector_width else " <ordered>" if op.ordered else ""
                lines.append(f"{pad}{op.target}[{fmt(op.rows[0])}:{fmt(op.rows[1])}] = {name}("
                             f"{op.source}{outer}, dim={op.dim}){vec}")
            elif isinstance(op, CacheRows):
                lines.append(f"{pad}cacheRows(input, {fmt(op.start)}, {fmt(op.stop)})")
            elif isinstance(op, CacheTrees):
                lines.append(f"{pad}cacheTrees(model, {fmt(op.start)}, {fmt(op.stop)})")
            elif isinstance(op, InitMargins):
                lines.append(f"{pad}initMargins({op.row})")
            elif isinstance(op, FinalizeMargins):
                lines.append(f"{pad}finalizeMargins({op.row})")

    emit(fn.body, "")
    return "\n".join(lines)

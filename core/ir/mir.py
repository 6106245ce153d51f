"""MIR: the loop nest a schedule produces, still silent about how trees are stored.

Operations (seed 004, section 3):

* ``Loop``: ``for``/``par.for`` over a range of rows (``batch``) or trees (``tree``), with an
  optional GPU dimension;
* ``WalkDecisionTree``: walk tree ``tree`` for row ``row`` and name the leaf value;
* ``Reduce``: accumulate a tree's leaf value into the margins of a row (``reduction`` dialect
  rewrites it when parallel loops conflict);
* ``InitMargins`` / ``FinalizeMargins``: start and finish the aggregation of a row.
"""

from __future__ import annotations

import dataclasses

from ..errors import IRVerificationError


@dataclasses.dataclass
class Loop:
    index: str
    dimension: str  # "batch" or "tree": the iteration space it walks
    start: int
    stop: int | str  # an int, or "batch_size" for the runtime row count
    step: int
    body: list
    parallel: bool = False
    gpu: str | None = None  # e.g. "grid.x" (GPU targets)


@dataclasses.dataclass
class WalkDecisionTree:
    tree: str  # loop index naming the tree
    row: str  # loop index naming the row
    result: str
    unroll_depth: int = 0  # 0: walk with a loop until a leaf


@dataclasses.dataclass
class Reduce:
    target: str  # the margins buffer
    row: str
    tree: str  # the tree whose outputs receive the value
    value: str
    op: str  # aggregation: sum | average | min | max


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


def walk(ops: list):
    """Yield every operation in a MIR body, depth first."""
    for op in ops:
        yield op
        if isinstance(op, Loop):
            yield from walk(op.body)


def verify(fn: MirFunction) -> None:
    """Indices are bound by an enclosing loop, used once per nest, and walks reach a reduce."""

    def fail(msg):
        raise IRVerificationError(f"MIR verification failed: {msg}")

    def check(ops, bound: dict):
        for op in ops:
            if isinstance(op, Loop):
                if op.index in bound:
                    fail(f"index {op.index} bound twice")
                if op.dimension not in ("batch", "tree"):
                    fail(f"loop {op.index} over unknown dimension {op.dimension}")
                if op.step <= 0:
                    fail(f"loop {op.index} has step {op.step}")
                check(op.body, {**bound, op.index: op.dimension})
            elif isinstance(op, WalkDecisionTree):
                if bound.get(op.tree) != "tree" or bound.get(op.row) != "batch":
                    fail(f"walk uses tree {op.tree} / row {op.row} not bound by tree / batch loops")
            elif isinstance(op, Reduce):
                if bound.get(op.row) != "batch" or bound.get(op.tree) != "tree":
                    fail("reduce outside its row and tree loops")
            elif isinstance(op, (InitMargins, FinalizeMargins)):
                if bound.get(op.row) != "batch":
                    fail(f"{type(op).__name__} outside a batch loop")
            else:
                fail(f"unknown MIR operation {op!r}")

    check(fn.body, {})
    if not any(isinstance(op, WalkDecisionTree) for op in walk(fn.body)):
        fail("no tree is walked")


def format_function(fn: MirFunction) -> str:
    lines = [f"// MIR: {fn.num_trees} trees, {fn.num_outputs} outputs",
             *(f"// schedule: {line}" for line in fn.schedule_text.splitlines() if line.strip()),
             "model = ensemble(...)"]

    def emit(ops, pad):
        for op in ops:
            if isinstance(op, Loop):
                kw = "par.for" if op.parallel else "for"
                gpu = f" <{op.gpu}>" if op.gpu else ""
                lines.append(f"{pad}{kw} {op.index} = {op.start} to {op.stop} step {op.step}{gpu} {{")
                emit(op.body, pad + "  ")
                lines.append(f"{pad}}}")
            elif isinstance(op, WalkDecisionTree):
                lines.append(f"{pad}T = getTree(model, {op.tree})")
                unroll = f" <unrollDepth = {op.unroll_depth}>" if op.unroll_depth else ""
                lines.append(f"{pad}{op.result} = walkDecisionTree(T, input[{op.row}]){unroll}")
            elif isinstance(op, Reduce):
                lines.append(f"{pad}reduce({op.target}[{op.row}, outputs({op.tree})], {op.value}) <'{op.op}'>")
            elif isinstance(op, InitMargins):
                lines.append(f"{pad}initMargins({op.row})")
            elif isinstance(op, FinalizeMargins):
                lines.append(f"{pad}finalizeMargins({op.row})")

    emit(fn.body, "")
    return "\n".join(lines)

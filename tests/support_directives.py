"""What the directive tests (core/scheduler/test_directives_mir.py and
core/lowering/test_directives_lir.py) share: one small forest whose shape the assertions can
count on, the lowering to MIR and LIR, and walkers over both IRs, so the tests inspect IR objects
rather than printed text."""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir import lir, mir
from silvanforge.ir.hir import Forest, Tree
from silvanforge.options import CompileOptions
from silvanforge.scheduler import lower_to_mir, parse_schedule

NUM_TREES = 10
DEPTH = 3  # every leaf of every tree is at this depth


def full_tree(depth: int, shift: int) -> Tree:
    """A complete tree of ``depth`` levels over two features, its thresholds shifted by ``shift``
    so that no two trees are the same."""
    size = 2 ** (depth + 1) - 1
    k = np.arange(size)
    inner = 2 * k + 2 < size
    return Tree.from_nodes(np.where(inner, 2 * k + 1, -1), np.where(inner, 2 * k + 2, -1),
                           np.where(inner, k % 2, -1), (k + shift).astype(float), k * 0.5 + shift)


def forest() -> Forest:
    return Forest(trees=[full_tree(DEPTH, i) for i in range(NUM_TREES)], num_features=2)


def to_mir(schedule_text: str) -> mir.MirFunction:
    """The legalised MIR of ``schedule_text`` (``;`` separates directives) on :func:`forest`."""
    return lower_to_mir(forest(), parse_schedule(schedule_text.replace(";", "\n")))


def to_lir(schedule_text: str) -> lir.Module:
    """The core's CPU lowering with the out-of-tree example representation ``linked``; scalar
    walks with leaf checks and rows read as given, so each directive's own effect is what shows
    (the lowering's other choices, vector walks and self-looping leaves, would hide it)."""
    from silvanforge.plugins import registry
    from silvanforge.lowering.walkgen import lower_to_lir

    options = CompileOptions(vector_walks=False, leaf_self_loops=False, split_rows=False)
    module = lower_to_lir(forest(), to_mir(schedule_text), "linked", registry().hook, options=options)
    lir.verify(module)
    return module


# ----------------------------------------------------------------------------- MIR walkers
def loops(fn: mir.MirFunction) -> dict[str, mir.Loop]:
    """The schedule's loops by index name (the margins' init/finalize row loops left out)."""
    return {op.index: op for op in mir.walk(fn.body) if isinstance(op, mir.Loop) and op.index != "row"}


def ops_of(fn_or_loop, kind) -> list:
    body = fn_or_loop.body
    return [op for op in mir.walk(body) if isinstance(op, kind)]


def schedule_roots(fn: mir.MirFunction) -> list[mir.Loop]:
    """The top-level loops the schedule built (between initMargins and finalizeMargins)."""
    return [op for op in fn.body if isinstance(op, mir.Loop) and op.index != "row"]


def child_loops(loop: mir.Loop) -> list[mir.Loop]:
    return [op for op in loop.body if isinstance(op, mir.Loop)]


# ----------------------------------------------------------------------------- LIR walkers
def statements(stmts: list):
    """Every LIR statement in ``stmts``, depth first (loop, while and branch bodies included)."""
    for s in stmts:
        yield s
        if isinstance(s, (lir.For, lir.While)):
            yield from statements(s.body)
        elif isinstance(s, lir.If):
            yield from statements(s.then)
            yield from statements(s.orelse)


def module_statements(module: lir.Module):
    for function in module.functions:
        yield from statements(function.body)


def expressions(e):
    """``e`` and every expression inside it."""
    yield e
    if dataclasses.is_dataclass(e):
        for field in dataclasses.fields(e):
            value = getattr(e, field.name)
            for v in value if isinstance(value, tuple) else (value,):
                if dataclasses.is_dataclass(v):
                    yield from expressions(v)


def loads_in(stmts: list, buffer: str) -> list[lir.Load]:
    """Loads of ``buffer`` anywhere in ``stmts`` (conditions, indices and values)."""
    out = []
    for s in statements(stmts):
        roots = [getattr(s, f.name) for f in dataclasses.fields(s)
                 if f.name in ("cond", "index", "value", "start", "stop")]
        for root in roots:
            out += [e for e in expressions(root) if isinstance(e, lir.Load) and e.buffer == buffer]
    return out


def for_loop(module: lir.Module, name: str) -> lir.For:
    """The one LIR loop whose variable is ``name``."""
    found = [s for s in module_statements(module) if isinstance(s, lir.For) and s.var.name == name]
    assert len(found) == 1, f"{len(found)} loops over {name}"
    return found[0]

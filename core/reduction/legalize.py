"""Legalisation of ``reduce`` under parallel loops (the SilvanForge paper draft, section
'Reductions').

A parallel loop over trees around a ``reduce`` is a *conflicting loop*: its iterations add into
the same margins.  For each chain of conflicting loops (outermost first) the target is
*privatised*: a buffer gets one slice per iteration of each conflicting loop, the ``reduce``
writes its own slice, and right after each conflicting loop a ``reduce_dimension`` folds that
loop's slices into the next level: in place into slice 0 of the enclosing conflicting loop's
dimension (``reduce_dimension_inplace``), or, for the outermost, into the margins.  Folded
slices are reset, so a conflicting loop inside a sequential one is folded afresh each time.

A conflicting loop marked ``atomicReduce`` is not privatised: its reduces update the margins
atomically.  One marked ``orderedReduce`` is privatised per *tree* instead of per iteration: each
tree's value lands in a slice of its own (one tree, one value: no sum), and the fold adds the
slices to the margins one by one in tree order, from the margins' initial value, which is the
reference's order of sums: exact, where the per-iteration partial sums are exact only up to
rounding.  Loops over rows never conflict: each row owns its margins; nor do loops over trees
of a forest whose trees own their outputs (leaf ids, per-tree values: each margin is one tree's),
which write the margins directly, a fold directive on them having nothing to fold.
"""

from __future__ import annotations

import dataclasses

from silvanforge.errors import ScheduleError
from silvanforge.ir import mir
from silvanforge.ir.hir import Aggregation


def identity(aggregation: Aggregation, ordered: bool = False) -> float:
    """The value a privatised slice starts from (and is reset to once folded): ``ordered``
    (orderedReduce) slices hold a tree's value or -0.0, which adds nothing to any sum (0.0
    would turn a sum of -0.0 into 0.0)."""
    if ordered:
        return -0.0
    return float("nan") if aggregation in (Aggregation.MIN, Aggregation.MAX) else 0.0


def _conflicting(loop: mir.Loop) -> bool:
    return loop.dimension == "tree" and loop.parallel


def _slot(loop: mir.Loop):
    """Which slice an iteration of ``loop`` owns: (index - start) / step."""
    offset = loop.index if loop.start == 0 else ("-", loop.index, loop.start)
    return offset if loop.step == 1 else ("/", offset, loop.step)


def _depth(loop: mir.Loop) -> int:
    """The longest chain of conflicting loops from ``loop`` down to a reduce."""
    inner = max((_depth(op) for op in loop.body if isinstance(op, mir.Loop)), default=0)
    return inner + (1 if _conflicting(loop) else 0)


def legalize(fn: mir.MirFunction, aggregation: Aggregation, own_outputs: bool = False) -> mir.MirFunction:
    """``fn`` with its conflicting loops' reduces privatised and folded (the module docstring);
    ``own_outputs``: no two trees add to the same output (:meth:`silvanforge.ir.hir.Forest.trees_own_outputs`),
    so no loop conflicts."""
    buffers: list[mir.PrivateBuffer] = []
    extents: dict[str, list] = {}
    conflicting = (lambda loop: False) if own_outputs else _conflicting

    def check_adding(loop: mir.Loop, privatised: tuple, directive: str, adds: str):
        """atomicReduce and orderedReduce: both add, and each must be its nest's only
        conflicting loop."""
        if aggregation not in (Aggregation.SUM, Aggregation.AVERAGE):
            raise ScheduleError(f"{directive}({loop.index}): {adds}, but this model "
                                f"takes the {aggregation.value} of its trees; drop {directive}")
        if privatised or _depth(loop) > 1:
            raise ScheduleError(f"{directive}({loop.index}) cannot share a loop nest with other "
                                "parallel loops over trees")

    def rewrite(ops: list, privatised: tuple, buffer: str | None, rows, atomic: bool,
                per_tree: bool = False) -> list:
        out = []
        for op in ops:
            if isinstance(op, mir.Reduce):
                slots = (op.tree,) if per_tree else tuple(_slot(loop) for loop in privatised)
                out.append(dataclasses.replace(
                    op, target=buffer if privatised else op.target, private=slots, atomic=atomic))
                continue
            if not isinstance(op, mir.Loop):
                out.append(op)
                continue
            inner_rows = rows
            if op.dimension == "batch":  # the rows one iteration of this loop owns
                inner_rows = (op.index, ("min", ("+", op.index, op.step), op.stop))
            if conflicting(op) and op.reduce == "atomic":
                check_adding(op, privatised, "atomicReduce", "atomic updates add")
                op.body = rewrite(op.body, privatised, buffer, inner_rows, True)
                out.append(op)
                continue
            if conflicting(op) and op.reduce == "ordered":
                check_adding(op, privatised, "orderedReduce", "the ordered fold adds")
                name = f"partial{len(buffers)}"
                buffers.append(mir.PrivateBuffer(name, (), ordered=True))
                extents[name] = [fn.num_trees]
                op.body = rewrite(op.body, (op,), name, inner_rows, False, per_tree=True)
                out.append(op)
                out.append(mir.ReduceDimension(source=name, target="margins", dim=0, extent=fn.num_trees,
                                               rows=rows, ordered=True))
                continue
            if not conflicting(op):
                op.body = rewrite(op.body, privatised, buffer, inner_rows, atomic, per_tree)
                out.append(op)
                continue
            level = privatised + (op,)
            name = buffer
            if name is None:
                name = f"partial{len(buffers)}"
                buffers.append(mir.PrivateBuffer(name, ()))
                extents[name] = [None] * _depth(op)
            if op.max_trip is None:
                raise ScheduleError(f"parallel({op.index}): a parallel loop over trees needs a trip "
                                    "count known when compiling")
            extents[name][len(level) - 1] = op.max_trip
            op.body = rewrite(op.body, level, name, inner_rows, atomic)
            out.append(op)
            out.append(mir.ReduceDimension(
                source=name, target=name if len(level) > 1 else "margins", dim=len(level) - 1,
                extent=op.max_trip, rows=rows, outer=tuple(_slot(loop) for loop in privatised),
                inplace=len(level) > 1, vector_width=op.vector_width if op.reduce == "vector" else 0,
                shared=op.reduce == "shared"))
        return out

    body = rewrite(fn.body, (), None, ("row_begin", "row_end"), False)
    for buf in buffers:
        # A shorter chain leaves deeper dimensions unused: give them one slice.
        buf.extents = tuple(e or 1 for e in extents[buf.name])
    return dataclasses.replace(fn, body=body, buffers=buffers)

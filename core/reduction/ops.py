"""The reduction dialect's operations (the SilvanForge paper draft, section 'Reductions'), used
inside MIR loop nests.

* ``reduce``: accumulate a value into an element of a (possibly privatised) buffer; the
  semantics guarantee every value is added exactly once whatever loops around it are parallel;
* ``reduce_dimension`` / ``reduce_dimension_inplace``: fold one privatised dimension, into the
  target or into slice 0 of the same buffer;
* a privatised buffer: one slice of the margins per iteration of each conflicting loop, or,
  under ``orderedReduce``, one per tree: the fold then adds them to the margins in tree order,
  so the sums are the reference's to the bit.

:mod:`silvanforge.reduction.legalize` introduces the last two; targets lower all three.
"""

from __future__ import annotations

import dataclasses

IndexExpr = object  # int | str | (op, a, b): see silvanforge.ir.mir


@dataclasses.dataclass
class Reduce:
    target: str  # "margins" or a privatised buffer made by legalisation
    row: IndexExpr
    tree: IndexExpr  # the tree whose outputs receive the value
    value: str
    op: str  # sum | average | min | max
    private: tuple = ()  # indices of the privatised dimensions (legalisation)
    atomic: bool = False


@dataclasses.dataclass
class ReduceDimension:
    """``target[rows] (op)= sum over d of source[d, rows]`` after a conflicting loop.

    ``inplace``: reduce into slot 0 of the same dimension (``reduce_dimension_inplace``).
    ``outer``: indices of the privatised dimensions before ``dim`` that stay fixed.
    """

    source: str
    target: str
    dim: int
    extent: int
    rows: tuple  # (start, stop) of the rows this iteration owns
    outer: tuple = ()
    inplace: bool = False
    vector_width: int = 0
    shared: bool = False  # sharedReduce: the slices live in GPU shared memory
    # orderedReduce: a slice per tree, added to the target one by one in tree order.
    ordered: bool = False


@dataclasses.dataclass
class PrivateBuffer:
    """A privatised copy of the margins: one slice per iteration of each conflicting loop."""

    name: str
    extents: tuple  # sizes of the privatised dimensions, outermost first
    # orderedReduce: one slice per tree, starting at -0.0 (x + -0.0 is x, -0.0 included).
    ordered: bool = False

"""The reduction dialect: ``reduce``, ``reduce_dimension``, ``reduce_dimension_inplace``, and the
legalisation that makes reductions correct under parallel loops (seed 004, section 6)."""

from .legalize import identity, legalize
from .ops import PrivateBuffer, Reduce, ReduceDimension

__all__ = ["PrivateBuffer", "Reduce", "ReduceDimension", "identity", "legalize"]

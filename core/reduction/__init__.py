"""The reduction dialect: ``reduce``, ``reduce_dimension``, ``reduce_dimension_inplace``, and the
legalisation that makes reductions correct under parallel loops (the SilvanForge paper draft,
section 'Reductions').

The operations are :mod:`.ops` (MIR holds them, so the IR imports this package); the
legalisation, which rewrites MIR, is :mod:`.legalize` and is imported from there, not from here:
that keeps the IR's import of the operations free of a circle back into the IR."""

from silvanforge.reduction.ops import PrivateBuffer, Reduce, ReduceDimension

__all__ = ["PrivateBuffer", "Reduce", "ReduceDimension"]

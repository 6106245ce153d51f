"""The bitvector representation: trees evaluated without walks, by QuickScorer's bitvectors in
SIMD lanes (:mod:`silvanforge_rep_bitvector.bitvector`), CPU targets only.

A *program* representation (``silvanforge_rep_kind``): it builds the whole LIR program from the
model as imported, so schedules, padding, tiles and tree reordering do not apply to it.  The
CPU default chooses it by cost (``silvanforge_rep_cost``) where it beats the core's walks.
"""

from __future__ import annotations

from silvanforge import hookimpl
from silvanforge.errors import InputError

from . import bitvector

NAME = bitvector.NAME


@hookimpl
def silvanforge_representations():
    return [NAME]


@hookimpl
def silvanforge_rep_kind(rep):
    return "program" if rep == NAME else None


@hookimpl
def silvanforge_rep_cost(forest, target_kind, batch_size):
    if target_kind != "cpu":
        return [(NAME, None, f"runs on cpu targets, not {target_kind} ones")]
    why = bitvector.unsupported(forest)
    if why is not None:
        return [(NAME, None, why)]
    if not bitvector.AUTO_CHOOSE:
        return [(NAME, None, "not chosen by default (AUTO_CHOOSE is off)")]
    return [(NAME, bitvector.cost_ns(forest, batch_size), "")]


@hookimpl
def silvanforge_rep_program(rep, forest, target_kind, batch_size):
    if rep != NAME:
        return None
    if target_kind != "cpu":
        raise InputError(f"the {NAME} representation runs on cpu targets, not {target_kind} ones")
    why = bitvector.unsupported(forest)
    if why is not None:
        raise InputError(f"the {NAME} representation cannot run this model: {why}")
    # Looked up at call time: tests count lowerings by replacing bitvector.lower.
    return bitvector.lower(forest, batch_size=None if batch_size is None else int(batch_size), checked=True)

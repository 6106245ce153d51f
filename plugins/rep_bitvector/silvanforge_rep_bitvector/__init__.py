"""The bitvector representation: trees evaluated without walks, by QuickScorer's bitvectors in
SIMD lanes (:mod:`silvanforge_rep_bitvector.bitvector` and the modules it names), CPU targets only.

A *program* representation (:class:`silvanforge.rep.ProgramRepresentation`): it builds the
whole LIR program from the model as imported, so schedules, padding, tiles and tree reordering
do not apply to it.  The CPU default chooses it by cost where it beats the core's walks.
"""

from __future__ import annotations

from silvanforge import hookimpl
from silvanforge.rep import InputError, ProgramRepresentation

from . import bitvector, choose

NAME = bitvector.NAME


class BitvectorForm(ProgramRepresentation):
    name = NAME

    @classmethod
    def cost(cls, forest, target_kind, batch_size):
        if target_kind != "cpu":
            return f"runs on cpu targets, not {target_kind} ones"
        why = bitvector.unsupported(forest)
        if why is not None:
            return why
        if not choose.AUTO_CHOOSE:
            return "not chosen by default (AUTO_CHOOSE is off)"
        return bitvector.cost_ns(forest, batch_size)

    def program(self, forest, target_kind, batch_size):
        if target_kind != "cpu":
            raise InputError(f"the {NAME} representation runs on cpu targets, not {target_kind} ones")
        why = bitvector.unsupported(forest)
        if why is not None:
            raise InputError(f"the {NAME} representation cannot run this model: {why}")
        # Looked up at call time: tests count lowerings by replacing bitvector.lower.
        return bitvector.lower(forest, batch_size=None if batch_size is None else int(batch_size), checked=True)


@hookimpl
def silvanforge_representation_types():
    return [BitvectorForm]

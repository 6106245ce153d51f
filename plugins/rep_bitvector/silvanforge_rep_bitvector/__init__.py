"""The bitvector representation: trees evaluated without walks, by QuickScorer's bitvectors in
SIMD lanes (:mod:`silvanforge_rep_bitvector.bitvector` and the modules it names), CPU targets only.

A *program* representation (:class:`silvanforge.rep.ProgramRepresentation`): it builds the
whole LIR program from the model as imported, so schedules, padding, tiles and tree reordering
do not apply to it.  The CPU default chooses it by cost where it beats the core's walks.  Its
options (``CompileOptions.rep_options``) are documented in :mod:`.options`.
"""

from __future__ import annotations

from silvanforge import hookimpl
from silvanforge.rep import InputError, ProgramRepresentation

from . import bitvector
from .choose import choose_form, vector_factor
from .options import OPTION_KEYS, BitvectorOptions
from .support import single_output

NAME = bitvector.NAME


class BitvectorForm(ProgramRepresentation):
    name = NAME
    option_keys = OPTION_KEYS

    @classmethod
    def check_options(cls, options):
        BitvectorOptions.from_mapping(options)

    @classmethod
    def refuses(cls, forest, target_kind, options=None):
        if target_kind != "cpu":
            return f"runs on cpu targets, not {target_kind} ones"
        why = bitvector.unsupported(single_output(forest))
        if why is not None:
            return why
        if not BitvectorOptions.from_mapping(options).auto_choose:
            return "not chosen by default (its option auto_choose is off)"
        return None

    @classmethod
    def cost(cls, forest, target_kind, batch_size, options=None, vectors=None):
        forest, options = single_output(forest), BitvectorOptions.from_mapping(options)
        return bitvector.cost_ns(forest, batch_size, options) * vector_factor(forest, batch_size, options, vectors)

    @classmethod
    def cost_called(cls, forest, target_kind, lowered_for, rows, options=None, vectors=None):
        """The program lowered for ``lowered_for`` rows answering ``rows``: its blocks are that
        program's lanes (32 for 64 rows), so a call of fewer rows pays a whole block; and it
        costs no less than the program lowered for ``rows`` (the mask tables' reads are
        shared by the rows of a call)."""
        at_rows = cls.cost(forest, target_kind, rows, options, vectors)
        lowered = cls.cost(forest, target_kind, lowered_for, options, vectors)
        lanes = choose_form(single_output(forest), lowered_for, BitvectorOptions.from_mapping(options))[0]
        return max(at_rows, lowered * -(-rows // lanes) * lanes / rows)

    def program(self, forest, target_kind, batch_size, vectors=None):
        if target_kind != "cpu":
            raise InputError(f"the {NAME} representation runs on cpu targets, not {target_kind} ones")
        forest = single_output(forest)
        why = bitvector.unsupported(forest)
        if why is not None:
            raise InputError(f"the {NAME} representation cannot run this model: {why}")
        # Looked up at call time: tests count lowerings by replacing bitvector.lower.
        return bitvector.lower(forest, batch_size=None if batch_size is None else int(batch_size), checked=True,
                               options=BitvectorOptions.from_mapping(self.options), vectors=vectors)


@hookimpl
def silvanforge_representation_types():
    return [BitvectorForm]

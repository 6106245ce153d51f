"""The oblivious representation: forests of symmetric (oblivious) trees, CatBoost's default,
where every node of a level tests the same split, so a depth-d tree is d compares whose bits
index its leaf array, with no walk at all (:mod:`.symmetric` recognises them, :mod:`.codegen`
builds the program, :mod:`.cost` prices it), CPU targets only.

A *program* representation (:class:`silvanforge.rep.ProgramRepresentation`): it builds the whole
LIR program from the model as imported, so schedules, padding, tiles and tree reordering do not
apply to it.  The CPU default chooses it by cost where it beats the walks and bitvectors.

Its one option (a key of ``CompileOptions.rep_options``): ``oblivious_auto_choose`` (bool,
default True), whether the CPU default may choose it by its cost; False leaves it to
``rep="oblivious"``.  It names the representation because ``rep_options`` is one mapping for
every installed representation (the bitvector representation's ``auto_choose`` is its own).
"""

from __future__ import annotations

from silvanforge import hookimpl
from silvanforge.rep import InputError, ProgramRepresentation

from . import codegen, cost, symmetric

NAME = codegen.NAME


AUTO_CHOOSE_KEY = "oblivious_auto_choose"


class ObliviousForm(ProgramRepresentation):
    name = NAME
    option_keys = (AUTO_CHOOSE_KEY,)

    @classmethod
    def check_options(cls, options):
        value = (options or {}).get(AUTO_CHOOSE_KEY, True)
        if not isinstance(value, bool):
            raise InputError(f"the oblivious option {AUTO_CHOOSE_KEY} must be True or False, got {value!r}")

    @classmethod
    def cost(cls, forest, target_kind, batch_size, options=None):
        if target_kind != "cpu":
            return f"runs on cpu targets, not {target_kind} ones"
        facts = symmetric.recognise(forest)
        if isinstance(facts, str):
            return facts
        if not (options or {}).get(AUTO_CHOOSE_KEY, True):
            return f"not chosen by default (its option {AUTO_CHOOSE_KEY} is off)"
        return cost.estimate_ns(facts, batch_size)

    def program(self, forest, target_kind, batch_size):
        if target_kind != "cpu":
            raise InputError(f"the {NAME} representation runs on cpu targets, not {target_kind} ones")
        facts = symmetric.recognise(forest)
        if isinstance(facts, str):
            raise InputError(f"the {NAME} representation cannot run this model: {facts}")
        return codegen.lower(forest, facts, None if batch_size is None else int(batch_size))


@hookimpl
def silvanforge_representation_types():
    return [ObliviousForm]

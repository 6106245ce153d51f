"""Two program representations that evaluate a block of rows a tree level at a time, one SIMD
lane a row, CPU targets only:

- ``oblivious``: forests of symmetric (oblivious) trees, CatBoost's default, where every node of
  a level tests the same split, so a depth-d tree is d compares whose bits index its leaf array,
  with no walk at all (:mod:`.symmetric` recognises them, :mod:`.codegen` builds the program,
  :mod:`.cost` prices it);
- ``levelwise``: trees of any shape up to depth 10, padded to complete trees, each lane's node of
  a level looked up by its path so far (:mod:`.complete` recognises them, :mod:`.levelwise`
  builds the program on :mod:`.codegen`'s, :func:`.cost.levelwise_ns` prices it).

A *program* representation (:class:`silvanforge.rep.ProgramRepresentation`): it builds the whole
LIR program from the model as imported, so schedules, padding, tiles and tree reordering do not
apply to it.  The CPU default chooses either by cost where it beats the walks and bitvectors.

Its options (keys of ``CompileOptions.rep_options``: whether the CPU default may choose it, the
spans large forests run in) are documented in :mod:`.options`.
"""

from __future__ import annotations

from silvanforge import hookimpl
from silvanforge.rep import InputError, ProgramRepresentation

from . import codegen, complete, cost, levelwise, symmetric, symmetric_bytes
from .options import OPTION_KEYS, ObliviousOptions

NAME = codegen.NAME


class _LevelForm(ProgramRepresentation):
    """What both forms share: the options, CPU targets only, a forest recognised (``facts``:
    the facts or why not), priced (``estimate``) and lowered (``lower``)."""

    option_keys = OPTION_KEYS
    facts = staticmethod(symmetric.recognise)
    estimate = staticmethod(cost.estimate_ns)
    lower = staticmethod(symmetric_bytes.lower)

    @classmethod
    def check_options(cls, options):
        ObliviousOptions.from_mapping(options)

    @classmethod
    def refuses(cls, forest, target_kind, options=None):
        if target_kind != "cpu":
            return f"runs on cpu targets, not {target_kind} ones"
        facts = cls.facts(forest)
        if isinstance(facts, str):
            return facts
        if not ObliviousOptions.from_mapping(options).auto_choose:
            return "not chosen by default (its option oblivious_auto_choose is off)"
        return None

    @classmethod
    def cost(cls, forest, target_kind, batch_size, options=None, vectors=None):
        # (the facts are remembered for the forest: refuses read them first)
        return cls.estimate(cls.facts(forest), batch_size, vectors)

    def program(self, forest, target_kind, batch_size, vectors=None):
        if target_kind != "cpu":
            raise InputError(f"the {self.name} representation runs on cpu targets, not {target_kind} ones")
        facts = self.facts(forest)
        if isinstance(facts, str):
            raise InputError(f"the {self.name} representation cannot run this model: {facts}")
        return self.lower(forest, facts, None if batch_size is None else int(batch_size),
                          options=ObliviousOptions.from_mapping(self.options), vectors=vectors)


class ObliviousForm(_LevelForm):
    name = NAME

    @classmethod
    def cost_called(cls, forest, target_kind, lowered_for, rows, options=None, vectors=None):
        """The byte program (:func:`.cost.byte_lanes` rows a block: 64 on AVX-512) lowered for
        ``lowered_for`` rows answering ``rows``: its whole blocks' cost (:func:`.cost.symmetric_bytes_ns`)."""
        facts = cls.facts(forest)
        binning = None if isinstance(facts, str) else cost.symmetric_binned(facts, lowered_for)
        if binning is None:
            return cls.cost(forest, target_kind, rows, options, vectors)
        return cost.symmetric_bytes_ns(binning, rows, vectors, cost.byte_lanes(lowered_for, vectors))


class LevelwiseForm(_LevelForm):
    """Trees of any shape up to depth :data:`.complete.MAX_DEPTH`, padded to complete trees and
    walked a level at a time for a block of rows, one SIMD lane a row (:mod:`.complete`)."""

    name = levelwise.NAME
    facts = staticmethod(complete.recognise)
    estimate = staticmethod(cost.levelwise_ns)
    lower = staticmethod(levelwise.lower)

    @classmethod
    def cost_called(cls, forest, target_kind, lowered_for, rows, options=None, vectors=None):
        """The byte program (a register of rows a block: 64 on AVX-512) lowered for
        ``lowered_for`` rows answering ``rows``: a whole block's cost; the float program's cost
        does not depend on it."""
        estimate = cls.cost(forest, target_kind, rows, options, vectors)
        facts = complete.recognise(forest)
        binning = cost.levelwise_binned(facts, lowered_for)
        form = cost.shape(vectors)
        return estimate if binning is None else form.binned * cost.binned_ns(facts, binning, rows, form.bytes)


@hookimpl
def silvanforge_representation_types():
    return [ObliviousForm, LevelwiseForm]

"""The program digest (:func:`silvanforge.lowering.program.lir_digest`) that keys machine code in
the code cache and in saved artifacts: module info that steers code generation
(:data:`silvanforge.ir.lir.CODEGEN_INFO`) is part of it, other info is not."""

from __future__ import annotations

import copy

import numpy as np

import silvanforge as sf
from silvanforge.ir import lir
from silvanforge.ir.hir import Forest
from silvanforge.lowering.program import lir_digest
from silvanforge.testing import random_tree


def _forest(seed: int, features: int, depth: int) -> Forest:
    rng = np.random.default_rng(seed)
    return Forest(trees=[random_tree(rng, features, (0,), depth, [0, 1], False, True) for _ in range(8)],
                  num_features=features)


def _module():
    return sf.lower(_forest(4, 5, 4), batch_size=64).lir


DEFAULTS = {"vector_walk": False, "light_optimisation": False, "machine_scheduler": True}


def test_codegen_info_is_part_of_the_digest():
    """A key set to what its absence means keeps the digest (the same machine code); set
    otherwise, it changes it."""
    module = _module()
    base = lir_digest(module)
    assert lir_digest(copy.copy(module)) == base
    assert set(DEFAULTS) == set(lir.CODEGEN_INFO)
    for key in lir.CODEGEN_INFO:
        for value in (True, False):
            other = copy.copy(module)
            other.info = {**module.info, key: value}
            if module.info.get(key, DEFAULTS[key]) == value:
                assert lir_digest(other) == base
            else:  # the same statements compiled another way: other machine code
                assert lir_digest(other) != base, (key, value)


def test_other_info_is_not():
    module = _module()
    other = copy.copy(module)
    other.info = {**module.info, "nodes": 12345, "walk_steps_per_row": 7}
    assert lir_digest(other) == lir_digest(module)


def test_a_program_without_the_machine_scheduler_is_keyed_apart():
    """The AVX2 levelwise byte program asks for LLVM's machine scheduler off: its digest is not
    that of the same statements with the scheduler on."""
    module = sf.lower(_forest(9, 12, 6), rep="levelwise", cpu="x86-64-v3", batch_size=300).lir
    assert module.info["machine_scheduler"] is False
    scheduled = copy.copy(module)
    scheduled.info = {k: v for k, v in module.info.items() if k != "machine_scheduler"}
    assert lir_digest(scheduled) != lir_digest(module)

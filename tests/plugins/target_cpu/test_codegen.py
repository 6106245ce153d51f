"""The CPU target's LLVM IR: a constant is made once for every use of the same type and value,
and prints as one made a use does (0.0 and -0.0 told apart); the program is exact."""

from __future__ import annotations

import dataclasses

import numpy as np
from llvmlite import ir
from silvanforge_target_cpu import codegen

import silvanforge as sf
from silvanforge import CompileOptions
from silvanforge.runtime import reference
from silvanforge.testing import random_forest, rows_for


def test_shared_constants_print_as_constants_made_a_use(monkeypatch):
    forest = random_forest(5, max_trees=8, max_depth=5, plain=True, summed=True)
    thresholds = np.array([0.0, -0.0, 0.5, 0.5, -1.25, 3.0])
    trees = []
    for k, t in enumerate(forest.trees):
        t = dataclasses.replace(t, threshold=t.threshold.copy())
        internal = np.flatnonzero(t.left >= 0)
        t.threshold[internal] = thresholds[(np.arange(len(internal)) + k) % len(thresholds)]
        trees.append(t)
    forest = dataclasses.replace(forest, trees=trees)
    options = CompileOptions(rep_options={"expand_nodes": 10**9, "narrow": False, "mask_tables": False})
    cf = sf.compile(forest, rep="bitvector", batch_size=16, options=options)
    module = cf.forms[0].lir_module
    shared = str(codegen.generate(module))
    made = codegen.LLVMCodegen.constant

    def fresh(self, e):  # a constant a use
        self._constants.clear()
        return made(self, e)

    monkeypatch.setattr(codegen.LLVMCodegen, "constant", fresh)
    assert str(codegen.generate(module)) == shared
    for zero in (0.0, -0.0):  # both thresholds, each as llvmlite prints it
        assert f"splat ({ir.Constant(ir.DoubleType(), zero)})" in shared
    rows = rows_for(forest, np.random.default_rng(2), 300)
    np.testing.assert_array_equal(cf.predict(rows, output_margin=True),
                                  reference.predict(forest, rows, output_margin=True))


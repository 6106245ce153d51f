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



_IR_DIGESTS = """
import hashlib, sys
import silvanforge as sf
from silvanforge_target_cpu import codegen
from silvanforge.testing import random_forest
forest = random_forest(7, max_trees=12, max_depth=6, summed=True)
for rep in ("sparse", "bitvector", "array"):
    cf = sf.compile(forest, rep=rep, batch_size=16)
    print(rep, hashlib.sha256(str(codegen.generate(cf.forms[0].lir_module)).encode()).hexdigest())
"""


def test_the_same_program_prints_the_same_ir_in_every_process():
    """The IR text does not follow the process's hash seed (what a set of names would iterate
    in): the same program, the same code, wherever it is compiled."""
    import os
    import subprocess
    import sys

    printed = set()
    for seed in ("1", "2", "3"):
        run = subprocess.run([sys.executable, "-c", _IR_DIGESTS], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert run.returncode == 0, run.stderr[-2000:]
        assert len(run.stdout.splitlines()) == 3
        printed.add(run.stdout)
    assert len(printed) == 1

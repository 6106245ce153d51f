"""Compiled CPU predictions equal the training library's on models trained in the tests.

The model factories are the importer tests' own (``support_*.cases``), so every format,
objective and split kind they cover is compiled here too, with every representation and both
loop orders.
"""

from __future__ import annotations


import numpy as np
import pytest

import silvanforge as sf
from silvanforge.options import CompileOptions
from support_common import assert_close

LIBRARIES = ["xgboost", "lightgbm", "onnx"]


@pytest.fixture(scope="module", params=LIBRARIES)
def library_cases(request, model_cases):
    return model_cases[request.param].all(quick=False)


SCHEDULES = {
    "rows-outer": "parallel(batch)",
    "trees-outer": "reorder(tree, batch)",
    # XGBoost's own loop order (the SilvanForge paper draft, section 'The XBoost Schedule') with a
    # tile that leaves remainders.
    "xgboost": "tile(batch, b0, b1, 7)\nreorder(b0, tree, b1)\nparallel(b0)",
    "interleaved": "tile(batch, b0, b1, 4)\nreorder(b0, tree, b1)\ninterleave(b1)\nunrollWalk(b1, 2)",
}


@pytest.mark.parametrize("rep", ["array", "sparse"])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_compiled_equals_library(library_cases, rep, schedule):
    assert library_cases, "the factory returned no models"
    for case in library_cases:
        try:
            cf = sf.compile(case.path, rep=rep, schedule=SCHEDULES[schedule])
        except sf.UnsupportedModelError as exc:
            # Only the array layout may refuse, and only for trees too deep to pad.
            assert rep == "array" and "sparse" in str(exc), f"{case.name}: {exc}"
            continue
        assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)
        if case.expected_margin is not None:
            assert_close(cf.predict(case.X, output_margin=True, **case.predict_kwargs),
                         case.expected_margin, case, "margins")


def test_default_choices_and_float32_inputs(library_cases):
    # The main form only (the one answering these many-row batches): the plan's small-request
    # forms are checked band by band in tests/core/plan/test_plan.py, and compiling them here
    # took a quarter of this test's time.
    main_only = CompileOptions(plan_min_ns=1e12)
    for case in library_cases:
        cf = sf.compile(case.path, options=main_only)  # representation and schedule chosen by the compiler
        assert len(cf.forms) == 1 and case.X.shape[0] > 2
        assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)
        # A float32 copy of the inputs must give what the library gives on that copy; the
        # libraries that compare in float32 give the same answer as for float64 inputs.
        with np.errstate(over="ignore"):  # huge test values become inf, as in the library
            X32 = case.X.astype(np.float32)
        if sf.load_model(case.path).threshold_dtype == "float32":
            assert_close(cf.predict(X32, **case.predict_kwargs), case.expected, case, "float32 inputs")

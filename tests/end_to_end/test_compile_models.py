"""Compiled CPU predictions equal the training library's on models trained in the tests.

The model factories are the importer tests' own (``support_*.cases``), so every format,
objective and split kind they cover is compiled here too: their representative cases with every
representation and loop order, each other case with one of them (:func:`spread`).
"""

from __future__ import annotations


import numpy as np
import pytest

import silvanforge as sf
from silvanforge.options import CompileOptions
from support_common import assert_close

LIBRARIES = ["xgboost", "lightgbm", "onnx"]


@pytest.fixture(scope="module", params=LIBRARIES)
def library(request):
    return request.param


@pytest.fixture(scope="module")
def library_cases(library, model_cases):
    return model_cases[library].all(quick=False)


def spread(cases, quick: list, variant: int, variants: int):
    """The cases a variant of a test compiles: the representative ones, and every ``variants``-th
    other from the ``variant``-th, so that each case is compiled by one variant at least (every
    case by every variant took 3.5 minutes of the suite; objectives, formats and split kinds do
    not meet the loop order or the layout but in the representative cases)."""
    quick = set(quick)
    others = [case for case in cases if case.name not in quick]
    return [case for case in cases if case.name in quick] + others[variant % variants::variants]


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
def test_compiled_equals_library(library, library_cases, model_cases, rep, schedule):
    assert library_cases, "the factory returned no models"
    variant = list(SCHEDULES).index(schedule) * 2 + ["array", "sparse"].index(rep)
    for case in spread(library_cases, model_cases[library].names(quick=True), variant, 2 * len(SCHEDULES)):
        try:
            cf = sf.compile(case.path, rep=rep, schedule=SCHEDULES[schedule])
        except sf.UnsupportedModelError as exc:
            # Only the array layout may refuse, and only for trees too deep to pad; the case is
            # then checked in the layout the refusal names (it may be this variant's alone)
            assert rep == "array" and "sparse" in str(exc), f"{case.name}: {exc}"
            cf = sf.compile(case.path, rep="sparse", schedule=SCHEDULES[schedule])
        assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)
        _check_float32_inputs(cf, case)
        if case.expected_margin is not None:
            assert_close(cf.predict(case.X, output_margin=True, **case.predict_kwargs),
                         case.expected_margin, case, "margins")


def test_default_choices(library, library_cases, model_cases):
    # The main form only (the one answering these many-row batches): the plan's small-request
    # forms are checked band by band in tests/core/plan/test_plan.py, and compiling them here
    # took a quarter of this test's time.  The representative cases and a quarter of the others
    # (a default form compiles in about a second: the others' objectives are checked above).
    main_only = CompileOptions(plan_min_ns=1e12)
    for case in spread(library_cases, model_cases[library].names(quick=True), 0, 4):
        cf = sf.compile(case.path, options=main_only)  # representation and schedule chosen by the compiler
        assert len(cf.forms) == 1 and case.X.shape[0] > 2
        assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)
        _check_float32_inputs(cf, case)


def _check_float32_inputs(cf, case):
    """A float32 copy of the inputs gives what the library gives on that copy: the libraries
    that compare in float32 give the same answer as for float64 inputs."""
    with np.errstate(over="ignore"):  # huge test values become inf, as in the library
        X32 = case.X.astype(np.float32)
    if sf.load_model(case.path).threshold_dtype == "float32":
        assert_close(cf.predict(X32, **case.predict_kwargs), case.expected, case, "float32 inputs")

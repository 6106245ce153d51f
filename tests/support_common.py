"""What a model factory in ``tests/support_*.py`` hands to the differential tests.

Each ``support_<library>.py`` module exposes ``cases(tmp_path, quick=False) -> list[Case]``:
models trained (or built) on generated data, saved to a file, with the training library's own
predictions on inputs that include NaN.  The importer tests compare these with the reference
evaluator; the target tests compile the same files and compare again.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np


@dataclasses.dataclass
class Case:
    name: str
    path: Path
    X: np.ndarray
    expected: np.ndarray  # what the library's predict returns for X
    expected_margin: np.ndarray | None = None  # output_margin=True / raw_score, where the library has it
    rtol: float = 1e-6
    atol: float = 1e-6
    predict_kwargs: dict = dataclasses.field(default_factory=dict)  # e.g. {"missing": 0.0}

    def __repr__(self) -> str:  # short ids in pytest output
        return self.name


def assert_close(actual, expected, case: Case, what: str = "predictions") -> None:
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{case.name}: {what} shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=case.rtol, atol=case.atol,
                               err_msg=f"{case.name}: {what}")


def with_nans(X: np.ndarray, rng: np.random.Generator, frac: float = 0.1) -> np.ndarray:
    X = X.copy()
    X[rng.random(X.shape) < frac] = np.nan
    return X


def record_small_calls(cf, record) -> None:
    """Wrap every small call of ``cf``'s lean path (each form's, by request size) so that
    ``record(rows, result)`` sees each request it answers."""
    wrapped = {}

    def wrap(small):
        if small is None:
            return None
        if id(small) not in wrapped:
            def call(rows, apply=False, *threads, small=small):
                result = small(rows, apply, *threads)
                record(rows, result)
                return result
            wrapped[id(small)] = call
        return wrapped[id(small)]

    cf.wait()  # (every form's small calls: the whole plan's)
    cf._small_for = [(wrap(s), splits) for s, splits in cf._small_for]


def without_opencl(why: str, module: bool = False):
    """Skip a test of the amd target where no OpenCL platform works, or fail it where one must
    (``SILVANFORGE_REQUIRE_OPENCL=1``, which CI sets after installing one): a CI run never
    passes without having tested the target."""
    import os

    import pytest

    if os.environ.get("SILVANFORGE_REQUIRE_OPENCL", "") not in ("", "0"):
        pytest.fail(f"SILVANFORGE_REQUIRE_OPENCL is set, but the amd target cannot run here: {why}",
                    pytrace=False)
    pytest.skip(f"no OpenCL platform: {why}", allow_module_level=module)


def errors_in_threads(work, args: list) -> list:
    """Run ``work(a)`` for each ``a`` of ``args`` on a thread of its own, all at once, and return
    what they raised (an assertion failing in a thread does not fail the test by itself)."""
    import threading

    errors = []

    def run(a):
        try:
            work(a)
        except Exception as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors

"""What a model factory in ``tests/support_*.py`` hands to the differential tests.

Each ``support_<library>.py`` module (xgboost, lightgbm, onnx) exposes ``case_names(quick=False)``
and ``build_case(name, folder) -> Case``: models trained (or built) on generated data, saved to
a file, with the training library's own predictions on inputs that include NaN, each case from a
generator seeded by its name.  The importer tests compare these with the reference evaluator;
the target, representation and end-to-end tests compile the same files and compare again.  They
all read them through one cache (:class:`CaseCache`, the session fixture ``model_cases``), so a
case is trained once a session.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
from pathlib import Path

import numpy as np

# The folder of the helper modules (this one's) and the repository's root, for tests that read
# the repository or start a child Python there, wherever the test module itself sits.
TESTS = Path(__file__).resolve().parent
REPOSITORY = TESTS.parent


@dataclasses.dataclass(frozen=True)  # shared by every test that reads it (CaseCache)
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


class LibraryCases:
    """One library's cases (``support_<library>.py``), each built the first time it is asked
    for, into a folder of its own, and kept: tests read a case, never change it."""

    def __init__(self, library: str, folder: Path):
        self.factory = importlib.import_module(f"support_{library}")
        self.folder = folder
        self._built: dict[str, Case] = {}

    def names(self, quick: bool = False) -> list[str]:
        return self.factory.case_names(quick)

    def get(self, name: str) -> Case:
        if name not in self._built:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._built[name] = self.factory.build_case(name, self.folder)
        return self._built[name]

    def all(self, quick: bool = False) -> list[Case]:
        """Every case of the factory (``quick``: its representative subset), in its order."""
        return [self.get(name) for name in self.names(quick)]


class CaseCache:
    """The model factories' cases, each trained once for every test that reads it (the session
    fixture ``model_cases`` in tests/conftest.py): ``cache["xgboost"].get("binary_nan")``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._libraries: dict[str, LibraryCases] = {}

    def __getitem__(self, library: str) -> LibraryCases:
        if library not in self._libraries:
            self._libraries[library] = LibraryCases(library, self.root / library)
        return self._libraries[library]


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
    """Wrap every small call of ``cf``'s lean path (each form's, by request size, and each
    form's own, which one-thread calls of more rows take) so that ``record(rows, result)`` sees
    each request it answers."""
    wrapped = {}

    def wrap(small):
        if small is None:
            return None
        if id(small) not in wrapped:
            def call(rows, apply=False, *threads, small=small):
                result = small(rows, apply, *threads)
                record(rows, result)
                return result
            call.reads_tuples = getattr(small, "reads_tuples", False)  # (row tuples: read as the call reads them)
            wrapped[id(small)] = call
        return wrapped[id(small)]

    cf.wait()  # (every form's small calls: the whole plan's)
    cf._small_for = [(wrap(s), splits) for s, splits in cf._small_for]
    for form in cf.forms:
        form.small = wrap(form.small)


class Draws:
    """What a property test's draws came to, counted by outcome, for the test to assert that enough
    of them reached what it checks, as the fuzz suites count their mutants: a property whose draws
    are mostly refused, rejected (``assume``) or skip the check passes while checking little.

    The test runs its ``@given`` function itself, then asserts::

        draws = Draws()

        @settings(...)
        @given(...)
        def check(forest):
            if refused(forest):
                draws.count("refused")
                return
            ...
            draws.count("compiled")

        check()
        draws.assert_share("compiled", 0.3)
    """

    def __init__(self):
        self.counts = collections.Counter()

    def count(self, outcome: str) -> None:
        self.counts[outcome] += 1

    def share(self, outcome: str) -> float:
        total = sum(self.counts.values())
        return self.counts[outcome] / total if total else 0.0

    def assert_share(self, outcome: str, at_least: float) -> None:
        assert self.counts[outcome] and self.share(outcome) >= at_least, (
            f"{self.share(outcome):.0%} of the draws were {outcome!r} (at least {at_least:.0%} should be): "
            f"{dict(self.counts)}")


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


def normal_rows(n: int, features: int, seed: int = 0, nan: float = 0.1) -> np.ndarray:
    """``n`` rows of standard normal features, a ``nan`` fraction of them missing."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, features))
    X[rng.random(X.shape) < nan] = np.nan
    return X


def labelled(X: np.ndarray, classes: int = 3) -> np.ndarray:
    """Class labels of rows by quantiles of a score of their first two features (NaN as 0)."""
    score = np.nan_to_num(X[:, 0]) + 0.5 * np.nan_to_num(X[:, 1])
    return np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))


# Arrow's number types, as NumPy names them (float16 read by pyarrow's conversions alone)
ARROW_NUMBER_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
                      "float64"]


def arrow_number_columns(rng: np.random.Generator, n: int, types: list[str] = ARROW_NUMBER_TYPES):
    """A pyarrow column of each of ``types`` with nulls (64-bit integers past 2**53 with their low
    bits set, where float32 rows round them twice), and the same values as float64 rows, nulls NaN."""
    import pyarrow as pa

    columns, X = [], np.empty((n, len(types)))
    for j, name in enumerate(types):
        dtype = np.dtype(name)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            values = rng.integers(max(info.min, -(2 ** 62)), info.max, n, dtype=dtype, endpoint=True)
            if dtype.itemsize == 8:
                values = values // 64 * 64 + rng.integers(0, 64, n).astype(dtype)
        else:
            values = (rng.normal(size=n) * 100).astype(dtype)
        nulls = rng.random(n) < 0.1
        columns.append(pa.array(values, mask=nulls))
        X[:, j] = np.where(nulls, np.nan, [float(v) for v in values.tolist()])
    return columns, X

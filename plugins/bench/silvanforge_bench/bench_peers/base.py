"""What every ``forge bench`` peer is built from: engines, the context a peer is made in, helpers."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from importlib import metadata

import numpy as np


class PeerUnavailable(Exception):
    """A peer that cannot run here for a reason the user can fix; its message becomes the note."""


@dataclasses.dataclass
class PeerContext:
    """Everything a peer factory may need; factories take this and return an :class:`Engine`."""

    path: str  # the model file
    fmt: str  # its format, as the importers name it ("xgboost-json", "lightgbm-text", "onnx", ...)
    num_features: int
    threads: list[int]  # every thread count the bench will time
    workdir: str  # a temporary directory removed after the bench
    cache_dir: str  # kept between runs: built libraries keyed by the model's hash
    lleaves_venv: str | None = None  # an environment for lleaves, built there if missing
    progress: Callable[[str], None] | None = None  # say what a long step is doing

    def say(self, what: str) -> None:
        if self.progress is not None:
            self.progress(what)


class Engine:
    """Something that predicts rows.

    ``prepare`` converts inputs to the engine's own container outside the timed region;
    ``set_threads`` is called (untimed) before the timings of each thread count.  ``versions``
    (distribution -> version) and ``build_seconds`` / ``cached`` (time to build the engine, not
    counted in rows/s; ``cached`` when a previous build was reused, whose time, when known, is
    ``first_build_seconds``) end up in the report.
    """

    name = "?"
    external = False  # True: times itself (see ExternalEngine)
    # True: predictions that differ from ours skip the engine with a note instead of being timed
    # (a converter known to mispredict some models it accepts).
    must_agree = False

    def __init__(self) -> None:
        self.note: str | None = None
        self.versions: dict[str, str] = {}
        self.build_seconds: float | None = None
        self.build_what: str = "build"
        self.cached = False
        self.first_build_seconds: float | None = None

    def prepare(self, X: np.ndarray):
        return X

    def set_threads(self, threads: int) -> None:
        pass

    def predict(self, prepared) -> np.ndarray:
        raise NotImplementedError


class Call(Engine):
    """An engine from functions: ``predict(prepared, threads)``, ``prepare(X)``, ``on_threads(n)``."""

    def __init__(self, name: str, predict: Callable, prepare: Callable | None = None,
                 on_threads: Callable[[int], None] | None = None,
                 versions: dict[str, str] | None = None) -> None:
        super().__init__()
        self.name, self._predict, self._prepare, self._on_threads = name, predict, prepare, on_threads
        self.threads = 1
        self.versions = dict(versions or {})

    def prepare(self, X):
        return X if self._prepare is None else self._prepare(X)

    def set_threads(self, threads: int) -> None:
        self.threads = threads
        if self._on_threads is not None:
            self._on_threads(threads)

    def predict(self, prepared):
        return self._predict(prepared, self.threads)


class ExternalEngine(Engine):
    """An engine that runs (and times itself) somewhere else, e.g. in another Python environment."""

    external = True

    def measure(self, X: np.ndarray, batch_sizes: Sequence[int], threads: Sequence[int],
                repeat: int, min_time: float, check_rows: int | None = None
                ) -> tuple[np.ndarray, dict[tuple[int, int], float]]:
        """(predictions for the first ``check_rows`` rows of ``X`` (all by default),
        {(threads, batch size): best seconds per call}); each timing cycles through
        ``_timing.rotation(X, batch)``."""
        raise NotImplementedError


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions(*dists: str) -> dict[str, str]:
    return {d: v for d in dists if (v := version(d))}


def record_build(artifact: str, seconds: float) -> None:
    """Remember how long ``artifact`` took to build, for runs that find it cached."""
    try:
        with open(artifact + ".json", "w") as f:
            json.dump({"build_seconds": seconds}, f)
    except OSError:
        pass


def recorded_build(artifact: str) -> float | None:
    try:
        with open(artifact + ".json") as f:
            return float(json.load(f)["build_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def model_digest(path: str) -> str:
    """A short hash of the model file's bytes: built libraries are cached under it."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:20]


CACHE_ENV = "SILVANFORGE_BENCH_CACHE"


def cache_root() -> str:
    """Where built peer libraries are kept between runs: $SILVANFORGE_BENCH_CACHE or the user's
    cache directory, private to the user (libraries found there are loaded and run)."""
    from silvanforge.artifact.userdirs import cache_home, private_dir

    return private_dir(os.environ.get(CACHE_ENV) or os.path.join(cache_home(), "bench"))


@contextlib.contextmanager
def quiet_output():
    """Send what native code writes to fds 1 and 2 to a file (tl2cgen and treelite log from C++).

    Yields a function returning what was written, so a failure can quote it.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = []
        try:
            for fd in (1, 2):
                saved.append((fd, os.dup(fd)))
                os.dup2(sink.fileno(), fd)
        except OSError:  # no real fds (an embedded interpreter): leave output alone
            for fd, copy in saved:
                os.dup2(copy, fd)
                os.close(copy)
            saved = []

        def captured() -> str:
            sink.flush()
            sink.seek(0)
            return sink.read().decode("utf-8", "replace")

        try:
            yield captured
        finally:
            for fd, copy in saved:
                os.dup2(copy, fd)
                os.close(copy)

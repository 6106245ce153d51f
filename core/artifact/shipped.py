"""A compiled model shipped to the workers of a cluster engine (:mod:`silvanforge.spark`,
:mod:`silvanforge.ray`, :mod:`silvanforge.dask`): the bytes of its artifact, made once where the
job is defined and loaded once per worker process.

Why the artifact and not the model object: an object whose class lives in the driver's
``__main__`` (or in any module the workers cannot import) does not unpickle on a worker, and
the artifact holds the model as plain arrays.  Why the bytes and not the compiled model pickled
(which goes through the same artifact): the load happens here, where it is done once per process
for every task of the model (keyed by the model's fingerprint and the artifact's digest), and
where a worker whose CPU differs from the host the machine code was built on can say, once in its
log, that it rebuilt the model's forms from the model inside the artifact (exact, only slower to
start) rather than warn at every unpickling.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import warnings
from collections import OrderedDict

from silvanforge.artifact.store import load_compiled
from silvanforge.errors import ArtifactWarning
from silvanforge.frontend.loading import is_artifact
from silvanforge.plan.forms import host_key
from silvanforge.runtime.compiled import CompiledForest

log = logging.getLogger("silvanforge")

# Models a worker process keeps loaded (a job scores with one or two; a long-lived worker that
# meets many keeps the most recent).
KEPT = 8
LOADS_KEPT = 64  # the last loads loads_here() reports

_loaded: OrderedDict = OrderedDict()  # (fingerprint, digest) -> CompiledForest
_loads: list[dict] = []  # what this process loaded, for loads_here()
_lock = threading.Lock()


def compiled_model(model) -> CompiledForest:
    """``model`` as a compiled model, where the job is defined: a :class:`CompiledForest` as it
    is, a saved artifact's path loaded (its plan kept; its code runs where it is signed with your
    key), a fitted :mod:`silvanforge.sklearn` estimator's compiled model, anything else
    :func:`silvanforge.compile` takes (a model file's path or bytes, a model object) compiled for
    this host."""
    if isinstance(model, CompiledForest):
        return model
    if isinstance(getattr(model, "compiled_", None), CompiledForest):  # (a fitted CompiledEstimator)
        return model.compiled_
    if isinstance(model, ShippedModel):
        return model.load()
    if isinstance(model, (str, os.PathLike)) and is_artifact(model):
        return load_compiled(model)
    from silvanforge.api import compile as compile_model  # (the compiler: only where one is compiled)

    return compile_model(model)


class ShippedModel:
    """What a worker receives: the artifact's bytes, the model's fingerprint, the artifact's
    digest, and the host key and target of the machine code inside (for the worker's log)."""

    __slots__ = ("artifact", "fingerprint", "digest", "host", "target")

    def __init__(self, artifact: bytes, fingerprint: str, host: str | None, target: str):
        self.artifact, self.fingerprint, self.host, self.target = artifact, fingerprint, host, target
        self.digest = hashlib.sha256(artifact).hexdigest()

    @classmethod
    def of(cls, model) -> "ShippedModel":
        """The shipment of ``model`` (anything :func:`compiled_model` takes), made once, where the
        job is defined."""
        if isinstance(model, ShippedModel):
            return model
        cf = compiled_model(model)
        shipped = cls(cf.to_bytes(), cf.forest.fingerprint(), host_key(cf.target), cf.target)
        # This process holds the model already: an engine that runs tasks here too (Dask's
        # threaded and synchronous schedulers) scores with it rather than load it again.
        with _lock:
            _loaded[(shipped.fingerprint, shipped.digest)] = cf
            while len(_loaded) > KEPT:
                _loaded.popitem(last=False)
        return shipped

    def __dask_tokenize__(self):
        # (Dask names a graph key by its value: these say it, where hashing the bytes again would cost)
        return ("silvanforge.ShippedModel", self.fingerprint, self.digest)

    def __getstate__(self):
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state):
        for name in self.__slots__:
            setattr(self, name, state[name])

    def load(self) -> CompiledForest:
        """The compiled model in this process: loaded at the first call, the same object after
        (from any thread)."""
        key = (self.fingerprint, self.digest)
        found = _loaded.get(key)
        if found is not None:
            return found
        with _lock:  # one load a process, however many tasks or threads ask at once
            found = _loaded.get(key)
            if found is None:
                found = _loaded[key] = self._load_here()
                while len(_loaded) > KEPT:
                    _loaded.popitem(last=False)
        return found

    def _load_here(self) -> CompiledForest:
        start = time.perf_counter()
        # Trusted as a pickle is (CompiledForest.__reduce__): these bytes were written by the
        # process that defined the job and reached this one through the engine's own channel.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cf = load_compiled(self.artifact, trust_code=True)
        seconds = time.perf_counter() - start
        said = [str(w.message) for w in caught if issubclass(w.category, ArtifactWarning)]
        for w in caught:  # anything else is the caller's to see, as it would have been
            if not issubclass(w.category, ArtifactWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        _loads.append({"fingerprint": self.fingerprint, "digest": self.digest, "rebuilt": bool(said),
                       "seconds": round(seconds, 3), "pid": os.getpid()})
        del _loads[:-LOADS_KEPT]
        if said:
            log.warning("silvanforge: model %s: this worker (CPU %s) is not the host its machine code was "
                        "built on (CPU %s): rebuilt from the model inside the artifact in %.1f s, once in "
                        "this process; predictions are the same (%s)", self.fingerprint[:12],
                        host_name(host_key(self.target)), host_name(self.host), seconds, "; ".join(said))
        return cf


def loads_here() -> list[dict]:
    """The models this process loaded from shipments, in order: fingerprint, artifact digest,
    whether the machine code was rebuilt here, the seconds the load took, the process id."""
    return [dict(entry) for entry in _loads]


def host_name(key: str | None) -> str:
    """A host key as a person reads it: the CPU's name where the key says it."""
    if key is None:
        return "unknown"
    try:
        found = json.loads(key)
    except (TypeError, ValueError):
        return str(key)[:60]
    return str(found.get("cpu", key))[:60] if isinstance(found, dict) else str(key)[:60]


__all__ = ["ShippedModel", "compiled_model", "loads_here", "host_name", "KEPT"]

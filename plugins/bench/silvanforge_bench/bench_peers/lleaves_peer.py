"""lleaves: LightGBM models compiled with LLVM (llvmlite).

lleaves needs llvmlite < 0.44 (it uses the legacy pass manager that 0.44 removed), and this project
may have a newer llvmlite.  Then lleaves runs from its own virtual environment, in a subprocess
(``lleaves_worker.py``) that loads the same rows from an .npy file, compiles the model (the object
code is cached by the model's hash), warms up, times best-of-R for every batch size and thread
count, and writes predictions (.npy) and timings (.json) back.

The environment is, in this order: ``--lleaves-venv PATH`` / ``run_bench(lleaves_venv=PATH)``,
``$SILVANFORGE_LLEAVES_VENV``, or ``~/.cache/silvanforge/lleaves-venv`` if it exists.  A path
named by the option or the variable is built on demand when missing (``python -m venv`` plus
``pip install lleaves "llvmlite<0.44"``); ``python benchmarks/lleaves_env.py`` builds the default.
If lleaves is importable here with an old enough llvmlite, it simply runs in-process.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time

import numpy as np

from .base import (
    Call,
    ExternalEngine,
    PeerContext,
    PeerUnavailable,
    importable,
    model_digest,
    record_build,
    recorded_build,
    version,
)

VENV_ENV = "SILVANFORGE_LLEAVES_VENV"
TIMEOUT_ENV = "SILVANFORGE_LLEAVES_TIMEOUT"
LLVMLITE_BELOW = (0, 44)
REQUIREMENTS = ["lleaves", "llvmlite<0.44", "numpy"]
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lleaves_worker.py")
HOW_TO = ("build one with `python benchmarks/lleaves_env.py`, or pass --lleaves-venv PATH "
          f"(or set {VENV_ENV}) to have bench build it there")


def default_venv() -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "silvanforge", "lleaves-venv")


def venv_python(venv: str) -> str:
    if os.name == "nt":  # pragma: no cover - the bench targets Linux
        return os.path.join(venv, "Scripts", "python.exe")
    return os.path.join(venv, "bin", "python")


def _version_tuple(text: str | None) -> tuple[int, ...]:
    parts = []
    for piece in (text or "").split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _clean_env() -> dict[str, str]:
    """The environment for the other interpreter: none of this one's path settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _tail(text: str, limit: int = 300) -> str:
    return " ".join((text or "").split())[-limit:]


def build_venv(venv: str, python: str | None = None, log=None) -> str:
    """Create ``venv`` with lleaves and llvmlite < 0.44; returns its python.  Raises
    :class:`PeerUnavailable` (with the reason) when that is not possible here."""
    python = python or getattr(sys, "_base_executable", None) or sys.executable
    say = log or (lambda msg: None)
    created = not os.path.exists(venv)
    steps = [([python, "-m", "venv", venv], "python -m venv"),
             ([venv_python(venv), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               *REQUIREMENTS], "pip install " + " ".join(REQUIREMENTS))]
    for cmd, what in steps:
        say(f"lleaves: {what} ({venv})")
        try:
            done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=1800,
                                  env=_clean_env())
        except (OSError, subprocess.SubprocessError) as exc:
            done = None
            why = str(exc)
        else:
            why = _tail(done.stderr or done.stdout)
        if done is None or done.returncode != 0:
            if created:
                shutil.rmtree(venv, ignore_errors=True)
            raise PeerUnavailable(f"lleaves: could not build its environment {venv} ({what} failed: "
                                  f"{why or 'no output'})")
    probe(venv_python(venv))
    return venv_python(venv)


PROBE = ("import json, sys, llvmlite, lleaves, numpy; from importlib.metadata import version; "
         "print(json.dumps({'lleaves': version('lleaves'), 'llvmlite': llvmlite.__version__, "
         "'numpy': numpy.__version__, 'python': '.'.join(map(str, sys.version_info[:3]))}))")


def probe(python: str) -> dict[str, str]:
    """Versions in the lleaves environment; :class:`PeerUnavailable` if lleaves is not usable there."""
    try:
        done = subprocess.run([python, "-c", PROBE], check=False, capture_output=True, text=True, timeout=300,
                              env=_clean_env())
    except (OSError, subprocess.SubprocessError) as exc:
        raise PeerUnavailable(f"lleaves: cannot run {python} ({exc}); {HOW_TO}") from None
    if done.returncode != 0:
        raise PeerUnavailable(f"lleaves: not usable with {python} ({_tail(done.stderr)}); {HOW_TO}")
    try:
        info = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise PeerUnavailable(f"lleaves: unexpected answer from {python}: {_tail(done.stdout)}") from None
    if _version_tuple(info.get("llvmlite")) >= LLVMLITE_BELOW:
        raise PeerUnavailable(f"lleaves: {python} has llvmlite {info.get('llvmlite')}, lleaves needs "
                              "llvmlite < 0.44")
    return info


def resolve_venv(explicit: str | None) -> tuple[str | None, bool]:
    """(the lleaves environment to use or None, whether it may be built when missing)."""
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit)), True
    if os.environ.get(VENV_ENV):
        return os.path.abspath(os.path.expanduser(os.environ[VENV_ENV])), True
    default = default_venv()
    return (default, False) if os.path.exists(default) else (None, False)


def _cache_file(ctx: PeerContext, info: dict[str, str]) -> str:
    key = "-".join([model_digest(ctx.path), f"lleaves{info.get('lleaves', '?')}",
                    f"llvmlite{info.get('llvmlite', '?')}", platform.machine() or "cpu"])
    return os.path.join(ctx.cache_dir, f"lleaves-{key}.o")


class VenvLleaves(ExternalEngine):
    """lleaves in another environment, timing itself in a subprocess."""

    name = "lleaves"

    def __init__(self, ctx: PeerContext, python: str, info: dict[str, str]) -> None:
        super().__init__()
        self.ctx, self.python, self.info = ctx, python, info
        self.versions = {"lleaves": info.get("lleaves", "?"),
                         "llvmlite (lleaves env)": info.get("llvmlite", "?")}
        self.build_what = "LLVM compile"
        self.note = (f"lleaves: run in a subprocess from {os.path.dirname(os.path.dirname(python))} "
                     f"(Python {info.get('python', '?')}, llvmlite {info.get('llvmlite', '?')}), same rows")

    def measure(self, X, batch_sizes, threads, repeat, min_time, check_rows=None):
        d = os.path.join(self.ctx.workdir, "lleaves")
        os.makedirs(d, exist_ok=True)
        req = {"model": os.path.abspath(self.ctx.path), "inputs": os.path.join(d, "X.npy"),
               "predictions": os.path.join(d, "predictions.npy"), "result": os.path.join(d, "result.json"),
               "cache": _cache_file(self.ctx, self.info),
               "batch_sizes": [int(b) for b in batch_sizes], "threads": [int(t) for t in threads],
               "repeat": int(repeat), "min_time": float(min_time),
               "check_rows": int(len(X) if check_rows is None else check_rows)}
        np.save(req["inputs"], np.ascontiguousarray(X, dtype=np.float64))
        path = os.path.join(d, "request.json")
        with open(path, "w") as f:
            json.dump(req, f)
        cached = os.path.isfile(req["cache"])
        self.ctx.say("lleaves: " + ("loading the cached object code" if cached else
                                    "compiling with LLVM (slow for big models; cached afterwards)")
                     + " and timing, in its own environment")
        timeout = float(os.environ.get(TIMEOUT_ENV) or 7200)
        try:
            done = subprocess.run([self.python, WORKER, path], check=False, capture_output=True, text=True,
                                  timeout=timeout, env=_clean_env())
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the lleaves subprocess ran over {timeout:.0f} s "
                               f"(set {TIMEOUT_ENV})") from None
        if done.returncode != 0 or not os.path.isfile(req["result"]):
            lines = [ln.strip() for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()]
            raise RuntimeError(f"the lleaves subprocess failed (exit {done.returncode}): "
                               f"{_tail(lines[-1] if lines else '')}")
        with open(req["result"]) as f:
            result = json.load(f)
        self.build_seconds, self.cached = float(result["compile_seconds"]), bool(result["cached"])
        if self.cached:
            self.first_build_seconds = recorded_build(req["cache"])
        else:
            record_build(req["cache"], self.build_seconds)
        self.versions["lleaves"] = result["versions"].get("lleaves", self.versions["lleaves"])
        timings = {(int(t), int(b)): float(s) for t, b, s in result["timings"]}
        return np.load(req["predictions"]), timings


def _in_process(ctx: PeerContext) -> Call:
    import lleaves

    model = lleaves.Model(model_file=ctx.path)
    cache = _cache_file(ctx, {"lleaves": version("lleaves") or "?", "llvmlite": version("llvmlite") or "?"})
    cached = os.path.isfile(cache)
    ctx.say("lleaves: " + ("loading the cached object code" if cached else "compiling with LLVM"))
    start = time.perf_counter()
    model.compile(cache=cache)
    engine = Call("lleaves", lambda X, n: model.predict(X, n_jobs=n),
                  prepare=lambda X: np.ascontiguousarray(X, dtype=np.float64),
                  versions={"lleaves": version("lleaves") or "?", "llvmlite": version("llvmlite") or "?"})
    engine.build_what, engine.cached = "LLVM compile", cached
    engine.build_seconds = time.perf_counter() - start
    if cached:
        engine.first_build_seconds = recorded_build(cache)
    else:
        record_build(cache, engine.build_seconds)
    return engine


def lleaves_engine(ctx: PeerContext):
    if ctx.fmt != "lightgbm-text":
        raise NotImplementedError("lleaves reads LightGBM text models only")
    here = version("llvmlite")
    if importable("lleaves") and here and _version_tuple(here) < LLVMLITE_BELOW:
        return _in_process(ctx)
    venv, may_build = resolve_venv(ctx.lleaves_venv)
    reason = f"lleaves needs llvmlite < 0.44 and this environment has llvmlite {here}" if here else \
        "lleaves is not installed here"
    if venv is None:
        raise PeerUnavailable(f"lleaves: not run ({reason}); {HOW_TO}")
    python = venv_python(venv)
    if not os.path.exists(venv):
        if not may_build:  # pragma: no cover - resolve_venv only offers existing defaults
            raise PeerUnavailable(f"lleaves: {venv} does not exist; {HOW_TO}")
        build_venv(venv, log=ctx.say)
    elif not os.path.isfile(python):
        raise PeerUnavailable(f"lleaves: {venv} is not a Python virtual environment (no {python}); {HOW_TO}")
    return VenvLleaves(ctx, python, probe(python))

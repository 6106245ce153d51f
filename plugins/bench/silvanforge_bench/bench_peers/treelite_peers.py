"""Treelite's GTIL interpreter, and TL2cgen: the model as C, built with ``gcc -O3`` into a shared
library that is cached by the model's hash (the build is timed once and reported apart)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time

import numpy as np

from .base import (
    Call,
    PeerContext,
    PeerUnavailable,
    model_digest,
    quiet_output,
    record_build,
    recorded_build,
    versions,
)


def treelite_model(path: str, fmt: str):
    import treelite

    if fmt == "xgboost-json":
        return treelite.frontend.load_xgboost_model(path, format_choice="json")
    if fmt == "xgboost-ubjson":
        return treelite.frontend.load_xgboost_model(path, format_choice="ubjson")
    if fmt == "lightgbm-text":
        return treelite.frontend.load_lightgbm_model(path)
    raise NotImplementedError(f"treelite does not read {fmt}")


def _input_dtype(fmt: str):
    # Treelite keeps XGBoost thresholds in float32 and LightGBM's in float64.
    return np.float32 if fmt.startswith("xgboost") else np.float64


def gtil_engine(ctx: PeerContext) -> Call:
    import treelite

    model = treelite_model(ctx.path, ctx.fmt)
    dtype = _input_dtype(ctx.fmt)
    return Call("treelite-gtil", lambda X, n: treelite.gtil.predict(model, X, nthread=n),
                prepare=lambda X: np.ascontiguousarray(X, dtype=dtype), versions=versions("treelite"))


def gcc_version() -> str | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    try:
        out = subprocess.run([gcc, "--version"], check=False, capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out else None


def build_tl2cgen_library(ctx: PeerContext) -> tuple[str, float | None]:
    """The model's shared library (built now, or found in the cache): (path, build seconds or None)."""
    import tl2cgen
    import treelite

    jobs = max(1, os.cpu_count() or 1)
    key = "-".join([model_digest(ctx.path), ctx.fmt, f"tl2cgen{tl2cgen.__version__}",
                    f"treelite{treelite.__version__}"])
    libpath = os.path.join(ctx.cache_dir, f"tl2cgen-{key}.so")
    if os.path.isfile(libpath):
        return libpath, None
    if shutil.which("gcc") is None:
        raise PeerUnavailable("tl2cgen: gcc not found on PATH (TL2cgen builds the model with gcc -O3)")
    ctx.say("tl2cgen: building the shared library with gcc -O3 (cached afterwards)")
    model = treelite_model(ctx.path, ctx.fmt)
    scratch = os.path.join(ctx.workdir, "tl2cgen")
    os.makedirs(scratch, exist_ok=True)
    tmp = os.path.join(scratch, "model.so")
    start = time.perf_counter()
    with quiet_output() as captured:
        try:
            # tl2cgen's gcc toolchain compiles every translation unit and links with -O3.
            tl2cgen.export_lib(model, toolchain="gcc", libpath=tmp, params={"parallel_comp": jobs},
                               nthread=jobs)
        except Exception as exc:
            log = " ".join(captured().split())[-300:]
            raise RuntimeError(f"{exc}; build output: {log}") from exc
    seconds = time.perf_counter() - start
    staged = f"{libpath}.{os.getpid()}.tmp"
    shutil.copyfile(tmp, staged)
    os.replace(staged, libpath)  # atomic: a concurrent bench sees the old state or the whole file
    record_build(libpath, seconds)
    return libpath, seconds


@contextlib.contextmanager
def _openmp_threads(threads: int):
    """OpenMP's process-wide limit of threads set to ``threads`` in this block and restored
    after it (threadpoolctl, where it is installed: it comes with scikit-learn)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=threads, user_api="openmp"):
        yield


def tl2cgen_engine(ctx: PeerContext) -> Call:
    import tl2cgen

    libpath, seconds = build_tl2cgen_library(ctx)
    predictors: dict[int, object] = {}

    def load(threads: int) -> None:
        if threads not in predictors:  # the thread count is fixed when the library is loaded
            # (TL2cgen refuses more threads than OpenMP's process-wide limit, which another
            # peer may have lowered: torch.set_num_threads(1) for Hummingbird's one-thread cells
            # left 2-thread TL2cgen cells failing; raised for the load, then restored)
            with quiet_output(), _openmp_threads(threads):
                predictors[threads] = tl2cgen.Predictor(libpath, nthread=threads)

    dtype = _input_dtype(ctx.fmt)
    engine = Call("tl2cgen", lambda d, n: predictors[n].predict(d),
                  prepare=lambda X: tl2cgen.DMatrix(np.ascontiguousarray(X, dtype=dtype),
                                                    dtype=np.dtype(dtype).name),
                  on_threads=load, versions=versions("tl2cgen", "treelite"))
    gcc = gcc_version()
    if gcc:
        engine.versions["gcc"] = gcc.split()[-1] if gcc.split() else gcc
    engine.build_what = "gcc -O3 shared library"
    engine.build_seconds, engine.cached = seconds, seconds is None
    if engine.cached:
        engine.first_build_seconds = recorded_build(libpath)
    return engine

"""The public compiler API: ``compile`` (here), ``lower`` and ``show`` (the front half,
:mod:`silvanforge.lowering.program`), ``CompiledForest`` (:mod:`silvanforge.runtime.compiled`) and
``load_compiled`` (:mod:`silvanforge.artifact.store`); ``sf.tune`` is :mod:`silvanforge.plan.tuning`."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import os
import struct
import threading
import time
from typing import Any, Union

import numpy as np

from silvanforge.artifact import codecache
from silvanforge.artifact.store import load, load_compiled, read_artifact_forest
from silvanforge.errors import ArtifactError, InputError, UnsupportedModelError
from silvanforge.frontend.loading import verified_model
from silvanforge.inputs.hashed_kernel import find_kernel
from silvanforge.ir import hir
from silvanforge.lowering.program import Lowered, lower_program
from silvanforge.options import CompileOptions
from silvanforge.plan.bands import Band
from silvanforge.plan.forms import Builds, host_key
from silvanforge.plan.lateforms import LateForms, check_mode
from silvanforge.plan.memo import compile_scope, current, in_compile_scope
from silvanforge.plan.overlap import IdleCores, on_native_work
from silvanforge.plan.policy import (ONE_ROW_MAX, main_form, plan_threads, program_options_given, rest_of_plan,
                                     untuned_plan)
from silvanforge.plugins import registry
from silvanforge.runtime.compiled import CompiledForest
from silvanforge.runtime.threads import check_threads
from silvanforge.scheduler import Schedule

# The API in one place (what ``silvanforge`` exports).
__all__ = ["compile", "lower", "show", "load_compiled", "read_artifact_forest", "CompiledForest", "Lowered",
           "CompileOptions", "ModelLike", "compile_options", "cache_key"]

# What compile and load_model read (see silvanforge.load_model): a path, bytes, a Forest, or
# a model object an installed importer recognises.
ModelLike = Union[str, "os.PathLike[str]", bytes, hir.Forest, Any]

@in_compile_scope  # (the model's import too: silvanforge.plan.memo)
def compile(model: ModelLike, target: str | None = None, rep: str | None = None,
            schedule: Schedule | str | os.PathLike | None = None,
            batch_size: int | None = None, threads: int | None = None,
            pad: bool | None = None, tile_size: int = 1, profile=None,
            reorder: str | None = None, cache: str | os.PathLike | None = None,
            options: CompileOptions | None = None, cpu: str | None = None,
            forms: str | None = None) -> CompiledForest:
    """Compile ``model`` into machine code for ``target``; options left ``None`` are chosen for
    the model.

    ``model``: a model file's path (XGBoost JSON/UBJSON, LightGBM text, CatBoost JSON/.cbm, ONNX; ``str`` or
    ``Path``) or its bytes, a compiled artifact, a fitted ``XGBModel``/``xgboost.Booster``,
    ``LGBMModel``/``lightgbm.Booster``, fitted CatBoost model, scikit-learn forest or ``onnx.ModelProto``, or a HIR
    ``Forest`` (see :func:`silvanforge.load_model`).

    ``target``: a target plugin's name (``forge plugins`` lists them and says which run here;
    None: the host's CPU target).
    ``rep``: how trees are laid out in memory: the name of a representation plugin
    (``forge plugins`` lists them; None lets their costs decide). ``schedule``: the loop nest to generate: a canned name (``"xgboost"``,
    ``"tree-parallel"``, ...), schedule text, or a schedule file. ``batch_size``: the rows per
    call to tune for (any number of rows still works). ``threads``: threads ``predict`` uses by
    default (all usable CPUs). ``pad``: pad trees to one depth so walks skip leaf checks.
    ``tile_size``: nodes decided per walk step (2-8, a representation that lays out tiles; 1
    walks node by node).
    ``profile``: a :class:`silvanforge.Profile` (or its file) from :func:`silvanforge.profile`:
    trees most rows walk the same way are tiled along those paths (needs ``tile_size`` > 1).
    ``reorder``: ``"depth"`` or ``"peel"`` groups trees of equal depth (or shallowest leaf)
    and walks each group without leaf checks.
    ``cpu``: the CPU the machine code is for (the cpu target): None or ``"native"`` for this
    host's CPU and its features (the default), or a name LLVM's x86 backend knows:
    ``"x86-64-v2"``/``"-v3"``/``"-v4"``, ``"haswell"``, ``"skylake-avx512"``, ``"icelake-server"``,
    ``"sapphirerapids"``, ``"znver3"``, ``"znver4"``... (an unknown name is an ``InputError``
    listing them).  Code for a named CPU uses that CPU's instructions only: build it here, save
    it (``cf.save``) and run it across a fleet of such machines; ``predict`` refuses (a
    ``PluginError``) on a host that lacks the CPU's features, rather than crash.  The artifact
    records the CPU, and loading it builds code for that CPU again.
    ``cache``: a directory (private to you) where machine code is kept and reused, across
    processes, for the same program on the same host (:mod:`silvanforge.artifact.codecache`; code for
    another ``cpu`` is another entry).
    ``options``: a :class:`silvanforge.options.CompileOptions` holding the options above but
    ``cache`` and ``forms`` (and the lowering knobs); keyword arguments set to other than their
    defaults replace its fields.
    ``forms``: when the plan's forms for smaller requests are built (:mod:`silvanforge.plan.lateforms`):
    ``"background"`` (None, the default: the call returns once the form for the largest
    requests is built, which answers every request, exactly, until the others are),
    ``"lazy"`` (the same, started by the first request of at most 256 rows) or ``"eager"``
    (all before the call returns; the default with ``cache``, whose entry is written once
    every form is built).  ``cf.wait()`` waits for them; saving, pickling and ``cf.forms`` do.
    The compiled model's ``options`` record what decided its program, as its artifact does.

        >>> import silvanforge as sf
        >>> cf = sf.compile("examples/model.json")
        >>> y = cf.predict(X)                     # what xgboost's predict returns  # doctest: +SKIP
        >>> cf = sf.compile(xgb_classifier, threads=1)                            # doctest: +SKIP
        >>> sf.compile("examples/model.json", cpu="x86-64-v3").save("fleet.forge")  # doctest: +SKIP
    """
    start = time.perf_counter()
    # With a code cache the forms are built before the call returns by default: the entry,
    # written then, holds them all, and a script that ends at once still leaves it.
    for name, value in (("target", target), ("rep", rep)):
        if value is not None and not isinstance(value, str):
            raise InputError(f"{name} is a name (a str), got {value!r}"[:200])
    if cache is not None and not isinstance(cache, (str, os.PathLike)):
        raise InputError(f"cache is a folder's path (str or Path), got {cache!r}"[:200])
    mode = check_mode("eager" if forms is None and cache is not None else forms)
    # 1. The options, resolved and checked once (the target: here); 2. the model, read and verified once.
    opts = compile_options(options, target=target, rep=rep, schedule=schedule, batch_size=batch_size,
                           threads=threads, pad=pad, tile_size=tile_size, profile=profile, reorder=reorder,
                           cpu=cpu)
    registry().check_target(opts.target)  # (installed and able to run here)
    if opts.threads is not None:
        opts = dataclasses.replace(opts, threads=check_threads(opts.threads))
    # (a compiled model compiles its model again, under these options)
    forest = verified_model(model.forest if isinstance(model, CompiledForest) else model)
    # 3. A code-cache hit is the whole compiled model, plan and forms, loaded as a trusted
    # artifact: nothing lowered (the cache directory is private to the user, so its code is the
    # user's own).  A damaged entry, or one for another model, is compiled again and replaced.
    entry = cache_key(forest, opts) if cache is not None else None

    def cache_it(cf):  # once every form is built (a background build calls it as it ends)
        if entry is not None and all(f.kernel.artifact() for f in cf.forms):
            codecache.put(cache, entry, cf.to_bytes())

    stored = codecache.get(cache, entry) if entry is not None else None
    if stored is not None:
        try:
            cf = load(stored, f"code cache entry {entry[:12]}", None, trust_code=True, forest=forest)
            cf.compile_seconds = time.perf_counter() - start
            cf.keep_with(cache_it)
            return cf
        except ArtifactError:
            pass
    # 4. The plan: its forms lowered (lowering.program) and compiled by the target, by request
    # size (plan.policy); those for smaller requests built now or after this call returns.
    try:
        cf = compile_plan(forest, opts, mode, start, done=cache_it)
        if entry is not None:
            cf.keep_with(cache_it)  # (contribution tables made later: the entry keeps them too)
        return cf
    except MemoryError:
        nodes = sum(t.num_nodes for t in forest.trees)
        raise UnsupportedModelError(
            f"out of memory compiling a model of {forest.num_trees} trees and {nodes} nodes "
            f"(depth up to {forest.max_depth()}) for {opts.target}: free memory, or compile fewer trees") from None


def _prepare_inputs(forest: hir.Forest) -> None:
    """What reading the model's rows needs compiled beside its forms: the kernel of computed
    columns of a model with them (CatBoost's CTRs and one-hot tests; one a process, 0.3 s),
    which a process's first categorical call would otherwise compile."""
    if forest.hashed_combinations:
        find_kernel()


def compile_plan(forest: hir.Forest, opts: CompileOptions, mode: str, start: float, done) -> CompiledForest:
    """The compiled model of ``forest`` under resolved ``opts``: every form of the untuned plan
    built before it returns (``mode`` "eager", a GPU target, options that fix the program, or a
    batch of at most ONE_ROW_MAX rows: one form), else its main form, the others left to
    :class:`silvanforge.plan.lateforms.LateForms` (``mode``: "background" or "lazy").  ``done(cf)``
    once every form is built.  (Run within ``compile``'s scope, whose memo a background build
    goes on with.)"""
    if mode == "eager" or registry().target_kind(opts.target) != "cpu" or program_options_given(opts) \
            or (opts.batch_size is not None and opts.batch_size <= ONE_ROW_MAX):
        forms, bands = untuned_plan(forest, opts)
        _prepare_inputs(forest)
        cf = CompiledForest(forest, forms, bands, time.perf_counter() - start)
        done(cf)
        return cf
    builds = Builds()
    # The compile's memo goes on to a background build; a lazy one, which may never start,
    # keeps none of it (the model's statistics are computed again if it does).
    cache = current() if mode == "background" else None
    threads = plan_threads(forest)
    main_built = concurrent.futures.Future()  # (set once the compiled model holds it)
    started_early, main_failed = [], threading.Event()

    def build(step):
        def checked():  # (a builder started early stops at its next step once the main form failed)
            if main_failed.is_set():
                raise RuntimeError("the main form was not built: the plan's other forms were not either")
            return step()

        with checked():  # (first: a call of any size needs it, where the other forms serve small ones)
            _prepare_inputs(forest)
        with compile_scope(cache):
            return rest_of_plan(forest, opts, main_built, builds, threads, step=checked, early=bool(started_early))

    late = LateForms(build, lambda forms, bands: cf._finish_plan(forms, bands), mode, done=lambda: done(cf))
    # A background build starts as the main form's machine code does where a core stood idle
    # meanwhile (plan.overlap), else once the main form is built.
    idle = IdleCores() if mode == "background" and threads > 1 else None

    def start_early():
        if idle.a_core_free():
            started_early.append(True)
            late.start()

    try:
        with on_native_work(start_early) if idle is not None else contextlib.nullcontext():
            main = main_form(forest, opts, builds)
    except BaseException as exc:
        main_failed.set()
        main_built.set_exception(exc)
        raise
    cf = CompiledForest(forest, [main], [Band(1, None, 0)], time.perf_counter() - start)
    cf._build_later(late)
    main_built.set_result(main)
    return cf


def cache_key(forest: hir.Forest, opts: CompileOptions) -> str:
    """The code-cache entry of a compile: the model's fingerprint and every option that shapes
    its code, as given (what the compile then chooses follows from them; the named ``cpu``
    among them, so code for ``x86-64-v3`` and for this host are two entries), the target and
    the host its code runs on (with the version: :func:`silvanforge.artifact.codecache.key`)."""
    given = {}
    for field in dataclasses.fields(opts):
        value = getattr(opts, field.name)
        if isinstance(value, Schedule):
            value = value.to_text()
        elif field.name == "profile" and value is not None:
            hits = getattr(value, "hits", None)
            value = repr(value) if hits is None else hashlib.sha256(
                b"".join(np.ascontiguousarray(h).tobytes() for h in hits)).hexdigest()
        elif not isinstance(value, (str, int, float, bool, type(None))):
            value = repr(value)
        given[field.name] = value
    # The fingerprint leaves out what only places nodes; the model's covers order the untuned
    # plan's one-row walks, so two files differing only there get programs of their own.
    covers = hashlib.sha256()
    for t in forest.trees:
        covers.update(b"-" if t.cover is None else
                      struct.pack("<q", len(t.cover)) + np.ascontiguousarray(t.cover, np.float64).tobytes())
    covers = covers.hexdigest()
    program = hashlib.sha256(json.dumps([forest.fingerprint(), covers, given], sort_keys=True).encode()).hexdigest()
    return codecache.key(opts.target, program, host_key(opts.target))


def compile_options(options: CompileOptions | None = None, **given) -> CompileOptions:
    """The one :class:`~silvanforge.options.CompileOptions` of a ``compile``, ``lower``, ``show``
    or ``tune`` call, checked here once (the target installed, the batch size a count): ``options`` (or the defaults) with the keyword arguments ``given`` that differ
    from their defaults in place of its fields, resolved (the context managers and environment
    variable of :mod:`silvanforge.options` read here, once); no target: the host's
    (:meth:`silvanforge.plugins.PluginRegistry.default_target`, chosen here only, so the options
    object itself never looks for plugins); a named ``cpu``, checked by that target
    (:meth:`silvanforge.target.Target.check_cpu`) and spelt as it spells it."""
    base = options if options is not None else CompileOptions()
    if not isinstance(base, CompileOptions):
        raise InputError(f"options must be a CompileOptions, got {type(base).__name__}")
    defaults = CompileOptions()
    changed = {name: value for name, value in given.items() if value is not None
               and not (type(value) is type(getattr(defaults, name)) and value == getattr(defaults, name))}
    if base.target is None and "target" not in changed:
        changed["target"] = registry().default_target()
    registry().check_rep_options(changed.get("rep_options", base.rep_options))
    opts = (dataclasses.replace(base, **changed) if changed else base).resolved()
    if opts.target not in registry().targets():
        registry().check_target(opts.target)  # raises: no such target (one that cannot run here lowers)
    if opts.batch_size is not None and (not isinstance(opts.batch_size, (int, np.integer)) or opts.batch_size <= 0):
        raise InputError(f"batch_size must be a positive integer, got {opts.batch_size!r}")
    if opts.cpu is not None:
        # Checked once here, before anything is lowered: an unknown name is one clear error.
        cpu = registry().target(opts.target).check_cpu(opts.cpu)
        if cpu != opts.cpu:
            opts = dataclasses.replace(opts, cpu=cpu)
    return opts


def lower(model, target: str | None = None, rep: str | None = None, schedule=None,
          batch_size: int | None = None, pad: bool | None = None, tile_size: int = 1,
          profile=None, reorder: str | None = None, options: CompileOptions | None = None,
          cpu: str | None = None) -> Lowered:
    """The front half of ``compile``: model -> HIR (-> padded HIR) -> MIR -> LIR, for ``target``
    (which need not be able to run here).

    ``pad``: pad trees to one depth (:func:`silvanforge.frontend.hir_passes.pad_trees`); ``None`` pads when
    the target chooses the schedule and padding is cheap, so that schedule can drop leaf checks
    (never with tiles: a uniform node depth does not make a uniform tile depth).
    ``tile_size``: nodes evaluated per walk step (:mod:`silvanforge.frontend.tiling`; 1 = node by node);
    above 1 it needs a representation that lays out tiles.
    ``profile``: a :class:`silvanforge.Profile` or profile file of this model; skewed trees are
    then tiled along the paths most rows take (needs ``tile_size`` above 1).
    ``reorder``: "depth" or "peel" groups trees of equal depth / shallowest leaf; without a
    schedule each group's walks are then peeled to its shallowest leaf (``peel-groups``), and
    ``pad`` (None: when it at most doubles the nodes) pads each tree to its own depth.
    ``cpu``: the CPU the target code is for (None: this host), as ``compile`` takes it; the
    lowering does not depend on it, the target code (``show("target")``) does.
    ``options``: a :class:`silvanforge.options.CompileOptions` holding all of these (and the
    lowering knobs); keyword arguments set to other than their defaults replace its fields.
    """
    opts = compile_options(options, target=target, rep=rep, schedule=schedule, batch_size=batch_size, pad=pad,
                           tile_size=tile_size, profile=profile, reorder=reorder, cpu=cpu)
    return lower_program(verified_model(model), opts)


def show(model, level: str, target: str | None = None, rep: str | None = None, schedule=None,
         batch_size: int | None = None, pad: bool | None = None, tile_size: int = 1,
         profile=None, reorder: str | None = None, options: CompileOptions | None = None,
         cpu: str | None = None) -> str:
    """The program at ``level`` (hir, mir, lir, target) without running anything: GPU schedules
    can be printed on a machine without a GPU.  The options are :func:`lower`'s."""
    return lower(model, target, rep, schedule, batch_size, pad, tile_size, profile, reorder, options, cpu).show(level)

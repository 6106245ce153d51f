"""A compiled model to and from an artifact (:mod:`silvanforge.artifact.archive` is the file
itself): ``save`` and ``to_bytes`` write one, ``load_compiled`` (and pickles, code-cache
entries) read it back.  On loading, each form's saved machine code runs where it is trusted and was built for this host and
version; otherwise the form is lowered again with its recorded options and compiled
(:func:`silvanforge.plan.forms.build_form`, the compile's own builder)."""

from __future__ import annotations

import functools
import os
import re
import time
import warnings

import numpy as np

from silvanforge import __version__
from silvanforge.artifact import archive
from silvanforge.runtime import shap_arrays
from silvanforge.runtime.compiled import CompiledForest
from silvanforge.errors import ArtifactError, ArtifactWarning, InputError, IRVerificationError, ScheduleError
from silvanforge.plan.forms import Form, host_key
from silvanforge.plan.policy import untuned_plan
from silvanforge.ir import hir, hir_io, lir_io
from silvanforge.plan.memo import in_compile_scope
from silvanforge.options import CompileOptions, kernel_options
from silvanforge.lowering.program import lir_digest, lower_program
from silvanforge.plan.bands import Band, bands_from_json, bands_to_json
from silvanforge.plugins import registry
from silvanforge.scheduler import parse_schedule
from silvanforge.frontend import outputs
from silvanforge.frontend.tiling import MAX_TILE_SIZE
from silvanforge.inputs import hashed_kernel


# ---------------------------------------------------------------- writing
def save(cf: CompiledForest, path: str | os.PathLike, key: str | bytes | None = None) -> None:
    """:meth:`CompiledForest.save`: the artifact of ``cf`` written to ``path``, signed with
    ``key`` (or ``SILVANFORGE_ARTIFACT_KEY``, or the user's key: :mod:`silvanforge.artifact.userkey`)."""
    if hasattr(path, "write") and not isinstance(path, (str, bytes, os.PathLike)):  # a file object (BytesIO...)
        path.write(archive.to_bytes(*_parts(cf), key))
        return
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"save takes a file's path (str or Path) or a file object to write to; got "
                         f"{type(path).__name__}")
    where = os.fspath(path)
    if os.path.isdir(where):
        raise InputError(f"save: {where} is a folder; name the artifact's file (e.g. {os.path.join(where, 'model.forge')})")
    folder = os.path.dirname(where) or "."
    if not os.path.isdir(folder):
        raise InputError(f"save: the folder {folder} does not exist")
    try:
        archive.write(path, *_parts(cf), key)
    except PermissionError:
        raise InputError(f"save: cannot write {where}: permission denied") from None


def to_bytes(cf: CompiledForest, key: str | bytes | None = None) -> bytes:
    """The artifact :func:`save` writes, in memory."""
    return archive.to_bytes(*_parts(cf), key)


def _parts(cf: CompiledForest) -> tuple[dict, dict, bytes, dict]:
    """An artifact's members: meta.json, the model and tilings as arrays, the main form's
    machine code, and the plan with its other forms' programs and code."""
    main = cf.main
    meta = {"silvanforge": __version__, "fingerprint": cf.forest.fingerprint(), **form_meta(main)}
    arrays = {"forest.npz": hir_io.to_arrays(cf.forest)}
    if main.tile_ids is not None:  # the profile-derived tiling, to rebuild the layout
        arrays["tiling.npz"] = tile_id_arrays(main.tile_ids, cf.forest)
    blob = main.kernel.artifact()
    extra = {}
    if blob:
        # What running the code needs, so a trusted load maps it without lowering the model.
        spec, buffers = lir_io.to_parts(main.kernel.module)
        arrays["program.npz"] = buffers
        extra["program.json"] = spec
    # The plan: its bands and every other form's options, program and machine code (saved
    # so a trusted load builds nothing).
    main_index = cf.forms.index(main)
    others = []
    for index, form in enumerate(cf.forms):
        if index == main_index:
            others.append(None)
            continue
        entry = form_meta(form)
        if form.tile_ids is not None:
            arrays[f"form{index}_tiling.npz"] = tile_id_arrays(form.tile_ids, cf.forest)
        code = form.kernel.artifact()
        if code:
            spec, buffers = lir_io.to_parts(form.kernel.module)
            arrays[f"form{index}_program.npz"] = buffers
            extra[f"form{index}_program.json"] = spec
            extra[f"form{index}.bin"] = code
        others.append(entry)
    plan = {"bands": bands_to_json(cf.bands), "forms": others, "main": main_index}
    if cf.tuning is not None:
        plan["tuning"] = cf.tuning
    extra["plan.json"] = archive.json_bytes(plan)
    kernel, tables = cf._contribution_tables or (None, None)
    if kernel is not None:  # (the kernel's tables; NumPy's are made again)
        arrays["contributions.npz"], record = shap_arrays.saved(tables, kernel.arg_layout)
        extra["contributions.json"] = archive.json_bytes(record)
    # Other outputs' models (pred_leaf, per_tree): those a load kept unasked, and those built
    # (taken together: a first request moves one from the first to the second)
    with cf._outputs_lock:
        saved, built = dict(cf._saved_outputs), dict(cf._outputs)
    for kind, (raw, _) in saved.items():
        extra[f"{kind}.forge"] = raw
    for kind, (model, _) in built.items():
        if f"{kind}.forge" in archive.OUTPUT_MEMBERS:
            extra[f"{kind}.forge"] = model.to_bytes(key=False)
    if cf.forest.hashed_combinations:  # the kernel of its computed columns too (compiled once a process)
        code = hashed_kernel.kernel_artifact()
        if code:
            extra["hashed_columns.bin"] = code
    return meta, arrays, blob, extra


def form_meta(form: Form) -> dict:
    """The options of a form as ``meta.json`` (and ``plan.json``) record them."""
    o = form.options
    return {"target": o.target, "rep": o.rep, "schedule": o.schedule.to_text(), "batch_size": o.batch_size,
            "threads": o.threads, "pad": o.pad, "tile_size": o.tile_size, "reorder": o.reorder, "cpu": o.cpu,
            "plan_min_ns": o.plan_min_ns, "lir": form.digest, "probability_tiling": form.tile_ids is not None,
            "node_order": form.order_by,
            **o.lowering(), "rep_options": dict(o.rep_options)}


def tile_id_arrays(tile_ids: list, forest: hir.Forest) -> dict[str, np.ndarray]:
    """Tile ids of every tree as arrays: ``tiled`` (bool per tree) and ``tile_id`` (the tiled
    trees' ids, concatenated in tree order)."""
    tiled = np.array([i is not None for i in tile_ids], dtype=bool)
    ids = [np.asarray(i, np.int32) for i in tile_ids if i is not None]
    return {"tiled": tiled, "tile_id": np.concatenate(ids) if ids else np.zeros(0, np.int32)}


def tile_ids_from_arrays(arrays: dict, forest: hir.Forest) -> list:
    tiled = arrays["tiled"].astype(bool)
    flat = arrays["tile_id"].astype(np.int32)
    if len(tiled) != forest.num_trees:
        raise ValueError(f"a tiling for {len(tiled)} trees, the model has {forest.num_trees}")
    sizes = [t.num_nodes for t, on in zip(forest.trees, tiled) if on]
    if sum(sizes) != len(flat):
        raise ValueError("tile ids do not match the trees' nodes")
    parts = iter(np.split(flat, np.cumsum(sizes)[:-1]) if sizes else [])
    return [next(parts) if on else None for on in tiled]


# ---------------------------------------------------------------- reading
def read_artifact_forest(source) -> hir.Forest:
    """The model stored in an artifact (a path or its bytes), without compiling anything."""
    return archive.read(source).forest


def load_compiled(path: str | os.PathLike | bytes, key: str | bytes | None = None,
                  trust_code: bool = False) -> CompiledForest:
    """Load an artifact saved by :meth:`CompiledForest.save` (``forge compile -o``).

    Its machine code runs only when the artifact is signed with ``key`` (or the
    ``SILVANFORGE_ARTIFACT_KEY`` environment variable), or when ``trust_code`` says you trust
    where it came from, as you would a shared library; otherwise the stored model is compiled
    again (a warning says so).  Code built for another host or version is always rebuilt, and a
    plan tuned on another host gives way to the untuned plan (with an ``ArtifactWarning``).  A
    damaged or mixed artifact is an ``ArtifactError``.

        >>> cf = sf.compile("examples/model.json"); cf.save("/tmp/model.forge")   # doctest: +SKIP
        >>> sf.load_compiled("/tmp/model.forge").predict(X)                       # doctest: +SKIP
    """
    if isinstance(path, (bytes, bytearray, memoryview)):  # an artifact's bytes
        return load(bytes(path), "the artifact bytes", key, trust_code)
    if hasattr(path, "read") and not isinstance(path, (str, os.PathLike)):  # a file object (BytesIO, open(..., "rb"))
        data = path.read()
        if not isinstance(data, (bytes, bytearray)):
            raise InputError("load_compiled reads artifacts in binary: open the file with 'rb'")
        return load(bytes(data), "the artifact file object", key, trust_code)
    if isinstance(path, CompiledForest):
        raise InputError("load_compiled got a compiled model already: use it as it is, or sf.compile(model, ...) "
                         "to compile its model again with other options")
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"load_compiled takes an artifact's path, bytes or a file object; got {type(path).__name__}")
    path = os.fspath(path)
    return load(path, path, key, trust_code)


def unpickle(data: bytes) -> CompiledForest:
    return load(data, "the pickled compiled model", None, trust_code=True)


@in_compile_scope  # forms lowered and compiled again share statistics (its frame: stacklevel=4 below)
def load(source, name: str, key, trust_code: bool, forest: hir.Forest | None = None) -> CompiledForest:
    """load_compiled of a path or artifact bytes (``name``: what messages call it); ``forest``:
    the model the caller holds, used in place of the stored one (a code-cache hit: the stored
    one has the same fingerprint, and the caller's keeps its own names and categories)."""
    art = archive.read(source, key)
    meta = art.meta
    if forest is not None and forest.fingerprint() != meta["fingerprint"]:
        raise ArtifactError(f"{name}: compiled for another model")
    forest = forest or art.forest
    trusted = art.signed or trust_code
    if (art.blob or art.forms) and not trusted:
        warnings.warn(f"{name}: its machine code was not run (the artifact is not signed with your key: "
                      f"set {archive.KEY_ENV} when saving and loading, or pass trust_code=True for "
                      "artifacts you trust); compiling its model again", ArtifactWarning, stacklevel=4)
    start = time.perf_counter()
    registry().check_target(meta["target"])
    try:
        tile_ids = None if art.tiling is None else tile_ids_from_arrays(art.tiling, forest)
    except (ValueError, KeyError) as exc:
        raise ArtifactError(f"{name}: the stored tiling is damaged ({exc})") from None
    plan = art.plan or {}
    given = plan.get("given")
    if given is not None and not (isinstance(given, dict) and _count_or_none(given.get("batch_size"))):
        raise ArtifactError(f"{name}: plan.json field 'given' is {str(given)[:80]!r}, not the options a "
                            "plan was made for: damaged")
    tuning = plan.get("tuning")
    if tuning is not None and not _tuned_here(tuning, meta["target"]):
        warnings.warn(f"{name}: its plan was tuned on another host ({_host_name(tuning)}); using the "
                      "untuned plan (run forge tune here to tune it for this one)", ArtifactWarning,
                      stacklevel=4)
        # (for the CPU it was compiled for: the plan gives way, the code's CPU does not)
        given = CompileOptions(target=meta["target"], threads=meta.get("threads"), cpu=meta.get("cpu"),
                               batch_size=(plan.get("given") or {}).get("batch_size"))
        forms, bands = untuned_plan(forest, given.resolved())
        return CompiledForest(forest, forms, bands, time.perf_counter() - start)
    code_ok = trusted and meta["silvanforge"] == __version__
    if code_ok and art.hashed_columns:
        hashed_kernel.load_kernel(art.hashed_columns)
    stale = []
    main = _form(name, forest, meta, art.blob if code_ok else b"", art.program, tile_ids, stale)
    forms, bands = [main], [Band(1, None, 0)]
    if plan:
        try:
            entries = plan["forms"]
            main_index = int(plan["main"])
            if not isinstance(entries, list) or not 0 <= main_index < len(entries) or entries[main_index] is not None:
                raise ValueError("the main form is not where the plan says")
            forms = []
            for index, entry in enumerate(entries):
                if index == main_index:
                    forms.append(main)
                    continue
                if not isinstance(entry, dict):
                    raise ValueError(f"form {index} is not an object")
                archive.check_meta_fields(entry, f"{name}: plan.json form {index}")
                if entry["target"] != meta["target"]:
                    raise ValueError(f"form {index} is for target {entry['target']!r}, the artifact for "
                                     f"{meta['target']!r}")
                code, spec, buffers = art.forms.get(index, (b"", None, None))
                forms.append(_form(name, forest, entry, code if code_ok else b"",
                                   None if spec is None else (spec, buffers),
                                   _form_tile_ids(name, art, index, entry, forest), stale))
            bands = bands_from_json(plan["bands"], len(forms))
        except (KeyError, TypeError, ValueError, OverflowError, InputError) as exc:
            raise ArtifactError(f"{name}: the stored plan is damaged ({exc})") from None
    if stale:
        warnings.warn(f"{name}: its machine code was built for another host (CPU or LLVM); "
                      "compiling its model again", ArtifactWarning, stacklevel=4)
    cf = CompiledForest(forest, forms, bands, time.perf_counter() - start, tuning=tuning)
    if code_ok and art.contributions is not None:
        # (the kernel reads them as it trusts its code: from a trusted artifact of this version)
        cf._saved_contributions = art.contributions
    if code_ok:
        _restore_outputs(cf, art.outputs, name)
    return cf


def _restore_outputs(cf: CompiledForest, saved: dict, name: str) -> None:
    """The compiled models of other outputs a trusted artifact kept (``saved``: kind -> artifact
    bytes), each loaded at its first request (a flight-sized leaf model doubles a load's time)
    and taken where it is the model of that output of this forest: that request then compiles
    nothing.  One that is not (or does not load) is compiled then, as without it."""
    for kind, raw in saved.items():
        cf._saved_outputs[kind] = (raw, functools.partial(_saved_output, raw, f"{name}: {kind}.forge", kind))


def _saved_output(raw: bytes, name: str, kind: str, forest: hir.Forest) -> CompiledForest | None:
    """The output model ``raw`` (an artifact kept in a trusted one) of output ``kind`` of
    ``forest``, read with that output's forest of ``forest`` (its names and categories: a
    code-cache entry may be another model's of the same trees), or None: compiled instead."""
    try:
        return load(raw, name, False, trust_code=True, forest=outputs.forest_of(forest, kind))
    except ArtifactError:
        return None


def _form_tile_ids(name: str, art, index: int, entry: dict, forest: hir.Forest):
    """The profile-derived tiling (or node order) form ``index`` of the plan was lowered with."""
    if not entry["probability_tiling"]:
        return None
    if index not in art.form_tilings:
        raise ArtifactError(f"{name}: member form{index}_tiling.npz is missing: damaged")
    try:
        return tile_ids_from_arrays(art.form_tilings[index], forest)
    except (ValueError, KeyError) as exc:
        raise ArtifactError(f"{name}: the stored tiling of form {index} is damaged ({exc})") from None


def _tuned_here(tuning: dict, target: str) -> bool:
    return isinstance(tuning, dict) and tuning.get("host") == host_key(target)


def _host_name(tuning: dict) -> str:
    host = tuning.get("host_name") if isinstance(tuning, dict) else None
    return str(host)[:80] if host else "unknown"


def _form(name: str, forest: hir.Forest, entry: dict, code: bytes, program, tile_ids, stale: list) -> Form:
    """One form of an artifact: its saved code mapped where given (``code``: trusted, this
    version) and built for this host, else lowered again with its options and compiled."""
    _check_values(name, entry)
    try:
        opts = CompileOptions.from_meta(entry, parse_schedule(entry["schedule"]))
    except (ScheduleError, InputError, KeyError, TypeError) as exc:
        raise ArtifactError(f"{name}: the stored options or schedule are damaged ({exc})") from None
    relower = functools.partial(_relowered, name, forest, opts, tile_ids)
    reg, target = registry(), opts.target
    if code and program is not None:
        try:
            module = lir_io.from_parts(*program)
        except (ValueError, KeyError, TypeError) as exc:
            raise ArtifactError(f"{name}: the stored program is damaged ({exc})") from None
        kernel = _load_kernel(name, target, module, code, opts)
        if kernel is not None:
            return Form(forest, kernel, opts, digest=entry["lir"], tile_ids=tile_ids, relower=relower,
                        order_by=entry.get("node_order"))
        stale.append(True)
        code = b""
    low = relower()
    kernel = None
    # Machine code is reused only for the very program it was built from: the same version can
    # lower a model differently (a new chooser, widths) and old code would misread the buffers.
    if code and entry.get("lir") == lir_digest(low.lir, low.tile_ids):
        kernel = _load_kernel(name, target, low.lir, code, opts)
    if kernel is None:
        kernel = reg.target(target).compile(low.lir, kernel_options(opts))
    return Form(forest, kernel, low.options, low.lir, low.mir, tile_ids=low.tile_ids,
                order_by=entry.get("node_order"))


def _count_or_none(value) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)


def _check_values(name: str, entry: dict) -> None:
    """The values of a form's options (their types are :func:`archive.check_meta_fields`'s),
    checked as a compile checks them, trusted or not: an edited artifact is one ArtifactError,
    never a traceback nor a form built with options no compile would take."""
    def bad(field: str, why: str):
        raise ArtifactError(f"{name}: the stored option {field!r} is {str(entry.get(field))[:60]!r}, "
                            f"{why}: damaged")

    for field in ("batch_size", "threads"):
        if not _count_or_none(entry.get(field)):
            bad(field, "not a positive count")
    if not 1 <= entry.get("tile_size", 1) <= MAX_TILE_SIZE:
        bad("tile_size", f"not from 1 to {MAX_TILE_SIZE}")
    reg = registry()
    if entry.get("target") not in reg.targets():
        bad("target", "no installed target")
    if not reg.target_available(entry["target"])[0]:
        raise ArtifactError(f"{name}: its target {entry['target']!r} cannot run here "
                            f"({reg.target_available(entry['target'])[1]})")
    # A representation's name, not a path; it need not be installed where the saved code runs
    # (lowering again asks for it, and says so then).
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,63}", str(entry.get("rep"))):
        bad("rep", "not a representation's name")


def _load_kernel(name: str, target: str, module, code: bytes, opts: CompileOptions):
    try:
        return registry().target(target).load_kernel(module, code, kernel_options(opts))
    except Exception as exc:  # noqa: BLE001 - signed or trusted, yet the code will not load
        raise ArtifactError(f"{name}: its machine code does not load ({type(exc).__name__}: "
                            f"{str(exc)[:200]}): damaged") from None


def _relowered(name: str, forest: hir.Forest, opts: CompileOptions, tile_ids):
    """A form of an artifact lowered again with its stored options: the compile's own builder
    (never the context or environment of this process: they were resolved, and recorded, at
    compile)."""
    reg = registry()
    reg.check_representation(opts.rep)
    try:
        return lower_program(forest, opts, tile_ids=tile_ids)
    except (InputError, ScheduleError, ValueError, KeyError, IRVerificationError) as exc:
        raise ArtifactError(f"{name}: its stored options do not lower the model it holds ({exc}): corrupt") from None

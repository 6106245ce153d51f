"""Loading a compiled model from an artifact (``load_compiled``, pickles, code-cache entries):
each form's saved machine code runs where it is trusted and was built for this host and
version; otherwise the form is lowered again with its recorded options and compiled
(:func:`silvanforge.plan.forms.build_form`, the compile's own builder)."""

from __future__ import annotations

import functools
import os
import re
import time
import warnings

from silvanforge import __version__
from silvanforge.artifact import archive
from silvanforge.runtime.compiled import CompiledForest, tile_ids_from_arrays
from silvanforge.errors import ArtifactError, ArtifactWarning, InputError, IRVerificationError, ScheduleError
from silvanforge.plan.forms import Form, host_key, untuned_plan
from silvanforge.ir import hir, lir_io
from silvanforge.plan.memo import in_compile_scope
from silvanforge.options import CompileOptions, kernel_options
from silvanforge.lowering.program import _lower, lir_digest
from silvanforge.plan.bands import Band, bands_from_json
from silvanforge.plugins import registry
from silvanforge.scheduler import parse_schedule
from silvanforge.frontend.tiling import MAX_TILE_SIZE


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
    return CompiledForest(forest, forms, bands, time.perf_counter() - start, tuning=tuning)


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
        return _lower(forest, opts, tile_ids=tile_ids)
    except (InputError, ScheduleError, ValueError, KeyError, IRVerificationError) as exc:
        raise ArtifactError(f"{name}: its stored options do not lower the model it holds ({exc}): corrupt") from None

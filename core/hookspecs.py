"""Every hook a SilvanForge plugin can implement, documented where it is declared.

A plugin is a module (or object) with functions marked ``@silvanforge.hookimpl`` whose names
and argument names match the specs below; pluggy checks them when the plugin registers.  It is
found through one of three entry-point groups in the plugin distribution's ``pyproject.toml``::

    [project.entry-points."silvanforge.importers"]        # model formats
    [project.entry-points."silvanforge.representations"]  # in-memory layouts of trees
    [project.entry-points."silvanforge.targets"]          # code generators

Hooks marked *dispatched* are called on every plugin with a ``target``/``fmt`` name first; a
plugin answers ``None`` for names that are not its own, and the first non-``None`` answer wins
(pluggy ``firstresult``), exactly like pytest's own hooks.

Representations are classes (:mod:`silvanforge.rep`) listed by one hook,
:func:`silvanforge_representation_types`; their methods never emit target code: they build LIR
expressions with the :class:`silvanforge.ir.lir.Builder` they are handed, so one
representation serves every target.
"""

from __future__ import annotations

import pluggy

PROJECT = "silvanforge"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --------------------------------------------------------------------------- importers
@hookspec
def silvanforge_formats():
    """Return the model formats this plugin reads, as a list of short names (``["my-format-json"]``).

    Used by ``forge plugins`` and to explain which formats exist when none recognises a file.
    """


@hookspec(firstresult=True)
def silvanforge_detect_format(path, head):
    """Recognise a model file by its content; return a format name of your own, or ``None``.

    ``path`` is the file's path (its extension may help but must not be relied on) and
    ``head`` its first 4096 bytes.  Never raise for files that are not yours.
    """


@hookspec(firstresult=True)
def silvanforge_import_model(path, fmt):
    """Read the model at ``path`` in format ``fmt`` (dispatched) and return a HIR ``Forest``.

    Raise :class:`silvanforge.errors.ModelFormatError` for malformed or truncated files and
    :class:`silvanforge.errors.UnsupportedModelError` naming the feature for valid models that
    use something SilvanForge does not implement.  Return ``None`` when ``fmt`` is not yours.
    """


@hookspec(firstresult=True)
def silvanforge_import_object(obj):
    """Read a model held in memory and return a HIR ``Forest``, or ``None`` when ``obj`` is not
    something this plugin reads.

    ``obj`` is whatever the user passed to ``silvanforge.compile`` / ``load_model`` that is not
    a path: a fitted estimator (scikit-learn, ``xgboost.XGBModel``, ``lightgbm.LGBMModel``), a
    library's booster, an ``onnx.ModelProto``, or the raw ``bytes`` of a model file.  Recognise
    objects by their class without importing libraries the user has not imported (check
    ``sys.modules`` first), so a plugin never makes an import that fails.  Set
    ``Forest.feature_names`` and ``Forest.class_labels`` from the object where it has them, and
    ``Forest.feature_categories`` where the library maps pandas categories itself.  Raise
    :class:`silvanforge.errors.UnsupportedModelError` for objects of yours that cannot be
    compiled (an unfitted estimator, a multi-output model), naming what is missing.
    """


# --------------------------------------------------------------------------- representations
@hookspec
def silvanforge_representation_types():
    """Return the representation classes this plugin provides: subclasses of
    :class:`silvanforge.rep.Representation` (walks: its methods lay the forest out and answer
    the walk generator) or :class:`silvanforge.rep.ProgramRepresentation` (a whole program of
    its own); :mod:`silvanforge.rep` documents the contract.  The core makes one instance per
    compile and asks each class its ``cost`` when the user names no representation."""


# --------------------------------------------------------------------------- targets
@hookspec
def silvanforge_targets():
    """Return the names of the targets this plugin provides (``["my-target"]``)."""


@hookspec(firstresult=True)
def silvanforge_target_available(target):
    """Dispatched on ``target``: return ``(True, "")`` if it can run here, else
    ``(False, reason)`` with a reason a user can act on (``"no GPU driver found"``)."""


@hookspec(firstresult=True)
def silvanforge_target_kind(target):
    """Dispatched on ``target``: ``"cpu"`` or ``"gpu"``: the kind of machine it runs on, which
    representations' ``cost`` and the compiler's defaults are asked about (a ``gpu`` target keeps
    its own schedule when trees are reordered; its sums may be reordered).  How its MIR becomes
    LIR is :func:`silvanforge_target_lower`'s, not the kind's.  Targets that do not answer are
    ``cpu``."""


@hookspec(firstresult=True)
def silvanforge_target_lower(target, forest, fn, rep, tile_size, options):
    """Dispatched on ``target``: lower the MIR function ``fn`` (a
    :class:`silvanforge.ir.mir.MirFunction`) of ``forest`` (the HIR forest after the passes,
    which ``fn`` walks) with the walk representation named ``rep`` to an LIR
    :class:`silvanforge.ir.lir.Module`, or return ``None`` to take the core's lowering
    (:func:`silvanforge.walkgen.lower_to_lir`: one function per phase, run by threads over row
    ranges).  ``tile_size``: nodes a walk step evaluates (1: node by node).  ``options``: the
    compile's :class:`silvanforge.options.CompileOptions`, whose lowering knobs (node widths,
    vector walks, ...) the lowering honours: pass it to ``setup_walks``.  A target whose code
    runs otherwise (a GPU backend's kernels) builds its module from the core's
    public pieces: :func:`silvanforge.lowering.setup_walks` (layout and buffers), a
    :class:`silvanforge.walkgen.WalkGenerator` given a placement of its own (where loops, caches,
    input reads and folds go) and :func:`silvanforge.lowering.walk_module`.  Raise
    :class:`silvanforge.errors.ScheduleError` for schedules it cannot lower."""


@hookspec(firstresult=True)
def silvanforge_target_default_schedule(target, forest, batch_size, options):
    """Dispatched on ``target``: the :class:`silvanforge.scheduler.Schedule` to use when the user
    gives none, for this forest and batch size.  ``options``: the compile's
    :class:`silvanforge.options.CompileOptions` (its lowering knobs, such as
    ``leaf_self_loops``, may change what pays; its ``rep`` is the representation chosen, whose
    walks the schedule drives), or None when asked outside a compile."""


@hookspec
def silvanforge_schedules():
    """Return named schedules this plugin adds to the core's canned ones
    (:data:`silvanforge.scheduler.CANNED`): a dict of name -> function ``(forest, batch_size)``
    returning a :class:`silvanforge.scheduler.Schedule`.  Users name them as they name the
    canned ones (``compile(schedule=NAME)``, ``--schedule NAME``), e.g. a GPU
    backend's template.  Two plugins may list the same function under one name; a name the core or
    another plugin gives another schedule is an error."""


@hookspec(firstresult=True)
def silvanforge_target_compile(target, module, options):
    """Dispatched on ``target``: turn an LIR :class:`silvanforge.ir.lir.Module` into a
    :class:`silvanforge.runtime.Kernel` (something that can be called on rows).  ``options`` is a
    dict with at least ``threads``.  Raise ``PluginError`` if the target cannot run here."""


@hookspec(firstresult=True)
def silvanforge_target_source(target, module):
    """Dispatched on ``target``: the generated code as text (LLVM IR, CUDA C, OpenCL C) for
    ``forge show --level target``."""


@hookspec(firstresult=True)
def silvanforge_target_load_kernel(target, module, blob, options):
    """Dispatched on ``target``: rebuild a kernel from a saved artifact ``blob`` (bytes the
    kernel's ``artifact()`` returned) for the same LIR ``module``; return ``None`` to recompile
    (code built for another host).  ``module`` may be the runnable part only of the program
    (:mod:`silvanforge.ir.lir_io`: functions without bodies, buffers with their data)."""


@hookspec(firstresult=True)
def silvanforge_target_host(target):
    """Dispatched on ``target``: a short string naming everything this host's machine code
    depends on (for the CPU: triple, CPU name and features, LLVM version), or ``None``.  The
    code cache (:mod:`silvanforge.codecache`) keys entries by it, so hosts sharing a cache
    directory keep their own code."""

"""Every hook a SilvanForge plugin can implement, documented where it is declared.

A plugin is a module (or object) with functions marked ``@silvanforge.hookimpl`` whose names
and argument names match the specs below; pluggy checks them when the plugin registers.  It is
found through one of three entry-point groups in the plugin distribution's ``pyproject.toml``::

    [project.entry-points."silvanforge.importers"]        # model formats
    [project.entry-points."silvanforge.representations"]  # in-memory layouts of trees
    [project.entry-points."silvanforge.targets"]          # code generators

The importer hook marked *dispatched* is called on every plugin with a ``fmt`` name first; a
plugin answers ``None`` for names that are not its own, and the first non-``None`` answer wins
(pluggy ``firstresult``), exactly like pytest's own hooks.

Representations are classes (:mod:`silvanforge.rep`) listed by one hook,
:func:`silvanforge_representation_types`; their methods never emit target code: they build LIR
expressions with the :class:`silvanforge.ir.lir.Builder` they are handed, so one
representation serves every target.  Targets are classes too (:mod:`silvanforge.target`),
listed by :func:`silvanforge_targets`; what they compile is a :class:`silvanforge.runtime.kernel.Kernel`.
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
    ``Forest.feature_categories`` where the library maps pandas categories itself
    (``Forest.hashed_categories`` / ``hashed_combinations`` where it knows categories only by
    hash, as CatBoost does).  Raise
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
    """Return the target classes this plugin provides: subclasses of
    :class:`silvanforge.target.Target`, each with a ``name`` and a ``compile`` that returns a
    :class:`silvanforge.runtime.kernel.Kernel`; :mod:`silvanforge.target` documents the contract (whether
    it runs here, its kind, default schedule, own lowering, source, host key, reloading saved
    code).  The core makes one instance of each a process (``registry().target(name)``)."""


@hookspec
def silvanforge_schedules():
    """Return named schedules this plugin adds to the core's canned ones
    (:data:`silvanforge.scheduler.CANNED`): a dict of name -> function ``(forest, batch_size)``
    returning a :class:`silvanforge.scheduler.Schedule`.  Users name them as they name the
    canned ones (``compile(schedule=NAME)``, ``--schedule NAME``), e.g. a GPU
    backend's template.  Two plugins may list the same function under one name; a name the core or
    another plugin gives another schedule is an error."""

"""The front half of the compiler: a model -> HIR (-> the HIR passes) -> MIR -> LIR, under the
options of one compile (``lower``, ``show``), and the choices made on the way when the user
leaves them open (representation by the plugins' costs, padding).  Nothing here compiles
machine code: :mod:`silvanforge.api` does, through the target plugin."""

from __future__ import annotations

import dataclasses
import hashlib
import os

import numpy as np

from silvanforge.errors import InputError, PluginError, ScheduleError, UnsupportedModelError
from silvanforge.frontend.hir_passes import pad_each_tree, pad_trees, padded_nodes, padded_nodes_each, reorder_trees, tree_groups
from silvanforge.ir import hir, lir, mir
from silvanforge.lowering.walksetup import VECTOR_WALK_DEFAULT
from silvanforge.frontend.loading import load_model
from silvanforge.plan.memo import memoised
from silvanforge.options import CompileOptions, kernel_options
from silvanforge.plugins import registry
from silvanforge.frontend.profiling import as_profile
from silvanforge.rep import instance, refusal, weighs_vectors
from silvanforge.scheduler import Schedule, lower_to_mir, parse_schedule
from silvanforge.scheduler.canned import peel_groups
from silvanforge.frontend.tiling import check_tile_size, format_hir, probability_order_ids, probability_tile_ids, with_tile_ids
from silvanforge.lowering.walkgen import lower_to_lir

# Padding every tree to the forest's depth lets walks skip leaf checks (peelWalk); it is chosen
# while it at most doubles the nodes (docs/benchmarks.md measures what it buys).
PAD_LIMIT = 2.0
PAD_LIMIT_SMALL, PAD_SMALL_BYTES = 8.0, 4 << 20


def choose_representation(forest: hir.Forest, target_kind: str = "cpu", batch_size: int | None = None,
                          walks_only: bool = False, rep_options=None, vectors=None) -> str:
    """The cheapest representation for ``forest`` by the installed plugins' own estimates
    (each representation class's ``cost``, under ``rep_options``, for the vector unit
    ``vectors``; ties by name); ``walks_only``: among those the core walks.
    Without any estimate, the first installed walk representation."""
    reg = registry()
    reps = reg.representations()
    if not reps:
        raise PluginError("no representation plugin is installed (pip install -r requirements.txt "
                          "installs the shipped ones; forge plugins lists what is found)")
    costs = sorted((ns, rep) for rep, ns, _ in reg.rep_costs(forest, target_kind, batch_size, rep_options, vectors)
                   if ns is not None and rep in reps and not (walks_only and reg.rep_kind(rep) != "walk"))
    if costs:
        return costs[0][1]
    walks = [rep for rep in reps if reg.rep_kind(rep) == "walk"]
    if not walks:
        raise PluginError(f"no representation can walk trees (installed: {', '.join(reps)})")
    return walks[0]


def check_linear_leaves(forest: hir.Forest, target: str, rep: str | None) -> None:
    """Refuse a forest with linear leaves for a target (or a representation named with
    ``rep=``) that does not run them (:mod:`silvanforge.lowering.linear_leaves`), naming those that do."""
    if not forest.has_linear():
        return
    reg = registry()
    if not reg.target(target).linear_leaves:
        able = [t for t in reg.targets() if reg.target(t).linear_leaves]
        raise UnsupportedModelError(
            f"target {target!r} does not evaluate linear leaves (LightGBM linear_tree, in this model); "
            + (f"compile for {' or '.join(able)}" if able else "no installed target does"))
    if rep is not None:
        reg.check_representation(rep)
        why = refusal(reg.rep_class(rep), forest)
        if why is not None:
            able = [name for name in reg.representations() if refusal(reg.rep_class(name), forest) is None]
            raise UnsupportedModelError(
                f"the {rep} representation cannot run this model: {why}; "
                + (f"use one that does ({', '.join(f'--rep {name}' for name in able)})" if able
                   else "no installed representation does"))


def choose_padding(forest: hir.Forest) -> bool:
    """Pad when it at most doubles the nodes, or up to 8x them while the padded node
    arrays stay small enough for the L2/L3 caches (PAD_SMALL_BYTES): a walk without leaf checks
    then beats the extra nodes (docs/benchmarks.md, the synthetic suite)."""
    nodes = max(sum(t.num_nodes for t in forest.trees), 1)
    padded = padded_nodes(forest)
    if padded <= PAD_LIMIT * nodes:
        return True
    # Bytes per node of a narrow node layout: threshold + feature + flags + child offset.
    node_bytes = np.dtype(forest.threshold_dtype).itemsize + 4
    return padded <= PAD_LIMIT_SMALL * nodes and padded * node_bytes <= PAD_SMALL_BYTES


def hir_passes(model_forest: hir.Forest, pad: bool, reorder: str | None = None,
               tile_ids: list | None = None) -> hir.Forest:
    """The HIR passes ``lower`` runs, in order: probability-based tile ids attached to the trees
    (``tile_ids``, model order), trees reordered into groups (``reorder``: "depth" or "peel",
    :func:`silvanforge.frontend.hir_passes.reorder_trees`), padding (``pad``: every tree to the forest's
    depth, or to its own depth when reordered, so each group walks without leaf checks)."""
    forest = model_forest if tile_ids is None else with_tile_ids(model_forest, tile_ids)
    if reorder is not None:
        # Padded first: a padded tree's leaves are all at its depth, its peel depth.
        return reorder_trees(pad_each_tree(forest) if pad else forest, reorder)[0]
    return pad_trees(forest) if pad else forest


def _profile_tile_ids(forest: hir.Forest, profile, tile_size: int, pad) -> list | None:
    """Tile ids of the probability-based tiling from ``profile`` (None without a profile); at a
    tile size of one, the order of the nodes (:func:`silvanforge.frontend.tiling.hot_first_order`)."""
    if profile is None:
        return None
    if pad:
        raise InputError("a profile lays the trees out as profiled; it cannot be combined with padding")
    hits = as_profile(profile, forest).hits
    if tile_size == 1:
        return probability_order_ids(forest, hits)
    return probability_tile_ids(forest, hits, tile_size)


def schedule_from_file(path) -> Schedule:
    """The schedule in file ``path``; errors (unreadable, not a schedule) name the file."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ScheduleError(f"cannot read schedule file {path}: "
                            f"{getattr(exc, 'strerror', None) or exc}") from None
    try:
        return parse_schedule(text)
    except ScheduleError as exc:
        raise ScheduleError(f"{path}: {exc}") from None


def _as_schedule(schedule, forest: hir.Forest, batch_size) -> Schedule | None:
    """A Schedule from a Schedule, the name of a canned one (or of one a plugin adds), schedule
    text, or a schedule file (a ``Path``, or a ``str`` naming an existing file)."""
    if schedule is None or isinstance(schedule, Schedule):
        return schedule
    named = registry().schedules()
    if isinstance(schedule, str) and schedule.strip() in named:
        return named[schedule.strip()](forest, batch_size)
    if isinstance(schedule, os.PathLike) or (isinstance(schedule, str) and "\n" not in schedule
                                             and os.path.isfile(schedule)):
        return schedule_from_file(schedule)
    if isinstance(schedule, str):
        return parse_schedule(schedule)
    raise ScheduleError(f"a schedule must be a Schedule, its text, a schedule file or a canned name "
                        f"({', '.join(named)}), got {type(schedule).__name__}")


@dataclasses.dataclass
class Lowered:
    """What the front half of the compiler produced, before any target code."""

    forest: hir.Forest  # the model as imported
    pad: bool  # whether HIR passes padded it (``lowered_forest`` is then the padded one)
    lowered_forest: hir.Forest
    rep: str
    schedule: Schedule
    mir: mir.MirFunction
    lir: lir.Module
    tile_size: int = 1
    reorder: str | None = None
    tile_ids: list | None = None  # probability-based tiling per tree (model order), or None
    # The options that decided the program: the compile's, resolved, with the representation,
    # schedule and padding the compiler chose filled in.
    options: CompileOptions = dataclasses.field(default_factory=CompileOptions)

    def show(self, level: str) -> str:
        """The program at ``level``: hir, mir, lir or target."""
        return program_text(level, self.forest, self.tile_ids, self.tile_size, self.options,
                            lambda: self.mir, lambda: self.lir)


def program_text(level: str, forest: hir.Forest, tile_ids, tile_size: int, options: CompileOptions, mir_fn,
                 lir_module) -> str:
    """A program at ``level`` (hir, mir, lir, target) compiled with ``options`` (its target and
    CPU make the target code): ``mir_fn`` and ``lir_module`` give the MIR function and LIR
    module when asked (a loaded model lowers them only then)."""
    if level == "hir":
        return format_hir(_tiled_model(forest, tile_ids), tile_size)
    if level == "mir":
        return mir.format_function(mir_fn())
    if level == "lir":
        return lir.format_module(lir_module())
    if level == "target":
        target = registry().target(options.target)
        if options.cpu is None:
            return target.source(lir_module())
        return target.source(lir_module(), kernel_options(options))
    raise InputError(f"unknown level {level!r}; choose hir, mir, lir or target")


def compile_options(options: CompileOptions | None = None, **given) -> CompileOptions:
    """The one :class:`~silvanforge.options.CompileOptions` of a ``compile``, ``lower`` or
    ``show`` call: ``options`` (or the defaults) with the keyword arguments ``given`` that differ
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
    return _lower(model, compile_options(options, target=target, rep=rep, schedule=schedule,
                                         batch_size=batch_size, pad=pad, tile_size=tile_size,
                                         profile=profile, reorder=reorder, cpu=cpu))


def _lower(model, opts: CompileOptions, tile_ids: list | None = None) -> Lowered:
    """:func:`lower` of resolved options: the one program builder of a compile, a compiled
    model's other forms and an artifact lowered again.  ``tile_ids``: a probability-based tiling
    already made (an artifact's), in place of the options' profile."""
    target, rep, schedule, batch_size = opts.target, opts.rep, opts.schedule, opts.batch_size
    if isinstance(schedule, Schedule) and not schedule.directives:
        schedule = None  # what a program representation records: nothing to schedule
    pad, tile_size, profile, reorder = opts.pad, opts.tile_size, opts.profile, opts.reorder
    check_tile_size(tile_size)
    tile_size = int(tile_size)
    if isinstance(model, hir.Forest):
        model_forest = model
        # (once a compile: a plan lowers the same model for each of its forms)
        memoised(model_forest, "verified", lambda: hir.verify(model_forest) or True)
    else:
        model_forest = load_model(model)  # verified as it loads
    if target not in registry().targets():
        registry().check_target(target)  # raises: unknown target
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or batch_size <= 0):
        raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
    reg = registry()
    kind = reg.target_kind(target)
    vectors = reg.vectors(target, opts.cpu)
    check_linear_leaves(model_forest, target, rep)
    profiled = profile is not None or tile_ids is not None
    # At a tile size of one a profile orders the nodes of the layouts that can place them
    # (Representation.node_order) and is a hint to the others; tiles need a walk.
    walk_options = [what for what, on in (("schedule", schedule is not None), ("padding", bool(pad)),
                                          ("tiles", tile_size > 1),
                                          ("profile", profiled and tile_size > 1),
                                          ("tree reordering", reorder is not None)) if on]
    if rep is None and not walk_options and pad is None:
        rep = choose_representation(model_forest, kind, batch_size, rep_options=opts.rep_options, vectors=vectors)
    if rep is not None:
        reg.check_representation(rep)
        if reg.rep_kind(rep) == "program":
            if walk_options:
                raise InputError(f"the {rep} representation does not walk trees: it takes no {walk_options[0]}")
            return _lower_program(model_forest, rep, kind, batch_size, opts)
    if reorder is not None and reorder not in ("depth", "peel"):
        raise InputError(f"unknown tree reordering {reorder!r}; choose depth or peel")
    if profiled and tile_size == 1:
        rep = rep or choose_representation(model_forest, kind, batch_size, walks_only=True,
                                           rep_options=opts.rep_options, vectors=vectors)
        if not reg.rep_class(rep).node_order:
            profile, tile_ids = None, None
            opts = dataclasses.replace(opts, profile=None)
    if tile_ids is None:
        tile_ids = _profile_tile_ids(model_forest, profile, tile_size, pad)
    if pad is None:
        if reorder is not None:
            pad = schedule is None and tile_size == 1 and padded_nodes_each(model_forest) <= \
                PAD_LIMIT * max(sum(t.num_nodes for t in model_forest.trees), 1)
        else:
            pad = schedule is None and tile_size == 1 and tile_ids is None and choose_padding(model_forest)
    forest = hir_passes(model_forest, bool(pad), reorder, tile_ids)
    rep = rep or choose_representation(forest, kind, batch_size, walks_only=True, rep_options=opts.rep_options,
                                       vectors=vectors)
    sched = _as_schedule(schedule, forest, batch_size)
    if sched is None and reorder is not None and kind != "gpu":
        # GPU targets keep their own template (it tiles the tree loop); trees stay grouped.
        sched = peel_groups(forest, batch_size, groups=tree_groups(forest, reorder))
    # The target's default knows the representation chosen (rep=), as it may suit its walks.
    sched = sched or reg.target(target).default_schedule(forest, batch_size, dataclasses.replace(opts, rep=rep))
    mir_fn = lower_to_mir(forest, sched)
    # vector_walks as the walks use it (the default where left open), so that it is recorded so.
    chosen = dataclasses.replace(opts, rep=rep, schedule=sched, pad=bool(pad), tile_size=tile_size,
                                 vector_walks=VECTOR_WALK_DEFAULT if opts.vector_walks is None else opts.vector_walks)
    module = _lower_lir(reg, forest, mir_fn, chosen)
    return Lowered(model_forest, bool(pad), forest, rep, sched, mir_fn, module, tile_size,
                   reorder, tile_ids, chosen)


def _lower_lir(reg, forest: hir.Forest, mir_fn, opts: CompileOptions) -> lir.Module:
    """MIR -> LIR with the options' target, representation, tile size and lowering knobs: the
    target's own lowering where it brings one (``Target.lower``), else the core's."""
    target = opts.target
    module = reg.target(target).lower(forest, mir_fn, opts.rep, opts.tile_size, opts)
    if module is None:
        return lower_to_lir(forest, mir_fn, opts.rep, reg.hook, tile_size=opts.tile_size, options=opts)
    if not isinstance(module, lir.Module):
        raise PluginError(f"target {target!r} lowered to {type(module).__name__}, not an LIR module")
    return module


def _lower_program(forest: hir.Forest, rep: str, target_kind: str, batch_size: int | None = None,
                   opts: CompileOptions | None = None) -> Lowered:
    """A program representation's own LIR (its ``program``, for the compile's vector unit
    where it takes ``vectors=``): no HIR passes, no MIR."""
    rep_options = opts.rep_options if opts is not None else None
    program = instance(registry().rep_class(rep), rep_options).program
    vectors = registry().vectors(opts.target, opts.cpu) if opts is not None else None
    module = program(forest, target_kind, batch_size, vectors=vectors) if vectors is not None and \
        weighs_vectors(program) else program(forest, target_kind, batch_size)
    if not isinstance(module, lir.Module):
        raise PluginError(f"program representation {rep!r} built {type(module).__name__}, not an LIR module")
    fn = mir.MirFunction(body=[], num_trees=forest.num_trees, num_outputs=forest.num_outputs,
                         schedule_text=f"{rep} evaluation: no walks, nothing to schedule")
    chosen = dataclasses.replace(opts or CompileOptions(batch_size=batch_size), rep=rep,
                                 schedule=Schedule(), pad=False)
    return Lowered(forest, False, forest, rep, Schedule(), fn, module, options=chosen)


def show(model, level: str, target: str | None = None, rep: str | None = None, schedule=None,
         batch_size: int | None = None, pad: bool | None = None, tile_size: int = 1,
         profile=None, reorder: str | None = None, options: CompileOptions | None = None,
         cpu: str | None = None) -> str:
    """The program at ``level`` (hir, mir, lir, target) without running anything: GPU schedules
    can be printed on a machine without a GPU.  The options are :func:`lower`'s."""
    return _lower(model, compile_options(options, target=target, rep=rep, schedule=schedule,
                                         batch_size=batch_size, pad=pad, tile_size=tile_size,
                                         profile=profile, reorder=reorder, cpu=cpu)).show(level)


def lir_digest(module: lir.Module, tile_ids: list | None = None) -> str:
    """A digest of an LIR module's program (its printed form: buffers, types, functions) and of
    the profile-derived tiling or node order it was lowered with (``tile_ids``), which places
    the nodes in the buffers without changing how they print."""
    h = hashlib.sha256(lir.format_module(module).encode())
    if tile_ids is not None:
        h.update(b"\0tile ids")
        for ids in tile_ids:
            h.update(b"-" if ids is None else np.ascontiguousarray(ids, np.int32).tobytes() + b";")
    return h.hexdigest()


def _tiled_model(forest: hir.Forest, tile_ids) -> hir.Forest:
    return forest if tile_ids is None else with_tile_ids(forest, tile_ids)

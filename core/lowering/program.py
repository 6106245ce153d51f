"""A model's program under the options of one compile: a verified HIR forest -> (the HIR passes)
-> MIR (the schedule's loop nest) -> LIR (the walks, or a program representation's own code),
with the choices left open made on the way (:mod:`silvanforge.lowering.choices`).  Nothing here
compiles machine code: a target does, for :mod:`silvanforge.plan.forms`.  The public ``lower``
and ``show`` are :mod:`silvanforge.api`'s.

And the program printed at each level of the compiler: ``hir`` (the trees, with their tiles),
``mir`` (the loop nest the schedule made), ``lir`` (buffers and statements) and ``target`` (what
the target plugin generates: LLVM IR, CUDA C, OpenCL C), for ``forge show``, ``sf.show`` and a
compiled model's ``show``.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from silvanforge.errors import InputError, PluginError
from silvanforge.frontend.hir_passes import pad_each_tree, pad_trees, padded_nodes_each, reorder_trees, tree_groups
from silvanforge.frontend.tiling import check_tile_size, format_hir, with_tile_ids
from silvanforge.ir import hir, lir, mir
from silvanforge.lowering.choices import (
    PAD_LIMIT,
    as_schedule,
    check_linear_leaves,
    choose_padding,
    choose_representation,
    profile_tile_ids,
)
from silvanforge.lowering.walkgen import lower_to_lir
from silvanforge.lowering.walksetup import VECTOR_WALK_DEFAULT
from silvanforge.options import CompileOptions, kernel_options
from silvanforge.plugins import registry
from silvanforge.rep import ChosenWalks, instance, weighs_vectors
from silvanforge.scheduler import Schedule, lower_to_mir
from silvanforge.scheduler.canned import peel_groups
from silvanforge.target import default_schedule_of


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


def lower_program(model_forest: hir.Forest, opts: CompileOptions, tile_ids: list | None = None) -> Lowered:
    """The program of ``model_forest`` (verified as it entered: :func:`silvanforge.frontend.loading.verified`)
    under resolved ``opts`` (:func:`silvanforge.api.compile_options`, or an artifact's, checked
    as it loaded): the one program builder of a compile, its plan's other forms, the tuner's
    candidates and an artifact lowered again.  ``tile_ids``: a tiling or node order already
    made (an artifact's), in place of the options' profile.

    1. the representation, where nothing asked of the walks decides it: a program
       representation builds the whole LIR itself (no HIR passes, no MIR);
    2. the walks' layout: a profile's tiling or node order, and padding;
    3. the HIR passes (tile ids, tree groups, padding);
    4. the schedule (the user's, the groups' peeled walks, or the target's default) -> MIR;
    5. MIR -> LIR: the target's own lowering where it brings one, else the core's walk generator."""
    reg = registry()
    target, rep, batch_size = opts.target, opts.rep, opts.batch_size
    kind, vectors = reg.target_kind(target), reg.vectors(target, opts.cpu)
    check_tile_size(opts.tile_size)
    if opts.reorder is not None and opts.reorder not in ("depth", "peel"):
        raise InputError(f"unknown tree reordering {opts.reorder!r}; choose depth or peel")
    check_linear_leaves(model_forest, target, rep)
    # 1. A program representation, chosen or named, builds its own program.
    asked = _walk_options(opts, tile_ids)
    if rep is None and not asked and opts.pad is None:
        rep = choose_representation(model_forest, kind, batch_size, rep_options=opts.rep_options, vectors=vectors)
    if rep is not None:
        reg.check_representation(rep)
        if reg.rep_kind(rep) == "program":
            if asked:
                raise InputError(f"the {rep} representation does not walk trees: it takes no {asked[0]}")
            return _lower_program(model_forest, rep, kind, batch_size, opts)
    # 2-3. The walks' layout, then the HIR passes that make it.
    rep, pad, tile_ids, opts = _walk_layout(model_forest, opts, rep, tile_ids, kind, vectors)
    forest = hir_passes(model_forest, pad, opts.reorder, tile_ids)
    rep = rep or choose_representation(forest, kind, batch_size, walks_only=True, rep_options=opts.rep_options,
                                       vectors=vectors)
    # 4. The loop nest.
    sched = as_schedule(_user_schedule(opts), forest, batch_size)
    if sched is None and opts.reorder is not None and kind != "gpu":
        # GPU targets keep their own template (it tiles the tree loop); trees stay grouped.
        sched = peel_groups(forest, batch_size, groups=tree_groups(forest, opts.reorder))
    # The target's default knows the representation chosen, as it may suit its walks.
    sched = sched or default_schedule_of(reg.target(target), forest, batch_size, dataclasses.replace(opts, rep=rep),
                                             ChosenWalks(rep, reg.rep_class(rep)))
    mir_fn = lower_to_mir(forest, sched)
    # 5. The LIR, and the options that decided it: every choice filled in (vector_walks as the
    # walks use it, the default where left open, so that it is recorded so).
    chosen = dataclasses.replace(opts, rep=rep, schedule=sched, pad=pad, tile_size=int(opts.tile_size),
                                 vector_walks=VECTOR_WALK_DEFAULT if opts.vector_walks is None else opts.vector_walks)
    module = _lower_lir(reg, forest, mir_fn, chosen)
    return Lowered(model_forest, pad, forest, rep, sched, mir_fn, module, chosen.tile_size,
                   opts.reorder, tile_ids, chosen)


def _walk_options(opts: CompileOptions, tile_ids) -> list[str]:
    """What the options ask of the walks (a program representation takes none of it)."""
    profiled = opts.profile is not None or tile_ids is not None
    return [what for what, on in (("schedule", _user_schedule(opts) is not None), ("padding", bool(opts.pad)),
                                  ("tiles", opts.tile_size > 1), ("profile", profiled and opts.tile_size > 1),
                                  ("tree reordering", opts.reorder is not None)) if on]


def _walk_layout(forest: hir.Forest, opts: CompileOptions, rep: str | None, tile_ids, kind: str, vectors):
    """``(rep, pad, tile_ids, opts)``: a profile's tiling or node order, and padding, where the
    options leave it open.  At a tile size of one a profile orders the nodes of the layouts that
    can place them (``Representation.node_order``) and is a hint to the others (dropped from
    the options then); tiles need a walk.  Padding is chosen only without a schedule, tiles or
    a tiling: padded to the forest's depth (or, reordered, each tree to its own) while cheap."""
    tile_size, profile, reorder = int(opts.tile_size), opts.profile, opts.reorder
    if (profile is not None or tile_ids is not None) and tile_size == 1:
        rep = rep or choose_representation(forest, kind, opts.batch_size, walks_only=True,
                                           rep_options=opts.rep_options, vectors=vectors)
        if not registry().rep_class(rep).node_order:
            profile, tile_ids = None, None
            opts = dataclasses.replace(opts, profile=None)
    if tile_ids is None:
        tile_ids = profile_tile_ids(forest, profile, tile_size, opts.pad)
    pad = opts.pad
    if pad is None:
        plain = _user_schedule(opts) is None and tile_size == 1
        if reorder is not None:
            pad = plain and padded_nodes_each(forest) <= PAD_LIMIT * max(sum(t.num_nodes for t in forest.trees), 1)
        else:
            pad = plain and tile_ids is None and choose_padding(forest)
    return rep, bool(pad), tile_ids, opts


def _user_schedule(opts: CompileOptions):
    """The schedule the options give (a Schedule, its text, a file, a canned name), or None:
    none given, or an empty one (what a program representation's form records)."""
    schedule = opts.schedule
    return None if isinstance(schedule, Schedule) and not schedule.directives else schedule


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


def lir_digest(module: lir.Module, tile_ids: list | None = None) -> str:
    """A digest of an LIR module's program (its printed form: buffers, types, functions) and of
    the profile-derived tiling or node order it was lowered with (``tile_ids``), which places
    the nodes in the buffers without changing how they print, and of the module info that
    steers code generation (:data:`~silvanforge.ir.lir.CODEGEN_INFO`, as the CPU target reads
    it): forms of one digest share a build, and a saved artifact's code is taken only for a
    program of its digest."""
    h = hashlib.sha256(lir.format_module(module).encode())
    info = module.info
    codegen = (bool(info.get("vector_walk")), bool(info.get("light_optimisation")),
               info.get("machine_scheduler", True) is not False)
    if codegen != (False, False, True):  # (the defaults: digests as before for most programs)
        h.update(b"\0codegen" + repr(codegen).encode())
    if tile_ids is not None:
        h.update(b"\0tile ids")
        for ids in tile_ids:
            h.update(b"-" if ids is None else np.ascontiguousarray(ids, np.int32).tobytes() + b";")
    return h.hexdigest()


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


def _tiled_model(forest: hir.Forest, tile_ids) -> hir.Forest:
    return forest if tile_ids is None else with_tile_ids(forest, tile_ids)

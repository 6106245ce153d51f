"""What a compile decides where the user leaves it open, and what it refuses: the
representation (by the installed plugins' own estimates), padding, a profile's tiling or node
order, the schedule a user names or writes, and models a target or representation cannot run
(linear leaves).  :mod:`silvanforge.lowering.program` asks here, in that order."""

from __future__ import annotations

import os

import numpy as np

from silvanforge.errors import InputError, PluginError, ScheduleError, UnsupportedModelError
from silvanforge.frontend.hir_passes import padded_nodes
from silvanforge.frontend.profiling import as_profile
from silvanforge.frontend.tiling import probability_order_ids, probability_tile_ids
from silvanforge.ir import hir
from silvanforge.plugins import registry
from silvanforge.rep import refusal
from silvanforge.scheduler import Schedule, parse_schedule

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


def profile_tile_ids(forest: hir.Forest, profile, tile_size: int, pad) -> list | None:
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


MAX_SCHEDULE_CHARS = 1 << 20  # a schedule file's size read at most


def schedule_from_file(path) -> Schedule:
    """The schedule in file ``path``; errors (unreadable, not a schedule) name the file."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_SCHEDULE_CHARS + 1)  # (a schedule is lines of directives: /dev/zero is none)
        if len(text) > MAX_SCHEDULE_CHARS:
            raise ScheduleError(f"{path}: over {MAX_SCHEDULE_CHARS} characters, not a schedule")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScheduleError(f"cannot read schedule file {path}: "
                            f"{getattr(exc, 'strerror', None) or exc}") from None
    try:
        return parse_schedule(text)
    except ScheduleError as exc:
        raise ScheduleError(f"{path}: {exc}") from None


def as_schedule(schedule, forest: hir.Forest, batch_size) -> Schedule | None:
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

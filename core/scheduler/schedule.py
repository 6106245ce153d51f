"""Schedules: how the iteration space of rows x trees becomes a loop nest.

A schedule is a list of directives over the two root indices ``batch`` and ``tree`` (seed 004,
section 4), written one per line in text::

    reorder(batch, tree)
    parallel(batch)

This first version knows the loop order (``reorder``) and row parallelism (``parallel``); the
full language (tile, split, unroll, gpuDimension, reductions, ...) extends this module.
"""

from __future__ import annotations

import dataclasses
import re

from ..errors import ScheduleError

ROOT_INDICES = ("batch", "tree")
_DIRECTIVE = re.compile(r"^\s*([A-Za-z_]\w*)\s*\((.*)\)\s*$")


@dataclasses.dataclass
class Schedule:
    """Loop order, outermost first, and the set of loops run in parallel."""

    order: tuple[str, ...] = ("batch", "tree")
    parallel: frozenset[str] = frozenset({"batch"})

    def __post_init__(self):
        if sorted(self.order) != sorted(ROOT_INDICES):
            raise ScheduleError(
                f"reorder must name each of {', '.join(ROOT_INDICES)} exactly once, got {', '.join(self.order)}"
            )
        for idx in self.parallel:
            if idx not in ROOT_INDICES:
                raise ScheduleError(f"parallel({idx}): unknown index {idx!r}")
        if "tree" in self.parallel:
            raise ScheduleError(
                "parallel(tree) needs a privatised reduction of the margins, which this version "
                "does not lower yet; parallelise the batch loop"
            )

    def to_text(self) -> str:
        lines = [f"reorder({', '.join(self.order)})"]
        lines += [f"parallel({idx})" for idx in sorted(self.parallel)]
        return "\n".join(lines)


def default_schedule() -> Schedule:
    """Each row walks every tree (the loop order of seed 001), rows in parallel."""
    return Schedule()


def parse_schedule(text: str) -> Schedule:
    """Parse the text form; errors name the line and the problem."""
    order: tuple[str, ...] = ("batch", "tree")
    parallel: set[str] = set()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _DIRECTIVE.match(line)
        if not m:
            raise ScheduleError(f"schedule line {lineno}: cannot parse {raw.strip()!r} "
                                "(expected a directive such as reorder(batch, tree))")
        name, args = m.group(1), [a.strip() for a in m.group(2).split(",") if a.strip()]
        if name == "reorder":
            order = tuple(args)
        elif name == "parallel":
            if len(args) != 1:
                raise ScheduleError(f"schedule line {lineno}: parallel takes one index, got {len(args)}")
            parallel.add(args[0])
        else:
            raise ScheduleError(f"schedule line {lineno}: unknown directive {name!r} "
                                "(this version understands reorder and parallel)")
    return Schedule(order=order, parallel=frozenset(parallel))

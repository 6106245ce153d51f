"""Schedules: the scheduling language of the SilvanForge paper draft, section 'Scheduling Language'.

A schedule is an ordered list of directives over the index variables ``batch`` (rows) and
``tree`` (trees) and the indices derived from them.  It is written either through the Python
API, which reads like the loop nest it produces::

    s = Schedule()
    s.tile("batch", "b0", "b1", 64)
    s.reorder("b0", "tree", "b1")
    s.parallel("b0")

or as text, one directive per line (``#`` starts a comment)::

    tile(batch, b0, b1, 64)
    reorder(b0, tree, b1)
    parallel(b0)

The directives (their meaning is in :mod:`silvanforge.scheduler.looptree`, which applies them):

loop modifiers  tile(i, outer, inner, size)  split(i, first, second, at)  reorder(i, j, ...)
                unroll(i)  specialize(i)  gpuDimension(i, grid.x|block.y|...)
optimisations   cache(i)  parallel(i)  interleave(i[, factor])  unrollWalk(i, depth)
                peelWalk(i, depth)  expandWalk(i)
reductions      atomicReduce(i)  sharedReduce(i)  vectorReduce(i, width)  orderedReduce(i)
"""

from __future__ import annotations

import dataclasses
import re

from silvanforge.errors import ScheduleError

GPU_DIMENSIONS = tuple(f"{level}.{axis}" for level in ("grid", "block") for axis in "xyz")

# name -> (argument kinds); "i" an existing index, "n" a new index name, "k" a positive integer,
# "g" a GPU dimension, "k?" an optional positive integer, "*" one or more existing indices.
SIGNATURES: dict[str, tuple[str, ...]] = {
    "tile": ("i", "n", "n", "k"),
    "split": ("i", "n", "n", "k"),
    "reorder": ("*",),
    "unroll": ("i",),
    "specialize": ("i",),
    "gpuDimension": ("i", "g"),
    "cache": ("i",),
    "parallel": ("i",),
    "interleave": ("i", "k?"),
    "unrollWalk": ("i", "k"),
    "peelWalk": ("i", "k"),
    "expandWalk": ("i",),
    "atomicReduce": ("i",),
    "sharedReduce": ("i",),
    "vectorReduce": ("i", "k"),
    "orderedReduce": ("i",),
}

_DIRECTIVE = re.compile(r"^([A-Za-z_]\w*)\s*\((.*)\)$")
_NAME = re.compile(r"^[A-Za-z_]\w*$")


@dataclasses.dataclass(frozen=True)
class Directive:
    name: str
    args: tuple
    line: int = 0  # line in the schedule text, for error messages (0: built in Python)

    def text(self) -> str:
        return f"{self.name}({', '.join(str(a) for a in self.args)})"

    def where(self) -> str:
        return f"line {self.line}: {self.text()}" if self.line else self.text()


def _check_args(name: str, args: tuple, where: str) -> tuple:
    kinds = SIGNATURES.get(name)
    if kinds is None:
        raise ScheduleError(f"{where}: unknown directive {name!r}; known: {', '.join(SIGNATURES)}")
    if kinds == ("*",):
        if len(args) < 2:
            raise ScheduleError(f"{where}: reorder takes two or more indices")
        kinds = ("i",) * len(args)
    optional = sum(k.endswith("?") for k in kinds)
    if not len(kinds) - optional <= len(args) <= len(kinds):
        raise ScheduleError(f"{where}: {name} takes {len(kinds) - optional}"
                            f"{'' if not optional else f' to {len(kinds)}'} arguments, got {len(args)}")
    out = []
    for kind, arg in zip(kinds, args):
        kind = kind.rstrip("?")
        if kind in ("i", "n"):
            if not isinstance(arg, str) or not _NAME.match(arg):
                raise ScheduleError(f"{where}: {arg!r} is not an index name")
            out.append(arg)
        elif kind == "k":
            text = str(arg).strip()
            if isinstance(arg, bool) or not (isinstance(arg, int) or text.isdigit()) or int(text) <= 0:
                raise ScheduleError(f"{where}: {name} needs a positive whole number, got {arg!r}")
            out.append(int(text))
        elif kind == "g":
            if arg not in GPU_DIMENSIONS:
                raise ScheduleError(f"{where}: {arg!r} is not a GPU dimension ({', '.join(GPU_DIMENSIONS)})")
            out.append(arg)
    return tuple(out)


class Schedule:
    """An ordered list of directives; each method appends one and returns the schedule."""

    def __init__(self, directives: list[Directive] | None = None):
        self.directives: list[Directive] = list(directives or [])

    def add(self, name: str, *args, line: int = 0) -> "Schedule":
        where = f"line {line}: {name}(...)" if line else f"{name}(...)"
        self.directives.append(Directive(name, _check_args(name, args, where), line))
        return self

    # loop modifiers
    def tile(self, index: str, outer: str, inner: str, size: int) -> "Schedule":
        return self.add("tile", index, outer, inner, size)

    def split(self, index: str, first: str, second: str, at: int) -> "Schedule":
        return self.add("split", index, first, second, at)

    def reorder(self, *indices: str) -> "Schedule":
        return self.add("reorder", *indices)

    def unroll(self, index: str) -> "Schedule":
        return self.add("unroll", index)

    def specialize(self, index: str) -> "Schedule":
        return self.add("specialize", index)

    def gpu_dimension(self, index: str, dim: str) -> "Schedule":
        return self.add("gpuDimension", index, dim)

    # optimisations
    def cache(self, index: str) -> "Schedule":
        return self.add("cache", index)

    def parallel(self, index: str) -> "Schedule":
        return self.add("parallel", index)

    def interleave(self, index: str, factor: int | None = None) -> "Schedule":
        return self.add("interleave", index, *([] if factor is None else [factor]))

    def unroll_walk(self, index: str, depth: int) -> "Schedule":
        return self.add("unrollWalk", index, depth)

    def peel_walk(self, index: str, depth: int) -> "Schedule":
        return self.add("peelWalk", index, depth)

    def expand_walk(self, index: str) -> "Schedule":
        return self.add("expandWalk", index)

    # reductions
    def atomic_reduce(self, index: str) -> "Schedule":
        return self.add("atomicReduce", index)

    def shared_reduce(self, index: str) -> "Schedule":
        return self.add("sharedReduce", index)

    def vector_reduce(self, index: str, width: int) -> "Schedule":
        return self.add("vectorReduce", index, width)

    def ordered_reduce(self, index: str) -> "Schedule":
        return self.add("orderedReduce", index)

    def to_text(self) -> str:
        return "\n".join(d.text() for d in self.directives)

    def __eq__(self, other) -> bool:
        return isinstance(other, Schedule) and [(d.name, d.args) for d in self.directives] == [
            (d.name, d.args) for d in other.directives]

    def __repr__(self) -> str:
        return f"Schedule({self.to_text()!r})"

    def uses_gpu(self) -> bool:
        return any(d.name in ("gpuDimension", "sharedReduce") for d in self.directives)


def parse_schedule(text: str) -> Schedule:
    """Parse the text form; errors name the line and the problem."""
    s = Schedule()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip().rstrip(";")
        if not line:
            continue
        m = _DIRECTIVE.match(line)
        if not m:
            raise ScheduleError(f"schedule line {lineno}: cannot parse {raw.strip()!r} "
                                "(expected a directive such as tile(batch, b0, b1, 64))")
        args = [a.strip() for a in m.group(2).split(",")] if m.group(2).strip() else []
        s.add(m.group(1), *args, line=lineno)
    return s


def default_schedule() -> Schedule:
    """Each row walks every tree in order (the loop order of the Treebeard paper draft), rows in
    parallel."""
    return Schedule().parallel("batch")

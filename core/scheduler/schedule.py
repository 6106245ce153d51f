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
                peelWalk(i, depth)  expandWalk(i)  chainWalks(i)
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
    "chainWalks": ("i",),
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
    """An ordered list of directives; each method appends one and returns the schedule, so calls
    chain: ``Schedule().tile("batch", "b0", "b1", 64).reorder("b0", "tree", "b1")``.

    A method checks only its arguments (names, positive numbers), raising :class:`ScheduleError`
    at once.  What a directive requires of the loop nest is checked when the schedule is applied
    to a model (``sf.compile``, ``sf.lower``, ``sf.show``), in order, and a breach is a
    ``ScheduleError`` naming the directive and its line.  The MIR before and after each directive
    is shown for ``examples/model.json`` (20 trees of depth 4) as ``sf.show(model, "mir",
    schedule=...)`` prints it, abbreviated: ``walk(tree, row)`` stands for the walk of one tree
    for one row and the ``reduce`` of its value into the row's margins, and the loops that
    initialise and finalise the margins are left out.  ``batch`` runs over the rows of a call
    (``row_begin`` to ``row_end``), ``tree`` over the trees.
    """

    def __init__(self, directives: list[Directive] | None = None):
        self.directives: list[Directive] = list(directives or [])

    def add(self, name: str, *args, line: int = 0) -> "Schedule":
        """Append the directive ``name``, spelled as in the text form (``"tile"``,
        ``"gpuDimension"``, ...); the methods below call it.

        Parameters
        ----------
        name : str
            A directive of :data:`SIGNATURES`.
        args
            Its arguments: index names, positive whole numbers (as ``int`` or digits), GPU
            dimensions (``"grid.x"`` ... ``"block.z"``).
        line : int
            The line of the schedule text it came from, for error messages (0: built in Python).

        Raises :class:`ScheduleError` for an unknown directive, a wrong number of arguments or
        an argument of the wrong kind.  It changes the MIR as the method of the same name does.
        """
        where = f"line {line}: {name}(...)" if line else f"{name}(...)"
        self.directives.append(Directive(name, _check_args(name, args, where), line))
        return self

    # loop modifiers
    def tile(self, index: str, outer: str, inner: str, size: int) -> "Schedule":
        """Tile the loop over ``index``: ``outer`` steps over its range by ``size``, ``inner``
        covers one tile (the last tile may be shorter: no padding, no guard).

        Parameters
        ----------
        index : str
            The loop to tile.
        outer, inner : str
            New index names; both count in ``index``'s coordinates (rows or trees).
        size : int
            The tile's size.

        Requires ``index`` to be a loop (not tiled or split already) with no attribute set yet
        (``parallel`` and the like belong on ``outer`` or ``inner``), and unused names.
        ``inner`` must stay inside ``outer`` through later reorders.  ``tile(batch, b0, b1, 64)``::

            for batch = row_begin to row_end      for b0 = row_begin to row_end step 64
              for tree = 0 to 20             ->     for b1 = b0 to min(b0 + 64, row_end)
                walk(tree, batch)                     for tree = 0 to 20
                                                        walk(tree, b1)
        """
        return self.add("tile", index, outer, inner, size)

    def split(self, index: str, first: str, second: str, at: int) -> "Schedule":
        """Split the loop over ``index`` into two sibling loops, each with a copy of its body:
        ``first`` covers its first ``at`` iterations, ``second`` the rest.

        Parameters
        ----------
        index : str
            The loop to split.
        first, second : str
            New index names.
        at : int
            Where ``second`` starts (``first`` stops early where the range is shorter).

        Requires what :meth:`tile` does.  The copies share their index variables, so a later
        directive on an index inside the body applies to both.  ``split(tree, t0, t1, 8)``::

            for batch = row_begin to row_end      for batch = row_begin to row_end
              for tree = 0 to 20             ->     for t0 = 0 to 8
                walk(tree, batch)                     walk(t0, batch)
                                                    for t1 = 8 to 20
                                                      walk(t1, batch)
        """
        return self.add("split", index, first, second, at)

    def reorder(self, *indices: str) -> "Schedule":
        """Nest the loops over ``indices`` in the order given, outermost first.

        Parameters
        ----------
        indices : str
            Two or more distinct indices.

        Requires the loops to be successive and perfectly nested (each holding only the next)
        in every nest where they appear, and every tile's inner index to stay inside its outer
        one.  ``reorder(tree, batch)``::

            for batch = row_begin to row_end      for tree = 0 to 20
              for tree = 0 to 20             ->     for batch = row_begin to row_end
                walk(tree, batch)                     walk(tree, batch)
        """
        return self.add("reorder", *indices)

    def unroll(self, index: str) -> "Schedule":
        """Copy the body of the loop over ``index`` once per iteration (a loop of a tile whose
        range depends on the outer index gets copies guarded by a range test).

        Parameters
        ----------
        index : str
            The loop to unroll.

        Requires a trip count known when compiling, at most 256 (a loop over rows: tile it
        first).  ``tile(tree, t0, t1, 4)`` then ``unroll(t1)``::

            for t0 = 0 to 20 step 4               for t0 = 0 to 20 step 4
              for t1 = t0 to min(t0 + 4, 20) ->     for t1 = t0 to min(t0 + 4, 20) <unroll>
                walk(t1, batch)                       walk(t1, batch)
        """
        return self.add("unroll", index)

    def specialize(self, index: str) -> "Schedule":
        """Generate the body of the loop over trees ``index`` once per tree, each copy with its
        tree a constant (what :meth:`expand_walk` needs).

        Parameters
        ----------
        index : str
            A loop over trees.

        Requires a tree index whose trip count is known when compiling, at most 256.
        ``specialize(tree)``::

            for tree = 0 to 20               ->   for tree = 0 to 20 <specialize>
              walk(tree, batch)                     walk(tree, batch)
        """
        return self.add("specialize", index)

    def gpu_dimension(self, index: str, dim: str) -> "Schedule":
        """Map the loop over ``index`` to a GPU grid or block dimension (a parallel loop).

        Parameters
        ----------
        index : str
            The loop to map.
        dim : str
            ``"grid.x"``, ``"grid.y"``, ``"grid.z"``, ``"block.x"``, ``"block.y"`` or ``"block.z"``.

        Requires ``dim`` not mapped to another index; a GPU target (the CPU target refuses the
        schedule).  ``gpuDimension(batch, grid.x)``::

            for batch = row_begin to row_end ->   par.for batch = row_begin to row_end <grid.x>
        """
        return self.add("gpuDimension", index, dim)

    # optimisations
    def cache(self, index: str) -> "Schedule":
        """Bring the rows (a loop over rows) or the trees' nodes (a loop over trees) one
        iteration of ``index`` covers closer before its body runs (the CPU prefetches them;
        GPU targets copy them to shared memory).

        Parameters
        ----------
        index : str
            The loop whose iterations' working set is cached; usually a tile's outer index.

        Requires a loop.  ``tile(batch, b0, b1, 16)`` then ``cache(b0)``::

            for b0 = row_begin to row_end step 16      for b0 = row_begin to row_end step 16
              for b1 = b0 to min(b0 + 16, row_end) ->     cacheRows(input, b0, min(b0 + 16, row_end))
                                                         for b1 = b0 to min(b0 + 16, row_end)
        """
        return self.add("cache", index)

    def parallel(self, index: str) -> "Schedule":
        """Run the iterations of the loop over ``index`` in parallel (``par.for``).

        Parameters
        ----------
        index : str
            The loop to run in parallel.

        Requires a loop.  Rows never conflict (each owns its margins); a parallel loop over
        trees does, and legalisation privatises its reduces: a slice of a buffer for each
        iteration, folded into the margins after the loop (sums in another order than the
        library's: the last bits may differ).  The CPU target threads the outermost parallel
        loop only.  ``tile(tree, t0, t1, 4)`` then ``parallel(t0)``::

            for t0 = 0 to 20 step 4          ->   par.for t0 = 0 to 20 step 4
              for t1 = t0 to min(t0 + 4, 20)        for t1 = t0 to min(t0 + 4, 20)
                walk(t1, batch)                       walk(t1, batch) into partial0[t0 / 4]
                                                  margins[batch] = reduce_dimension(partial0, dim=0)
        """
        return self.add("parallel", index)

    def interleave(self, index: str, factor: int | None = None) -> "Schedule":
        """Walk the iterations of the innermost loop over ``index`` as lanes advancing in turn,
        ``factor`` walks in flight (hiding each walk's load latency behind the others').

        Parameters
        ----------
        index : str
            An innermost loop (it holds the walk, no other loop).
        factor : int, optional
            Walks in flight; default (and at most) the loop's trip count.

        Requires an innermost loop, also after later reorders, whose trip count is known when
        compiling (at most 256) and at least 2.  ``tile(batch, b0, b1, 8)``, ``reorder(b0, tree,
        b1)``, then ``interleave(b1)``::

            for tree = 0 to 20                      for tree = 0 to 20
              for b1 = b0 to min(b0 + 8, row_end) ->  for b1 = b0 to min(b0 + 8, row_end) <interleave=8>
                walk(tree, b1)                          walk(tree, b1)
        """
        return self.add("interleave", index, *([] if factor is None else [factor]))

    def unroll_walk(self, index: str, depth: int) -> "Schedule":
        """Unroll ``depth`` steps of the walks inside the loop over ``index`` (after any peeled
        steps; each unrolled step still checks for a leaf, and a loop finishes deeper walks).

        Parameters
        ----------
        index : str
            A loop around the walks (the innermost one set decides).
        depth : int
            Steps to unroll.

        Requires a loop.  Walks whose leaves loop to themselves are peeled throughout already
        and stay as they are.  ``unrollWalk(tree, 2)``::

            walk(tree, batch)                ->   walk(tree, batch) <unrollDepth = 2>
        """
        return self.add("unrollWalk", index, depth)

    def peel_walk(self, index: str, depth: int) -> "Schedule":
        """Run the first ``depth`` steps of the walks inside the loop over ``index`` without
        checking for a leaf.

        Parameters
        ----------
        index : str
            A loop around the walks (the innermost one set decides).
        depth : int
            Steps to peel.

        Requires every leaf of the trees the loop walks (a loop over trees: those in its range;
        any other: all) to be at least ``depth`` deep; padded trees are.  ``peelWalk(tree, 2)``::

            walk(tree, batch)                ->   walk(tree, batch) <peelDepth = 2>
        """
        return self.add("peelWalk", index, depth)

    def expand_walk(self, index: str) -> "Schedule":
        """Generate each walk inside the loop over ``index`` as nested branches with the tree's
        nodes (columns, thresholds, flags) as constants, as lleaves and Treelite do.

        Parameters
        ----------
        index : str
            A loop around the walks.

        Requires, when lowered, every walk's tree known at compile time (a loop over trees
        around it specialised or unrolled) and untiled trees (tile size 1).  ``specialize(tree)``
        then ``expandWalk(tree)``::

            walk(tree, batch)                ->   walk(tree, batch) <expand>
        """
        return self.add("expandWalk", index)

    def chain_walks(self, index: str) -> "Schedule":
        """Walk the trees of the interleaved loop over ``index`` as ``interleave`` chains: each
        lane walks its trees back to back (j, j + lanes, j + 2 lanes...), stepping from a tree's
        leaf straight to its next tree's root, so no lane waits at a leaf for the others' longer
        paths; each tree's value is kept and the values added in tree order after the loop
        (the sums are the reference's).  The layout links the trees so
        (:attr:`silvanforge.rep.Representation.chains`).

        Parameters
        ----------
        index : str
            The loop over every tree (``tree`` itself, not tiled), interleaved.

        Lowered as chains where walks read split rows through self-looping inline leaves of
        untiled trees without linear leaves, in a representation that lays chains out (sparse);
        elsewhere as the plain interleaved loop (``forge show``'s LIR says which).
        ``interleave(tree, 8)`` then ``chainWalks(tree)``::

            walk(tree, batch)                ->   walk(tree, batch) <chain>
        """
        return self.add("chainWalks", index)

    # reductions
    def atomic_reduce(self, index: str) -> "Schedule":
        """Let the parallel loop over trees ``index`` add into the margins atomically instead of
        privatising them.

        Parameters
        ----------
        index : str
            A parallel (or GPU-mapped) loop over trees with no other reduction directive.

        Requires also a model whose trees' values are summed or averaged, and no other parallel
        loop over trees in its nest.  ``parallel(tree)`` then ``atomicReduce(tree)``::

            par.for tree = 0 to 20                       par.for tree = 0 to 20
              reduce(margins[batch], treePred) <'sum'> ->  reduce(margins[batch], treePred) <'sum' atomic>
        """
        return self.add("atomicReduce", index)

    def shared_reduce(self, index: str) -> "Schedule":
        """Fold the privatised slices of the GPU-mapped loop over trees ``index`` in the
        block's shared memory.

        Parameters
        ----------
        index : str
            A parallel or GPU-mapped loop over trees with no other reduction directive.

        Requires a GPU target (the CPU target refuses it).  The MIR prints as :meth:`parallel`'s;
        its fold after the loop is made in shared memory.
        ``gpuDimension(batch, grid.x)``, ``tile(tree, t0, t1, 10)``, ``gpuDimension(t0,
        block.x)``, then ``sharedReduce(t0)``::

            par.for t0 = 0 to 20 step 10 <block.x>
              for t1 = t0 to min(t0 + 10, 20)
                walk(t1, batch) into partial0[t0 / 10]
            margins[batch] = reduce_dimension(partial0, dim=0)     (folded in shared memory)
        """
        return self.add("sharedReduce", index)

    def vector_reduce(self, index: str, width: int) -> "Schedule":
        """Fold the privatised slices of the parallel loop over trees ``index`` ``width`` at a
        time into independent accumulators.

        Parameters
        ----------
        index : str
            A parallel loop over trees with no other reduction directive.
        width : int
            Slices folded at a time.

        Requires a parallel (or GPU-mapped) loop over trees with no other reduction directive.
        ``tile(tree, t0, t1, 4)``, ``parallel(t0)``, then ``vectorReduce(t0, 4)``::

            margins[batch] = reduce_dimension(partial0, dim=0)
              ->  margins[batch] = reduce_dimension(partial0, dim=0) <vector=4>
        """
        return self.add("vectorReduce", index, width)

    def ordered_reduce(self, index: str) -> "Schedule":
        """Privatise the parallel loop over trees ``index`` per tree: each tree's value in a
        slot of its own, added to the margins in tree order after the loop, the library's order
        of sums (exact, where partial sums of groups are exact only up to rounding).

        Parameters
        ----------
        index : str
            A parallel loop over trees, not GPU-mapped, with no other reduction directive.

        Requires also a model whose trees' values are summed or averaged, and no other parallel
        loop over trees in its nest.  ``tile(tree, t0, t1, 4)``, ``parallel(t0)``, then
        ``orderedReduce(t0)`` (a slot a tree, not one a ``t0`` iteration)::

            walk(t1, batch) into partial0[t0 / 4]    ->  walk(t1, batch) into partial0[t1]
            margins[batch] = reduce_dimension(...)   ->  ... = reduce_dimension(partial0, dim=0) <ordered>
        """
        return self.add("orderedReduce", index)

    def to_text(self) -> str:
        """The schedule's text form, one directive a line; :func:`parse_schedule` reads it back
        to an equal schedule."""
        return "\n".join(d.text() for d in self.directives)

    def __eq__(self, other) -> bool:
        return isinstance(other, Schedule) and [(d.name, d.args) for d in self.directives] == [
            (d.name, d.args) for d in other.directives]

    def __repr__(self) -> str:
        return f"Schedule({self.to_text()!r})"

    def uses_gpu(self) -> bool:
        """Whether a directive only a GPU target runs (``gpuDimension``, ``sharedReduce``) is in
        the schedule."""
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

"""The loop tree a schedule builds, the lineage of its index variables, and HIR -> MIR: the loop
tree turned into a loop nest with inferred ranges (:func:`lower_to_mir`).

Loops are nodes of a tree whose children are the loops they immediately contain; a node with
no children holds the tree walk and the reduce.  The tree starts as ``batch { tree { walk } }``
and each directive rewrites it (the SilvanForge paper draft, section 'Compiler Overview'):

* ``tile(i, o, n, s)`` replaces every loop over ``i`` by ``o { n { ... } }``: ``o`` steps over
  ``i``'s range by ``s``, ``n`` covers one tile; the last tile may be partial (a remainder).
* ``split(i, f, g, k)`` replaces every loop over ``i`` by two sibling loops with copies of its
  body: ``f`` covers the first ``k`` iterations of ``i``, ``g`` the rest.
* ``reorder(...)`` permutes indices that form a perfectly nested chain.
* the other directives set attributes of an index (``parallel``, ``unroll``, ...).

Every derived index knows its parent and its role (lineage), so ranges are inferred, never
given: all indices count in the coordinates of their root (a row or a tree number).  Copies
made by ``split`` share their index variables, so a later directive on an index inside the
copied body applies to every copy.
"""

from __future__ import annotations

import copy
import dataclasses

from silvanforge.errors import ScheduleError
from silvanforge.frontend.hir_passes import leaf_depth_range
from silvanforge.ir import hir, mir
from silvanforge.reduction.legalize import legalize
from silvanforge.scheduler.schedule import Directive, Schedule

# Loops whose trip count we unroll or interleave must be small and known when compiling.
MAX_STATIC_TRIP = 256
# Rows or trees one iteration of a tiled loop may span (the product of its tile sizes), and a
# split point's bound: past them the generated loops' 64-bit index arithmetic could overflow.
MAX_SPAN = 2**31


@dataclasses.dataclass(eq=False)
class IndexVar:
    name: str
    dimension: str  # "batch" or "tree"
    parent: "IndexVar | None" = None
    role: str = "root"  # root | outer | inner | first | second
    size: int = 0  # tile size (outer/inner) or split point (first/second)
    sibling: "IndexVar | None" = None  # the other index made by the same tile or split
    # attributes set by directives
    parallel: bool = False
    unroll: bool = False
    specialize: bool = False
    interleave: int = 0  # number of walks in flight; 0 = not interleaved
    unroll_walk: int = 0
    peel_walk: int = 0
    expand_walk: bool = False
    chain_walk: bool = False
    gpu: str | None = None
    cache: bool = False
    reduce: str | None = None  # "atomic" | "shared" | "vector"
    vector_width: int = 0
    # Set when the index is tiled or split away (it is then no longer a loop of its own).
    tiled_into: "tuple[IndexVar, IndexVar] | None" = None
    split_into: "tuple[IndexVar, IndexVar] | None" = None

    @property
    def derived(self) -> bool:
        return self.tiled_into is not None or self.split_into is not None

    def value_on(self, bound) -> "IndexVar | None":
        """The loop on a path (``bound``: indices of the enclosing loops) that carries this
        index's value: itself, the inner loop of its tile, or the part of its split."""
        if self in bound:
            return self
        if self.tiled_into is not None:
            return self.tiled_into[1].value_on(bound)
        if self.split_into is not None:
            return self.split_into[0].value_on(bound) or self.split_into[1].value_on(bound)
        return None

    def __repr__(self) -> str:
        return f"IndexVar({self.name})"

    def lineage(self) -> list["IndexVar"]:
        """This index and its ancestors, innermost first."""
        out, cur = [], self
        while cur is not None:
            out.append(cur)
            cur = cur.parent
        return out

    def max_trip(self, num_trees: int) -> int | None:
        """An upper bound on this loop's trip count known at compile time, or None (loops over
        the rows of a batch whose size is only known when predicting)."""
        if self.role == "root":
            return num_trees if self.dimension == "tree" else None
        parent = self.parent.max_trip(num_trees)
        if self.role == "inner":
            return self.size if parent is None else min(self.size, parent)
        if self.role == "first":
            return self.size if parent is None else min(self.size, parent)
        if parent is None:
            return None
        if self.role == "outer":
            return -(-parent // self.size)
        return max(0, parent - self.size)  # second


def _tree_range(idx: IndexVar, num_trees: int) -> tuple[int, int]:
    """The trees (start, stop) a loop over tree index ``idx`` can visit, from its lineage."""
    if idx.role == "root":
        return 0, num_trees
    start, stop = _tree_range(idx.parent, num_trees)
    if idx.role == "first":
        return start, min(start + idx.size, stop)
    if idx.role == "second":
        return min(start + idx.size, stop), stop
    return start, stop  # a tile's loops cover their parent's range together


@dataclasses.dataclass
class LoopNode:
    index: IndexVar
    children: list["LoopNode"] = dataclasses.field(default_factory=list)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()


@dataclasses.dataclass
class LoopTree:
    roots: list[LoopNode]
    indices: dict[str, IndexVar]
    schedule: Schedule

    def nodes(self):
        for r in self.roots:
            yield from r.walk()

    def paths(self):
        """Every root-to-innermost path (one per walk in the generated code)."""
        def rec(node, prefix):
            prefix = prefix + [node]
            if not node.children:
                yield prefix
            for c in node.children:
                yield from rec(c, prefix)
        for r in self.roots:
            yield from rec(r, [])


class _Builder:
    def __init__(self, schedule: Schedule, forest: hir.Forest):
        self.schedule, self.forest = schedule, forest
        batch, tree = IndexVar("batch", "batch"), IndexVar("tree", "tree")
        self.indices = {"batch": batch, "tree": tree}
        self.roots = [LoopNode(batch, [LoopNode(tree)])]
        self.d: Directive | None = None

    def fail(self, msg: str):
        raise ScheduleError(f"schedule {self.d.where()}: {msg}")

    def index(self, name: str, loop: bool = True) -> IndexVar:
        idx = self.indices.get(name)
        if idx is None:
            self.fail(f"unknown index {name!r} (known: {', '.join(self.indices)})")
        if loop and idx.derived:
            self.fail(f"{name} was tiled or split; use the indices derived from it")
        return idx

    def new(self, name: str, parent: IndexVar, role: str, size: int) -> IndexVar:
        if name in self.indices:
            self.fail(f"index {name!r} is already defined")
        idx = IndexVar(name, parent.dimension, parent, role, size)
        self.indices[name] = idx
        return idx

    def nodes_of(self, idx: IndexVar) -> list[tuple[list, int]]:
        """(sibling list, position) of every loop over ``idx``."""
        found = []

        def rec(siblings):
            for pos, node in enumerate(siblings):
                if node.index is idx:
                    found.append((siblings, pos))
                rec(node.children)
        rec(self.roots)
        return found

    # ------------------------------------------------------------------ directives
    def apply(self, d: Directive) -> None:
        self.d = d
        getattr(self, "d_" + d.name)(*d.args)

    def _attributes_set(self, idx: IndexVar) -> list[str]:
        names = {"parallel": "parallel", "unroll": "unroll", "specialize": "specialize",
                 "interleave": "interleave", "unroll_walk": "unrollWalk", "peel_walk": "peelWalk",
                 "expand_walk": "expandWalk", "chain_walk": "chainWalks",
                 "gpu": "gpuDimension", "cache": "cache", "reduce": "a reduction directive"}
        return [d for attr, d in names.items() if getattr(idx, attr)]

    def _derivable(self, idx: IndexVar, verb: str) -> None:
        """Attributes belong to loops; a tiled or split index stops being one, so they would be
        silently lost: refuse instead."""
        done = self._attributes_set(idx)
        if done:
            self.fail(f"set {', '.join(done)} on {idx.name} before {verb} it; set it on the "
                      "indices derived from it instead")

    def d_tile(self, name, outer, inner, size):
        p = self.index(name)
        self._derivable(p, "tiling")
        span = size
        for idx in p.lineage():
            span *= idx.size if idx.role == "outer" else 1
        if span > MAX_SPAN:
            self.fail(f"tiles of {span} {p.dimension} elements an iteration (the tile sizes multiplied): at most "
                      f"{MAX_SPAN}")
        o, i = self.new(outer, p, "outer", size), self.new(inner, p, "inner", size)
        o.sibling, i.sibling = i, o
        for siblings, pos in self.nodes_of(p):
            siblings[pos] = LoopNode(o, [LoopNode(i, siblings[pos].children)])
        p.tiled_into = (o, i)

    def d_split(self, name, first, second, at):
        p = self.index(name)
        self._derivable(p, "splitting")
        if at > MAX_SPAN:
            self.fail(f"a split at {at}: at most {MAX_SPAN}")
        f, g = self.new(first, p, "first", at), self.new(second, p, "second", at)
        f.sibling, g.sibling = g, f
        for siblings, pos in reversed(self.nodes_of(p)):
            body = siblings[pos].children
            siblings[pos:pos + 1] = [LoopNode(f, body), LoopNode(g, copy.deepcopy(body, _shared(self)))]
        p.split_into = (f, g)

    def d_reorder(self, *names):
        idxs = [self.index(n) for n in names]
        if len(set(names)) != len(names):
            self.fail("an index is named twice")
        wanted = set(map(id, idxs))
        occurrences = 0
        for siblings, pos in self._chain_heads(wanted):
            chain, node = [], siblings[pos]
            while True:
                chain.append(node)
                if len(chain) == len(idxs):
                    break
                if len(node.children) != 1 or id(node.children[0].index) not in wanted:
                    self.fail(f"{', '.join(names)} are not perfectly nested loops "
                              f"({node.index.name} holds {len(node.children)} loops)")
                node = node.children[0]
            if {id(n.index) for n in chain} != wanted:
                self.fail(f"{', '.join(names)} are not successive loops of one nest")
            innermost_body = chain[-1].children
            rebuilt = innermost_body
            for idx in reversed(idxs):
                rebuilt = [LoopNode(idx, rebuilt)]
            siblings[pos] = rebuilt[0]
            occurrences += 1
        if occurrences == 0:
            self.fail(f"{', '.join(names)} do not appear together in any loop nest")
        self._check_tile_nesting()

    def _chain_heads(self, wanted):
        heads = []

        def rec(siblings, inside):
            for pos, node in enumerate(siblings):
                mine = id(node.index) in wanted
                if mine and not inside:
                    heads.append((siblings, pos))
                rec(node.children, inside or mine)
        rec(self.roots, False)
        return heads

    def _check_tile_nesting(self):
        """A tile's inner loop covers one tile of its outer loop: it must stay inside it."""
        for path in LoopTree(self.roots, self.indices, self.schedule).paths():
            bound: list[IndexVar] = []
            for node in path:
                idx = node.index
                # Any index derived from an inner one (its tiles and splits) counts in that inner
                # index's coordinates, which need the outer loop around it too.
                inner = next((a for a in idx.lineage() if a.role == "inner"), None)
                if inner is not None and inner is not idx and inner.sibling.value_on(bound) is None:
                    self.fail(f"{idx.name} is derived from {inner.name}, the inner index of a tile of "
                              f"{inner.parent.name}, and must stay inside {inner.sibling.name}")
                if idx.role == "inner" and idx.sibling.value_on(bound) is None:
                    self.fail(f"{idx.name} is the inner index of a tile of {idx.parent.name} and "
                              f"must stay inside its outer index {idx.sibling.name}")
                bound.append(idx)

    def _static(self, idx: IndexVar, what: str) -> int:
        trip = idx.max_trip(self.forest.num_trees)
        if trip is None:
            self.fail(f"{what} needs a loop whose trip count is known when compiling; {idx.name} "
                      f"runs over the rows of the batch (tile it first)")
        if trip > MAX_STATIC_TRIP:
            self.fail(f"{what} of {idx.name} would copy its body {trip} times (at most {MAX_STATIC_TRIP})")
        return trip

    def d_unroll(self, name):
        idx = self.index(name)
        self._static(idx, "unroll")
        idx.unroll = True

    def d_specialize(self, name):
        idx = self.index(name)
        if idx.dimension != "tree":
            self.fail(f"specialize generates code per tree; {name} is a batch index")
        self._static(idx, "specialize")
        idx.specialize = True

    def d_gpuDimension(self, name, dim):
        idx = self.index(name)
        for other in self.indices.values():
            if other.gpu == dim and other is not idx:
                self.fail(f"{dim} is already mapped to {other.name}")
        idx.gpu = dim

    def d_cache(self, name):
        self.index(name).cache = True

    def d_parallel(self, name):
        self.index(name).parallel = True

    def d_interleave(self, name, factor=None):
        idx = self.index(name)
        for siblings, pos in self.nodes_of(idx):
            if siblings[pos].children:
                self.fail(f"interleave applies to an innermost loop; {name} contains "
                          f"{siblings[pos].children[0].index.name}")
        trip = idx.max_trip(self.forest.num_trees)
        if factor is None or factor > MAX_STATIC_TRIP or trip is None:
            trip = self._static(idx, "interleave")  # (refuses: unknown or too long a trip to copy)
        # (else the body is copied ``factor`` times, the loop stepping over the rest: any trip)
        idx.interleave = min(factor or trip, trip)
        if idx.interleave < 2:
            self.fail(f"interleaving {name} needs at least 2 walks in flight")

    def d_unrollWalk(self, name, depth):
        self.index(name).unroll_walk = depth

    def d_peelWalk(self, name, depth):
        idx = self.index(name)
        # A loop over trees walks only the trees in its range; any other loop may walk them all.
        start, stop = _tree_range(idx, self.forest.num_trees) if idx.dimension == "tree" \
            else (0, self.forest.num_trees)
        if start < stop:
            part = dataclasses.replace(self.forest, trees=self.forest.trees[start:stop])
            shallowest = leaf_depth_range(part)[0]
            if depth > shallowest:
                where = "the forest has" if (start, stop) == (0, self.forest.num_trees) \
                    else f"trees {start}..{stop - 1} ({name}) have"
                self.fail(f"cannot peel {depth} steps: {where} a leaf at depth {shallowest}, "
                          "and peeled steps do not check for leaves")
        idx.peel_walk = depth

    def d_expandWalk(self, name):
        # Whether every walk's tree is a compile-time constant is known once the loops are laid
        # out; the lowering checks it (a tree loop specialised or unrolled around the walks).
        self.index(name).expand_walk = True

    def d_chainWalks(self, name):
        # Chains run through every tree (the layout links a lane's trees from first to last);
        # that the loop is interleaved, and not parallel, is checked once every directive is applied.
        idx = self.index(name)
        if idx.dimension != "tree" or idx.role != "root":
            self.fail(f"chainWalks chains the walks of every tree: it applies to the loop over "
                      f"tree itself (not tiled or split); {name} is "
                      + ("a batch index" if idx.dimension != "tree" else f"derived from {idx.parent.name}"))
        idx.chain_walk = True  # (parallel or GPU-mapped in either order: refused once all are applied)

    def _reduction(self, name, kind, width=0):
        idx = self.index(name)
        if idx.dimension != "tree":
            self.fail(f"{kind}Reduce applies to loops over trees; {name} is a batch index "
                      "(rows never share a result)")
        if not idx.parallel and not idx.gpu:
            self.fail(f"{kind}Reduce needs {name} to be parallel (or GPU-mapped): only parallel "
                      "tree loops conflict on the result")
        if idx.reduce:
            self.fail(f"{name} already has {idx.reduce}Reduce")
        idx.reduce, idx.vector_width = kind, width

    def d_atomicReduce(self, name):
        self._reduction(name, "atomic")

    def d_sharedReduce(self, name):
        self._reduction(name, "shared")

    def d_vectorReduce(self, name, width):
        self._reduction(name, "vector", width)

    def d_orderedReduce(self, name):
        # Each tree's value gets a slot of its own, folded in tree order by one thread: CPU
        # threads only (a GPU's tree threads fold through sharedReduce or atomics).
        if self.index(name).gpu:
            self.fail(f"orderedReduce({name}) folds on CPU threads; {name} is mapped to the GPU's "
                      f"{self.index(name).gpu}")
        self._reduction(name, "ordered")


def _shared(builder: _Builder) -> dict:
    """deepcopy memo that keeps IndexVar objects shared between split copies."""
    return {id(v): v for v in builder.indices.values()}


def build_loop_tree(schedule: Schedule, forest: hir.Forest) -> LoopTree:
    """Apply the directives in order; raise ScheduleError naming the directive that is illegal."""
    b = _Builder(schedule, forest)
    for d in schedule.directives:
        b.apply(d)
    tree = LoopTree(b.roots, b.indices, schedule)
    for node in tree.nodes():
        # A later reorder may have moved a loop inside an interleaved one.
        if node.index.interleave and node.children:
            raise ScheduleError(f"schedule: interleave({node.index.name}) applies to an innermost "
                                f"loop, but {node.children[0].index.name} is now inside it")
        if node.index.chain_walk and not node.index.interleave:
            raise ScheduleError(f"schedule: chainWalks({node.index.name}) chains interleaved walks: "
                                f"interleave({node.index.name}, lanes) first")
        if node.index.chain_walk and (node.index.parallel or node.index.gpu):
            raise ScheduleError(f"schedule: chainWalks({node.index.name}): a lane walks its chain "
                                f"of trees in turn, so {node.index.name} cannot be parallel or "
                                "mapped to the GPU")
    return tree


def _range(idx: IndexVar, bound: list[IndexVar], num_trees: int):
    """(start, stop, step) of the loop over ``idx``, in its root's coordinates.

    Ranges follow the lineage: a tile's outer loop steps over its parent's range, the inner
    loop covers one tile and stops at the parent's end (the remainder tile), a split's parts
    cover the first ``at`` iterations and the rest.
    """
    if idx.role == "root":
        return ("row_begin", "row_end", 1) if idx.dimension == "batch" else (0, num_trees, 1)
    start, stop, step = _range(idx.parent, bound, num_trees)
    size = idx.size
    if idx.role == "outer":
        return start, stop, step * size
    if idx.role == "inner":
        outer = idx.sibling.value_on(bound).name
        return outer, _min(_add(outer, step * size), stop), step
    if idx.role == "first":
        return start, _min(_add(start, size * step), stop), step
    return _add(start, size * step), stop, step  # second


def _add(a, b):
    return a + b if isinstance(a, int) and isinstance(b, int) else ("+", a, b)


def _min(a, b):
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else ("min", a, b)


def _trip(start, stop, step, bound):
    """The exact trip count where the range is constant, else the lineage's bound."""
    if isinstance(start, int) and isinstance(stop, int):
        return max(0, -(-(stop - start) // step))
    return bound


def _innermost(path: list[IndexVar], attr: str) -> int:
    for idx in reversed(path):
        if getattr(idx, attr):
            return getattr(idx, attr)
    return 0


def lower_to_mir(forest: hir.Forest, schedule: Schedule) -> mir.MirFunction:
    """Build the loop nest; margins are initialised before it and finalised after it."""
    tree = build_loop_tree(schedule, forest)
    batch, trees = tree.indices["batch"], tree.indices["tree"]
    num_trees = forest.num_trees

    def lower(node: LoopNode, bound: list[IndexVar]) -> mir.Loop:
        idx = node.index
        start, stop, step = _range(idx, bound, num_trees)
        inside = bound + [idx]
        if node.children:
            body = [lower(child, inside) for child in node.children]
        else:
            row, tree_ix = batch.value_on(inside).name, trees.value_on(inside).name
            body = [
                mir.WalkDecisionTree(tree=tree_ix, row=row, result="treePred",
                                     unroll_depth=_innermost(inside, "unroll_walk"),
                                     peel_depth=_innermost(inside, "peel_walk"),
                                     expand=any(i.expand_walk for i in inside),
                                     chain=any(i.chain_walk for i in inside)),
                mir.Reduce(target="margins", row=row, tree=tree_ix, value="treePred",
                           op=forest.aggregation.value),
            ]
        if idx.cache:
            # The working set of one iteration: the rows or trees this iteration covers.
            end = ("min", ("+", idx.name, step), stop)
            op = mir.CacheRows if idx.dimension == "batch" else mir.CacheTrees
            body.insert(0, op(idx.name, end))
        return mir.Loop(
            index=idx.name, dimension=idx.dimension, start=start, stop=stop, step=step, body=body,
            parallel=idx.parallel or idx.gpu is not None, gpu=idx.gpu, unroll=idx.unroll,
            specialize=idx.specialize, max_trip=_trip(start, stop, step, idx.max_trip(num_trees)),
            interleave=idx.interleave, reduce=idx.reduce, vector_width=idx.vector_width,
        )

    row_parallel = any(i.parallel for i in tree.indices.values() if i.dimension == "batch")

    def row_loop(op):
        return mir.Loop("row", "batch", "row_begin", "row_end", 1, [op], parallel=row_parallel)

    body = [row_loop(mir.InitMargins("row")), *(lower(r, []) for r in tree.roots),
            row_loop(mir.FinalizeMargins("row"))]
    fn = mir.MirFunction(body=body, num_trees=num_trees, num_outputs=forest.num_outputs,
                         schedule_text=schedule.to_text())
    mir.verify(fn)
    fn = legalize(fn, forest.aggregation, forest.trees_own_outputs())
    mir.verify(fn)
    return fn

"""HIR -> MIR: turn the loop tree a schedule builds into a loop nest with inferred ranges."""

from __future__ import annotations

from silvanforge.ir import hir, mir
from silvanforge.reduction.legalize import legalize
from silvanforge.scheduler.looptree import IndexVar, LoopNode, build_loop_tree
from silvanforge.scheduler.schedule import Schedule


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
                                     expand=any(i.expand_walk for i in inside)),
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
    fn = legalize(fn, forest.aggregation)
    mir.verify(fn)
    return fn

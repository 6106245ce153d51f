"""HIR -> MIR: build the loop nest a schedule describes."""

from __future__ import annotations

from ..ir import hir, mir
from .schedule import Schedule


def lower_to_mir(forest: hir.Forest, schedule: Schedule) -> mir.MirFunction:
    """Loops in the schedule's order around one walk and one reduce.

    When ``batch`` is outermost the margins of a row are initialised and finalised inside the
    row loop; otherwise separate row loops before and after the nest do it.
    """
    walk = mir.WalkDecisionTree(tree="tree", row="batch", result="treePred")
    reduce = mir.Reduce(target="margins", row="batch", tree="tree", value="treePred",
                        op=forest.aggregation.value)
    body: list = [walk, reduce]
    for idx in reversed(schedule.order):
        stop = forest.num_trees if idx == "tree" else "batch_size"
        body = [mir.Loop(index=idx, dimension=idx, start=0, stop=stop, step=1, body=body,
                         parallel=idx in schedule.parallel)]
    outer = body[0]
    if schedule.order[0] == "batch":
        outer.body = [mir.InitMargins("batch"), *outer.body, mir.FinalizeMargins("batch")]
        ops = [outer]
    else:
        row_loop = lambda op: mir.Loop("batch", "batch", 0, "batch_size", 1, [op],  # noqa: E731
                                       parallel="batch" in schedule.parallel)
        ops = [row_loop(mir.InitMargins("batch")), outer, row_loop(mir.FinalizeMargins("batch"))]
    fn = mir.MirFunction(body=ops, num_trees=forest.num_trees, num_outputs=forest.num_outputs,
                         schedule_text=schedule.to_text())
    mir.verify(fn)
    return fn

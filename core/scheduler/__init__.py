"""The scheduling language, the loop tree it builds and the HIR -> MIR lowering it drives."""

from silvanforge.scheduler.canned import CANNED, GPU_CANNED, canned
from silvanforge.scheduler.looptree import IndexVar, LoopTree, build_loop_tree, lower_to_mir
from silvanforge.scheduler.schedule import Directive, Schedule, default_schedule, parse_schedule

__all__ = ["CANNED", "GPU_CANNED", "canned", "Directive", "IndexVar", "LoopTree", "Schedule", "build_loop_tree", "default_schedule",
           "lower_to_mir", "parse_schedule"]

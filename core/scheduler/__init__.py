"""The scheduling language and the HIR -> MIR lowering it drives."""

from .schedule import Schedule, default_schedule, parse_schedule
from .lower import lower_to_mir

__all__ = ["Schedule", "default_schedule", "parse_schedule", "lower_to_mir"]

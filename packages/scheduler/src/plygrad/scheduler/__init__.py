"""plygrad.scheduler: tensor graph -> schedule (a LINEAR of CALLs), with kernel fusion and movement ops as index math.

`schedule(bytes) -> bytes` and `schedule_uop(sink) -> UOp` are the `default` (fusing) scheduler; the `unfused`
ones make one kernel per op. docs/scheduler.md gives the fusion rules and how to write a scheduler plugin.
"""

from plygrad.scheduler.api import schedule, schedule_unfused, schedule_unfused_uop, schedule_uop
from plygrad.scheduler.errors import ScheduleError

__all__ = ["ScheduleError", "schedule", "schedule_unfused", "schedule_unfused_uop", "schedule_uop"]

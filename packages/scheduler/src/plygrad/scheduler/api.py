"""The schedulers as plugins: `schedule(bytes) -> bytes` for the `plygrad.schedulers` entry points, and the
in-process `schedule_uop(sink) -> LINEAR` beside each.

No cache here: the one schedule cache is the caller's. The frontend keys each graph by structure
(`plygrad.ir.structural_key`) and asks a scheduler only for a structure it has not seen, keeping the returned
bytes (frontend/scheduling.py), which skips the serialization and the plugin call as well as the scheduling, for
every plugin alike. A second cache in here only ever missed on those already-normalized graphs while holding a copy
of every schedule (docs/scheduler.md, "Schedule cache").
"""

from __future__ import annotations

from plygrad.ir import Ops, Stage, UOp, deserialize, serialize, verify
from plygrad.scheduler.errors import ScheduleError
from plygrad.scheduler.schedule import schedule_uop as _schedule_uop


def _verified(sink: UOp) -> UOp:
    if sink.op is not Ops.SINK:
        raise ScheduleError(f"a scheduler takes a tensor SINK, got a {sink.op.name}: wrap the tensors in a SINK")
    verify(sink, Stage.TENSOR)
    return sink


def schedule_uop(sink: UOp) -> UOp:
    """The `default` scheduler in process: tensor SINK -> LINEAR of CALLs, fused.

    The SINK is verified as Stage.TENSOR first (bytes are verified by `deserialize` instead)."""
    return _schedule_uop(_verified(sink), fuse=True)


def schedule_unfused_uop(sink: UOp) -> UOp:
    """The `unfused` scheduler in process: every op that computes something gets its own kernel."""
    return _schedule_uop(_verified(sink), fuse=False)


def schedule(data: bytes) -> bytes:
    """The `default` scheduler: TENSOR-stage bytes in, SCHEDULE-stage bytes out."""
    return serialize(_schedule_uop(deserialize(data, Stage.TENSOR), fuse=True), Stage.SCHEDULE)


def schedule_unfused(data: bytes) -> bytes:
    """The `unfused` scheduler: TENSOR-stage bytes in, SCHEDULE-stage bytes out."""
    return serialize(_schedule_uop(deserialize(data, Stage.TENSOR), fuse=False), Stage.SCHEDULE)

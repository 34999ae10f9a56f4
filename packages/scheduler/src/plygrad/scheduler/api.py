"""The schedulers as plugins: `schedule(bytes) -> bytes` for the `plygrad.schedulers` entry points, and the
in-process `schedule_uop(sink) -> LINEAR` beside each. Both fusing (`default`) and one-kernel-per-op (`unfused`)
go through a structural schedule cache of their own (cache.py)."""

from __future__ import annotations

from typing import Final

from plygrad.ir import Ops, Stage, UOp, deserialize, serialize, verify
from plygrad.scheduler.cache import ScheduleCache
from plygrad.scheduler.errors import ScheduleError
from plygrad.scheduler.schedule import schedule_uop as _schedule_uop

DEFAULT_CACHE: Final = ScheduleCache()
UNFUSED_CACHE: Final = ScheduleCache()


def _verified(sink: UOp) -> UOp:
    if sink.op is not Ops.SINK:
        raise ScheduleError(f"a scheduler takes a tensor SINK, got a {sink.op.name}: wrap the tensors in a SINK")
    verify(sink, Stage.TENSOR)
    return sink


def _fused(sink: UOp) -> UOp:
    return _schedule_uop(sink, fuse=True)


def _unfused(sink: UOp) -> UOp:
    return _schedule_uop(sink, fuse=False)


def schedule_uop(sink: UOp) -> UOp:
    """The `default` scheduler in process: tensor SINK -> LINEAR of CALLs, fused (cached by structure).

    The SINK is verified as Stage.TENSOR first (bytes are verified by `deserialize` instead)."""
    return DEFAULT_CACHE.schedule(_verified(sink), _fused)


def schedule_unfused_uop(sink: UOp) -> UOp:
    """The `unfused` scheduler in process: every op that computes something gets its own kernel."""
    return UNFUSED_CACHE.schedule(_verified(sink), _unfused)


def schedule(data: bytes) -> bytes:
    """The `default` scheduler: TENSOR-stage bytes in, SCHEDULE-stage bytes out."""
    return serialize(DEFAULT_CACHE.schedule(deserialize(data, Stage.TENSOR), _fused), Stage.SCHEDULE)


def schedule_unfused(data: bytes) -> bytes:
    """The `unfused` scheduler: TENSOR-stage bytes in, SCHEDULE-stage bytes out."""
    return serialize(UNFUSED_CACHE.schedule(deserialize(data, Stage.TENSOR), _unfused), Stage.SCHEDULE)

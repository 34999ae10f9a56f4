"""ALLREDUCE lowered by the scheduler (scheduler/allreduce.py): the schedule holds only COPY and kernel CALLs, and
run by the NumPy executor it equals the NumPy reference of the tensor graph, for the naive and the ring lowering."""

from __future__ import annotations

import numpy as np
import pytest

from plygrad.ir import BufferRef, DType, Ops, UOp, dtypes
from plygrad.scheduler import allreduce
from plygrad.scheduler.numpy_exec import reference, run_schedule
from plygrad.scheduler.schedule import schedule_uop

DEVICES = ("CPU", "CPU:1", "CPU:2", "CPU:3")


def _graph(n: int, size: int, dt: DType, op: Ops) -> tuple[UOp, dict[int, np.ndarray]]:
    rng = np.random.default_rng(n * 100 + size)
    np_dt = np.float32 if dt is dtypes.float32 else np.int32
    parts = [UOp(Ops.BUFFER, dt, (), BufferRef(i, DEVICES[i], size)) for i in range(n)]
    shaped = tuple(UOp(Ops.RESHAPE, dt, (p,), (size // 3, 3)) for p in parts)
    outs = [UOp(Ops.ALLREDUCE, dt, shaped, (op, d)) for d in DEVICES[:n]]
    buffers = {i: (rng.random(size) * 100).astype(np_dt) for i in range(n)}
    return UOp(Ops.SINK, dtypes.void, tuple(outs)), buffers


@pytest.mark.parametrize("ring", [False, True], ids=["naive", "ring"])
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize(("dt", "op"), [(dtypes.float32, Ops.ADD), (dtypes.int32, Ops.ADD), (dtypes.float32, Ops.MAX)],
                         ids=["f32-sum", "i32-sum", "f32-max"])
def test_lowered_allreduce_matches_the_reference(monkeypatch: pytest.MonkeyPatch, ring: bool, n: int, dt: DType,
                                                 op: Ops) -> None:
    if ring:
        monkeypatch.setattr(allreduce, "RING_MIN_DEVICES", 2)
        monkeypatch.setattr(allreduce, "RING_MIN_ELEMENTS", 1)
    graph, buffers = _graph(n, 30, dt, op)
    linear = schedule_uop(graph)
    assert not any(u.op is Ops.ALLREDUCE for u in linear.toposort)
    copies = sum(1 for call in linear.src if call.src[0].op is Ops.COPY)
    assert copies >= n - 1
    expected, _ = reference(graph, buffers)
    got, _ = run_schedule(linear, buffers)
    closed = np.stack([buffers[i].astype(np.float64) for i in range(n)])
    closed = closed.sum(0) if op is Ops.ADD else closed.max(0)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g.reshape(-1), e.reshape(-1), rtol=1e-6)
        np.testing.assert_allclose(g.reshape(-1), closed, rtol=1e-6)


def test_chunks_are_ceil_sized_and_cover_the_tensor() -> None:
    assert allreduce.chunks(10, 4) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert allreduce.chunks(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]
    assert allreduce.chunks(0, 3) == [(0, 0)] * 3

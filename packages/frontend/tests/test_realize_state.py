"""realize_state.RealizeState: the one owner of what realizing remembers (docs/frontend.md), through its methods."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from plygrad.frontend import Tensor, realize_state
from plygrad.frontend.realize_state import STATE, RealizeState
from plygrad.ir import UOp, dtypes
from plygrad.runtime import Buffer


def test_pending_assigns_are_taken_once_in_buffer_then_creation_order() -> None:
    state = RealizeState()
    a, b, c = Tensor([1.0]), Tensor([2.0]), Tensor([3.0])
    state.record_assign(7, b)
    state.record_assign(3, c)
    state.record_assign(7, a)
    state.record_assign(7, b)  # recorded once
    assert state.take_pending_assigns({7, 3, 9}) == [c, b, a]
    assert state.take_pending_assigns({7, 3}) == []


def test_an_assign_that_ran_is_replaced_by_its_target_in_graphs_built_before() -> None:
    x = Tensor([1.0, 2.0, 3.0]).realize()
    v = x[0:1]
    v.assign(v + 10)
    z = v * 2  # built while the write is pending: its graph holds the ASSIGN
    v.realize()
    assert STATE.done_assigns_in(z.uop)
    np.testing.assert_array_equal(z.numpy(), [22.0])  # the written value, and the write is not done again
    np.testing.assert_array_equal(x.numpy(), [11.0, 2.0, 3.0])


def test_staged_host_data_is_copied_in_once_at_flush() -> None:
    state = RealizeState()
    buf = Buffer("CPU", 2, dtypes.float32)
    state.stage(buf, np.array([1.5, 2.5], np.float32).tobytes())
    state.flush([buf])
    assert np.frombuffer(buf.copyout(), np.float32).tolist() == [1.5, 2.5]
    buf.copyin(np.zeros(2, np.float32).tobytes())
    state.flush([buf])  # nothing staged any more: the buffer keeps what it has
    assert np.frombuffer(buf.copyout(), np.float32).tolist() == [0.0, 0.0]


def test_schedules_are_asked_once_per_scheduler_and_graph_and_evicted_oldest_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realize_state, "MAX_SCHEDULES", 2)
    state = RealizeState()
    calls: list[bytes] = []

    def scheduler(data: bytes) -> bytes:
        calls.append(data)
        return b"schedule %d" % len(calls)

    graphs = [UOp.const(dtypes.int32, i) for i in range(3)]
    assert state.schedule(scheduler, graphs[0]) == b"schedule 1"
    assert state.schedule(scheduler, graphs[0]) == b"schedule 1" and len(calls) == 1
    state.schedule(scheduler, graphs[1])
    state.schedule(scheduler, graphs[2])  # evicts graphs[0]
    assert state.schedule(scheduler, graphs[0]) == b"schedule 4"
    state.forget_schedules()
    state.schedule(scheduler, graphs[2])
    assert len(calls) == 5


def test_a_capture_is_the_calling_threads_own() -> None:
    state = RealizeState()
    seen: dict[str, object] = {}
    with state.capturing() as capture:
        worker = threading.Thread(target=lambda: seen.setdefault("other", state.capture()))
        worker.start()
        worker.join()
        assert state.capture() is capture
    assert seen["other"] is None and state.capture() is None

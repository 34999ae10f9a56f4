"""realize_state.RealizeState: the one owner of what realizing remembers (docs/frontend.md), through its methods.
The cases that need a backend to run are in tests/test_realize_state.py."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest

from plygrad.frontend import Tensor, realize_state
from plygrad.frontend.realize_state import RealizeState
from plygrad.ir import UOp, dtypes
from plygrad.runtime import Buffer


def test_pending_assigns_are_taken_once_in_creation_order() -> None:
    """Program order, whatever the buffers: a later write may read what an earlier one wrote (a KV cache per layer)."""
    state = RealizeState()
    a, b, c = Tensor(1.0), Tensor(2.0), Tensor(3.0)  # constants: no Buffer, no backend needed
    state.record_assign(7, b)
    state.record_assign(3, c)
    state.record_assign(7, a)
    state.record_assign(7, b)  # recorded once
    assert state.take_pending_assigns({7, 3, 9}) == [b, c, a]
    assert state.take_pending_assigns({7, 3}) == []


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


def test_graphs_seen_are_kept_least_recently_used_first_within_count_and_node_bounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realize_state, "MAX_GRAPHS", 2)
    monkeypatch.setattr(realize_state, "MAX_GRAPH_NODES", 10)
    state = RealizeState()
    graphs = [UOp.const(dtypes.int32, i) for i in range(4)]
    marks: list[Any] = [object() for _ in graphs]  # stand-ins for the normalizations (only handed back)
    state.remember_graph(graphs[0], marks[0], 3)
    state.remember_graph(graphs[1], marks[1], 3)
    assert state.seen_graph(graphs[0]) is marks[0]  # now the most recently used
    state.remember_graph(graphs[2], marks[2], 3)  # a third graph: the least recently used (1) goes
    assert state.seen_graph(graphs[1]) is None
    assert state.seen_graph(graphs[0]) is marks[0] and state.seen_graph(graphs[2]) is marks[2]
    state.remember_graph(graphs[3], marks[3], 11)  # larger than the node bound: not kept, nothing dropped
    assert state.seen_graph(graphs[3]) is None and state.seen_graph(graphs[0]) is marks[0]
    state.remember_graph(graphs[3], marks[3], 6)  # 3 + 3 + 6 nodes > 10: the least recently used (2) goes
    assert state.seen_graph(graphs[2]) is None and state.seen_graph(graphs[3]) is marks[3]
    state.forget_schedules()
    assert state.seen_graph(graphs[0]) is None and state.seen_graph(graphs[3]) is None


def test_readers_are_the_live_tensors_and_dead_references_are_swept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realize_state, "MIN_READERS_SWEEP", 4)
    state = RealizeState()
    kept = [Tensor(float(i)) for i in range(3)]
    for t in kept:
        state.add_reader(t)
    for i in range(10):  # each dies at once
        state.add_reader(Tensor(float(i)))
    assert {id(t) for t in state.readers()} == {id(t) for t in kept}
    assert len(state._readers) < 13, "dead references were swept"


def test_staged_host_data_goes_with_its_buffer_and_is_looked_up_by_id() -> None:
    state = RealizeState()
    kept, dropped = Buffer("CPU", 4, dtypes.float32), Buffer("CPU", 4, dtypes.float32)
    state.stage(kept, b"\0" * 16)
    state.stage(dropped, b"\1" * 16)
    state.stage(dropped, b"\2" * 16)  # staged again: the newer data replaces the older
    assert state.any_host_data()
    del dropped
    gc.collect()
    assert state._host_data.keys() == {kept.id}, "a Buffer that died takes its staged data with it"
    state.flush([])  # asks about no buffer: nothing is copied
    assert state.any_host_data()

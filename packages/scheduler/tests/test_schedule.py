"""Schedule-level behaviour: ASSIGN, variables, copies, buffer ids and sharing, the bytes API, entry points."""

from __future__ import annotations

from importlib.metadata import entry_points

import numpy as np
import pytest
from sched_helpers import buffer, check, const, expand_to, kernel_count, mov, random_buffers, reduce, run_schedule, sink

from plygrad.ir import Ops, Stage, UOp, deserialize, dtypes, serialize, verify
from plygrad.scheduler import ScheduleError, schedule, schedule_unfused, schedule_uop


def assign(target: UOp, value: UOp) -> UOp:
    return UOp(Ops.ASSIGN, target.dtype, (target, value))


def test_assign_writes_into_the_target_buffer() -> None:
    a, b = buffer(0, (3, 4)), buffer(1, (3, 4))
    fused, _ = check(sink(assign(a, a + b)))
    assert fused.arg == (0,) and kernel_count(fused) == 1
    assert all(b.arg.id >= 0 for c in fused.src for b in c.src[1:])  # in place: no new buffer


def test_assign_into_a_view_writes_only_that_region() -> None:
    a, b = buffer(0, (4, 4)), buffer(1, (2, 4))
    region = mov(a, Ops.SHRINK, ((1, 3), (0, 4)))
    fused, _ = check(sink(assign(region, b * const(3.0, (2, 4)))))
    assert fused.arg == (0,)


def test_assign_reading_the_target_elsewhere_goes_through_a_temporary() -> None:
    a = buffer(0, (6,))
    flipped = mov(a, Ops.FLIP, (True,))
    fused, _ = check(sink(assign(a, flipped + const(1.0, (6,)))))  # a[i] = a[5-i] + 1 must read the old a
    assert kernel_count(fused) == 2


def test_raw_reads_run_before_the_assign_that_overwrites_them() -> None:
    a, b = buffer(0, (5,)), buffer(1, (5,))
    old = a * const(2.0, (5,))
    fused, _ = check(sink(old, assign(a, b)))
    assert kernel_count(fused) == 2


def test_reads_of_an_assign_see_the_new_value() -> None:
    a, b = buffer(0, (5,)), buffer(1, (5,))
    new = assign(a, b + const(1.0, (5,)))
    check(sink(new * const(2.0, (5,)), new))


def test_assign_into_padded_view_is_rejected() -> None:
    a = buffer(0, (3,))
    with pytest.raises(ScheduleError, match="PAD"):
        schedule_uop(sink(assign(mov(a, Ops.PAD, ((1, 0),)), buffer(1, (4,)))))


def test_variables_are_kernel_variables_and_calls_carry_the_bind() -> None:
    n = UOp.variable("n", 1, 10, dtypes.int32).bind(7)
    x = buffer(0, (2, 3))
    y = x * expand_to(mov(n.cast(dtypes.float32), Ops.RESHAPE, (1, 1)), (2, 3))
    fused, _ = check(sink(y))
    (call,) = fused.src
    assert any(s.op is Ops.BIND and s.src[1].arg == 7 for s in call.src)
    assert any(n.op is Ops.DEFINE_VAR for n in call.src[0].toposort)


def test_unbound_variable_is_an_error() -> None:
    n = UOp.variable("n", 1, 10, dtypes.int32)
    y = mov(mov(n.cast(dtypes.float32), Ops.RESHAPE, (1,)), Ops.EXPAND, (3,)) + buffer(0, (3,))
    with pytest.raises(ScheduleError, match="'n'"):
        schedule_uop(sink(y))


def test_copy_between_devices_is_a_copy_call() -> None:
    x = buffer(0, (2, 3))
    moved = UOp(Ops.COPY, x.dtype, (x * const(2.0, (2, 3)),), "CPU:1")
    fused, _ = check(sink(moved + const(1.0, (2, 3))))
    kinds = [c.src[0].op for c in fused.src]
    assert kinds == [Ops.SINK, Ops.COPY, Ops.SINK]
    assert fused.src[2].src[1].arg.device == "CPU:1"


def test_new_buffers_get_negative_ids_and_outputs_are_mapped() -> None:
    a = buffer(0, (4,))
    fused, _ = check(sink(a + a, a, a * a))
    assert fused.arg[1] == 0 and fused.arg[0] < 0 and fused.arg[2] < 0


def test_intermediates_with_disjoint_lifetimes_share_an_id() -> None:
    x = buffer(0, (4, 4))
    t1 = reduce(x, Ops.ADD, (1,))  # (4,1) intermediate, dies in the next kernel
    y1 = expand_to(t1, (4, 4)) * x
    t2 = reduce(y1, Ops.MAX, (1,))  # a second (4,1) intermediate after t1's last use
    y2 = expand_to(t2, (4, 4)) + x
    t3 = reduce(y2, Ops.ADD, (0,))
    out = expand_to(t3, (4, 4)) - x
    fused, _ = check(sink(out))
    ids = {b.arg.id for c in fused.src for b in c.src[1:] if b.op is Ops.BUFFER and b.arg.id < 0}
    assert kernel_count(fused) == 4  # each writes a new buffer; t3 can reuse t1's memory (same size, t1 is dead)
    assert len(ids) == 3


@pytest.mark.parametrize("scheduler", [schedule, schedule_unfused])
def test_bytes_in_bytes_out(scheduler: object) -> None:
    assert callable(scheduler)
    a, b = buffer(0, (3, 2)), buffer(1, (3, 2))
    graph = sink(reduce(a * b, Ops.ADD, (0,)))
    out = deserialize(scheduler(serialize(graph, Stage.TENSOR)), Stage.SCHEDULE)
    verify(out, Stage.SCHEDULE)
    got, _ = run_schedule(out, random_buffers(graph))
    bufs = random_buffers(graph)
    np.testing.assert_allclose(got[0], (bufs[0].reshape(3, 2) * bufs[1].reshape(3, 2)).sum(0), rtol=1e-5)


def test_entry_points_name_both_schedulers() -> None:
    found = {ep.name: ep.load() for ep in entry_points(group="plygrad.schedulers")}
    assert found["default"] is schedule and found["unfused"] is schedule_unfused


def test_not_a_sink_is_rejected() -> None:
    with pytest.raises(ScheduleError, match="SINK"):
        schedule_uop(buffer(0, (3,)))


def test_copy_of_a_view_and_back() -> None:
    x = buffer(0, (3, 4))
    there = UOp(Ops.COPY, x.dtype, (mov(x, Ops.PERMUTE, (1, 0)),), "CPU:1")
    back = UOp(Ops.COPY, x.dtype, (there * const(2.0, (4, 3)),), "CPU")
    fused, _ = check(sink(back))
    assert [c.src[0].op for c in fused.src] == [Ops.SINK, Ops.COPY, Ops.SINK, Ops.COPY]
    assert [c.src[1].arg.device for c in fused.src] == ["CPU", "CPU:1", "CPU:1", "CPU"]


def test_share_buffers_never_reuses_within_one_call() -> None:
    from plygrad.scheduler.planning import share_buffers
    x = buffer(0, (4,))
    a = reduce(mov(x, Ops.RESHAPE, (2, 2)), Ops.ADD, (1,))  # (2,1) intermediate
    b = reduce(expand_to(a, (2, 2)) * mov(x, Ops.RESHAPE, (2, 2)), Ops.ADD, (1,))  # reads a, same size
    fused = schedule_uop(sink(expand_to(b, (2, 2)) + mov(x, Ops.RESHAPE, (2, 2))))
    assert share_buffers(fused.src, set(fused.arg)) == {}  # already planned: nothing left to merge
    ids = [[s.arg.id for s in c.src[1:]] for c in fused.src]
    for call_ids in ids:
        assert len(call_ids) == len(set(call_ids)), f"a kernel reads and writes one buffer: {call_ids}"


def test_bytes_path_gives_the_same_schedule_as_the_in_process_path() -> None:
    x, w = buffer(0, (4, 6)), buffer(1, (1, 6))
    graph = sink(reduce(x * expand_to(w, (4, 6)), Ops.ADD, (1,)), x.alu(Ops.EXP2))
    assert deserialize(schedule(serialize(graph, Stage.TENSOR)), Stage.SCHEDULE) is schedule_uop(graph)


def test_assign_of_a_reduce_is_one_kernel() -> None:
    a, x = buffer(0, (3, 1)), buffer(1, (3, 5))
    fused, _ = check(sink(assign(a, reduce(x, Ops.MAX, (1,)) + a)))
    assert kernel_count(fused) == 1

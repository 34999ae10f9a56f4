"""Execution plans (a schedule decoded, verified and lowered once) and Capture replay, on the fake PY backend."""

from __future__ import annotations

import numpy as np
import pytest
import rt_fakes
from rt_schedules import add_then_sum, buffer_node, call, copy_call, linear, node, scaled

from plygrad.ir import Stage, dtypes, serialize
from plygrad.runtime import Buffer, Capture, GlobalCounters, ScheduleError, clear_plans, load_plan, run_linear
from plygrad.runtime import plan as plan_module
from plygrad.runtime.testing import add_kernel


def _f32(values: np.ndarray, device: str = "PY") -> Buffer:
    return Buffer(device, values.size, dtypes.float32).copyin(values.astype(np.float32).tobytes())


def _array(buf: Buffer) -> np.ndarray:
    return np.frombuffer(buf.copyout(), dtype=np.float32)


def test_a_schedule_is_planned_once_per_bytes(fakes: None) -> None:
    a, b = _f32(np.ones(6)), _f32(np.ones(6))
    data = serialize(add_then_sum(a, b, 2, 3), Stage.SCHEDULE)
    assert load_plan(data) is load_plan(bytes(data)), "equal bytes, one plan"
    assert load_plan(add_then_sum(a, b, 2, 3)) is load_plan(add_then_sum(a, b, 2, 3)), "hash-consed UOp key"


def test_plans_are_rebuilt_with_force_bytes(fakes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _f32(np.ones(6)), _f32(np.ones(6))
    data = serialize(add_then_sum(a, b, 2, 3), Stage.SCHEDULE)
    monkeypatch.setenv("PLYGRAD_FORCE_BYTES", "1")
    assert load_plan(data) is not load_plan(data)


@pytest.mark.parametrize("force_bytes", [False, True], ids=["cached", "forced"])
def test_cached_plan_runs_like_the_byte_path(fakes: None, monkeypatch: pytest.MonkeyPatch, force_bytes: bool) -> None:
    """The in-process fast path (docs/design.md §2): the same outputs, each run in fresh negative-id buffers."""
    if force_bytes:
        monkeypatch.setenv("PLYGRAD_FORCE_BYTES", "1")
    rng = np.random.default_rng(1)
    a_np, b_np = rng.standard_normal(12), rng.standard_normal(12)
    a, b = _f32(a_np), _f32(b_np)
    data = serialize(add_then_sum(a, b, 3, 4), Stage.SCHEDULE)
    first, second = run_linear(data), run_linear(data)
    assert first[-1] is not second[-1]
    for result in (first, second):
        np.testing.assert_allclose(_array(result[-2]), (a_np + b_np).astype(np.float32).reshape(3, 4).sum(1),
                                   rtol=1e-5)


def test_a_plan_runs_over_other_buffers_of_the_same_kind(fakes: None) -> None:
    a, b = _f32(np.ones(6)), _f32(np.full(6, 2.0))
    plan = load_plan(add_then_sum(a, a, 2, 3))
    out = plan.run({a.id: b})
    np.testing.assert_array_equal(_array(out[-2]), [12.0, 12.0])
    with pytest.raises(ScheduleError, match="but the Buffer given for it is 7"):
        plan.run({a.id: _f32(np.ones(7))})


def test_a_plan_takes_its_small_fresh_buffers_again_once_nothing_else_holds_them(fakes: None) -> None:
    a, b = _f32(np.ones(6)), _f32(np.full(6, 2.0))
    plan = load_plan(add_then_sum(a, b, 2, 3))
    first = plan.bind()
    plan.execute(first)
    fresh = [i for i, slot in enumerate(plan.slots) if slot.id < 0]
    assert fresh
    second = plan.bind()
    assert all(second[i] is not first[i] for i in fresh), "held Buffers are never run over"
    plan.execute(second)
    np.testing.assert_array_equal(_array(first[fresh[-1]]), [9.0, 9.0])
    ids = [second[i].id for i in fresh]
    del first, second
    third = plan.bind()
    assert [third[i].id for i in fresh] == ids, "dropped ones are taken again"
    plan.execute(third)
    np.testing.assert_array_equal(_array(third[fresh[-1]]), [9.0, 9.0])
    del third
    plan.release_spares()
    assert not {plan.bind()[i].id for i in fresh} & set(ids)


def test_buffers_past_the_small_size_are_kept_within_one_budget_for_all_plans(
        fakes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh Buffers above SPARE_SMALL_BYTES are kept only while every plan together keeps at most
    SPARE_BUDGET_BYTES; past it a run's new Buffers go back to the allocator when their tensors die."""
    monkeypatch.setattr(plan_module, "SPARE_SMALL_BYTES", 0)
    monkeypatch.setattr(plan_module, "SPARE_BUDGET_BYTES", 64)  # one plan's tmp (24 bytes) and out, twice at most
    clear_plans()
    a, b = _f32(np.arange(6.0)), _f32(np.ones(6))
    plans = [load_plan(add_then_sum(a, b, rows, 6 // rows)) for rows in (1, 2, 3, 6)]
    for plan in plans:
        out = plan.run()
        del out
        assert plan_module.kept_spare_bytes() <= 64
    kept = [plan.spare_bytes() for plan in plans]
    assert kept[0] > 0 and sum(kept) <= 64 and kept[-1] == 0, kept
    again = plans[0].bind()  # the kept ones still serve their own plan
    assert plans[0].spare_bytes() == kept[0]
    plans[0].execute(again)
    np.testing.assert_array_equal(_array(again[plans[0].slot_of[-2]]), [21.0])


def test_planning_lowers_each_kernel_once(fakes: None) -> None:
    a, b = _f32(np.ones(6)), _f32(np.ones(6))
    rt_fakes.LOWER_CALLS.clear()
    plan = load_plan(add_then_sum(a, b, 2, 3))
    for _ in range(3):
        plan.run()
    assert len(rt_fakes.LOWER_CALLS) == 2
    assert plan.kernel_count == 2 and "2 kernels" in repr(plan)


def test_clear_plans_forgets_them(fakes: None) -> None:
    a = _f32(np.ones(6))
    plan = load_plan(add_then_sum(a, a, 2, 3))
    clear_plans()
    assert load_plan(add_then_sum(a, a, 2, 3)) is not plan


def test_output_no_call_writes_is_the_given_buffer(fakes: None) -> None:
    a = _f32(np.arange(4.0))
    plan = load_plan(linear(call(add_kernel(4), buffer_node(-1, 4), node(a), node(a)), outputs=(-1, a.id)))
    result = plan.run()
    assert result[a.id] is a
    np.testing.assert_array_equal(_array(result[-1]), np.arange(4.0) * 2)


def test_capture_replays_over_swapped_inputs(fakes: None) -> None:
    a, b = _f32(np.ones(6)), _f32(np.ones(6))
    plan = load_plan(add_then_sum(a, b, 2, 3))
    capture = Capture()
    bufs = plan.bind()
    plan.execute(bufs)
    capture.record(plan, bufs)
    out = plan.output_buffer(bufs, 0)
    assert a in capture and len(capture) == 2 and capture.kernel_count == 2
    new_a = _f32(np.arange(6.0))
    GlobalCounters.reset()
    capture.replay({a: new_a})
    assert GlobalCounters.kernel_count == 2
    np.testing.assert_array_equal(_array(out), (np.arange(6.0) + 1).reshape(2, 3).sum(1))
    capture.replay()
    np.testing.assert_array_equal(_array(out), [6.0, 6.0])


def test_capture_chains_runs_through_their_buffers(fakes: None) -> None:
    """A buffer one recorded run wrote and a later one read is the same Buffer in the replay."""
    a = _f32(np.ones(4))
    first = load_plan(linear(call(add_kernel(4), buffer_node(-1, 4), node(a), node(a)), outputs=(-1,)))
    capture = Capture()
    bufs = first.bind()
    first.execute(bufs)
    capture.record(first, bufs)
    mid = first.output_buffer(bufs, 0)
    second = load_plan(linear(call(add_kernel(4), buffer_node(-1, 4), node(mid), node(mid)), outputs=(-1,)))
    bufs2 = second.bind()
    second.execute(bufs2)
    capture.record(second, bufs2)
    capture.replay({a: _f32(np.full(4, 3.0))})
    np.testing.assert_array_equal(_array(second.output_buffer(bufs2, 0)), np.full(4, 12.0))


def test_capture_replays_copies_and_variables(fakes: None) -> None:
    a = _f32(np.arange(3.0))
    capture = Capture()
    plan = load_plan(scaled(a, 2))
    bufs = plan.bind()
    plan.execute(bufs)
    capture.record(plan, bufs)
    copy = load_plan(linear(copy_call(buffer_node(-1, 3, device="PY:1"), node(bufs[0])), outputs=(-1,)))
    cbufs = copy.bind()
    copy.execute(cbufs)
    capture.record(copy, cbufs)
    capture.replay(vals={"k": 5})
    np.testing.assert_array_equal(_array(cbufs[0]), np.arange(3.0) * 5)
    capture.replay()
    np.testing.assert_array_equal(_array(cbufs[0]), np.arange(3.0) * 2)


def test_capture_refuses_a_replacement_of_another_kind(fakes: None) -> None:
    a = _f32(np.ones(4))
    plan = load_plan(linear(call(add_kernel(4), buffer_node(-1, 4), node(a), node(a)), outputs=(-1,)))
    capture = Capture()
    capture.record(plan, plan.bind())
    with pytest.raises(ScheduleError, match=r"cannot be replaced by buffer \d+ \(5 x "):
        capture.replay({a: _f32(np.ones(5))})

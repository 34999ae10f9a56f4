"""Runs of consecutive kernels launched by one backend call (runtime batch.py), on the fake PY backend's batches.

The fake batch runs the same interpreted programs the single launches run, so a plan must give the same outputs
either way; what these tests pin down is which kernels go together, that values and bounds still reach every kernel,
and that the counters and DEBUG >= 2 see each kernel."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import rt_fakes
from rt_schedules import add_then_sum, buffer_node, call, copy_call, linear, node

from plygrad.ir import dtypes
from plygrad.runtime import Buffer, Capture, Device, GlobalCounters, clear_plans, load_plan, run_linear
from plygrad.runtime.testing import add_kernel, row_sum_kernel, scale_kernel


@pytest.fixture
def py(fakes: None) -> Iterator[rt_fakes.PyBackend]:
    backend = Device["PY"]
    assert isinstance(backend, rt_fakes.PyBackend)
    backend.batches = True
    yield backend
    backend.batches = False


def _f32(values: np.ndarray) -> Buffer:
    return Buffer("PY", values.size, dtypes.float32).copyin(values.astype(np.float32).tobytes())


def _array(buf: Buffer) -> np.ndarray:
    return np.frombuffer(buf.copyout(), dtype=np.float32)


def _add_scale_sum(a: Buffer, b: Buffer, k: int) -> object:
    """tmp = a + b; scaled = tmp * k (a variable); out = row sums of scaled (2 x 3): three kernels in a row."""
    body, var = scale_kernel(6)
    tmp, scaled, out = buffer_node(-1, 6), buffer_node(-2, 6), buffer_node(-3, 2)
    return linear(call(add_kernel(6), tmp, node(a), node(b)), call(body, scaled, tmp, var.bind(k)),
                  call(row_sum_kernel(2, 3), out, scaled), outputs=(-3,))


def test_consecutive_kernels_run_in_one_call_with_the_single_launches_results(py: rt_fakes.PyBackend) -> None:
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal(6), rng.standard_normal(6)
    a, b = _f32(a_np), _f32(b_np)
    run_linear(_add_scale_sum(a, b, 7))
    assert py.batch_calls == [], "a plan's first run launches one kernel at a time"
    GlobalCounters.reset()
    out = run_linear(_add_scale_sum(a, b, 7))[-3]
    assert py.batch_calls == [3]
    assert GlobalCounters.kernel_count == 3, "every kernel of a batch is counted"
    batched_ops, batched_mem = GlobalCounters.global_ops, GlobalCounters.global_mem
    expected = ((a_np.astype(np.float32) + b_np.astype(np.float32)) * 7).reshape(2, 3).sum(1)
    np.testing.assert_allclose(_array(out), expected, rtol=1e-5)
    py.batches = False
    clear_plans()  # a plan keeps the launchers it was given: a new one asks again, and gets none now
    run_linear(_add_scale_sum(a, b, 7))
    GlobalCounters.reset()
    single = run_linear(_add_scale_sum(a, b, 7))[-3]
    assert py.batch_calls == [3] and GlobalCounters.kernel_count == 3
    assert (GlobalCounters.global_ops, GlobalCounters.global_mem) == (batched_ops, batched_mem)
    np.testing.assert_array_equal(_array(single), _array(out))


def test_a_plan_asks_the_backend_once_and_a_new_value_reaches_its_kernel(py: rt_fakes.PyBackend) -> None:
    a, b = _f32(np.ones(6)), _f32(np.full(6, 2.0))
    plan = load_plan(_add_scale_sum(a, b, 7))
    for k in (2, 5, 9):
        bufs = plan.bind({})
        plan.execute(bufs, {"k": k})
        np.testing.assert_array_equal(_array(plan.output_buffer(bufs, 0)), [9.0 * k, 9.0 * k])
    assert py.batches_asked == [3] and py.batch_calls == [3, 3], "asked at the second run, once"


def test_a_copy_or_another_device_ends_a_run(py: rt_fakes.PyBackend) -> None:
    a, b = _f32(np.ones(6)), _f32(np.full(6, 2.0))
    tmp, out, moved = buffer_node(-1, 6), buffer_node(-2, 2), buffer_node(-3, 2)
    other = buffer_node(-4, 6, device="PY:1")
    schedule = linear(call(add_kernel(6), tmp, node(a), node(b)), call(row_sum_kernel(2, 3), out, tmp),
                      copy_call(moved, out), call(add_kernel(6), buffer_node(-5, 6), tmp, tmp),
                      copy_call(other, tmp), call(add_kernel(6), buffer_node(-6, 6, device="PY:1"), other, other),
                      outputs=(-3, -5, -6))
    outs = run_linear(schedule)
    assert py.batch_calls == []
    outs = run_linear(schedule)
    moved_buf, doubled, far = outs[-3], outs[-5], outs[-6]
    assert py.batch_calls == [2], "two kernels, a copy, one kernel, a copy: only the first two go together"
    np.testing.assert_array_equal(_array(moved_buf), [9.0, 9.0])
    np.testing.assert_array_equal(_array(doubled), np.full(6, 6.0))
    assert np.frombuffer(far.copyout(), np.float32).tolist() == [6.0] * 6


def test_debug_2_times_each_kernel_on_its_own(py: rt_fakes.PyBackend, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DEBUG", "2")
    a, b = _f32(np.ones(6)), _f32(np.ones(6))
    for _ in range(3):
        run_linear(add_then_sum(a, b, 2, 3))
    assert py.batch_calls == []
    assert capsys.readouterr().out.count("***") == 6, "a timed line per kernel"


def test_a_capture_replays_its_runs_in_one_call_and_again_after_recording_more(py: rt_fakes.PyBackend) -> None:
    a, b = _f32(np.ones(6)), _f32(np.full(6, 2.0))
    plan = load_plan(_add_scale_sum(a, b, 3))
    capture = Capture()
    bufs = plan.bind({})
    plan.execute(bufs)
    capture.record(plan, bufs)
    py.batch_calls.clear()
    new_a = _f32(np.full(6, 4.0))
    capture.replay({a: new_a}, {"k": 2})
    out = plan.output_buffer(bufs, 0)
    np.testing.assert_array_equal(_array(out), [36.0, 36.0])
    assert py.batch_calls == [3]
    capture.record(plan, bufs)  # a second run of the plan: the replay's runs are found again
    capture.replay()
    assert py.batch_calls == [3, 6], "the two recorded runs follow each other: one call of six kernels"
    np.testing.assert_array_equal(_array(out), [27.0, 27.0])

"""run_linear on the fake PY backend with the fake codegen: kernels, negative ids, COPY, BIND values."""

from __future__ import annotations

import numpy as np
import pytest
import rt_fakes
from rt_schedules import add_then_sum, buffer_node, call, copy_call, linear, node, scaled

from plygrad.ir import Stage, dtypes, serialize
from plygrad.runtime import Buffer, CodegenError, Device, ScheduleError, run_linear
from plygrad.runtime.discovery import BACKENDS, CODEGEN, installed
from plygrad.runtime.testing import add_kernel


def _f32(values: np.ndarray, device: str = "PY") -> Buffer:
    return Buffer(device, values.size, dtypes.float32).copyin(values.astype(np.float32).tobytes())


def _array(buf: Buffer) -> np.ndarray:
    return np.frombuffer(buf.copyout(), dtype=np.float32)


@pytest.fixture
def inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal(12).astype(np.float32), rng.standard_normal(12).astype(np.float32)


@pytest.mark.parametrize("as_bytes", [True, False], ids=["bytes", "uop"])
def test_two_kernels_through_negative_buffers(fakes: None, inputs: tuple[np.ndarray, np.ndarray],
                                              as_bytes: bool) -> None:
    a_np, b_np = inputs
    a, b = _f32(a_np), _f32(b_np)
    schedule = add_then_sum(a, b, rows=3, cols=4)
    result = run_linear(serialize(schedule, Stage.SCHEDULE) if as_bytes else schedule, {a.id: a, b.id: b})
    assert set(result) == {-2, -1}
    np.testing.assert_allclose(_array(result[-1]), a_np + b_np, rtol=1e-6)
    np.testing.assert_allclose(_array(result[-2]), (a_np + b_np).reshape(3, 4).sum(axis=1), rtol=1e-5)


def test_force_bytes_gives_the_same_results(fakes: None, inputs: tuple[np.ndarray, np.ndarray],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _f32(inputs[0]), _f32(inputs[1])
    direct = _array(run_linear(add_then_sum(a, b, 3, 4), {a.id: a, b.id: b})[-2])
    monkeypatch.setenv("PLYGRAD_FORCE_BYTES", "1")
    forced = _array(run_linear(add_then_sum(a, b, 3, 4), {a.id: a, b.id: b})[-2])
    np.testing.assert_array_equal(direct, forced)


def test_each_run_gets_fresh_negative_buffers(fakes: None, inputs: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = _f32(inputs[0]), _f32(inputs[1])
    first = run_linear(add_then_sum(a, b, 3, 4))
    second = run_linear(add_then_sum(a, b, 3, 4))
    assert first[-1] is not second[-1]
    np.testing.assert_array_equal(_array(first[-1]), _array(second[-1]))


def test_buffers_are_found_by_id_when_not_given(fakes: None, inputs: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = _f32(inputs[0]), _f32(inputs[1])
    result = run_linear(add_then_sum(a, b, 3, 4))
    np.testing.assert_allclose(_array(result[-1]), inputs[0] + inputs[1], rtol=1e-6)


@pytest.mark.parametrize("k", [1, 7, 100])
def test_bind_values_reach_the_program(fakes: None, k: int) -> None:
    a_np = np.arange(-4, 5, dtype=np.float32)
    a = _f32(a_np)
    np.testing.assert_array_equal(_array(run_linear(scaled(a, k))[-1]), a_np * k)


def test_copy_between_devices(fakes: None) -> None:
    a_np = np.linspace(-1, 1, 10, dtype=np.float32)
    a = _f32(a_np, "PY")
    dst = buffer_node(-1, 10, device="PY:1")
    result = run_linear(linear(copy_call(dst, node(a)), outputs=(-1,)))
    assert result[-1].device == "PY:1"
    np.testing.assert_array_equal(_array(result[-1]), a_np)


def test_output_may_be_an_existing_buffer(fakes: None) -> None:
    a, b, out = _f32(np.ones(5)), _f32(np.full(5, 2.0)), Buffer("PY", 5, dtypes.float32)
    result = run_linear(linear(call(add_kernel(5), node(out), node(a), node(b)), outputs=(out.id,)))
    assert result[out.id] is out
    np.testing.assert_array_equal(_array(out), np.full(5, 3.0, dtype=np.float32))


def test_kernel_is_lowered_and_compiled_once(fakes: None) -> None:
    a, b = _f32(np.ones(6)), _f32(np.ones(6))
    rt_fakes.LOWER_CALLS.clear()
    for _ in range(3):
        run_linear(add_then_sum(a, b, 2, 3))
    assert len(rt_fakes.LOWER_CALLS) == 2, "two distinct kernels, each lowered once"
    assert Device["PY"].compiler.compiled == 2  # type: ignore[attr-defined]


def test_buffer_given_with_wrong_size_is_refused(fakes: None) -> None:
    a, b = _f32(np.ones(6)), _f32(np.ones(7))
    with pytest.raises(ScheduleError, match="but the Buffer given for it is 7"):
        run_linear(add_then_sum(a, a, 2, 3), {a.id: b})


def test_kernel_across_devices_is_refused(fakes: None) -> None:
    a, b = _f32(np.ones(4), "PY"), _f32(np.ones(4), "PY:1")
    with pytest.raises(ScheduleError, match="runs on one device"):
        run_linear(linear(call(add_kernel(4), buffer_node(-1, 4), node(a), node(b)), outputs=(-1,)))


def test_missing_codegen_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from plygrad.runtime import discovery

    monkeypatch.setattr(discovery, "_installed_entry_points", lambda group: [])  # whatever this machine has
    with installed(BACKENDS, "PY", rt_fakes.PY):
        a = _f32(np.ones(4))
        with pytest.raises(CodegenError, match="pip install plygrad-codegen"):
            run_linear(linear(call(add_kernel(4), buffer_node(-1, 4), node(a), node(a)), outputs=(-1,)))


def test_codegen_is_chosen_by_name(fakes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    a = _f32(np.ones(4))
    schedule = linear(call(add_kernel(4), buffer_node(-1, 4), node(a), node(a)), outputs=(-1,))
    monkeypatch.setenv("PLYGRAD_CODEGEN", "other")
    with pytest.raises(CodegenError, match=r"named 'other' \(found: default\)"):
        run_linear(schedule)
    with installed(CODEGEN, "other", rt_fakes.lower_to_text):
        np.testing.assert_array_equal(_array(run_linear(schedule)[-1]), np.full(4, 2.0, dtype=np.float32))


def test_codegen_failure_names_the_kernel(fakes: None) -> None:
    def broken(kernel: bytes, target: bytes) -> bytes:
        raise ValueError("cannot lower this")

    a = _f32(np.ones(4))
    with installed(CODEGEN, "default", broken), \
            pytest.raises(CodegenError, match=r"failed to lower kernel 'conformance_add'.*cannot lower this"):
        run_linear(linear(call(add_kernel(4), buffer_node(-1, 4), node(a), node(a)), outputs=(-1,)))


def test_codegen_returning_garbage_is_a_clear_error(fakes: None) -> None:
    a = _f32(np.ones(4))
    with installed(CODEGEN, "default", lambda kernel, target: b"not a program"), \
            pytest.raises(CodegenError, match="invalid PROGRAM"):
        run_linear(linear(call(add_kernel(4), buffer_node(-1, 4), node(a), node(a)), outputs=(-1,)))

"""run_linear on the CPU backend, with a hand-written lowering standing in for plygrad-codegen."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from cpu_programs import hand_lowering

from plygrad.ir import BufferRef, Ops, Stage, UOp, dtypes, serialize
from plygrad.runtime import Buffer, GlobalCounters, run_linear
from plygrad.runtime.discovery import CODEGEN, installed
from plygrad.runtime.testing import add_kernel, padded_kernel, row_sum_kernel, scale_kernel


@pytest.fixture(autouse=True)
def _lowering() -> Iterator[None]:
    with installed(CODEGEN, "default", hand_lowering):
        yield


def _node(buffer_id: int, size: int, dtype: object = dtypes.float32, device: str = "CPU") -> UOp:
    return UOp(Ops.BUFFER, dtype, (), BufferRef(buffer_id, device, size))  # type: ignore[arg-type]


def _of(buf: Buffer) -> UOp:
    return _node(buf.id, buf.size, buf.dtype, buf.device)


def _call(body: UOp, *srcs: UOp) -> UOp:
    return UOp(Ops.CALL, dtypes.void, (body, *srcs))


def _linear(*calls: UOp, outputs: tuple[int, ...]) -> UOp:
    return UOp(Ops.LINEAR, dtypes.void, calls, outputs)


def _f32(values: np.ndarray, device: str = "CPU") -> Buffer:
    return Buffer(device, values.size, dtypes.float32).copyin(values.astype(np.float32).tobytes())


def _np(buf: Buffer, dtype: type = np.float32) -> np.ndarray:
    return np.frombuffer(buf.copyout(), dtype=dtype)


def test_add_then_row_sum_then_copy(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rows, cols = 64, 33
    rng = np.random.default_rng(1)
    a_np, b_np = rng.standard_normal(rows * cols), rng.standard_normal(rows * cols)
    a, b = _f32(a_np), _f32(b_np)
    tmp, out, moved = _node(-1, rows * cols), _node(-2, rows), _node(-3, rows, device="CPU:1")
    copy = _call(UOp(Ops.COPY, dtypes.void), moved, out)
    schedule = _linear(_call(add_kernel(rows * cols), tmp, _of(a), _of(b)), _call(row_sum_kernel(rows, cols), out, tmp),
                       copy, outputs=(-3, -1))
    monkeypatch.setenv("DEBUG", "2")
    result = run_linear(serialize(schedule, Stage.SCHEDULE))
    summed = (a_np.astype(np.float32) + b_np.astype(np.float32)).reshape(rows, cols).sum(axis=1)
    assert result[-3].device == "CPU:1"
    np.testing.assert_allclose(_np(result[-3]), summed, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_np(result[-1]), a_np.astype(np.float32) + b_np.astype(np.float32))
    assert GlobalCounters.kernel_count == 2 and GlobalCounters.time_sum_s > 0
    out_text = capsys.readouterr().out
    assert "conformance_row_sum" in out_text and "run_linear: 2 kernels, 1 copies" in out_text


@pytest.mark.parametrize("k", [1, 42])
def test_bind_value_reaches_the_c_variable(k: int) -> None:
    a_np = np.arange(10, dtype=np.float32) - 3
    body, var = scale_kernel(10)
    a = _f32(a_np)
    result = run_linear(_linear(_call(body, _node(-1, 10), _of(a), var.bind(k)), outputs=(-1,)))
    np.testing.assert_array_equal(_np(result[-1]), a_np * k)


def test_gated_int32_kernel() -> None:
    src = Buffer("CPU", 5, dtypes.int32).copyin(np.array([5, -4, 3, -2, 1], np.int32).tobytes())
    result = run_linear(_linear(_call(padded_kernel(8, 5), _node(-1, 8, dtypes.int32), _of(src)), outputs=(-1,)))
    np.testing.assert_array_equal(_np(result[-1], np.int32), [5, -4, 3, -2, 1, 0, 0, 0])

"""Scheduling graphs with symbolic sizes (docs/ir.md §4.3): loops and strides use the variable, the CALL binds its
value, buffers are sized for the maximum, and the schedule computes the right values at every bound value."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.ir import BufferRef, Ops, UOp, dtypes
from plygrad.scheduler import schedule_uop
from plygrad.scheduler.numpy_exec import run_schedule


def _graph(value: int, op: str) -> tuple[UOp, UOp]:
    n = UOp.variable("n", 1, 8).bind(value)
    buf = UOp(Ops.BUFFER, dtypes.float32, (), BufferRef(0, "CPU", 3 * value))
    x = UOp(Ops.RESHAPE, dtypes.float32, (buf, n), (3, None))  # (3, n) over the buffer's 3*value elements
    one = UOp(Ops.EXPAND, dtypes.float32, (UOp(Ops.RESHAPE, dtypes.float32, (UOp.const(dtypes.float32, 1.0),),
                                                 (1, 1)), n), (3, None))
    if op == "add":
        out = x + one
    elif op == "sum":
        out = UOp(Ops.REDUCE, dtypes.float32, (x,), (Ops.ADD, (1,)))
    else:  # transpose, stored row-major as (n, 3)
        out = UOp(Ops.PERMUTE, dtypes.float32, (x,), (1, 0))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.CONTIGUOUS, dtypes.float32, (out,)),)), n


@settings(max_examples=20, deadline=None)
@given(value=st.integers(1, 8), op=st.sampled_from(["add", "sum", "transpose"]))
def test_symbolic_schedule_matches_numpy(value: int, op: str) -> None:
    sink, _ = _graph(value, op)
    linear = schedule_uop(sink)
    data = np.arange(3 * value, dtype=np.float32)
    (out,), _ = run_schedule(linear, {0: data})
    x = data.reshape(3, value)
    want = {"add": x + 1, "sum": x.sum(1, keepdims=True), "transpose": x.T}[op].reshape(-1)
    np.testing.assert_array_equal(out[:want.size], want)


@pytest.mark.parametrize("op", ["add", "sum", "transpose"])
def test_kernels_take_the_variable_and_buffers_hold_the_maximum(op: str) -> None:
    sink, n = _graph(3, op)
    linear = schedule_uop(sink)
    (call,) = linear.src
    kernel = call.src[0]
    var = n.src[0]
    assert any(r.op is Ops.RANGE and var in r.src[0].toposort for r in kernel.toposort), "a loop runs to n"
    assert n in call.src, "the CALL binds n to its value"
    out = next(b for b in call.src[1:] if b.op is Ops.BUFFER and b.arg.id < 0)
    assert out.arg.size == (3 if op == "sum" else 24), "sized for n's maximum (8)"
    other = schedule_uop(_graph(5, op)[0]).src[0].src[0]  # another bound value (and input size)
    assert {r.src[0] for r in other.toposort if r.op is Ops.RANGE} == \
        {r.src[0] for r in kernel.toposort if r.op is Ops.RANGE}, "the same loops: the value is not baked in"

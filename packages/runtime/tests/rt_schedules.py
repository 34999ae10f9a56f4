"""Schedules for the engine tests, built with plygrad.ir constructors (the shapes docs/ir.md §4.5 describes)."""

from __future__ import annotations

from plygrad.ir import BufferRef, DType, Ops, UOp, dtypes
from plygrad.runtime import Buffer
from plygrad.runtime.testing import add_kernel, row_sum_kernel, scale_kernel


def buffer_node(buffer_id: int, size: int, dtype: DType = dtypes.float32, device: str = "PY") -> UOp:
    return UOp(Ops.BUFFER, dtype, (), BufferRef(buffer_id, device, size))


def node(buf: Buffer) -> UOp:
    return UOp(Ops.BUFFER, buf.dtype, (), buf.ref())


def call(body: UOp, *srcs: UOp, name: str | None = None) -> UOp:
    return UOp(Ops.CALL, dtypes.void, (body, *srcs), name)


def copy_call(dst: UOp, src: UOp) -> UOp:
    return UOp(Ops.CALL, dtypes.void, (UOp(Ops.COPY, dtypes.void), dst, src))


def linear(*calls: UOp, outputs: tuple[int, ...]) -> UOp:
    return UOp(Ops.LINEAR, dtypes.void, calls, outputs)


def add_then_sum(a: Buffer, b: Buffer, rows: int, cols: int) -> UOp:
    """tmp(-1) = a + b; out(-2)[r] = sum_c tmp[r*cols + c]; result: out then tmp."""
    n = rows * cols
    tmp, out = buffer_node(-1, n), buffer_node(-2, rows)
    return linear(call(add_kernel(n), tmp, node(a), node(b)), call(row_sum_kernel(rows, cols), out, tmp),
                  outputs=(-2, -1))


def scaled(a: Buffer, k: int) -> UOp:
    body, var = scale_kernel(a.size)
    return linear(call(body, buffer_node(-1, a.size), node(a), var.bind(k)), outputs=(-1,))

"""Test helpers: build tensor graphs, check a schedule against NumPy's evaluation of its graph.

The executor of schedules (`run_schedule`, `run_kernel`) and the NumPy evaluator of tensor graphs (`reference`)
live in the package (`plygrad.scheduler.numpy_exec`, which the conformance suite runs on too); they are re-exported
here so the tests import every helper from one place.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from plygrad.ir import AxisType, DType, Ops, UOp, dtypes, strip_reshapes
from plygrad.ir.records import BufferRef
from plygrad.scheduler.numpy_exec import Array, kernel_count, np_dtype, reference, run_kernel, run_schedule

__all__ = ["F32", "Array", "assert_matches", "buffer", "check", "check_conventions", "const", "expand_to",
           "kernel_count", "mov", "np_dtype", "random_buffers", "reduce", "reference", "run_kernel", "run_schedule",
           "sink"]

F32 = dtypes.float32


# ---- building tensor graphs ----------------------------------------------------------------------------------
def buffer(buf_id: int, shape: tuple[int, ...], dtype: DType = F32, device: str = "CPU") -> UOp:
    """A BUFFER viewed at `shape` (a RESHAPE unless the shape is already flat)."""
    base = UOp(Ops.BUFFER, dtype, (), BufferRef(buf_id, device, math.prod(shape)))
    return base if shape == (math.prod(shape),) else mov(base, Ops.RESHAPE, shape)


def mov(x: UOp, op: Ops, arg: Any) -> UOp:
    return UOp(op, x.dtype, (x,), arg)


def const(value: Any, shape: tuple[int, ...], dtype: DType = F32) -> UOp:
    c = UOp.const(dtype, value)
    return c if not shape else mov(mov(c, Ops.RESHAPE, (1,) * len(shape)), Ops.EXPAND, shape)


def expand_to(x: UOp, shape: tuple[int, ...]) -> UOp:
    assert x.shape is not None
    return x if x.shape == shape else mov(x, Ops.EXPAND, shape)


def reduce(x: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
    return UOp(Ops.REDUCE, x.dtype, (x,), (op, axes))


def sink(*xs: UOp) -> UOp:
    return UOp(Ops.SINK, dtypes.void, xs)


def check(graph: UOp, seed: int = 0) -> tuple[UOp, UOp]:
    """Schedule `graph` with both schedulers, check each against NumPy; return (default, unfused) schedules."""
    from plygrad.scheduler import schedule_unfused_uop, schedule_uop

    buffers = random_buffers(graph, seed)
    fused, unfused = schedule_uop(graph), schedule_unfused_uop(graph)
    check_conventions(fused)
    check_conventions(unfused)
    assert_matches(graph, fused, buffers)
    assert_matches(graph, unfused, buffers)
    return fused, unfused


def check_conventions(linear: UOp) -> None:
    """The kernel conventions on top of the verifier (the contract between scheduler, runtime and codegen)."""
    for call in linear.src:
        body = call.src[0]
        if body.op is Ops.COPY:
            continue
        nodes = body.toposort
        stores = [n for n in nodes if n.op is Ops.STORE]
        stored = {s.src[0].src[0].arg for s in stores}
        assert stored == set(range(len(stored))), f"outputs are PARAMs 0..n_out-1, got {sorted(stored)}"
        ranges = [n for n in nodes if n.op is Ops.RANGE]
        assert len({r.arg[0] for r in ranges}) == len(ranges), "every RANGE has a distinct axis id"
        reduce_ranges = {r for n in nodes if n.op is Ops.REDUCE for r in n.src[1:]}
        for r in ranges:
            assert r.arg[1] is (AxisType.REDUCE if r in reduce_ranges else AxisType.LOOP), f"{r.arg} has the wrong type"


def assert_matches(graph: UOp, linear: UOp, buffers: dict[int, Array]) -> None:
    """The schedule's outputs and buffers equal NumPy's evaluation of the tensor graph."""
    expected, expected_bufs = reference(graph, buffers)
    got, got_bufs = run_schedule(linear, buffers)
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        if strip_reshapes(graph.src[i]).op is Ops.ASSIGN:
            continue  # an ASSIGN's result is its whole target buffer, compared below
        flat = np.ascontiguousarray(e).reshape(-1)
        assert g.shape == flat.shape, f"output {i}: {g.shape} != {flat.shape}"
        np.testing.assert_allclose(g, flat, rtol=1e-5, atol=1e-6, err_msg=f"output {i}")
    for k, v in expected_bufs.items():
        np.testing.assert_allclose(got_bufs[k], v, rtol=1e-5, atol=1e-6, err_msg=f"buffer {k}")


def random_buffers(graph: UOp, seed: int = 0) -> dict[int, Array]:
    rng = np.random.default_rng(seed)
    out: dict[int, Array] = {}
    for n in graph.toposort:
        if n.op is Ops.BUFFER and n.arg.id not in out:
            dt = np_dtype(n.dtype)
            if dt == np.bool_:
                out[n.arg.id] = rng.random(n.arg.size) < 0.5
            elif np.issubdtype(dt, np.integer):
                out[n.arg.id] = rng.integers(-20, 20, n.arg.size).astype(dt)
            else:
                out[n.arg.id] = rng.standard_normal(n.arg.size).astype(dt)
    return out


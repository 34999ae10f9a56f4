"""The NumPy executor (`plygrad.scheduler.numpy_exec`): its ALU and CAST agree with the IR's exact scalar semantics
(`plygrad.ir.scalar`) where NumPy's own answer differs, and a schedule that cannot run as written is refused with
an `ExecutionError` naming the kernel rather than reading or writing past a buffer."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from sched_helpers import Array, buffer, const, sink

from plygrad.ir import DType, Ops, UOp, dtypes
from plygrad.ir.scalar import cast_value, exec_alu
from plygrad.scheduler import schedule_unfused_uop, schedule_uop
from plygrad.scheduler.numpy_exec import GARBAGE, ExecutionError, alu, cast, kernel_count, np_dtype, run_schedule

FLOATS = [0.0, -0.0, 1.5, -1.5, 2.9, -2.9, 1e10, -1e10, 3e9, math.nan, math.inf, -math.inf, 255.7, -129.2]


def _ints(dt: DType) -> Array:
    """Edge values of an integer dtype: small ones of both signs, its minimum and maximum, shift amounts around
    its width."""
    info = np.iinfo(np_dtype(dt))
    bits = dt.itemsize * 8
    values = [0, 1, -1, 7, -7, 3, -3, 2, -5, info.min, info.max, bits - 1, bits, bits + 8]
    return np.array(sorted({v for v in values if info.min <= v <= info.max}), np_dtype(dt))


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.int64, dtypes.int8, dtypes.uint8])
@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR, Ops.MAX, Ops.ADD, Ops.MUL, Ops.SUB])
def test_integer_ops_match_the_ir(op: Ops, dt: DType) -> None:
    """Truncating division and its remainder, x / 0 = x % 0 = 0, MIN / -1, shifts by the width or more, wrapping."""
    pairs = list(itertools.product(_ints(dt).tolist(), repeat=2))
    a, b = (np.array(column, np_dtype(dt)) for column in zip(*pairs, strict=True))
    got = alu(op, dt, [a, b])
    assert got.tolist() == [exec_alu(op, dt, pair) for pair in pairs]


@pytest.mark.parametrize("to", [dtypes.int32, dtypes.uint8, dtypes.int8, dtypes.int64, dtypes.uint32, dtypes.bool])
@pytest.mark.parametrize("src", [dtypes.float32, dtypes.float64])
def test_float_to_int_casts_match_the_ir(src: DType, to: DType) -> None:
    """NumPy leaves NaN, ±inf and out-of-range values platform-defined; the IR truncates, zeroes and wraps."""
    values = np.array(FLOATS, np_dtype(src))
    got = cast(values, to)
    assert got.tolist() == [cast_value(float(v), to) for v in values]


def test_bool_arithmetic_is_logic() -> None:
    a, b = np.array([False, False, True, True]), np.array([False, True, False, True])
    for op in (Ops.ADD, Ops.MAX, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR):
        got = alu(op, dtypes.bool, [a, b]).tolist()
        assert got == [exec_alu(op, dtypes.bool, (bool(x), bool(y))) for x, y in zip(a, b, strict=True)], op


def test_threefry_matches_the_ir() -> None:
    rng = random.Random(0)
    counters = [rng.getrandbits(64) for _ in range(16)] + [0, 2**64 - 1]
    keys = [rng.getrandbits(64) for _ in range(16)] + [2**64 - 1, 0]
    got = alu(Ops.THREEFRY, dtypes.uint64, [np.array(counters, np.uint64), np.array(keys, np.uint64)])
    assert got.tolist() == [exec_alu(Ops.THREEFRY, dtypes.uint64, (c, k)) for c, k in zip(counters, keys, strict=True)]


def _add_one() -> tuple[UOp, UOp]:
    graph = sink(buffer(0, (4, 3)) + const(1.0, (4, 3)))
    return graph, schedule_uop(graph)


def test_a_kernel_reading_past_its_buffer_is_refused_naming_it() -> None:
    _, linear = _add_one()
    moved = {n: n.replace(src=(n.src[0], n.src[1] + UOp.const(dtypes.index, 5), *n.src[2:]))
             for call in linear.src for n in call.src[0].toposort if n.op is Ops.INDEX and n.src[0].arg == 1}
    with pytest.raises(ExecutionError, match=r"CALL 0 \(.*\) reads PARAM 1 at index 12 of a buffer of 12"):
        run_schedule(linear.substitute(moved), {0: np.zeros(12, np.float32)})


def test_a_buffer_of_another_size_than_the_graphs_is_refused() -> None:
    _, linear = _add_one()
    with pytest.raises(ExecutionError, match=r"names buffer 0 as float32\[12\], but the graph's buffer 0 holds 10"):
        run_schedule(linear, {0: np.zeros(10, np.float32)})


def test_new_buffers_start_as_garbage_so_a_missing_kernel_shows() -> None:
    """`unfused` computes (a + 1) * 2 in two kernels; without the first, the second reads a buffer nobody wrote."""
    graph = sink((buffer(0, (4, 3)) + const(1.0, (4, 3))) * const(2.0, (4, 3)))
    linear = schedule_unfused_uop(graph)
    assert kernel_count(linear) == 2
    [out], _ = run_schedule(linear.replace(src=linear.src[1:]), {0: np.zeros(12, np.float32)})
    np.testing.assert_array_equal(out, np.full(12, GARBAGE * 2, np.float32))

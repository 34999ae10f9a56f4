"""Non-float dtypes and casts fuse like floats: integer division/modulo, comparisons, bool masks, CAST, BITCAST."""

from __future__ import annotations

import pytest
from sched_helpers import assert_matches, buffer, check, const, kernel_count, mov, random_buffers, reduce, sink

from plygrad.ir import DType, Ops, UOp, dtypes
from plygrad.scheduler import schedule_uop
from plygrad.scheduler.budget import KERNEL_NODE_BUDGET


@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD, Ops.MAX, Ops.AND, Ops.XOR])
def test_integer_ops(op: Ops) -> None:
    a = buffer(0, (3, 4), dtypes.int32)
    divisor = const(3, (3, 4), dtypes.int32)
    fused, _ = check(sink(a.alu(op, divisor) + a))
    assert kernel_count(fused) == 1


def test_comparison_masks_and_where() -> None:
    a, b = buffer(0, (5,)), buffer(1, (5,))
    mask = a < b
    fused, _ = check(sink(mask.where(a, b * const(2.0, (5,))), mask.cast(dtypes.int32)))
    assert kernel_count(fused) == 1  # both outputs share one loop; the mask is computed once per element


@pytest.mark.parametrize("dst", [dtypes.int32, dtypes.float64, dtypes.bool, dtypes.int8])
def test_cast_then_reduce(dst: DType) -> None:
    a = buffer(0, (3, 4))
    x = (a * const(4.0, (3, 4))).cast(dst)
    if dst is dtypes.bool:
        x = x.cast(dtypes.int32)
    check(sink(reduce(x, Ops.ADD, (1,))))


def test_bitcast_roundtrip_in_one_kernel() -> None:
    a = buffer(0, (6,))
    bits = a.bitcast(dtypes.int32)
    back = (bits ^ const(0, (6,), dtypes.int32)).bitcast(dtypes.float32)
    fused, _ = check(sink(back))
    assert kernel_count(fused) == 1


def test_bool_buffer_input_and_output() -> None:
    a = buffer(0, (2, 3), dtypes.bool)
    flipped = mov(a, Ops.FLIP, (False, True))
    check(sink(flipped.alu(Ops.XOR, a)))


def test_deep_graphs_need_no_recursion() -> None:
    x = buffer(0, (2, 2))
    y: UOp = x
    for _ in range(2000):
        y = mov(y, Ops.FLIP, (True, False)) * const(0.5, (2, 2)) + x
    graph = sink(y)
    fused = schedule_uop(graph)
    # 3 new nodes a step (FLIP, MUL, ADD): the node budget cuts the chain into kernels at least half full
    assert 1 < kernel_count(fused) <= 3 * 2000 // (KERNEL_NODE_BUDGET // 2)
    assert_matches(graph, fused, random_buffers(graph))

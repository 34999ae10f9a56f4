"""Rule 8 (recompute.py): a costly value a reduction reads through an EXPAND is realized once; a cheap one, or
index math such as a one-hot compare, stays fused."""

from __future__ import annotations

from sched_helpers import buffer, const, expand_to, mov, reduce, sink

from plygrad.ir import Ops, UOp
from plygrad.scheduler.fusion import plan_fusion
from plygrad.scheduler.recompute import RECOMPUTE_BUDGET


def _matmul(a: UOp, b: UOp) -> UOp:
    """(m, k) @ (k, n) as a broadcast product reduced over k."""
    (m, k), (_, n) = a.shape or (), b.shape or ()
    left = expand_to(mov(a, Ops.RESHAPE, (m, k, 1)), (m, k, n))
    right = expand_to(mov(b, Ops.RESHAPE, (1, k, n)), (m, k, n))
    return mov(reduce(left * right, Ops.ADD, (1,)), Ops.RESHAPE, (m, n))


def _costly(x: UOp, ops: int) -> UOp:
    for _ in range(ops):
        x = (x * const(1.5, x.shape or ())).alu(Ops.EXP2)
    return x


def test_a_costly_value_read_by_a_matmul_is_realized_and_a_cheap_one_fused() -> None:
    a, w = buffer(0, (8, 64)), buffer(1, (64, 256))
    costly = _costly(a, 4)  # 4 * (1 + 8) = 36 ops per evaluation, read 256 times: over the budget
    assert RECOMPUTE_BUDGET < 256 * 36
    roots = plan_fusion(sink(_matmul(costly, w)), fuse=True).roots
    assert costly in roots
    cheap = a * const(2.0, (8, 64))  # 1 op, read 256 times: stays fused
    assert cheap not in plan_fusion(sink(_matmul(cheap, w)), fuse=True).roots


def test_a_value_read_once_per_element_is_not_realized() -> None:
    a = buffer(0, (8, 64))
    costly = _costly(a, 20)
    total = reduce(costly, Ops.ADD, (1,))  # no EXPAND: each value is read once
    assert costly not in plan_fusion(sink(total), fuse=True).roots

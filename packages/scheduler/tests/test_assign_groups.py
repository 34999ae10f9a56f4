"""Rule 9 (assign_groups.py): in-place updates of one shape share one kernel and one loop nest, an update that
reads another of its group uses the new value from the same iteration, and grouping never moves a write past a
root that must see it, nor a read of an old value past the write."""

from __future__ import annotations

from sched_helpers import buffer, check, const, kernel_count, mov, reduce, sink

from plygrad.ir import Ops, UOp


def assign(target: UOp, value: UOp) -> UOp:
    return UOp(Ops.ASSIGN, target.dtype, (target, value))


def stores_per_kernel(linear: UOp) -> list[int]:
    return [len([n for n in c.src[0].toposort if n.op is Ops.STORE]) for c in linear.src if c.src[0].op is Ops.SINK]


def loop_nests(linear: UOp) -> list[int]:
    """Distinct output RANGEs per kernel: a kernel whose stores share one loop nest has one per axis."""
    return [len({n for n in c.src[0].toposort if n.op is Ops.RANGE}) for c in linear.src if c.src[0].op is Ops.SINK]


def adam_like(shape: tuple[int, ...], first: int) -> tuple[UOp, UOp, UOp]:
    """m <- 0.9 m + 0.1 g; v <- 0.99 v + 0.01 g^2; p <- p - 0.1 m / (v + 1): p reads the new m and v."""
    p, m, v, g = (buffer(first + k, shape) for k in range(4))
    new_m = assign(m, m * const(0.9, shape) + g * const(0.1, shape))
    new_v = assign(v, v * const(0.99, shape) + g * g * const(0.01, shape))
    new_p = assign(p, p - new_m * const(0.1, shape) / (new_v + const(1.0, shape)))
    return new_m, new_v, new_p


def test_an_optimizer_update_is_one_kernel_over_one_loop_nest() -> None:
    fused, unfused = check(sink(*adam_like((6, 8), 0)))
    assert kernel_count(fused) == 1 and stores_per_kernel(fused) == [3]
    assert loop_nests(fused) == [2]  # the three stores share the (6, 8) loops
    assert kernel_count(unfused) > 3


def test_updates_of_several_shapes_group_by_shape() -> None:
    graph = sink(*adam_like((6, 8), 0), *adam_like((5,), 4), *adam_like((6, 8), 8))
    fused, _ = check(graph)
    assert sorted(stores_per_kernel(fused)) == [3, 6]


def test_a_root_that_reads_a_member_waits_for_its_group() -> None:
    a, b, c = buffer(0, (7,)), buffer(1, (7,)), buffer(2, (7,))
    first = assign(a, a + const(1.0, (7,)))
    total = reduce(first * const(2.0, (7,)), Ops.ADD, (0,))
    second = assign(b, b + c)
    check(sink(first, total, second))  # `total` must read a after the write, wherever b's update goes


def test_a_member_reading_an_old_value_another_member_overwrites_is_not_fused_unsafely() -> None:
    """b <- a (old a) and a <- c in one loop nest would be right only if b's load of a ran before a's store; a's
    value does not read a, so nothing orders them: the group falls back to one kernel each."""
    a, b, c = buffer(0, (9,)), buffer(1, (9,)), buffer(2, (9,))
    fused, _ = check(sink(assign(b, a * const(3.0, (9,))), assign(a, c)))
    assert kernel_count(fused) == 2


def test_an_update_that_reads_its_target_elsewhere_stays_alone() -> None:
    a, b = buffer(0, (6,)), buffer(1, (6,))
    flipped = assign(a, mov(a, Ops.FLIP, (True,)) + const(1.0, (6,)))
    plain = assign(b, b * const(2.0, (6,)))
    fused, _ = check(sink(flipped, plain))
    assert all(n == 1 for n in stores_per_kernel(fused))

"""Kernel counts the fusion rules promise (docs/scheduler.md), each result checked against NumPy too."""

from __future__ import annotations

from sched_helpers import buffer, check, const, expand_to, kernel_count, mov, reduce, sink

from plygrad.ir import Ops, UOp, dtypes


def test_elementwise_chain_with_relu_is_one_kernel() -> None:
    a, b, c = buffer(0, (4, 5)), buffer(1, (4, 5)), buffer(2, (4, 5))
    y = ((a + b) * c).maximum(const(0.0, (4, 5)))
    fused, unfused = check(sink(y))
    assert kernel_count(fused) == 1
    assert kernel_count(unfused) == 3  # ADD, MUL, MAX


def test_mul_then_sum_is_one_kernel() -> None:
    a, b = buffer(0, (3, 6)), buffer(1, (3, 6))
    y = mov(reduce(a * b, Ops.ADD, (1,)), Ops.RESHAPE, (3,))
    fused, _ = check(sink(y))
    assert kernel_count(fused) == 1


def test_elementwise_consumer_of_reduce_fuses_into_it() -> None:
    x = buffer(0, (4, 7))
    y = reduce(x, Ops.ADD, (1,)) * const(2.0, (4, 1))
    fused, _ = check(sink(y))
    assert kernel_count(fused) == 1


def softmax(x: UOp, shape: tuple[int, int]) -> UOp:
    m = expand_to(reduce(x, Ops.MAX, (1,)), shape)
    e = ((x - m) * const(1.4426950408889634, shape)).alu(Ops.EXP2)
    s = expand_to(reduce(e, Ops.ADD, (1,)), shape)
    return e / s


def test_softmax_is_at_most_three_kernels() -> None:
    y = softmax(buffer(0, (5, 8)), (5, 8))
    fused, _ = check(sink(y))
    assert kernel_count(fused) <= 3


def test_reduce_read_through_a_trailing_expand_fuses_into_its_consumer() -> None:
    """x - mean(x, 1): the mean depends only on the outer loop of the consumer, so it is computed once per row
    there (codegen hoists it) and the whole thing is one kernel."""
    x = buffer(0, (4, 6))
    mean = reduce(x, Ops.ADD, (1,)) * const(1 / 6, (4, 1))
    centered = x - expand_to(mean, (4, 6))
    fused, _ = check(sink(centered))
    assert kernel_count(fused) == 1


def test_reduce_read_through_a_leading_expand_is_realized_once() -> None:
    """x - mean(x, 0): fused, the mean over rows would be recomputed for every row (it depends on the inner loop
    of the consumer), so it gets its own kernel."""
    x = buffer(0, (4, 6))
    mean = reduce(x, Ops.ADD, (0,)) * const(1 / 4, (1, 6))
    centered = x - expand_to(mean, (4, 6))
    fused, _ = check(sink(centered))
    assert kernel_count(fused) == 2


def test_reduce_used_twice_is_realized() -> None:
    x = buffer(0, (4, 6))
    r = reduce(x, Ops.MAX, (1,))
    fused, _ = check(sink(r + const(1.0, (4, 1)), r * const(3.0, (4, 1))))
    assert kernel_count(fused) == 2  # the reduce, then both consumers in one two-output kernel


def test_contiguous_forces_a_kernel() -> None:
    a = buffer(0, (6,))
    y = UOp(Ops.CONTIGUOUS, a.dtype, (a + const(1.0, (6,)),)) * const(2.0, (6,))
    fused, _ = check(sink(y))
    assert kernel_count(fused) == 2


def test_independent_outputs_of_one_shape_share_a_kernel() -> None:
    a, b = buffer(0, (3, 4)), buffer(1, (3, 4))
    fused, _ = check(sink(a + b, a * b, (a - b).cast(dtypes.int32)))
    assert kernel_count(fused) == 1
    body = fused.src[0].src[0]
    assert len(body.src) == 3


def test_nested_reduces_are_separate_kernels() -> None:
    x = buffer(0, (3, 4, 5))
    y = reduce(reduce(x, Ops.ADD, (2,)), Ops.MAX, (1,))
    fused, _ = check(sink(y))
    assert kernel_count(fused) == 2


def test_sink_of_a_plain_buffer_needs_no_kernel() -> None:
    a = buffer(3, (2, 3))
    fused, _ = check(sink(a))
    assert fused.src == () and fused.arg == (3,)


def test_full_reduce_to_a_scalar_is_one_kernel() -> None:
    x = buffer(0, (3, 4))
    total = mov(reduce(x * x, Ops.ADD, (0, 1)), Ops.RESHAPE, ())
    fused, _ = check(sink(total))
    assert kernel_count(fused) == 1


def test_constant_outputs_are_kernels_without_loads() -> None:
    fused, _ = check(sink(const(3.0, (2, 2)), UOp.const(dtypes.int32, 7)))
    loads = [n for c in fused.src for n in c.src[0].toposort if n.op is Ops.LOAD]
    assert loads == [] and fused.src[0].src[1].arg.device == "CPU"


def test_reduce_inside_contiguous_and_its_consumer() -> None:
    x = buffer(0, (4, 5))
    r = UOp(Ops.CONTIGUOUS, x.dtype, (reduce(x, Ops.MAX, (1,)) * const(2.0, (4, 1)),))
    fused, _ = check(sink(expand_to(r, (4, 5)) - x))
    assert kernel_count(fused) == 2


def _scores(rows: int, keys: int, dim: int) -> UOp:
    """q @ k^T over `dim`: (rows, keys) dot products, the REDUCE attention's softmax reads."""
    q = expand_to(mov(buffer(0, (rows, dim)), Ops.RESHAPE, (rows, 1, dim)), (rows, keys, dim))
    k = expand_to(mov(buffer(1, (keys, dim)), Ops.RESHAPE, (1, keys, dim)), (rows, keys, dim))
    return mov(reduce(q * k, Ops.ADD, (2,)), Ops.RESHAPE, (rows, keys))


def test_a_long_reduce_read_in_two_loop_nests_is_realized() -> None:
    """softmax(q @ k^T): fused, each score would be computed in the row max's loop and again in the kernel's own
    loop over the keys; a dot product of 32 steps is worth its own kernel (the softmax then reads it)."""
    scores = _scores(6, 5, 32)
    m = expand_to(reduce(scores, Ops.MAX, (1,)), (6, 5))
    y = (scores - m).alu(Ops.EXP2)
    fused, _ = check(sink(y))
    assert kernel_count(fused) == 2  # the scores; the max and the exponentials


def test_a_short_reduce_read_in_two_loop_nests_stays_fused() -> None:
    scores = _scores(6, 5, 4)  # 4 steps: cheaper to compute twice than to store and load
    m = expand_to(reduce(scores, Ops.MAX, (1,)), (6, 5))
    fused, _ = check(sink((scores - m).alu(Ops.EXP2)))
    assert kernel_count(fused) == 1


def test_a_long_reduce_read_in_one_loop_nest_stays_fused() -> None:
    """q @ k^T scaled and masked, no reduction over the keys: each score is computed once, in the kernel's loop."""
    scores = _scores(6, 5, 32)
    fused, _ = check(sink(scores * const(0.5, (6, 5)) + const(1.0, (6, 5))))
    assert kernel_count(fused) == 1

"""Movement ops become index math: every op and random chains of them, checked against NumPy on both schedulers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sched_helpers import buffer, check, const, kernel_count, mov, reduce, sink

from plygrad.ir import Ops, UOp

SHAPES = st.lists(st.integers(0, 3), min_size=1, max_size=3).map(tuple)


@st.composite
def movement_chain(draw: st.DrawFn) -> UOp:
    """A buffer viewed through 1-4 random movement ops (sizes 0 and 1 included)."""
    shape = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple))
    x = buffer(0, shape)
    for _ in range(draw(st.integers(1, 4))):
        s = x.shape
        assert s is not None
        op = draw(st.sampled_from([Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP]))
        if op is Ops.RESHAPE:
            n = math.prod(s)
            dims = [d for d in range(1, n + 1) if n % d == 0] if n else [0]
            first = draw(st.sampled_from(dims))
            arg: object = (first, n // first) if first else (0, draw(st.integers(0, 3)))
        elif op is Ops.PERMUTE:
            arg = tuple(draw(st.permutations(range(len(s)))))
        elif op is Ops.EXPAND:
            arg = tuple(draw(st.integers(0, 3)) if d == 1 else d for d in s)
        elif op is Ops.PAD:
            arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in s)
        elif op is Ops.SHRINK:
            starts = [draw(st.integers(0, d)) for d in s]
            arg = tuple((a, draw(st.integers(a, d))) for a, d in zip(starts, s, strict=True))
        else:
            arg = tuple(draw(st.booleans()) for _ in s)
        x = mov(x, op, arg)
    return x


@given(movement_chain())
def test_random_view_chains_read_the_right_elements(view: UOp) -> None:
    check(sink(view))


@given(movement_chain())
def test_views_under_elementwise_ops(view: UOp) -> None:
    shape = view.shape
    assert shape is not None
    fused, _ = check(sink(view * const(2.0, shape) + view))
    assert kernel_count(fused) <= 1


@given(movement_chain(), st.data())
def test_reduce_over_any_axes_of_a_view(view: UOp, data: st.DataObject) -> None:
    shape = view.shape
    assert shape is not None
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    op = data.draw(st.sampled_from([Ops.ADD, Ops.MAX, Ops.MUL]))
    if op is Ops.MAX and any(shape[a] == 0 for a in axes):
        op = Ops.ADD  # MAX over nothing is -inf in NumPy and has no agreed value
    check(sink(reduce(view, op, axes)))


@pytest.mark.parametrize("pad", [((1, 0), (0, 0)), ((0, 2), (1, 1)), ((2, 2), (0, 3))])
def test_padding_reads_zero_even_for_computed_values(pad: tuple[tuple[int, int], ...]) -> None:
    a = buffer(0, (3, 4))
    y = mov(a.alu(Ops.EXP2) + const(1.0, (3, 4)), Ops.PAD, pad)  # padding of a value that is 1+ everywhere
    fused, _ = check(sink(y))
    assert kernel_count(fused) == 1


def test_reduce_of_expanded_input() -> None:
    a = buffer(0, (3, 1))
    y = reduce(mov(a, Ops.EXPAND, (3, 5)), Ops.ADD, (1,))
    check(sink(y))


def test_broadcast_add_via_expand() -> None:
    a, b = buffer(0, (4, 1)), buffer(1, (1, 5))
    y = mov(a, Ops.EXPAND, (4, 5)) + mov(b, Ops.EXPAND, (4, 5))
    fused, _ = check(sink(y))
    assert kernel_count(fused) == 1


@pytest.mark.parametrize("m,k,n", [(2, 3, 4), (1, 5, 1), (4, 1, 3)])
def test_matmul_from_reshape_expand_mul_sum(m: int, k: int, n: int) -> None:
    a, b = buffer(0, (m, k)), buffer(1, (k, n))
    ae = mov(mov(a, Ops.RESHAPE, (m, 1, k)), Ops.EXPAND, (m, n, k))
    be = mov(mov(mov(b, Ops.PERMUTE, (1, 0)), Ops.RESHAPE, (1, n, k)), Ops.EXPAND, (m, n, k))
    y = mov(reduce(ae * be, Ops.ADD, (2,)), Ops.RESHAPE, (m, n))
    fused, _ = check(sink(y))
    assert kernel_count(fused) == 1


def test_flip_and_shrink_of_a_reduce_result() -> None:
    x = buffer(0, (4, 5))
    r = reduce(x, Ops.ADD, (1,))
    y = mov(mov(r, Ops.FLIP, (True, False)), Ops.SHRINK, ((1, 3), (0, 1)))
    check(sink(y))

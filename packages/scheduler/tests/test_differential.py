"""`default` and `unfused` agree (and match NumPy) on random graphs of elementwise ops, views and reduces, and on
the conformance suite's packaged generator (`random_graphs.py`: gathers, broadcasts, assigns too) without a
runtime."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sched_helpers import buffer, check, const, expand_to, mov, reduce, sink

from plygrad.ir import Ops, UOp
from plygrad.scheduler import random_graphs

SHAPE = (3, 4)


@st.composite
def random_graph(draw: st.DrawFn) -> UOp:
    """A pool of (3, 4) tensors grown by binary ops, unary ops, flips and keepdim reduces broadcast back."""
    pool: list[UOp] = [buffer(i, SHAPE) for i in range(draw(st.integers(1, 3)))]
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["binary", "unary", "flip", "reduce", "pad"]))
        x = draw(st.sampled_from(pool))
        if kind == "binary":
            op = draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX, Ops.SUB]))
            pool.append(x.alu(op, draw(st.sampled_from(pool))))
        elif kind == "unary":
            pool.append(draw(st.sampled_from([lambda v: -v, lambda v: v * const(0.5, SHAPE),
                                              lambda v: (v < const(0.0, SHAPE)).where(v, const(1.0, SHAPE))]))(x))
        elif kind == "flip":
            pool.append(mov(x, Ops.FLIP, (draw(st.booleans()), True)))
        elif kind == "pad":
            pool.append(mov(mov(x, Ops.SHRINK, ((1, 3), (0, 3))), Ops.PAD, ((1, 0), (0, 1))))
        else:
            axis = draw(st.integers(0, 1))
            r = reduce(x, draw(st.sampled_from([Ops.ADD, Ops.MAX])), (axis,))
            pool.append(expand_to(r, SHAPE) if draw(st.booleans()) else expand_to(r, SHAPE) + x)
    outs = draw(st.lists(st.sampled_from(pool[1:] or pool), min_size=1, max_size=3))
    return sink(*outs)


@given(random_graph())
def test_default_and_unfused_agree_with_numpy(g: UOp) -> None:
    check(g)


@pytest.mark.parametrize("seed", range(40))
def test_default_and_unfused_agree_with_numpy_on_the_packaged_graphs(seed: int) -> None:
    check(random_graphs.random_graph(seed).sink, seed)

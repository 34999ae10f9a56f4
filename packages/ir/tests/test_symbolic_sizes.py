"""Symbolic sizes in movement ops (shape.py, docs/ir.md §4.3): None entries in the argument, expressions as extra
sources; shape inference, verification and serialization of them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.ir import BufferRef, IRVerifyError, Ops, ShapeError, Stage, UOp, deserialize, dtypes, serialize, verify
from plygrad.ir.shape import dim_text, max_shape, shape_text


def _buf(size: int) -> UOp:
    return UOp(Ops.BUFFER, dtypes.float32, (), BufferRef(0, "CPU", size))


def _var(value: int, name: str = "n", hi: int = 10) -> UOp:
    return UOp.variable(name, 1, hi).bind(value)


def _sink(x: UOp) -> UOp:
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.CONTIGUOUS, x.dtype, (x,)),))


def test_reshape_with_a_variable_size_has_that_size() -> None:
    n = _var(3)
    x = UOp(Ops.RESHAPE, dtypes.float32, (_buf(30), n), (3, None))
    assert x.shape == (3, n)
    assert max_shape(x.shape) == (3, 10)
    assert shape_text(x.shape) == "(3, n)"


def test_shrink_and_pad_sizes_are_simplified_expressions() -> None:
    n = _var(4)
    x = UOp(Ops.RESHAPE, dtypes.float32, (_buf(30), n), (3, None))
    assert UOp(Ops.SHRINK, dtypes.float32, (x, n, n + 2), ((0, 3), (None, None))).shape == (3, 2)
    padded = UOp(Ops.PAD, dtypes.float32, (x, n), ((0, 0), (None, 0))).shape
    assert padded is not None and padded[0] == 3 and dim_text(padded[1]) == "(n*2)"


@settings(max_examples=30, deadline=None)
@given(value=st.integers(1, 10), cut=st.integers(0, 5))
def test_shrink_of_a_symbolic_axis_keeps_the_rest(value: int, cut: int) -> None:
    n = _var(value)
    x = UOp(Ops.RESHAPE, dtypes.float32, (_buf(60), n), (6, None))
    shrunk = UOp(Ops.SHRINK, dtypes.float32, (x, n), ((cut, 6), (0, None)))
    assert shrunk.shape == (6 - cut, n)


def test_a_symbolic_graph_verifies_and_round_trips() -> None:
    n = _var(3)
    x = UOp(Ops.RESHAPE, dtypes.float32, (_buf(30), n), (3, None))
    sink = _sink(UOp(Ops.SHRINK, dtypes.float32, (x, n + -1), ((0, 3), (0, None))))
    verify(sink, Stage.TENSOR)
    assert deserialize(serialize(sink, Stage.TENSOR), Stage.TENSOR) is sink


def test_size_sources_must_match_the_none_entries() -> None:
    n = _var(3)
    with pytest.raises(IRVerifyError, match="symbolic size"):
        verify(_sink(UOp(Ops.RESHAPE, dtypes.float32, (_buf(30), n, n), (3, None))), Stage.TENSOR)
    with pytest.raises(IRVerifyError, match="symbolic size"):
        verify(_sink(UOp(Ops.RESHAPE, dtypes.float32, (_buf(30),), (3, None))), Stage.TENSOR)


def test_a_size_must_be_an_index_expression_of_variables() -> None:
    loaded = UOp(Ops.CAST, dtypes.index, (UOp(Ops.RESHAPE, dtypes.float32, (_buf(1),), ()),))
    with pytest.raises(IRVerifyError, match="must be a size"):
        verify(_sink(UOp(Ops.RESHAPE, dtypes.float32, (_buf(30), loaded), (3, None))), Stage.TENSOR)


def test_checks_reject_what_is_wrong_for_every_value() -> None:
    n = _var(3)
    x = UOp(Ops.RESHAPE, dtypes.float32, (_buf(30), n), (3, None))
    with pytest.raises(ShapeError, match=r"outside 0\.\.n"):
        _ = UOp(Ops.SHRINK, dtypes.float32, (x, n + 11), ((0, 3), (0, None))).shape
    with pytest.raises(ShapeError, match="non-negative"):
        _ = UOp(Ops.PAD, dtypes.float32, (x, n * -1), ((0, 0), (0, None))).shape
    with pytest.raises(ShapeError, match="only size 1 can expand"):
        _ = UOp(Ops.EXPAND, dtypes.float32, (x, n, n), (None, None)).shape

"""Shape inference (`plygrad.ir.shape`, `UOp.shape`) against NumPy doing the same thing to an array.

Shapes include 0- and 1-sized axes and scalars (ndim 0), where broadcasting and reshaping have their edge cases.
Every rejected shape must raise ShapeError naming the op and the shapes, so a frontend author can see what to fix.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plygrad.ir.dtype import dtypes
from plygrad.ir.errors import ShapeError
from plygrad.ir.ops import Ops
from plygrad.ir.records import BufferRef
from plygrad.ir.shape import broadcast_shapes
from plygrad.ir.uop import UOp

dims = st.integers(0, 4)
shapes = st.lists(dims, max_size=4).map(tuple)
nonzero_shapes = st.lists(st.integers(1, 4), max_size=4).map(tuple)


def tensor(shape: tuple[int, ...]) -> UOp:
    """A tensor-stage node of `shape`: a BUFFER of the right size, reshaped."""
    buf = UOp(Ops.BUFFER, dtypes.float32, (), BufferRef(0, "CPU", math.prod(shape)))
    return UOp(Ops.RESHAPE, dtypes.float32, (buf,), shape)


def movement(op: Ops, shape: tuple[int, ...], arg: Any) -> UOp:
    return UOp(op, dtypes.float32, (tensor(shape),), arg)


# ---- broadcasting -------------------------------------------------------------------------------------------------
@given(st.lists(st.lists(st.sampled_from([0, 1, 1, 2, 3]), max_size=4).map(tuple), max_size=4))
def test_broadcast_shapes_matches_numpy(shape_list: list[tuple[int, ...]]) -> None:
    try:
        expected = np.broadcast_shapes(*shape_list)
    except ValueError:
        with pytest.raises(ShapeError, match="do not broadcast"):
            broadcast_shapes(*shape_list)
        return
    assert broadcast_shapes(*shape_list) == expected


def test_broadcast_answers_are_kept_but_errors_are_raised_every_time() -> None:
    assert broadcast_shapes((3, 1), (4,)) == broadcast_shapes((3, 1), (4,)) == (3, 4)
    assert broadcast_shapes([3, 1], (4,)) == (3, 4)  # type: ignore[arg-type]  # a list is no key, still answered
    for _ in range(2):
        with pytest.raises(ShapeError, match="do not broadcast"):
            broadcast_shapes((3,), (4,))


def test_broadcast_error_names_the_shapes_and_axis() -> None:
    message = "shapes (2, 3) and (4, 3) do not broadcast: axis -2 has sizes [2, 4]"
    with pytest.raises(ShapeError, match=re.escape(message)):
        broadcast_shapes((2, 3), (4, 3))


# ---- movement ops against NumPy -----------------------------------------------------------------------------------
@st.composite
def regroupings(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A shape and another of the same size: the dims regrouped into products, with 1s sprinkled in."""
    source = draw(shapes)
    target: list[int] = []
    i = 0
    while i < len(source):
        take = draw(st.integers(1, len(source) - i))
        target.append(math.prod(source[i:i + take]))
        i += take
        if draw(st.booleans()):
            target.append(1)
    return source, tuple(draw(st.permutations(target)))


@given(regroupings())
def test_reshape_matches_numpy(case: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    source, target = case
    assert movement(Ops.RESHAPE, source, target).shape == np.empty(source).reshape(target).shape


@given(source=shapes, target=shapes)
def test_reshape_rejects_what_numpy_rejects(source: tuple[int, ...], target: tuple[int, ...]) -> None:
    try:
        expected = np.empty(source).reshape(target).shape
    except ValueError:
        with pytest.raises(ShapeError, match=re.escape(f"RESHAPE from {source} to {target}")):
            _ = movement(Ops.RESHAPE, source, target).shape
        return
    assert movement(Ops.RESHAPE, source, target).shape == expected


@given(data=st.data(), source=shapes)
def test_permute_matches_numpy_transpose(data: st.DataObject, source: tuple[int, ...]) -> None:
    order = tuple(data.draw(st.permutations(range(len(source)))))
    assert movement(Ops.PERMUTE, source, order).shape == np.transpose(np.empty(source), order).shape


@given(data=st.data(), source=shapes)
def test_expand_matches_numpy_broadcast_to(data: st.DataObject, source: tuple[int, ...]) -> None:
    target = tuple(data.draw(st.sampled_from([n, 0, 1, 5]) if n == 1 else st.just(n)) for n in source)
    assert movement(Ops.EXPAND, source, target).shape == np.broadcast_to(np.empty(source), target).shape


@given(source=nonzero_shapes, data=st.data())
def test_expand_rejects_what_numpy_rejects(source: tuple[int, ...], data: st.DataObject) -> None:
    target = tuple(data.draw(st.lists(st.integers(0, 4), min_size=len(source), max_size=len(source))))
    try:
        expected = np.broadcast_to(np.empty(source), target).shape
    except ValueError:
        with pytest.raises(ShapeError, match=re.escape(f"EXPAND from {source} to {target}")):
            _ = movement(Ops.EXPAND, source, target).shape
        return
    assert movement(Ops.EXPAND, source, target).shape == expected


@given(data=st.data(), source=shapes)
def test_pad_matches_numpy(data: st.DataObject, source: tuple[int, ...]) -> None:
    pads = tuple((data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in source)
    expected = np.pad(np.empty(source), pads).shape if source else ()  # NumPy takes no padding of a 0-d array
    assert movement(Ops.PAD, source, pads).shape == expected


@given(data=st.data(), source=shapes)
def test_shrink_matches_numpy_slicing(data: st.DataObject, source: tuple[int, ...]) -> None:
    bounds = []
    for n in source:
        start = data.draw(st.integers(0, n))
        bounds.append((start, data.draw(st.integers(start, n))))
    expected = np.empty(source)[tuple(slice(a, b) for a, b in bounds)].shape
    assert movement(Ops.SHRINK, source, tuple(bounds)).shape == expected


@given(data=st.data(), source=shapes)
def test_flip_matches_numpy(data: st.DataObject, source: tuple[int, ...]) -> None:
    flips = tuple(data.draw(st.booleans()) for _ in source)
    expected = np.flip(np.empty(source), tuple(i for i, f in enumerate(flips) if f)).shape
    assert movement(Ops.FLIP, source, flips).shape == expected


@given(data=st.data(), source=shapes, op=st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX]))
def test_reduce_keeps_dims_like_numpy(data: st.DataObject, source: tuple[int, ...], op: Ops) -> None:
    axes = tuple(data.draw(st.lists(st.sampled_from(range(len(source))), unique=True))) if source else ()
    assert movement(Ops.REDUCE, source, (op, axes)).shape == np.sum(np.empty(source), axis=axes, keepdims=True).shape


@given(source=shapes, data=st.data())
def test_chained_movement_matches_numpy(source: tuple[int, ...], data: st.DataObject) -> None:
    node, array = tensor(source), np.empty(source)
    for _ in range(data.draw(st.integers(1, 6))):
        order = tuple(data.draw(st.permutations(range(array.ndim))))
        pads = tuple((data.draw(st.integers(0, 2)), 0) for _ in range(array.ndim))
        node = UOp(Ops.PAD, dtypes.float32, (UOp(Ops.PERMUTE, dtypes.float32, (node,), order),), pads)
        array = np.pad(np.transpose(array, order), pads) if array.ndim else array
    assert node.shape == array.shape


# ---- shapes of the other tensor-stage ops -------------------------------------------------------------------------
def test_leaves_have_scalar_or_buffer_shapes() -> None:
    assert UOp.const(dtypes.int32, 3).shape == ()
    assert UOp.variable("n", 1, 8).shape == ()
    assert UOp.variable("n", 1, 8).bind(3).shape == ()
    assert UOp(Ops.BUFFER, dtypes.int8, (), BufferRef(1, "CPU", 7)).shape == (7,)


@pytest.mark.parametrize("op", [Ops.CAST, Ops.CONTIGUOUS, Ops.COPY, Ops.NEG])
def test_single_source_ops_keep_the_shape(op: Ops) -> None:
    assert UOp(op, dtypes.float32, (tensor((2, 0, 3)),)).shape == (2, 0, 3)


def test_elementwise_ops_keep_the_common_shape() -> None:
    a, b = tensor((2, 3)), tensor((2, 3))
    cond = UOp(Ops.CMPLT, dtypes.bool, (a, b))
    assert (a + b).shape == (2, 3) and cond.shape == (2, 3) and cond.where(a, b).shape == (2, 3)
    assert UOp(Ops.ASSIGN, dtypes.float32, (a, b)).shape == (2, 3)


@pytest.mark.parametrize("node", [
    UOp(Ops.SINK, dtypes.void, ()), UOp.range(4, 0), UOp(Ops.PARAM, dtypes.float32.ptr(4), (), 0),
], ids=["sink", "range", "param"])
def test_nodes_without_tensor_shape(node: UOp) -> None:
    assert node.shape is None
    with pytest.raises(ValueError, match="no tensor shape"):
        _ = node.ndim


def test_ndim() -> None:
    assert tensor((2, 0, 3)).ndim == 3 and UOp.const(dtypes.int32, 1).ndim == 0


# ---- errors -------------------------------------------------------------------------------------------------------
ERRORS = [
    ("reshape-size", lambda: movement(Ops.RESHAPE, (2, 3), (4, 2)), "RESHAPE from (2, 3) to (4, 2)"),
    ("reshape-negative", lambda: movement(Ops.RESHAPE, (2, 3), (-1, 6)), "RESHAPE needs a tuple of non-negative"),
    ("reshape-not-tuple", lambda: movement(Ops.RESHAPE, (2, 3), 6), "RESHAPE needs a tuple"),
    ("permute-repeat", lambda: movement(Ops.PERMUTE, (2, 3), (0, 0)), "PERMUTE of shape (2, 3) needs a permutation"),
    ("permute-short", lambda: movement(Ops.PERMUTE, (2, 3), (0,)), "PERMUTE of shape (2, 3)"),
    ("permute-mixed", lambda: movement(Ops.PERMUTE, (2, 3), ("a", 1)), "PERMUTE of shape (2, 3)"),
    ("permute-bools", lambda: movement(Ops.PERMUTE, (2, 3), (True, False)), "PERMUTE of shape (2, 3)"),
    ("expand-size", lambda: movement(Ops.EXPAND, (2, 3), (4, 3)), "EXPAND from (2, 3) to (4, 3): axis 0"),
    ("expand-ndim", lambda: movement(Ops.EXPAND, (3,), (2, 3)), "EXPAND of shape (3,) needs 1"),
    ("pad-negative", lambda: movement(Ops.PAD, (2, 3), ((0, 0), (-1, 0))), "PAD of shape (2, 3): padding"),
    ("pad-pairs", lambda: movement(Ops.PAD, (2, 3), ((1, 1),)), "PAD of shape (2, 3) needs one (int, int) pair"),
    ("shrink-range", lambda: movement(Ops.SHRINK, (2, 3), ((0, 2), (2, 4))), "SHRINK of shape (2, 3): axis 1"),
    ("shrink-reversed", lambda: movement(Ops.SHRINK, (2, 3), ((1, 0), (0, 3))), "SHRINK of shape (2, 3): axis 0"),
    ("flip-length", lambda: movement(Ops.FLIP, (2, 3), (True,)), "FLIP of shape (2, 3) needs one bool per axis"),
    ("flip-ints", lambda: movement(Ops.FLIP, (2, 3), (1, 0)), "FLIP of shape (2, 3)"),
    ("reduce-axis", lambda: movement(Ops.REDUCE, (2, 3), (Ops.ADD, (2,))), "REDUCE of shape (2, 3): axes (2,)"),
    ("reduce-repeat", lambda: movement(Ops.REDUCE, (2, 3), (Ops.ADD, (1, 1))), "REDUCE of shape (2, 3): axes (1, 1)"),
    ("reduce-op", lambda: movement(Ops.REDUCE, (2, 3), (Ops.SUB, (1,))), "REDUCE needs the argument"),
    ("reduce-int-op", lambda: movement(Ops.REDUCE, (2, 3), (int(Ops.ADD), (1,))), "REDUCE needs the argument"),
    ("elementwise", lambda: tensor((2, 3)) + tensor((3, 2)), "ADD got sources of shapes (2, 3) and (3, 2)"),
    ("where", lambda: UOp(Ops.WHERE, dtypes.float32, (UOp(Ops.CMPLT, dtypes.bool, (tensor((2,)), tensor((2,)))),
                                                      tensor((2,)), tensor((1,)))), "WHERE got sources of shapes"),
    ("two-sources", lambda: UOp(Ops.RESHAPE, dtypes.float32, (tensor((2,)), tensor((2,))), (2,)),
     "RESHAPE takes one source (and, for a symbolic size, its scalar expressions), got 2"),
    ("buffer-arg", lambda: UOp(Ops.BUFFER, dtypes.float32, (), 16), "BUFFER needs a BufferRef"),
]


@pytest.mark.parametrize(("build", "message"), [(e[1], e[2]) for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_bad_shapes_raise_shape_error_naming_op_and_shapes(build: Any, message: str) -> None:
    node = build()
    with pytest.raises(ShapeError, match=re.escape(message)):
        _ = node.shape


def test_shape_errors_are_value_errors() -> None:
    # callers that catch ValueError (as for NumPy's shape errors) still catch ours
    assert issubclass(ShapeError, ValueError)


@given(source=shapes, target=shapes)
def test_shape_never_raises_anything_but_shape_error(source: tuple[int, ...], target: tuple[int, ...]) -> None:
    for op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.FLIP, Ops.PAD, Ops.SHRINK):
        try:
            shape = movement(op, source, target).shape
        except ShapeError:
            continue
        assert shape is not None and all(type(n) is int and n >= 0 for n in shape)

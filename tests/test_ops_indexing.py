"""Indexing with tensors against PyTorch (forward and gradient) and NumPy: advanced `t[idx]`, `t[idx] = v`, gather,
scatter, scatter_reduce, masked_fill, masked_select, nonzero, one_hot, index_select, take_along_dim, and the errors
bad indices raise."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch_compare import compare, to_torch

from plygrad.frontend import Tensor, dtypes
from plygrad.ir import DTypeError, ShapeError

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(0)


def _floats(*shape: int) -> Array:
    return RNG.standard_normal(shape).astype(np.float32)


def _torch_index(index: tuple[Any, ...]) -> tuple[Any, ...]:
    """The same index for PyTorch: lists and NumPy arrays become tensors (int64 or bool)."""
    out: list[Any] = []
    for item in index:
        if isinstance(item, (list, np.ndarray)):
            array = np.asarray(item)
            out.append(torch.from_numpy(array.astype(bool if array.dtype == bool else np.int64)))
        else:
            out.append(item)
    return tuple(out)


def _as_tensors(index: tuple[Any, ...]) -> tuple[Any, ...]:
    """The index with each list made a plygrad Tensor (int32 or bool), to test tensor indices beside lists."""
    return tuple(Tensor(np.asarray(i, bool if np.asarray(i).dtype == bool else np.int32))
                 if isinstance(i, (list, np.ndarray)) else i for i in index)


@st.composite
def _advanced_index(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    """A shape and an index mixing ints, slices, None and lists of ints (negative ones too)."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    count = draw(st.integers(0, 3))  # one length for every list, so that they broadcast
    items: list[Any] = []
    for n in shape:
        kind = draw(st.sampled_from(["list", "list", "slice", "int", "none+list"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            start = draw(st.one_of(st.none(), st.integers(-n, n)))
            items.append(slice(start, None, draw(st.integers(1, 2))))
        else:
            if kind == "none+list":
                items.append(None)
            items.append([draw(st.integers(-n, n - 1)) for _ in range(count)])
    return shape, tuple(items)


# ---- t[index] ------------------------------------------------------------------------------------------------------
@settings(max_examples=12, deadline=None)
@given(case=_advanced_index(), as_tensor=st.booleans())
def test_getitem_with_lists_and_tensors_matches_torch(case: tuple[tuple[int, ...], tuple[Any, ...]],
                                                      as_tensor: bool) -> None:
    shape, index = case
    pg_index = _as_tensors(index) if as_tensor else index
    compare(lambda x: x[pg_index], lambda x: x[_torch_index(index)], _floats(*shape))


@pytest.mark.parametrize("index", [
    ([0, 2, 2, -1],),                             # repeated and negative indices
    (slice(None), [[0, 1], [3, 3]]),              # a 2-D index: its shape replaces the axis
    ([0, 1], slice(None), [1, 2]),                # separated by a slice: index dims go in front
    (0, slice(None), [1, 2]),                     # PyTorch: an int does not count as an advanced index
    (slice(None), [1, 0], 2),
    ([[0], [2]], slice(None), [1, 2, 3]),         # broadcast index tensors, separated
    (Ellipsis, None, [0, 4]),
    ([1], [0], [2]),
    (slice(1, None), [True, False, True, True]),  # a Python list of bools is a mask
])
def test_getitem_cases_match_torch(index: tuple[Any, ...]) -> None:
    compare(lambda x: x[index], lambda x: x[_torch_index(index)], _floats(3, 4, 5))


def test_getitem_bool_masks_match_torch() -> None:
    x = _floats(3, 4, 2)
    masks = [x[:, :, 0] > 0, x[0, :, 0] > 0, np.zeros((3,), bool)]
    compare(lambda t: t[Tensor(masks[0])], lambda t: t[torch.from_numpy(masks[0])], x)
    compare(lambda t: t[:, Tensor(masks[1]), 1], lambda t: t[:, torch.from_numpy(masks[1]), 1], x)
    compare(lambda t: t[masks[2]], lambda t: t[torch.from_numpy(masks[2])], x)  # nothing selected: 0 rows
    compare(lambda t: t[t > 0], lambda t: t[t > 0], x)


def test_getitem_python_bool_adds_an_axis_like_torch() -> None:
    x = _floats(2, 3)
    compare(lambda t: t[True], lambda t: t[True], x, grad=False)
    compare(lambda t: t[False], lambda t: t[False], x, grad=False)


@pytest.mark.parametrize("dtype", ["int32", "bool", "float16"])
def test_getitem_keeps_the_dtype(dtype: str) -> None:
    x = (RNG.integers(-5, 5, (4, 3)) > 0) if dtype == "bool" else RNG.integers(-5, 5, (4, 3)).astype(dtype)
    got = Tensor(x)[[3, 0, -1], 1:]
    assert got.dtype is getattr(dtypes, dtype)
    np.testing.assert_array_equal(got.numpy(), x[[3, 0, -1], 1:])


def test_getitem_of_zero_size_results() -> None:
    x = _floats(3, 4)
    assert Tensor(x)[[]].shape == (0, 4)
    assert Tensor(x)[:, Tensor(np.zeros((2, 0), np.int32))].numpy().shape == (3, 2, 0)
    assert Tensor(np.zeros((0, 4), np.float32))[:, [1, 2]].numpy().shape == (0, 2)


def test_getitem_tensor_index_out_of_range_reads_zero() -> None:
    """Tensor indices are not checked on the device: an out-of-range value matches nothing (module docstring)."""
    got = Tensor(np.array([1.0, 2.0, 3.0], np.float32))[Tensor([0, 3, -4, -1])].numpy()
    np.testing.assert_array_equal(got, [1.0, 0.0, 0.0, 3.0])


@pytest.mark.parametrize("index", [(Tensor([4, 0, 2]),), (slice(None), Tensor([[1], [0]])), (Tensor([1]), 0)])
def test_getitem_gather_is_one_kernel(index: tuple[Any, ...]) -> None:
    """The one-hot mask, the select and the sum fuse; the result is laid out before the REDUCE (no copy after)."""
    x = Tensor(_floats(5, 3)).realize()
    with Tensor.scheduler("default"):
        assert len(x[index].schedule().src) == 1


@pytest.mark.parametrize(("index", "match"), [
    (([0, 3],), "out of bounds for axis 0 with size 3"),
    (([0], [0], [0], [0]), "too many indices"),
    ((np.ones((3, 2), bool),), "shape of the mask"),
    ((1.5,), "not supported"),
    (([0.5],), "not supported"),
    (([0, 1], [0, 1, 2]), "could not be broadcast"),
    ((Ellipsis, Ellipsis), "single ellipsis"),
])
def test_getitem_rejects_bad_indices(index: tuple[Any, ...], match: str) -> None:
    with pytest.raises(IndexError, match=match):
        Tensor(_floats(3, 4, 5))[index]


def test_getitem_rejects_float_index_tensors() -> None:
    with pytest.raises(IndexError, match="integer or bool"):
        Tensor(_floats(3))[Tensor(np.array([0.0], np.float32))]


@pytest.mark.parametrize("dtype", ["float16", "bool", "int8"])
def test_gather_and_scatter_keep_the_dtype(dtype: str) -> None:
    x = (RNG.integers(0, 2, (3, 4)) > 0) if dtype == "bool" else RNG.integers(-5, 5, (3, 4)).astype(dtype)
    index = np.array([[2, 0, 1, 1]])
    got = Tensor(x).gather(0, Tensor(index))
    assert got.dtype is getattr(dtypes, dtype)
    np.testing.assert_array_equal(got.numpy(), np.take_along_axis(x, index, 0))
    scattered = Tensor(x).scatter(0, Tensor(index), Tensor(x[:1]))
    want = to_torch(x).scatter(0, torch.from_numpy(index), to_torch(x[:1]))
    np.testing.assert_array_equal(scattered.numpy(), want.numpy())


# ---- t[index] = value -----------------------------------------------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(case=_advanced_index(), as_tensor=st.booleans())
def test_setitem_with_lists_and_tensors_matches_torch(case: tuple[tuple[int, ...], tuple[Any, ...]],
                                                      as_tensor: bool) -> None:
    shape, index = case
    x = _floats(*shape)
    tt = to_torch(x)
    t_index = _torch_index(index)
    positions = torch.arange(x.size).reshape(shape)[t_index]
    # a repeated element: PyTorch leaves the write undefined
    assume(len(set(positions.flatten().tolist())) == positions.numel())
    value = _floats(*tt[t_index].shape)
    tt[t_index] = to_torch(value)
    pg = Tensor(x)
    pg[_as_tensors(index) if as_tensor else index] = Tensor(value)
    np.testing.assert_array_equal(pg.numpy(), tt.numpy())


SET_CASES = [
    ((0,), "scalar"),
    ((slice(None), slice(1, None, 2)), (3, 2, 5)),
    (([0, 2], slice(None), [1, 3]), (2, 4)),
    ((slice(None), [0, -1]), "scalar"),
    ((0, slice(None), [1, 2]), (4, 2)),
    ((slice(1, 3), [3, 0], None), (5,)),
    (("mask3",), "scalar"),
    ((slice(None), "mask1"), (5,)),
    ((Ellipsis, "mask_last"), (3, 4, 1)),
    ((slice(None), "mask1", Ellipsis), (5,)),
    (("mask3_first", Ellipsis), "scalar"),
    (("mask_first", Ellipsis, slice(None)), (1, 5)),
    (("mask3",), "masked"),
]


def _mask(name: str, x: Array) -> Array:
    masks: dict[str, Array] = {"mask3": x > 0, "mask1": x[0, :, 0] > 0, "mask_last": x[0, 0] > 0,
                               "mask3_first": x[:, 0, 0] > 0, "mask_first": x[:, 0, 0] > 0}
    return masks[name]


@pytest.mark.parametrize(("index", "value"), SET_CASES)
def test_setitem_matches_torch(index: tuple[Any, ...], value: Any) -> None:
    x = _floats(3, 4, 5)
    idx = tuple(_mask(i, x) if isinstance(i, str) else i for i in index)
    pg_value: Any = 2.5
    t_value: Any = 2.5
    if value != "scalar":
        v = _floats(int(_mask("mask3", x).sum())) if value == "masked" else _floats(*value)
        pg_value, t_value = Tensor(v), to_torch(v)
    pg, tt = Tensor(x), to_torch(x)
    pg[_as_tensors(idx)] = pg_value
    tt[_torch_index(idx)] = t_value
    np.testing.assert_array_equal(pg.numpy(), tt.numpy())


def test_setitem_gradient_flows_to_the_value_and_the_rest_of_the_tensor() -> None:
    def write(x: Any, v: Any, index: tuple[Any, ...]) -> Any:
        y = x * 1.0
        y[index] = v
        return y

    rows = ([0, 2], slice(1, 3))
    compare(lambda x, v: write(x, v, rows), lambda x, v: write(x, v, _torch_index(rows)), _floats(3, 4), _floats(2, 2))
    compare(lambda x, v: write(x, v, (slice(None), 1)), lambda x, v: write(x, v, (slice(None), 1)),
            _floats(3, 4), _floats(3))


def test_setitem_with_negative_steps_matches_numpy() -> None:
    x = _floats(3, 4, 5)
    value = _floats(2, 2)
    t = Tensor(x)
    t[::-2, 1, 4:0:-3] = Tensor(value)
    want = x.copy()
    want[::-2, 1, 4:0:-3] = value
    np.testing.assert_array_equal(t.numpy(), want)


def test_setitem_repeated_indices_last_write_wins_like_numpy() -> None:
    x = np.zeros((4, 2), np.float32)
    t = Tensor(x)
    t[[1, 3, 1]] = Tensor(np.array([[1.0], [2.0], [3.0]], np.float32))
    x[[1, 3, 1]] = np.array([[1.0], [2.0], [3.0]], np.float32)
    np.testing.assert_array_equal(t.numpy(), x)


def test_setitem_writes_into_the_buffer_and_casts_the_value() -> None:
    t = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3)).realize()
    t[:, [0, 2]] = 7.9  # cast to int32 like PyTorch: 7
    t[t > 6] = Tensor(np.array(-1, np.int64))
    np.testing.assert_array_equal(t.numpy(), [[-1, 1, -1], [-1, 4, -1]])


def test_setitem_mask_with_a_scalar_needs_no_read_back() -> None:
    x = Tensor(_floats(4, 3))
    mask = x > 0  # lazy: reading it back would realize it; the mask path builds a WHERE instead
    x[mask] = 0.0
    assert not mask._is_realized()
    assert (x.numpy() <= 0).all()


def test_setitem_rejects_values_that_do_not_broadcast() -> None:
    t = Tensor(_floats(3, 4))
    with pytest.raises(ShapeError, match="setitem"):
        t[[0, 1]] = Tensor(_floats(3, 4))


# ---- gather / take_along_dim / index_select --------------------------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_gather_matches_torch(data: st.DataObject) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    axis = dim % len(shape)
    index_shape = tuple(data.draw(st.integers(0, 4)) if d == axis else data.draw(st.integers(1, n))
                        for d, n in enumerate(shape))
    index = RNG.integers(-shape[axis], shape[axis], index_shape)  # negative indices wrap (PyTorch's gather raises)
    compare(lambda x, i: x.gather(dim, i), lambda x, i: x.gather(dim, i % shape[axis]), _floats(*shape), index)


def test_take_along_dim_and_index_select_match_torch() -> None:
    x = _floats(3, 4)
    order = np.argsort(x, axis=1)[:, :2]
    compare(lambda t, i: t.take_along_dim(i, 1), lambda t, i: torch.take_along_dim(t, i, 1), x, order)
    compare(lambda t, i: t.take_along_dim(i, 0), lambda t, i: torch.take_along_dim(t, i, 0), x,
            np.array([[2], [0]]))  # broadcast along the other axis
    compare(lambda t, i: t.take_along_dim(i), torch.take_along_dim, x, np.array([11, 0, 5]))
    compare(lambda t, i: t.index_select(1, i), lambda t, i: t.index_select(1, i), x, np.array([3, 0, 3]))


def test_gather_rejects_bad_arguments() -> None:
    x = Tensor(_floats(3, 4))
    with pytest.raises(DTypeError, match="gather"):
        x.gather(0, Tensor(np.zeros((1, 1), np.float32)))
    with pytest.raises(ShapeError, match="gather"):
        x.gather(0, Tensor(np.zeros((2,), np.int32)))
    with pytest.raises(ShapeError, match="gather"):
        x.gather(0, Tensor(np.zeros((2, 5), np.int32)))
    with pytest.raises(ShapeError, match="gather"):
        x.gather(2, Tensor(np.zeros((2, 2), np.int32)))


# ---- scatter / scatter_reduce ---------------------------------------------------------------------------------------
def _distinct_index(shape: tuple[int, ...], n: int, dim: int) -> Array:
    """An index for scatter along `dim` with no repeats along it (PyTorch's replace-scatter is undefined there)."""
    lines = np.moveaxis(np.zeros(shape, np.int64), dim, -1)
    picked = np.stack([RNG.permutation(n)[:shape[dim]] for _ in range(int(np.prod(lines.shape[:-1])))])
    return np.moveaxis(picked.reshape(lines.shape), -1, dim)


@settings(max_examples=6, deadline=None)
@given(dim=st.integers(0, 1), rows=st.integers(1, 3), cols=st.integers(1, 3))
def test_scatter_matches_torch(dim: int, rows: int, cols: int) -> None:
    x, src = _floats(3, 4), _floats(rows, cols)  # PyTorch's scatter backward needs src of the index's shape
    index = _distinct_index((rows, cols), (3, 4)[dim], dim)
    compare(lambda t, s: t.scatter(dim, Tensor(index), s), lambda t, s: t.scatter(dim, torch.from_numpy(index), s),
            x, src)
    compare(lambda t: t.scatter(dim, Tensor(index), 2.5), lambda t: t.scatter(dim, torch.from_numpy(index), 2.5), x)


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_reduce_argument_accumulates_repeats(reduce: str) -> None:
    x, src = _floats(3, 4), _floats(3, 4)
    index = np.array([[0, 0, 2], [1, 0, 0]])
    compare(lambda t, s: t.scatter(0, Tensor(index), s, reduce=reduce),
            lambda t, s: t.scatter(0, torch.from_numpy(index), s, reduce=reduce), x, src, grad=False)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_matches_torch(reduce: str, include_self: bool) -> None:
    x, src = _floats(3, 4), _floats(2, 4)
    index = np.array([[0, 3, 3, -1], [1, 0, 3, 0]])  # repeats along dim 1, a negative index
    torch_index = torch.from_numpy(index % 4)
    # random floats have no ties and no zeros, where amax/amin/prod gradients would depend on how they are split
    compare(lambda t, s: t.scatter_reduce(1, Tensor(index), s, reduce, include_self=include_self),
            lambda t, s: t.scatter_reduce(1, torch_index, s, reduce, include_self=include_self), x, src)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin", "prod"])
def test_scatter_reduce_on_integers_matches_torch(reduce: Any) -> None:
    x = RNG.integers(-9, 9, (4,)).astype(np.int32)
    src = RNG.integers(-9, 9, (5,)).astype(np.int32)
    index = np.array([0, 0, 2, 0, 1])
    got = Tensor(x).scatter_reduce(0, Tensor(index), Tensor(src), reduce).numpy()  # integer mean floors
    want = to_torch(x).scatter_reduce(0, torch.from_numpy(index), to_torch(src), reduce).numpy()
    np.testing.assert_array_equal(got, want)


def test_scatter_rejects_bad_arguments() -> None:
    x = Tensor(_floats(3, 4))
    index = Tensor(np.zeros((2, 2), np.int32))
    with pytest.raises(ValueError, match="scatter_reduce"):
        x.scatter_reduce(0, index, Tensor(_floats(2, 2)), "max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scatter"):
        x.scatter(0, index, 1.0, reduce="sum")  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="scatter"):
        x.scatter(0, index, Tensor(_floats(1, 2)))
    with pytest.raises(ShapeError, match="scatter"):
        x.scatter(1, Tensor(np.zeros((4, 1), np.int32)), 1.0)


# ---- masks, nonzero, one_hot ----------------------------------------------------------------------------------------
def test_masked_fill_matches_torch() -> None:
    x = _floats(3, 4)
    row_mask = x[0] > 0
    compare(lambda t: t.masked_fill(Tensor(row_mask), -2.0), lambda t: t.masked_fill(torch.from_numpy(row_mask), -2.0),
            x)
    compare(lambda t, v: t.masked_fill(t > 0, v.reshape(())), lambda t, v: t.masked_fill(t > 0, v.reshape(())), x,
            np.array([0.5], np.float32), differentiable=[True, False])
    ints = RNG.integers(-3, 3, (2, 3)).astype(np.int32)
    np.testing.assert_array_equal(Tensor(ints).masked_fill(Tensor(ints) < 0, 9).numpy(), np.where(ints < 0, 9, ints))


def test_masked_fill_rejects_bad_masks() -> None:
    with pytest.raises(DTypeError, match="masked_fill"):
        Tensor(_floats(3)).masked_fill(Tensor([1, 0, 1]), 0.0)
    with pytest.raises(ShapeError, match="masked_fill"):
        Tensor(_floats(3)).masked_fill(Tensor(np.ones((2, 3), bool)), 0.0)


def test_masked_select_matches_torch() -> None:
    x = _floats(3, 4)
    row_mask = x[0] > 0
    compare(lambda t: t.masked_select(t > 0), lambda t: t.masked_select(t > 0), x)
    compare(lambda t: t.masked_select(Tensor(row_mask)), lambda t: t.masked_select(torch.from_numpy(row_mask)), x)
    compare(lambda t: t.masked_select(t > 10), lambda t: t.masked_select(t > 10), x)  # empty result


@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (2, 0, 2), (2, 2, 3)])
def test_nonzero_matches_torch(shape: tuple[int, ...]) -> None:
    x = RNG.integers(-1, 2, shape).astype(np.int32)
    got = Tensor(x).nonzero()
    assert got.dtype is dtypes.int32
    np.testing.assert_array_equal(got.numpy(), torch.from_numpy(x).nonzero().numpy())


def test_one_hot_matches_torch() -> None:
    labels = np.array([[0, 3], [2, 2]], np.int64)
    want = torch.nn.functional.one_hot(torch.from_numpy(labels))
    np.testing.assert_array_equal(Tensor(labels).one_hot().numpy(), want.numpy())
    np.testing.assert_array_equal(Tensor(labels).one_hot(6).numpy(),
                                  torch.nn.functional.one_hot(torch.from_numpy(labels), 6).numpy())
    np.testing.assert_array_equal(Tensor([1, 7, -1]).one_hot(3).numpy(), [[0, 1, 0], [0, 0, 0], [0, 0, 0]])
    with pytest.raises(DTypeError, match="one_hot"):
        Tensor([0.0]).one_hot(2)

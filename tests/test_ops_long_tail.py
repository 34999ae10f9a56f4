"""tinygrad's and PyTorch's long tail, each against PyTorch or NumPy: zero-size tensors from NumPy arrays of every
dtype, softmax/log_softmax(dtype=), nonzero(size=) (JAX's NumPy API), prod(dtype=), arange's default dtype, the edge
values of logaddexp and acosh, max_pool2d's int64 indices, max_unpool2d of infinities, and load_state_dict's
one message for every mismatch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as tf
from torch_compare import compare

from plygrad.frontend import Tensor, dtypes, nn
from plygrad.frontend.nn.state import StateDictError, load_state_dict

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(32)
NUMPY_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                np.float16, np.float32, np.float64]


@pytest.mark.parametrize("np_dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_zero_size_array_of_any_dtype_becomes_a_tensor_of_that_dtype(np_dtype: Any) -> None:
    t = Tensor(np.zeros((0, 3), dtype=np_dtype))
    want = torch.from_numpy(np.zeros((0, 3), dtype=np_dtype))
    assert t.shape == tuple(want.shape) and t.dtype.numpy_name == np.dtype(np_dtype).name
    back = t.numpy()
    assert back.shape == (0, 3) and back.dtype == want.numpy().dtype


@pytest.mark.parametrize(("src", "dtype"), [(np.float16, "float32"), (np.float32, "float64")])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_dtype_casts_the_input_first(op: str, src: Any, dtype: str) -> None:
    x = (RNG.standard_normal((3, 5)) * 4).astype(src)
    out = getattr(Tensor(x), op)(1, dtype=getattr(dtypes, dtype))
    assert out.dtype is getattr(dtypes, dtype)
    compare(lambda t: getattr(t, op)(1, dtype=getattr(dtypes, dtype)),
            lambda t: getattr(torch, op)(t, 1, dtype=getattr(torch, dtype)), x, atol=1e-6, rtol=1e-6)


def argwhere_sized(a: Array, size: int, fill_value: int) -> Array:
    """JAX's `argwhere(a, size=, fill_value=)`: the first `size` coordinates, padded with `fill_value`."""
    found = np.argwhere(a)[:size]
    pad = np.full((size - len(found), a.ndim), fill_value, dtype=found.dtype)
    return np.concatenate([found, pad])


@pytest.mark.parametrize("size", [0, 2, 4, 9])
def test_nonzero_with_size_cuts_or_pads_as_numpy_argwhere(size: int) -> None:
    a = np.array([[0.0, 1.5, 0.0], [np.nan, 0.0, -2.0], [0.0, 0.0, 3.0]], dtype=np.float32)  # 4 non-zeros
    got = Tensor(a).nonzero(size=size, fill_value=-1)
    assert got.shape == (size, 2)
    np.testing.assert_array_equal(got.numpy(), argwhere_sized(a, size, -1))


def test_nonzero_with_size_of_a_bool_vector_matches_torch_where_the_count_fits() -> None:
    a = np.array([True, False, True, True, False])
    np.testing.assert_array_equal(Tensor(a).nonzero(size=3).numpy(), torch.from_numpy(a).nonzero().numpy())
    np.testing.assert_array_equal(Tensor(a).nonzero(size=5).numpy(), argwhere_sized(a, 5, 0))


@pytest.mark.parametrize(("src", "dtype", "axis"), [(np.int8, "int64", None), (np.int8, "int16", 1),
                                                     (np.float32, "float64", 0), (np.int32, "float32", None)])
def test_prod_dtype_casts_before_multiplying(src: Any, dtype: str, axis: int | None) -> None:
    x = np.array([[100, 3, -2], [7, 100, 1]]).astype(src)  # 100 * 100 overflows int8: the cast comes first
    got = Tensor(x).prod(axis, dtype=getattr(dtypes, dtype))
    t = torch.from_numpy(x)
    want = t.prod(dtype=getattr(torch, dtype)) if axis is None else t.prod(axis, dtype=getattr(torch, dtype))
    assert got.dtype is getattr(dtypes, dtype)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_arange_of_ints_has_the_default_int_dtype_as_tinygrad() -> None:
    """tinygrad's `arange(5)` is `dtypes.default_int` (int32), where PyTorch's is int64; the values are the same."""
    assert Tensor.arange(5).dtype is dtypes.default_int is dtypes.int32
    assert Tensor.arange(0, 2, 0.5).dtype is dtypes.default_float
    np.testing.assert_array_equal(Tensor.arange(2, 11, 3).numpy(), torch.arange(2, 11, 3).numpy())


EDGES = np.array([np.inf, -np.inf, np.nan, 1.0, 0.0, -1.0, 1e30, -1e30, 0.5], dtype=np.float32)


def test_logaddexp_of_infinities_and_nan_as_torch() -> None:
    a, b = (x.ravel() for x in np.meshgrid(EDGES, EDGES))
    got = Tensor(a).logaddexp(Tensor(b)).numpy()
    np.testing.assert_allclose(got, torch.from_numpy(a).logaddexp(torch.from_numpy(b)).numpy(), rtol=1e-6)


def test_acosh_at_one_below_one_and_at_infinity_as_torch() -> None:
    x = np.concatenate([EDGES, np.array([1.0000001, 2.0, 0.9999999], dtype=np.float32)])
    np.testing.assert_allclose(Tensor(x).acosh().numpy(), torch.from_numpy(x).acosh().numpy(), rtol=1e-6)


def test_max_pool2d_indices_are_int64_as_torch() -> None:
    x = RNG.standard_normal((1, 2, 4, 6)).astype(np.float32)
    values, indices = Tensor(x).max_pool2d(2, return_indices=True)
    want_values, want_indices = tf.max_pool2d(torch.from_numpy(x), 2, return_indices=True)
    assert indices.dtype is dtypes.int64 and want_indices.dtype is torch.int64
    np.testing.assert_array_equal(indices.numpy(), want_indices.numpy())
    np.testing.assert_array_equal(values.numpy(), want_values.numpy())


@pytest.mark.parametrize("stride", [2, 1], ids=["disjoint", "overlapping"])
def test_max_unpool2d_writes_infinities_as_torch(stride: int) -> None:
    x = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    x[0, 0, 0, 0], x[0, 0, 3, 3], x[0, 0, 1, 2] = np.inf, -np.inf, np.inf
    values, indices = Tensor(x).max_pool2d(2, stride=stride, return_indices=True)
    got = values.max_unpool2d(indices, 2, stride=stride).numpy()
    tv, ti = tf.max_pool2d(torch.from_numpy(x), 2, stride=stride, return_indices=True)
    np.testing.assert_array_equal(got, tf.max_unpool2d(tv, ti, 2, stride=stride).numpy())


class TwoLayers:
    def __init__(self) -> None:
        self.a = nn.Linear(3, 2)
        self.b = nn.Linear(2, 2)


class TorchTwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(3, 2)
        self.b = torch.nn.Linear(2, 2)


def test_load_state_dict_names_every_mismatch_at_once_as_torch() -> None:
    """Missing keys, unexpected keys and shape mismatches in one error that PyTorch's class (RuntimeError) catches,
    raised before any tensor is written."""
    shapes = {"a.weight": (3, 3), "a.bias": (2,), "b.weight": (2, 2), "extra": (1,)}  # b.bias missing
    torch_says = r"(?s)Missing key.*b\.bias.*Unexpected key.*extra.*size mismatch for a\.weight"
    with pytest.raises(RuntimeError, match=torch_says):
        TorchTwoLayers().load_state_dict({k: torch.zeros(s) for k, s in shapes.items()})
    model = TwoLayers()
    before = model.b.weight.numpy().copy()
    with pytest.raises(RuntimeError, match=r"Missing key\(s\) \(1\): b\.bias\. Unexpected key\(s\) \(1\): extra\. "
                                           r"Shape mismatch for 'a\.weight': the model has shape \(2, 3\) but the "
                                           r"state dict has shape \(3, 3\)") as caught:
        load_state_dict(model, {k: Tensor.zeros(*s) for k, s in shapes.items()})
    assert isinstance(caught.value, StateDictError) and isinstance(caught.value, ValueError)
    np.testing.assert_array_equal(model.b.weight.numpy(), before)  # nothing was loaded


def test_load_state_dict_not_strict_still_refuses_a_shape_mismatch_as_torch() -> None:
    shapes = {"a.weight": (3, 3), "b.weight": (2, 2)}
    with pytest.raises(RuntimeError, match=r"size mismatch for a\.weight"):
        TorchTwoLayers().load_state_dict({k: torch.zeros(s) for k, s in shapes.items()}, strict=False)
    with pytest.raises(StateDictError, match=r"Shape mismatch for 'a\.weight'") as caught:
        load_state_dict(TwoLayers(), {k: Tensor.zeros(*s) for k, s in shapes.items()}, strict=False)
    assert "Missing" not in str(caught.value) and "strict=False" not in str(caught.value)


def test_assign_takes_a_numpy_array_or_a_list_in_the_tensor_s_dtype_as_tinygrad() -> None:
    """tinygrad's `assign(x)` makes `Tensor(x, device=self.device, dtype=self.dtype)` of anything that is not a
    Tensor; NumPy's `a[...] = x` casts the same way."""
    t = Tensor.zeros(2, 3).contiguous().realize()
    values = RNG.standard_normal((2, 3))  # float64, into float32
    assert t.assign(values) is t and t.dtype is dtypes.float32
    want = np.zeros((2, 3), np.float32)
    want[...] = values
    np.testing.assert_array_equal(t.numpy(), want)
    counts = Tensor.zeros(2, 3, dtype=dtypes.int32).contiguous().realize()
    counts.assign([[1, 2, 3]])  # broadcast, as a Tensor value is
    np.testing.assert_array_equal(counts.numpy(), np.broadcast_to(np.array([[1, 2, 3]], np.int32), (2, 3)))

"""Storage methods (`data`, `clone`, `replace`, `to_`, `from_blob`) against NumPy/PyTorch, and tinygrad's keyed
`random_bits` stream against a reference built from the IR's scalar Threefry."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest
import torch
from frontend_cases import array
from torch_compare import compare

from plygrad.frontend import Tensor, dtypes, no_grad
from plygrad.ir import DTypeError, ShapeError
from plygrad.ir.scalar import threefry2x32

RNG = np.random.default_rng(0)


# ---- data ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "int64", "uint8", "uint32", "uint64", "bool"])
@pytest.mark.parametrize("shape", [(), (4,), (2, 3), (2, 0, 3)])
def test_data_is_a_memoryview_like_numpy(dtype: str, shape: tuple[int, ...]) -> None:
    a = array(RNG, shape, dtype, low=0 if dtype.startswith("u") else -3)
    view = Tensor(a).data()
    assert isinstance(view, memoryview)
    assert view.itemsize == a.itemsize
    if a.size:
        assert view.shape == shape
        np.testing.assert_array_equal(np.asarray(view), a)
    else:
        assert view.nbytes == 0 and view.tolist() == []


def test_data_of_a_lazy_view_realizes_it() -> None:
    t = Tensor.arange(12).reshape(3, 4).T[1:] * 2
    np.testing.assert_array_equal(np.asarray(t.data()), (np.arange(12).reshape(3, 4).T[1:] * 2).astype(np.int32))


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_data_of_dtypes_memoryview_cannot_hold_says_what_to_do(dtype: Any) -> None:
    with pytest.raises(DTypeError, match=r"use \.float\(\)\.data\(\)"):
        Tensor([1.0, 2.0], dtype=dtype).data()


# ---- clone, replace, to_ -------------------------------------------------------------------------------------------
def test_clone_gets_its_own_memory() -> None:
    t = Tensor([1.0, 2.0, 3.0]).realize()
    c = t.clone().realize()
    t.assign(Tensor([7.0, 8.0, 9.0])).realize()
    np.testing.assert_array_equal(c.numpy(), [1.0, 2.0, 3.0])
    c.assign(Tensor([0.0, 0.0, 0.0])).realize()
    np.testing.assert_array_equal(t.numpy(), [7.0, 8.0, 9.0])


def test_clone_is_differentiable_like_torch() -> None:
    compare(lambda x: x.clone() * x, lambda x: x.clone() * x, RNG.standard_normal((2, 3)).astype(np.float32))


def test_clone_copies_grad_like_tinygrad() -> None:
    t = Tensor([1.0, 2.0], requires_grad=True)
    (t * 3).sum().backward()
    c = t.clone()
    assert c.grad is not None and c.grad is not t.grad
    np.testing.assert_array_equal(c.grad.numpy(), [3.0, 3.0])


def test_replace_takes_the_other_tensor_dtype_and_values() -> None:
    t = Tensor([1.0, 2.0])
    same = t.replace(Tensor([5, 6]))
    assert same is t and t.dtype == dtypes.int32
    np.testing.assert_array_equal(t.numpy(), [5, 6])
    with pytest.raises(ShapeError, match="the shapes must match"):
        t.replace(Tensor([1, 2, 3]))


def test_to_moves_in_place_with_grad() -> None:
    t = Tensor([1.0, 2.0], requires_grad=True)
    (t * t).sum().backward()
    with no_grad():
        same = t.to_(t.device)
    assert same is t and t.grad is not None
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(t.grad.numpy(), [2.0, 4.0])


# ---- from_blob -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int64, dtypes.uint8, dtypes.float64])
def test_from_blob_copies_the_memory_at_the_address(dtype: Any) -> None:
    a = array(RNG, (3, 4), dtype.numpy_name, low=0)
    t = Tensor.from_blob(a.ctypes.data, (3, 4), dtype=dtype)
    assert t.shape == (3, 4) and t.dtype == dtype
    expected = a.copy()
    a[...] = 0  # copy semantics: later writes to the memory are not seen
    np.testing.assert_array_equal(t.numpy(), expected)


def test_from_blob_takes_ctypes_pointers_and_torch_memory() -> None:
    buf = (ctypes.c_float * 6)(*range(6))
    t = Tensor.from_blob(ctypes.cast(buf, ctypes.c_void_p), (2, 3))
    np.testing.assert_array_equal(t.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    src = torch.arange(5, dtype=torch.int32)
    np.testing.assert_array_equal(Tensor.from_blob(src.data_ptr(), (5,), dtype=dtypes.int32).numpy(), src.numpy())


def test_from_blob_errors() -> None:
    with pytest.raises(ValueError, match="null pointer"):
        Tensor.from_blob(0, (2,))
    with pytest.raises(ShapeError, match="ints >= 0"):
        Tensor.from_blob(1, (-1,))
    assert Tensor.from_blob(0, (0, 3)).numpy().shape == (0, 3)


# ---- random_bits ---------------------------------------------------------------------------------------------------
def _reference_bits(key: tuple[int, int], counter: tuple[int, int], num: int) -> np.ndarray[Any, Any]:
    """The keyed stream in plain Python over the IR's scalar threefry2x32 (one chunk)."""
    def words(k: tuple[int, int], pairs: list[tuple[int, int]]) -> list[int]:
        hashed = [threefry2x32((hi << 32) | lo, (k[1] << 32) | k[0]) for lo, hi in pairs]
        return [h & 0xFFFFFFFF for h in hashed] + [h >> 32 for h in hashed]

    chunk_key = words(key, [counter])
    half = -(-num // 2)
    out = words((chunk_key[0], chunk_key[1]), [(i, i + half) for i in range(half)])[:num]
    return np.array(out, np.uint32)


@pytest.mark.parametrize(("key", "counter", "num"), [((1, 2), (0, 0), 5), ((7, 9), (0xFFFFFFFF, 3), 6),
                                                     ((0, 0), (5, 0), 1), ((3, 4), (1, 1), 0)])
def test_random_bits_match_the_reference_stream(key: tuple[int, int], counter: tuple[int, int], num: int) -> None:
    got = Tensor.random_bits(Tensor(list(key), dtype=dtypes.uint32), Tensor(list(counter), dtype=dtypes.uint32), num)
    assert got.dtype == dtypes.uint32 and got.shape == (num,)
    np.testing.assert_array_equal(got.numpy(), _reference_bits(key, counter, num))


def test_random_bits_are_tinygrads() -> None:
    # produced by tinygrad 0.14's Tensor.random_bits for the same key, counter and num
    got = Tensor.random_bits(Tensor([7, 9], dtype=dtypes.uint32), Tensor([0xFFFFFFFF, 3], dtype=dtypes.uint32), 6)
    np.testing.assert_array_equal(got.numpy(), [4067927856, 260592564, 1511652555, 2073645607, 2947472927,
                                                2150655100])


def test_random_bits_errors() -> None:
    k = Tensor([1, 2], dtype=dtypes.uint32)
    with pytest.raises(ShapeError, match=r"counter must have shape \(2,\)"):
        Tensor.random_bits(k, Tensor([1, 2, 3], dtype=dtypes.uint32), 4)
    with pytest.raises(DTypeError, match="key must hold integers"):
        Tensor.random_bits(Tensor([1.0, 2.0]), k, 4)
    with pytest.raises(ValueError, match="num must be an int >= 0"):
        Tensor.random_bits(k, k, -1)

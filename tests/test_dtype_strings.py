"""dtype names wherever a dtype is taken, shape arguments checked at the call, and fp8 tensors end to end on the CPU
backend (issues #12 and #13). Results are compared with PyTorch (names, casts) and ml_dtypes (fp8 values).

Issue #12 found `Tensor([1, 2]).cast("float32")` failing deep in the graph with a TypeError about comparing a
builtin to an int, `Tensor([1, 2], dtype="float16")` with an AttributeError on `str`, and `Tensor.zeros(2.5)` with
"'float' object is not iterable"; each now works or fails at the call, naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

from plygrad.frontend import Tensor, dtypes
from plygrad.ir import DTypeError, DTypeNameError, ShapeError
from plygrad.ir.dtype import DType

NAMES = ["float16", "half", "float32", "float", "double", "bfloat16", "int8", "uint8", "short", "int", "int32",
         "long", "int64", "bool", "Float32", "uint", "ushort"]


def torch_dtype(name: str) -> torch.dtype:
    spelled = {"uint": "uint32", "ushort": "uint16"}.get(name.lower(), name.lower())
    found = getattr(torch, spelled)
    assert isinstance(found, torch.dtype)
    return found


def same_as_torch(got: Tensor, want: torch.Tensor) -> None:
    assert got.dtype.itemsize == want.element_size(), (got.dtype, want.dtype)
    assert got.dtype.is_float == want.dtype.is_floating_point, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got.numpy().astype(np.float64), want.to(torch.float64).numpy())


@pytest.mark.parametrize("name", NAMES)
def test_tensor_from_a_list_with_a_dtype_name(name: str) -> None:
    same_as_torch(Tensor([1, 2, 3], dtype=name), torch.tensor([1, 2, 3], dtype=torch_dtype(name)))


@pytest.mark.parametrize("name", NAMES)
def test_cast_to_a_dtype_name(name: str) -> None:
    values = [1.7, -2.2, 300.0, 0.0]
    same_as_torch(Tensor(values).cast(name), torch.tensor(values).to(torch_dtype(name)))


@pytest.mark.parametrize("name", ["float16", "int32", "bool", "float64"])
@pytest.mark.parametrize("make", [
    lambda d: (Tensor.zeros(2, 3, dtype=d), torch.zeros(2, 3, dtype=torch_dtype(d))),
    lambda d: (Tensor.ones(4, dtype=d), torch.ones(4, dtype=torch_dtype(d))),
    lambda d: (Tensor.full((2, 2), 1, dtype=d), torch.full((2, 2), 1, dtype=torch_dtype(d))),
    lambda d: (Tensor.arange(5, dtype=d), torch.arange(5).to(torch_dtype(d))),
    lambda d: (Tensor.ones(3).ones_like(dtype=d), torch.ones(3, dtype=torch_dtype(d))),
    lambda d: (Tensor.eye(3, dtype=d), torch.eye(3, dtype=torch_dtype(d))),
    lambda d: (Tensor([1.5, 2.5]).sum(dtype=d), torch.tensor([1.5, 2.5]).sum(dtype=torch_dtype(d))),
], ids=["zeros", "ones", "full", "arange", "ones_like", "eye", "sum"])
def test_creation_and_reductions_take_dtype_names(name: str,
                                                  make: Callable[[str], tuple[Tensor, torch.Tensor]]) -> None:
    got, want = make(name)
    same_as_torch(got, want)


def test_empty_rand_and_bitcast_take_dtype_names() -> None:
    assert Tensor.empty(3, dtype="int16").dtype is dtypes.int16
    assert Tensor.rand(3, dtype="half").dtype is dtypes.float16
    assert Tensor.randn(2, dtype="float64").dtype is dtypes.float64
    assert Tensor.randint(4, dtype="int64").dtype is dtypes.int64
    assert Tensor([1.0]).bitcast("int32").item() == np.float32(1.0).view(np.int32)


@pytest.mark.parametrize("call", [
    lambda: Tensor([1, 2], dtype="float33"), lambda: Tensor([1, 2]).cast("complex64"),
    lambda: Tensor.zeros(2, dtype="floot32"), lambda: Tensor.arange(3, dtype="int3"),
    lambda: Tensor.rand(2, dtype="hlaf"), lambda: Tensor([1.0]).sum(dtype="f32"),
], ids=["init", "cast", "zeros", "arange", "rand", "sum"])
def test_an_unknown_dtype_name_fails_at_the_call_listing_the_names(call: Callable[[], Any]) -> None:
    with pytest.raises(DTypeNameError, match=r"unknown dtype name .*float16.*int32"):
        call()


@pytest.mark.parametrize(("call", "bad"), [
    (lambda: Tensor.zeros(2.5), "2.5"), (lambda: Tensor.ones(2, 3.0), "3.0"),  # type: ignore[arg-type]
    (lambda: Tensor.empty((2, -1)), "-1"), (lambda: Tensor.rand("3"), "'3'"),  # type: ignore[arg-type]
    (lambda: Tensor.full(1.5, 0), "1.5"), (lambda: Tensor.randn(True), "True"),  # type: ignore[arg-type]
], ids=["zeros_float", "ones_second", "empty_negative", "rand_str", "full_float", "randn_bool"])
def test_a_bad_shape_argument_fails_at_the_call_naming_it(call: Callable[[], Any], bad: str) -> None:
    with pytest.raises(ShapeError, match=bad):
        call()


def test_numpy_integer_sizes_are_sizes() -> None:
    assert Tensor.zeros(np.int64(2), np.int32(3)).shape == (2, 3)  # type: ignore[arg-type]


# ---- fp8 end to end on the CPU backend -------------------------------------------------------------------------------
FP8 = [(dtypes.fp8e4m3, ml_dtypes.float8_e4m3fn), (dtypes.fp8e5m2, ml_dtypes.float8_e5m2),
       (dtypes.fp8e4m3fnuz, ml_dtypes.float8_e4m3fnuz), (dtypes.fp8e5m2fnuz, ml_dtypes.float8_e5m2fnuz)]
VALUES = np.array([0.0, 1.0, -2.5, 0.3, 17.0, -100.0, 1e-3, 3e-6, 200.0, -0.0, 1000.0], dtype=np.float32)


def as_fp8(values: np.ndarray[Any, Any], ml: Any) -> np.ndarray[Any, Any]:
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(ml).astype(np.float32)


def same_values(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)  # NaN where NaN; -0.0 == 0.0 is checked by the signs below
    assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))


@pytest.mark.parametrize(("dt", "ml"), FP8, ids=[str(d) for d, _ in FP8])
def test_fp8_tensor_from_an_ml_dtypes_array_keeps_its_bytes(dt: DType, ml: Any) -> None:
    array = VALUES.astype(ml)
    t = Tensor(array)
    assert t.dtype is dt and t.dtype.itemsize == 1
    same_values(t.numpy(), array.astype(np.float32))
    assert t.bitcast(dtypes.uint8).numpy().tobytes() == array.tobytes()


@pytest.mark.parametrize(("dt", "ml"), FP8, ids=[str(d) for d, _ in FP8])
def test_fp8_casts_round_as_ml_dtypes(dt: DType, ml: Any) -> None:
    same_values(Tensor(VALUES).cast(dt).numpy(), as_fp8(VALUES, ml))
    same_values(Tensor(VALUES, dtype=dt.name).numpy(), as_fp8(VALUES, ml))
    same_values(Tensor(VALUES.astype(np.float64)).cast(dt).cast(dtypes.float32).numpy(), as_fp8(VALUES, ml))


@pytest.mark.parametrize(("dt", "ml"), FP8, ids=[str(d) for d, _ in FP8])
def test_fp8_arithmetic_computes_in_float32_and_rounds_back(dt: DType, ml: Any) -> None:
    a, b = as_fp8(VALUES, ml), as_fp8(VALUES[::-1].copy(), ml)
    x, y = Tensor(VALUES.astype(ml)), Tensor(VALUES[::-1].astype(ml))
    with np.errstate(all="ignore"):
        for got, want in [(x + y, a + b), (x * y, a * b), (x - y, a - b), (x * 1.5, a * np.float32(1.5)),
                          (x.maximum(y), np.maximum(a, b))]:
            assert got.dtype is dt
            same_values(got.numpy(), as_fp8(want, ml))
        total = x.sum()
        assert total.dtype is dt
        same_values(total.numpy(), as_fp8(np.array(a.sum(dtype=np.float32)), ml))


def test_fp8_dtype_names_and_promotion_in_the_frontend() -> None:
    x = Tensor([1.0, 2.0], dtype="fp8e4m3")
    assert x.dtype is dtypes.fp8e4m3
    assert Tensor([1.0], dtype="float8_e5m2").dtype is dtypes.fp8e5m2
    assert (x + Tensor([1, 2])).dtype is dtypes.fp8e4m3  # an int tensor does not widen an fp8 one (tinygrad)
    assert (x + Tensor([1.0], dtype="fp8e5m2")).dtype is dtypes.float16
    assert (x + Tensor([1.0], dtype="half")).dtype is dtypes.float16


def test_rand_of_a_non_float_name_is_a_dtype_error() -> None:
    with pytest.raises(DTypeError, match="int32"):
        Tensor.rand(2, dtype="int32")

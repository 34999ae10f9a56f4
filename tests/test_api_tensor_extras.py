"""The tinygrad/PyTorch Tensor methods of plygrad.frontend.compat against PyTorch (values and gradients) or NumPy:
cast shortcuts, properties, rounding division, fmod, logcumsumexp, normalize, pad_to/shrink_to, unpooling, sized
masked_select, tensor clamp bounds, 0-d matmul errors and the small helpers (sequential, const_like)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from frontend_cases import array, shapes
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_compare import compare

from plygrad.frontend import Tensor, dtypes
from plygrad.ir import DTypeError, ShapeError

FEW = settings(max_examples=4, deadline=None)
RNG = np.random.default_rng(0)

CASTS = {"float": torch.float32, "half": torch.float16, "double": torch.float64, "bfloat16": torch.bfloat16,
         "int": torch.int32, "long": torch.int64, "short": torch.int16, "bool": torch.bool}


# ---- cast shortcuts and properties -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASTS))
def test_cast_shortcuts_match_torch(name: str) -> None:
    a = np.array([-2.75, -1.0, -0.5, 0.0, 0.5, 1.5, 3.25], np.float32)
    got = getattr(Tensor(a), name)()
    want = getattr(torch.from_numpy(a), name)()
    assert got.dtype.itemsize == want.element_size()
    np.testing.assert_array_equal(got.numpy().astype(np.float64), want.to(torch.float64).numpy())


def test_cast_shortcuts_keep_gradients() -> None:
    compare(lambda x: x.double().float(), lambda x: x.double().float(), RNG.standard_normal(5).astype(np.float32))


@pytest.mark.parametrize("dtype", ["float32", "int64", "int16", "bool", "float64", "uint8"])
def test_properties_match_torch(dtype: str) -> None:
    a = array(RNG, (2, 3, 4), dtype)
    t, want = Tensor(a), torch.from_numpy(a)
    assert t.size() == tuple(want.size())
    assert [t.size(d) for d in (0, 1, 2, -1)] == [want.size(d) for d in (0, 1, 2, -1)]
    assert t.element_size() == want.element_size()
    assert t.nbytes() == want.nbytes
    assert t.is_floating_point() == want.is_floating_point()


def test_size_of_a_missing_axis_raises() -> None:
    with pytest.raises(ShapeError, match="size: axis 2 is out of range"):
        Tensor.ones(2, 3).size(2)
    with pytest.raises(ShapeError, match="0-d tensor has no axes"):
        Tensor(1.0).size(0)
    assert Tensor(1.0).size() == ()


# ---- division ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_rounding_mode_floats_match_torch(mode: str | None) -> None:
    a = RNG.uniform(-6, 6, (3, 4)).astype(np.float32)
    b = RNG.choice([-2.5, -1.5, -0.75, 0.5, 1.25, 3.0], (3, 4)).astype(np.float32)
    compare(lambda x, y: x.div(y, rounding_mode=mode), lambda x, y: torch.div(x, y, rounding_mode=mode), a, b)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "int8"])
def test_div_rounding_mode_integers_match_torch(mode: str | None, dtype: str) -> None:
    a = np.arange(-9, 10, dtype=dtype)
    b = np.array([-4, -3, -2, 2, 3, 4], dtype)[np.arange(19) % 6]
    compare(lambda x, y: x.div(y, rounding_mode=mode), lambda x, y: torch.div(x, y, rounding_mode=mode), a, b)


def test_div_rounding_mode_with_a_scalar_and_reversed() -> None:
    a = np.array([-7.0, -2.5, 2.5, 7.0], np.float32)
    np.testing.assert_array_equal(Tensor(a).div(2, rounding_mode="trunc").numpy(), np.trunc(a / 2))
    np.testing.assert_array_equal(Tensor(a).div(9, reverse=True, rounding_mode="floor").numpy(), np.floor(9 / a))


def test_div_rejects_an_unknown_rounding_mode() -> None:
    with pytest.raises(ValueError, match="rounding_mode must be None, 'trunc' or 'floor', got 'round'"):
        Tensor([1.0]).div(2, rounding_mode="round")  # type: ignore[arg-type]


def test_fmod_floats_match_torch() -> None:
    a = RNG.uniform(-8, 8, (4, 5)).astype(np.float32)
    b = RNG.choice([-3.0, -1.5, 0.75, 2.0, 2.5], (1, 5)).astype(np.float32)
    compare(lambda x, y: x.fmod(y), torch.fmod, a, b)
    compare(lambda x: x.fmod(1.5), lambda x: torch.fmod(x, 1.5), a)


@pytest.mark.parametrize("dtype", ["int32", "int64", "int16"])
def test_fmod_integers_match_torch(dtype: str) -> None:
    a, b = np.array([-4, 7, 5, 4, -7, 8], dtype), np.array([2, -3, 8, -2, 3, 5], dtype)
    compare(lambda x, y: x.fmod(y), torch.fmod, a, b)


# ---- reductions and normalization --------------------------------------------------------------------------------
@given(shapes(1, 3, nonempty=True), st.data())
@FEW
def test_logcumsumexp_matches_torch(shape: tuple[int, ...], data: st.DataObject) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    compare(lambda x: x.logcumsumexp(axis), lambda x: torch.logcumsumexp(x, axis), array(RNG, shape, low=-5, high=5))


def test_logcumsumexp_keeps_small_values_beside_large_ones() -> None:
    a = np.array([-200.0, -1.0, 100.0, 0.0, 300.0], np.float32)
    compare(lambda x: x.logcumsumexp(0), lambda x: torch.logcumsumexp(x, 0), a)


def test_logcumsumexp_of_integers_and_0d() -> None:
    a = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    np.testing.assert_allclose(Tensor(a).logcumsumexp(1).numpy(),
                               torch.logcumsumexp(torch.from_numpy(a).float(), 1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(Tensor(2.5).logcumsumexp().numpy(), 2.5)


@pytest.mark.parametrize(("p", "dim"), [(2.0, 1), (1.0, 0), (3.0, -1), (math.inf, 1), (0.5, 1)])
def test_normalize_matches_torch(p: float, dim: int) -> None:
    a = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    compare(lambda x: x.normalize(p, dim), lambda x: F.normalize(x, p, dim), a, atol=1e-5, grad_atol=1e-4)


def test_normalize_of_zero_rows_uses_eps() -> None:
    a = np.array([[0.0, 0.0], [3.0, 4.0]], np.float32)
    compare(lambda x: x.normalize(dim=1), lambda x: F.normalize(x, dim=1), a)


# ---- movement ----------------------------------------------------------------------------------------------------
def test_pad_to_and_shrink_to_match_numpy() -> None:
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(Tensor(a).pad_to(4, 5).numpy(), np.pad(a, ((0, 2), (0, 2))))
    np.testing.assert_array_equal(Tensor(a).pad_to((None, 6), value=-1.0).numpy(),
                                  np.pad(a, ((0, 0), (0, 3)), constant_values=-1.0))
    np.testing.assert_array_equal(Tensor(a).shrink_to(1, None).numpy(), a[:1, :])
    np.testing.assert_array_equal(Tensor(a).shrink_to((2, 2)).numpy(), a[:2, :2])
    t = Tensor(a)
    assert t.pad_to(t.shape) is t


def test_pad_to_gradient_matches_torch() -> None:
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    compare(lambda x: x.pad_to(3, 5).shrink_to(3, 4), lambda x: F.pad(x, (0, 2, 0, 1))[:3, :4], a)


@pytest.mark.parametrize(("op", "shape", "message"), [
    ("pad_to", (1, 3), "smaller than the tensor's"),
    ("pad_to", (3,), "one size"),
    ("shrink_to", (3, 3), "outside"),
])
def test_pad_to_and_shrink_to_errors(op: str, shape: tuple[int, ...], message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        getattr(Tensor.ones(2, 3), op)(shape)


# ---- pooling -----------------------------------------------------------------------------------------------------
POOLS: list[dict[str, Any]] = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": (2, 3), "stride": (2, 1)},
    {"kernel_size": 2, "stride": 2, "dilation": 2},
]


@pytest.mark.parametrize("kw", POOLS)
def test_max_pool2d_indices_match_torch(kw: dict[str, Any]) -> None:
    a = RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)
    compare(lambda x: x.max_pool2d(**kw, return_indices=True), lambda x: F.max_pool2d(x, **kw, return_indices=True),
            a)


@pytest.mark.parametrize(("kw", "size"), [(POOLS[0], 6), (POOLS[1], 7)])
def test_max_unpool2d_matches_torch(kw: dict[str, Any], size: int) -> None:
    # sizes where torch's default output size holds every index (torch rejects the others)
    a = RNG.standard_normal((2, 3, size, size)).astype(np.float32)
    torch_kw = {k: v for k, v in kw.items() if k != "dilation"}
    values, indices = F.max_pool2d(torch.from_numpy(a), **torch_kw, return_indices=True)
    compare(lambda v, i: v.max_unpool2d(i, **kw), lambda v, i: F.max_unpool2d(v, i, **torch_kw),
            values.numpy(), indices.numpy())


def test_max_unpool2d_inverts_our_max_pool2d_with_output_size() -> None:
    a = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    values, indices = Tensor(a).max_pool2d(2, return_indices=True)
    got = values.max_unpool2d(indices, 2, output_size=(1, 2, 5, 5)).numpy()
    tv, ti = F.max_pool2d(torch.from_numpy(a), 2, return_indices=True)
    np.testing.assert_array_equal(got, F.max_unpool2d(tv, ti, (2, 2), output_size=(5, 5)).numpy())


def test_max_unpool2d_needs_matching_indices() -> None:
    with pytest.raises(ShapeError, match="pass the indices max_pool2d returned"):
        Tensor.ones(1, 1, 2, 2).max_unpool2d(Tensor.ones(1, 1, 3, 3, dtype=dtypes.int64))


# ---- selection ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 3, 5, 9])
def test_masked_select_with_size_pads_or_cuts(size: int) -> None:
    a = RNG.standard_normal((3, 3)).astype(np.float32)
    mask = RNG.integers(0, 2, (3, 3)).astype(bool)
    mask[0, 0], mask[1, 1] = True, False
    picked = a[mask]
    want = np.concatenate([picked, np.full(max(size - picked.size, 0), -1.0, np.float32)])[:size]
    np.testing.assert_array_equal(Tensor(a).masked_select(Tensor(mask), size=size, fill_value=-1.0).numpy(), want)


def test_masked_select_with_size_broadcasts_the_mask_and_keeps_gradients() -> None:
    a = RNG.standard_normal((2, 4)).astype(np.float32)
    mask = np.array([True, False, True, True])

    def torch_fn(x: torch.Tensor) -> torch.Tensor:
        return F.pad(torch.masked_select(x, torch.from_numpy(mask)), (0, 2))

    compare(lambda x: x.masked_select(Tensor(mask), size=8), torch_fn, a)


def test_masked_select_without_size_is_unchanged() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    mask = a % 2 == 0
    np.testing.assert_array_equal(Tensor(a).masked_select(Tensor(mask)).numpy(), a[mask])


def test_masked_select_errors() -> None:
    with pytest.raises(DTypeError, match="must be a bool tensor"):
        Tensor.ones(3).masked_select(Tensor([1, 0, 1]), size=2)
    with pytest.raises(ValueError, match="size must be an int >= 0"):
        Tensor.ones(3).masked_select(Tensor([True, False, True]), size=-1)


# ---- clamp with tensor bounds ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("lo_shape", "hi_shape"), [((3, 4), (3, 4)), ((4,), (3, 1)), ((1, 4), None), (None, (4,))])
def test_clamp_with_tensor_bounds_matches_torch(lo_shape: tuple[int, ...] | None,
                                                hi_shape: tuple[int, ...] | None) -> None:
    x = RNG.uniform(-3, 3, (3, 4)).astype(np.float32)
    lo = None if lo_shape is None else RNG.uniform(-2, 0, lo_shape).astype(np.float32)
    hi = None if hi_shape is None else RNG.uniform(0.1, 2, hi_shape).astype(np.float32)
    inputs = [a for a in (x, lo, hi) if a is not None]

    def call(fn: Any, args: tuple[Any, ...], clip: bool) -> Any:
        it = iter(args[1:])
        low = next(it) if lo is not None else None
        high = next(it) if hi is not None else None
        if clip:
            return fn(args[0], low, high)
        return fn(args[0], min=low, max=high)

    compare(lambda *t: call(Tensor.clamp, t, True), lambda *t: call(torch.clamp, t, False), *inputs)
    compare(lambda *t: call(Tensor.clip, t, True), lambda *t: call(torch.clip, t, False), *inputs)


def test_clamp_with_crossed_tensor_bounds_takes_max_like_torch() -> None:
    x, lo, hi = (np.array([-1.0, 0.5, 2.0], np.float32), np.array([1.0, 1.0, 1.0], np.float32),
                 np.array([0.0, 0.0, 0.0], np.float32))
    compare(lambda a, b, c: a.clamp(b, c), torch.clamp, x, lo, hi)


def test_clamp_gradient_at_the_bounds_goes_to_the_input_like_torch() -> None:
    x = np.array([-1.0, 0.0, 1.0, 2.0, 3.0], np.float32)
    lo, hi = np.zeros(5, np.float32), np.full(5, 2.0, np.float32)
    compare(lambda a, b, c: a.clamp(b, c), torch.clamp, x, lo, hi)


# ---- matmul of 0-d operands ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("a", "b"), [((), (3,)), ((3,), ()), ((), ())])
def test_matmul_of_0d_operands_raises_like_torch(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    with pytest.raises(RuntimeError, match="both arguments to matmul need to be at least 1D"):
        torch.ones(a) @ torch.ones(b)
    ops: list[Callable[[Tensor, Tensor], Tensor]] = [lambda x, y: x @ y, Tensor.matmul, Tensor.dot]
    for op in ops:
        with pytest.raises(ShapeError, match="both arguments to matmul need to be at least 1D"):
            op(Tensor.ones(*a), Tensor.ones(*b))


# ---- small helpers -----------------------------------------------------------------------------------------------
def test_sequential_applies_functions_in_order() -> None:
    a = RNG.standard_normal(4).astype(np.float32)
    compare(lambda x: x.sequential([lambda t: t * 2, lambda t: t + 1, Tensor.relu]),
            lambda x: torch.relu(x * 2 + 1), a)
    t = Tensor(a)
    assert t.sequential([]) is t


@pytest.mark.parametrize(("value", "dtype"), [(3, None), (1.5, dtypes.float16), (True, dtypes.bool)])
def test_const_like_has_the_shape_and_dtype(value: Any, dtype: Any) -> None:
    t = Tensor.ones(2, 3, dtype=dtypes.int32)
    c = t.const_like(value, dtype)
    assert c.shape == (2, 3) and c.dtype == (dtypes.int32 if dtype is None else dtype) and c.device == t.device
    np.testing.assert_array_equal(c.numpy(), np.full((2, 3), value).astype(c.numpy().dtype))

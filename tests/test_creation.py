"""Creation against PyTorch: linspace, triu/tril, the `requires_grad=` keyword of the factories; and the random
factories (randint, uniform, normal, the weight initializers, randperm, multinomial) checked statistically."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_compare import compare

from plygrad.frontend import Tensor, dtypes
from plygrad.ir import DType, DTypeError, ShapeError


def _data(shape: tuple[int, ...], dtype: str = "float32", seed: int = 0) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-9, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# ---- deterministic factories ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("start", "stop", "steps"), [(0, 1, 5), (-3.5, 10, 7), (5, -5, 11), (2, 2, 3), (0, 1, 1),
                                                      (0, 1, 0), (-1e3, 1e3, 1000)])
def test_linspace_matches_torch(start: float, stop: float, steps: int) -> None:
    got = Tensor.linspace(start, stop, steps)
    want = torch.linspace(start, stop, steps)
    assert got.dtype is dtypes.float32 and got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6 * max(abs(start), abs(stop), 1))
    if steps > 1:  # both ends exactly, like PyTorch
        assert got.numpy()[0] == np.float32(start) and got.numpy()[-1] == np.float32(stop)


@pytest.mark.parametrize(("dtype", "torch_dtype"), [(dtypes.int32, torch.int32), (dtypes.float16, torch.float16),
                                                    (dtypes.float64, torch.float64)])
def test_linspace_dtypes(dtype: DType, torch_dtype: torch.dtype) -> None:
    got = Tensor.linspace(-2, 10, 6, dtype=dtype).numpy()
    np.testing.assert_allclose(got, torch.linspace(-2, 10, 6, dtype=torch_dtype).numpy(), rtol=1e-3)


@settings(max_examples=10, deadline=None)
@given(shape=st.lists(st.integers(0, 4), min_size=2, max_size=3).map(tuple), diagonal=st.integers(-4, 4),
       upper=st.booleans())
def test_triu_tril_match_torch(shape: tuple[int, ...], diagonal: int, upper: bool) -> None:
    name = "triu" if upper else "tril"
    compare(lambda t: getattr(t, name)(diagonal), lambda t: getattr(t, name)(diagonal), _data(shape))


@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_triu_tril_keep_the_dtype(dtype: str) -> None:
    x = _data((3, 4), "int32") if dtype == "int32" else _data((3, 4)) > 0
    compare(lambda t: t.triu(), lambda t: t.triu(), x, grad=False)
    compare(lambda t: t.tril(1), lambda t: t.tril(1), x, grad=False)


def test_factories_take_tinygrads_keywords() -> None:
    assert Tensor.full((2,), fill_value=3, dtype=dtypes.int8).numpy().tolist() == [3, 3]
    assert Tensor.zeros(2, 3, dtype=dtypes.int32).dtype is dtypes.int32
    assert Tensor.arange(1, 7, 2, dtype=dtypes.float32).numpy().tolist() == [1.0, 3.0, 5.0]
    x = Tensor(_data((2, 3)))
    assert x.full_like(2.0, dtype=dtypes.float16).dtype is dtypes.float16
    assert Tensor(np.arange(3, dtype=np.int32)).rand_like().dtype is dtypes.float32


@pytest.mark.parametrize("make", [
    lambda: Tensor.zeros(2, 3, requires_grad=True), lambda: Tensor.ones(2, requires_grad=True),
    lambda: Tensor.full((2,), 1.5, requires_grad=True), lambda: Tensor.empty(2, requires_grad=True),
    lambda: Tensor.rand(3, requires_grad=True), lambda: Tensor.randn(3, requires_grad=True),
    lambda: Tensor.eye(3, requires_grad=True), lambda: Tensor.uniform(2, 2, requires_grad=True),
    lambda: Tensor.kaiming_uniform(4, 3, requires_grad=True), lambda: Tensor.glorot_uniform(4, 3, requires_grad=True),
    lambda: Tensor.linspace(0, 1, 4, requires_grad=True), lambda: Tensor(np.ones(2, np.float32)).zeros_like(
        requires_grad=True)])
def test_requires_grad_keyword_reaches_the_result(make: Any) -> None:
    assert make().requires_grad is True
    assert Tensor.zeros(2).requires_grad is not True


# ---- random factories: distributions -------------------------------------------------------------------------------
N = 40_000  # samples per statistic: the mean of N uniform/normal draws is within a few 0.01 of its expectation


def test_randint_bounds_and_spread() -> None:
    Tensor.manual_seed(1)
    x = Tensor.randint(N, low=-3, high=5)
    assert x.dtype is dtypes.int32
    values = x.numpy()
    assert values.min() == -3 and values.max() == 4
    counts = np.bincount(values + 3, minlength=8)
    np.testing.assert_allclose(counts / N, 1 / 8, atol=0.01)
    assert Tensor.randint(2, 3, high=2, dtype=dtypes.int64).shape == (2, 3)


@pytest.mark.parametrize(("low", "high"), [(0.0, 1.0), (-2.0, 5.0)])
def test_uniform_bounds_and_moments(low: float, high: float) -> None:
    Tensor.manual_seed(2)
    x = Tensor.uniform(N, low=low, high=high).numpy()
    assert low <= x.min() and x.max() < high
    width = high - low
    assert abs(x.mean() - (low + high) / 2) < 0.02 * width
    assert abs(x.std() - width / math.sqrt(12)) < 0.02 * width


def test_normal_moments() -> None:
    Tensor.manual_seed(3)
    x = Tensor.normal(N, mean=2.0, std=0.5).numpy()
    assert abs(x.mean() - 2.0) < 0.02 and abs(x.std() - 0.5) < 0.02
    assert Tensor.normal(3, dtype=dtypes.float16).dtype is dtypes.float16


def _check_uniform(x: np.ndarray[Any, Any], bound: float) -> None:
    assert -bound <= x.min() and x.max() < bound
    assert x.max() > 0.95 * bound and x.min() < -0.95 * bound  # the whole range is used
    assert abs(x.std() - bound / math.sqrt(3)) < 0.03 * bound


@pytest.mark.parametrize("shape", [(256, 160), (64, 16, 3, 3)])
def test_initializers_follow_pytorchs_formulas(shape: tuple[int, ...]) -> None:
    Tensor.manual_seed(4)
    fan_in, fan_out = math.prod(shape[1:]), shape[0]
    gain = math.sqrt(2 / (1 + 0.01**2))
    _check_uniform(Tensor.kaiming_uniform(*shape).numpy(), gain * math.sqrt(3 / fan_in))
    _check_uniform(Tensor.kaiming_uniform(*shape, a=math.sqrt(5)).numpy(), math.sqrt(1 / fan_in))  # nn.Linear's
    _check_uniform(Tensor.glorot_uniform(*shape).numpy(), math.sqrt(6 / (fan_out + fan_in)))
    _check_uniform(Tensor.scaled_uniform(*shape).numpy(), math.prod(shape) ** -0.5)
    normal = Tensor.kaiming_normal(*shape).numpy()
    assert abs(normal.mean()) < 0.03 * gain / math.sqrt(fan_in)
    assert abs(normal.std() - gain / math.sqrt(fan_in)) < 0.03 * gain / math.sqrt(fan_in)


def test_randperm_is_a_random_permutation() -> None:
    Tensor.manual_seed(5)
    first, second = Tensor.randperm(50).numpy(), Tensor.randperm(50).numpy()
    assert sorted(first.tolist()) == list(range(50)) and sorted(second.tolist()) == list(range(50))
    assert first.tolist() != second.tolist() and first.tolist() != list(range(50))
    assert Tensor.randperm(0).shape == (0,) and Tensor.randperm(3, dtype=dtypes.int64).dtype is dtypes.int64


def test_multinomial_with_replacement_follows_the_weights() -> None:
    Tensor.manual_seed(6)
    weights = np.array([[1.0, 0.0, 3.0, 4.0], [0.0, 0.0, 1.0, 1.0]], np.float32)
    samples = Tensor(weights).multinomial(5000, replacement=True).numpy()
    assert samples.shape == (2, 5000) and samples.dtype == np.int32
    for row, w in zip(samples, weights, strict=True):
        np.testing.assert_allclose(np.bincount(row, minlength=4) / 5000, w / w.sum(), atol=0.025)


def test_multinomial_without_replacement_draws_distinct_indices() -> None:
    Tensor.manual_seed(7)
    weights = np.array([5.0, 0.0, 1.0, 2.0, 0.5], np.float32)
    draws = Tensor(np.tile(weights, (2000, 1))).multinomial(3).numpy()  # 2000 rows of the same weights
    assert draws.shape == (2000, 3)
    assert all(len(set(row)) == 3 for row in draws.tolist()) and not (draws == 1).any()
    firsts = np.bincount(draws[:, 0], minlength=5) / 2000  # the first draw is a plain weighted draw
    np.testing.assert_allclose(firsts, weights / weights.sum(), atol=0.03)
    assert Tensor(weights).multinomial(2).shape == (2,)


# ---- errors --------------------------------------------------------------------------------------------------------
BAD_CALLS: list[tuple[str, Any, type[Exception], str]] = [
    ("linspace steps", lambda: Tensor.linspace(0, 1, -1), ValueError, "linspace"),
    ("triu 1-D", lambda: Tensor(_data((3,))).triu(), ShapeError, "triu"),
    ("tril 0-D", lambda: Tensor(1.0).tril(), ShapeError, "tril"),
    ("randint range", lambda: Tensor.randint(3, low=5, high=5), ValueError, "randint"),
    ("randint dtype", lambda: Tensor.randint(3, dtype=dtypes.float32), DTypeError, "randint"),
    ("rand dtype", lambda: Tensor.rand(3, dtype=dtypes.int32), DTypeError, "rand"),
    ("randn dtype", lambda: Tensor.randn(3, dtype=dtypes.int32), DTypeError, "randn"),
    ("kaiming 1-D", lambda: Tensor.kaiming_uniform(3), ShapeError, "kaiming_uniform"),
    ("randperm negative", lambda: Tensor.randperm(-1), ValueError, "randperm"),
    ("multinomial 3-D", lambda: Tensor(_data((2, 2, 2))).multinomial(), ShapeError, "multinomial"),
    ("multinomial too many", lambda: Tensor(_data((3,))).multinomial(4), ValueError, "multinomial"),
    ("shape", lambda: Tensor.zeros(2, -1), ShapeError, "shape"),
]


@pytest.mark.parametrize(("build", "error", "name"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_arguments_raise_errors_naming_the_op(build: Any, error: type[Exception], name: str) -> None:
    with pytest.raises(error, match=name):
        build()

"""Activation functions against torch.nn.functional: values and gradients, kinks and large inputs included."""

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
from torch_compare import compare

from plygrad.frontend import Tensor, dtypes

FEW = settings(max_examples=2, deadline=None)

# name -> (plygrad function, torch function)
ACTIVATIONS: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Any], Any]]] = {
    "relu": (Tensor.relu, F.relu),
    "relu6": (Tensor.relu6, F.relu6),
    "leaky_relu": (Tensor.leaky_relu, F.leaky_relu),
    "leaky_relu_0.2": (lambda t: t.leaky_relu(0.2), lambda t: F.leaky_relu(t, 0.2)),
    "elu": (Tensor.elu, F.elu),
    "elu_0.5": (lambda t: t.elu(0.5), lambda t: F.elu(t, 0.5)),
    "celu_2": (lambda t: t.celu(2.0), lambda t: F.celu(t, 2.0)),
    "selu": (Tensor.selu, F.selu),
    "gelu": (Tensor.gelu, lambda t: F.gelu(t, approximate="tanh")),
    "gelu_none": (lambda t: t.gelu("none"), F.gelu),
    "quick_gelu": (Tensor.quick_gelu, lambda t: t * torch.sigmoid(1.702 * t)),
    "sigmoid": (Tensor.sigmoid, torch.sigmoid),
    "hardsigmoid": (Tensor.hardsigmoid, F.hardsigmoid),
    "hardswish": (Tensor.hardswish, F.hardswish),
    "hardtanh": (Tensor.hardtanh, F.hardtanh),
    "hardtanh_-2_3": (lambda t: t.hardtanh(-2, 3), lambda t: F.hardtanh(t, -2, 3)),
    "silu": (Tensor.silu, F.silu),
    "swish": (Tensor.swish, F.silu),
    "mish": (Tensor.mish, F.mish),
    "softplus": (Tensor.softplus, F.softplus),
    "softplus_2": (lambda t: t.softplus(2.0), lambda t: F.softplus(t, 2.0)),
    "softsign": (Tensor.softsign, F.softsign),
    "logsigmoid": (Tensor.logsigmoid, F.logsigmoid),
    "tanh": (Tensor.tanh, torch.tanh),
}

# the kinks (where PyTorch picks one side's slope), the points next to them, and large magnitudes
KINKS = np.array([0.0, -3.0, 3.0, 6.0, -1.0, 1.0, -2.0, 1e-3, -1e-3, 2.999, 3.001, -2.999, -3.001, 5.999, 6.001,
                  15.0, -15.0, 30.0, -30.0, 100.0, -100.0], np.float32)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@FEW
@given(shape=shapes(max_dims=3))
def test_activation_matches_torch_with_gradient(name: str, shape: tuple[int, ...]) -> None:
    ours, theirs = ACTIVATIONS[name]
    x = array(np.random.default_rng(len(name) + 7 * len(shape)), shape, low=-5, high=5)
    compare(ours, theirs, x, atol=1e-5, rtol=1e-5, grad_atol=1e-5, grad_rtol=1e-4)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_at_kinks_and_large_inputs(name: str) -> None:
    """PyTorch's one-sided slopes at the kinks, and no inf/NaN in value or gradient at +-100."""
    ours, theirs = ACTIVATIONS[name]
    compare(ours, theirs, KINKS, atol=1e-5, rtol=1e-5, grad_atol=1e-5, grad_rtol=1e-4)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_of_nan_and_infinities(name: str) -> None:
    ours, theirs = ACTIVATIONS[name]
    x = np.array([math.inf, -math.inf, math.nan], np.float32)
    if name == "gelu_none":  # PyTorch gives NaN at +inf (x * 0.5 * (1 + erf(inf)) is inf); we give inf
        x = x[1:]
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.from_numpy(x)).numpy(), err_msg=name)


@pytest.mark.parametrize("name", ["gelu", "gelu_none", "silu", "softplus", "mish", "hardswish", "elu", "sigmoid"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_forward(name: str, dtype: str) -> None:
    ours, theirs = ACTIVATIONS[name]
    x = np.random.default_rng(2).uniform(-5, 5, 40).astype(np.float32)
    got = ours(Tensor(x, dtype=getattr(dtypes, dtype)))
    assert got.dtype is getattr(dtypes, dtype)
    want = theirs(torch.from_numpy(x).to(getattr(torch, dtype))).float().numpy()
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)


def test_integer_input_becomes_float() -> None:
    x = np.arange(-4, 5, dtype=np.int32)
    got = Tensor(x).silu()
    assert got.dtype is dtypes.float32
    np.testing.assert_allclose(got.numpy(), F.silu(torch.from_numpy(x).float()).numpy(), rtol=1e-6)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmin(axis: int) -> None:
    x = array(np.random.default_rng(3), (3, 4))
    compare(lambda t: t.softmin(axis), lambda t: F.softmin(t, axis), x)


def test_gelu_rejects_unknown_approximation() -> None:
    with pytest.raises(ValueError, match="gelu"):
        Tensor(np.ones(2, np.float32)).gelu("fast")


def test_allclose_is_a_python_bool() -> None:
    a = np.array([1.0, 2.0, math.nan], np.float32)
    assert Tensor(a).allclose(Tensor(a + 1e-7), equal_nan=True) is True
    assert Tensor(a).allclose(Tensor(a)) is False  # NaN is not close to NaN by default
    assert Tensor(a[:0]).allclose(Tensor(a[:0])) is True

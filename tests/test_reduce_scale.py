"""Reductions that stay correct at scale: float32 sums past 2^24 terms are blocked, so they neither stop growing
nor drift (error like log n, not n), and float16/bfloat16 reductions accumulate in float32 and round once, as
PyTorch does. Reference: float64 NumPy, and PyTorch's own half-precision results."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from plygrad.frontend import Tensor, dtypes

HALF = {"float16": (dtypes.float16, torch.float16), "bfloat16": (dtypes.bfloat16, torch.bfloat16)}


def test_sum_of_2_to_the_25_ones_is_exact() -> None:
    # a single float32 accumulator stops at 2^24 = 16777216 (16777216 + 1 rounds back down)
    assert Tensor.ones(2**25).sum().item() == 2.0**25
    assert Tensor.ones(2**25).mean().item() == 1.0


def test_mean_and_std_of_fifty_million_random_values() -> None:
    values = np.random.default_rng(0).random(50_000_000, dtype=np.float32)
    exact = values.astype(np.float64)
    t = Tensor(values)
    assert abs(t.mean().item() - exact.mean()) < 1e-4 * exact.mean()
    assert abs(t.sum().item() - exact.sum()) < 1e-4 * exact.sum()
    assert abs(t.std().item() - exact.std(ddof=1)) < 1e-4 * exact.std(ddof=1)


def test_long_dot_product_accumulates_blocked() -> None:
    n = 2**25
    assert (Tensor.ones(1, n) @ Tensor.ones(n, 1)).item() == float(n)


@pytest.mark.parametrize(("shape", "axis"), [((3, 40_000, 5), 1), ((3, 40_000, 5), (0, 1)), ((3, 40_000, 5), None),
                                             ((70_000,), 0), ((2, 3, 5000), (0, 2))])
def test_blocked_sums_over_any_axes_match_float64(shape: tuple[int, ...], axis: Any) -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    exact = x.astype(np.float64).sum(axis=axis, keepdims=True)
    got = Tensor(x).sum(axis, keepdim=True).numpy()
    assert got.shape == exact.shape
    np.testing.assert_allclose(got, exact, rtol=0, atol=2e-6 * np.abs(x).sum())


def test_gradient_flows_through_a_blocked_sum() -> None:
    x = Tensor(np.random.default_rng(2).standard_normal((2, 30_000)).astype(np.float32), requires_grad=True)
    (x.sum(1) * Tensor([1.0, 3.0])).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), np.repeat([[1.0], [3.0]], 30_000, axis=1).astype(np.float32))


@pytest.mark.parametrize("half", sorted(HALF))
def test_half_mean_of_more_elements_than_the_half_range(half: str) -> None:
    dt, tdt = HALF[half]
    got = Tensor.ones(70_000, dtype=dt).mean().item()
    assert got == torch.ones(70_000, dtype=tdt).mean().item() == 1.0


@pytest.mark.parametrize("half", sorted(HALF))
@pytest.mark.parametrize("op", ["sum", "mean", "var", "std", "layernorm", "softmax", "log_softmax", "matmul"])
def test_half_reductions_match_torch(half: str, op: str) -> None:
    """Values of magnitude ~100 (squares ~1e4, sums of squares far past float16's 65504) along rows of 3000."""
    dt, tdt = HALF[half]
    x = (np.random.default_rng(3).standard_normal((4, 3000)) * 100).astype(np.float32)
    tx = torch.from_numpy(x).to(tdt)
    px = Tensor(tx.float().numpy()).cast(dt)
    w = np.random.default_rng(4).standard_normal((3000, 3)).astype(np.float32)
    tw = torch.from_numpy(w).to(tdt)
    pw = Tensor(tw.float().numpy()).cast(dt)
    want, got = {
        "sum": (tx.sum(1), lambda: px.sum(1)), "mean": (tx.mean(1), lambda: px.mean(1)),
        "var": (tx.var(1), lambda: px.var(1)), "std": (tx.std(1), lambda: px.std(1)),
        "layernorm": (torch.nn.functional.layer_norm(tx, (3000,)), px.layernorm),
        "softmax": (tx.softmax(1), lambda: px.softmax(1)),
        "log_softmax": (tx.log_softmax(1), lambda: px.log_softmax(1)),
        "matmul": (tx @ tw, lambda: px @ pw),
    }[op]
    result = got()
    assert result.dtype is dt
    ours = result.cast(dtypes.float32).numpy()
    theirs = want.float().numpy()
    assert np.isfinite(theirs).all() and np.isfinite(ours).all()
    ulp = 2.0**-10 if half == "float16" else 2.0**-7  # one rounding at the end: within an ulp or so of torch
    np.testing.assert_allclose(ours, theirs, rtol=2 * ulp, atol=2 * ulp * np.abs(theirs).max() * 1e-3)

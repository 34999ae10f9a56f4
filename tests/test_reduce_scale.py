"""Reductions that stay correct at scale: float32 sums past 2^24 terms are blocked, so they neither stop growing
nor drift (error like log n, not n), and float16/bfloat16 reductions accumulate in float32 and round once, as
PyTorch does. Reference: float64 NumPy, and PyTorch's own half-precision results."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.frontend import Tensor, dtypes
from plygrad.frontend.reduce import BLOCK, SPLIT_ABOVE
from plygrad.runtime import GlobalCounters

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


@settings(max_examples=12, deadline=None)
@given(n=st.integers(SPLIT_ABOVE - 3, 3 * BLOCK + SPLIT_ABOVE + 5), outputs=st.sampled_from([1, 2, 3]),
       op=st.sampled_from(["max", "min", "sum", "prod"]),
       dtype=st.sampled_from(["int32", "int8", "uint16", "float32", "bool"]), seed=st.integers(0, 2**16))
def test_long_reductions_into_few_outputs_are_staged_and_exact(n: int, outputs: int, op: str, dtype: str,
                                                              seed: int) -> None:
    """max/min/integer sums/products into few values run in stages (blocks, then a finish) and give NumPy's result:
    the last block is padded with the op's identity (-inf or the integer minimum for max, 1 for products)."""
    if op == "prod" and dtype == "float32":
        dtype = "int32"  # a float product of 20000 values over- or underflows; integers wrap, exactly
    rng = np.random.default_rng(seed)
    x = (rng.integers(-100, 100, (outputs, n)) if dtype != "bool" else rng.random((outputs, n)) < 0.999)
    x = x.astype(dtype)
    if op == "prod":
        x = np.where(rng.random(x.shape) < 0.98, np.ones_like(x), x)  # wraps, but not always to zero
    t = Tensor(x)
    result = getattr(t, op)(1)
    kwargs = {} if op in ("max", "min") else {"dtype": result.dtype.numpy_name}
    expected = getattr(np, op)(x, axis=1, **kwargs)
    got = result.numpy()
    if dtype.startswith("float"):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, expected)


def test_long_max_runs_in_stages_and_propagates_nan() -> None:
    x = np.random.default_rng(3).standard_normal(3 * BLOCK * 2 + 7).astype(np.float32)
    x[12345] = np.nan
    assert np.isnan(Tensor(x).max().item())
    x[12345] = 0.0
    x[-1] = 99.0  # in the padded last block: the padding (-inf) must not win over it
    assert Tensor(x).max().item() == 99.0 and Tensor(-x).min().item() == -99.0
    counts = []
    for size in (SPLIT_ABOVE, 3 * BLOCK * 2 + 7):
        GlobalCounters.reset()
        Tensor(x[:size]).max().realize()
        counts.append(GlobalCounters.kernel_count)
    assert counts[1] > counts[0], f"a max over more than SPLIT_ABOVE values should run in stages: {counts}"


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

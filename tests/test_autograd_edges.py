"""Gradients at the edges: shifts that must carry no gradient (the max of logsumexp/softmax, the mean and the
centring element of var/layernorm/BatchNorm), std of a constant row, and zero gradients through comparisons and
other piecewise-constant ops. Each is checked against PyTorch; accuracy cases against a float64 PyTorch reference,
beside PyTorch's own float32 error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_compare import compare

from plygrad.frontend import Tensor, nn

Array = np.ndarray[Any, Any]
Fn = Callable[..., Any]
RNG = np.random.default_rng(38)


def rel_err(got: Array, want: Array) -> float:
    """The largest error relative to the reference's largest magnitude."""
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def torch_grad(fn: Fn, x: Array, up: Array | None, dtype: torch.dtype) -> tuple[Array, Array]:
    """fn's output and the gradient of sum(fn(x) * up) (sum(fn(x)) without `up`) in torch's `dtype`."""
    tx = torch.tensor(x, dtype=dtype, requires_grad=True)
    out = fn(tx)
    (out if up is None else out * torch.tensor(up, dtype=dtype)).sum().backward()
    assert tx.grad is not None
    return out.detach().double().numpy(), tx.grad.double().numpy()


def plygrad_grad(fn: Fn, x: Array, up: Array | None) -> tuple[Array, Array]:
    t = Tensor(x, requires_grad=True)
    out = fn(t)
    (out if up is None else out * Tensor(up)).sum().backward()
    assert t.grad is not None
    return out.numpy(), t.grad.numpy()


# ---- a max shift carries no gradient: d logsumexp / dx is softmax exactly ------------------------------------------
@pytest.mark.parametrize(("pg", "tf"), [
    (lambda t: t.logsumexp(0), lambda t: torch.logsumexp(t, 0)),
    (lambda t: t.log_softmax(0), lambda t: torch.log_softmax(t, 0)),  # upstream ones: 1 - n softmax
], ids=["logsumexp", "log_softmax"])
def test_max_shift_gradient_at_the_argmax_of_2_20_elements(pg: Fn, tf: Fn) -> None:
    x = (RNG.standard_normal(2**20) * 3).astype(np.float32)
    out, grad = plygrad_grad(pg, x, None)
    want_out, want = torch_grad(tf, x, None, torch.float64)
    top = int(np.argmax(x))
    # through an undetached max the argmax element took sum(g) * (1 - sum(softmax)) more: 5-17% off
    assert abs(grad[top] - want[top]) <= 1e-4 * abs(want[top])
    np.testing.assert_allclose(grad, want, rtol=1e-4, atol=1e-6 * np.abs(want).max())
    np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-5)


SHIFTED: dict[str, tuple[Fn, Fn]] = {  # forward and backward against torch at 1024 per axis
    "softmax": (lambda t: t.softmax(-1), lambda t: t.softmax(-1)),
    "softmax axis 0": (lambda t: t.softmax(0), lambda t: t.softmax(0)),
    "log_softmax": (lambda t: t.log_softmax(-1), lambda t: t.log_softmax(-1)),
    "logsumexp": (lambda t: t.logsumexp(-1), lambda t: t.logsumexp(-1)),
    "logcumsumexp": (lambda t: t.logcumsumexp(-1), lambda t: t.logcumsumexp(-1)),
    "logsigmoid": (lambda t: t.logsigmoid(), F.logsigmoid),
    "var": (lambda t: t.var(-1), lambda t: t.var(-1)),
    "var correction 0": (lambda t: t.var(-1, correction=0), lambda t: t.var(-1, correction=0)),
    "std correction 2 axis 0": (lambda t: t.std(0, correction=2), lambda t: t.std(0, correction=2)),
    "layernorm": (lambda t: t.layernorm(), lambda t: F.layer_norm(t, (1024,))),
}


@pytest.mark.parametrize("offset", [0.0, 100.0])
@pytest.mark.parametrize("name", list(SHIFTED))
def test_shifted_reductions_match_torch_at_1024(name: str, offset: float) -> None:
    pg, tf = SHIFTED[name]
    rows = 4 if name == "std correction 2 axis 0" else 16
    cols = 128 if name == "logcumsumexp" else 1024  # a scan: 1024 columns compile for half a minute
    x = (RNG.standard_normal((rows, cols)) * 3 + offset).astype(np.float32)
    # against float64 torch: float32 torch's own logcumsumexp gradient is 4e-5 off at offset 100
    compare(pg, lambda t: tf(t.double()), x, atol=1e-5 * (1 + offset), rtol=1e-4, grad_atol=1e-5, grad_rtol=1e-3)


def test_cross_entropy_matches_torch_at_1024_classes() -> None:
    x = (RNG.standard_normal((16, 1024)) * 3 + 50).astype(np.float32)
    y = RNG.integers(0, 1024, 16)
    compare(lambda t: t.cross_entropy(Tensor(y)), lambda t: F.cross_entropy(t, torch.tensor(y)), x, rtol=1e-5,
            grad_atol=1e-7)


# ---- a mean shift: var and the normalizations as accurate as PyTorch's float32 ---------------------------------
def _check_as_accurate_as_torch(got: Array, torch32: Array, want: Array, what: str, factor: float = 4.0) -> None:
    """Within `factor` of PyTorch float32's error against float64 (or at float32's rounding, 2e-7)."""
    mine, theirs = rel_err(got, want), rel_err(torch32, want)
    assert mine <= factor * max(theirs, 2e-7), f"{what}: error {mine:.2g}, torch float32 {theirs:.2g}"


@pytest.mark.parametrize(("fn", "tf"), [
    (lambda t: t.var(-1), lambda t: t.var(-1)),
    (lambda t: t.layernorm(), lambda t: F.layer_norm(t, (1024,))),
], ids=["var", "layernorm"])
def test_centring_far_from_zero_is_as_accurate_as_torch(fn: Fn, tf: Fn) -> None:
    # rows of mean 100 and spread 1: a mean of x itself was off by ~1e-5, 20x PyTorch's layernorm error and 10x
    # its var gradient's
    x = (RNG.standard_normal((4, 1024)) + 100).astype(np.float32)
    up = RNG.standard_normal(tuple(tf(torch.tensor(x)).shape)).astype(np.float32)
    out, grad = plygrad_grad(fn, x, up)
    want_out, want = torch_grad(tf, x, up, torch.float64)
    out32, grad32 = torch_grad(tf, x, up, torch.float32)
    if out.shape == x.shape:  # var's forward is a sum of squares: its error is the sum's own
        _check_as_accurate_as_torch(out, out32, want_out, "forward")
    _check_as_accurate_as_torch(grad, grad32, want, "gradient")


def test_layernorm_with_affine_is_as_accurate_as_torch() -> None:
    d = 1024
    x = (RNG.standard_normal((4, d)) + 100).astype(np.float32)
    w, b = RNG.standard_normal(d).astype(np.float32), RNG.standard_normal(d).astype(np.float32)
    up = RNG.standard_normal((4, d)).astype(np.float32)
    ln = nn.LayerNorm(d)
    ln.weight, ln.bias = Tensor(w, requires_grad=True), Tensor(b, requires_grad=True)
    t = Tensor(x, requires_grad=True)
    out = ln(t)
    (out * Tensor(up)).sum().backward()
    assert t.grad is not None and ln.weight.grad is not None and ln.bias.grad is not None
    got = [out.numpy(), t.grad.numpy(), ln.weight.grad.numpy(), ln.bias.grad.numpy()]
    refs = []
    for dtype in (torch.float64, torch.float32):
        tx, tw, tb = (torch.tensor(a, dtype=dtype, requires_grad=True) for a in (x, w, b))
        o = F.layer_norm(tx, (d,), tw, tb)
        (o * torch.tensor(up, dtype=dtype)).sum().backward()
        refs.append([a.detach().double().numpy() for a in (o, tx.grad, tw.grad, tb.grad)])
    for what, g, want, t32 in zip(("output", "x", "weight", "bias"), got, *refs, strict=True):
        _check_as_accurate_as_torch(g, t32, want, what)


def test_batchnorm_far_from_zero_is_as_accurate_as_torch() -> None:
    x = (RNG.standard_normal((16, 4, 8, 8)) + 100).astype(np.float32)
    up = RNG.standard_normal(x.shape).astype(np.float32)
    bn = nn.BatchNorm(4)
    t = Tensor(x, requires_grad=True)
    with Tensor.train():
        out = bn(t)
    (out * Tensor(up)).sum().backward()
    assert t.grad is not None
    refs = []
    for dtype in (torch.float64, torch.float32):
        ref = torch.nn.BatchNorm2d(4).to(dtype)
        tx = torch.tensor(x, dtype=dtype, requires_grad=True)
        o = ref(tx)
        (o * torch.tensor(up, dtype=dtype)).sum().backward()
        assert tx.grad is not None
        refs.append([o.detach().double().numpy(), tx.grad.double().numpy(), ref.running_var.double().numpy()])
    for what, g, want, t32 in zip(("output", "x", "running_var"), [out.numpy(), t.grad.numpy(),
                                                                   bn.running_var.numpy()], *refs, strict=True):
        _check_as_accurate_as_torch(g, t32, want, what)


# ---- std of a constant row ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("correction", [0, 1])
def test_std_of_a_constant_row_has_gradient_zero_like_torch(correction: int) -> None:
    x = np.array([[2.0, 2.0, 2.0, 2.0], [1.0, -1.0, 3.0, 0.5]], np.float32)  # one constant row, one not
    compare(lambda t: t.std(1, correction=correction), lambda t: t.std(1, correction=correction), x)
    compare(lambda t: t.std_mean(1)[0], lambda t: torch.std_mean(t, 1)[0], x)


# ---- piecewise-constant ops: zero gradients, not an error --------------------------------------------------------
PIECEWISE: dict[str, tuple[Fn, Fn]] = {
    "==": (lambda t: (t == 1.0).float(), lambda t: (t == 1.0).float()),
    "<": (lambda t: (t < 0).float(), lambda t: (t < 0).float()),
    ">": (lambda t: (t > 0).float(), lambda t: (t > 0).float()),
    "!=": (lambda t: (t != 0).float(), lambda t: (t != 0).float()),
    "floor": (lambda t: t.floor(), torch.floor),
    "ceil": (lambda t: t.ceil(), torch.ceil),
    "round": (lambda t: t.round(), torch.round),
    "sign": (lambda t: t.sign(), torch.sign),
    "argmax": (lambda t: t.argmax().float(), lambda t: t.argmax().float()),
    "where's condition": (lambda t: (t > 0).where(1.0, 2.0), lambda t: torch.where(t > 0, 1.0, 2.0)),
}


@pytest.mark.parametrize("name", list(PIECEWISE))
def test_piecewise_constant_ops_backpropagate_zeros(name: str) -> None:
    pg, tf = PIECEWISE[name]
    x = np.array([-1.5, 0.0, 1.0, 2.5, -0.2], np.float32)
    t = Tensor(x, requires_grad=True)
    out = pg(t)
    np.testing.assert_array_equal(out.numpy(), tf(torch.tensor(x)).numpy())
    (out * 3).sum().backward()  # PyTorch raises for some (no grad_fn); tinygrad gives zeros, as here
    assert t.grad is not None
    np.testing.assert_array_equal(t.grad.numpy(), np.zeros(5, np.float32))
    assert (t > 0).requires_grad is False and (t > 0).is_leaf  # not floating point: PyTorch's answers


def test_piecewise_zero_gradient_adds_to_the_rest() -> None:
    x = np.array([-1.5, 0.5, 2.0], np.float32)
    compare(lambda t: t * t.sign() + (t > 0).where(t, 0.0), lambda t: t * t.sign() + torch.where(t > 0, t, 0.0), x)
    t = Tensor(x, requires_grad=True)
    assert t.sign().requires_grad is True  # as torch.sign's
    assert t.detach().sign().requires_grad is False


def test_clone_passes_the_gradient_through() -> None:
    compare(lambda t: t.clone() * 2, lambda t: t.clone() * 2, RNG.standard_normal((3, 4)).astype(np.float32))

"""Autograd's undecided default (issue 13): a tensor created without requires_grad has requires_grad None, and
backward() of a loss computed only from undecided tensors fills the .grad of the realized ones on its path, as
tinygrad's backward does; requires_grad=False opts out, no_grad and detach still stop everything, and a loss that
requires grad (PyTorch-style code) fills only the leaves that asked. Gradients are checked against torch.autograd."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from plygrad.frontend import Tensor, no_grad
from plygrad.frontend.nn import optim

RNG = np.random.default_rng(3)


def rand(*shape: int) -> np.ndarray[Any, Any]:
    return RNG.uniform(-2, 2, shape).astype(np.float32)


def torch_grads(fn: Any, *arrays: np.ndarray[Any, Any]) -> list[np.ndarray[Any, Any]]:
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    fn(*ts).backward()
    return [t.grad.numpy() for t in ts if t.grad is not None]


def test_the_issue_example_fills_the_grad_of_an_undecided_tensor() -> None:
    x = Tensor([1.0, -2.0])
    assert x.requires_grad is None
    (x * (x < 0)).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0])


def test_undecided_gradients_match_torch() -> None:
    a, b = rand(3, 4), rand(4)
    x, y = Tensor(a), Tensor(b)
    loss = ((x * y).exp().sum(1) + (x @ y).relu()).mean()
    assert loss.requires_grad is None
    loss.backward()
    assert x.grad is not None and y.grad is not None
    want = torch_grads(lambda tx, ty: ((tx * ty).exp().sum(1) + (tx @ ty).relu()).mean(), a, b)
    np.testing.assert_allclose(x.grad.numpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.grad.numpy(), want[1], rtol=1e-5, atol=1e-6)


def test_undecided_results_stay_undecided_and_opting_out_propagates() -> None:
    x, off = Tensor(rand(3)), Tensor(rand(3), requires_grad=False)
    assert (x * 2).requires_grad is None
    assert (x * off).requires_grad is None
    assert (off * 2).requires_grad is False
    assert (x > 0).requires_grad is False  # not floating point
    assert (Tensor(rand(3), requires_grad=True) * x).requires_grad is True


def test_requires_grad_false_opts_out() -> None:
    a, b = rand(3), rand(3)
    x, frozen = Tensor(a), Tensor(b, requires_grad=False)
    (x * frozen).sum().backward()
    assert frozen.grad is None and x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), b)


def test_a_realized_undecided_result_is_a_leaf() -> None:
    """Realizing an undecided tensor keeps no graph behind it (nothing is remembered for autograd), as tinygrad's
    realize replaces the graph by the buffer: the gradient stops there."""
    x = Tensor(rand(3))
    h = (x * 2).realize()
    (h * h).sum().backward()
    assert h.grad is not None and x.grad is None
    np.testing.assert_allclose(h.grad.numpy(), 2 * h.numpy(), rtol=1e-6)


def test_no_grad_and_detach_stop_undecided_gradients() -> None:
    a = rand(3)
    x = Tensor(a)
    with no_grad():
        z = x * 3
    assert z.requires_grad is False
    (z * x + x * x.detach()).sum().backward()  # z and x.detach() are constants here
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 3 * a + a, rtol=1e-6)


@pytest.mark.parametrize("make", [
    lambda: Tensor(2.0),  # a Python scalar: a constant
    lambda: Tensor.ones(3).sum(),  # built from constants only
    lambda: Tensor(rand(3), requires_grad=False).sum(),  # every input opted out
])
def test_backward_of_a_constant_raises(make: Any) -> None:
    with pytest.raises(RuntimeError, match="does not require grad"):
        make().backward()


def test_pytorch_style_code_fills_only_the_leaves_that_asked() -> None:
    """A loss that requires grad: the undecided input batch gets no .grad, so an optimizer step (which computes every
    live gradient reading the weights it overwrites) does not compute one."""
    w_np, x_np = rand(4, 2), rand(5, 4)
    w, x = Tensor(w_np, requires_grad=True), Tensor(x_np)
    (x @ w).tanh().sum().backward()
    assert x.grad is None and w.grad is not None
    want = torch_grads(lambda tw: (torch.from_numpy(x_np) @ tw).tanh().sum(), w_np)
    np.testing.assert_allclose(w.grad.numpy(), want[0], rtol=1e-5, atol=1e-6)


def test_an_optimizer_trains_undecided_parameters() -> None:
    """tinygrad's convention, kept: tensors handed to an optimizer without requires_grad become parameters."""
    w = Tensor(np.array([3.0, -1.0], np.float32))
    opt = optim.SGD([w], lr=0.5)
    assert w.requires_grad is True
    (w * w).sum().backward()
    opt.step()
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0], atol=1e-6)

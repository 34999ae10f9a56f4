"""A lazy tensor keeps the values it was built from when a buffer it reads is written afterwards (PyTorch's eager
semantics): `loss.backward(); opt.step(); loss.item()` gives the loss of the parameters the step started from, and a
gradient kept across the step is the gradient of those parameters. Realizing an ASSIGN computes, in the same
schedule and before the write, every live unrealized tensor that reads the buffer's old values (frontend
realization.py, `_old_value_readers`)."""

from __future__ import annotations

import numpy as np
import torch

from plygrad.frontend import Tensor
from plygrad.frontend.nn import optim


def test_a_value_built_before_an_assign_keeps_the_old_values() -> None:
    w = Tensor([1.0, 2.0]).realize()
    before = (w * 2).sum()
    w.assign(w + 10).realize()
    after = (w * 2).sum()
    assert before.item() == 6.0 and after.item() == 46.0
    np.testing.assert_array_equal(w.numpy(), [11.0, 12.0])


def test_a_graph_holding_the_assign_reads_the_written_values() -> None:
    w = Tensor([1.0, 2.0]).realize()
    written = w.assign(w + 1)
    doubled = written * 2  # built on the ASSIGN itself: it reads the new values
    w.realize()
    np.testing.assert_array_equal(doubled.numpy(), [4.0, 6.0])


def test_loss_and_gradients_read_after_a_step_match_torch() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 4)).astype(np.float32), rng.standard_normal((16, 1)).astype(np.float32)
    w0 = rng.standard_normal((4, 1)).astype(np.float32)
    w = Tensor(w0.copy(), requires_grad=True)
    opt = optim.Adam([w], lr=0.1)
    tw = torch.tensor(w0.copy(), requires_grad=True)
    topt = torch.optim.Adam([tw], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        loss = ((Tensor(x) @ w - Tensor(y)) ** 2).mean()
        loss.backward()
        grad = w.grad
        opt.step()
        topt.zero_grad()
        tloss = ((torch.tensor(x) @ tw - torch.tensor(y)) ** 2).mean()
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)  # read after the step, as torch allows
        assert grad is not None and tw.grad is not None
        np.testing.assert_allclose(grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=2e-5)
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-5)

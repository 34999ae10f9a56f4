"""Compare a plygrad op with its PyTorch twin: the forward values and, through autograd, the input gradients.

    compare(lambda x, y: x.maximum(y), torch.maximum, a, b)

`compare` builds a plygrad Tensor and a torch tensor from each NumPy input (floating inputs require grad), runs both
functions, checks the outputs (one tensor or a tuple of them) and then back-propagates the same random upstream
gradient through both and checks every floating input's gradient. A random upstream gradient (rather than `sum()`)
keeps symmetric mistakes, such as a transposed gradient, from cancelling out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from plygrad.frontend import Tensor

Array = np.ndarray[Any, Any]


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _close(got: Array, want: Array, atol: float, rtol: float, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape}, torch {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=atol, rtol=rtol,
                                   err_msg=what)


def to_torch(a: Array, requires_grad: bool = False) -> torch.Tensor:
    t = torch.from_numpy(np.array(a, copy=True, order="C"))  # np.array keeps 0-d arrays 0-d
    return t.requires_grad_(requires_grad)


def compare(pg_fn: Callable[..., Any], torch_fn: Callable[..., Any], *inputs: Array, grad: bool = True,
            atol: float = 1e-5, rtol: float = 1e-4, grad_atol: float | None = None, grad_rtol: float | None = None,
            differentiable: Sequence[bool] | None = None, seed: int = 0) -> None:
    """Check `pg_fn(*Tensors)` against `torch_fn(*torch tensors)`, forward and (if `grad`) backward.

    `differentiable[i]` says whether input i takes part in the gradient check (default: the floating inputs).
    Outputs that are not floating (indices, masks) are compared exactly and carry no gradient.
    """
    diff = [a.dtype.kind == "f" for a in inputs] if differentiable is None else list(differentiable)
    want_grad = [grad and d for d in diff]
    pg_in = [Tensor(a, requires_grad=g) if g else Tensor(a) for a, g in zip(inputs, want_grad, strict=True)]
    t_in = [to_torch(a, g) for a, g in zip(inputs, want_grad, strict=True)]
    pg_out, t_out = _as_tuple(pg_fn(*pg_in)), _as_tuple(torch_fn(*t_in))
    assert len(pg_out) == len(t_out), f"{len(pg_out)} outputs, torch {len(t_out)}"
    for i, (p, t) in enumerate(zip(pg_out, t_out, strict=True)):
        _close(p.numpy(), t.detach().numpy(), atol, rtol, f"output {i}")
    if not any(want_grad):
        return
    rng = np.random.default_rng(seed)
    pg_loss: Tensor | None = None
    t_loss: torch.Tensor | None = None
    for p, t in zip(pg_out, t_out, strict=True):
        if not t.dtype.is_floating_point or not t.requires_grad:
            continue
        w = rng.standard_normal(tuple(t.shape)).astype(np.float64)
        pg_term = (p * Tensor(w.astype(p.numpy().dtype))).sum()
        t_term = (t * torch.from_numpy(w).to(t.dtype)).sum()
        pg_loss = pg_term if pg_loss is None else pg_loss + pg_term
        t_loss = t_term if t_loss is None else t_loss + t_term
    if pg_loss is None or t_loss is None:
        return
    pg_loss.backward()
    t_loss.backward()
    g_atol = atol * 10 if grad_atol is None else grad_atol
    g_rtol = rtol * 10 if grad_rtol is None else grad_rtol
    for i, (p, t, g) in enumerate(zip(pg_in, t_in, want_grad, strict=True)):
        if not g:
            continue
        want = np.zeros(tuple(t.shape), t.detach().numpy().dtype) if t.grad is None else t.grad.numpy()
        got = np.zeros_like(want) if p.grad is None else p.grad.numpy()
        _close(got, want, g_atol, g_rtol, f"gradient of input {i}")

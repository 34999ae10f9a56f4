"""`nn.utils`: gradient clipping as `torch.nn.utils` does it, built lazily so it fits inside a TinyJit step."""

from __future__ import annotations

import math
from collections.abc import Iterable

from plygrad.frontend.tensor import Tensor

__all__ = ["clip_grad_norm_", "get_total_norm"]


def _vector_norm(t: Tensor, norm_type: float) -> Tensor:
    """The `norm_type`-norm of all of t's elements (torch.linalg.vector_norm), 0-d."""
    if norm_type == math.inf:
        return t.abs().max()
    if norm_type == 2.0:
        return t.square().sum().sqrt()
    if norm_type == 1.0:
        return t.abs().sum()
    return t.abs().pow(norm_type).sum().pow(1.0 / norm_type)


def get_total_norm(tensors: Tensor | Iterable[Tensor], norm_type: float = 2.0,
                   error_if_nonfinite: bool = False) -> Tensor:
    """The norm of the norms of `tensors` (torch.nn.utils.get_total_norm): the norm of all their elements as one
    vector, a lazy 0-d Tensor. `error_if_nonfinite` reads it back to raise on NaN or inf, which a TinyJit replay
    cannot do."""
    ts = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    if norm_type <= 0 and norm_type != -math.inf:
        raise ValueError(f"get_total_norm: norm_type must be positive (or inf), got {norm_type}")
    if not ts:
        return Tensor(0.0)
    norms = [_vector_norm(t.float() if t.dtype.itemsize < 4 else t, norm_type) for t in ts]
    total = _vector_norm(norms[0].stack(*norms[1:]), norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"get_total_norm: the total norm of order {norm_type} of {len(ts)} tensors is "
                           f"{total.item()}; pass error_if_nonfinite=False to clip anyway")
    return total


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Scale the gradients of `parameters` in place so that their total norm is at most `max_norm`, and return
    that total norm from before the scaling (torch.nn.utils.clip_grad_norm_): every `.grad` is multiplied by
    min(1, max_norm / (total + 1e-6)). Nothing is read back (unless `error_if_nonfinite`), so under TinyJit the
    clipping replays with the step; `foreach` is accepted for PyTorch's signature and changes nothing."""
    params = [p for p in ([parameters] if isinstance(parameters, Tensor) else parameters) if p.grad is not None]
    total = get_total_norm([p.grad for p in params if p.grad is not None], norm_type, error_if_nonfinite)
    if not params:
        return total
    scale = total.add(1e-6).reciprocal().mul(float(max_norm)).minimum(1.0)
    for p in params:
        # a gradient is usually a lazy graph, often a view with no memory of its own to write into, so "in place"
        # is the new graph in `.grad`; a gradient the caller realized into a buffer is written there
        assert p.grad is not None
        scaled = p.grad.mul(scale.cast(p.grad.dtype))
        if p.grad._is_realized():
            p.grad.assign(scaled)
        else:
            p.grad = scaled
    return total

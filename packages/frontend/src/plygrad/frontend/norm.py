"""Normalization: layernorm, batchnorm and normalize (an Lp norm along an axis), with PyTorch's numbers.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from plygrad.frontend import core
from plygrad.frontend.composite import composite
from plygrad.frontend.reduce import shifted_mean
from plygrad.ir import ShapeError, broadcast_shapes, dtypes

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor



@composite()
def layernorm(t: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over `axis`, with the biased variance (as F.layer_norm), no affine.

    The mean is taken of x minus a detached element of each row (reduce.shifted_mean): rows far from 0 are
    centred as accurately as PyTorch's."""
    x = core.float_input(t)
    wide = x._cast_to(dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x  # as PyTorch
    centred = wide.sub(shifted_mean(wide, wide._axes(axis, "layernorm")))
    return centred.mul(centred.square().mean(axis, keepdim=True).add(eps).rsqrt())._cast_to(x.dtype)


def batchnorm(tensor: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
              axis: int | Sequence[int] = 1) -> Tensor:
    """(x - mean) * invstd * weight + bias, the statistics given per index of `axis` (the channel axis)."""
    axes = tensor._axes(axis, "batchnorm")
    shape = tuple(n if i in axes else 1 for i, n in enumerate(tensor.shape))
    kept = tuple(tensor.shape[a] for a in axes)

    def per_channel(t: Tensor, name: str) -> Tensor:
        """Statistics of the channel shape line up with `axis`; anything else must already broadcast."""
        if t.shape == kept:
            return t.reshape(shape)
        try:
            broadcast_shapes(t.shape, tensor.shape)
        except ShapeError:
            raise ShapeError(f"batchnorm: {name} of shape {t.shape} does not match the channel shape {kept} of "
                             f"axis {axis} of the input of shape {tensor.shape}") from None
        return t

    x = tensor.sub(per_channel(mean, "mean"))
    if weight is not None:
        x = x.mul(per_channel(weight, "weight"))
    x = x.mul(per_channel(invstd, "invstd"))
    return x if bias is None else x.add(per_channel(bias, "bias"))


def normalize(t: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """`F.normalize`: x / max(|x|_p, eps) along `dim` (p = inf is the largest magnitude)."""
    x = core.float_input(t)
    magnitude = x.abs()
    if p == math.inf:
        norm = magnitude.max(dim, keepdim=True)
    elif p == 1:
        norm = magnitude.sum(dim, keepdim=True)
    else:
        # a zero row has norm 0 with gradient 0 (PyTorch's subgradient), not the NaN of sqrt's slope at 0
        total = magnitude.square().sum(dim, keepdim=True) if p == 2 else magnitude.pow(p).sum(dim, keepdim=True)
        zero = total.eq(0.0)
        safe = zero.where(1.0, total)
        norm = zero.where(0.0, safe.sqrt() if p == 2 else safe.pow(1.0 / p))
    return x.div(norm.clamp(min_=eps))

"""Scaled dot-product attention (`F.scaled_dot_product_attention`): softmax(q @ k^T * scale + mask) @ v, with
causal masks, boolean or additive masks, grouped key/value heads and dropout.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeVar

from plygrad.frontend import core
from plygrad.frontend.composite import composite
from plygrad.ir import ShapeError, dtypes, result_dtype

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

T = TypeVar("T", bound="Tensor")


def _draws_dropout(x: Tensor, *args: object, **kwargs: object) -> bool:
    """Whether this call draws dropout's random mask (a new draw each call: not memoized)."""
    dropout_p = kwargs.get("dropout_p", args[3] if len(args) > 3 else 0.0)
    return bool(dropout_p) and type(x).training


@composite(skip=_draws_dropout)
def scaled_dot_product_attention(x: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False,
                                 scale: float | None = None) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v, like `F.scaled_dot_product_attention` (self is the query).

    A bool mask keeps True positions, a float mask is added; `is_causal` keeps the lower triangle (top-left
    aligned); `enable_gqa` repeats key/value heads to match the query's. Dropout of the weights follows
    `dropout` (active only while training)."""
    q = x
    if q.ndim < 2 or key.ndim < 2 or value.ndim < 2 or q.shape[-1] != key.shape[-1] \
            or key.shape[-2] != value.shape[-2]:
        raise ShapeError(f"scaled_dot_product_attention: query {q.shape}, key {key.shape} and value "
                         f"{value.shape} need (..., L, E), (..., S, E) and (..., S, Ev)")
    if enable_gqa and q.ndim >= 3 and key.shape[-3] != q.shape[-3]:
        heads, kv_heads = q.shape[-3], key.shape[-3]
        if heads % kv_heads:
            raise ShapeError(f"scaled_dot_product_attention: {heads} query heads are not a multiple of "
                             f"{kv_heads} key/value heads")
        key = key.repeat_interleave(heads // kv_heads, -3)
        value = value.repeat_interleave(heads // kv_heads, -3)
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q.matmul(key.transpose(-1, -2)).mul(factor)
    if is_causal:
        if attn_mask is not None:
            raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both (as PyTorch)")
        rows, cols = q.shape[-2], key.shape[-2]
        attn_mask = core.int_range(x, cols).reshape(1, cols).le(core.int_range(x, rows).reshape(rows, 1))
    if attn_mask is not None:
        scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype.is_bool else scores.add(attn_mask)
    # softmax(scores) @ v with the division by the row sums after the product, (e @ v) / sum(e): the max, the
    # sum and the product then fuse into one kernel (the row statistics reach it through trailing broadcasts,
    # docs/scheduler.md rule 4), where softmax's division would need the sums broadcast across the product's
    # middle axis. Half floats compute in float32 and round once, as softmax does.
    wide = scores._cast_to(dtypes.float32) if scores.dtype in (dtypes.float16, dtypes.bfloat16) else scores
    e = wide.sub(wide.max(-1, keepdim=True)).exp()
    total = e.sum(-1, keepdim=True)
    if dropout_p:
        e = e.dropout(dropout_p)
    out = e.matmul(value._cast_to(wide.dtype) if value.dtype.is_float else value).div(total)
    return out._cast_to(result_dtype(scores.dtype, value.dtype))

"""Convolutions: conv1d/2d/3d (groups, stride, dilation, padding modes) and conv_transpose1d/2d.

A convolution is the sliding-window view of the input (pool.py `_pool`) times the weight, summed over
(cin, *kernel); the scheduler fuses it into one reduce kernel with the reduce loops innermost. A transposed
convolution is a convolution of the dilated, padded input with the flipped weight.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from plygrad.frontend import linear, pool
from plygrad.ir import DTypeLike, ShapeError, result_dtype

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor



def conv2d(t: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
           dilation: int | Sequence[int] = 1, padding: pool.Padding = 0, dtype: DTypeLike | None = None) -> Tensor:
    """A convolution over any number of spatial axes (1, 2, 3, ... from the weight's rank), like
    `F.conv2d`: input (N, Cin, *spatial), weight (Cout, Cin/groups, *kernel), bias (Cout,).

    `padding`: an int, one int per spatial axis, 2 per axis in F.pad order (left, right, top, bottom, ...),
    or 'same' / 'valid'. The windows view (N, Cin, *out, *kernel) is laid out as (N, groups, Cout/groups,
    *out, Cin/groups, *kernel) against the weight so the sum over the last axes is one reduce kernel."""
    op = f"conv{max(weight.ndim - 2, 1)}d"
    x, w = (t, weight) if dtype is None else (t.cast(dtype), weight.cast(dtype))
    spatial = weight.ndim - 2
    if spatial < 1 or t.ndim != weight.ndim:
        raise ShapeError(f"{op}: input of shape {t.shape} and weight of shape {weight.shape}: need input "
                         "(N, Cin, *spatial) and weight (Cout, Cin/groups, *kernel) of the same rank >= 3")
    batch, cin = t.shape[:2]
    cout, cin_group = weight.shape[:2]
    kernel = weight.shape[2:]
    if type(groups) is not int or groups < 1 or cin != groups * cin_group or cout % groups:
        raise ShapeError(f"{op}: input of shape {t.shape} has {cin} channels, but weight of shape "
                         f"{weight.shape} with groups={groups} expects {groups * cin_group} (and Cout {cout} "
                         "divisible by groups)")
    if bias is not None and bias.shape != (cout,):
        raise ShapeError(f"{op}: bias of shape {bias.shape} should be ({cout},), one per output channel")
    strides = pool.per_spatial_axis(stride, spatial, "stride", op)
    dilations = pool.per_spatial_axis(dilation, spatial, "dilation", op)
    pads = pool.conv_padding(padding, kernel, strides, dilations, op)
    padded = x.pad(((0, 0), (0, 0), *pads)) if any(b or a for b, a in pads) else x
    for axis, (n, k, d) in enumerate(zip(padded.shape[2:], kernel, dilations, strict=True)):
        if n < d * (k - 1) + 1:
            raise ShapeError(f"{op}: spatial axis {axis} of the padded input (input shape {t.shape}, padding "
                             f"{pads}) has size {n}, smaller than the kernel's reach {d * (k - 1) + 1} "
                             f"(weight shape {weight.shape}, dilation {dilations})")
    dt = x.dtype if x.dtype is w.dtype else result_dtype(x.dtype, w.dtype)
    acc = linear.accumulate_dtype(dt)
    windows = pool.sliding_windows(padded._cast_to(acc), kernel, strides, dilations)  # (N, Cin, *out, *kernel)
    out = windows.shape[2:2 + spatial]
    per_group = cout // groups
    windows = windows.reshape(batch, groups, 1, cin_group, *out, *kernel)
    windows = windows.expand(batch, groups, per_group, cin_group, *out, *kernel)
    windows = windows.permute(0, 1, 2, *range(4, 4 + spatial), 3, *range(4 + spatial, 4 + 2 * spatial))
    w = w._cast_to(acc).reshape(1, groups, per_group, *(1,) * spatial, cin_group, *kernel)
    summed = windows.mul(w).sum(tuple(range(3 + spatial, 4 + 2 * spatial)))
    result = summed._cast_to(dt).reshape(batch, cout, *out)
    return result if bias is None else result.add(bias.reshape(1, cout, *(1,) * spatial))


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
           dilation: int | Sequence[int] = 1, padding: pool.Padding = 0) -> Tensor:
    """`F.conv1d`: conv2d with one spatial axis (the weight's rank decides)."""
    return x.conv2d(weight, bias, groups, stride, dilation, padding)


def conv3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
           dilation: int | Sequence[int] = 1, padding: pool.Padding = 0) -> Tensor:
    """`F.conv3d`: conv2d with three spatial axes."""
    return x.conv2d(weight, bias, groups, stride, dilation, padding)


def conv_transpose2d(t: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                     stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Tensor:
    """The transposed convolution (the gradient of conv2d with respect to its input), like
    `F.conv_transpose2d`: weight (Cin, Cout/groups, *kernel), any number of spatial axes.

    Built as a plain convolution: the input with `stride - 1` zeros between elements, padded by
    `dilation*(kernel-1) - padding` (plus `output_padding` after), convolved with the flipped kernel whose
    in/out channel axes are swapped within each group."""
    spatial = weight.ndim - 2
    op = f"conv_transpose{max(spatial, 1)}d"
    if spatial < 1 or t.ndim != weight.ndim:
        raise ShapeError(f"{op}: input of shape {t.shape} and weight of shape {weight.shape}: need input "
                         "(N, Cin, *spatial) and weight (Cin, Cout/groups, *kernel) of the same rank >= 3")
    cin, out_group = weight.shape[:2]
    kernel = weight.shape[2:]
    if type(groups) is not int or groups < 1 or t.shape[1] != cin or cin % groups:
        raise ShapeError(f"{op}: input of shape {t.shape} has {t.shape[1]} channels, but weight of shape "
                         f"{weight.shape} expects {cin} (divisible by groups={groups})")
    strides = pool.per_spatial_axis(stride, spatial, "stride", op)
    dilations = pool.per_spatial_axis(dilation, spatial, "dilation", op)
    extra = pool.per_spatial_axis(output_padding, spatial, "output_padding", op)
    pads = pool.explicit_padding(padding, spatial, op)
    for s, d, e in zip(strides, dilations, extra, strict=True):
        if not 0 <= e < max(s, d):
            raise ValueError(f"{op}: output_padding {output_padding!r} must be smaller than stride {stride!r} or "
                             f"dilation {dilation!r}")
    inner = t.shape[2:]
    out = tuple((n - 1) * s - b - a + d * (k - 1) + e + 1
                for n, s, (b, a), d, k, e in zip(inner, strides, pads, dilations, kernel, extra, strict=True))
    if any(n < 0 for n in out) or (0 in inner and any(out)):
        raise ShapeError(f"{op}: input of shape {t.shape}, weight of shape {weight.shape}, padding {pads} give "
                         f"the output size {out}; use less padding")
    if 0 in out or 0 in inner:  # nothing to compute (PyTorch returns the empty result too); still a result
        shape = (t.shape[0], out_group * groups, *out)  # of self and weight, so autograd sees both
        nothing = t.sum().mul(weight.sum()).mul(0.0)
        return nothing.reshape((1,) * len(shape)).expand(shape)
    x = t
    if any(s > 1 for s in strides):
        spaced = [v for n in inner for v in (n, 1)]
        x = x.reshape(*t.shape[:2], *spaced)
        x = x.pad(((0, 0), (0, 0), *(p for s in strides for p in ((0, 0), (0, s - 1)))))
        x = x.reshape(*t.shape[:2], *(n * s for n, s in zip(inner, strides, strict=True)))
        x = x.shrink(((0, x.shape[0]), (0, x.shape[1]),
                      *((0, max((n - 1) * s + 1, 0)) for n, s in zip(inner, strides, strict=True))))
    reach = [d * (k - 1) for k, d in zip(kernel, dilations, strict=True)]
    x = x.pad(((0, 0), (0, 0), *((r - b, r - a + e) for r, (b, a), e in zip(reach, pads, extra, strict=True))))
    w = weight.reshape(groups, cin // groups, out_group, *kernel)
    w = w.permute(0, 2, 1, *range(3, 3 + spatial)).reshape(groups * out_group, cin // groups, *kernel)
    w = w.flip(tuple(range(2, 2 + spatial)))
    return x.conv2d(w, bias, groups, 1, dilations, 0)


def conv_transpose1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                     stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Tensor:
    """`F.conv_transpose1d`: conv_transpose2d with one spatial axis."""
    return x.conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding)

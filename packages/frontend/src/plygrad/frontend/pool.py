"""Sliding windows and pooling: the window view `sliding_windows` (movement ops only, no im2col copy), `unfold`, max and
average pooling (PyTorch's ceil-mode windows), and max_unpool2d.

A window view of shape (..., out_1, ..., out_k, k_1, ..., k_k) is what convolutions and pooling reduce over; the
scheduler fuses the view into the reducing kernel, so no window is ever copied.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, TypeAlias, overload

from plygrad.frontend import core, movement
from plygrad.frontend.errors import ArgumentValueError
from plygrad.frontend.lazy import stop_gradient
from plygrad.ir import ShapeError, dtypes

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

Padding: TypeAlias = int | Sequence[int] | str


def per_spatial_axis(value: int | Sequence[int], n: int, name: str, op: str) -> tuple[int, ...]:
    """An int for every spatial axis, or exactly one int per axis."""
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) != n or any(type(v) is not int for v in values):
        raise ArgumentValueError(f"{op}: {name} {value!r} needs an int or {n} ints (one per spatial axis)")
    return values


def explicit_padding(padding: int | Sequence[int], n: int, op: str) -> tuple[tuple[int, int], ...]:
    """`(before, after)` per spatial axis from an int, one int per axis (both sides), or 2n ints in PyTorch's
    `F.pad` order `(left, right, top, bottom, ...)`, which starts from the last axis (tinygrad's convention)."""
    if isinstance(padding, int):
        return ((padding, padding),) * n
    flat = tuple(padding)
    if any(type(p) is not int for p in flat):
        raise ArgumentValueError(f"{op}: padding {padding!r} must be ints")
    if len(flat) == n:
        return tuple((p, p) for p in flat)
    if len(flat) == 2 * n:
        return tuple((flat[2 * i], flat[2 * i + 1]) for i in range(n))[::-1]
    raise ArgumentValueError(f"{op}: padding {padding!r} needs an int, {n} ints (one per spatial axis) or {2 * n} ints "
                             "(left, right, top, bottom, ... starting from the last axis)")


def conv_padding(padding: Padding, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                 op: str) -> tuple[tuple[int, int], ...]:
    """Explicit padding, or PyTorch's 'valid' (none) and 'same' (output size = input size; an odd total puts the
    extra element after, as PyTorch does)."""
    if not isinstance(padding, str):
        return explicit_padding(padding, len(kernel), op)
    if padding == "valid":
        return ((0, 0),) * len(kernel)
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ArgumentValueError(f"{op}: padding='same' needs stride 1, got stride {stride} (as in PyTorch)")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return tuple((t // 2, t - t // 2) for t in totals)
    raise ArgumentValueError(f"{op}: padding {padding!r} is not 'same' or 'valid' (or an int or a tuple of ints)")


def unfold(x: Tensor, dim: int, size: int, step: int) -> Tensor:
    """PyTorch's `Tensor.unfold`: axis `dim` replaced by the windows' count, the window (`size` elements,
    `step` apart) appended as the last axis. A view built by `sliding_windows`."""
    axis = x._axis(dim, "unfold")
    n = x.shape[axis] if x.ndim else 1
    if type(size) is not int or type(step) is not int or size < 0 or step < 1 or size > n:
        raise ShapeError(f"unfold of shape {x.shape}: size {size!r} must be in 0..{n} (the size of axis "
                         f"{dim}) and step {step!r} >= 1")
    if x.ndim == 0:
        return x.reshape(1)
    count = (n - size) // step + 1
    if size == 0:
        empty = movement.narrow_axis(x.flatten(), 0, 0, 0)
        return empty.reshape(*x.shape[:axis], count, *x.shape[axis + 1:], 0)
    last = x.ndim - 1
    moved = x.transpose(axis, last) if axis != last else x
    windows = sliding_windows(moved, (size,), step)  # (..., count, size) with the axis last
    return windows.transpose(axis, last) if axis != last else windows


def sliding_windows(t: Tensor, k_: tuple[int, ...], stride: int | tuple[int, ...] = 1,
                    dilation: int | tuple[int, ...] = 1) -> Tensor:
    """The sliding windows of the last `len(k_)` axes as a view of shape `(*batch, *out, *k_)`.

    Element `[..., o, j]` is `x[..., o*stride + j*dilation]`, and `out = (n - dilation*(k-1) - 1)//stride + 1`.
    Built from movement ops only (no copy), so conv, pooling, cumsum and unfold read the input in place.
    Each axis is done by `_window_axis`; the per-axis `(k, out)` pairs are then permuted into place."""
    dims = len(k_)
    if dims > t.ndim or dims == 0:
        raise ShapeError(f"sliding_windows: {dims} window sizes {k_} for a tensor of shape {t.shape}: need between 1 "
                         f"and {t.ndim} spatial axes")
    strides = movement.ints_per_axis(stride, dims, "stride", "sliding_windows")
    dilations = movement.ints_per_axis(dilation, dims, "dilation", "sliding_windows")
    if any(type(k) is not int or k < 1 for k in k_):
        raise ShapeError(f"sliding_windows: window sizes {k_} must be ints >= 1")
    batch = t.ndim - dims
    x = t
    for i, (k, s, d) in enumerate(zip(k_, strides, dilations, strict=True)):
        x = _window_axis(x, batch + 2 * i, k, s, d)  # axis becomes (k, out) at the same place
    order = (*range(batch), *(batch + 2 * i + 1 for i in range(dims)), *(batch + 2 * i for i in range(dims)))
    return x.permute(order)


def _window_axis(t: Tensor, axis: int, k: int, s: int, d: int) -> Tensor:
    """Axis `axis` (size n) replaced by two axes `(k, out)` holding `x[o*s + j*d]` at `[j, o]`.

    The trick: trim or zero-pad the axis to `m = d*(k-1) + out*s`, repeat it k times (EXPAND of a new axis),
    flatten the repeats and re-cut them into rows of `m + d`: row j then starts `j*d` further into its copy, so
    its first `out*s` elements are `x[j*d : j*d + out*s]`, never crossing into the next copy. Keeping every
    s-th of those (reshape to `(out, s)`, take column 0) gives the strided windows. Padded zeros are never read."""
    n = t.shape[axis]
    out = (n - d * (k - 1) - 1) // s + 1
    if out < 0 or (out == 0 and n != 0):
        raise ShapeError(f"sliding_windows: window {k} with dilation {d} ({d * (k - 1) + 1} elements) does not fit "
                         f"axis {axis} of size {n} (tensor of shape {t.shape}); use a smaller window or pad first")
    out = max(out, 0)
    pre, post = t.shape[:axis], t.shape[axis + 1:]
    m = d * (k - 1) + out * s
    x = t.pad(tuple((0, m - n) if i == axis else None for i in range(t.ndim)))  # negative amounts trim
    x = x.reshape(*pre, 1, m, *post).expand(*pre, k, m, *post).reshape(*pre, k * m, *post)
    x = x.pad(tuple((0, k * d) if i == axis else None for i in range(x.ndim)))
    x = x.reshape(*pre, k, m + d, *post)
    x = x.shrink(tuple((0, out * s) if i == axis + 1 else None for i in range(x.ndim)))
    if s == 1:
        return x
    x = x.reshape(*pre, k, out, s, *post)
    x = x.shrink(tuple((0, 1) if i == axis + 2 else None for i in range(x.ndim)))
    return x.reshape(*pre, k, out, *post)


def _pool_windows(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None, *,
                  dilation: int | Sequence[int], padding: int | Sequence[int], ceil_mode: bool, op: str,
                  default_rank: int = 2) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...],
                                                  tuple[int, ...], tuple[int, ...]]:
    """(kernel, padding, stride, dilation) of a pooling op; the padding includes what ceil_mode adds after.

    PyTorch's ceil mode: out = ceil((n + pads - reach) / stride) + 1, less one when the last window would
    start past the input (in the right padding); the windows that run over the end read padding."""
    kernel = per_spatial_axis(kernel_size, default_rank, "kernel_size", op) if isinstance(kernel_size, int) \
        else tuple(kernel_size)
    spatial = len(kernel)
    if spatial == 0 or spatial > x.ndim or any(type(k) is not int or k < 1 for k in kernel):
        raise ShapeError(f"{op}: kernel_size {kernel_size!r} must be ints >= 1, at most one per axis of the input "
                         f"of shape {x.shape}")
    strides = kernel if stride is None else per_spatial_axis(stride, spatial, "stride", op)
    dilations = per_spatial_axis(dilation, spatial, "dilation", op)
    pads = explicit_padding(padding, spatial, op)
    full = []
    for axis, (n, k, s, d, (before, after)) in enumerate(
            zip(x.shape[-spatial:], kernel, strides, dilations, pads, strict=True)):
        reach = d * (k - 1) + 1
        room = n + before + after - reach
        if room < 0 or s < 1:
            raise ShapeError(f"{op}: window {k} (dilation {d}) does not fit spatial axis {axis} of size {n} with "
                             f"padding {(before, after)} (input shape {x.shape}); pad more or use a smaller "
                             "window")
        out = (-(-room // s) if ceil_mode else room // s) + 1
        if ceil_mode and (out - 1) * s >= n + before:
            out -= 1
        full.append((before, max(after, (out - 1) * s + reach - n - before)))
    return kernel, tuple(full), strides, dilations


@overload
def max_pool2d(x: Tensor, kernel_size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ...,
               dilation: int | Sequence[int] = ..., padding: int | Sequence[int] = ..., ceil_mode: bool = ...,
               return_indices: Literal[False] = ...) -> Tensor: ...


@overload
def max_pool2d(x: Tensor, kernel_size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ...,
               dilation: int | Sequence[int] = ..., padding: int | Sequence[int] = ..., ceil_mode: bool = ...,
               *, return_indices: Literal[True]) -> tuple[Tensor, Tensor]: ...


def max_pool2d(x: Tensor, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
               dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The maximum of each window over the last len(kernel_size) axes (`F.max_pool2d`; any number of axes).

    Padding reads as the dtype's lowest value so it never wins. `return_indices` also gives each maximum's
    position in the flattened spatial input (int64, the first one on ties), as PyTorch does."""
    kernel, pads, strides, dilations = _pool_windows(x, kernel_size, stride, dilation=dilation, padding=padding,
                                                          ceil_mode=ceil_mode, op="max_pool2d")
    spatial = len(kernel)
    lowest = x.dtype.min
    grow = ((0, 0),) * (x.ndim - spatial) + pads
    padded = x.pad(grow, value=lowest) if any(b or a for b, a in pads) else x
    window_axes = tuple(range(-spatial, 0))
    windows = sliding_windows(padded, kernel, strides, dilations)
    best = windows.max(window_axes)
    if not return_indices:
        return best
    dims = x.shape[-spatial:]
    where = core.int_range(x, math.prod(dims)).reshape(dims)
    where = where.pad(pads, value=math.prod(dims)) if any(b or a for b, a in pads) else where
    positions = sliding_windows(where, kernel, strides, dilations)
    hit = windows.eq(best.reshape(*best.shape, *(1,) * spatial))
    first = hit.where(positions, math.prod(dims)).min(window_axes)
    return best, first._cast_to(dtypes.int64)


@overload
def max_pool1d(x: Tensor, kernel_size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ...,
               padding: int | Sequence[int] = ..., dilation: int | Sequence[int] = ..., ceil_mode: bool = ...,
               return_indices: Literal[False] = ...) -> Tensor: ...


@overload
def max_pool1d(x: Tensor, kernel_size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ...,
               padding: int | Sequence[int] = ..., dilation: int | Sequence[int] = ..., ceil_mode: bool = ...,
               *, return_indices: Literal[True]) -> tuple[Tensor, Tensor]: ...


def max_pool1d(x: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """`F.max_pool1d` (PyTorch's argument order, as tinygrad has no 1-D pools): max_pool2d over the last axis."""
    kernel = (kernel_size,) if isinstance(kernel_size, int) else kernel_size
    if return_indices:
        return x.max_pool2d(kernel, stride, dilation, padding, ceil_mode, return_indices=True)
    return x.max_pool2d(kernel, stride, dilation, padding, ceil_mode)


def avg_pool2d(t: Tensor, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
               dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """The mean of each window over the last len(kernel_size) axes (`F.avg_pool2d`; any number of axes).

    As in PyTorch the divisor counts the explicit padding when `count_include_pad` (but never the part of a
    ceil-mode window past it), and only input elements otherwise."""
    kernel, pads, strides, dilations = _pool_windows(t, kernel_size, stride, dilation=dilation, padding=padding,
                                                          ceil_mode=ceil_mode, op="avg_pool2d")
    spatial = len(kernel)
    x = core.float_input(t)
    grow = ((0, 0),) * (t.ndim - spatial) + pads
    padded = x.pad(grow) if any(b or a for b, a in pads) else x
    window_axes = tuple(range(-spatial, 0))
    total = sliding_windows(padded, kernel, strides, dilations).sum(window_axes)._cast_to(x.dtype)
    explicit = explicit_padding(padding, spatial, "avg_pool2d")
    if count_include_pad and pads == explicit:
        return total.div(float(math.prod(kernel)))
    dims = t.shape[-spatial:]
    if count_include_pad:  # ones over input and explicit padding, zeros over what ceil mode adds
        counted = x._const(1.0, dtypes.float32, tuple(n + b + a for n, (b, a) in zip(dims, explicit, strict=True)))
        counted = counted.pad(tuple((0, a - e) for (_, a), (_, e) in zip(pads, explicit, strict=True)))
    else:
        counted = x._const(1.0, dtypes.float32, dims).pad(pads)
    divisor = sliding_windows(counted, kernel, strides, dilations).sum(window_axes)._cast_to(x.dtype)
    return total.div(divisor)


def avg_pool1d(x: Tensor, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """`F.avg_pool1d` (same argument order as PyTorch's): avg_pool2d over the last axis."""
    kernel = (kernel_size,) if isinstance(kernel_size, int) else kernel_size
    return x.avg_pool2d(kernel, stride, 1, padding, ceil_mode, count_include_pad)


def max_unpool2d(x: Tensor, indices: Tensor, kernel_size: int | Sequence[int] = (2, 2),
                 stride: int | Sequence[int] | None = None, dilation: int | Sequence[int] = 1,
                 padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Tensor:
    """The partial inverse of `max_pool2d(..., return_indices=True)`: each value written at its index in the
    flattened spatial output, zeros elsewhere (`F.max_unpool2d`; any number of spatial axes). Without
    `output_size` the spatial size is (in - 1) * stride - pads + dilation * (kernel - 1) + 1 per axis."""
    if indices.shape != x.shape:
        raise ShapeError(f"max_unpool2d: indices of shape {indices.shape} for values of shape {x.shape}; "
                         "pass the indices max_pool2d returned with these values")
    kernel = tuple(kernel_size) if not isinstance(kernel_size, int) else per_spatial_axis(kernel_size, 2, "kernel_size",
                                                                                          "max_unpool2d")
    spatial = len(kernel)
    if x.ndim < spatial + 1:
        raise ShapeError(f"max_unpool2d: values of shape {x.shape} have fewer than {spatial} spatial axes")
    dims = x.shape[-spatial:]
    if output_size is None:
        strides = kernel if stride is None else per_spatial_axis(stride, spatial, "stride", "max_unpool2d")
        dilations = per_spatial_axis(dilation, spatial, "dilation", "max_unpool2d")
        pads = explicit_padding(padding, spatial, "max_unpool2d")
        out = tuple((n - 1) * s - (b + a) + d * (k - 1) + 1
                    for n, k, s, d, (b, a) in zip(dims, kernel, strides, dilations, pads, strict=True))
    else:
        out = tuple(output_size)[-spatial:]
    lead = x.shape[:-spatial]
    flat_values = x.reshape(*lead, -1)
    flat_indices = indices.reshape(*lead, -1)
    size = math.prod(out)
    # overlapping windows can pick one element twice. PyTorch writes it once (a scatter) but gives each pick the
    # whole output gradient (a gather). The one-hot sum has exactly that gradient; the detached difference to
    # the scatter then corrects its forward values where a position was picked more than once.
    hit = core.typed_like(x, flat_indices).unsqueeze(-1).eq(core.int_range(x, size))  # (..., L, size)
    summed = hit.where(flat_values.unsqueeze(-1), 0).sum(-2)._cast_to(x.dtype)
    written = x.zeros(*lead, size, dtype=x.dtype, device=x.device).scatter(-1, flat_indices, flat_values)
    # where the two agree the correction is 0, not written - summed: an inf value would give inf - inf = NaN
    correction = written.eq(summed).where(0, written.sub(summed))
    fixed = summed.add(x._make(stop_gradient(correction.uop), correction.device, correction.inputs))
    return fixed.reshape(*lead, *out)

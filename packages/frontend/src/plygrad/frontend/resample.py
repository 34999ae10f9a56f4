"""Interpolation (`interpolate`): nearest, nearest-exact and (bi/tri)linear resizing as a product with a small
resampling matrix per axis, so each axis is one matmul-shaped reduce with PyTorch's numbers (align_corners too).
"""


from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, TypeAlias

from plygrad.frontend import core
from plygrad.frontend.errors import ArgumentValueError
from plygrad.ir import ShapeError, dtypes

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

InterpolateMode: TypeAlias = Literal["linear", "bilinear", "trilinear", "nearest", "nearest-exact"]


def interpolate(t: Tensor, size: int | Sequence[int], mode: InterpolateMode = "linear",
                align_corners: bool = False) -> Tensor:
    """The last len(size) axes resized to `size`, like `F.interpolate(x, size=...)` (any leading axes).

    'linear' is linear, bilinear or trilinear by len(size) ('bilinear'/'trilinear' name the same); 'nearest' is
    PyTorch's (floor of dst * in/out), 'nearest-exact' rounds pixel centres. Each axis is a product with an
    (in, out) resampling matrix computed in the graph with PyTorch's float32 index arithmetic."""
    sizes = (size,) if isinstance(size, int) else tuple(size)
    if mode not in ("linear", "bilinear", "trilinear", "nearest", "nearest-exact"):
        raise ArgumentValueError(f"interpolate: mode {mode!r} is not 'linear', 'bilinear', 'trilinear', 'nearest' or "
                                 "'nearest-exact'")
    if not sizes or len(sizes) > t.ndim or any(type(n) is not int or n < 0 for n in sizes):
        raise ShapeError(f"interpolate: size {size!r} must be 1..{t.ndim} ints >= 0 for a tensor of shape "
                         f"{t.shape}")
    if align_corners and mode.startswith("nearest"):
        raise ArgumentValueError("interpolate: align_corners only applies to the linear modes (as in PyTorch)")
    linear = not mode.startswith("nearest")
    x = core.float_input(t) if linear else t
    for i, n_out in enumerate(sizes):
        axis = t.ndim - len(sizes) + i
        n_in = x.shape[axis]
        if n_out == n_in:
            continue
        if n_in == 0:
            raise ShapeError(f"interpolate: cannot resize an empty axis {axis} of shape {t.shape} to {n_out}")
        matrix = _resample_matrix(x, n_in, n_out, mode, align_corners)._cast_to(x.dtype)
        moved = x.transpose(axis, -1)
        x = moved.matmul(matrix).transpose(axis, -1)
    return x


def _resample_matrix(x: Tensor, n_in: int, n_out: int, mode: str, align_corners: bool) -> Tensor:
    """(n_in, n_out) float32 weights: column o mixes the input positions output o reads."""
    dst = core.int_range(x, n_out)._cast_to(dtypes.float32)
    cols = core.int_range(x, n_in).reshape(n_in, 1)
    if mode.startswith("nearest"):
        scale = n_in / n_out
        src = dst.add(0.5).mul(scale) if mode == "nearest-exact" else dst.mul(scale)
        index = src.floor()._cast_to(dtypes.int32).minimum(n_in - 1)
        return cols.eq(index.reshape(1, n_out))._cast_to(dtypes.float32)
    if align_corners:
        src = dst.mul((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        src = dst.add(0.5).mul(n_in / n_out).sub(0.5).maximum(0.0)
    low = src._cast_to(dtypes.int32)  # src >= 0, so truncation is floor
    high = low.add(1).minimum(n_in - 1)
    frac = src.sub(low._cast_to(dtypes.float32))
    near = cols.eq(low.reshape(1, n_out)).where(frac.sub(1.0, reverse=True).reshape(1, n_out), 0.0)
    return near.add(cols.eq(high.reshape(1, n_out)).where(frac.reshape(1, n_out), 0.0))

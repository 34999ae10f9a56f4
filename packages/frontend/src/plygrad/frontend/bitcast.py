"""`bitcast` between dtypes of different sizes: the last axis scales, as in tinygrad and `torch.Tensor.view(dtype)`.

The IR's BITCAST reads each element's bits as another dtype of the same size. A wider or narrower dtype regroups
bytes, which is built here from integer ops on unsigned words of each size, in little-endian byte order (every
backend plygrad runs on): a float32 becomes four uint8s, lowest byte first, by shifts and masks; four uint8s become
a uint32 by shifting each to its place and or-ing them. A plygrad tensor has no strides (every view is computed),
so unlike torch no view is refused for not being contiguous: the result is torch's `x.contiguous().view(dtype)`.
A tensor on DISK takes its bitcast as a view of the file where it is one byte range (disk.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from plygrad.ir import DType, ShapeError, dtypes

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

_WORDS: Final[dict[int, DType]] = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def check_resize(shape: tuple[int, ...], source: DType, dtype: DType) -> None:
    """torch's rules (and messages) for viewing as a dtype of another size: not 0-d; a wider dtype needs the last
    axis to be a whole number of groups of its size."""
    what = f"to view {source.name} as {dtype.name} (different element sizes)"
    if not shape:
        raise ShapeError(f"bitcast: self.dim() cannot be 0 {what}")
    if dtype.itemsize > source.itemsize and (shape[-1] * source.itemsize) % dtype.itemsize:
        raise ShapeError(f"bitcast: self.size(-1) must be divisible by {dtype.itemsize // source.itemsize} {what}, "
                         f"but got {shape[-1]} (shape {shape})")


def resized_shape(shape: tuple[int, ...], source: DType, dtype: DType) -> tuple[int, ...]:
    return (*shape[:-1], shape[-1] * source.itemsize // dtype.itemsize)


def resized_bitcast(x: Tensor, dtype: DType) -> Tensor:
    """The bytes of `x` read as `dtype` of another itemsize (check_resize's rules; the last axis scales)."""
    check_resize(x.shape, x.dtype, dtype)
    a, b = x.dtype.itemsize, dtype.itemsize
    if a not in _WORDS or b not in _WORDS:
        raise ShapeError(f"bitcast: no {8 * max(a, b)}-bit unsigned word to regroup {x.dtype.name} as {dtype.name}")
    # bool has no bit pattern of its own to bitcast: its byte is 0 or 1, which is what the cast gives
    words = x.cast(dtypes.uint8) if x.dtype is dtypes.bool else x.bitcast(_WORDS[a])
    if a > b:
        ratio, width = a // b, _WORDS[b]
        mask = (1 << (8 * b)) - 1
        parts = [words.rshift(8 * b * k).bitwise_and(mask).cast(width) for k in range(ratio)]
        grouped = parts[0].stack(*parts[1:], dim=-1)
        out = grouped.reshape(resized_shape(x.shape, x.dtype, dtype))
    else:
        ratio, width = b // a, _WORDS[b]
        wide = words.reshape(*x.shape[:-1], x.shape[-1] // ratio, ratio).cast(width)
        out = wide[..., 0]
        for k in range(1, ratio):
            out = out.bitwise_or(wide[..., k].lshift(8 * a * k))
    return out.cast(dtypes.bool) if dtype is dtypes.bool else out.bitcast(dtype)

"""Movement ops and indexing: views that change how a tensor is read, never its values.

Each is one IR movement op (RESHAPE PERMUTE EXPAND PAD SHRINK FLIP, docs/ir.md §4.3) or a few of them; the scheduler
turns them into index math, so no view copies memory. Basic indexing is built from them: an int is a SHRINK to one
element then a RESHAPE dropping the axis, a strided slice a SHRINK + PAD + RESHAPE that keeps every `step`-th
element, a negative step a FLIP first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import EllipsisType
from typing import Self, TypeAlias

from plygrad.frontend.elementwise import ElementwiseOps
from plygrad.frontend.lazy import movement
from plygrad.ir import Ops, ShapeError

Index: TypeAlias = "int | slice | EllipsisType | None"
Pad: TypeAlias = "tuple[int, int] | None"


def _dims(shape: tuple[int, ...] | tuple[Sequence[int]]) -> tuple[int, ...]:
    """Accept both `reshape(2, 3)` and `reshape((2, 3))`."""
    if len(shape) == 1 and not isinstance(shape[0], int):
        return tuple(shape[0])
    return tuple(shape)


class MovementOps(ElementwiseOps):
    """Views: reshape, permute, expand, pad, shrink, flip and what is built from them, plus `t[...]`."""

    __slots__ = ()

    def _move(self, op: Ops, arg: object) -> Self:
        return self._new(movement(self.uop, op, arg))

    def reshape(self, *shape: int | Sequence[int]) -> Self:
        """A view with another shape of the same number of elements; one size may be -1 (inferred)."""
        dims = _dims(shape)  # type: ignore[arg-type]
        if sum(d == -1 for d in dims) > 1 or any(type(d) is not int or d < -1 for d in dims):
            raise ShapeError(f"reshape of shape {self.shape} to {dims}: sizes must be ints >= 0, at most one -1")
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            if known == 0 or self.numel() % known:
                raise ShapeError(f"reshape of shape {self.shape} ({self.numel()} elements) to {dims}: "
                                 "the -1 cannot be inferred")
            dims = tuple(self.numel() // known if d == -1 else d for d in dims)
        if math.prod(dims) != self.numel():
            raise ShapeError(f"reshape of shape {self.shape} ({self.numel()} elements) to {dims} "
                             f"({math.prod(dims)} elements): the element counts must match")
        return self if dims == self.shape else self._move(Ops.RESHAPE, dims)

    def view(self, *shape: int | Sequence[int]) -> Self:
        return self.reshape(*shape)

    def permute(self, *order: int | Sequence[int]) -> Self:
        """The axes reordered: result axis i is source axis order[i]."""
        axes = tuple(self._axis(a, "permute") for a in _dims(order))  # type: ignore[arg-type]
        if sorted(axes) != list(range(self.ndim)):
            raise ShapeError(f"permute of shape {self.shape}: {_dims(order)} is not a permutation "  # type: ignore[arg-type]
                             f"of {self.ndim} axes")
        return self if axes == tuple(range(self.ndim)) else self._move(Ops.PERMUTE, axes)

    def expand(self, *shape: int | Sequence[int]) -> Self:
        """Size-1 axes repeated to `shape` (new leading axes allowed; -1 keeps a size)."""
        dims = _dims(shape)  # type: ignore[arg-type]
        if len(dims) < self.ndim:
            raise ShapeError(f"expand of shape {self.shape} to {dims}: the target has fewer axes")
        lead = len(dims) - self.ndim
        target = tuple(self.shape[i - lead] if d == -1 and i >= lead else d for i, d in enumerate(dims))
        for i, (have, want) in enumerate(zip(self.shape, target[lead:], strict=True)):
            if have not in (1, want):
                raise ShapeError(f"expand of shape {self.shape} to {dims}: axis {i} has size {have}; "
                                 "only size-1 axes expand")
        return self._broadcast_to(target)

    def pad(self, padding: Sequence[Pad]) -> Self:
        """Zeros added before and after each axis: one `(before, after)` pair (or None) per axis.

        Negative amounts cut instead (a SHRINK), like PyTorch's `F.pad`."""
        if len(padding) != self.ndim:
            raise ShapeError(f"pad of shape {self.shape} needs one (before, after) pair per axis, got {padding!r}")
        pairs = tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding)
        cut = tuple((max(-b, 0), n - max(-a, 0)) for n, (b, a) in zip(self.shape, pairs, strict=True))
        x = self.shrink(cut) if any(b < 0 or a < 0 for b, a in pairs) else self
        grow = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
        return x._move(Ops.PAD, grow) if any(b or a for b, a in grow) else x

    def shrink(self, bounds: Sequence[Pad]) -> Self:
        """The sub-box `start:end` of each axis: one `(start, end)` pair (or None for the whole axis) per axis."""
        if len(bounds) != self.ndim:
            raise ShapeError(f"shrink of shape {self.shape} needs one (start, end) pair per axis, got {bounds!r}")
        pairs = tuple((0, n) if p is None else (int(p[0]), int(p[1])) for n, p in zip(self.shape, bounds, strict=True))
        for axis, (n, (start, end)) in enumerate(zip(self.shape, pairs, strict=True)):
            if not 0 <= start <= end <= n:
                raise ShapeError(f"shrink of shape {self.shape}: axis {axis} range ({start}, {end}) is outside 0..{n}")
        if all(p == (0, n) for p, n in zip(pairs, self.shape, strict=True)):
            return self
        return self._move(Ops.SHRINK, pairs)

    def flip(self, axis: int | Sequence[int]) -> Self:
        """The listed axes reversed."""
        axes = self._axes(axis, "flip")
        return self._move(Ops.FLIP, tuple(i in axes for i in range(self.ndim))) if axes else self

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Self:
        """Two axes swapped (default: the first two, which is `.T` of a matrix)."""
        a, b = self._axis(dim0, "transpose"), self._axis(dim1, "transpose")
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Self:  # noqa: N802 - NumPy's and PyTorch's spelling
        """The axes reversed (a matrix transposed)."""
        return self.permute(tuple(range(self.ndim))[::-1])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        """Axes start_dim..end_dim merged into one."""
        if self.ndim == 0:
            return self.reshape(1)
        start, end = self._axis(start_dim, "flatten"), self._axis(end_dim, "flatten")
        if start > end:
            raise ShapeError(f"flatten of shape {self.shape}: start_dim {start_dim} comes after end_dim {end_dim}")
        shape = self.shape
        return self.reshape(*shape[:start], math.prod(shape[start:end + 1]), *shape[end + 1:])

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Self:
        """Size-1 axes removed (all of them, or those of `dim` that have size 1, like PyTorch)."""
        axes = self._axes(dim, "squeeze")
        return self.reshape(tuple(n for i, n in enumerate(self.shape) if not (i in axes and n == 1)))

    def unsqueeze(self, dim: int) -> Self:
        """A size-1 axis inserted at `dim` (negative counts from the end of the result)."""
        axis = self._axis(dim, "unsqueeze", self.ndim + 1)
        return self.reshape((*self.shape[:axis], 1, *self.shape[axis:]))

    # ---- indexing ---------------------------------------------------------------------------------------------
    def __getitem__(self, index: Index | tuple[Index, ...]) -> Self:
        """Basic indexing: ints (negative too), slices with any step, None (new axis) and one `...`."""
        items = index if isinstance(index, tuple) else (index,)
        for item in items:
            if not (item is None or item is Ellipsis or isinstance(item, (int, slice))) or isinstance(item, bool):
                raise TypeError(f"index {item!r} of type {type(item).__name__} is not supported: use ints, slices, "
                                "None or ... (tensor indexing comes later)")
        if sum(item is Ellipsis for item in items) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        used = sum(isinstance(item, (int, slice)) for item in items)
        if used > self.ndim:
            raise IndexError(f"too many indices for a tensor of shape {self.shape}: {used} axes indexed")
        if Ellipsis not in items:
            items = (*items, Ellipsis)
        at = items.index(Ellipsis)
        items = (*items[:at], *(slice(None),) * (self.ndim - used), *items[at + 1:])
        x, axis, final = self, 0, []
        for item in items:
            if item is None:
                final.append(1)
                continue
            assert isinstance(item, (int, slice))
            n = x.shape[axis]
            if isinstance(item, int):
                if not -n <= item < n:
                    raise IndexError(f"index {item} is out of bounds for axis {axis} with size {n} "
                                     f"(tensor of shape {self.shape})")
                x = x._slice_axis(axis, slice(item % n, item % n + 1))
            else:
                x = x._slice_axis(axis, item)
                final.append(x.shape[axis])
            axis += 1
        return x.reshape(tuple(final))

    def _slice_axis(self, axis: int, item: slice) -> Self:
        """`item` applied to one axis: FLIP for a negative step, SHRINK, then every step-th element kept."""
        n = self.shape[axis]
        picked = range(*item.indices(n))
        count, step = len(picked), abs(picked.step)
        x = self
        if count == 0:
            return x.shrink(tuple((0, 0) if i == axis else None for i in range(x.ndim)))
        first = picked[0]
        if picked.step < 0:
            x, first = x.flip(axis), n - 1 - first
        end = min(first + count * step, n)
        x = x.shrink(tuple((first, end) if i == axis else None for i in range(x.ndim)))
        if step == 1:
            return x
        # every step-th element: pad to count*step, split the axis into (count, step), keep column 0
        x = x.pad(tuple((0, count * step - (end - first)) if i == axis else None for i in range(x.ndim)))
        shape = x.shape
        x = x.reshape(*shape[:axis], count, step, *shape[axis + 1:])
        x = x.shrink(tuple((0, 1) if i == axis + 1 else None for i in range(x.ndim)))
        return x.reshape(*shape[:axis], count, *shape[axis + 1:])

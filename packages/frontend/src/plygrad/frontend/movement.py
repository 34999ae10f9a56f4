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
from plygrad.frontend.lazy import LazyTensor, Scalar, movement
from plygrad.ir import Ops, ShapeError, dtypes, result_dtype

Index: TypeAlias = "int | slice | EllipsisType | None"
Pad: TypeAlias = "tuple[int, int] | None"
PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _dims(shape: tuple[int, ...] | tuple[Sequence[int]]) -> tuple[int, ...]:
    """Accept both `reshape(2, 3)` and `reshape((2, 3))`."""
    if len(shape) == 1 and not isinstance(shape[0], int):
        return tuple(shape[0])
    return tuple(shape)


def _per_axis(value: int | Sequence[int], count: int, what: str, op: str) -> tuple[int, ...]:
    """An int or one int per axis, as `count` ints >= 1."""
    values = (value,) * count if isinstance(value, int) else tuple(value)
    if len(values) != count or any(type(v) is not int or v < 1 for v in values):
        raise ShapeError(f"{op}: {what} {value!r} must be an int >= 1 or {count} of them")
    return values


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

    def pad(self, padding: Sequence[Pad] | Sequence[int], mode: str = "constant", value: Scalar = 0.0) -> Self:
        """The tensor grown at both ends of axes, like PyTorch's `F.pad` and tinygrad's `pad`.

        `padding` is either one `(before, after)` pair (or None) per axis, or PyTorch's flat form
        `(left, right, top, bottom, ...)` that starts from the last axis. Negative amounts cut instead. `mode`:
        "constant" fills with `value`; "reflect" mirrors without repeating the edge; "replicate" repeats the edge;
        "circular" wraps around. Negative amounts cut after reflecting or replicating the whole axis, but before
        wrapping, which is what PyTorch computes."""
        pairs = self._pad_pairs(padding)
        if mode not in PAD_MODES:
            raise ValueError(f"pad: mode {mode!r} is not one of {', '.join(PAD_MODES)}")
        if mode == "constant":
            zeros = self._pad_zeros(pairs)
            if (value == 0 and math.copysign(1.0, value) > 0) or all(b <= 0 and a <= 0 for b, a in pairs):
                return zeros
            inside = self._const(True, dtypes.bool)._pad_zeros(pairs)
            return inside.where(zeros, value)._cast_to(self.dtype)
        cut = tuple((min(b, 0), min(a, 0)) for b, a in pairs)
        x = self._pad_zeros(cut) if mode == "circular" else self
        for axis, (before, after) in enumerate(pairs):
            if before > 0 or after > 0:
                x = x._pad_axis(axis, max(before, 0), max(after, 0), mode)
        return x._pad_zeros(cut) if mode != "circular" else x

    def _pad_pairs(self, padding: Sequence[Pad] | Sequence[int]) -> tuple[tuple[int, int], ...]:
        """`padding` in either form as one `(before, after)` pair per axis."""
        items = tuple(padding)
        if items and all(isinstance(p, int) for p in items):
            flat = tuple(int(p) for p in items)  # type: ignore[arg-type]
            if len(flat) % 2 or len(flat) > 2 * self.ndim:
                raise ShapeError(f"pad of shape {self.shape}: the flat padding {flat} needs an even length of at "
                                 f"most {2 * self.ndim} (left, right pairs from the last axis)")
            pairs = [(flat[2 * i], flat[2 * i + 1]) for i in range(len(flat) // 2)][::-1]
            return ((0, 0),) * (self.ndim - len(pairs)) + tuple(pairs)
        if len(items) != self.ndim or not all(p is None or (isinstance(p, (tuple, list)) and len(p) == 2)
                                              for p in items):
            raise ShapeError(f"pad of shape {self.shape} needs one (before, after) pair per axis or a flat "
                             f"(left, right, ...) sequence of ints, got {padding!r}")
        return tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in items)  # type: ignore[index]

    def _pad_zeros(self, pairs: tuple[tuple[int, int], ...]) -> Self:
        """Zero padding (one pair per axis), negative amounts cutting: a SHRINK then a PAD."""
        for n, (b, a) in zip(self.shape, pairs, strict=True):
            if n + b + a < 0 or -b > n or -a > n:
                raise ShapeError(f"pad of shape {self.shape} by {pairs}: cuts more than an axis holds")
        cut = tuple((max(-b, 0), n - max(-a, 0)) for n, (b, a) in zip(self.shape, pairs, strict=True))
        x = self.shrink(cut) if any(b < 0 or a < 0 for b, a in pairs) else self
        grow = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
        return x._move(Ops.PAD, grow) if any(b or a for b, a in grow) else x

    def _pad_axis(self, axis: int, before: int, after: int, mode: str) -> Self:
        """One axis padded by reflection, replication or wrapping, with PyTorch's limits on the amounts."""
        n = self.shape[axis]
        where = f"pad (mode {mode!r}) of shape {self.shape}: padding ({before}, {after}) of axis {axis}"
        if mode == "reflect" and (before >= n or after >= n):
            raise ValueError(f"{where} must be less than the axis size {n}")
        if mode == "circular" and (before > n or after > n):
            raise ValueError(f"{where} wraps around more than once (at most the axis size {n})")
        if mode == "replicate" and n == 0:
            raise ValueError(f"{where}: an empty axis has no edge to replicate")
        if mode == "circular":  # three copies side by side, cut around the middle one: a view
            return self.repeat(*(3 if i == axis else 1 for i in range(self.ndim)))._narrow(axis, n - before,
                                                                                           2 * n + after)
        if mode == "reflect":
            left, right = self._narrow(axis, 1, before + 1), self._narrow(axis, n - 1 - after, n - 1)
            left, right = left.flip(axis), right.flip(axis)
        else:
            left = self._narrow(axis, 0, 1).expand(*(before if i == axis else -1 for i in range(self.ndim)))
            right = self._narrow(axis, n - 1, n).expand(*(after if i == axis else -1 for i in range(self.ndim)))
        return left.cat(self, right, dim=axis)

    def _narrow(self, axis: int, start: int, end: int) -> Self:
        """Elements start..end-1 of one axis (a SHRINK)."""
        return self.shrink(tuple((start, end) if i == axis else None for i in range(self.ndim)))

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

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
        """Axis `dim` split into `sizes` (one of them may be -1), the inverse of flatten."""
        axis = self._axis(dim, "unflatten")
        dims = tuple(sizes)
        if not dims:
            raise ShapeError(f"unflatten of shape {self.shape}: sizes must not be empty")
        n = self.shape[axis]
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            dims = tuple(n // known if d == -1 and known else d for d in dims)
        if math.prod(dims) != n or any(d < 0 for d in dims):
            raise ShapeError(f"unflatten of shape {self.shape}: sizes {tuple(sizes)} do not multiply to the size "
                             f"{n} of axis {dim}")
        return self.reshape(*self.shape[:axis], *dims, *self.shape[axis + 1:])

    def repeat(self, *repeats: int | Sequence[int]) -> Self:
        """The whole tensor tiled `repeats[i]` times along axis i (extra leading repeats add axes), like
        PyTorch's `repeat` (NumPy's `tile`): each axis gets a new size-`r` axis before it, EXPANDed, then merged."""
        reps = _dims(repeats)  # type: ignore[arg-type]
        if len(reps) < self.ndim or any(type(r) is not int or r < 0 for r in reps):
            raise ShapeError(f"repeat of shape {self.shape} by {reps}: give one count >= 0 per axis (at least "
                             f"{self.ndim}; extra ones add leading axes)")
        base = (1,) * (len(reps) - self.ndim) + self.shape
        pairs = tuple(x for n in base for x in (1, n))
        tiled = tuple(x for r, n in zip(reps, base, strict=True) for x in (r, n))
        return self.reshape(pairs).expand(tiled).reshape(tuple(r * n for r, n in zip(reps, base, strict=True)))

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> Self:
        """Each element repeated `repeats` times in place along `dim` (the flattened tensor when None)."""
        if type(repeats) is not int or repeats < 0:
            raise ShapeError(f"repeat_interleave of shape {self.shape}: repeats {repeats!r} must be an int >= 0")
        x, axis = (self.flatten(), 0) if dim is None else (self, self._axis(dim, "repeat_interleave"))
        shape = x.shape
        wide = x.reshape(*shape[:axis + 1], 1, *shape[axis + 1:]).expand(*shape[:axis + 1], repeats,
                                                                          *shape[axis + 1:])
        return wide.reshape(*shape[:axis], shape[axis] * repeats, *shape[axis + 1:])

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Self:
        """Elements shifted `shifts` places along `dims`, wrapping around (the flattened tensor when dims is None).

        Each axis is a view: two copies side by side (repeat), cut at `n - shift`."""
        if dims is None:
            if not isinstance(shifts, int):
                raise ShapeError(f"roll of shape {self.shape}: without dims, shifts must be one int, got {shifts!r}")
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shift_list = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dim_list = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shift_list) != len(dim_list):
            raise ShapeError(f"roll of shape {self.shape}: {len(shift_list)} shifts {shift_list} for "
                             f"{len(dim_list)} dims {dim_list}; give one shift per dim")
        x = self
        for shift, dim in zip(shift_list, dim_list, strict=True):
            axis = self._axis(dim, "roll")
            n = x.shape[axis]
            if n == 0 or shift % n == 0:
                continue
            s = shift % n
            x = x.repeat(*(2 if i == axis else 1 for i in range(x.ndim)))._narrow(axis, n - s, 2 * n - s)
        return x

    def cat(self, *others: Self, dim: int = 0) -> Self:
        """The tensors joined along `dim` (`a.cat(b, c)` or `Tensor.cat(a, b, c, dim=1)`); dtypes promote.

        Each piece is zero-PADded to the full length and the pieces are ADDed (OR for bool): a few pieces fuse
        into their consumer's kernel as gated loads, and the scheduler writes a cat of many pieces slice by slice
        into one buffer (docs/scheduler.md, rule 6), so the graph stays the same whatever the count."""
        tensors = (self, *others)
        axis = self._axis(dim, "cat")
        for t in others:
            if not isinstance(t, LazyTensor):
                raise TypeError(f"cat: expected tensors, got {type(t).__name__}")
            if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape, strict=True))
                                          if i != axis):
                raise ShapeError(f"cat along dim {dim} of shapes {', '.join(str(x.shape) for x in tensors)}: "
                                 f"all sizes but axis {axis} must match")
            if t.device != self.device:
                raise ValueError(f"cat: tensors are on different devices ({self.device} and {t.device})")
        dt = result_dtype(*(t.dtype for t in tensors))
        total = sum(t.shape[axis] for t in tensors)
        result: Self | None = None
        start = 0
        for t in tensors:
            n = t.shape[axis]
            if n == 0 and result is not None:
                continue
            piece = t._cast_to(dt)._pad_zeros(tuple((start, total - start - n) if i == axis else (0, 0)
                                                    for i in range(self.ndim)))
            result = piece if result is None else result._alu(Ops.OR if dt.is_bool else Ops.ADD, piece)
            start += n
        assert result is not None
        return result

    def stack(self, *others: Self, dim: int = 0) -> Self:
        """The tensors (all of one shape) stacked along a new axis `dim`."""
        tensors = (self, *others)
        for t in others:
            if t.shape != self.shape:
                raise ShapeError(f"stack of shapes {', '.join(str(x.shape) for x in tensors)}: all tensors need "
                                 "the same shape")
        axis = self._axis(dim, "stack", self.ndim + 1)
        first, *rest = (t.unsqueeze(axis) for t in tensors)
        return first.cat(*rest, dim=axis)

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        """Views of consecutive pieces along `dim`: of `sizes` each (the last may be smaller), or of the listed
        sizes, which must add up to the axis size."""
        axis = self._axis(dim, "split")
        n = self.shape[axis]
        if isinstance(sizes, int):
            if sizes < 0 or (sizes == 0 and n):
                raise ShapeError(f"split of shape {self.shape}: split size {sizes} must be > 0")
            lengths = [min(sizes, n - i) for i in range(0, n, sizes)] if n else [0]
        else:
            lengths = list(sizes)
            if sum(lengths) != n or any(type(s) is not int or s < 0 for s in lengths):
                raise ShapeError(f"split of shape {self.shape}: sizes {tuple(lengths)} must be ints >= 0 adding up "
                                 f"to the size {n} of axis {dim}")
        starts = [sum(lengths[:i]) for i in range(len(lengths))]
        return tuple(self._narrow(axis, s, s + length) for s, length in zip(starts, lengths, strict=True))

    def chunk(self, chunks: int, dim: int = 0) -> list[Self]:
        """At most `chunks` views of equal size (ceil(n / chunks)) along `dim`, the last possibly smaller."""
        if type(chunks) is not int or chunks < 1:
            raise ShapeError(f"chunk of shape {self.shape}: chunks {chunks!r} must be an int >= 1")
        n = self.shape[self._axis(dim, "chunk")]
        if n == 0:
            return [self] * chunks
        return list(self.split(-(-n // chunks), dim))

    def meshgrid(self, *others: Self, indexing: str = "ij") -> tuple[Self, ...]:
        """Coordinate grids of 1-D (or 0-d) tensors: output i holds tensor i's values along axis i ("ij") or, for
        the first two, swapped ("xy", Cartesian), broadcast to the full grid."""
        if indexing not in ("ij", "xy"):
            raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
        tensors = (self, *others)
        if any(t.ndim > 1 for t in tensors):
            raise ShapeError(f"meshgrid of shapes {', '.join(str(t.shape) for t in tensors)}: tensors must be "
                             "0-d or 1-d")
        sizes = [t.numel() for t in tensors]
        order = list(range(len(tensors)))
        if indexing == "xy" and len(tensors) > 1:
            order[0], order[1] = 1, 0
        grid = tuple(sizes[i] for i in order)
        out = []
        for i, t in enumerate(tensors):
            at = order.index(i)
            out.append(t.reshape(tuple(sizes[i] if j == at else 1 for j in range(len(grid)))).expand(grid))
        return tuple(out)

    def diag(self) -> Self:
        """A 1-D tensor as the diagonal of a square matrix (zeros elsewhere); a matrix gives its diagonal."""
        if self.ndim == 2:
            return self.diagonal()
        if self.ndim != 1:
            raise ShapeError(f"diag of shape {self.shape}: needs a 1-D tensor (or a matrix)")
        n = self.shape[0]
        # rows (x_i, 0 x n) laid end to end put x_i at i*(n+1): the diagonal of the first n*n elements
        flat = self.reshape(n, 1)._pad_zeros(((0, 0), (0, n))).flatten()
        return flat.shrink(((0, n * n),)).reshape(n, n)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
        """The diagonal of the (dim1, dim2) planes as a new last axis, `offset` above (> 0) or below the main one."""
        a, b = self._axis(dim1, "diagonal"), self._axis(dim2, "diagonal")
        if a == b:
            raise ShapeError(f"diagonal of shape {self.shape}: dim1 and dim2 are the same axis {a}")
        rest = [i for i in range(self.ndim) if i not in (a, b)]
        x = self.permute(*rest, a, b)
        rows, cols = x.shape[-2:]
        length = max(min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols), 0)
        r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
        if length == 0:
            r0, c0 = 0, 0
        x = x.shrink((*(None,) * len(rest), (r0, r0 + length), (c0, c0 + length)))
        lead = x.shape[:-2]
        # the length x length square flattened and re-cut into rows of length+1: column 0 is the diagonal
        x = x.reshape(*lead, length * length)._pad_zeros((*((0, 0),) * len(lead), (0, length)))
        return x.reshape(*lead, length, length + 1)._narrow(len(lead) + 1, 0, 1).reshape(*lead, length)

    def unfold(self, dim: int, size: int, step: int) -> Self:
        """PyTorch's `Tensor.unfold`: axis `dim` replaced by the windows' count, the window (`size` elements,
        `step` apart) appended as the last axis. A view built by `_pool`."""
        axis = self._axis(dim, "unfold")
        n = self.shape[axis] if self.ndim else 1
        if type(size) is not int or type(step) is not int or size < 0 or step < 1 or size > n:
            raise ShapeError(f"unfold of shape {self.shape}: size {size!r} must be in 0..{n} (the size of axis "
                             f"{dim}) and step {step!r} >= 1")
        if self.ndim == 0:
            return self.reshape(1)
        count = (n - size) // step + 1
        if size == 0:
            empty = self.flatten()._narrow(0, 0, 0)
            return empty.reshape(*self.shape[:axis], count, *self.shape[axis + 1:], 0)
        last = self.ndim - 1
        moved = self.transpose(axis, last) if axis != last else self
        windows = moved._pool((size,), step)  # (..., count, size) with the axis last
        return windows.transpose(axis, last) if axis != last else windows

    # ---- sliding windows --------------------------------------------------------------------------------------
    def _pool(self, k_: tuple[int, ...], stride: int | tuple[int, ...] = 1,
              dilation: int | tuple[int, ...] = 1) -> Self:
        """The sliding windows of the last `len(k_)` axes as a view of shape `(*batch, *out, *k_)`.

        Element `[..., o, j]` is `x[..., o*stride + j*dilation]`, and `out = (n - dilation*(k-1) - 1)//stride + 1`.
        Built from movement ops only (no copy), so conv, pooling, cumsum and unfold read the input in place.
        Each axis is done by `_window_axis`; the per-axis `(k, out)` pairs are then permuted into place."""
        dims = len(k_)
        if dims > self.ndim or dims == 0:
            raise ShapeError(f"_pool: {dims} window sizes {k_} for a tensor of shape {self.shape}: need between 1 "
                             f"and {self.ndim} spatial axes")
        strides = _per_axis(stride, dims, "stride", "_pool")
        dilations = _per_axis(dilation, dims, "dilation", "_pool")
        if any(type(k) is not int or k < 1 for k in k_):
            raise ShapeError(f"_pool: window sizes {k_} must be ints >= 1")
        batch = self.ndim - dims
        x = self
        for i, (k, s, d) in enumerate(zip(k_, strides, dilations, strict=True)):
            x = x._window_axis(batch + 2 * i, k, s, d)  # axis becomes (k, out) at the same place
        order = (*range(batch), *(batch + 2 * i + 1 for i in range(dims)), *(batch + 2 * i for i in range(dims)))
        return x.permute(order)

    def _window_axis(self, axis: int, k: int, s: int, d: int) -> Self:
        """Axis `axis` (size n) replaced by two axes `(k, out)` holding `x[o*s + j*d]` at `[j, o]`.

        The trick: trim or zero-pad the axis to `m = d*(k-1) + out*s`, repeat it k times (EXPAND of a new axis),
        flatten the repeats and re-cut them into rows of `m + d`: row j then starts `j*d` further into its copy, so
        its first `out*s` elements are `x[j*d : j*d + out*s]`, never crossing into the next copy. Keeping every
        s-th of those (reshape to `(out, s)`, take column 0) gives the strided windows. Padded zeros are never read."""
        n = self.shape[axis]
        out = (n - d * (k - 1) - 1) // s + 1
        if out < 0 or (out == 0 and n != 0):
            raise ShapeError(f"_pool: window {k} with dilation {d} ({d * (k - 1) + 1} elements) does not fit axis "
                             f"{axis} of size {n} (tensor of shape {self.shape}); use a smaller window or pad first")
        out = max(out, 0)
        pre, post = self.shape[:axis], self.shape[axis + 1:]
        m = d * (k - 1) + out * s
        x = self.pad(tuple((0, m - n) if i == axis else None for i in range(self.ndim)))  # negative amounts trim
        x = x.reshape(*pre, 1, m, *post).expand(*pre, k, m, *post).reshape(*pre, k * m, *post)
        x = x.pad(tuple((0, k * d) if i == axis else None for i in range(x.ndim)))
        x = x.reshape(*pre, k, m + d, *post)
        x = x.shrink(tuple((0, out * s) if i == axis + 1 else None for i in range(x.ndim)))
        if s == 1:
            return x
        x = x.reshape(*pre, k, out, s, *post)
        x = x.shrink(tuple((0, 1) if i == axis + 2 else None for i in range(x.ndim)))
        return x.reshape(*pre, k, out, *post)

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

"""Movement ops: views that change how a tensor is read, never its values.

Each is one IR movement op (RESHAPE PERMUTE EXPAND PAD SHRINK FLIP, docs/ir.md §4.3) or a few of them; the scheduler
turns them into index math, so no view copies memory. Basic indexing (indexing.py) is built from them: an int is a
SHRINK to one element then a RESHAPE dropping the axis, a strided slice a SHRINK + PAD + RESHAPE that keeps every
`step`-th element, a negative step a FLIP first.
"""


from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, TypeAlias

from plygrad.frontend import core
from plygrad.frontend.errors import ArgumentValueError
from plygrad.frontend.lazy import LazyTensor, Scalar, movement
from plygrad.frontend.symbolic import bound_shape, bound_value, check_size, is_sym
from plygrad.ir import Ops, ShapeError, dtypes, result_dtype
from plygrad.ir.shape import dim_prod, dim_sub, dim_text, is_symbolic, shape_text

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

Pad: TypeAlias = "tuple[int, int] | None"


PAD_MODES = ("constant", "reflect", "replicate", "circular")
_JUST_INT: Final = frozenset({int})


def _dims(shape: tuple[int, ...] | tuple[Sequence[int]]) -> tuple[int, ...]:
    """Accept both `reshape(2, 3)` and `reshape((2, 3))`."""
    if len(shape) == 1 and not isinstance(shape[0], int) and not is_sym(shape[0]):  # a symbolic size is one size
        return tuple(shape[0])
    return tuple(shape)  # type: ignore[arg-type]


def ints_per_axis(value: int | Sequence[int], count: int, what: str, op: str) -> tuple[int, ...]:
    """An int or one int per axis, as `count` ints >= 1."""
    values = (value,) * count if isinstance(value, int) else tuple(value)
    if len(values) != count or any(type(v) is not int or v < 1 for v in values):
        raise ShapeError(f"{op}: {what} {value!r} must be an int >= 1 or {count} of them")
    return values


def _move(x: Tensor, op: Ops, arg: object) -> Tensor:
    return x._new(movement(x.uop, op, arg))


def reshape(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    """A view with another shape of the same number of elements; one size may be -1 (inferred)."""
    dims = _dims(shape)  # type: ignore[arg-type]
    if not _JUST_INT.issuperset(map(type, dims)) or is_symbolic(x.shape):  # C-level checks: reshape is hot
        return _reshape_symbolic(x, dims)
    if sum(d == -1 for d in dims) > 1 or any(type(d) is not int or d < -1 for d in dims):
        raise ShapeError(f"reshape of shape {x.shape} to {dims}: sizes must be ints >= 0, at most one -1")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or x.numel() % known:
            raise ShapeError(f"reshape of shape {x.shape} ({x.numel()} elements) to {dims}: "
                             "the -1 cannot be inferred")
        dims = tuple(x.numel() // known if d == -1 else d for d in dims)
    if math.prod(dims) != x.numel():
        raise ShapeError(f"reshape of shape {x.shape} ({x.numel()} elements) to {dims} "
                         f"({math.prod(dims)} elements): the element counts must match")
    return x if dims == x.shape else _move(x, Ops.RESHAPE, dims)


def _reshape_symbolic(x: Tensor, dims: tuple[int, ...]) -> Tensor:
    """reshape where a size is symbolic: element counts must match at the variables' bound values."""
    if -1 in dims:
        rest = [d for d in dims if d != -1]
        known, total = math.prod(bound_shape(rest)), math.prod(bound_shape(x.shape))
        if dims.count(-1) > 1 or known == 0 or total % known:
            raise ShapeError(f"reshape of shape {shape_text(x.shape)} to {shape_text(dims)}: the -1 cannot be inferred")
        dims = tuple(sym_size(x.shape, rest) if d == -1 else d for d in dims)
    for d in dims:
        if is_sym(d):
            check_size(d, "reshape")
        elif type(d) is not int or d < 0:
            raise ShapeError(f"reshape of shape {shape_text(x.shape)} to {shape_text(dims)}: sizes must be ints >= 0 "
                             "or symbolic sizes")
    have, want = math.prod(bound_shape(x.shape)), math.prod(bound_shape(dims))
    if have != want:
        raise ShapeError(f"reshape of shape {shape_text(x.shape)} ({have} elements at the bound values) to "
                         f"{shape_text(dims)} ({want} elements): the element counts must match")
    return x if dims == x.shape else _move(x, Ops.RESHAPE, dims)


def sym_size(shape: tuple[int, ...], rest: Sequence[int]) -> int:
    """The size a -1 stands for beside `rest` in a reshape of `shape`, where sizes are expressions: sizes of
    `rest` found in `shape` cancel, and what is left must divide exactly."""
    left, right = [*shape], [*rest]
    for d in rest:
        if d in left:
            left.remove(d)
            right.remove(d)
    int_left = math.prod(d for d in left if not is_sym(d))
    if any(is_sym(d) for d in right) or math.prod(right) == 0 or int_left % math.prod(right):
        raise ShapeError(f"reshape of shape {shape_text(shape)}: a -1 beside sizes {shape_text(tuple(rest))} cannot "
                         "be inferred symbolically")
    found: int = dim_prod([int_left // math.prod(right), *[d for d in left if is_sym(d)]])
    return found


def view(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    return x.reshape(*shape)


def permute(x: Tensor, *order: int | Sequence[int]) -> Tensor:
    """The axes reordered: result axis i is source axis order[i]."""
    axes = tuple(x._axis(a, "permute") for a in _dims(order))  # type: ignore[arg-type]
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"permute of shape {x.shape}: {_dims(order)} is not a permutation "  # type: ignore[arg-type]
                         f"of {x.ndim} axes")
    return x if axes == tuple(range(x.ndim)) else _move(x, Ops.PERMUTE, axes)


def expand(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    """Size-1 axes repeated to `shape` (new leading axes allowed; -1 keeps a size)."""
    dims = _dims(shape)  # type: ignore[arg-type]
    if len(dims) < x.ndim:
        raise ShapeError(f"expand of shape {x.shape} to {dims}: the target has fewer axes")
    lead = len(dims) - x.ndim
    target = tuple(x.shape[i - lead] if d == -1 and i >= lead else d for i, d in enumerate(dims))
    for i, (have, want) in enumerate(zip(x.shape, target[lead:], strict=True)):
        if have not in (1, want):
            raise ShapeError(f"expand of shape {x.shape} to {dims}: axis {i} has size {have}; "
                             "only size-1 axes expand")
    return x._broadcast_to(target)


def pad(t: Tensor, padding: Sequence[Pad] | Sequence[int], mode: str = "constant", value: Scalar = 0.0) -> Tensor:
    """The tensor grown at both ends of axes, like PyTorch's `F.pad` and tinygrad's `pad`.

    `padding` is either one `(before, after)` pair (or None) per axis, or PyTorch's flat form
    `(left, right, top, bottom, ...)` that starts from the last axis. Negative amounts cut instead. `mode`:
    "constant" fills with `value`; "reflect" mirrors without repeating the edge; "replicate" repeats the edge;
    "circular" wraps around. Negative amounts cut after reflecting or replicating the whole axis, but before
    wrapping, which is what PyTorch computes."""
    pairs = _pad_pairs(t, padding)
    if mode not in PAD_MODES:
        raise ArgumentValueError(f"pad: mode {mode!r} is not one of {', '.join(PAD_MODES)}")
    if mode != "constant" and any(is_sym(v) for p in pairs for v in p):
        raise ArgumentValueError(f"pad: symbolic amounts need mode 'constant', got {mode!r}")
    if mode == "constant":
        zeros = pad_zeros(t, pairs)
        if (value == 0 and math.copysign(1.0, value) > 0) or all(not is_sym(b) and not is_sym(a) and b <= 0
                                                                 and a <= 0 for b, a in pairs):
            return zeros
        inside = pad_zeros(t._const(True, dtypes.bool), pairs)
        return inside.where(zeros, value)._cast_to(t.dtype)
    cut = tuple((min(b, 0), min(a, 0)) for b, a in pairs)
    x = pad_zeros(t, cut) if mode == "circular" else t
    for axis, (before, after) in enumerate(pairs):
        if before > 0 or after > 0:
            x = _pad_axis(x, axis, max(before, 0), max(after, 0), mode)
    return pad_zeros(x, cut) if mode != "circular" else x


def _pad_pairs(x: Tensor, padding: Sequence[Pad] | Sequence[int]) -> tuple[tuple[int, int], ...]:
    """`padding` in either form as one `(before, after)` pair per axis."""
    items = tuple(padding)
    if items and all(isinstance(p, int) for p in items):
        flat = tuple(int(p) for p in items)  # type: ignore[arg-type]
        if len(flat) % 2 or len(flat) > 2 * x.ndim:
            raise ShapeError(f"pad of shape {x.shape}: the flat padding {flat} needs an even length of at "
                             f"most {2 * x.ndim} (left, right pairs from the last axis)")
        pairs = [(flat[2 * i], flat[2 * i + 1]) for i in range(len(flat) // 2)][::-1]
        return ((0, 0),) * (x.ndim - len(pairs)) + tuple(pairs)
    if len(items) != x.ndim or not all(p is None or (isinstance(p, (tuple, list)) and len(p) == 2)
                                          for p in items):
        raise ShapeError(f"pad of shape {x.shape} needs one (before, after) pair per axis or a flat "
                         f"(left, right, ...) sequence of ints, got {padding!r}")
    return tuple((0, 0) if p is None else (_amount(p[0]), _amount(p[1])) for p in items)  # type: ignore[index]


def pad_zeros(t: Tensor, pairs: tuple[tuple[int, int], ...]) -> Tensor:
    """Zero padding (one pair per axis), negative amounts cutting: a SHRINK then a PAD."""
    if any(is_sym(v) for p in pairs for v in p):
        if any(bound_value(v) < 0 for p in pairs for v in p):
            raise ShapeError(f"pad of shape {shape_text(t.shape)} by {shape_text(pairs)}: a symbolic amount must "
                             "not be negative")
        return _move(t, Ops.PAD, pairs)
    for n, (b, a) in zip(bound_shape(t.shape), pairs, strict=True):
        if n + b + a < 0 or -b > n or -a > n:
            raise ShapeError(f"pad of shape {t.shape} by {pairs}: cuts more than an axis holds")
    cut = tuple((max(-b, 0), dim_sub(n, max(-a, 0))) for n, (b, a) in zip(t.shape, pairs, strict=True))
    x = t.shrink(cut) if any(b < 0 or a < 0 for b, a in pairs) else t
    grow = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
    return _move(x, Ops.PAD, grow) if any(b or a for b, a in grow) else x


def _pad_axis(x: Tensor, axis: int, before: int, after: int, mode: str) -> Tensor:
    """One axis padded by reflection, replication or wrapping, with PyTorch's limits on the amounts."""
    n = x.shape[axis]
    where = f"pad (mode {mode!r}) of shape {x.shape}: padding ({before}, {after}) of axis {axis}"
    if mode == "reflect" and (before >= n or after >= n):
        raise ArgumentValueError(f"{where} must be less than the axis size {n}")
    if mode == "circular" and (before > n or after > n):
        raise ArgumentValueError(f"{where} wraps around more than once (at most the axis size {n})")
    if mode == "replicate" and n == 0:
        raise ArgumentValueError(f"{where}: an empty axis has no edge to replicate")
    if mode == "circular":  # three copies side by side, cut around the middle one: a view
        return narrow_axis(x.repeat(*(3 if i == axis else 1 for i in range(x.ndim))), axis, n - before,
                                                                                      2 * n + after)
    if mode == "reflect":
        left, right = narrow_axis(x, axis, 1, before + 1), narrow_axis(x, axis, n - 1 - after, n - 1)
        left, right = left.flip(axis), right.flip(axis)
    else:
        left = narrow_axis(x, axis, 0, 1).expand(*(before if i == axis else -1 for i in range(x.ndim)))
        right = narrow_axis(x, axis, n - 1, n).expand(*(after if i == axis else -1 for i in range(x.ndim)))
    return left.cat(x, right, dim=axis)


def narrow_axis(x: Tensor, axis: int, start: int, end: int) -> Tensor:
    """Elements start..end-1 of one axis (a SHRINK)."""
    return x.shrink(tuple((start, end) if i == axis else None for i in range(x.ndim)))


def shrink(x: Tensor, bounds: Sequence[Pad]) -> Tensor:
    """The sub-box `start:end` of each axis: one `(start, end)` pair (or None for the whole axis) per axis."""
    if len(bounds) != x.ndim:
        raise ShapeError(f"shrink of shape {x.shape} needs one (start, end) pair per axis, got {bounds!r}")
    try:  # ints (the common case, checked at C speed); a symbolic size or amount raises TypeError here
        pairs = tuple((0, n) if p is None else (int(p[0]), int(p[1])) for n, p in zip(x.shape, bounds, strict=True))
        bad = next((i for i, (n, (a, b)) in enumerate(zip(x.shape, pairs, strict=True)) if not 0 <= a <= b <= n), None)
    except TypeError:
        pairs = tuple((0, n) if p is None else (_amount(p[0]), _amount(p[1]))
                      for n, p in zip(x.shape, bounds, strict=True))
        bad = next((i for i, (n, (a, b)) in enumerate(zip(x.shape, pairs, strict=True))
                    if not 0 <= bound_value(a) <= bound_value(b) <= bound_value(n)), None)
    if bad is not None:
        start, end = pairs[bad]
        raise ShapeError(f"shrink of shape {shape_text(x.shape)}: axis {bad} range ({dim_text(start)}, "
                         f"{dim_text(end)}) is outside 0..{dim_text(x.shape[bad])}")
    if all(p == (0, n) for p, n in zip(pairs, x.shape, strict=True)):
        return x
    return _move(x, Ops.SHRINK, pairs)


def _amount(v: object) -> int:
    """An int amount, or a symbolic one (checked)."""
    if is_sym(v):
        check_size(v, "shrink/pad")
        return v  # type: ignore[return-value]
    return int(v)  # type: ignore[call-overload, no-any-return]


def flip(x: Tensor, axis: int | Sequence[int]) -> Tensor:
    """The listed axes reversed."""
    axes = x._axes(axis, "flip")
    return _move(x, Ops.FLIP, tuple(i in axes for i in range(x.ndim))) if axes else x


def transpose(x: Tensor, dim0: int = 1, dim1: int = 0) -> Tensor:
    """Two axes swapped (default: the first two, which is `.T` of a matrix)."""
    a, b = x._axis(dim0, "transpose"), x._axis(dim1, "transpose")
    order = list(range(x.ndim))
    order[a], order[b] = order[b], order[a]
    return x.permute(order)


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Axes start_dim..end_dim merged into one."""
    if x.ndim == 0:
        return x.reshape(1)
    start, end = x._axis(start_dim, "flatten"), x._axis(end_dim, "flatten")
    if start > end:
        raise ShapeError(f"flatten of shape {x.shape}: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = x.shape
    return x.reshape(*shape[:start], math.prod(shape[start:end + 1]), *shape[end + 1:])


def squeeze(x: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """Size-1 axes removed (all of them, or those of `dim` that have size 1, like PyTorch)."""
    axes = x._axes(dim, "squeeze")
    return x.reshape(tuple(n for i, n in enumerate(x.shape) if not (i in axes and n == 1)))


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """A size-1 axis inserted at `dim` (negative counts from the end of the result)."""
    axis = x._axis(dim, "unsqueeze", x.ndim + 1)
    return x.reshape((*x.shape[:axis], 1, *x.shape[axis:]))


def unflatten(x: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    """Axis `dim` split into `sizes` (one of them may be -1), the inverse of flatten."""
    axis = x._axis(dim, "unflatten")
    dims = tuple(sizes)
    if not dims:
        raise ShapeError(f"unflatten of shape {x.shape}: sizes must not be empty")
    n = x.shape[axis]
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        dims = tuple(n // known if d == -1 and known else d for d in dims)
    if math.prod(dims) != n or any(d < 0 for d in dims):
        raise ShapeError(f"unflatten of shape {x.shape}: sizes {tuple(sizes)} do not multiply to the size "
                         f"{n} of axis {dim}")
    return x.reshape(*x.shape[:axis], *dims, *x.shape[axis + 1:])


def repeat(t: Tensor, *repeats: int | Sequence[int]) -> Tensor:
    """The whole tensor tiled `repeats[i]` times along axis i (extra leading repeats add axes), like
    PyTorch's `repeat` (NumPy's `tile`): each axis gets a new size-`r` axis before it, EXPANDed, then merged."""
    reps = _dims(repeats)  # type: ignore[arg-type]
    if len(reps) < t.ndim or any(type(r) is not int or r < 0 for r in reps):
        raise ShapeError(f"repeat of shape {t.shape} by {reps}: give one count >= 0 per axis (at least "
                         f"{t.ndim}; extra ones add leading axes)")
    base = (1,) * (len(reps) - t.ndim) + t.shape
    pairs = tuple(x for n in base for x in (1, n))
    tiled = tuple(x for r, n in zip(reps, base, strict=True) for x in (r, n))
    return t.reshape(pairs).expand(tiled).reshape(tuple(r * n for r, n in zip(reps, base, strict=True)))


def repeat_interleave(t: Tensor, repeats: int, dim: int | None = None) -> Tensor:
    """Each element repeated `repeats` times in place along `dim` (the flattened tensor when None)."""
    if type(repeats) is not int or repeats < 0:
        raise ShapeError(f"repeat_interleave of shape {t.shape}: repeats {repeats!r} must be an int >= 0")
    x, axis = (t.flatten(), 0) if dim is None else (t, t._axis(dim, "repeat_interleave"))
    shape = x.shape
    wide = x.reshape(*shape[:axis + 1], 1, *shape[axis + 1:]).expand(*shape[:axis + 1], repeats,
                                                                      *shape[axis + 1:])
    return wide.reshape(*shape[:axis], shape[axis] * repeats, *shape[axis + 1:])


def roll(t: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Elements shifted `shifts` places along `dims`, wrapping around (the flattened tensor when dims is None).

    Each axis is a view: two copies side by side (repeat), cut at `n - shift`."""
    if dims is None:
        if not isinstance(shifts, int):
            raise ShapeError(f"roll of shape {t.shape}: without dims, shifts must be one int, got {shifts!r}")
        return t.flatten().roll(shifts, 0).reshape(t.shape)
    shift_list = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dim_list = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shift_list) != len(dim_list):
        raise ShapeError(f"roll of shape {t.shape}: {len(shift_list)} shifts {shift_list} for "
                         f"{len(dim_list)} dims {dim_list}; give one shift per dim")
    x = t
    for shift, dim in zip(shift_list, dim_list, strict=True):
        axis = t._axis(dim, "roll")
        n = x.shape[axis]
        if n == 0 or shift % n == 0:
            continue
        s = shift % n
        x = narrow_axis(x.repeat(*(2 if i == axis else 1 for i in range(x.ndim))), axis, n - s, 2 * n - s)
    return x


def cat(x: Tensor, *others: Tensor, dim: int = 0) -> Tensor:
    """The tensors joined along `dim` (`a.cat(b, c)` or `Tensor.cat(a, b, c, dim=1)`); dtypes promote.

    Each piece is zero-PADded to the full length and the pieces are ADDed (OR for bool): a few pieces fuse
    into their consumer's kernel as gated loads, and the scheduler writes a cat of many pieces slice by slice
    into one buffer (docs/scheduler.md, rule 6), so the graph stays the same whatever the count."""
    tensors = (x, *others)
    axis = x._axis(dim, "cat")
    for t in others:
        if not isinstance(t, LazyTensor):
            raise TypeError(f"cat: expected tensors, got {type(t).__name__}")
        if t.ndim != x.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, x.shape, strict=True))
                                      if i != axis):
            raise ShapeError(f"cat along dim {dim} of shapes {', '.join(str(x.shape) for x in tensors)}: "
                             f"all sizes but axis {axis} must match")
        if t.device != x.device:
            raise ArgumentValueError(f"cat: tensors are on different devices ({x.device} and {t.device})")
    dt = result_dtype(*(t.dtype for t in tensors))
    total = sum(t.shape[axis] for t in tensors)
    result: Tensor | None = None
    start = 0
    for t in tensors:
        n = t.shape[axis]
        if n == 0 and result is not None:
            continue
        piece = pad_zeros(t._cast_to(dt), tuple((start, total - start - n) if i == axis else (0, 0)
                                                for i in range(x.ndim)))
        result = piece if result is None else core.alu(result, Ops.OR if dt.is_bool else Ops.ADD, piece)
        start += n
    assert result is not None
    return result


def stack(x: Tensor, *others: Tensor, dim: int = 0) -> Tensor:
    """The tensors (all of one shape) stacked along a new axis `dim`."""
    tensors = (x, *others)
    for t in others:
        if t.shape != x.shape:
            raise ShapeError(f"stack of shapes {', '.join(str(x.shape) for x in tensors)}: all tensors need "
                             "the same shape")
    axis = x._axis(dim, "stack", x.ndim + 1)
    first, *rest = (t.unsqueeze(axis) for t in tensors)
    return first.cat(*rest, dim=axis)


def split(x: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Views of consecutive pieces along `dim`: of `sizes` each (the last may be smaller), or of the listed
    sizes, which must add up to the axis size."""
    axis = x._axis(dim, "split")
    n = x.shape[axis]
    if isinstance(sizes, int):
        if sizes < 0 or (sizes == 0 and n):
            raise ShapeError(f"split of shape {x.shape}: split size {sizes} must be > 0")
        lengths = [min(sizes, n - i) for i in range(0, n, sizes)] if n else [0]
    else:
        lengths = list(sizes)
        if sum(lengths) != n or any(type(s) is not int or s < 0 for s in lengths):
            raise ShapeError(f"split of shape {x.shape}: sizes {tuple(lengths)} must be ints >= 0 adding up "
                             f"to the size {n} of axis {dim}")
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    return tuple(narrow_axis(x, axis, s, s + length) for s, length in zip(starts, lengths, strict=True))


def chunk(x: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
    """At most `chunks` views of equal size (ceil(n / chunks)) along `dim`, the last possibly smaller."""
    if type(chunks) is not int or chunks < 1:
        raise ShapeError(f"chunk of shape {x.shape}: chunks {chunks!r} must be an int >= 1")
    n = x.shape[x._axis(dim, "chunk")]
    if n == 0:
        return [x] * chunks
    return list(x.split(-(-n // chunks), dim))


def meshgrid(x: Tensor, *others: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 1-D (or 0-d) tensors: output i holds tensor i's values along axis i ("ij") or, for
    the first two, swapped ("xy", Cartesian), broadcast to the full grid."""
    if indexing not in ("ij", "xy"):
        raise ArgumentValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    tensors = (x, *others)
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


def diag(x: Tensor) -> Tensor:
    """A 1-D tensor as the diagonal of a square matrix (zeros elsewhere); a matrix gives its diagonal."""
    if x.ndim == 2:
        return x.diagonal()
    if x.ndim != 1:
        raise ShapeError(f"diag of shape {x.shape}: needs a 1-D tensor (or a matrix)")
    n = x.shape[0]
    # rows (x_i, 0 x n) laid end to end put x_i at i*(n+1): the diagonal of the first n*n elements
    flat = pad_zeros(x.reshape(n, 1), ((0, 0), (0, n))).flatten()
    return flat.shrink(((0, n * n),)).reshape(n, n)


def diagonal(t: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the (dim1, dim2) planes as a new last axis, `offset` above (> 0) or below the main one."""
    a, b = t._axis(dim1, "diagonal"), t._axis(dim2, "diagonal")
    if a == b:
        raise ShapeError(f"diagonal of shape {t.shape}: dim1 and dim2 are the same axis {a}")
    rest = [i for i in range(t.ndim) if i not in (a, b)]
    x = t.permute(*rest, a, b)
    rows, cols = x.shape[-2:]
    length = max(min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols), 0)
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    if length == 0:
        r0, c0 = 0, 0
    x = x.shrink((*(None,) * len(rest), (r0, r0 + length), (c0, c0 + length)))
    lead = x.shape[:-2]
    # the length x length square flattened and re-cut into rows of length+1: column 0 is the diagonal
    x = pad_zeros(x.reshape(*lead, length * length), (*((0, 0),) * len(lead), (0, length)))
    return narrow_axis(x.reshape(*lead, length, length + 1), len(lead) + 1, 0, 1).reshape(*lead, length)


# ---- movement -----------------------------------------------------------------------------------------------
def _target_shape(x: Tensor, shape: int | Sequence[int | None] | None, rest: tuple[int | None, ...],
                  op: str) -> tuple[int, ...]:
    dims = (shape, *rest) if isinstance(shape, int) or shape is None else (*shape, *rest)
    if len(dims) != x.ndim:
        raise ShapeError(f"{op}: shape {dims} needs one size (or None to keep) per axis of shape {x.shape}")
    return tuple(n if d is None else d for d, n in zip(dims, x.shape, strict=True))


def pad_to(x: Tensor, shape: int | Sequence[int | None] | None, *args: int | None, value: Scalar = 0) -> Tensor:
    """Pad at the end of each axis up to `shape` (None keeps an axis), filling with `value` (tinygrad)."""
    target = _target_shape(x, shape, args, "pad_to")
    if any(t < n for t, n in zip(target, x.shape, strict=True)):
        raise ShapeError(f"pad_to: shape {target} is smaller than the tensor's {x.shape} on some axis; use "
                         "shrink_to to cut")
    if target == x.shape:
        return x
    return x.pad(tuple((0, t - n) for t, n in zip(target, x.shape, strict=True)), value=value)


def shrink_to(x: Tensor, shape: int | Sequence[int | None] | None, *args: int | None) -> Tensor:
    """The leading `shape[i]` elements of each axis (None keeps an axis) (tinygrad)."""
    target = _target_shape(x, shape, args, "shrink_to")
    return x.shrink(tuple((0, t) for t in target))

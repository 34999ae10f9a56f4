"""Indexing: `t[index]` (basic indexing as views, advanced indexing with tensors, lists and masks) and
`t[index] = value`; the gathers and scatters they share live in gather.py.

Gathers are built from primitive ops, tinygrad's way: an index compared with a counter `0..n-1` gives a one-hot
mask, `where(mask, x, 0)` and a sum over the axis collapse it, which the scheduler fuses and autograd differentiates
like any graph. Tensor indices are data, so they are not checked: negative values wrap once and a value still out
of range reads 0 / writes nothing (PyTorch raises); Python lists and arrays are checked eagerly (IndexError).
docs/frontend-internals.md, "Indexing", has the rest.
"""


from __future__ import annotations

import math
from collections.abc import Sequence
from types import EllipsisType
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np

from plygrad.frontend import core
from plygrad.frontend.errors import ArgumentValueError
from plygrad.frontend.lazy import LazyTensor, is_tensor
from plygrad.frontend.symbolic import is_sym
from plygrad.ir import DType, DTypeError, DTypeKind, Ops, ShapeError, UOp, broadcast_shapes, dtypes
from plygrad.ir.shape import dim_text, shape_text

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

AnyIndex: TypeAlias = "int | slice | EllipsisType | bool | LazyTensor | Sequence[Any] | np.ndarray[Any, Any] | None"


Basic: TypeAlias = "int | slice | None"


def along_axis(ndim: int, axis: int, pair: tuple[int, int]) -> tuple[tuple[int, int] | None, ...]:
    """A pad/shrink argument touching only `axis`."""
    return tuple(pair if i == axis else None for i in range(ndim))


def index_dtype(dtype: DType) -> DType:
    """Indices are compared in int32, or int64 when their dtype could hold values beyond int32."""
    wide = dtype.itemsize > 4 or (dtype.itemsize == 4 and dtype.kind is DTypeKind.UNSIGNED)
    return dtypes.int64 if wide else dtypes.int32


def _is_mask(item: LazyTensor | np.ndarray[Any, Any]) -> bool:
    return item.dtype.is_bool if isinstance(item, LazyTensor) else item.dtype.kind == "b"


def index_batch_shape(indices: Sequence[LazyTensor]) -> tuple[int, ...]:
    """The broadcast shape of the index tensors of one index (IndexError when they do not broadcast, like NumPy)."""
    try:
        return broadcast_shapes(*(i.shape for i in indices))
    except ShapeError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         f"{', '.join(str(i.shape) for i in indices)}") from None


Index: TypeAlias = "int | slice | EllipsisType | None"


# ---- index tensors ---------------------------------------------------------------------------------------
def as_index(x: Tensor, index: LazyTensor, size: int, op: str) -> Tensor:
    """`index` checked to hold integers, widened to int32/int64 and with negative values wrapped once."""
    if not is_tensor(index):
        raise TypeError(f"{op}: the index must be a Tensor, got {type(index).__name__}")
    if index.device != x.device:
        raise ArgumentValueError(f"{op}: the index is on {index.device} but the tensor is on {x.device}; "
                                 "move one with .to(device)")
    if index.dtype.is_float or index.dtype.is_bool:
        raise DTypeError(f"{op}: index tensors must have an integer dtype, got {index.dtype} "
                         f"(index shape {index.shape}); cast it with .cast(dtypes.int32)")
    idx = core.typed_like(x, index._cast_to(index_dtype(index.dtype)))
    if index.dtype.kind is DTypeKind.UNSIGNED:
        return idx
    return idx.lt(0).where(idx.add(size), idx)


def _one_hot_mask(x: Tensor, axes: Sequence[int], indices: Sequence[Tensor]) -> tuple[tuple[int, ...], Tensor]:
    """The broadcast index shape B and the bool mask of shape B + N (N: the sizes of `axes`) that is true where
    every index of a batch position equals that position's coordinates along the indexed axes."""
    batch = index_batch_shape(indices)
    sizes = tuple(x.shape[a] for a in axes)
    k = len(sizes)
    mask: Tensor | None = None
    for j, (n, idx) in enumerate(zip(sizes, indices, strict=True)):
        column = idx._broadcast_to(batch).reshape(*batch, *(1,) * k)
        positions = core.int_range(x, n).reshape(*(1,) * len(batch), *(n if i == j else 1 for i in range(k)))
        hit = column.eq(positions)
        mask = hit if mask is None else mask.logical_and(hit)
    assert mask is not None
    return batch, mask._broadcast_to((*batch, *sizes))


def one_hot_sum(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    """The sum over `axes` of a one-hot selection (`mask.where(values, 0)` with at most one true mask element
    along them): a plain REDUCE in the values' own dtype (OR for bool), exact since every other term is zero,
    so it is neither blocked nor widened like `sum` (reduce.py). Codegen turns such a REDUCE over an
    `index == position` test into a load at the index (codegen/gather.py): O(result), not O(result x axis)."""
    kept = tuple(a % x.ndim for a in axes)
    op = Ops.MAX if x.dtype.is_bool else Ops.ADD
    reduced = x._new(UOp(Ops.REDUCE, x.dtype, (x.uop,), (op, tuple(sorted(kept)))))
    return reduced.reshape(tuple(n for i, n in enumerate(x.shape) if i not in kept))


def result_order(n_rest: int, n_batch: int, place: int | None) -> list[int]:
    """Where the index dimensions B go among the other axes R of an indexed result (R + B order in, the
    result's order out): at `place` when the tensor indices sat side by side, else (None) in front."""
    rest, batch = list(range(n_rest)), list(range(n_rest, n_rest + n_batch))
    return batch + rest if place is None else rest[:place] + batch + rest[place:]


def _gather_axes(x: Tensor, axes: Sequence[int], indices: Sequence[Tensor], place: int | None) -> Tensor:
    """`self` read at the (broadcast) index tensors along `axes`: the axes not indexed (R) keep their order and
    the indices' broadcast shape (B) goes at `place` (in front for None). Both operands are laid out in the
    result's order before the sum, so the REDUCE writes the result directly (no copy after it)."""
    rest = [a for a in range(x.ndim) if a not in axes]
    batch, mask = _one_hot_mask(x, axes, indices)
    r_shape = tuple(x.shape[a] for a in rest)
    sizes = tuple(x.shape[a] for a in axes)
    full = (*r_shape, *batch, *sizes)
    order = result_order(len(rest), len(batch), place)
    order += list(range(len(full) - len(sizes), len(full)))
    values = x.permute(*rest, *axes).reshape(*r_shape, *(1,) * len(batch), *sizes)._broadcast_to(full)
    hit = mask.reshape(*(1,) * len(rest), *batch, *sizes)._broadcast_to(full)
    chosen = hit.permute(*order).where(values.permute(*order), 0)
    return one_hot_sum(chosen, tuple(range(len(full) - len(sizes), len(full))))._cast_to(x.dtype)


def scatter_axes(x: Tensor, axes: Sequence[int], indices: Sequence[Tensor], value: Tensor) -> Tensor:
    """`self` with `value` (in R + B order: the axes not indexed, then the indices' broadcast shape) written at
    the index positions along `axes`. Where several batch positions name one element the last one wins
    (PyTorch leaves that case undefined). Everything is laid out as self's axes + B, so each REDUCE (over B,
    the trailing axes) writes self's layout directly."""
    batch, mask = _one_hot_mask(x, axes, indices)
    if math.prod(batch) == 0:
        return x
    k, nb = x.ndim, len(batch)
    in_place = tuple(x.shape[a] if a in axes else 1 for a in range(k))  # N at the indexed axes, 1 elsewhere
    mask = mask.permute(*range(nb, nb + len(axes)), *range(nb)).reshape(*in_place, *batch)
    full = (*x.shape, *batch)
    order = core.int_range(x, math.prod(batch)).reshape(*(1,) * k, *batch)._broadcast_to(mask.shape)
    b_axes = tuple(range(k, k + nb))
    winner = mask.where(order, -1).max(b_axes, keepdim=True)  # the last batch position naming each element
    chosen = mask.logical_and(order.eq(winner._broadcast_to(mask.shape)))._broadcast_to(full)
    lifted = value._cast_to(x.dtype).reshape(*(1 if a in axes else n for a, n in enumerate(x.shape)),
                                                 *batch)._broadcast_to(full)
    written = one_hot_sum(chosen.where(lifted, 0), b_axes)._cast_to(x.dtype)
    hit = winner.reshape(in_place).ge(0)._broadcast_to(x.shape)
    return hit.where(written, x)


# ---- parsing an index -----------------------------------------------------------------------------------
def _index_item(x: Tensor, item: Any) -> Any:
    """One index item in a standard form: ints/slices/None/.../bools as they are, a Tensor checked, and
    lists and NumPy arrays as NumPy arrays (kept on the host so they can be checked before they are used)."""
    if item is None or item is Ellipsis or isinstance(item, (bool, int, slice)):
        return item
    if isinstance(item, np.integer):
        return int(item)
    if isinstance(item, np.bool_):
        return bool(item)
    if is_tensor(item):
        if item.device != x.device:
            raise ArgumentValueError(f"indexing: the index is on {item.device} but the tensor is on {x.device}; "
                                     "move one with .to(device)")
        if item.dtype.is_float:
            raise IndexError(f"tensors used as indices must be integer or bool tensors, got {item.dtype} "
                             f"(index shape {item.shape})")
        return item
    if isinstance(item, (list, tuple, np.ndarray)):
        array = np.asarray(item)
        if array.size == 0 and array.dtype.kind == "f":  # `t[[]]`: an empty list of indices
            array = array.astype(np.int64)
        if array.dtype.kind not in "biu":
            raise IndexError(f"index {item!r} of dtype {array.dtype} is not supported: lists and arrays used as "
                             "indices must hold ints or bools")
        return array
    raise IndexError(f"index {item!r} of type {type(item).__name__} is not supported: use ints, slices, None, "
                     "..., integer or bool tensors, or lists of them")


def parse_index(x: Tensor, index: AnyIndex | tuple[AnyIndex, ...]) -> tuple[list[Basic], dict[int, Tensor]]:
    """Split an index into basic items (ints, slices, None: `...` expanded, every axis covered) and the tensor
    indices, keyed by the position of the full slice (or new axis) that stands for each among the basic items.
    A bool mask becomes one integer index per axis it covers: its true positions, read back (the result's
    size depends on them, as in PyTorch)."""
    items = [_index_item(x, item) for item in (index if isinstance(index, tuple) else (index,))]
    if sum(item is Ellipsis for item in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")

    def axes_used(item: Any) -> int:
        if isinstance(item, (LazyTensor, np.ndarray)):
            return item.ndim if _is_mask(item) else 1
        return 1 if isinstance(item, (int, slice)) and not isinstance(item, bool) else 0

    count = sum(axes_used(item) for item in items)
    if count > x.ndim:
        raise IndexError(f"too many indices for a tensor of shape {x.shape}: {count} axes indexed")
    if not any(item is Ellipsis for item in items):
        items.append(Ellipsis)
    at = next(i for i, item in enumerate(items) if item is Ellipsis)
    items[at:at + 1] = [slice(None)] * (x.ndim - count)

    basic: list[Basic] = []
    tensors: dict[int, Tensor] = {}
    axis = 0
    for item in items:
        if isinstance(item, bool):  # PyTorch reads it as a 0-d mask: a new axis of size 1, kept or emptied
            tensors[len(basic)] = core.from_host(x, np.zeros((1 if item else 0,), np.int32))
            basic.append(None)
        elif isinstance(item, (LazyTensor, np.ndarray)) and _is_mask(item):
            for positions in _mask_positions(x, item, axis):
                tensors[len(basic)] = positions
                basic.append(None if item.ndim == 0 else slice(None))
            axis += item.ndim
        elif isinstance(item, np.ndarray):
            n = x.shape[axis]
            bad = item[(item < -n) | (item >= n)]
            if bad.size:
                raise IndexError(f"index {int(bad.flat[0])} is out of bounds for axis {axis} with size {n} "
                                 f"(tensor of shape {x.shape})")
            tensors[len(basic)] = core.from_host(x, item)
            basic.append(slice(None))
            axis += 1
        elif isinstance(item, LazyTensor):
            tensors[len(basic)] = core.typed_like(x, item)
            basic.append(slice(None))
            axis += 1
        else:
            basic.append(item)
            axis += 1 if item is not None else 0
    return basic, tensors


def _mask_positions(x: Tensor, mask: LazyTensor | np.ndarray[Any, Any], axis: int) -> list[Tensor]:
    """The coordinates where a bool mask over axes axis.. is true, one integer index tensor per axis."""
    covered = x.shape[axis:axis + mask.ndim]
    if tuple(mask.shape) != covered:
        raise IndexError(f"the shape of the mask {tuple(mask.shape)} does not match the shape {covered} of the "
                         f"indexed axes {axis}..{axis + mask.ndim - 1} (tensor of shape {x.shape})")
    values = mask if isinstance(mask, np.ndarray) else core.read_back(core.typed_like(x, mask))
    if mask.ndim == 0:
        return [core.from_host(x, np.zeros((1 if bool(values) else 0,), np.int32))]
    return [core.from_host(x, np.asarray(p)) for p in np.nonzero(values)]


def basic_view(x: Tensor, basic: list[Basic], tensors: dict[int, Tensor]) -> tuple[Tensor, list[int], list[Tensor]]:
    """The view the basic items select (movement.py's basic indexing) and, for each tensor index, the axis of that
    view it applies to."""
    view = _basic_getitem(x, tuple(basic))
    kept = [i for i, item in enumerate(basic) if not isinstance(item, int)]
    axes = [kept.index(position) for position in sorted(tensors)]
    sizes = [view.shape[a] for a in axes]
    indices = [as_index(view, tensors[p], n, "indexing") for p, n in zip(sorted(tensors), sizes, strict=True)]
    return view, axes, indices


def batch_position(axes: Sequence[int]) -> int | None:
    """Where the index dimensions go: at the first indexed axis when the tensor indices sit side by side,
    else (None) in front (NumPy's and PyTorch's rule; ints do not separate them in PyTorch)."""
    return axes[0] if axes[-1] - axes[0] == len(axes) - 1 else None


def _basic_getitem(t: Tensor, index: Index | tuple[Index, ...]) -> Tensor:
    """Basic indexing: ints (negative too), slices with any step, None (new axis) and one `...`."""
    items = index if isinstance(index, tuple) else (index,)
    for item in items:
        if not (item is None or item is Ellipsis or isinstance(item, (int, slice))) or isinstance(item, bool):
            raise TypeError(f"index {item!r} of type {type(item).__name__} is not supported: use ints, slices, "
                            "None or ... (tensor indexing comes later)")
    if sum(item is Ellipsis for item in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(isinstance(item, (int, slice)) for item in items)
    if used > t.ndim:
        raise IndexError(f"too many indices for a tensor of shape {t.shape}: {used} axes indexed")
    if Ellipsis not in items:
        items = (*items, Ellipsis)
    at = items.index(Ellipsis)
    items = (*items[:at], *(slice(None),) * (t.ndim - used), *items[at + 1:])
    x, axis, final = t, 0, []
    for item in items:
        if item is None:
            final.append(1)
            continue
        assert isinstance(item, (int, slice))
        n = x.shape[axis]
        if is_sym(n):
            if item != slice(None):
                raise IndexError(f"axis {axis} of shape {shape_text(t.shape)} has the symbolic size {dim_text(n)}: "
                                 "index it with shrink(((start, end), ...)), whose bounds may be symbolic too")
            final.append(n)
            axis += 1
            continue
        if isinstance(item, slice) and symbolic_slice(item):
            x = x.shrink(along_axis(x.ndim, axis, symbolic_bounds(item, n, t.shape)))
            final.append(x.shape[axis])
        elif isinstance(item, int):
            if not -n <= item < n:
                raise IndexError(f"index {item} is out of bounds for axis {axis} with size {n} "
                                 f"(tensor of shape {t.shape})")
            x = _slice_axis(x, axis, slice(item % n, item % n + 1))
        else:
            x = _slice_axis(x, axis, item)
            final.append(x.shape[axis])
        axis += 1
    return x.reshape(tuple(final))


def symbolic_slice(item: slice) -> bool:
    """A slice with a symbolic bound (`cache[:, start_pos:start_pos + 1]`, start_pos a bound Variable)."""
    return is_sym(item.start) or is_sym(item.stop) or is_sym(item.step)


def symbolic_bounds(item: slice, n: int, shape: tuple[int, ...]) -> tuple[Any, Any]:
    """(start, stop) of a slice with a symbolic bound along an axis of size n: step 1, and the int bounds
    non-negative (where a symbolic stop lands cannot be known in Python, so no counting from the end)."""
    if item.step not in (None, 1):
        raise IndexError(f"a slice with a symbolic bound must have step 1, got {item!r} (tensor of shape {shape})")
    start, stop = 0 if item.start is None else item.start, n if item.stop is None else item.stop
    if any(type(b) is int and b < 0 for b in (start, stop)):
        raise IndexError(f"a slice with a symbolic bound cannot count from the end, got {item!r} (tensor of shape "
                         f"{shape}); use non-negative bounds")
    return start, stop


def _slice_axis(t: Tensor, axis: int, item: slice) -> Tensor:
    """`item` applied to one axis: FLIP for a negative step, SHRINK, then every step-th element kept."""
    n = t.shape[axis]
    picked = range(*item.indices(n))
    count, step = len(picked), abs(picked.step)
    x = t
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


# ---- t[index] -------------------------------------------------------------------------------------------------
def getitem(x: Tensor, index: AnyIndex | tuple[AnyIndex, ...]) -> Tensor:
    """NumPy/PyTorch indexing (`t[index]`): ints, slices, None and `...` are views (movement ops); integer tensors,
    lists and bool masks select elements (a one-hot gather, see the module docstring)."""
    items = index if isinstance(index, tuple) else (index,)
    if all(item is None or item is Ellipsis or (isinstance(item, (int, slice)) and not isinstance(item, bool))
           for item in items):
        return _basic_getitem(x, cast(Any, index))
    basic, tensors = parse_index(x, index)
    view, axes, indices = basic_view(x, basic, tensors)
    if not axes:
        return view
    return _gather_axes(view, axes, indices, batch_position(axes))

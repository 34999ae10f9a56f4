"""`t[index] = value`: the selected elements are replaced, in place, through one ASSIGN of the whole tensor.

The new value of the tensor is a blend `where(written, new, old)`: for basic indexes (views) the value is padded back
to the full shape (`_unview`, `_unslice`), for bool masks it is placed by the mask's positions, and for tensor indexes
it is scattered through the same one-hot construction as a gather (indexing.py `_scatter_axes`). The index is parsed
exactly as `t[index]` parses it (indexing.py), so a read and a write of one index select the same elements. With
repeated indices the last write wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from plygrad.frontend import core, disk, indexing
from plygrad.frontend.indexing import AnyIndex, Basic
from plygrad.frontend.lazy import LazyTensor, Scalar, is_tensor
from plygrad.ir import ShapeError, dtypes
from plygrad.ir.shape import dim_sub

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor


def value_for(x: Tensor, value: LazyTensor | Scalar | Sequence[Any], op: str) -> Tensor:
    if is_tensor(value):
        if value.device != x.device:
            raise ValueError(f"{op}: the value is on {value.device} but the tensor is on {x.device}; "
                             "move one with .to(device)")
        return core.typed_like(x, value._cast_to(x.dtype))
    if isinstance(value, (bool, int, float)):
        return x._const(value, x.dtype, ())
    if isinstance(value, (list, tuple, np.ndarray)):
        return _host_value(x, np.asarray(value))
    raise TypeError(f"{op}: the value must be a Tensor, a Python scalar or a list, got {type(value).__name__}")


def _host_value(x: Tensor, array: np.ndarray[Any, Any]) -> Tensor:
    """A list/NumPy value for `t[idx] = value`, staged in a dtype NumPy has and CAST to this tensor's."""
    if array.dtype.kind == "b":
        staged = dtypes.bool
    elif array.dtype.kind in "iu":
        staged = dtypes.int64
    elif array.dtype.kind == "f":
        staged = dtypes.float64 if x.dtype is dtypes.float64 else dtypes.float32
    else:
        raise TypeError(f"setitem: a value of NumPy dtype {array.dtype} is not supported")
    return core.from_host(x, array, staged)._cast_to(x.dtype)


def _masked_set(x: Tensor, index: AnyIndex | tuple[AnyIndex, ...], value: Tensor) -> Tensor | None:
    """`t[mask] = v` without reading the mask back, when v does not vary along the selected elements (v a
    scalar, or v broadcasting over the axes after the mask): that is `where(mask, v, t)`. None otherwise.
    Handles one bool tensor among full slices `:` and at most one `...`."""
    items = list(index) if isinstance(index, tuple) else [index]
    masks = [i for i, item in enumerate(items) if isinstance(item, LazyTensor) and item.dtype.is_bool]
    if len(masks) != 1:
        return None
    p = masks[0]
    mask = core.typed_like(x, cast(LazyTensor, items[p]))
    full = [isinstance(item, slice) and item == slice(None) for item in items]
    ellipses = [i for i, item in enumerate(items) if item is Ellipsis]
    others_plain = all(full[i] or i in ellipses for i in range(len(items)) if i != p)
    if mask.ndim == 0 or len(ellipses) > 1 or not others_plain:
        return None
    start = x.ndim - mask.ndim - (len(items) - p - 1) if ellipses and ellipses[0] < p else p
    after = x.shape[start + mask.ndim:]
    if start < 0 or mask.shape != x.shape[start:start + mask.ndim] or value.ndim > len(after):
        return None
    if mask.device != x.device:
        raise ValueError(f"setitem: the mask is on {mask.device} but the tensor is on {x.device}; "
                         "move one with .to(device)")
    where = mask.reshape(*(1,) * start, *mask.shape, *(1,) * len(after))._broadcast_to(x.shape)
    return where.where(_fit_value(x, value, after)._broadcast_to(x.shape), x)


def _indexed_set(x: Tensor, index: AnyIndex | tuple[AnyIndex, ...], value: Tensor) -> Tensor:
    basic, tensors = indexing.parse_index(x, index)
    view, axes, indices = indexing.basic_view(x, basic, tensors)
    if view.numel() == 0:
        return x
    if axes:
        batch = indexing.index_batch_shape(indices)
        rest = [n for a, n in enumerate(view.shape) if a not in axes]
        order = indexing.result_order(len(rest), len(batch), indexing.batch_position(axes))
        local = _fit_value(x, value, tuple([*rest, *batch][i] for i in order))
        inverse = sorted(range(len(order)), key=lambda i: order[i])
        view_new = indexing.scatter_axes(view, axes, indices, local.permute(*inverse))
    else:
        view_new = _fit_value(x, value, view.shape)
    return _unview(x, basic, view_new)


def _fit_value(x: Tensor, value: Tensor, shape: tuple[int, ...]) -> Tensor:
    try:
        return value._broadcast_to(shape)
    except ShapeError:
        raise ShapeError(f"setitem: a value of shape {value.shape} cannot be broadcast to the selection's "
                         f"shape {shape} (tensor of shape {x.shape})") from None


def _unview(x: Tensor, basic: list[Basic], view_new: Tensor) -> Tensor:
    """Put `view_new` (new values of the basic view `self[basic]`) back into `self`'s shape: each basic step
    undone by movement ops (PAD where the view cut, a PAD of an inserted axis where it strided, FLIP where it
    reversed), and the same done to a true mask to know which elements the view covers."""
    kept_shape: list[Any] = []
    plan: list[tuple[int, range | tuple[Any, Any]]] = []
    axis = 0
    for item in basic:
        if item is None:
            continue
        n = x.shape[axis]
        picked: range | tuple[Any, Any]
        if isinstance(item, slice) and indexing.symbolic_slice(item):
            picked = indexing.symbolic_bounds(item, n, x.shape)
            kept_shape.append(dim_sub(picked[1], picked[0]))
            plan.append((n, picked))
            axis += 1
            continue
        picked = range(item % n, item % n + 1) if isinstance(item, int) else range(*item.indices(n))
        kept_shape.append(len(picked))
        plan.append((n, picked))
        axis += 1
    values = view_new.reshape(*kept_shape)
    covered = values._const(True, dtypes.bool)
    for axis, (n, picked) in enumerate(plan):
        values, covered = _unslice(values, axis, n, picked), _unslice(covered, axis, n, picked)
    return covered.where(values, x)


def _unslice(t: Tensor, axis: int, n: int, picked: range | tuple[Any, Any]) -> Tensor:
    """The inverse of selecting `picked` (a non-empty range, or symbolic (start, stop) bounds) along `axis`: size n
    again, zeros elsewhere."""
    if isinstance(picked, tuple):
        start, stop = picked
        return t.pad(indexing.along_axis(t.ndim, axis, (start, dim_sub(n, stop))))
    count, step = len(picked), abs(picked.step)
    first = picked[0] if picked.step > 0 else n - 1 - picked[0]  # along the flipped axis for a negative step
    x = t
    if step > 1:  # each element followed by step-1 zeros, then cut after the last one
        shape = x.shape
        x = x.reshape(*shape[:axis], count, 1, *shape[axis + 1:])
        x = x.pad(indexing.along_axis(x.ndim, axis + 1, (0, step - 1)))
        x = x.reshape(*shape[:axis], count * step, *shape[axis + 1:])
        x = x.shrink(indexing.along_axis(x.ndim, axis, (0, (count - 1) * step + 1)))
    span = x.shape[axis]
    x = x.pad(indexing.along_axis(x.ndim, axis, (first, n - first - span)))
    return x.flip(axis) if picked.step < 0 else x


# ---- t[index] = value -----------------------------------------------------------------------------------------
def setitem(x: Tensor, index: AnyIndex | tuple[AnyIndex, ...], value: LazyTensor | Scalar | Sequence[Any]) -> None:
    """`t[index] = value`: the selected elements are replaced by `value` (cast to t's dtype, broadcast to the
    selection's shape), in place. Built as a blend: the new value of the whole tensor is `where(written, new, old)`,
    then assigned to t. With repeated indices the last write wins. A disk tensor is written through the view
    instead (disk.py: DISK computes no blend)."""
    if disk.is_disk(x.device):
        disk.setitem(x, index, value)
        return
    update = value_for(x, value, "setitem")
    items = index if isinstance(index, tuple) else (index,)
    if any(isinstance(item, slice) and indexing.symbolic_slice(item) for item in items):
        # the blend's padding would have a size known only as an expression: write through the view instead,
        # which a realized tensor has memory for (lazy.assign raises for a lazy one)
        x[index].assign(update)
        return
    mask_update = _masked_set(x, index, update)
    new = mask_update if mask_update is not None else _indexed_set(x, index, update)
    x.assign(new)

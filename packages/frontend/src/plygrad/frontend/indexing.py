"""Indexing with tensors: advanced `__getitem__`, `__setitem__`, gather/scatter/scatter_reduce, masked_fill,
masked_select, one_hot, nonzero, index_select, take_along_dim.

Every gather here is built the tinygrad way, from primitive ops only: an index tensor compared with a counter
`0..n-1` gives a one-hot mask over the indexed axis, `where(mask, x, 0)` keeps the chosen element, and a sum over
that axis collapses it. That is an elementwise expression plus one REDUCE, so the scheduler fuses it with what
produces and reads it, and autograd differentiates it like any other graph (the gradient of a gather is a scatter
of the same mask). Scatters run the same mask the other way: a reduce over the *index* axes.

Index values are data: checking them would need the device to finish first, so tensor indices are not checked.
Negative values wrap once (`-1` is the last element, like PyTorch); a value still out of range matches no position
of the one-hot mask, so a gather reads 0 there and a scatter or `t[idx] = v` writes nothing. (PyTorch raises
instead.) Python lists and NumPy arrays used as indices are on the host, so they are checked eagerly and raise
IndexError. Ops whose result *size* depends on the data (`nonzero`, `masked_select`, a bool-mask index,
`one_hot()` with no class count) read the data back first, as PyTorch does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import EllipsisType
from typing import Any, Literal, Self, TypeAlias, cast

import numpy as np

from plygrad.frontend import random, scheduling
from plygrad.frontend.lazy import LazyTensor, Scalar, buffer_view
from plygrad.frontend.scan import ScanOps
from plygrad.ir import DType, DTypeError, DTypeKind, Ops, ShapeError, UOp, broadcast_shapes, dtypes
from plygrad.runtime import Buffer

AnyIndex: TypeAlias = "int | slice | EllipsisType | bool | LazyTensor | Sequence[Any] | np.ndarray[Any, Any] | None"
Basic: TypeAlias = "int | slice | None"
ScatterReduce: TypeAlias = Literal["sum", "prod", "mean", "amax", "amin"]
_SCATTER_REDUCES: tuple[str, ...] = ("sum", "prod", "mean", "amax", "amin")


def _along(ndim: int, axis: int, pair: tuple[int, int]) -> tuple[tuple[int, int] | None, ...]:
    """A pad/shrink argument touching only `axis`."""
    return tuple(pair if i == axis else None for i in range(ndim))


def _index_dtype(dtype: DType) -> DType:
    """Indices are compared in int32, or int64 when their dtype could hold values beyond int32."""
    wide = dtype.itemsize > 4 or (dtype.itemsize == 4 and dtype.kind is DTypeKind.UNSIGNED)
    return dtypes.int64 if wide else dtypes.int32


class IndexingOps(ScanOps):
    """Indexing with tensors: `t[idx]`, `t[idx] = v`, gather/scatter and masks."""

    __slots__ = ()

    # ---- host data (the few ops whose result size depends on values) ----------------------------------------
    def _from_host(self, array: np.ndarray[Any, Any], dtype: DType | None = None) -> Self:
        """A tensor on this device holding `array` (staged on the host, copied in at the first realize). Integer
        data defaults to int32 (int64 when a value needs it), like `nonzero`'s and `one_hot`'s results."""
        if dtype is None:
            wide = array.size and max(int(array.max()), -int(array.min()) - 1) >= 2**31
            dtype = dtypes.int64 if wide else dtypes.int32
        if dtype is dtypes.bfloat16:  # NumPy has no bfloat16: stage float32, CAST in the graph
            return self._from_host(array, dtypes.float32)._cast_to(dtype)
        data = np.ascontiguousarray(array.astype(dtype.numpy_name, copy=False))
        buf = Buffer(self.device, int(data.size), dtype)
        scheduling.stage_host_data(buf, data.tobytes())
        return self._make(buffer_view(buf, tuple(data.shape)), self.device, (buf,))

    def _read_back(self) -> np.ndarray[Any, Any]:
        """This tensor's values on the host. Realizing is the job of the top layer (`Tensor.numpy`); every
        IndexingOps object is a Tensor, so its `numpy` is looked up at run time."""
        numpy_fn = getattr(self, "numpy")  # noqa: B009 - defined by the Tensor layer above this one
        return np.asarray(numpy_fn())

    def _mine(self, other: LazyTensor) -> Self:
        """`other` typed as this tensor's class (every tensor of a program is one class, the Tensor)."""
        assert isinstance(other, type(self)), f"expected a {type(self).__name__}, got {type(other).__name__}"
        return other

    def _counter(self, n: int) -> Self:
        """The int32 values 0..n-1 (shape (n,)), computed inside whichever kernel reads them."""
        return self._make(random.counter(n, dtypes.int32, self.device), self.device)

    # ---- index tensors ---------------------------------------------------------------------------------------
    def _as_index(self, index: LazyTensor, size: int, op: str) -> Self:
        """`index` checked to hold integers, widened to int32/int64 and with negative values wrapped once."""
        if not isinstance(index, IndexingOps):
            raise TypeError(f"{op}: the index must be a Tensor, got {type(index).__name__}")
        if index.device != self.device:
            raise ValueError(f"{op}: the index is on {index.device} but the tensor is on {self.device}; "
                             "move one with .to(device)")
        if index.dtype.is_float or index.dtype.is_bool:
            raise DTypeError(f"{op}: index tensors must have an integer dtype, got {index.dtype} "
                             f"(index shape {index.shape}); cast it with .cast(dtypes.int32)")
        idx = self._mine(index._cast_to(_index_dtype(index.dtype)))
        if index.dtype.kind is DTypeKind.UNSIGNED:
            return idx
        return idx.lt(0).where(idx.add(size), idx)

    def _one_hot_mask(self, axes: Sequence[int], indices: Sequence[Self]) -> tuple[tuple[int, ...], Self]:
        """The broadcast index shape B and the bool mask of shape B + N (N: the sizes of `axes`) that is true where
        every index of a batch position equals that position's coordinates along the indexed axes."""
        batch = _index_batch(indices)
        sizes = tuple(self.shape[a] for a in axes)
        k = len(sizes)
        mask: Self | None = None
        for j, (n, idx) in enumerate(zip(sizes, indices, strict=True)):
            column = idx._broadcast_to(batch).reshape(*batch, *(1,) * k)
            positions = self._counter(n).reshape(*(1,) * len(batch), *(n if i == j else 1 for i in range(k)))
            hit = column.eq(positions)
            mask = hit if mask is None else mask.logical_and(hit)
        assert mask is not None
        return batch, mask._broadcast_to((*batch, *sizes))

    def _pick(self, axes: tuple[int, ...]) -> Self:
        """The sum over `axes` of a one-hot selection (`mask.where(values, 0)` with at most one true mask element
        along them): a plain REDUCE in the values' own dtype (OR for bool), exact since every other term is zero,
        so it is neither blocked nor widened like `sum` (reduce.py). Codegen turns such a REDUCE over an
        `index == position` test into a load at the index (codegen/gather.py): O(result), not O(result x axis)."""
        kept = tuple(a % self.ndim for a in axes)
        op = Ops.MAX if self.dtype.is_bool else Ops.ADD
        reduced = self._new(UOp(Ops.REDUCE, self.dtype, (self.uop,), (op, tuple(sorted(kept)))))
        return reduced.reshape(tuple(n for i, n in enumerate(self.shape) if i not in kept))

    @staticmethod
    def _result_order(n_rest: int, n_batch: int, place: int | None) -> list[int]:
        """Where the index dimensions B go among the other axes R of an indexed result (R + B order in, the
        result's order out): at `place` when the tensor indices sat side by side, else (None) in front."""
        rest, batch = list(range(n_rest)), list(range(n_rest, n_rest + n_batch))
        return batch + rest if place is None else rest[:place] + batch + rest[place:]

    def _gather_axes(self, axes: Sequence[int], indices: Sequence[Self], place: int | None) -> Self:
        """`self` read at the (broadcast) index tensors along `axes`: the axes not indexed (R) keep their order and
        the indices' broadcast shape (B) goes at `place` (in front for None). Both operands are laid out in the
        result's order before the sum, so the REDUCE writes the result directly (no copy after it)."""
        rest = [a for a in range(self.ndim) if a not in axes]
        batch, mask = self._one_hot_mask(axes, indices)
        r_shape = tuple(self.shape[a] for a in rest)
        sizes = tuple(self.shape[a] for a in axes)
        full = (*r_shape, *batch, *sizes)
        order = self._result_order(len(rest), len(batch), place)
        order += list(range(len(full) - len(sizes), len(full)))
        values = self.permute(*rest, *axes).reshape(*r_shape, *(1,) * len(batch), *sizes)._broadcast_to(full)
        hit = mask.reshape(*(1,) * len(rest), *batch, *sizes)._broadcast_to(full)
        chosen = hit.permute(*order).where(values.permute(*order), 0)
        return chosen._pick(tuple(range(len(full) - len(sizes), len(full))))._cast_to(self.dtype)

    def _scatter_axes(self, axes: Sequence[int], indices: Sequence[Self], value: Self) -> Self:
        """`self` with `value` (in R + B order: the axes not indexed, then the indices' broadcast shape) written at
        the index positions along `axes`. Where several batch positions name one element the last one wins
        (PyTorch leaves that case undefined). Everything is laid out as self's axes + B, so each REDUCE (over B,
        the trailing axes) writes self's layout directly."""
        batch, mask = self._one_hot_mask(axes, indices)
        if math.prod(batch) == 0:
            return self
        k, nb = self.ndim, len(batch)
        in_place = tuple(self.shape[a] if a in axes else 1 for a in range(k))  # N at the indexed axes, 1 elsewhere
        mask = mask.permute(*range(nb, nb + len(axes)), *range(nb)).reshape(*in_place, *batch)
        full = (*self.shape, *batch)
        order = self._counter(math.prod(batch)).reshape(*(1,) * k, *batch)._broadcast_to(mask.shape)
        b_axes = tuple(range(k, k + nb))
        winner = mask.where(order, -1).max(b_axes, keepdim=True)  # the last batch position naming each element
        chosen = mask.logical_and(order.eq(winner._broadcast_to(mask.shape)))._broadcast_to(full)
        lifted = value._cast_to(self.dtype).reshape(*(1 if a in axes else n for a, n in enumerate(self.shape)),
                                                     *batch)._broadcast_to(full)
        written = chosen.where(lifted, 0)._pick(b_axes)._cast_to(self.dtype)
        hit = winner.reshape(in_place).ge(0)._broadcast_to(self.shape)
        return hit.where(written, self)

    # ---- parsing an index -----------------------------------------------------------------------------------
    def _index_item(self, item: Any) -> Any:
        """One index item in a standard form: ints/slices/None/.../bools as they are, a Tensor checked, and
        lists and NumPy arrays as NumPy arrays (kept on the host so they can be checked before they are used)."""
        if item is None or item is Ellipsis or isinstance(item, (bool, int, slice)):
            return item
        if isinstance(item, np.integer):
            return int(item)
        if isinstance(item, np.bool_):
            return bool(item)
        if isinstance(item, LazyTensor):
            if not isinstance(item, IndexingOps):
                raise TypeError(f"indexing: unsupported index type {type(item).__name__}")
            if item.device != self.device:
                raise ValueError(f"indexing: the index is on {item.device} but the tensor is on {self.device}; "
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

    def _parse_index(self, index: AnyIndex | tuple[AnyIndex, ...]) -> tuple[list[Basic], dict[int, Self]]:
        """Split an index into basic items (ints, slices, None: `...` expanded, every axis covered) and the tensor
        indices, keyed by the position of the full slice (or new axis) that stands for each among the basic items.
        A bool mask becomes one integer index per axis it covers: its true positions, read back (the result's
        size depends on them, as in PyTorch)."""
        items = [self._index_item(item) for item in (index if isinstance(index, tuple) else (index,))]
        if sum(item is Ellipsis for item in items) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")

        def axes_used(item: Any) -> int:
            if isinstance(item, (LazyTensor, np.ndarray)):
                return item.ndim if _is_mask(item) else 1
            return 1 if isinstance(item, (int, slice)) and not isinstance(item, bool) else 0

        count = sum(axes_used(item) for item in items)
        if count > self.ndim:
            raise IndexError(f"too many indices for a tensor of shape {self.shape}: {count} axes indexed")
        if not any(item is Ellipsis for item in items):
            items.append(Ellipsis)
        at = next(i for i, item in enumerate(items) if item is Ellipsis)
        items[at:at + 1] = [slice(None)] * (self.ndim - count)

        basic: list[Basic] = []
        tensors: dict[int, Self] = {}
        axis = 0
        for item in items:
            if isinstance(item, bool):  # PyTorch reads it as a 0-d mask: a new axis of size 1, kept or emptied
                tensors[len(basic)] = self._from_host(np.zeros((1 if item else 0,), np.int32))
                basic.append(None)
            elif isinstance(item, (LazyTensor, np.ndarray)) and _is_mask(item):
                for positions in self._mask_positions(item, axis):
                    tensors[len(basic)] = positions
                    basic.append(None if item.ndim == 0 else slice(None))
                axis += item.ndim
            elif isinstance(item, np.ndarray):
                n = self.shape[axis]
                bad = item[(item < -n) | (item >= n)]
                if bad.size:
                    raise IndexError(f"index {int(bad.flat[0])} is out of bounds for axis {axis} with size {n} "
                                     f"(tensor of shape {self.shape})")
                tensors[len(basic)] = self._from_host(item)
                basic.append(slice(None))
                axis += 1
            elif isinstance(item, LazyTensor):
                tensors[len(basic)] = self._mine(item)
                basic.append(slice(None))
                axis += 1
            else:
                basic.append(item)
                axis += 1 if item is not None else 0
        return basic, tensors

    def _mask_positions(self, mask: LazyTensor | np.ndarray[Any, Any], axis: int) -> list[Self]:
        """The coordinates where a bool mask over axes axis.. is true, one integer index tensor per axis."""
        covered = self.shape[axis:axis + mask.ndim]
        if tuple(mask.shape) != covered:
            raise IndexError(f"the shape of the mask {tuple(mask.shape)} does not match the shape {covered} of the "
                             f"indexed axes {axis}..{axis + mask.ndim - 1} (tensor of shape {self.shape})")
        values = mask if isinstance(mask, np.ndarray) else self._mine(mask)._read_back()
        if mask.ndim == 0:
            return [self._from_host(np.zeros((1 if bool(values) else 0,), np.int32))]
        return [self._from_host(np.asarray(p)) for p in np.nonzero(values)]

    def _basic_view(self, basic: list[Basic], tensors: dict[int, Self]) -> tuple[Self, list[int], list[Self]]:
        """The view the basic items select (MovementOps indexing) and, for each tensor index, the axis of that
        view it applies to."""
        view = super().__getitem__(tuple(basic))
        kept = [i for i, item in enumerate(basic) if not isinstance(item, int)]
        axes = [kept.index(position) for position in sorted(tensors)]
        sizes = [view.shape[a] for a in axes]
        indices = [view._as_index(tensors[p], n, "indexing") for p, n in zip(sorted(tensors), sizes, strict=True)]
        return view, axes, indices

    @staticmethod
    def _batch_position(axes: Sequence[int]) -> int | None:
        """Where the index dimensions go: at the first indexed axis when the tensor indices sit side by side,
        else (None) in front (NumPy's and PyTorch's rule; ints do not separate them in PyTorch)."""
        return axes[0] if axes[-1] - axes[0] == len(axes) - 1 else None

    # ---- t[index] -------------------------------------------------------------------------------------------
    def __getitem__(self, index: AnyIndex | tuple[AnyIndex, ...]) -> Self:
        """NumPy/PyTorch indexing: ints, slices, None and `...` are views (MovementOps); integer tensors, lists
        and bool masks select elements (a one-hot gather, see the module docstring)."""
        items = index if isinstance(index, tuple) else (index,)
        if all(item is None or item is Ellipsis or (isinstance(item, (int, slice)) and not isinstance(item, bool))
               for item in items):
            return super().__getitem__(cast(Any, index))
        basic, tensors = self._parse_index(index)
        view, axes, indices = self._basic_view(basic, tensors)
        if not axes:
            return view
        return view._gather_axes(axes, indices, self._batch_position(axes))

    # ---- t[index] = value -----------------------------------------------------------------------------------
    def __setitem__(self, index: AnyIndex | tuple[AnyIndex, ...], value: LazyTensor | Scalar | Sequence[Any]) -> None:
        """`t[index] = value`: the selected elements are replaced by `value` (cast to t's dtype, broadcast to the
        selection's shape), in place. Built as a blend: the new value of the whole tensor is `where(written,
        new, old)`, then assigned to t. With repeated indices the last write wins."""
        update = self._value_for(value, "setitem")
        mask_update = self._masked_set(index, update)
        new = mask_update if mask_update is not None else self._indexed_set(index, update)
        self.assign(new)

    def _value_for(self, value: LazyTensor | Scalar | Sequence[Any], op: str) -> Self:
        if isinstance(value, LazyTensor):
            if not isinstance(value, IndexingOps):
                raise TypeError(f"{op}: unsupported value type {type(value).__name__}")
            if value.device != self.device:
                raise ValueError(f"{op}: the value is on {value.device} but the tensor is on {self.device}; "
                                 "move one with .to(device)")
            return self._mine(value._cast_to(self.dtype))
        if isinstance(value, (bool, int, float)):
            return self._const(value, self.dtype, ())
        if isinstance(value, (list, tuple, np.ndarray)):
            return self._host_value(np.asarray(value))
        raise TypeError(f"{op}: the value must be a Tensor, a Python scalar or a list, got {type(value).__name__}")

    def _host_value(self, array: np.ndarray[Any, Any]) -> Self:
        """A list/NumPy value for `t[idx] = value`, staged in a dtype NumPy has and CAST to this tensor's."""
        if array.dtype.kind == "b":
            staged = dtypes.bool
        elif array.dtype.kind in "iu":
            staged = dtypes.int64
        elif array.dtype.kind == "f":
            staged = dtypes.float64 if self.dtype is dtypes.float64 else dtypes.float32
        else:
            raise TypeError(f"setitem: a value of NumPy dtype {array.dtype} is not supported")
        return self._from_host(array, staged)._cast_to(self.dtype)

    def _masked_set(self, index: AnyIndex | tuple[AnyIndex, ...], value: Self) -> Self | None:
        """`t[mask] = v` without reading the mask back, when v does not vary along the selected elements (v a
        scalar, or v broadcasting over the axes after the mask): that is `where(mask, v, t)`. None otherwise.
        Handles one bool tensor among full slices `:` and at most one `...`."""
        items = list(index) if isinstance(index, tuple) else [index]
        masks = [i for i, item in enumerate(items) if isinstance(item, LazyTensor) and item.dtype.is_bool]
        if len(masks) != 1:
            return None
        p = masks[0]
        mask = self._mine(cast(LazyTensor, items[p]))
        full = [isinstance(item, slice) and item == slice(None) for item in items]
        ellipses = [i for i, item in enumerate(items) if item is Ellipsis]
        others_plain = all(full[i] or i in ellipses for i in range(len(items)) if i != p)
        if mask.ndim == 0 or len(ellipses) > 1 or not others_plain:
            return None
        start = self.ndim - mask.ndim - (len(items) - p - 1) if ellipses and ellipses[0] < p else p
        after = self.shape[start + mask.ndim:]
        if start < 0 or mask.shape != self.shape[start:start + mask.ndim] or value.ndim > len(after):
            return None
        if mask.device != self.device:
            raise ValueError(f"setitem: the mask is on {mask.device} but the tensor is on {self.device}; "
                             "move one with .to(device)")
        where = mask.reshape(*(1,) * start, *mask.shape, *(1,) * len(after))._broadcast_to(self.shape)
        return where.where(self._fit_value(value, after)._broadcast_to(self.shape), self)

    def _indexed_set(self, index: AnyIndex | tuple[AnyIndex, ...], value: Self) -> Self:
        basic, tensors = self._parse_index(index)
        view, axes, indices = self._basic_view(basic, tensors)
        if view.numel() == 0:
            return self
        if axes:
            batch = _index_batch(indices)
            rest = [n for a, n in enumerate(view.shape) if a not in axes]
            order = self._result_order(len(rest), len(batch), self._batch_position(axes))
            local = self._fit_value(value, tuple([*rest, *batch][i] for i in order))
            inverse = sorted(range(len(order)), key=lambda i: order[i])
            view_new = view._scatter_axes(axes, indices, local.permute(*inverse))
        else:
            view_new = self._fit_value(value, view.shape)
        return self._unview(basic, view_new)

    def _fit_value(self, value: Self, shape: tuple[int, ...]) -> Self:
        try:
            return value._broadcast_to(shape)
        except ShapeError:
            raise ShapeError(f"setitem: a value of shape {value.shape} cannot be broadcast to the selection's "
                             f"shape {shape} (tensor of shape {self.shape})") from None

    def _unview(self, basic: list[Basic], view_new: Self) -> Self:
        """Put `view_new` (new values of the basic view `self[basic]`) back into `self`'s shape: each basic step
        undone by movement ops (PAD where the view cut, a PAD of an inserted axis where it strided, FLIP where it
        reversed), and the same done to a true mask to know which elements the view covers."""
        kept_shape: list[int] = []
        plan: list[tuple[int, range]] = []
        axis = 0
        for item in basic:
            if item is None:
                continue
            n = self.shape[axis]
            picked = range(item % n, item % n + 1) if isinstance(item, int) else range(*item.indices(n))
            kept_shape.append(len(picked))
            plan.append((n, picked))
            axis += 1
        values = view_new.reshape(*kept_shape)
        covered = values._const(True, dtypes.bool)
        for axis, (n, picked) in enumerate(plan):
            values, covered = values._unslice(axis, n, picked), covered._unslice(axis, n, picked)
        return covered.where(values, self)

    def _unslice(self, axis: int, n: int, picked: range) -> Self:
        """The inverse of selecting `picked` (a non-empty range) along `axis`: size n again, zeros elsewhere."""
        count, step = len(picked), abs(picked.step)
        first = picked[0] if picked.step > 0 else n - 1 - picked[0]  # along the flipped axis for a negative step
        x = self
        if step > 1:  # each element followed by step-1 zeros, then cut after the last one
            shape = x.shape
            x = x.reshape(*shape[:axis], count, 1, *shape[axis + 1:])
            x = x.pad(_along(x.ndim, axis + 1, (0, step - 1)))
            x = x.reshape(*shape[:axis], count * step, *shape[axis + 1:])
            x = x.shrink(_along(x.ndim, axis, (0, (count - 1) * step + 1)))
        span = x.shape[axis]
        x = x.pad(_along(x.ndim, axis, (first, n - first - span)))
        return x.flip(axis) if picked.step < 0 else x

    # ---- gather / scatter -----------------------------------------------------------------------------------
    def _dim_index(self, dim: int, index: LazyTensor, op: str,
                   bound: tuple[int, ...] | None = None) -> tuple[int, Self]:
        """The axis and the checked index of gather/scatter: same number of axes as `self`, and no larger than
        `bound` (default: self's shape) on the other axes."""
        axis = self._axis(dim, op)
        limit = self.shape if bound is None else bound
        if not isinstance(index, IndexingOps):
            raise TypeError(f"{op}: the index must be a Tensor, got {type(index).__name__}")
        if index.ndim != self.ndim:
            raise ShapeError(f"{op}: the index has shape {index.shape} but the tensor has shape {self.shape}; "
                             "they need the same number of axes")
        for d, (i, s) in enumerate(zip(index.shape, limit, strict=True)):
            if d != axis and i > s:
                raise ShapeError(f"{op}: index of shape {index.shape} is larger than shape {limit} along axis {d} "
                                 f"(dim={dim}); only the indexing axis may be longer")
        return axis, self._as_index(index, self.shape[axis], op)

    def gather(self, dim: int, index: LazyTensor) -> Self:
        """`out[i][j][k] = self[index[i][j][k]][j][k]` for dim=0 (PyTorch's gather): the result has the index's
        shape, and the index may be smaller than `self` on the other axes."""
        if self.ndim == 0 and isinstance(index, IndexingOps) and index.ndim == 0:
            return self.reshape(1).gather(0, index.reshape(1)).reshape(())
        axis, idx = self._dim_index(dim, index, "gather")
        n = self.shape[axis]
        x = self.shrink(tuple(None if d == axis else (0, s) for d, s in enumerate(idx.shape)))
        # the indexed axis moves to a new last axis m; out[..., i, ...] = sum_m x[..., m, ...] * (index == m)
        values = x.unsqueeze(-1).transpose(axis, -1)._broadcast_to((*idx.shape, n))
        mask = idx.unsqueeze(-1).eq(self._counter(n))
        return mask.where(values, 0)._pick((-1,))._cast_to(self.dtype)

    def take_along_dim(self, indices: LazyTensor, dim: int | None = None) -> Self:
        """PyTorch's take_along_dim: gather with `self` and `indices` broadcast on every axis but `dim`
        (dim=None: both flattened)."""
        if not isinstance(indices, IndexingOps):
            raise TypeError(f"take_along_dim: the indices must be a Tensor, got {type(indices).__name__}")
        if dim is None:
            return self.flatten().gather(0, indices.flatten())
        if indices.ndim != self.ndim:
            raise ShapeError(f"take_along_dim: indices of shape {indices.shape} and a tensor of shape {self.shape} "
                             "need the same number of axes")
        axis = self._axis(dim, "take_along_dim")
        a = list(self.shape)
        b = list(indices.shape)
        a[axis] = b[axis] = 1
        common = broadcast_shapes(tuple(a), tuple(b))
        x = self._broadcast_to(tuple(self.shape[axis] if d == axis else s for d, s in enumerate(common)))
        idx = indices._broadcast_to(tuple(indices.shape[axis] if d == axis else s for d, s in enumerate(common)))
        return x.gather(axis, idx)

    def index_select(self, dim: int, index: LazyTensor) -> Self:
        """The entries `index` (a 1-D integer tensor) along `dim`."""
        axis = self._axis(dim, "index_select")
        if not isinstance(index, IndexingOps) or index.ndim > 1:
            shape = index.shape if isinstance(index, LazyTensor) else type(index).__name__
            raise ShapeError(f"index_select: the index must be a 0-d or 1-D tensor, got {shape}")
        if self.ndim == 0:
            return self.reshape(1)[index.reshape(-1)].reshape(index.shape)
        return self[(slice(None),) * axis + (index.reshape(-1),)]

    def _scatter_parts(self, axis: int, idx: Self, src: Self) -> tuple[Self, Self]:
        """For scatter along `axis` with an index of k entries along it: the hit mask and the source values, both of
        shape self.shape + (k,), hit[..., m, ..., j] saying that index[..., j, ...] == m. A reduce over the last
        axis then gives self's layout directly. On the other axes the index is padded to self's size with the
        value n, which names no element (so the REDUCE needs no PAD after it)."""
        n, k = self.shape[axis], idx.shape[axis]
        grow = tuple((0, 0) if d == axis else (0, s - i) for d, (i, s) in enumerate(zip(idx.shape, self.shape,
                                                                                        strict=True)))
        source = src.shrink(tuple((0, s) for s in idx.shape))
        if any(after for _, after in grow):
            idx, source = idx.sub(n).pad(grow).add(n), source.pad(grow)
        full = (*self.shape, k)
        moved = idx.unsqueeze(-1).transpose(axis, -1)._broadcast_to(full)
        positions = self._counter(n).reshape(*(n if d == axis else 1 for d in range(self.ndim)), 1)
        return moved.eq(positions), source.unsqueeze(-1).transpose(axis, -1)._broadcast_to(full)

    def _scatter_src(self, src: LazyTensor | Scalar, idx: Self, op: str) -> Self:
        if isinstance(src, LazyTensor):
            if not isinstance(src, IndexingOps):
                raise TypeError(f"{op}: unsupported src type {type(src).__name__}")
            if src.ndim != self.ndim or any(i > s for i, s in zip(idx.shape, src.shape, strict=True)):
                raise ShapeError(f"{op}: src of shape {src.shape} must have as many axes as the tensor "
                                 f"({self.shape}) and be at least the index's shape {idx.shape} on each")
            if src.device != self.device:
                raise ValueError(f"{op}: src is on {src.device} but the tensor is on {self.device}")
            return self._mine(src._cast_to(self.dtype))
        if isinstance(src, (bool, int, float)):
            return self._const(src, self.dtype, idx.shape)
        raise TypeError(f"{op}: src must be a Tensor or a Python scalar, got {type(src).__name__}")

    def scatter(self, dim: int, index: LazyTensor, src: LazyTensor | Scalar,
                reduce: Literal["add", "multiply"] | None = None) -> Self:
        """PyTorch's scatter (out of place): `out[index[i][j]][j] = src[i][j]` for dim=0. `reduce="add"` or
        `"multiply"` combines instead of replacing (repeated indices all count); without it the last write among
        repeated indices wins (PyTorch leaves that undefined)."""
        if reduce is not None and reduce not in ("add", "multiply"):
            raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
        axis, idx = self._dim_index(dim, index, "scatter")
        source = self._scatter_src(src, idx, "scatter")
        if idx.numel() == 0:
            return self
        if reduce == "add":
            return self._scatter_reduce_parts(axis, idx, source, "sum", True)
        if reduce == "multiply":
            return self._scatter_reduce_parts(axis, idx, source, "prod", True)
        hit, values = self._scatter_parts(axis, idx, source)
        k = idx.shape[axis]
        order = self._counter(k).reshape(*(1,) * self.ndim, k)._broadcast_to(hit.shape)
        winner = hit.where(order, -1).max(-1, keepdim=True)  # the last index entry naming each element
        chosen = hit.logical_and(order.eq(winner._broadcast_to(hit.shape)))
        written = chosen.where(values, 0)._pick((-1,))._cast_to(self.dtype)
        return winner.reshape(self.shape).ge(0).where(written, self)

    def scatter_reduce(self, dim: int, index: LazyTensor, src: LazyTensor | Scalar, reduce: ScatterReduce,
                       include_self: bool = True) -> Self:
        """PyTorch's scatter_reduce: every src value goes to `out[index[i][j]][j]` (dim=0) and the values landing on
        one element are combined by `reduce` ("sum", "prod", "mean", "amax", "amin"), together with the element's
        own value when `include_self`. Elements no index names keep their value. Integer "mean" floors."""
        if reduce not in _SCATTER_REDUCES:
            raise ValueError(f"scatter_reduce: reduce must be one of {', '.join(_SCATTER_REDUCES)}, got {reduce!r}")
        axis, idx = self._dim_index(dim, index, "scatter_reduce")
        source = self._scatter_src(src, idx, "scatter_reduce")
        if idx.numel() == 0:
            return self
        return self._scatter_reduce_parts(axis, idx, source, reduce, include_self)

    def _scatter_reduce_parts(self, axis: int, idx: Self, src: Self, reduce: str, include_self: bool) -> Self:
        hit, values = self._scatter_parts(axis, idx, src)
        touched = hit.max(-1)
        if reduce in ("sum", "mean"):
            total = hit.where(values, 0).sum(-1)._cast_to(self.dtype)
            if reduce == "sum":
                return self.add(total)._cast_to(self.dtype) if include_self else touched.where(total, self)
            count = hit.sum(-1)._cast_to(self.dtype)
            if include_self:
                total, count = total.add(self), count.add(1)
            count = count.maximum(1)  # untouched elements keep their value; this only avoids 0/0 there
            mean = total.div(count) if self.dtype.is_float else total.floordiv(count)
            return touched.where(mean._cast_to(self.dtype), self)
        if reduce == "prod":
            product = hit.where(values, 1).prod(-1)._cast_to(self.dtype)
            return touched.where(product.mul(self)._cast_to(self.dtype) if include_self else product, self)
        lowest, highest = self._extremes()
        if reduce == "amax":
            best = hit.where(values, lowest).max(-1)
            combined = best.maximum(self) if include_self else best
        else:
            best = hit.where(values, highest).min(-1)
            combined = best.minimum(self) if include_self else best
        return touched.where(combined._cast_to(self.dtype), self)

    def _extremes(self) -> tuple[Scalar, Scalar]:
        """The identities of max and min in this dtype."""
        if self.dtype.is_float:
            return -math.inf, math.inf
        if self.dtype.is_bool:
            return False, True
        return self.dtype.min, self.dtype.max

    # ---- masks ----------------------------------------------------------------------------------------------
    def masked_fill(self, mask: LazyTensor, value: LazyTensor | Scalar) -> Self:
        """`value` where `mask` is true, `self` elsewhere (mask and a tensor value broadcast against self)."""
        if not isinstance(mask, IndexingOps) or not mask.dtype.is_bool:
            what = mask.dtype if isinstance(mask, LazyTensor) else type(mask).__name__
            raise DTypeError(f"masked_fill: the mask must be a bool tensor, got {what}")
        fill = self._value_for(value, "masked_fill")
        if fill.ndim:
            raise ShapeError(f"masked_fill: the value must be a scalar or a 0-d tensor, got shape {fill.shape}")
        shape = broadcast_shapes(self.shape, mask.shape)
        if shape != self.shape:
            raise ShapeError(f"masked_fill: a mask of shape {mask.shape} does not broadcast to the tensor's shape "
                             f"{self.shape}")
        return self._mine(mask).where(fill, self)._cast_to(self.dtype)

    def masked_select(self, mask: LazyTensor) -> Self:
        """The elements where `mask` is true, as a 1-D tensor (self and mask broadcast together). The result's
        size depends on the mask, so the mask is read back first, as in PyTorch."""
        if not isinstance(mask, IndexingOps) or not mask.dtype.is_bool:
            what = mask.dtype if isinstance(mask, LazyTensor) else type(mask).__name__
            raise DTypeError(f"masked_select: the mask must be a bool tensor, got {what}")
        shape = broadcast_shapes(self.shape, mask.shape)
        flat = self._broadcast_to(shape).flatten()
        positions = np.flatnonzero(mask._broadcast_to(shape)._read_back())
        return flat[self._from_host(positions)]

    def nonzero(self) -> Self:
        """The coordinates of the non-zero elements, shape (count, ndim), in row-major order (reads the values
        back: the count depends on them). The dtype is the default int (int32; int64 for larger axes)."""
        values = self._read_back()
        if self.ndim == 0:
            return self._from_host(np.zeros((1 if values.item() else 0, 0), np.int32))
        return self._from_host(np.argwhere(values))

    def one_hot(self, num_classes: int = -1) -> Self:
        """A new last axis of size `num_classes` with 1 at each value and 0 elsewhere (integer dtype). -1 means
        max(self) + 1, which reads the values back. Values outside 0..num_classes-1 give a row of zeros."""
        if self.dtype.is_float or self.dtype.is_bool:
            raise DTypeError(f"one_hot: the tensor must hold integer class indices, got {self.dtype}")
        if num_classes == -1:
            num_classes = int(self._read_back().max()) + 1 if self.numel() else 0
        if type(num_classes) is not int or num_classes < 0:
            raise ValueError(f"one_hot: num_classes must be an int >= 0 or -1, got {num_classes!r}")
        hit = self._cast_to(_index_dtype(self.dtype)).unsqueeze(-1).eq(self._counter(num_classes))
        return hit._cast_to(dtypes.default_int)



def _is_mask(item: LazyTensor | np.ndarray[Any, Any]) -> bool:
    return item.dtype.is_bool if isinstance(item, LazyTensor) else item.dtype.kind == "b"


def _index_batch(indices: Sequence[LazyTensor]) -> tuple[int, ...]:
    """The broadcast shape of the index tensors of one index (IndexError when they do not broadcast, like NumPy)."""
    try:
        return broadcast_shapes(*(i.shape for i in indices))
    except ShapeError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         f"{', '.join(str(i.shape) for i in indices)}") from None

"""Gathers and scatters along an axis: gather, take_along_dim, index_select, scatter, scatter_reduce, masked_fill,
masked_select, nonzero and one_hot.

The IR has no gather op: an index tensor becomes a one-hot comparison against a counter, summed over the indexed
axis, which codegen turns back into a load (codegen/gather.py).
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

import numpy as np

from plygrad.frontend import core, creation, embedding_grad, indexing, setitem
from plygrad.frontend.errors import ArgumentValueError
from plygrad.frontend.gradient_marks import custom_gradient_mark
from plygrad.frontend.lazy import LazyTensor, Scalar, broadcast_uop, const_uop, is_tensor, movement
from plygrad.ir import DTypeError, Ops, ShapeError, UOp, broadcast_shapes, dtypes, result_dtype

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

ScatterReduce: TypeAlias = Literal["sum", "prod", "mean", "amax", "amin"]


_SCATTER_REDUCES: tuple[str, ...] = ("sum", "prod", "mean", "amax", "amin")


def _dim_index(x: Tensor, dim: int, index: LazyTensor, op: str,
               bound: tuple[int, ...] | None = None) -> tuple[int, Tensor]:
    """The axis and the checked index of gather/scatter: same number of axes as `self`, and no larger than
    `bound` (default: self's shape) on the other axes."""
    axis = x._axis(dim, op)
    limit = x.shape if bound is None else bound
    if not is_tensor(index):
        raise TypeError(f"{op}: the index must be a Tensor, got {type(index).__name__}")
    if index.ndim != x.ndim:
        raise ShapeError(f"{op}: the index has shape {index.shape} but the tensor has shape {x.shape}; "
                         "they need the same number of axes")
    for d, (i, s) in enumerate(zip(index.shape, limit, strict=True)):
        if d != axis and i > s:
            raise ShapeError(f"{op}: index of shape {index.shape} is larger than shape {limit} along axis {d} "
                             f"(dim={dim}); only the indexing axis may be longer")
    return axis, indexing.as_index(x, index, x.shape[axis], op)


def gather(t: Tensor, dim: int, index: LazyTensor) -> Tensor:
    """`out[i][j][k] = self[index[i][j][k]][j][k]` for dim=0 (PyTorch's gather): the result has the index's
    shape, and the index may be smaller than `self` on the other axes."""
    if t.ndim == 0 and is_tensor(index) and index.ndim == 0:
        return t.reshape(1).gather(0, index.reshape(1)).reshape(())
    axis, idx = _dim_index(t, dim, index, "gather")
    n = t.shape[axis]
    x = t.shrink(tuple(None if d == axis else (0, s) for d, s in enumerate(idx.shape)))
    # the indexed axis moves to a new last axis m; out[..., i, ...] = sum_m x[..., m, ...] * (index == m)
    values = x.unsqueeze(-1).transpose(axis, -1)._broadcast_to((*idx.shape, n))
    mask = idx.unsqueeze(-1).eq(core.int_range(t, n))
    return indexing.one_hot_sum(mask.where(values, 0), (-1,))._cast_to(t.dtype)


def take_along_dim(t: Tensor, indices: LazyTensor, dim: int | None = None) -> Tensor:
    """PyTorch's take_along_dim: gather with `self` and `indices` broadcast on every axis but `dim`
    (dim=None: both flattened)."""
    if not is_tensor(indices):
        raise TypeError(f"take_along_dim: the indices must be a Tensor, got {type(indices).__name__}")
    if dim is None:
        return t.flatten().gather(0, indices.flatten())
    if indices.ndim != t.ndim:
        raise ShapeError(f"take_along_dim: indices of shape {indices.shape} and a tensor of shape {t.shape} "
                         "need the same number of axes")
    axis = t._axis(dim, "take_along_dim")
    a = list(t.shape)
    b = list(indices.shape)
    a[axis] = b[axis] = 1
    common = broadcast_shapes(tuple(a), tuple(b))
    x = t._broadcast_to(tuple(t.shape[axis] if d == axis else s for d, s in enumerate(common)))
    idx = indices._broadcast_to(tuple(indices.shape[axis] if d == axis else s for d, s in enumerate(common)))
    return x.gather(axis, idx)


def index_select(x: Tensor, dim: int, index: LazyTensor) -> Tensor:
    """The entries `index` (a 1-D integer tensor) along `dim`."""
    axis = x._axis(dim, "index_select")
    if not is_tensor(index) or index.ndim > 1:
        shape = index.shape if isinstance(index, LazyTensor) else type(index).__name__
        raise ShapeError(f"index_select: the index must be a 0-d or 1-D tensor, got {shape}")
    if x.ndim == 0:
        return x.reshape(1)[index.reshape(-1)].reshape(index.shape)
    return x[(slice(None),) * axis + (index.reshape(-1),)]


def _scatter_parts(x: Tensor, axis: int, idx: Tensor, src: Tensor) -> tuple[Tensor, Tensor]:
    """For scatter along `axis` with an index of k entries along it: the hit mask and the source values, both of
    shape self.shape + (k,), hit[..., m, ..., j] saying that index[..., j, ...] == m. A reduce over the last
    axis then gives self's layout directly. On the other axes the index is padded to self's size with the
    value n, which names no element (so the REDUCE needs no PAD after it)."""
    n, k = x.shape[axis], idx.shape[axis]
    grow = tuple((0, 0) if d == axis else (0, s - i) for d, (i, s) in enumerate(zip(idx.shape, x.shape,
                                                                                    strict=True)))
    source = src.shrink(tuple((0, s) for s in idx.shape))
    if any(after for _, after in grow):
        idx, source = idx.sub(n).pad(grow).add(n), source.pad(grow)
    full = (*x.shape, k)
    moved = idx.unsqueeze(-1).transpose(axis, -1)._broadcast_to(full)
    positions = core.int_range(x, n).reshape(*(n if d == axis else 1 for d in range(x.ndim)), 1)
    return moved.eq(positions), source.unsqueeze(-1).transpose(axis, -1)._broadcast_to(full)


def _scatter_src(x: Tensor, src: LazyTensor | Scalar, idx: Tensor, op: str) -> Tensor:
    if is_tensor(src):
        if src.ndim != x.ndim or any(i > s for i, s in zip(idx.shape, src.shape, strict=True)):
            raise ShapeError(f"{op}: src of shape {src.shape} must have as many axes as the tensor "
                             f"({x.shape}) and be at least the index's shape {idx.shape} on each")
        if src.device != x.device:
            raise ArgumentValueError(f"{op}: src is on {src.device} but the tensor is on {x.device}")
        return core.typed_like(x, src._cast_to(x.dtype))
    if isinstance(src, (bool, int, float)):
        return x._const(src, x.dtype, idx.shape)
    raise TypeError(f"{op}: src must be a Tensor or a Python scalar, got {type(src).__name__}")


def scatter(x: Tensor, dim: int, index: LazyTensor, src: LazyTensor | Scalar,
            reduce: Literal["add", "multiply"] | None = None) -> Tensor:
    """PyTorch's scatter (out of place): `out[index[i][j]][j] = src[i][j]` for dim=0. `reduce="add"` or
    `"multiply"` combines instead of replacing (repeated indices all count); without it the last write among
    repeated indices wins (PyTorch leaves that undefined)."""
    if reduce is not None and reduce not in ("add", "multiply"):
        raise ArgumentValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
    axis, idx = _dim_index(x, dim, index, "scatter")
    source = _scatter_src(x, src, idx, "scatter")
    if idx.numel() == 0:
        return x
    if reduce == "add":
        return _scatter_reduce_parts(x, axis, idx, source, "sum", True)
    if reduce == "multiply":
        return _scatter_reduce_parts(x, axis, idx, source, "prod", True)
    hit, values = _scatter_parts(x, axis, idx, source)
    k = idx.shape[axis]
    order = core.int_range(x, k).reshape(*(1,) * x.ndim, k)._broadcast_to(hit.shape)
    winner = hit.where(order, -1).max(-1, keepdim=True)  # the last index entry naming each element
    chosen = hit.logical_and(order.eq(winner._broadcast_to(hit.shape)))
    written = indexing.one_hot_sum(chosen.where(values, 0), (-1,))._cast_to(x.dtype)
    return winner.reshape(x.shape).ge(0).where(written, x)


def scatter_reduce(x: Tensor, dim: int, index: LazyTensor, src: LazyTensor | Scalar, reduce: ScatterReduce,
                   include_self: bool = True) -> Tensor:
    """PyTorch's scatter_reduce: every src value goes to `out[index[i][j]][j]` (dim=0) and the values landing on
    one element are combined by `reduce` ("sum", "prod", "mean", "amax", "amin"), together with the element's
    own value when `include_self`. Elements no index names keep their value. Integer "mean" floors."""
    if reduce not in _SCATTER_REDUCES:
        raise ArgumentValueError(f"scatter_reduce: reduce must be one of {', '.join(_SCATTER_REDUCES)}, got {reduce!r}")
    axis, idx = _dim_index(x, dim, index, "scatter_reduce")
    source = _scatter_src(x, src, idx, "scatter_reduce")
    if idx.numel() == 0:
        return x
    return _scatter_reduce_parts(x, axis, idx, source, reduce, include_self)


def _scatter_reduce_parts(x: Tensor, axis: int, idx: Tensor, src: Tensor, reduce: str, include_self: bool) -> Tensor:
    hit, values = _scatter_parts(x, axis, idx, src)
    touched = hit.max(-1)
    if reduce in ("sum", "mean"):
        total = hit.where(values, 0).sum(-1)._cast_to(x.dtype)
        if reduce == "sum":
            return x.add(total)._cast_to(x.dtype) if include_self else touched.where(total, x)
        count = hit.sum(-1)._cast_to(x.dtype)
        if include_self:
            total, count = total.add(x), count.add(1)
        count = count.maximum(1)  # untouched elements keep their value; this only avoids 0/0 there
        mean = total.div(count) if x.dtype.is_float else total.floordiv(count)
        return touched.where(mean._cast_to(x.dtype), x)
    if reduce == "prod":
        product = hit.where(values, 1).prod(-1)._cast_to(x.dtype)
        return touched.where(product.mul(x)._cast_to(x.dtype) if include_self else product, x)
    lowest, highest = _extremes(x)
    if reduce == "amax":
        best = hit.where(values, lowest).max(-1)
        combined = best.maximum(x) if include_self else best
    else:
        best = hit.where(values, highest).min(-1)
        combined = best.minimum(x) if include_self else best
    return touched.where(combined._cast_to(x.dtype), x)


def _extremes(x: Tensor) -> tuple[Scalar, Scalar]:
    """The identities of max and min in this dtype."""
    if x.dtype.is_float:
        return -math.inf, math.inf
    if x.dtype.is_bool:
        return False, True
    return x.dtype.min, x.dtype.max


def masked_fill(x: Tensor, mask: LazyTensor, value: LazyTensor | Scalar) -> Tensor:
    """`value` where `mask` is true, `self` elsewhere (mask and a tensor value broadcast against self)."""
    if not is_tensor(mask) or not mask.dtype.is_bool:
        what = mask.dtype if isinstance(mask, LazyTensor) else type(mask).__name__
        raise DTypeError(f"masked_fill: the mask must be a bool tensor, got {what}")
    fill = setitem.value_for(x, value, "masked_fill")
    if fill.ndim:
        raise ShapeError(f"masked_fill: the value must be a scalar or a 0-d tensor, got shape {fill.shape}")
    shape = broadcast_shapes(x.shape, mask.shape)
    if shape != x.shape:
        raise ShapeError(f"masked_fill: a mask of shape {mask.shape} does not broadcast to the tensor's shape "
                         f"{x.shape}")
    return core.typed_like(x, mask).where(fill, x)._cast_to(x.dtype)


def _masked_select_all(x: Tensor, mask: LazyTensor) -> Tensor:
    """The elements where `mask` is true, as a 1-D tensor (self and mask broadcast together). The result's
    size depends on the mask, so the mask is read back first, as in PyTorch."""
    if not is_tensor(mask) or not mask.dtype.is_bool:
        what = mask.dtype if isinstance(mask, LazyTensor) else type(mask).__name__
        raise DTypeError(f"masked_select: the mask must be a bool tensor, got {what}")
    shape = broadcast_shapes(x.shape, mask.shape)
    flat = x._broadcast_to(shape).flatten()
    positions = np.flatnonzero(core.read_back(mask._broadcast_to(shape)))
    return flat[core.from_host(x, positions)]


def nonzero(x: Tensor, size: int | None = None, fill_value: int = 0) -> Tensor:
    """The coordinates of the non-zero elements, shape (count, ndim), in row-major order (reads the values
    back: the count depends on them). The dtype is the default int (int32; int64 for larger axes).

    With `size=N` the shape is (N, ndim) whatever the values: the first N coordinates, rows past the count filled
    with `fill_value`, and nothing is read back, so it can run inside a jitted function. That is NumPy-API
    `argwhere`/`nonzero(size=, fill_value=)` as JAX defines it (PyTorch's nonzero has no `size`), built like
    `masked_select(size=)` over the flat positions."""
    if size is not None:
        return _nonzero_sized(x, size, fill_value)
    values = core.read_back(x)
    if x.ndim == 0:
        return core.from_host(x, np.zeros((1 if values.item() else 0, 0), np.int32))
    return core.from_host(x, np.argwhere(values))


def _nonzero_sized(x: Tensor, size: int, fill_value: int) -> Tensor:
    if type(size) is not int or size < 0:
        raise ArgumentValueError(f"nonzero: size must be an int >= 0 or None, got {size!r}")
    if isinstance(fill_value, bool) or not isinstance(fill_value, int):
        raise TypeError(f"nonzero: fill_value must be an int (a coordinate), got {type(fill_value).__name__}")
    n = x.numel()
    if not isinstance(n, int) or n >= 2**31:
        raise ShapeError(f"nonzero(size=) of shape {x.shape}: needs a concrete size below 2**31 elements")
    if x.ndim == 0:
        return x.zeros(size, 0, dtype=dtypes.int32, device=x.device)
    mask = x if x.dtype.is_bool else x.ne(0)  # NaN counts as non-zero, as in NumPy and PyTorch
    flat = masked_select(core.int_range(x, n), mask.flatten(), size=size, fill_value=-1)  # -1: a padding row
    columns, stride = [], n
    for dim in x.shape:
        stride //= dim
        columns.append(flat.floordiv(stride).mod(dim) if stride > 1 else flat.mod(dim))
    coords = columns[0].stack(*columns[1:], dim=1)
    return flat.eq(-1).unsqueeze(1).where(fill_value, coords)._cast_to(dtypes.int32)


def one_hot(x: Tensor, num_classes: int = -1) -> Tensor:
    """A new last axis of size `num_classes` with 1 at each value and 0 elsewhere (integer dtype). -1 means
    max(self) + 1, which reads the values back. Values outside 0..num_classes-1 give a row of zeros."""
    if x.dtype.is_float or x.dtype.is_bool:
        raise DTypeError(f"one_hot: the tensor must hold integer class indices, got {x.dtype}")
    if num_classes == -1:
        num_classes = int(core.read_back(x).max()) + 1 if x.numel() else 0
    if type(num_classes) is not int or num_classes < 0:
        raise ArgumentValueError(f"one_hot: num_classes must be an int >= 0 or -1, got {num_classes!r}")
    hit = x._cast_to(indexing.index_dtype(x.dtype)).unsqueeze(-1).eq(core.int_range(x, num_classes))
    return hit._cast_to(dtypes.default_int)


def masked_select(x: Tensor, mask: LazyTensor, size: int | None = None, fill_value: Scalar = 0) -> Tensor:
    """The elements where `mask` is true, flattened. With `size=None` the length is the number of true values
    (read back from the device first); with `size=N` it is N, cut or padded with `fill_value`, and nothing is
    read back, so the op can run inside a jitted function (tinygrad)."""
    if size is None:
        return _masked_select_all(x, mask)
    if not is_tensor(mask) or not mask.dtype.is_bool:
        what = mask.dtype if isinstance(mask, LazyTensor) else type(mask).__name__
        raise DTypeError(f"masked_select: the mask must be a bool tensor, got {what}")
    if type(size) is not int or size < 0:
        raise ArgumentValueError(f"masked_select: size must be an int >= 0 or None, got {size!r}")
    flat = x.flatten()
    keep = core.typed_like(x, mask)._broadcast_to(x.shape).flatten()
    rank = keep.cast(dtypes.int32).cumsum(0)  # 1-based slot of each kept element
    slots = core.int_range(x, size)
    hit = keep.logical_and(rank.unsqueeze(0).eq(slots.add(1).unsqueeze(1)))  # (size, numel)
    picked = hit.where(flat.unsqueeze(0), 0).sum(1)._cast_to(x.dtype)
    return slots.lt(keep.cast(dtypes.int32).sum()).where(picked, fill_value)._cast_to(x.dtype)


# ---- embedding lookup -------------------------------------------------------------------------------------
def embedding_rows(weight: Tensor, idx: Tensor, vocab: int) -> Tensor:
    """Row `idx` of `weight` (vocab, embed) for each integer index, zeros for an index outside 0..vocab-1
    (`nn.Embedding`). A one-hot comparison against 0..vocab-1 selects the row; codegen turns the selection into
    a load of that row (codegen/gather.py). The gradient is not autograd's through the selection (vocab times
    the work) but a scatter-add of the rows (embedding_grad.py), through a custom-gradient mark.

    Built as one chain of nodes in one Tensor: the graph `_embedding_rows_by_tensors` builds through ~13 Tensors
    per call, which for a model's token lookup cost more than the kernel. Not under no_grad, where the op-by-op
    form wraps its first float op in a gradient stop (lazy.py)."""
    if type(weight).no_grad:
        return _embedding_rows_by_tensors(weight, idx, vocab)
    key = (weight.uop, idx.uop, vocab, weight.device, idx.device)
    rows = _ROWS.get(key)
    if rows is None:
        rows = _embedding_rows_uop(weight, idx, vocab)
        if len(_ROWS) >= MAX_ROWS_KEPT:
            _ROWS.clear()
        _ROWS[key] = rows
    node, requires_grad = weight._derived_grad(rows, weight, idx)  # idx decides too, as in the op-by-op form
    return weight._make(node, weight.device, weight.inputs | idx.inputs, requires_grad)


# The graphs `embedding_rows` built last, by (weight node, index node, vocabulary, devices): a model looks up the
# same ids in the same table again (each forward of a batch, each decoding step's cache), and the graph is a pure
# function of those nodes (hash-consed: built again it would be the same object), so it is built once. Holding a
# node keeps no Buffer alive (a BUFFER node names its buffer by id). Emptied when full: a plain dict, so threads
# may share it without a lock.
MAX_ROWS_KEPT: Final = 64
_ROWS: Final[dict[tuple[UOp, UOp, int, str, str], UOp]] = {}


def _embedding_rows_uop(weight: Tensor, idx: Tensor, vocab: int) -> UOp:
    """The graph of `embedding_rows`, before autograd's part."""
    batch = idx.shape
    column = movement(idx.uop, Ops.RESHAPE, (*batch, 1))  # idx.unsqueeze(-1)
    counter = core.int_range_uop(vocab, idx.device)  # Tensor.arange(vocab)
    counter = counter.cast(dtypes.default_int)
    dtype = idx.dtype if idx.dtype is counter.dtype else result_dtype(idx.dtype, counter.dtype)
    hit_shape = broadcast_shapes((*batch, 1), (vocab,))
    hit = broadcast_uop(column.cast(dtype), hit_shape).alu(Ops.CMPEQ, broadcast_uop(counter.cast(dtype), hit_shape))
    hit = movement(hit, Ops.RESHAPE, (*hit_shape, 1))  # .unsqueeze(-1)
    # hit.where(weight, 0.0)
    value_dtype = weight.dtype if weight.dtype.is_float else result_dtype(weight.dtype, 0.0)
    values = weight.uop.cast(value_dtype)
    shape = broadcast_shapes(hit.shape or (), weight.shape)
    chosen = UOp(Ops.WHERE, value_dtype, (broadcast_uop(hit, shape), broadcast_uop(values, shape),
                                          broadcast_uop(const_uop(value_dtype, 0.0, weight.shape), shape)))
    # indexing.one_hot_sum(chosen, (-2,)), then .cast(weight.dtype)
    axis = len(shape) - 2
    rows = UOp(Ops.REDUCE, value_dtype, (chosen,), (Ops.ADD, (axis,)))
    rows = movement(rows, Ops.RESHAPE, tuple(n for i, n in enumerate(shape) if i != axis)).cast(weight.dtype)
    return _scatter_gradient(weight, idx, vocab, rows)


def _scatter_gradient(weight: Tensor, idx: Tensor, vocab: int, rows: UOp) -> UOp:
    """`rows` marked so that the weight's gradient is embedding_grad's scatter-add of the rows' gradient."""
    cls, device = type(weight), weight.device

    def rule(g: UOp, operands: tuple[UOp, ...]) -> tuple[UOp | None, ...]:
        return embedding_grad.rows_gradient(cls, device, g, operands[1], vocab), None

    return custom_gradient_mark(rows, (weight.uop, idx.uop), rule)


def _embedding_rows_by_tensors(weight: Tensor, idx: Tensor, vocab: int) -> Tensor:
    """`embedding_rows` op by op through Tensors: the reference its graph is tested against."""
    hit = idx.unsqueeze(-1).eq(creation.arange(type(idx), vocab, device=idx.device)).unsqueeze(-1)
    rows = indexing.one_hot_sum(hit.where(weight, 0.0), (-2,)).cast(weight.dtype)
    return rows._new(_scatter_gradient(weight, idx, vocab, rows.uop))

"""MultiTensor's movement ops, matmul, composite reductions and per-device elementwise ops (multi.py: the class).

A movement op keeps the split when each device can do its part alone: a reshape that keeps the split axis whole
(or splits it, or merges it with the axes after it, at shard boundaries), a permute, an expand, pads and flips of
other axes. A view that would move elements between devices raises ShapeError naming both shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from plygrad.frontend.tensor import Tensor
from plygrad.ir import ShapeError

if TYPE_CHECKING:
    from plygrad.frontend.multi import MultiTensor


def _shape_arg(shape: Sequence[Any], numel: int, op: str) -> tuple[int, ...]:
    dims = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
    if sum(1 for d in dims if d == -1) > 1:
        raise ShapeError(f"{op}: only one size may be -1, got {dims}")
    if -1 in dims:
        rest = math.prod(d for d in dims if d != -1)
        dims = tuple(numel // rest if rest and d == -1 else d for d in dims)
    return tuple(int(d) for d in dims)


def reshape(m: MultiTensor, *shape: Any) -> MultiTensor:
    """Each device reshapes its piece: the split axis must stay where the elements before it are the same, and
    every shard boundary must fall on a boundary of the new split axis."""
    new = _shape_arg(shape, m.numel(), "reshape")
    if math.prod(new) != m.numel():
        raise ShapeError(f"reshape: cannot view a tensor of shape {m.shape} as {new}")
    if new == m.shape:
        return m
    if m.axis is None or m.bounds is None:
        return m._map(lambda s: s.reshape(new))
    old, k = m.shape, m.axis
    outer, inner = math.prod(old[:k]), math.prod(old[k + 1:])
    for j in range(len(new)):
        if math.prod(new[:j]) != outer:
            continue
        tail = math.prod(new[j + 1:])
        if tail == 0 or any((a * inner) % tail or (b * inner) % tail for a, b in m.bounds):
            continue
        pieces = [s.reshape((*new[:j], (b - a) * inner // tail, *new[j + 1:]))
                  for s, (a, b) in zip(m.shards, m.bounds, strict=True)]
        return type(m)(pieces, j)
    raise ShapeError(f"reshape of a tensor of shape {old} split along axis {k} (pieces {list(m.bounds)}) to {new} "
                     "would move elements between devices; reshape on one device first (.to(device)), or shard "
                     "along another axis")


def view(m: MultiTensor, *shape: Any) -> MultiTensor:
    return reshape(m, *shape)


def permute(m: MultiTensor, *order: Any) -> MultiTensor:
    perm = tuple(order[0]) if len(order) == 1 and isinstance(order[0], (tuple, list)) else tuple(order)
    perm = tuple(m.shards[0]._axis(a, "permute") for a in perm)
    if sorted(perm) != list(range(m.ndim)):
        raise ShapeError(f"permute: {perm} is not an order of the {m.ndim} axes of shape {m.shape}")
    axis = None if m.axis is None else perm.index(m.axis)
    return m._map(lambda s: s.permute(perm), axis)


def transpose(m: MultiTensor, dim0: int = 1, dim1: int = 0) -> MultiTensor:
    a, b = m.shards[0]._axis(dim0, "transpose"), m.shards[0]._axis(dim1, "transpose")
    order = list(range(m.ndim))
    order[a], order[b] = order[b], order[a]
    return permute(m, tuple(order))


def expand(m: MultiTensor, *shape: Any) -> MultiTensor:
    dims = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
    shift = len(dims) - m.ndim
    full = tuple(m.shape[k - shift] if d == -1 else int(d) for k, d in enumerate(dims))
    if m.axis is None:
        return m._map(lambda s: s.expand(full))
    axis = m.axis + shift
    if full[axis] != m.shape[m.axis]:
        raise ShapeError(f"expand of a tensor of shape {m.shape} split along axis {m.axis} to {full}: the split axis "
                         "cannot change size")
    return type(m)([s.expand(tuple(s.shape[k - shift] if k == axis else d for k, d in enumerate(full)))
                    for s in m.shards], axis)


def flatten(m: MultiTensor, start_dim: int = 0, end_dim: int = -1) -> MultiTensor:
    if m.ndim == 0:
        return reshape(m, (1,))
    a, b = m.shards[0]._axis(start_dim, "flatten"), m.shards[0]._axis(end_dim, "flatten")
    return reshape(m, (*m.shape[:a], math.prod(m.shape[a:b + 1]), *m.shape[b + 1:]))


def unsqueeze(m: MultiTensor, dim: int) -> MultiTensor:
    at = dim + m.ndim + 1 if dim < 0 else dim
    if not 0 <= at <= m.ndim:
        raise ShapeError(f"unsqueeze: dim {dim} is out of range for shape {m.shape}")
    return reshape(m, (*m.shape[:at], 1, *m.shape[at:]))


def squeeze(m: MultiTensor, dim: int | None = None) -> MultiTensor:
    if dim is None:
        return reshape(m, tuple(n for n in m.shape if n != 1))
    at = m.shards[0]._axis(dim, "squeeze")
    return m if m.shape[at] != 1 else reshape(m, (*m.shape[:at], *m.shape[at + 1:]))


def _off_split(m: MultiTensor, op: str, touched: Sequence[int]) -> None:
    if m.axis is not None and m.axis in touched:
        raise ShapeError(f"{op} of a tensor of shape {m.shape} along its split axis {m.axis} would move elements "
                         "between devices; gather it first (.to(device)) or shard along another axis")


def pad(m: MultiTensor, padding: Sequence[tuple[int, int] | None], value: float = 0.0) -> MultiTensor:
    """Pads of other axes than the split one, per device (`padding`: one (before, after) or None per axis)."""
    _off_split(m, "pad", [k for k, p in enumerate(padding) if p is not None and tuple(p) != (0, 0)])
    return m._map(lambda s: s.pad(tuple(padding), value=value))


def shrink(m: MultiTensor, arg: Sequence[tuple[int, int] | None]) -> MultiTensor:
    """Per device along other axes than the split one. A range of the split axis is the slice itself, gathered and
    replicated on every device (tinygrad keeps only a range that is exactly one shard split; any range works here,
    at the cost of copies)."""
    if len(arg) != m.ndim:
        raise ShapeError(f"shrink of shape {m.shape} needs one (start, end) pair per axis, got {arg!r}")
    others = tuple(None if k == m.axis else r for k, r in enumerate(arg))
    cut = arg[m.axis] if m.axis is not None else None
    if m.axis is None or m.bounds is None or cut is None or tuple(cut) == (0, m.shape[m.axis]):
        return m._map(lambda s: s.shrink(others))
    start, end = cut
    if not 0 <= start <= end <= m.shape[m.axis]:
        raise ShapeError(f"shrink of shape {m.shape}: range {cut} of axis {m.axis} is outside 0..{m.shape[m.axis]}")
    pieces = []
    for s, (a, b) in zip(m.shards, m.bounds, strict=True):
        lo, hi = max(a, start), min(b, end)
        if lo < hi:
            pieces.append(s.shrink(tuple((lo - a, hi - a) if k == m.axis else r for k, r in enumerate(others))))
    if not pieces:  # an empty range: an empty tensor on every device
        empty = m.shards[0].shrink(tuple((0, 0) if k == m.axis else r for k, r in enumerate(others)))
        return type(m)([empty.to(d) for d in m.device], None)
    full = []
    for d in m.device:
        here = [p.to(d) for p in pieces]
        full.append(here[0].cat(*here[1:], dim=m.axis) if len(here) > 1 else here[0])
    return type(m)(full, None)


def flip(m: MultiTensor, axis: int | Sequence[int]) -> MultiTensor:
    axes = m.shards[0]._axes(axis, "flip")
    _off_split(m, "flip", axes)
    return m._map(lambda s: s.flip(axes))


def getitem(m: MultiTensor, index: Any) -> MultiTensor:
    """Basic indexing (ints, slices, None, Ellipsis). Leaving the split axis whole, each device indexes its piece;
    indexing the split axis reads the whole tensor on every device (gathered) and gives a replicated result."""
    items = list(index) if isinstance(index, tuple) else [index]
    for item in items:
        if not (item is None or item is Ellipsis or isinstance(item, (int, slice))) or isinstance(item, bool):
            raise TypeError(f"MultiTensor indexing takes ints, slices, None and Ellipsis, got {type(item).__name__}; "
                            "gather the tensor first (.to(device)) for tensor indices")
    if items.count(Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis")
    used = sum(1 for item in items if item is not None and item is not Ellipsis)
    if used > m.ndim:
        raise IndexError(f"too many indices for a tensor of shape {m.shape}: {used} given")
    at = items.index(Ellipsis) if Ellipsis in items else len(items)
    full = [*items[:at], *(slice(None),) * (m.ndim - used), *items[at + 1:]]
    axis, new_axis, out_dim = 0, None, 0
    for item in full:
        if item is None:
            out_dim += 1
            continue
        if axis == m.axis:
            if not (isinstance(item, slice) and item == slice(None)):
                source = m._gathered()
                return source._map(lambda s: s[tuple(full)], None)
            new_axis = out_dim
        out_dim += 0 if isinstance(item, int) else 1
        axis += 1
    return type(m)([s[tuple(full)] for s in m.shards], new_axis)


def setitem(m: MultiTensor, index: Any, value: Any) -> None:
    """`m[index] = value` in place, each device writing its part (basic indices, as `getitem`): along the split
    axis an int writes on the device holding it, a slice of step 1 on the devices it overlaps. `value` is a
    scalar, a replicated MultiTensor, or one laid out like `m[index]`."""
    from plygrad.frontend.multi import MultiTensor  # imports this module

    items = list(index) if isinstance(index, tuple) else [index]
    used = sum(1 for item in items if item is not None and item is not Ellipsis)
    at = items.index(Ellipsis) if Ellipsis in items else len(items)
    full = [*items[:at], *(slice(None),) * (m.ndim - used), *items[at + 1:]]
    target = getitem(m, tuple(full))  # checks the index, and gives the written region's shape and layout
    if isinstance(value, MultiTensor) and value.axis is not None and (value.axis, value.bounds) != (target.axis,
                                                                                                   target.bounds):
        value = value._gathered()
    if m.axis is None or target.axis is not None:
        local = m._local(value, target.ndim, target.axis, target.bounds)
        for s, v in zip(m.shards, local, strict=True):
            s[tuple(full)] = v
        return
    axis_items = [i for i, item in enumerate(full) if item is not None]
    slot = axis_items[m.axis]
    entry = full[slot]
    out_axis = sum(1 for item in full[:slot] if not isinstance(item, int))
    assert m.bounds is not None
    if isinstance(entry, int):
        where = entry % m.shape[m.axis]
        for s, v, (a, b) in zip(m.shards, m._local(value, target.ndim, None, None), m.bounds, strict=True):
            if a <= where < b:
                s[tuple(where - a if i == slot else item for i, item in enumerate(full))] = v
        return
    start, stop, step = entry.indices(m.shape[m.axis])
    if step != 1:
        raise IndexError(f"setitem on a MultiTensor: a slice of step {step} along the split axis {m.axis}; write it "
                         "on one device (.to(device)) and shard again")
    values = m._local(value, target.ndim, None, None)
    for s, v, (a, b) in zip(m.shards, values, m.bounds, strict=True):
        lo, hi = max(a, start), min(b, stop)
        if lo >= hi:
            continue
        piece = v
        if isinstance(v, Tensor) and v.ndim == target.ndim and v.shape[out_axis] != 1:
            piece = v.shrink(tuple((lo - start, hi - start) if k == out_axis else None for k in range(v.ndim)))
        s[tuple(slice(lo - a, hi - a) if i == slot else item for i, item in enumerate(full))] = piece


def cat(m: MultiTensor, *others: MultiTensor, dim: int = 0) -> MultiTensor:
    """Joined along `dim`: per device when `dim` is not the split axis (the others laid out like this tensor),
    else the gathered tensors joined on every device (replicated)."""
    at = m.shards[0]._axis(dim, "cat")
    if m.axis is not None and at == m.axis:
        parts = [m._gathered(), *(o._gathered() for o in others)]
        return type(m)([parts[0].shards[i].cat(*(q.shards[i] for q in parts[1:]), dim=at)
                        for i in range(len(m.shards))], None)
    local = [m._local(o, m.ndim, m.axis, m.bounds) for o in others]
    return type(m)([s.cat(*(piece[i] for piece in local), dim=at) for i, s in enumerate(m.shards)], m.axis)


# ---- matmul and composite reductions ------------------------------------------------------------------------
def matmul(self: MultiTensor, other: MultiTensor) -> MultiTensor:
    """`self @ other` as a broadcast product summed over the shared axis, so every layout pair works: split
    along a batch or output axis it stays split, split along the summed axis it is an ALLREDUCE."""
    a = self.unsqueeze(0) if self.ndim == 1 else self
    b = other.unsqueeze(1) if other.ndim == 1 else other
    if a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
        raise ShapeError(f"matmul: shapes {self.shape} and {other.shape} do not match in the summed axis")
    left = a.reshape((*a.shape[:-1], 1, a.shape[-1]))
    right = b.transpose(-1, -2)
    right = right.reshape((*right.shape[:-2], 1, *right.shape[-2:]))
    out = left.mul(right).sum(-1)
    if self.ndim == 1:
        out = out.squeeze(-2)
    if other.ndim == 1:
        out = out.squeeze(-1)
    return out


def linear(self: MultiTensor, weight: MultiTensor, bias: MultiTensor | None = None) -> MultiTensor:
    out = self.mul(weight) if weight.ndim == 1 else self.matmul(weight)
    return out if bias is None else out.add(bias)


def dot(self: MultiTensor, other: MultiTensor) -> MultiTensor:
    return self.matmul(other)


def conv2d(self: MultiTensor, weight: MultiTensor, bias: MultiTensor | None = None,  # noqa: PLR0917 (Tensor's)
           groups: int = 1, stride: Any = 1, dilation: Any = 1, padding: Any = 0, dtype: Any = None) -> MultiTensor:
    """`Tensor.conv2d` on every device. A batch split (axis 0) stays split; weights split on the output channels
    (axis 0) split the result's channels (axis 1); input and weights split alike on the input channels (axis 1)
    give per-device partial sums and an ALLREDUCE. Other layouts are gathered first."""
    from plygrad.frontend.multi import allreduce  # imports this module

    kwargs = {"stride": stride, "dilation": dilation, "padding": padding, "dtype": dtype}
    by_channel = groups == 1 and self.axis == 1 and weight.axis == 1 and self.bounds == weight.bounds
    if not by_channel:
        if weight.axis not in (None, 0) or (weight.axis == 0 and self.axis is not None):
            weight = weight._gathered()
        if self.axis not in (None, 0) or (groups != 1 and weight.axis is not None):
            self, weight = self._gathered(), weight._gathered()
    if bias is not None and bias.axis is not None:
        bias = bias._gathered()
    if by_channel:
        partial = [s.conv2d(w, None, groups, **kwargs) for s, w in zip(self.shards, weight.shards, strict=True)]
        out = type(self)(allreduce(partial), None)
        return out if bias is None else out.add(bias.reshape(bias.shape[0], *(1,) * (out.ndim - 2)))
    axis = 1 if weight.axis == 0 else self.axis
    biases: list[Any] = [None] * len(self.shards) if bias is None else list(bias.shards)
    if bias is not None and weight.axis == 0 and weight.bounds is not None:
        biases = [b.shrink(((lo, hi),)) for b, (lo, hi) in zip(biases, weight.bounds, strict=True)]
    return type(self)([s.conv2d(w, b, groups, **kwargs)
                       for s, w, b in zip(self.shards, weight.shards, biases, strict=True)], axis)


def batchnorm(self: MultiTensor, weight: MultiTensor | None, bias: MultiTensor | None,  # noqa: PLR0917 (Tensor's)
              mean: MultiTensor, invstd: MultiTensor, axis: int = 1) -> MultiTensor:
    """(x - mean) * invstd * weight + bias with per-channel statistics along `axis`: with statistics taken over a
    batch split across devices (their means end in ALLREDUCEs), nn.BatchNorm is a synced BatchNorm."""
    at = self.shards[0]._axis(axis, "batchnorm")
    shape = tuple(n if k == at else 1 for k, n in enumerate(self.shape))

    def per_channel(t: MultiTensor) -> MultiTensor:
        return t.reshape(shape) if t.shape == (self.shape[at],) else t

    out = self.sub(per_channel(mean)).mul(per_channel(invstd))
    if weight is not None:
        out = out.mul(per_channel(weight))
    return out if bias is None else out.add(per_channel(bias))


def sparse_categorical_crossentropy(self: MultiTensor, Y: MultiTensor, ignore_index: int = -1,  # noqa: N803
                                    label_smoothing: float = 0.0, reduction: str = "mean") -> MultiTensor:
    """Tensor.sparse_categorical_crossentropy (classes on the last axis, integer targets laid out like the rows):
    the mean over a batch split across devices ends in ALLREDUCEs."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"sparse_categorical_crossentropy: reduction must be 'mean', 'sum' or 'none', got "
                         f"{reduction!r}")
    classes = self.shape[-1]
    logp = self.log_softmax(-1)
    keep = Y.ne(ignore_index)
    picked = logp.mul(Y.mul(keep).one_hot(classes)).sum(-1)
    per_row = picked.mul(1.0 - label_smoothing).add(logp.mean(-1).mul(label_smoothing)).neg().mul(keep)
    if reduction == "none":
        return per_row
    total = per_row.sum()
    return total if reduction == "sum" else total.div(keep.sum().float())


def var(self: MultiTensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,
        correction: int = 1) -> MultiTensor:
    axes = self.shards[0]._axes(axis, "var")
    count = math.prod(self.shape[a] for a in axes)
    centered = self.sub(self.mean(axes, keepdim=True))
    return centered.mul(centered).sum(axes, keepdim).div(max(count - correction, 0))


def std(self: MultiTensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,
        correction: int = 1) -> MultiTensor:
    return self.var(axis, keepdim, correction).sqrt()


def log_softmax(self: MultiTensor, axis: int = -1) -> MultiTensor:
    shifted = self.sub(self.max(axis, keepdim=True).detach())
    return shifted.sub(shifted.exp().sum(axis, keepdim=True).log())


def softmax(self: MultiTensor, axis: int = -1) -> MultiTensor:
    e = self.sub(self.max(axis, keepdim=True).detach()).exp()
    return e.div(e.sum(axis, keepdim=True))


def logsumexp(self: MultiTensor, axis: int = -1, keepdim: bool = False) -> MultiTensor:
    m = self.max(axis, keepdim=True).detach()
    out = self.sub(m).exp().sum(axis, keepdim=True).log().add(m)
    return out if keepdim else out.squeeze(axis)


# ---- elementwise ops, by how they take their operands -------------------------------------------------------------
def spatial(name: str) -> Callable[..., MultiTensor]:
    """A pooling op over the axes after (N, C): per device when the split is the batch or the channels."""
    def op(self: MultiTensor, *args: Any, **kwargs: Any) -> MultiTensor:
        source = self if self.axis is None or self.axis < 2 else self._gathered()
        return source._map(lambda s: getattr(s, name)(*args, **kwargs))

    op.__name__ = name
    op.__doc__ = f"`Tensor.{name}` on every device (a tensor split along a spatial axis is gathered first)."
    return op


def arg_reduce(name: str) -> Callable[..., MultiTensor]:
    """argmax/argmin along an axis other than the split one, per device (the split axis is gathered first)."""
    def op(self: MultiTensor, axis: int | None = None, keepdim: bool = False) -> MultiTensor:
        at = None if axis is None else self.shards[0]._axis(axis, name)
        source = self if at is not None and self.axis is not None and at != self.axis else self._gathered()
        new_axis = source.axis
        if new_axis is not None and at is not None and not keepdim and at < new_axis:
            new_axis -= 1
        return type(self)([getattr(s, name)(axis, keepdim=keepdim) for s in source.shards], new_axis)

    op.__name__ = name
    op.__doc__ = f"`Tensor.{name}`, per device where the axis is not the split one."
    return op


def unary(name: str) -> Callable[..., MultiTensor]:
    def op(self: MultiTensor, *args: Any, **kwargs: Any) -> MultiTensor:
        return self._map(lambda s: getattr(s, name)(*args, **kwargs))

    op.__name__ = name
    op.__doc__ = f"`Tensor.{name}` on every device."
    return op


def binary(name: str) -> Callable[..., MultiTensor]:
    def op(self: MultiTensor, other: Any, reverse: bool = False) -> MultiTensor:
        if reverse:
            return self._elementwise(name, [other], reverse=True)
        return self._elementwise(name, [other])

    op.__name__ = name
    op.__doc__ = f"`Tensor.{name}` on every device, the operands laid out like the result."
    return op


def where(self: MultiTensor, x: Any, y: Any) -> MultiTensor:
    """`self ? x : y` element by element, every device on its piece."""
    return self._elementwise("where", [x, y])

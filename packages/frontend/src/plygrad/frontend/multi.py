"""`MultiTensor`: one logical tensor over several devices of one process (tinygrad's multi-device tensors).

A MultiTensor is a Tensor per device (`shards`, one lazy graph each) and `axis`: the axis it is split along, or
None when every device holds a full copy (replicated). Each op becomes the same op on every device; a reduction
across the split axis becomes a per-device partial and an `ALLREDUCE` in the tensor graph (collectives.py), which
the scheduler turns into copies and adds between the devices. docs/distributed.md, "One process, many devices".
"""

from __future__ import annotations

import builtins
import itertools
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final, overload

import numpy as np

from plygrad.frontend import multi_ops
from plygrad.frontend.lazy import Scalar, resolve_device
from plygrad.frontend.tensor import Tensor
from plygrad.ir import DType, ShapeError, UOp
from plygrad.ir.ops import Ops


def allreduce(shards: Sequence[Tensor], op: Ops = Ops.ADD) -> list[Tensor]:
    """The element-wise `op` (ADD, MAX or MUL) over one tensor per device, as one tensor on each of those devices:
    one ALLREDUCE node per result device, all over the same sources (docs/ir.md)."""
    if len({s.shape for s in shards}) != 1 or len({s.dtype for s in shards}) != 1:
        raise ShapeError(f"allreduce: the shards must share one shape and dtype, got "
                         f"{[(s.shape, s.dtype.name) for s in shards]}")
    srcs = tuple(s.uop for s in shards)
    out: list[Tensor] = []
    for i, s in enumerate(shards):
        node = UOp(Ops.ALLREDUCE, s.dtype, srcs, (op, s.device))
        out.append(s._new(node, *(o for j, o in enumerate(shards) if j != i)))
    return out


def canonical_devices(devices: Sequence[str]) -> tuple[str, ...]:
    if isinstance(devices, str) or not devices:
        raise ValueError(f"shard: devices must be a non-empty tuple of device names, got {devices!r}")
    found = tuple(resolve_device(d) for d in devices)
    if len(set(found)) != len(found):
        raise ValueError(f"shard: the devices {found} repeat one; each shard needs a device of its own")
    return found


def split_bounds(size: int, n: int, op: str = "shard") -> tuple[tuple[int, int], ...]:
    """tinygrad's split: n pieces of ceil(size / n), the last one smaller. A piece left empty is an error."""
    step = -(-size // n)
    bounds = tuple((min(i * step, size), min((i + 1) * step, size)) for i in range(n))
    if any(start == end for start, end in bounds):
        raise ShapeError(f"{op}: an axis of size {size} cannot be split over {n} devices without an empty shard "
                         f"(pieces of ceil({size}/{n}) = {step}); use fewer devices or a longer axis")
    return bounds


class MultiTensor:
    """A tensor sharded along `axis` over `device` (a tuple), or replicated on each of them (axis None).

    Made by `Tensor.shard(devices, axis)`, `Tensor.to(devices)` or `MultiTensor.shard_like`; read back with
    `.to(device)` or `.numpy()` (which gather the shards). Ops on it match the same ops on the whole tensor.
    """

    __slots__ = ("__weakref__", "axis", "bounds", "shards")

    shards: tuple[Tensor, ...]
    axis: int | None
    bounds: tuple[tuple[int, int], ...] | None

    def __init__(self, shards: Sequence[Tensor], axis: int | None) -> None:
        if not shards or not all(isinstance(s, Tensor) for s in shards):
            raise TypeError("MultiTensor needs a non-empty sequence of Tensors, one per device")
        devices = [s.device for s in shards]
        if len(set(devices)) != len(devices):
            raise ValueError(f"MultiTensor: the shards' devices {devices} repeat one")
        shapes = [s.shape for s in shards]
        if axis is None:
            if len(set(shapes)) != 1:
                raise ShapeError(f"MultiTensor: replicated shards must share one shape, got {shapes}")
            self.bounds = None
        else:
            first = shapes[0]
            if not 0 <= axis < len(first) or any(len(s) != len(first) or any(
                    a != b for k, (a, b) in enumerate(zip(s, first, strict=True)) if k != axis) for s in shapes):
                raise ShapeError(f"MultiTensor: shards of shapes {shapes} do not split one tensor along axis {axis}")
            starts = np.cumsum([0] + [s[axis] for s in shapes])
            self.bounds = tuple((int(a), int(b)) for a, b in itertools.pairwise(starts))
        self.shards, self.axis = tuple(shards), axis

    # ---- making and reading back ------------------------------------------------------------------------------
    @staticmethod
    def from_tensor(t: Tensor, devices: Sequence[str], axis: int | None = None) -> MultiTensor:
        """`t` split along `axis` over `devices` (tinygrad's `shard`), or copied whole to each (axis None)."""
        found = canonical_devices(devices)
        if axis is None:
            return MultiTensor([t.to(d) for d in found], None)
        ax = t._axis(axis, "shard")
        pieces = []
        for (start, end), d in zip(split_bounds(t.shape[ax], len(found)), found, strict=True):
            arg = tuple((start, end) if k == ax else (0, n) for k, n in enumerate(t.shape))
            pieces.append(t.shrink(arg).contiguous().to(d))
        return MultiTensor(pieces, ax)

    @property
    def device(self) -> tuple[str, ...]:
        return tuple(s.device for s in self.shards)

    @property
    def shape(self) -> tuple[int, ...]:
        shape = self.shards[0].shape
        if self.axis is None or self.bounds is None:
            return shape
        return tuple(self.bounds[-1][1] if k == self.axis else n for k, n in enumerate(shape))

    @property
    def dtype(self) -> DType:
        return self.shards[0].dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        layout = "replicated" if self.axis is None else f"axis={self.axis}"
        return f"<MultiTensor shape={self.shape} dtype={self.dtype.name} device={self.device} {layout}>"

    def shard(self, devices: Sequence[str], axis: int | None = None) -> MultiTensor:
        """This tensor laid out again: gathered on the first device, then split (or copied) over `devices`."""
        return MultiTensor.from_tensor(self.gather(self.device[0]), devices, axis)

    def shard_(self, devices: Sequence[str], axis: int | None = None) -> MultiTensor:
        """`shard` in place: this object holds the new shards afterwards."""
        new = self.shard(devices, axis)
        self.shards, self.axis, self.bounds = new.shards, new.axis, new.bounds
        return self

    def shard_like(self, other: MultiTensor | Tensor) -> MultiTensor | Tensor:
        return _shard_like(self, other)

    @overload
    def to(self, device: str) -> Tensor: ...
    @overload
    def to(self, device: tuple[str, ...] | list[str]) -> MultiTensor: ...

    def to(self, device: str | tuple[str, ...] | list[str]) -> MultiTensor | Tensor:
        """Gathered on one device (a Tensor: the shards copied there and concatenated), or laid out over a tuple
        of devices (replicated)."""
        if not isinstance(device, str):
            return self.shard(device, None)
        return self.gather(device)

    def gather(self, device: str) -> Tensor:
        """The whole tensor on `device`: every shard copied there and concatenated along the split axis."""
        target = resolve_device(device)
        if self.axis is None:
            return next((s for s in self.shards if s.device == target), self.shards[0].to(target))
        parts = [s.to(target) for s in self.shards]
        return parts[0].cat(*parts[1:], dim=self.axis) if len(parts) > 1 else parts[0]

    def numpy(self) -> np.ndarray[Any, Any]:
        if self.axis is None:
            return self.shards[0].numpy()
        return np.concatenate([s.numpy() for s in self.shards], axis=self.axis)

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Scalar:
        return self.shards[0].item() if self.axis is None else self.gather(self.device[0]).item()

    def realize(self, *others: MultiTensor | Tensor) -> MultiTensor:
        """Compute every shard (and `others`) in one schedule."""
        tensors = [*self.shards, *(s for o in others for s in (o.shards if isinstance(o, MultiTensor) else (o,)))]
        tensors[0].realize(*tensors[1:])
        return self

    def contiguous(self) -> MultiTensor:
        return self._map(lambda s: s.contiguous())

    # ---- per-device maps ---------------------------------------------------------------------------------------
    def _map(self, fn: Callable[[Tensor], Tensor], axis: int | str | None = "same") -> MultiTensor:
        new_axis = self.axis if axis == "same" else axis
        return MultiTensor([fn(s) for s in self.shards], new_axis if isinstance(new_axis, int) else None)

    def _gathered(self) -> MultiTensor:
        """The same values replicated (an all-gather: every shard copied to every device and concatenated)."""
        if self.axis is None:
            return self
        full = []
        for d in self.device:
            parts = [s.to(d) for s in self.shards]
            full.append(parts[0].cat(*parts[1:], dim=self.axis))
        return MultiTensor(full, None)

    def _local(self, other: MultiTensor | Tensor | Scalar, ndim: int, axis: int | None,
               bounds: tuple[tuple[int, int], ...] | None) -> list[Any]:
        """`other` as one operand per device for an op whose result (of rank `ndim`) is split along `axis`."""
        if not isinstance(other, (MultiTensor, Tensor)):
            return [other] * len(self.shards)
        if isinstance(other, Tensor):
            raise ValueError(f"an op between a tensor on {other.device} and a MultiTensor on {self.device}: move "
                             f"the tensor with .to({self.device}) or .shard({self.device}, axis) first")
        if other.device != self.device:
            raise ValueError(f"an op between MultiTensors on {other.device} and {self.device}: they must be on the "
                             "same devices, in the same order")
        shift = ndim - other.ndim
        mine = None if other.axis is None else other.axis + shift
        if mine is not None and (mine != axis or other.bounds != bounds):
            other, mine = other._gathered(), None
        if mine is None and axis is not None and bounds is not None:
            here = axis - shift
            if here >= 0 and other.shape[here] != 1:
                return [s.shrink(tuple((a, b) if k == here else (0, n) for k, n in enumerate(s.shape)))
                        for s, (a, b) in zip(other.shards, bounds, strict=True)]
        return list(other.shards)

    def _elementwise(self, name: str, others: Sequence[MultiTensor | Tensor | Scalar], *args: Any,
                     reverse: bool = False, **kwargs: Any) -> MultiTensor:
        """`Tensor.<name>` on every device, the operands laid out like the result: the first operand split along
        an axis decides the result's split; replicated operands are cut to it, operands split otherwise gathered."""
        shapes = [self.shape] + [o.shape for o in others if isinstance(o, (MultiTensor, Tensor))]
        ndim = max(len(s) for s in shapes)
        lead = next((o for o in (self, *others) if isinstance(o, MultiTensor) and o.axis is not None), None)
        axis = None if lead is None or lead.axis is None else lead.axis + ndim - lead.ndim
        bounds = None if lead is None else lead.bounds
        mine = self._local(self, ndim, axis, bounds)
        theirs = [self._local(o, ndim, axis, bounds) for o in others]
        method = getattr(Tensor, name)
        out = []
        for i, s in enumerate(mine):
            operands = [t[i] for t in theirs]
            out.append(method(s, *operands, *args, reverse, **kwargs) if reverse else
                       method(s, *operands, *args, **kwargs))
        return MultiTensor(out, axis)

    # ---- reductions --------------------------------------------------------------------------------------------
    def _reduce(self, name: str, axis: int | Sequence[int] | None, keepdim: bool) -> MultiTensor:
        axes = self.shards[0]._axes(axis, name)
        local = [getattr(s, name)(axes if axes else None, keepdim=keepdim) if axes else s for s in self.shards]
        if self.axis is None or self.axis not in axes:
            new_axis = self.axis
            if new_axis is not None and not keepdim:
                new_axis -= sum(1 for a in axes if a < new_axis)
            return MultiTensor(local, new_axis)
        if name == "min":
            return MultiTensor([t.neg() for t in allreduce([t.neg() for t in local], Ops.MAX)], None)
        op = {"sum": Ops.ADD, "max": Ops.MAX, "prod": Ops.MUL}[name]
        return MultiTensor(allreduce(local, op), None)

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> MultiTensor:
        return self._reduce("sum", axis, keepdim)

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> MultiTensor:
        return self._reduce("max", axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> MultiTensor:
        return self._reduce("min", axis, keepdim)

    def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> MultiTensor:
        return self._reduce("prod", axis, keepdim)

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> MultiTensor:
        axes = self.shards[0]._axes(axis, "mean")
        count = math.prod(self.shape[a] for a in axes)
        total = (self if self.dtype.is_float else self.float()).sum(axes, keepdim)
        return total.div(count) if count else total.mul(float("nan"))

    # ---- movement and elementwise ops (multi_ops.py) -----------------------------------------------------------
    reshape, view, permute, transpose = multi_ops.reshape, multi_ops.view, multi_ops.permute, multi_ops.transpose
    expand, flatten, unsqueeze, squeeze = multi_ops.expand, multi_ops.flatten, multi_ops.unsqueeze, multi_ops.squeeze
    pad, shrink, flip, where = multi_ops.pad, multi_ops.shrink, multi_ops.flip, multi_ops.where
    __getitem__, __setitem__, cat = multi_ops.getitem, multi_ops.setitem, multi_ops.cat
    matmul, linear, dot = multi_ops.matmul, multi_ops.linear, multi_ops.dot
    var, std, log_softmax, softmax = multi_ops.var, multi_ops.std, multi_ops.log_softmax, multi_ops.softmax
    logsumexp, conv2d, batchnorm = multi_ops.logsumexp, multi_ops.conv2d, multi_ops.batchnorm
    sparse_categorical_crossentropy = multi_ops.sparse_categorical_crossentropy
    neg = multi_ops.unary("neg")
    exp = multi_ops.unary("exp")
    exp2 = multi_ops.unary("exp2")
    log = multi_ops.unary("log")
    log2 = multi_ops.unary("log2")
    sqrt = multi_ops.unary("sqrt")
    rsqrt = multi_ops.unary("rsqrt")
    sin = multi_ops.unary("sin")
    cos = multi_ops.unary("cos")
    tan = multi_ops.unary("tan")
    tanh = multi_ops.unary("tanh")
    sigmoid = multi_ops.unary("sigmoid")
    relu = multi_ops.unary("relu")
    gelu = multi_ops.unary("gelu")
    silu = multi_ops.unary("silu")
    swish = multi_ops.unary("swish")
    softplus = multi_ops.unary("softplus")
    leaky_relu = multi_ops.unary("leaky_relu")
    elu = multi_ops.unary("elu")
    abs = multi_ops.unary("abs")
    square = multi_ops.unary("square")
    reciprocal = multi_ops.unary("reciprocal")
    sign = multi_ops.unary("sign")
    floor = multi_ops.unary("floor")
    ceil = multi_ops.unary("ceil")
    round = multi_ops.unary("round")
    trunc = multi_ops.unary("trunc")
    isnan = multi_ops.unary("isnan")
    isinf = multi_ops.unary("isinf")
    logical_not = multi_ops.unary("logical_not")
    bitwise_not = multi_ops.unary("bitwise_not")
    cast = multi_ops.unary("cast")
    float = multi_ops.unary("float")
    half = multi_ops.unary("half")
    int = multi_ops.unary("int")
    bool = multi_ops.unary("bool")
    clip = multi_ops.unary("clip")
    clamp = multi_ops.unary("clamp")
    relu6 = multi_ops.unary("relu6")
    hardtanh = multi_ops.unary("hardtanh")
    erf = multi_ops.unary("erf")
    dropout = multi_ops.unary("dropout")
    one_hot = multi_ops.unary("one_hot")
    max_pool2d, avg_pool2d = multi_ops.spatial("max_pool2d"), multi_ops.spatial("avg_pool2d")
    argmax, argmin = multi_ops.arg_reduce("argmax"), multi_ops.arg_reduce("argmin")
    add = multi_ops.binary("add")
    sub = multi_ops.binary("sub")
    mul = multi_ops.binary("mul")
    div = multi_ops.binary("div")
    pow = multi_ops.binary("pow")
    maximum = multi_ops.binary("maximum")
    minimum = multi_ops.binary("minimum")
    lt = multi_ops.binary("lt")
    gt = multi_ops.binary("gt")
    le = multi_ops.binary("le")
    ge = multi_ops.binary("ge")
    eq = multi_ops.binary("eq")
    ne = multi_ops.binary("ne")
    logical_and = multi_ops.binary("logical_and")
    logical_or = multi_ops.binary("logical_or")
    bitwise_and = multi_ops.binary("bitwise_and")
    bitwise_or = multi_ops.binary("bitwise_or")
    bitwise_xor = multi_ops.binary("bitwise_xor")

    @property
    def T(self) -> MultiTensor:  # noqa: N802 - NumPy's and PyTorch's spelling
        return self.permute(tuple(range(self.ndim))[::-1])

    def __add__(self, x: Any) -> MultiTensor: return self.add(x)
    def __radd__(self, x: Any) -> MultiTensor: return self.add(x, True)
    def __sub__(self, x: Any) -> MultiTensor: return self.sub(x)
    def __rsub__(self, x: Any) -> MultiTensor: return self.sub(x, True)
    def __mul__(self, x: Any) -> MultiTensor: return self.mul(x)
    def __rmul__(self, x: Any) -> MultiTensor: return self.mul(x, True)
    def __truediv__(self, x: Any) -> MultiTensor: return self.div(x)
    def __rtruediv__(self, x: Any) -> MultiTensor: return self.div(x, True)
    def __pow__(self, x: Any) -> MultiTensor: return self.pow(x)
    def __rpow__(self, x: Any) -> MultiTensor: return self.pow(x, True)
    def __neg__(self) -> MultiTensor: return self.neg()
    def __lt__(self, x: Any) -> MultiTensor: return self.lt(x)
    def __gt__(self, x: Any) -> MultiTensor: return self.gt(x)
    def __le__(self, x: Any) -> MultiTensor: return self.le(x)
    def __ge__(self, x: Any) -> MultiTensor: return self.ge(x)
    def __eq__(self, x: Any) -> MultiTensor: return self.eq(x)  # type: ignore[override]
    def __ne__(self, x: Any) -> MultiTensor: return self.ne(x)  # type: ignore[override]
    __hash__ = object.__hash__

    def __matmul__(self, other: MultiTensor) -> MultiTensor:
        return self.matmul(other)

    # ---- autograd ----------------------------------------------------------------------------------------------
    @property
    def requires_grad(self) -> builtins.bool | None:
        return self.shards[0].requires_grad

    def requires_grad_(self, requires_grad: builtins.bool = True) -> MultiTensor:
        for s in self.shards:
            s.requires_grad_(requires_grad)
        if requires_grad:
            _LEAVES[id(self)] = self
        else:
            _LEAVES.pop(id(self), None)
        return self

    @property
    def grad(self) -> MultiTensor | None:
        """The gradient laid out like this tensor (None before a backward reached it)."""
        grads = [s.grad for s in self.shards]
        if all(g is None for g in grads):
            return None
        return MultiTensor([g if g is not None else s.zeros_like() for g, s in zip(grads, self.shards,
                                                                                  strict=True)], self.axis)

    @grad.setter
    def grad(self, value: MultiTensor | None) -> None:
        for i, s in enumerate(self.shards):
            s.grad = None if value is None else value.shards[i]

    def detach(self) -> MultiTensor:
        return self._map(lambda s: s.detach())

    def backward(self) -> MultiTensor:
        """d self / d leaf into `.grad` of the leaves (self must have one element, and is then replicated).

        The gradient flows from one device's copy of self through the ALLREDUCEs to every device. A replicated
        leaf is one value used on every device, so its gradient is the sum of its shards' gradients: each shard's
        `.grad` becomes that sum, on its own device (an ALLREDUCE), so optimizers stepping the shards of one
        device at a time keep the replicas equal."""
        if self.numel() != 1:
            raise ShapeError(f"backward: a gradient can be implied only for a tensor of one element, got shape "
                             f"{self.shape}")
        replicated = [m for m in list(_LEAVES.values()) if m.axis is None and len(m.shards) > 1]
        before = {id(m): [s.grad for s in m.shards] for m in replicated}
        for m in replicated:
            for s in m.shards:
                s.grad = None
        source = self.shards[0] if self.axis is None else self.gather(self.device[0])
        source.backward()
        for m in replicated:
            fresh = [s.grad for s in m.shards]
            old = before[id(m)]
            if all(g is None for g in fresh):
                for s, g in zip(m.shards, old, strict=True):
                    s.grad = g
                continue
            parts = [g if g is not None else s.zeros_like() for g, s in zip(fresh, m.shards, strict=True)]
            for s, total, g in zip(m.shards, allreduce(parts), old, strict=True):
                s.grad = total if g is None else g + total
        return self

    # ---- writes -------------------------------------------------------------------------------------------------
    def assign(self, value: MultiTensor | Scalar) -> MultiTensor:
        """Write `value` into every shard in place (a replicated value is cut to this tensor's split)."""
        local = self._local(value, self.ndim, self.axis, self.bounds)
        for s, v in zip(self.shards, local, strict=True):
            s.assign(v)
        return self


_LEAVES: Final[weakref.WeakValueDictionary[int, MultiTensor]] = weakref.WeakValueDictionary()


def _shard_like(t: MultiTensor | Tensor, like: MultiTensor | Tensor) -> MultiTensor | Tensor:
    """`t` laid out like `like`: on its devices, split along its axis (or replicated), or on its one device."""
    if isinstance(like, Tensor):
        return t.to(like.device)
    base = t if isinstance(t, Tensor) else t.gather(t.device[0])
    return MultiTensor.from_tensor(base, like.device, like.axis)


def shard(t: Tensor, devices: Sequence[str], axis: int | None = None) -> MultiTensor:
    """`Tensor.shard`: `t` split along `axis` over `devices` (ceil-sized pieces, the last smaller), or copied
    whole to each (axis None)."""
    return MultiTensor.from_tensor(t, devices, axis)


def shard_like(t: Tensor, like: MultiTensor | Tensor) -> MultiTensor | Tensor:
    return _shard_like(t, like)

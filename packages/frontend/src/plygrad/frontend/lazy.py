"""`LazyTensor`: the state every Tensor carries (a TENSOR-stage UOp, a device, the Buffers it reads).

A tensor is a node of a lazy graph: nothing runs until `realize()`. The graph names runtime memory only by
`BufferRef` id and the runtime tracks Buffers weakly, so each tensor also holds strong references to the Buffers its
graph reads (`inputs`): a buffer lives exactly as long as some tensor can still read it.

The op layers stack on this class in one line (`elementwise` -> `movement` -> `reduce` -> `scan` -> `indexing` ->
`activations` -> `nn_ops` -> `creation` -> `tensor`), each file one
kind of op, so each stays small and a method of a lower layer is always available to a higher one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Self, TypeAlias

from plygrad.ir import ConstType, DType, Ops, ShapeError, UOp, broadcast_shapes, dtypes
from plygrad.runtime import Buffer, Device, canonical_device
from plygrad.runtime.config import PLYGRAD_DEVICE

Scalar: TypeAlias = bool | int | float


def default_device() -> str:
    """PLYGRAD_DEVICE if set (no backend is opened to answer), else the runtime's highest-priority backend."""
    chosen = PLYGRAD_DEVICE.get()
    return canonical_device(chosen) if chosen else Device.DEFAULT


def resolve_device(device: str | None) -> str:
    return default_device() if device is None else canonical_device(device)


def movement(x: UOp, op: Ops, arg: object) -> UOp:
    """A movement node over `x` (same dtype); the IR checks the argument against x's shape."""
    return UOp(op, x.dtype, (x,), arg)


def shape_of(x: UOp) -> tuple[int, ...]:
    shape = x.shape
    if shape is None:
        raise ShapeError(f"{x.op.name} node has no tensor shape")
    return shape


def const_uop(dtype: DType, value: ConstType, shape: tuple[int, ...]) -> UOp:
    """A constant of `shape`: a CONST (shape ()) reshaped to all-ones and EXPANDed, the broadcast the IR spells out."""
    node = UOp.const(dtype, value)
    if not shape:
        return node
    return movement(movement(node, Ops.RESHAPE, (1,) * len(shape)), Ops.EXPAND, shape)


def buffer_view(buf: Buffer, shape: tuple[int, ...]) -> UOp:
    """A tensor reading all of `buf` as `shape`: its BUFFER node RESHAPEd."""
    return movement(UOp(Ops.BUFFER, buf.dtype, (), buf.ref()), Ops.RESHAPE, shape)


def broadcast_uop(x: UOp, shape: tuple[int, ...]) -> UOp:
    """`x` broadcast to `shape` (NumPy rules): RESHAPE to add leading axes, then EXPAND the size-1 ones."""
    have = shape_of(x)
    if have == shape:
        return x
    broadcast_shapes(have, shape)  # raises ShapeError naming both shapes when they do not broadcast
    if len(have) > len(shape):
        raise ShapeError(f"cannot broadcast shape {have} to the smaller rank shape {shape}")
    padded = (1,) * (len(shape) - len(have)) + have
    if any(h not in (1, n) for h, n in zip(padded, shape, strict=True)):
        raise ShapeError(f"cannot broadcast shape {have} to {shape}")
    if padded != have:
        x = movement(x, Ops.RESHAPE, padded)
    return movement(x, Ops.EXPAND, shape) if padded != shape else x


class LazyTensor:
    """The lazy graph node behind a Tensor; the op methods live in the layers above."""

    __slots__ = ("__weakref__", "device", "inputs", "uop")

    uop: UOp
    device: str
    inputs: frozenset[Buffer]

    @classmethod
    def _make(cls, uop: UOp, device: str, inputs: Iterable[Buffer] = ()) -> Self:
        obj = object.__new__(cls)
        obj.uop, obj.device, obj.inputs = uop, device, frozenset(inputs)
        return obj

    def _new(self, uop: UOp, *others: LazyTensor) -> Self:
        """A tensor computed from this one (and `others`): it keeps every Buffer they read alive."""
        inputs = self.inputs.union(*(o.inputs for o in others)) if others else self.inputs
        return self._make(uop, self.device, inputs)

    # ---- properties -------------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return shape_of(self.uop)

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def _axis(self, axis: int, op: str, ndim: int | None = None) -> int:
        """`axis` (negative counts from the end) as 0..ndim-1; ShapeError naming `op` otherwise."""
        n = self.ndim if ndim is None else ndim
        low, high = (-n, n - 1) if n else (-1, 0)  # a 0-d tensor accepts axis 0 or -1, like PyTorch
        if type(axis) is not int or not low <= axis <= high:
            raise ShapeError(f"{op}: axis {axis!r} is out of range for a tensor of shape {self.shape} "
                             f"(valid: {low}..{high})")
        return axis % n if n else 0

    def _axes(self, axis: int | Sequence[int] | None, op: str) -> tuple[int, ...]:
        """Normalized, sorted, distinct axes; None means every axis."""
        if axis is None:
            return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        found = tuple(sorted({self._axis(a, op) for a in axes}))
        if len(found) != len(axes):
            raise ShapeError(f"{op}: axes {axes} of a tensor of shape {self.shape} repeat an axis")
        return found if self.ndim else ()

    def _const(self, value: Scalar, dtype: DType | None = None, shape: tuple[int, ...] | None = None) -> Self:
        """A constant tensor on this tensor's device."""
        dt = self.dtype if dtype is None else dtype
        return self._make(const_uop(dt, value, self.shape if shape is None else shape), self.device)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Self:
        return self._new(broadcast_uop(self.uop, shape))

    def _cast_to(self, dtype: DType) -> Self:
        return self if dtype is self.dtype else self._new(UOp(Ops.CAST, dtype, (self.uop,)))

    def _is_realized(self) -> bool:
        """Is this tensor a plain view of one Buffer (nothing to compute)?"""
        node = self.uop
        while node.op is Ops.RESHAPE:
            node = node.src[0]
        return node.op is Ops.BUFFER


FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)

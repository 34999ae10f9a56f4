"""`Tensor`: creation, realization and reading results back, on top of the op layers.

`realize()` is the only place work happens: the graphs of the tensors are put under one SINK, serialized at the
TENSOR stage, handed to the scheduler plugin (bytes in, bytes out) and the schedule is run by plygrad.runtime. Each
realized tensor then points at its output Buffer (a BUFFER + RESHAPE node) and holds that Buffer alive.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Self, TypeAlias

import numpy as np

from plygrad.frontend import scheduling
from plygrad.frontend.creation import CreationOps
from plygrad.frontend.lazy import Scalar, buffer_view, resolve_device
from plygrad.ir import DType, DTypeError, Ops, ShapeError, UOp, dtypes
from plygrad.runtime import Buffer

Data: TypeAlias = "Scalar | Sequence[Any] | np.ndarray[Any, Any]"


def _numpy_dtype(dtype: DType) -> np.dtype[Any]:
    """The NumPy dtype holding `dtype`'s bytes (bfloat16, which NumPy lacks, travels as its uint16 bits)."""
    return np.dtype(np.uint16) if dtype is dtypes.bfloat16 else np.dtype(dtype.numpy_name)


def _plygrad_dtype(array: np.ndarray[Any, Any]) -> DType:
    try:
        return dtypes.from_numpy_name(str(array.dtype))
    except KeyError:
        raise DTypeError(f"NumPy dtype {array.dtype} has no plygrad dtype; convert the array first "
                         f"(plygrad dtypes: {', '.join(d.name for d in dtypes.all())})") from None


def _to_bfloat16_bits(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """float32 values rounded to nearest-even bfloat16, as uint16 bit patterns."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(array, dtype=np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


class Tensor(CreationOps):
    """A lazy n-dimensional array. `Tensor([[1, 2], [3, 4]])`, `Tensor(np_array)`, `Tensor.rand(3, 4)`."""

    __slots__ = ()

    def __init__(self, data: Data | Tensor, dtype: DType | None = None, device: str | None = None) -> None:
        if isinstance(data, Tensor):
            moved = data.to(device) if device is not None else data
            moved = moved.cast(dtype) if dtype is not None else moved
            self.uop, self.device, self.inputs = moved.uop, moved.device, moved.inputs
            return
        self.device = resolve_device(device)
        if isinstance(data, (bool, int, float)):
            self.uop, self.inputs = UOp.const(dtypes.from_py(data) if dtype is None else dtype, data), frozenset()
            return
        array = data if isinstance(data, np.ndarray) else np.array(data)
        if not isinstance(data, np.ndarray):  # Python lists follow PyTorch's defaults, not NumPy's 64-bit ones
            if array.dtype.kind == "f":
                array = array.astype(_numpy_dtype(dtypes.default_float))
            elif array.dtype.kind in "iu":
                array = array.astype(_numpy_dtype(dtypes.default_int))
        dt = _plygrad_dtype(array) if dtype is None else dtype
        host = _to_bfloat16_bits(array) if dt is dtypes.bfloat16 else array.astype(_numpy_dtype(dt), copy=False)
        buf = Buffer(self.device, int(array.size), dt)
        scheduling.stage_host_data(buf, np.ascontiguousarray(host).tobytes())
        self.uop, self.inputs = buffer_view(buf, tuple(array.shape)), frozenset((buf,))

    @staticmethod
    def scheduler(name: str) -> AbstractContextManager[None]:
        """`with Tensor.scheduler("unfused"):` realizes with that `plygrad.schedulers` entry point in the block."""
        return scheduling.use_scheduler(name)

    # ---- running ----------------------------------------------------------------------------------------------
    def schedule(self, *others: Tensor) -> UOp:
        """The SCHEDULE-stage LINEAR that would realize this tensor (and `others`), without running it."""
        return scheduling.schedule_uop([t.uop for t in (self, *others)])

    def realize(self, *others: Tensor) -> Self:
        """Compute this tensor (and `others`) in one schedule; afterwards each reads its own output Buffer."""
        tensors: tuple[Tensor, ...] = (self, *others)
        pending = [t for t in tensors if not t._is_realized()]
        computed = [t for t in pending if t.numel() > 0]
        for t in pending:
            if t.numel() == 0:  # nothing to compute: an empty buffer of the right dtype
                t._point_at(Buffer(t.device, 0, t.dtype))
        if computed:
            inputs = sorted(frozenset[Buffer]().union(*(t.inputs for t in computed)), key=lambda b: b.id)
            outputs = scheduling.run([t.uop for t in computed], inputs)
            for t, buf in zip(computed, outputs, strict=True):
                t._point_at(buf)
        scheduling.flush_host_data(sorted(frozenset[Buffer]().union(*(t.inputs for t in tensors)), key=lambda b: b.id))
        return self

    def _point_at(self, buf: Buffer) -> None:
        self.uop, self.inputs = buffer_view(buf, self.shape), frozenset((buf,))

    def contiguous(self) -> Self:
        """A tensor stored in its own buffer in row-major order (a fusion boundary for the scheduler)."""
        return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

    def to(self, device: str) -> Tensor:
        """This tensor on `device` (a COPY when it is another device)."""
        target = resolve_device(device)
        if target == self.device:
            return self
        return Tensor._make(UOp(Ops.COPY, self.dtype, (self.uop,), target), target, self.inputs)

    def _buffer(self) -> Buffer:
        self.realize()
        (buf,) = self.inputs
        return buf

    def numpy(self) -> np.ndarray[Any, Any]:
        """The values as a NumPy array (realizing first); bfloat16 comes back as float32."""
        buf = self._buffer()
        array = np.frombuffer(buf.copyout(), dtype=_numpy_dtype(self.dtype)).reshape(self.shape)
        if self.dtype is dtypes.bfloat16:
            return (array.astype(np.uint32) << 16).view(np.float32)
        return array.copy()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Scalar:
        if self.numel() != 1:
            raise ShapeError(f"item() needs a tensor of exactly one element, got shape {self.shape}")
        value: Scalar = self.numpy().reshape(()).item()
        return value

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous; use .any()/.all() "
                             "or compare elements")
        return bool(self.item())

    def __iter__(self) -> Iterator[Tensor]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        state = "realized" if self._is_realized() else f"lazy {self.uop.op.name}"
        return f"<Tensor shape={self.shape} dtype={self.dtype.name} device={self.device} {state}>"


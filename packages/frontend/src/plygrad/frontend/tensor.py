"""`Tensor`: creation, realization and reading results back, on top of the op layers.

`realize()` is the only place work happens: the graphs of the tensors are put under one SINK, serialized at the
TENSOR stage, handed to the scheduler plugin (bytes in, bytes out) and the schedule is run by plygrad.runtime. Each
realized tensor then points at its output Buffer (a BUFFER + RESHAPE node) and holds that Buffer alive.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Self, TypeAlias

import numpy as np

from plygrad.frontend import random, scheduling
from plygrad.frontend.lazy import Scalar, const_uop, movement, resolve_device
from plygrad.frontend.reduce import ReduceOps
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


def _buffer_view(buf: Buffer, shape: tuple[int, ...]) -> UOp:
    return movement(UOp(Ops.BUFFER, buf.dtype, (), buf.ref()), Ops.RESHAPE, shape)


class Tensor(ReduceOps):
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
        self.uop, self.inputs = _buffer_view(buf, tuple(array.shape)), frozenset((buf,))

    # ---- creation ---------------------------------------------------------------------------------------------
    @staticmethod
    def _shape_arg(shape: tuple[int | Sequence[int], ...]) -> tuple[int, ...]:
        dims = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
        if not all(type(d) is int and d >= 0 for d in dims):
            raise ShapeError(f"a tensor shape needs sizes that are ints >= 0, got {dims!r}")
        return dims  # type: ignore[return-value]

    @classmethod
    def full(cls, shape: int | Sequence[int], fill: Scalar, dtype: DType | None = None,
             device: str | None = None) -> Tensor:
        """A constant tensor: a CONST broadcast to `shape`, which costs no memory until realized."""
        dims = cls._shape_arg((shape,))
        dt = dtypes.from_py(fill) if dtype is None else dtype
        return Tensor._make(const_uop(dt, fill, dims), resolve_device(device))

    @classmethod
    def zeros(cls, *shape: int | Sequence[int], dtype: DType | None = None, device: str | None = None) -> Tensor:
        return cls.full(cls._shape_arg(shape), 0.0, dtype or dtypes.default_float, device)

    @classmethod
    def ones(cls, *shape: int | Sequence[int], dtype: DType | None = None, device: str | None = None) -> Tensor:
        return cls.full(cls._shape_arg(shape), 1.0, dtype or dtypes.default_float, device)

    @classmethod
    def empty(cls, *shape: int | Sequence[int], dtype: DType | None = None, device: str | None = None) -> Tensor:
        """An uninitialized tensor: a Buffer that is allocated on first use, its contents undefined."""
        dims = cls._shape_arg(shape)
        buf = Buffer(resolve_device(device), math.prod(dims), dtype or dtypes.default_float)
        return Tensor._make(_buffer_view(buf, dims), buf.device, (buf,))

    @classmethod
    def arange(cls, start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: DType | None = None,
               device: str | None = None) -> Tensor:
        """`start, start+step, ...` below `stop` (`arange(n)` is 0..n-1), built lazily in the graph."""
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must not be zero")
        count = max(math.ceil((stop - start) / step), 0)
        dt = dtype or (dtypes.default_float if any(isinstance(v, float) for v in (start, stop, step))
                       else dtypes.default_int)
        dev = resolve_device(device)
        counter = random.counter(count, dtypes.int32 if count < 2**31 else dtypes.int64, dev)
        values = Tensor._make(counter, dev).cast(dt)
        return values.mul(step).add(start).cast(dt) if (start, step) != (0, 1) else values

    @classmethod
    def eye(cls, n: int, m: int | None = None, dtype: DType | None = None, device: str | None = None) -> Tensor:
        """The identity matrix: a row of (1, 0 x n) repeated, cut and folded so the ones land on the diagonal."""
        cols = n if m is None else m
        size = max(n, cols)
        ones = cls.ones(size, 1, dtype=dtype or dtypes.default_float, device=device)
        square = ones.pad(((0, 0), (0, size))).flatten().shrink(((0, size * size),)).reshape(size, size)
        return square.shrink(((0, n), (0, cols)))

    def full_like(self, fill: Scalar, dtype: DType | None = None) -> Tensor:
        return Tensor.full(self.shape, fill, dtype or self.dtype, self.device)

    def zeros_like(self, dtype: DType | None = None) -> Tensor:
        return self.full_like(0, dtype)

    def ones_like(self, dtype: DType | None = None) -> Tensor:
        return self.full_like(1, dtype)

    def empty_like(self, dtype: DType | None = None) -> Tensor:
        return Tensor.empty(self.shape, dtype=dtype or self.dtype, device=self.device)

    def rand_like(self, dtype: DType | None = None) -> Tensor:
        return Tensor.rand(self.shape, dtype=dtype or self.dtype, device=self.device)

    def randn_like(self, dtype: DType | None = None) -> Tensor:
        return Tensor.randn(self.shape, dtype=dtype or self.dtype, device=self.device)

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Make `rand`/`randn` reproducible: the same seed gives the same sequence of tensors."""
        random.manual_seed(seed)

    @classmethod
    def rand(cls, *shape: int | Sequence[int], dtype: DType | None = None, device: str | None = None) -> Tensor:
        """Uniform samples in [0, 1): Threefry-2x32 of a counter and the seed's key, high bits to a float."""
        dims = cls._shape_arg(shape)
        dt = dtype or dtypes.default_float
        if not dt.is_float:
            raise DTypeError(f"rand makes floats, not {dt}; cast the result to get another dtype")
        dev = resolve_device(device)
        return Tensor._make(random.uniform(math.prod(dims), dt, dev), dev).reshape(dims)

    @classmethod
    def randn(cls, *shape: int | Sequence[int], dtype: DType | None = None, device: str | None = None) -> Tensor:
        """Standard normal samples by Box-Muller: sqrt(-2 ln(1-u1)) * cos(2 pi u2) of two uniform tensors."""
        dims = cls._shape_arg(shape)
        dt = dtype or dtypes.default_float
        u = cls.rand(2, *dims, dtype=dtypes.float32, device=device)
        radius = u[0].sub(1.0, reverse=True).log().mul(-2.0).sqrt()
        return radius.mul(u[1].mul(2 * math.pi).cos()).cast(dt)

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
        self.uop, self.inputs = _buffer_view(buf, self.shape), frozenset((buf,))

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


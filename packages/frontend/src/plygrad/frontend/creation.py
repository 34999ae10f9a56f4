"""Creation: constants, ranges, identity matrices, empty buffers and random tensors, as Tensor classmethods.

Constants cost no memory until realized (a CONST broadcast to the shape); `arange` and the random tensors are built in
the graph from a counter (plygrad.frontend.random), so they too compute inside whatever kernel reads them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Self

from plygrad.frontend import random
from plygrad.frontend.lazy import Scalar, buffer_view, const_uop, resolve_device
from plygrad.frontend.nn_ops import NNOps
from plygrad.ir import DType, DTypeError, ShapeError, dtypes
from plygrad.runtime import Buffer


class CreationOps(NNOps):
    """Tensor factories (`Tensor.zeros(2, 3)`, `Tensor.rand(4)`, ...) and their `*_like` forms."""

    __slots__ = ()

    # ---- creation ---------------------------------------------------------------------------------------------
    @staticmethod
    def _shape_arg(shape: tuple[int | Sequence[int], ...]) -> tuple[int, ...]:
        dims = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
        if not all(type(d) is int and d >= 0 for d in dims):
            raise ShapeError(f"a tensor shape needs sizes that are ints >= 0, got {dims!r}")
        return dims  # type: ignore[return-value]

    @classmethod
    def full(cls, shape: int | Sequence[int], fill: Scalar, dtype: DType | None = None,
             device: str | None = None) -> Self:
        """A constant tensor: a CONST broadcast to `shape`, which costs no memory until realized."""
        dims = cls._shape_arg((shape,))
        dt = dtypes.from_py(fill) if dtype is None else dtype
        return cls._make(const_uop(dt, fill, dims), resolve_device(device))

    @classmethod
    def zeros(cls, *shape: int | Sequence[int], dtype: DType | None = None, device: str | None = None) -> Self:
        return cls.full(cls._shape_arg(shape), 0.0, dtype or dtypes.default_float, device)

    @classmethod
    def ones(cls, *shape: int | Sequence[int], dtype: DType | None = None, device: str | None = None) -> Self:
        return cls.full(cls._shape_arg(shape), 1.0, dtype or dtypes.default_float, device)

    @classmethod
    def empty(cls, *shape: int | Sequence[int], dtype: DType | None = None, device: str | None = None) -> Self:
        """An uninitialized tensor: a Buffer that is allocated on first use, its contents undefined."""
        dims = cls._shape_arg(shape)
        buf = Buffer(resolve_device(device), math.prod(dims), dtype or dtypes.default_float)
        return cls._make(buffer_view(buf, dims), buf.device, (buf,))

    @classmethod
    def arange(cls, start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: DType | None = None,
               device: str | None = None) -> Self:
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
        values = cls._make(counter, dev).cast(dt)
        return values.mul(step).add(start).cast(dt) if (start, step) != (0, 1) else values

    @classmethod
    def eye(cls, n: int, m: int | None = None, dtype: DType | None = None, device: str | None = None) -> Self:
        """The identity matrix: a row of (1, 0 x n) repeated, cut and folded so the ones land on the diagonal."""
        cols = n if m is None else m
        size = max(n, cols)
        ones = cls.ones(size, 1, dtype=dtype or dtypes.default_float, device=device)
        square = ones.pad(((0, 0), (0, size))).flatten().shrink(((0, size * size),)).reshape(size, size)
        return square.shrink(((0, n), (0, cols)))

    def full_like(self, fill: Scalar, dtype: DType | None = None) -> Self:
        return self.full(self.shape, fill, dtype or self.dtype, self.device)

    def zeros_like(self, dtype: DType | None = None) -> Self:
        return self.full_like(0, dtype)

    def ones_like(self, dtype: DType | None = None) -> Self:
        return self.full_like(1, dtype)

    def empty_like(self, dtype: DType | None = None) -> Self:
        return self.empty(self.shape, dtype=dtype or self.dtype, device=self.device)

    def rand_like(self, dtype: DType | None = None) -> Self:
        return self.rand(self.shape, dtype=dtype or self.dtype, device=self.device)

    def randn_like(self, dtype: DType | None = None) -> Self:
        return self.randn(self.shape, dtype=dtype or self.dtype, device=self.device)

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Make `rand`/`randn` reproducible: the same seed gives the same sequence of tensors."""
        random.manual_seed(seed)

    @classmethod
    def rand(cls, *shape: int | Sequence[int], dtype: DType | None = None, device: str | None = None) -> Self:
        """Uniform samples in [0, 1): Threefry-2x32 of a counter and the seed's key, high bits to a float."""
        dims = cls._shape_arg(shape)
        dt = dtype or dtypes.default_float
        if not dt.is_float:
            raise DTypeError(f"rand makes floats, not {dt}; cast the result to get another dtype")
        dev = resolve_device(device)
        return cls._make(random.uniform(math.prod(dims), dt, dev), dev).reshape(dims)

    @classmethod
    def randn(cls, *shape: int | Sequence[int], dtype: DType | None = None, device: str | None = None) -> Self:
        """Standard normal samples by Box-Muller: sqrt(-2 ln(1-u1)) * cos(2 pi u2) of two uniform tensors."""
        dims = cls._shape_arg(shape)
        dt = dtype or dtypes.default_float
        u = cls.rand(2, *dims, dtype=dtypes.float32, device=device)
        radius = u[0].sub(1.0, reverse=True).log().mul(-2.0).sqrt()
        return radius.mul(u[1].mul(2 * math.pi).cos()).cast(dt)

"""Creation: constants, ranges, identity matrices, empty buffers and random tensors, as Tensor classmethods.

Constants cost no memory until realized (a CONST broadcast to the shape); `arange` and the random tensors are built in
the graph from a counter (plygrad.frontend.random), so they too compute inside whatever kernel reads them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Self

import numpy as np

from plygrad.frontend import random
from plygrad.frontend.lazy import Scalar, buffer_view, const_uop, resolve_device
from plygrad.frontend.nn_ops import NNOps
from plygrad.ir import DType, DTypeError, DTypeLike, ShapeError, UOp, dtypes, to_dtype
from plygrad.runtime import Buffer


class CreationOps(NNOps):
    """Tensor factories (`Tensor.zeros(2, 3)`, `Tensor.rand(4)`, ...) and their `*_like` forms."""

    __slots__ = ()

    # ---- creation ---------------------------------------------------------------------------------------------
    @staticmethod
    def _shape_arg(shape: tuple[int | Sequence[int], ...]) -> tuple[int, ...]:
        """The shape a creation function was given as `2, 3`, `(2, 3)` or `[2, 3]`; a ShapeError naming the
        argument that is not a size (an int >= 0; NumPy integers count) is raised here, at the call."""
        dims: tuple[object, ...] = shape
        if len(shape) == 1 and not isinstance(shape[0], int):
            if not isinstance(shape[0], Sequence | np.ndarray):
                raise ShapeError(f"a tensor shape is sizes (ints >= 0) or one sequence of them, got "
                                 f"{type(shape[0]).__name__} {shape[0]!r}; e.g. Tensor.zeros(2, 3) or "
                                 "Tensor.zeros((2, 3))")
            dims = tuple(shape[0])
        for i, d in enumerate(dims):
            if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 0:
                raise ShapeError(f"a tensor shape needs sizes that are ints >= 0; size {i} of {dims!r} is "
                                 f"{type(d).__name__} {d!r}")
        return tuple(int(d) for d in dims)  # type: ignore[call-overload]

    @classmethod
    def full(cls, shape: int | Sequence[int], fill_value: Scalar, dtype: DTypeLike | None = None,
             device: str | None = None, requires_grad: bool | None = None) -> Self:
        """A constant tensor: a CONST broadcast to `shape`, which costs no memory until realized."""
        dims = cls._shape_arg((shape,))
        dt = dtypes.from_py(fill_value) if dtype is None else to_dtype(dtype)
        return cls._make(const_uop(dt, fill_value, dims), resolve_device(device))._requiring_grad(requires_grad)

    @classmethod
    def zeros(cls, *shape: int | Sequence[int], dtype: DTypeLike | None = None, device: str | None = None,
              requires_grad: bool | None = None) -> Self:
        return cls.full(cls._shape_arg(shape), 0.0, dtype or dtypes.default_float, device, requires_grad)

    @classmethod
    def ones(cls, *shape: int | Sequence[int], dtype: DTypeLike | None = None, device: str | None = None,
             requires_grad: bool | None = None) -> Self:
        return cls.full(cls._shape_arg(shape), 1.0, dtype or dtypes.default_float, device, requires_grad)

    @classmethod
    def empty(cls, *shape: int | Sequence[int], dtype: DTypeLike | None = None, device: str | None = None,
              requires_grad: bool | None = None) -> Self:
        """An uninitialized tensor: a Buffer that is allocated on first use, its contents undefined."""
        dims = cls._shape_arg(shape)
        dt = dtypes.default_float if dtype is None else to_dtype(dtype)
        buf = Buffer(resolve_device(device), math.prod(dims), dt)
        return cls._make(buffer_view(buf, dims), buf.device, (buf,))._requiring_grad(requires_grad)

    def _requiring_grad(self, requires_grad: bool | None) -> Self:
        """Pass a factory's `requires_grad=` on to the result (None leaves the default, like tinygrad)."""
        return self if requires_grad is None else self.requires_grad_(requires_grad)

    @classmethod
    def arange(cls, start: Scalar, stop: Scalar | None = None, step: Scalar = 1, *, dtype: DTypeLike | None = None,
               device: str | None = None, requires_grad: bool | None = None) -> Self:
        """`start, start+step, ...` below `stop` (`arange(n)` is 0..n-1), built lazily in the graph."""
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must not be zero")
        count = max(math.ceil((stop - start) / step), 0)
        dt = dtype or (dtypes.default_float if any(isinstance(v, float) for v in (start, stop, step))
                       else dtypes.default_int)
        dev = resolve_device(device)
        values = cls._make(cls._counter_uop(count, dev), dev).cast(dt)
        values = values.mul(step).add(start).cast(dt) if (start, step) != (0, 1) else values
        return values._requiring_grad(requires_grad)

    @staticmethod
    def _counter_uop(count: int, device: str) -> UOp:
        return random.counter(count, dtypes.int32 if count < 2**31 else dtypes.int64, device)

    @classmethod
    def linspace(cls, start: Scalar, stop: Scalar, steps: int, *, dtype: DTypeLike | None = None,
                 device: str | None = None, requires_grad: bool | None = None) -> Self:
        """`steps` evenly spaced values from `start` to `stop`, both included (PyTorch's `linspace`).

        Like PyTorch, the first half counts up from `start` and the second half down from `stop`, so both ends
        come out exact."""
        if type(steps) is not int or steps < 0:
            raise ValueError(f"linspace: steps {steps!r} must be an int >= 0")
        dt = dtypes.default_float if dtype is None else to_dtype(dtype)
        dev = resolve_device(device)
        if steps <= 1:
            return cls.full((steps,), start, dt, dev, requires_grad)
        compute = dt if dt.is_float else dtypes.float32
        step = (stop - start) / (steps - 1)
        index = cls._make(cls._counter_uop(steps, dev), dev).cast(compute)
        up = index.mul(step).add(start)
        down = index.sub(steps - 1).mul(step).add(stop)
        values = index.lt(steps // 2).where(up, down).cast(dt)
        return values._requiring_grad(requires_grad)

    @classmethod
    def eye(cls, n: int, m: int | None = None, dtype: DTypeLike | None = None, device: str | None = None,
            requires_grad: bool | None = None) -> Self:
        """The identity matrix: a row of (1, 0 x n) repeated, cut and folded so the ones land on the diagonal."""
        cols = n if m is None else m
        size = max(n, cols)
        ones = cls.ones(size, 1, dtype=dtype or dtypes.default_float, device=device)
        square = ones.pad(((0, 0), (0, size))).flatten().shrink(((0, size * size),)).reshape(size, size)
        return square.shrink(((0, n), (0, cols)))._requiring_grad(requires_grad)

    def full_like(self, fill_value: Scalar, dtype: DTypeLike | None = None, device: str | None = None,
                  requires_grad: bool | None = None) -> Self:
        return self.full(self.shape, fill_value, dtype or self.dtype, device or self.device, requires_grad)

    def zeros_like(self, dtype: DTypeLike | None = None, device: str | None = None,
                   requires_grad: bool | None = None) -> Self:
        return self.full_like(0, dtype, device, requires_grad)

    def ones_like(self, dtype: DTypeLike | None = None, device: str | None = None,
                  requires_grad: bool | None = None) -> Self:
        return self.full_like(1, dtype, device, requires_grad)

    def empty_like(self, dtype: DTypeLike | None = None, device: str | None = None,
                   requires_grad: bool | None = None) -> Self:
        return self.empty(self.shape, dtype=dtype or self.dtype, device=device or self.device,
                          requires_grad=requires_grad)

    def rand_like(self, dtype: DTypeLike | None = None, device: str | None = None,
                  requires_grad: bool | None = None) -> Self:
        return self.rand(self.shape, dtype=dtype or self._like_float(), device=device or self.device,
                         requires_grad=requires_grad)

    def randn_like(self, dtype: DTypeLike | None = None, device: str | None = None,
                   requires_grad: bool | None = None) -> Self:
        return self.randn(self.shape, dtype=dtype or self._like_float(), device=device or self.device,
                          requires_grad=requires_grad)

    def _like_float(self) -> DType:
        return self.dtype if self.dtype.is_float else dtypes.default_float

    # ---- triangles --------------------------------------------------------------------------------------------
    def triu(self, diagonal: int = 0) -> Self:
        """The upper triangle of the last two axes (elements with col - row >= diagonal); zeros elsewhere."""
        return self._triangle(diagonal, upper=True)

    def tril(self, diagonal: int = 0) -> Self:
        """The lower triangle of the last two axes (elements with col - row <= diagonal); zeros elsewhere."""
        return self._triangle(diagonal, upper=False)

    def _triangle(self, diagonal: int, upper: bool) -> Self:
        name = "triu" if upper else "tril"
        if self.ndim < 2:
            raise ShapeError(f"{name} of shape {self.shape}: needs at least 2 axes (a matrix or a batch of them)")
        rows, cols = self.shape[-2:]
        row = self._make(self._counter_uop(rows, self.device), self.device).reshape(rows, 1)
        col = self._make(self._counter_uop(cols, self.device), self.device).reshape(1, cols)
        offset = col.sub(row)  # (rows, cols), broadcast against the batch axes by where
        keep = offset.ge(diagonal) if upper else offset.le(diagonal)
        return keep.where(self, self._const(0))

    # ---- random -----------------------------------------------------------------------------------------------
    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Make `rand`/`randn` reproducible: the same seed gives the same sequence of tensors."""
        random.manual_seed(seed)

    @classmethod
    def rand(cls, *shape: int | Sequence[int], dtype: DTypeLike | None = None, device: str | None = None,
             requires_grad: bool | None = None, contiguous: bool = True) -> Self:
        """Uniform samples in [0, 1): Threefry-2x32 of a counter and the seed's key, high bits to a float.

        `contiguous` is accepted for tinygrad's signature; the samples are computed wherever they are read."""
        del contiguous
        dims = cls._shape_arg(shape)
        dt = dtypes.default_float if dtype is None else to_dtype(dtype)
        if not dt.is_float:
            raise DTypeError(f"rand makes floats, not {dt}; cast the result to get another dtype")
        dev = resolve_device(device)
        return cls._make(random.uniform(math.prod(dims), dt, dev), dev).reshape(dims)._requiring_grad(requires_grad)

    @classmethod
    def randn(cls, *shape: int | Sequence[int], dtype: DTypeLike | None = None, device: str | None = None,
              requires_grad: bool | None = None) -> Self:
        """Standard normal samples by Box-Muller: sqrt(-2 ln(1-u1)) * cos(2 pi u2) of two uniform tensors."""
        dims = cls._shape_arg(shape)
        dt = dtypes.default_float if dtype is None else to_dtype(dtype)
        if not dt.is_float:
            raise DTypeError(f"randn makes floats, not {dt}; cast the result to get another dtype")
        u = cls.rand(2, *dims, dtype=dtypes.float32, device=device)
        radius = u[0].sub(1.0, reverse=True).log().mul(-2.0).sqrt()
        return radius.mul(u[1].mul(2 * math.pi).cos()).cast(dt)._requiring_grad(requires_grad)

    @classmethod
    def randint(cls, *shape: int | Sequence[int], low: int = 0, high: int = 10, dtype: DTypeLike | None = None,
                device: str | None = None) -> Self:
        """Integers uniform in [low, high): floor(low + u * (high - low)) of uniform floats u, in float64 when
        the range is too wide for float32's 24-bit mantissa."""
        dt = dtypes.default_int if dtype is None else to_dtype(dtype)
        if not isinstance(low, int) or not isinstance(high, int) or low >= high:
            raise ValueError(f"randint: needs ints low < high, got low={low!r}, high={high!r}")
        if dt.is_float or dt.is_bool:
            raise DTypeError(f"randint makes integers, not {dt}")
        compute = dtypes.float32 if high - low <= 2**24 else dtypes.float64
        u = cls.rand(*shape, dtype=compute, device=device)
        return u.mul(high - low).floor().cast(dt).add(low)

    @classmethod
    def uniform(cls, *shape: int | Sequence[int], low: float = 0.0, high: float = 1.0, dtype: DTypeLike | None = None,
                device: str | None = None, requires_grad: bool | None = None) -> Self:
        """Floats uniform in [low, high)."""
        dt = dtypes.default_float if dtype is None else to_dtype(dtype)
        u = cls.rand(*shape, dtype=dt if dt.is_float else dtypes.default_float, device=device)
        return u.mul(high - low).add(low).cast(dt)._requiring_grad(requires_grad)

    @classmethod
    def normal(cls, *shape: int | Sequence[int], mean: float = 0.0, std: float = 1.0, dtype: DTypeLike | None = None,
               device: str | None = None, requires_grad: bool | None = None) -> Self:
        """Normal samples of the given mean and standard deviation."""
        z = cls.randn(*shape, dtype=dtype, device=device)
        return z.mul(std).add(mean)._requiring_grad(requires_grad)

    @classmethod
    def scaled_uniform(cls, *shape: int | Sequence[int], dtype: DTypeLike | None = None, device: str | None = None,
                       requires_grad: bool | None = None) -> Self:
        """Uniform in [-prod(shape)**-0.5, prod(shape)**-0.5) (tinygrad's default weight init)."""
        dims = cls._shape_arg(shape)
        bound = max(math.prod(dims), 1) ** -0.5
        return cls.uniform(dims, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)

    @classmethod
    def glorot_uniform(cls, *shape: int | Sequence[int], dtype: DTypeLike | None = None, device: str | None = None,
                       requires_grad: bool | None = None) -> Self:
        """Xavier/Glorot uniform: bound sqrt(6 / (shape[0] + prod(shape[1:]))), as tinygrad defines it."""
        dims = cls._shape_arg(shape)
        if not dims:
            raise ShapeError("glorot_uniform needs at least one axis")
        bound = math.sqrt(6 / max(dims[0] + math.prod(dims[1:]), 1))
        return cls.uniform(dims, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)

    @classmethod
    def kaiming_uniform(cls, *shape: int | Sequence[int], a: float = 0.01, dtype: DTypeLike | None = None,
                        device: str | None = None, requires_grad: bool | None = None) -> Self:
        """He uniform for leaky ReLU of slope `a`: bound gain*sqrt(3/fan_in), gain sqrt(2/(1+a^2)), and fan_in
        prod(shape[1:]) (inputs times kernel size for a conv weight), as PyTorch's `kaiming_uniform_`."""
        dims = cls._shape_arg(shape)
        bound = math.sqrt(3.0) * _leaky_relu_gain(a) / math.sqrt(_fan_in(dims, "kaiming_uniform"))
        return cls.uniform(dims, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)

    @classmethod
    def kaiming_normal(cls, *shape: int | Sequence[int], a: float = 0.01, dtype: DTypeLike | None = None,
                       device: str | None = None, requires_grad: bool | None = None) -> Self:
        """He normal: standard deviation gain/sqrt(fan_in), as PyTorch's `kaiming_normal_` (see kaiming_uniform)."""
        dims = cls._shape_arg(shape)
        std = _leaky_relu_gain(a) / math.sqrt(_fan_in(dims, "kaiming_normal"))
        return cls.normal(dims, mean=0.0, std=std, dtype=dtype, device=device, requires_grad=requires_grad)

    @classmethod
    def randperm(cls, n: int, device: str | None = None, dtype: DTypeLike | None = None,
                 requires_grad: bool | None = None) -> Self:
        """A random permutation of 0..n-1: the order that sorts n uniform random keys."""
        if type(n) is not int or n < 0:
            raise ValueError(f"randperm: n {n!r} must be an int >= 0")
        dt = dtype or dtypes.default_int
        keys = cls.rand(n, dtype=dtypes.float32, device=device)
        return keys.argsort().cast(dt)._requiring_grad(requires_grad)

    def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Self:
        """Indices drawn with probabilities proportional to the rows of `self` (1-D or 2-D weights >= 0).

        With replacement: a uniform draw scaled by the row total, counted against the running sum (cumsum) of the
        weights. Without: the `num_samples` largest keys `log(u) / w` (the exponential-race trick), which draws
        like PyTorch's sampling one index at a time without putting it back."""
        if self.ndim not in (1, 2):
            raise ShapeError(f"multinomial of shape {self.shape}: weights must be 1-D or 2-D (rows of weights)")
        n = self.shape[-1]
        if type(num_samples) is not int or num_samples < 1:
            raise ValueError(f"multinomial: num_samples {num_samples!r} must be an int >= 1")
        if not replacement and num_samples > n:
            raise ValueError(f"multinomial: cannot draw {num_samples} samples without replacement from {n} "
                             "categories")
        weights = (self if self.ndim == 2 else self.unsqueeze(0))._float_input()
        rows = weights.shape[0]
        if replacement:
            cdf = weights.cumsum(1)
            u = self.rand(rows, num_samples, 1, dtype=weights.dtype, device=self.device)
            target = u.mul(cdf[:, None, n - 1:])  # (rows, samples, 1): a point in [0, total)
            picked = cdf[:, None, :].le(target).sum(2)
        else:
            u = self.rand(rows, n, dtype=dtypes.float32, device=self.device)
            keys = u.sub(1.0, reverse=True).log().div(weights.cast(dtypes.float32))  # log(1-u) in (-inf, 0]
            picked = keys.topk(num_samples, dim=1)[1]
        picked = picked.cast(dtypes.default_int)
        return picked if self.ndim == 2 else picked.reshape(num_samples)


def _fan_in(dims: tuple[int, ...], op: str) -> int:
    """PyTorch's fan_in of a weight of shape (out, in, *kernel): in * prod(kernel)."""
    if len(dims) < 2:
        raise ShapeError(f"{op} of shape {dims}: fan_in needs a weight with at least 2 axes (out, in, ...)")
    return max(math.prod(dims[1:]), 1)


def _leaky_relu_gain(a: float) -> float:
    return math.sqrt(2.0 / (1 + a * a))

"""Creation: constants, ranges, identity matrices, empty buffers and random tensors, as Tensor classmethods.

Constants cost no memory until realized (a CONST broadcast to the shape); `arange` and the random tensors are built in
the graph from a counter (plygrad.frontend.randomness.stream), so they too compute inside whatever kernel reads them.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from plygrad.frontend import core
from plygrad.frontend.errors import ArgumentValueError
from plygrad.frontend.lazy import Scalar, buffer_view, const_uop, resolve_device
from plygrad.frontend.symbolic import check_size
from plygrad.ir import DTypeLike, ShapeError, SizeTypeError, UOp, dtypes, to_dtype
from plygrad.runtime import Buffer

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor


# ---- creation ---------------------------------------------------------------------------------------------
def shape_arg(shape: tuple[int | Sequence[int], ...]) -> tuple[int, ...]:
    """The shape a creation function was given as `2, 3`, `(2, 3)` or `[2, 3]`; a ShapeError naming the
    argument that is not a size (an int >= 0; NumPy integers count) is raised here, at the call: a SizeTypeError (a
    TypeError too, as PyTorch's) for a size that is not an int, a plain ShapeError for a negative one."""
    dims: tuple[object, ...] = shape
    if len(shape) == 1 and not isinstance(shape[0], int):
        if not isinstance(shape[0], Sequence | np.ndarray):
            raise SizeTypeError(f"a tensor shape is sizes (ints >= 0) or one sequence of them, got "
                             f"{type(shape[0]).__name__} {shape[0]!r}; e.g. Tensor.zeros(2, 3) or "
                             "Tensor.zeros((2, 3))")
        dims = tuple(shape[0])
    for i, d in enumerate(dims):
        if isinstance(d, UOp):  # a symbolic size (frontend/symbolic.py)
            check_size(d, "a tensor shape")
            continue
        if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 0:
            error = ShapeError if isinstance(d, int | np.integer) and not isinstance(d, bool) else SizeTypeError
            raise error(f"a tensor shape needs sizes that are ints >= 0; size {i} of {dims!r} is "
                        f"{type(d).__name__} {d!r}")
    return tuple(d if isinstance(d, UOp) else int(d) for d in dims)  # type: ignore[call-overload, misc]


def full(cls: type[Tensor], shape: int | Sequence[int], fill_value: Scalar, dtype: DTypeLike | None = None,
         device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """A constant tensor: a CONST broadcast to `shape`, which costs no memory until realized."""
    dims = shape_arg((shape,))
    dt = dtypes.from_py(fill_value) if dtype is None else to_dtype(dtype)
    return requiring_grad(cls._make(const_uop(dt, fill_value, dims), resolve_device(device)), requires_grad)


def zeros(cls: type[Tensor], *shape: int | Sequence[int], dtype: DTypeLike | None = None, device: str | None = None,
          requires_grad: bool | None = None) -> Tensor:
    return cls.full(shape_arg(shape), 0.0, dtype or dtypes.default_float, device, requires_grad)


def ones(cls: type[Tensor], *shape: int | Sequence[int], dtype: DTypeLike | None = None, device: str | None = None,
         requires_grad: bool | None = None) -> Tensor:
    return cls.full(shape_arg(shape), 1.0, dtype or dtypes.default_float, device, requires_grad)


def empty(cls: type[Tensor], *shape: int | Sequence[int], dtype: DTypeLike | None = None, device: str | None = None,
          requires_grad: bool | None = None) -> Tensor:
    """An uninitialized tensor: a Buffer that is allocated on first use, its contents undefined."""
    dims = shape_arg(shape)
    dt = dtypes.default_float if dtype is None else to_dtype(dtype)
    buf = Buffer(resolve_device(device), math.prod(dims), dt)
    return requiring_grad(cls._make(buffer_view(buf, dims), buf.device, (buf,)), requires_grad)


def requiring_grad(x: Tensor, requires_grad: bool | None) -> Tensor:
    """Pass a factory's `requires_grad=` on to the result (None leaves the default, like tinygrad)."""
    return x if requires_grad is None else x.requires_grad_(requires_grad)


def arange(cls: type[Tensor], start: Scalar, stop: Scalar | None = None, step: Scalar = 1, *,
           dtype: DTypeLike | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """`start, start+step, ...` below `stop` (`arange(n)` is 0..n-1), built lazily in the graph."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ArgumentValueError("arange: step must not be zero")
    count = max(math.ceil((stop - start) / step), 0)
    dt = dtype or (dtypes.default_float if any(isinstance(v, float) for v in (start, stop, step))
                   else dtypes.default_int)
    dev = resolve_device(device)
    values = cls._make(core.int_range_uop(count, dev), dev).cast(dt)
    values = values.mul(step).add(start).cast(dt) if (start, step) != (0, 1) else values
    return requiring_grad(values, requires_grad)


def linspace(cls: type[Tensor], start: Scalar, stop: Scalar, steps: int, *, dtype: DTypeLike | None = None,
             device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """`steps` evenly spaced values from `start` to `stop`, both included (PyTorch's `linspace`).

    Like PyTorch, the first half counts up from `start` and the second half down from `stop`, so both ends
    come out exact."""
    if type(steps) is not int or steps < 0:
        raise ArgumentValueError(f"linspace: steps {steps!r} must be an int >= 0")
    dt = dtypes.default_float if dtype is None else to_dtype(dtype)
    dev = resolve_device(device)
    if steps <= 1:
        return cls.full((steps,), start, dt, dev, requires_grad)
    compute = dt if dt.is_float else dtypes.float32
    step = (stop - start) / (steps - 1)
    index = cls._make(core.int_range_uop(steps, dev), dev).cast(compute)
    up = index.mul(step).add(start)
    down = index.sub(steps - 1).mul(step).add(stop)
    values = index.lt(steps // 2).where(up, down).cast(dt)
    return requiring_grad(values, requires_grad)


def eye(cls: type[Tensor], n: int, m: int | None = None, dtype: DTypeLike | None = None, device: str | None = None,
        requires_grad: bool | None = None) -> Tensor:
    """The identity matrix: a row of (1, 0 x n) repeated, cut and folded so the ones land on the diagonal."""
    cols = n if m is None else m
    size = max(n, cols)
    ones = cls.ones(size, 1, dtype=dtype or dtypes.default_float, device=device)
    square = ones.pad(((0, 0), (0, size))).flatten().shrink(((0, size * size),)).reshape(size, size)
    return requiring_grad(square.shrink(((0, n), (0, cols))), requires_grad)


def full_like(x: Tensor, fill_value: Scalar, dtype: DTypeLike | None = None, device: str | None = None,
              requires_grad: bool | None = None) -> Tensor:
    return x.full(x.shape, fill_value, dtype or x.dtype, device or x.device, requires_grad)


def zeros_like(x: Tensor, dtype: DTypeLike | None = None, device: str | None = None,
               requires_grad: bool | None = None) -> Tensor:
    return x.full_like(0, dtype, device, requires_grad)


def ones_like(x: Tensor, dtype: DTypeLike | None = None, device: str | None = None,
              requires_grad: bool | None = None) -> Tensor:
    return x.full_like(1, dtype, device, requires_grad)


def empty_like(x: Tensor, dtype: DTypeLike | None = None, device: str | None = None,
               requires_grad: bool | None = None) -> Tensor:
    return x.empty(x.shape, dtype=dtype or x.dtype, device=device or x.device,
                      requires_grad=requires_grad)


# ---- triangles --------------------------------------------------------------------------------------------
def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two axes (elements with col - row >= diagonal); zeros elsewhere."""
    return _triangle(x, diagonal, upper=True)


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two axes (elements with col - row <= diagonal); zeros elsewhere."""
    return _triangle(x, diagonal, upper=False)


def _triangle(x: Tensor, diagonal: int, upper: bool) -> Tensor:
    name = "triu" if upper else "tril"
    if x.ndim < 2:
        raise ShapeError(f"{name} of shape {x.shape}: needs at least 2 axes (a matrix or a batch of them)")
    rows, cols = x.shape[-2:]
    row = x._make(core.int_range_uop(rows, x.device), x.device).reshape(rows, 1)
    col = x._make(core.int_range_uop(cols, x.device), x.device).reshape(1, cols)
    offset = col.sub(row)  # (rows, cols), broadcast against the batch axes by where
    keep = offset.ge(diagonal) if upper else offset.le(diagonal)
    return keep.where(x, x._const(0))

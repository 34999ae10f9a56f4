"""Random tensors and dropout: rand, randn, randint, uniform, normal, the Glorot/Kaiming initializers, randperm,
multinomial, and dropout.

The numbers come from randomness/stream.py: Threefry-2x32 over a counter, with the offset and key as kernel
variables, so every draw is fresh and a new draw of the same shape reuses the compiled kernel.
"""


from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from plygrad.frontend import core, creation
from plygrad.frontend.errors import ArgumentValueError
from plygrad.frontend.lazy import resolve_device
from plygrad.frontend.randomness import stream
from plygrad.ir import DType, DTypeError, DTypeLike, ShapeError, dtypes, to_dtype

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

def _fan_in(dims: tuple[int, ...], op: str) -> int:
    """PyTorch's fan_in of a weight of shape (out, in, *kernel): in * prod(kernel)."""
    if len(dims) < 2:
        raise ShapeError(f"{op} of shape {dims}: fan_in needs a weight with at least 2 axes (out, in, ...)")
    return max(math.prod(dims[1:]), 1)


def _leaky_relu_gain(a: float) -> float:
    return math.sqrt(2.0 / (1 + a * a))


def dropout(x: Tensor, p: float = 0.5) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p), only while `Tensor.training`
    (otherwise the identity), like `F.dropout(x, p, training)`. Random bits come from the seeded counter."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability p={p} must be between 0 and 1")
    if not getattr(type(x), "training", False) or p == 0.0:
        return x
    if p == 1.0:
        return x.mul(0)
    draws = x._make(stream.uniform_uop(x.numel(), dtypes.float32, x.device), x.device)
    keep = draws.reshape(x.shape).ge(p)
    return keep.where(x.mul(1.0 / (1.0 - p)), 0)


def rand_like(x: Tensor, dtype: DTypeLike | None = None, device: str | None = None,
              requires_grad: bool | None = None) -> Tensor:
    return x.rand(x.shape, dtype=dtype or _like_float(x), device=device or x.device,
                     requires_grad=requires_grad)


def randn_like(x: Tensor, dtype: DTypeLike | None = None, device: str | None = None,
               requires_grad: bool | None = None) -> Tensor:
    return x.randn(x.shape, dtype=dtype or _like_float(x), device=device or x.device,
                      requires_grad=requires_grad)


def _like_float(x: Tensor) -> DType:
    return x.dtype if x.dtype.is_float else dtypes.default_float


def manual_seed(seed: int = 0) -> None:
    """Make `rand`/`randn` reproducible: the same seed gives the same sequence of tensors."""
    stream.set_seed(seed)


def rand(cls: type[Tensor], *shape: int | Sequence[int], dtype: DTypeLike | None = None,
         device: str | None = None, requires_grad: bool | None = None, contiguous: bool = True) -> Tensor:
    """Uniform samples in [0, 1): Threefry-2x32 of a counter and the seed's key, high bits to a float.

    `contiguous` is accepted for tinygrad's signature; the samples are computed wherever they are read."""
    del contiguous
    dims = creation.shape_arg(shape)
    dt = dtypes.default_float if dtype is None else to_dtype(dtype)
    if not dt.is_float:
        raise DTypeError(f"rand makes floats, not {dt}; cast the result to get another dtype")
    dev = resolve_device(device)
    drawn = cls._make(stream.uniform_uop(math.prod(dims), dt, dev), dev).reshape(dims)
    return creation.requiring_grad(drawn, requires_grad)


def randn(cls: type[Tensor], *shape: int | Sequence[int], dtype: DTypeLike | None = None,
          device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Standard normal samples by Box-Muller: sqrt(-2 ln(1-u1)) * cos(2 pi u2) of two uniform tensors."""
    dims = creation.shape_arg(shape)
    dt = dtypes.default_float if dtype is None else to_dtype(dtype)
    if not dt.is_float:
        raise DTypeError(f"randn makes floats, not {dt}; cast the result to get another dtype")
    u = cls.rand(2, *dims, dtype=dtypes.float32, device=device)
    radius = u[0].sub(1.0, reverse=True).log().mul(-2.0).sqrt()
    return creation.requiring_grad(radius.mul(u[1].mul(2 * math.pi).cos()).cast(dt), requires_grad)


def randint(cls: type[Tensor], *shape: int | Sequence[int], low: int = 0, high: int = 10,
            dtype: DTypeLike | None = None, device: str | None = None) -> Tensor:
    """Integers uniform in [low, high): floor(low + u * (high - low)) of uniform floats u, in float64 when
    the range is too wide for float32's 24-bit mantissa."""
    dt = dtypes.default_int if dtype is None else to_dtype(dtype)
    if not isinstance(low, int) or not isinstance(high, int) or low >= high:
        raise ArgumentValueError(f"randint: needs ints low < high, got low={low!r}, high={high!r}")
    if dt.is_float or dt.is_bool:
        raise DTypeError(f"randint makes integers, not {dt}")
    compute = dtypes.float32 if high - low <= 2**24 else dtypes.float64
    u = cls.rand(*shape, dtype=compute, device=device)
    return u.mul(high - low).floor().cast(dt).add(low)


def uniform(cls: type[Tensor], *shape: int | Sequence[int], low: float = 0.0, high: float = 1.0,
            dtype: DTypeLike | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Floats uniform in [low, high)."""
    dt = dtypes.default_float if dtype is None else to_dtype(dtype)
    u = cls.rand(*shape, dtype=dt if dt.is_float else dtypes.default_float, device=device)
    return creation.requiring_grad(u.mul(high - low).add(low).cast(dt), requires_grad)


def normal(cls: type[Tensor], *shape: int | Sequence[int], mean: float = 0.0, std: float = 1.0,
           dtype: DTypeLike | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Normal samples of the given mean and standard deviation."""
    z = cls.randn(*shape, dtype=dtype, device=device)
    return creation.requiring_grad(z.mul(std).add(mean), requires_grad)


def scaled_uniform(cls: type[Tensor], *shape: int | Sequence[int], dtype: DTypeLike | None = None,
                   device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Uniform in [-prod(shape)**-0.5, prod(shape)**-0.5) (tinygrad's default weight init)."""
    dims = creation.shape_arg(shape)
    bound = max(math.prod(dims), 1) ** -0.5
    return cls.uniform(dims, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)


def glorot_uniform(cls: type[Tensor], *shape: int | Sequence[int], dtype: DTypeLike | None = None,
                   device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Xavier/Glorot uniform: bound sqrt(6 / (shape[0] + prod(shape[1:]))), as tinygrad defines it."""
    dims = creation.shape_arg(shape)
    if not dims:
        raise ShapeError("glorot_uniform needs at least one axis")
    bound = math.sqrt(6 / max(dims[0] + math.prod(dims[1:]), 1))
    return cls.uniform(dims, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)


def kaiming_uniform(cls: type[Tensor], *shape: int | Sequence[int], a: float = 0.01, dtype: DTypeLike | None = None,
                    device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """He uniform for leaky ReLU of slope `a`: bound gain*sqrt(3/fan_in), gain sqrt(2/(1+a^2)), and fan_in
    prod(shape[1:]) (inputs times kernel size for a conv weight), as PyTorch's `kaiming_uniform_`."""
    dims = creation.shape_arg(shape)
    bound = math.sqrt(3.0) * _leaky_relu_gain(a) / math.sqrt(_fan_in(dims, "kaiming_uniform"))
    return cls.uniform(dims, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)


def kaiming_normal(cls: type[Tensor], *shape: int | Sequence[int], a: float = 0.01, dtype: DTypeLike | None = None,
                   device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """He normal: standard deviation gain/sqrt(fan_in), as PyTorch's `kaiming_normal_` (see kaiming_uniform)."""
    dims = creation.shape_arg(shape)
    std = _leaky_relu_gain(a) / math.sqrt(_fan_in(dims, "kaiming_normal"))
    return cls.normal(dims, mean=0.0, std=std, dtype=dtype, device=device, requires_grad=requires_grad)


def randperm(cls: type[Tensor], n: int, device: str | None = None, dtype: DTypeLike | None = None,
             requires_grad: bool | None = None) -> Tensor:
    """A random permutation of 0..n-1: the order that sorts n uniform random keys."""
    if type(n) is not int or n < 0:
        raise ArgumentValueError(f"randperm: n {n!r} must be an int >= 0")
    dt = dtype or dtypes.default_int
    keys = cls.rand(n, dtype=dtypes.float32, device=device)
    return creation.requiring_grad(keys.argsort().cast(dt), requires_grad)


def multinomial(x: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """Indices drawn with probabilities proportional to the rows of `self` (1-D or 2-D weights >= 0).

    With replacement: a uniform draw scaled by the row total, counted against the running sum (cumsum) of the
    weights. Without: the `num_samples` largest keys `log(u) / w` (the exponential-race trick), which draws
    like PyTorch's sampling one index at a time without putting it back."""
    if x.ndim not in (1, 2):
        raise ShapeError(f"multinomial of shape {x.shape}: weights must be 1-D or 2-D (rows of weights)")
    n = x.shape[-1]
    if type(num_samples) is not int or num_samples < 1:
        raise ArgumentValueError(f"multinomial: num_samples {num_samples!r} must be an int >= 1")
    if not replacement and num_samples > n:
        raise ArgumentValueError(f"multinomial: cannot draw {num_samples} samples without replacement from {n} "
                         "categories")
    weights = core.float_input(x if x.ndim == 2 else x.unsqueeze(0))
    rows = weights.shape[0]
    if replacement:
        cdf = weights.cumsum(1)
        u = x.rand(rows, num_samples, 1, dtype=weights.dtype, device=x.device)
        target = u.mul(cdf[:, None, n - 1:])  # (rows, samples, 1): a point in [0, total)
        picked = cdf[:, None, :].le(target).sum(2)
    else:
        u = x.rand(rows, n, dtype=dtypes.float32, device=x.device)
        keys = u.sub(1.0, reverse=True).log().div(weights.cast(dtypes.float32))  # log(1-u) in (-inf, 0]
        picked = keys.topk(num_samples, dim=1)[1]
    picked = picked.cast(dtypes.default_int)
    return picked if x.ndim == 2 else picked.reshape(num_samples)

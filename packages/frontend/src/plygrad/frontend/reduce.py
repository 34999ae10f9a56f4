"""Reductions and what is built from them: sum/max/min/mean/prod, var/std, any/all, argmax/argmin, logsumexp,
softmax, log_softmax.

A REDUCE in the IR keeps reduced axes as size 1 (docs/ir.md §4.6); `keepdim=False` is a RESHAPE on top. Sums
accumulate in `sum_acc_dtype`; float16 and bfloat16 in float32, rounded once at the end (PyTorch). Long reductions
are blocked (blocked.py); docs/frontend.md, "How reductions and scans are built", says why and how.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from plygrad.frontend import core, movement, scan
from plygrad.frontend.blocked import BLOCK, LANES, SPLIT_ABOVE, blocked_sum, rows_per_block
from plygrad.frontend.composite import composite
from plygrad.frontend.symbolic import is_sym, size_tensor
from plygrad.ir import DTypeLike, Ops, ShapeError, UOp, dtypes, reduce_identity, sum_acc_dtype, to_dtype
from plygrad.ir.shape import dim_max, dim_sub, is_symbolic

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

Axis = int | Sequence[int] | None


HALF_FLOATS = (dtypes.float16, dtypes.bfloat16, *dtypes.fp8s)  # accumulate in float32


FEW_OUTPUTS: Final = 16  # a long max/integer sum/product into at most this many values is staged too


def reduce_along(x: Tensor, op: Ops, axis: Axis, keepdim: bool, name: str) -> Tensor:
    axes = x._axes(axis, name)
    if not axes:
        return x
    if is_symbolic(x.shape):
        kept = _reduce_symbolic(x, op, axes)
        return kept if keepdim else kept.reshape(tuple(n for i, n in enumerate(x.shape) if i not in axes))
    n = math.prod(x.shape[a] for a in axes)
    outputs = math.prod(d for i, d in enumerate(x.shape) if i not in axes)
    if n > SPLIT_ABOVE and ((op is Ops.ADD and x.dtype.is_float) or outputs <= FEW_OUTPUTS):
        kept = _blocked(x, op, axes)
    else:
        kept = x._new(UOp(Ops.REDUCE, x.dtype, (x.uop,), (op, axes)))
    return kept if keepdim else kept.reshape(tuple(n for i, n in enumerate(x.shape) if i not in axes))


def _reduce_symbolic(x: Tensor, op: Ops, axes: tuple[int, ...]) -> Tensor:
    """A reduction over a shape with symbolic sizes (axes kept as size 1): one REDUCE whose loops run to the bound
    values, unless it could be long (the reduced sizes' maxima past SPLIT_ABOVE, where `reduce_along` blocks a concrete
    one): then each symbolic reduced axis is padded with the op's identity to its maximum, and the reduction, of a
    concrete length now, is blocked like any other. The padding costs loops to the maximum, the price of a float
    sum that stays accurate at every bound value."""
    dims: tuple[Any, ...] = x.shape
    longest = math.prod(dim_max(dims[a]) for a in axes)
    outputs = math.prod(dim_max(d) for i, d in enumerate(dims) if i not in axes)
    if longest > SPLIT_ABOVE and ((op is Ops.ADD and x.dtype.is_float) or outputs <= FEW_OUTPUTS):
        pairs = tuple((0, dim_sub(dim_max(d), d)) if i in axes and is_sym(d) else (0, 0) for i, d in enumerate(dims))
        return _blocked(x.pad(pairs, value=reduce_identity(op, x.dtype)), op, axes)
    return x._new(UOp(Ops.REDUCE, x.dtype, (x.uop,), (op, axes)))


def _blocked(t: Tensor, op: Ops, axes: tuple[int, ...]) -> Tensor:
    """The reduction `op` over `axes` (kept as size 1) in stages with no accumulator taking more than BLOCK
    terms: the reduced axes are moved last and flattened, padded with the op's identity to whole blocks, and
    reduced block by block, level after level (see the module docstring)."""
    if op is Ops.ADD and not type(t).no_grad:
        return _blocked_sum(t, axes)
    return _blocked_by_tensors(t, op, axes)


def _blocked_by_tensors(t: Tensor, op: Ops, axes: tuple[int, ...]) -> Tensor:
    """`_blocked` op by op through Tensors: the reference `_blocked_sum` builds the graph of."""
    kept_axes = tuple(i for i in range(t.ndim) if i not in axes)
    kept_shape = tuple(t.shape[i] for i in kept_axes)
    n = math.prod(t.shape[a] for a in axes)
    x = t.permute(*kept_axes, *axes).reshape(*kept_shape, n)
    while n > SPLIT_ABOVE:
        if op is Ops.ADD:  # LANES strided partials per block: contiguous vector loads (module docstring)
            rows = rows_per_block(n)
            blocks = -(-n // (rows * LANES))
            pairs = ((0, 0),) * len(kept_shape) + ((0, blocks * rows * LANES - n),)
            x = movement.pad_zeros(x, pairs).reshape(*kept_shape, blocks, rows, LANES)
            x = x._new(UOp(Ops.REDUCE, x.dtype, (x.uop,), (op, (x.ndim - 2,))))
            n = blocks * LANES
        else:
            blocks = -(-n // BLOCK)
            pairs = ((0, 0),) * len(kept_shape) + ((0, blocks * BLOCK - n),)
            x = x.pad(pairs, value=reduce_identity(op, t.dtype)).reshape(*kept_shape, blocks, BLOCK)
            x = x._new(UOp(Ops.REDUCE, x.dtype, (x.uop,), (op, (x.ndim - 1,))))
            n = blocks
        x = x.reshape(*kept_shape, n)
    total = x._new(UOp(Ops.REDUCE, x.dtype, (x.uop,), (op, (x.ndim - 1,))))
    return total.reshape(tuple(1 if i in axes else d for i, d in enumerate(t.shape)))


def _blocked_sum(t: Tensor, axes: tuple[int, ...]) -> Tensor:
    """`_blocked` for a sum, built as one chain of nodes in one Tensor (blocked.blocked_sum): the graph the op-by-op
    form builds through ~8 Tensors (each a graph walk, a gradient decision and a reader record) for every `sum()`
    call. Not under no_grad, where the op-by-op form wraps its first op in a gradient stop (lazy.py)."""
    return t._new(blocked_sum(t.uop, axes))


@composite()
def sum(x: Tensor, axis: Axis = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Tensor:
    """The sum over `axis` (all axes when None; `()` reduces nothing, like NumPy). Bool and narrow integers
    accumulate per sum_acc_dtype; `dtype` casts the input first and is then the result's dtype (PyTorch)."""
    return _accumulate(x, Ops.ADD, axis, keepdim, dtype, "sum")


def prod(x: Tensor, axis: Axis = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Tensor:
    """The product over `axis`, with sum's dtype rules."""
    return _accumulate(x, Ops.MUL, axis, keepdim, dtype, "prod")


def _accumulate(t: Tensor, op: Ops, axis: Axis, keepdim: bool, dtype: DTypeLike | None, name: str) -> Tensor:
    x = t if dtype is None else t._cast_to(to_dtype(dtype))
    acc = dtypes.float32 if x.dtype in HALF_FLOATS else sum_acc_dtype(x.dtype)
    out = reduce_along(x._cast_to(acc), op, axis, keepdim, name)
    return out._cast_to(x.dtype) if dtype is not None or x.dtype in HALF_FLOATS else out


def max(x: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    _nonempty_reduce(x, axis, "max")
    return reduce_along(x, Ops.MAX, axis, keepdim, "max")


def min(x: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """The minimum, as max of an order-reversing map: NEG for floats, bitwise NOT for integers and bool
    (NEG of INT_MIN would wrap)."""
    _nonempty_reduce(x, axis, "min")
    if x.dtype.is_float:
        return reduce_along(x.neg(), Ops.MAX, axis, keepdim, "min").neg()
    ones = x._const(True if x.dtype.is_bool else -1)
    flipped = reduce_along(core.alu(x, Ops.XOR, ones), Ops.MAX, axis, keepdim, "min")
    return core.alu(flipped, Ops.XOR, flipped._const(True if x.dtype.is_bool else -1))


def _nonempty_reduce(x: Tensor, axis: Axis, name: str) -> None:
    axes = x._axes(axis, name)
    if builtins.any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"{name} over axes {axes} of shape {x.shape}: a zero-size axis has no {name} "
                         "(it has no identity); reduce over non-empty axes")


@composite()
def mean(x: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """The average; integer inputs give the default float (NaN over zero elements, like NumPy)."""
    axes = x._axes(axis, "mean")
    count: Any = 1  # an int, or an expression of size variables
    for a in axes:
        count *= x.shape[a]
    if is_sym(count):  # a symbolic element count: divide by the variable's value, read at run time
        total = x._cast_to(dtypes.float32 if x.dtype in HALF_FLOATS or not x.dtype.is_float else x.dtype)
        total = reduce_along(total, Ops.ADD, axis, keepdim, "mean")
        mean_ = total.div(size_tensor(total, count))
        return mean_._cast_to(x.dtype if x.dtype.is_float else dtypes.default_float)
    if not x.dtype.is_float:
        total = x.sum(axis, keepdim)._cast_to(dtypes.default_float)
        return total.div(float(count)) if count else total.mul(float("nan"))
    # half floats: divide the float32 sum, then round once (rounding the sum first overflows past 65504)
    wide = x._cast_to(dtypes.float32) if x.dtype in HALF_FLOATS else x
    total = reduce_along(wide, Ops.ADD, axis, keepdim, "mean")
    return (total.div(float(count)) if count else total.mul(float("nan")))._cast_to(x.dtype)


def softmax(t: Tensor, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:
    """Softmax over `axis`; with `dtype` the input is cast to it first and the result has it (PyTorch's and
    tinygrad's `dtype=`: a float16 input with dtype=float32 is never rounded to float16)."""
    return _softmax(t if dtype is None else t.cast(dtype), axis)


def log_softmax(t: Tensor, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:
    """Log-softmax over `axis`; `dtype` as in `softmax`."""
    return _log_softmax(t if dtype is None else t.cast(dtype), axis)


@composite()
def _softmax(t: Tensor, axis: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) over `axis`: the max keeps exp from overflowing. The shift is detached:
    the result does not depend on it, so its gradient is zero, and the rounded sum of the terms autograd would
    otherwise send through the max only adds error at the argmax."""
    x = core.float_input(t)
    wide = x._cast_to(dtypes.float32) if x.dtype in HALF_FLOATS else x  # rounded once, as PyTorch
    shifted = wide.sub(wide.max(axis, keepdim=True).detach())
    e = shifted.exp()
    return e.div(e.sum(axis, keepdim=True))._cast_to(x.dtype)


@composite()
def _log_softmax(t: Tensor, axis: int = -1) -> Tensor:
    """x - max - log(sum(exp(x - max))) over `axis`; the max is detached as in `softmax` (the gradient through it
    is sum(g) * (1 - sum(softmax)), zero exactly but not once rounded: 17% off at the argmax of 2^20 elements)."""
    x = core.float_input(t)
    wide = x._cast_to(dtypes.float32) if x.dtype in HALF_FLOATS else x
    shifted = wide.sub(wide.max(axis, keepdim=True).detach())
    return shifted.sub(shifted.exp().sum(axis, keepdim=True).log())._cast_to(x.dtype)


def shifted_mean(x: Tensor, axes: Sequence[int]) -> Tensor:
    """The mean of x over `axes` (kept with size 1) as s + mean(x - s), s being x's first element over `axes`,
    detached (carrying no gradient: the mean does not depend on it). The summed terms are of the data's spread
    rather than its magnitude: a float32 mean of rows of mean 100 and spread 1 is off by ~1e-5 of 100 (17-20x
    PyTorch's error in var, layernorm and BatchNorm, whose mean is a Welford one); shifted, only the final rounding
    is left. s is its own small buffer (contiguous), read as a mean is: read as a shrink of x inside the
    reductions, layernorm's kernels of 2048^2 timed several times slower (on a busy machine; one extra 2048-element
    kernel costs ~25 us)."""
    if builtins.any(isinstance(x.shape[a], int) and x.shape[a] == 0 for a in axes):
        return x.mean(tuple(axes), keepdim=True)  # no element to shift by: NaN, as PyTorch's
    shift = x.shrink(tuple((0, 1) if a in axes else None for a in range(x.ndim))).contiguous().detach()
    return x.sub(shift).mean(tuple(axes), keepdim=True).add(shift)


def var(t: Tensor, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> Tensor:
    """The variance, sum((x - mean)^2) / max(N - correction, 0) (Bessel's correction by default): NaN or inf
    when N <= correction, like PyTorch. Integers give the default float; half floats are computed in float32."""
    x = core.float_input(t)
    wide = x._cast_to(dtypes.float32) if x.dtype in HALF_FLOATS else x
    axes = wide._axes(axis, "var")
    count = math.prod(wide.shape[a] for a in axes)
    # the mean is detached: d var / d mean = -2 sum(x - mean) / (N - correction) is zero, so the rounded terms
    # autograd would send back through it are error only
    squares = wide.sub(shifted_mean(wide, axes).detach()).square().sum(axis, keepdim)
    return squares.div(builtins.max(count - correction, 0))._cast_to(x.dtype)


def std(x: Tensor, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> Tensor:
    """The standard deviation: the square root of `var`. Where the variance is 0 (a constant row) the gradient is
    0, as PyTorch's (sqrt's slope there is inf, and inf times var's zero gradient would be NaN)."""
    variance = x.var(axis, keepdim, correction)
    zero = variance.eq(0.0)
    return zero.where(0.0, zero.where(1.0, variance).sqrt())


def var_mean(x: Tensor, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> tuple[Tensor, Tensor]:
    """`(var, mean)` over the same axes (PyTorch's order)."""
    return x.var(axis, keepdim, correction), core.float_input(x).mean(axis, keepdim)


def std_mean(x: Tensor, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> tuple[Tensor, Tensor]:
    """`(std, mean)` over the same axes (PyTorch's order)."""
    return x.std(axis, keepdim, correction), core.float_input(x).mean(axis, keepdim)


def logsumexp(t: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) without overflow: the max m is taken out first, log(sum(exp(x - m))) + m. An infinite m
    is replaced by 0 so rows of -inf give -inf (not NaN). m is detached: the gradient through it cancels
    mathematically (the result does not depend on m), but not once rounded (13% off at the argmax of 2^20
    elements); detached, the gradient is softmax exactly, as PyTorch's."""
    x = core.float_input(t)
    if builtins.any(x.shape[a] == 0 for a in x._axes(axis, "logsumexp")):
        return x.exp().sum(axis, keepdim).log()  # log(0): -inf over zero elements, like PyTorch
    m = x.max(axis, keepdim=True).detach()
    m = m.abs().eq(float("inf")).where(0.0, m)
    total = x.sub(m).exp().sum(axis, keepdim).log()
    return total.add(m if keepdim else m.reshape(total.shape))


def any(x: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """Is any element non-zero (True) over `axis`? A bool tensor; False over zero elements."""
    return x._cast_to(dtypes.bool).sum(axis, keepdim).ne(0)


def all(x: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """Is every element non-zero (True) over `axis`? A bool tensor; True over zero elements."""
    return x._cast_to(dtypes.bool).logical_not().any(axis, keepdim).logical_not()


def argmax(x: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """The index of the largest element along `axis` (of the flattened tensor when None): the first one on
    ties, a NaN if there is one (PyTorch). int32 (tinygrad's index dtype; PyTorch's is int64)."""
    return _arg_best(x, axis, keepdim, "argmax")


def argmin(x: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """The index of the smallest element along `axis`: the first one on ties, a NaN if there is one."""
    return _arg_best(scan.order_reversed(x), axis, keepdim, "argmin")


def _arg_best(x: Tensor, axis: int | None, keepdim: bool, name: str) -> Tensor:
    if axis is None:
        best = _arg_best(x.flatten(), 0, False, name)
        return best.reshape((1,) * x.ndim) if keepdim else best
    ax = x._axis(axis, name)
    if x.ndim == 0:
        return x._const(0, scan.INDEX_DTYPE, ())
    _nonempty_reduce(x, ax, name)
    n = x.shape[ax]
    hit = scan.same_or_both_nan(x, x.max(ax, keepdim=True)._broadcast_to(x.shape))
    # n - i is largest for the first hit; the max over the axis of it (0 where no hit) finds that one
    countdown = core.int_range(x, n).sub(n, reverse=True).reshape(n, *(1,) * (x.ndim - ax - 1))
    first = hit.where(countdown, 0).max(ax, keepdim)
    return first.sub(n, reverse=True)._cast_to(scan.INDEX_DTYPE)

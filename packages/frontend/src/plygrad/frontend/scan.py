"""Scans (cumsum, cumprod, cummax, cummin, logcumsumexp) and the pairwise helpers the reductions and sorting share.

The IR has only three reductions (ADD, MUL, MAX), so each scan reduces, for output i, the window `x[0..i]` of a
masked (n, n) square (a view the scheduler fuses into the reduce; long axes go in blocks of SCAN_BLOCK), and
arg-reductions and orderings reduce pairwise comparisons. NaN follows PyTorch: it is the largest value for sorting,
and max-like ops pick it. The details: docs/frontend.md, "How reductions and scans are built".
"""


from __future__ import annotations

import math
from typing import TYPE_CHECKING

from plygrad.frontend import core, reduce
from plygrad.frontend.lazy import Scalar
from plygrad.ir import Ops, dtypes, reduce_identity, sum_acc_dtype

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

INDEX_DTYPE = dtypes.int32


"""The dtype of every index these ops return (argmax, cummax, sort, topk): tinygrad's; PyTorch's is int64."""


SCAN_BLOCK = 256


"""Scans of axes longer than twice this are done in blocks of this many elements (see the module docstring)."""


"""Sorts needing more pairwise comparisons than this (rows * n * n) use the bitonic network instead. The pairwise
sort is 3 kernels; the network is (log2 n)^2 / 2 steps of 2 kernels each, which costs compile time on first use (a
(4, 4096) sort: 0.7 s pairwise, 0.4 s bitonic once compiled, 20 s to compile on a 2-core machine)."""


def _isnan(x: Tensor) -> Tensor:
    return x.ne(x) if x.dtype.is_float else x._const(False, dtypes.bool)


def same_or_both_nan(x: Tensor, other: Tensor) -> Tensor:
    """Equal, counting NaN equal to NaN (how max-like ops recognise the element they picked)."""
    if not x.dtype.is_float:
        return x.eq(other)
    return x.eq(other).logical_or(_isnan(x).logical_and(_isnan(other)))


def less_in_sort_order(x: Tensor, other: Tensor) -> Tensor:
    """`self < other` in sorting order, where NaN is larger than every number (PyTorch's sort order)."""
    if not x.dtype.is_float:
        return x.lt(other)
    return x.lt(other).logical_or(_isnan(other).logical_and(_isnan(x).logical_not()))


def order_reversed(x: Tensor) -> Tensor:
    """A map that reverses the order and keeps NaN NaN, so min-like ops are max-like ops of it: NEG for floats,
    bitwise NOT for integers (NEG of INT_MIN wraps) and bool."""
    if x.dtype.is_float:
        return x.neg()
    return core.alu(x, Ops.XOR, x._const(True if x.dtype.is_bool else -1))


def _pad_last(x: Tensor, before: int, after: int, value: Scalar) -> Tensor:
    """The last axis padded with `value` (PAD itself pads with zeros, so other values go in through a mask)."""
    pads = (*(None,) * (x.ndim - 1), (before, after))
    padded = x.pad(pads)
    if value == 0 and not (isinstance(value, float) and math.copysign(1.0, value) < 0):
        return padded
    inside = x._const(True, dtypes.bool).pad(pads)
    return inside.where(padded, value)


def take_last(x: Tensor, index: Tensor) -> Tensor:
    """`self[..., index[..., k]]` along the last axis, as a one-hot sum: the gradient reaches exactly the
    chosen element. `index` has the same leading shape as self; its last axis may be any length."""
    n = x.shape[-1]
    onehot = index.unsqueeze(-1).eq(core.int_range(x, n))  # (..., k, n)
    picked = onehot.where(x.unsqueeze(-2), reduce_identity(Ops.ADD, x.dtype))
    return picked.sum(-1)._cast_to(x.dtype)


def axis_to_last(x: Tensor, axis: int) -> Tensor:
    """A view with `axis` swapped with the last axis (its own inverse)."""
    return x.transpose(axis, -1) if axis != x.ndim - 1 else x


# ---- scans ------------------------------------------------------------------------------------------------
def cumsum(x: Tensor, axis: int = 0) -> Tensor:
    """Running sums along `axis`; bool and narrow integers accumulate (and return) like `sum`."""
    acc = dtypes.float32 if x.dtype in reduce.HALF_FLOATS else sum_acc_dtype(x.dtype)
    out = _scan(x._cast_to(acc), axis, Ops.ADD, "cumsum")
    return out._cast_to(x.dtype) if x.dtype in reduce.HALF_FLOATS else out


def cumprod(x: Tensor, axis: int) -> Tensor:
    """Running products along `axis`, with `prod`'s dtype rules."""
    acc = dtypes.float32 if x.dtype in reduce.HALF_FLOATS else sum_acc_dtype(x.dtype)
    out = _scan(x._cast_to(acc), axis, Ops.MUL, "cumprod")
    return out._cast_to(x.dtype) if x.dtype in reduce.HALF_FLOATS else out


def cummax(x: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """Running maxima along `axis` and their indices (torch.cummax): on ties the latest index, and once a NaN
    is seen the value is NaN with the index of the latest NaN."""
    return _cum_best(x, axis, "cummax", x)


def cummin(x: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """Running minima along `axis` and their indices (torch.cummin), with cummax's rules."""
    return _cum_best(x, axis, "cummin", order_reversed(x))


def _cum_best(t: Tensor, axis: int, name: str, key: Tensor) -> tuple[Tensor, Tensor]:
    """cummax of `key` (self or its order reversed), the values read from self through the indices."""
    ax = t._axis(axis, name)
    if t.ndim == 0:
        return t, t._const(0, INDEX_DTYPE, ())
    x, k = axis_to_last(t, ax), axis_to_last(key, ax)
    n = x.shape[-1]
    if n == 0:
        return t, t._const(0, INDEX_DTYPE)
    running = _scan_last(k, Ops.MAX)  # (..., n): the max of k[..., :i+1]
    ctr = core.int_range(t, n)
    in_window = ctr.reshape(n, 1).ge(ctr.reshape(1, n))  # [i, j]: j <= i
    hit = in_window.logical_and(same_or_both_nan(k.unsqueeze(-2), running.unsqueeze(-1)))  # (..., n_i, n_j)
    index = hit.where(ctr.reshape(1, n), -1).max(-1)  # the latest j where k[j] is the running max
    return axis_to_last(take_last(x, index), ax), axis_to_last(index, ax)


def _scan(x: Tensor, axis: int, op: Ops, name: str) -> Tensor:
    """The inclusive scan of `op` along `axis`."""
    ax = x._axis(axis, name)
    if x.ndim == 0:
        return x
    return axis_to_last(_scan_last(axis_to_last(x, ax), op), ax)


def _scan_last(x: Tensor, op: Ops) -> Tensor:
    """The inclusive scan of `op` along the last axis, blocked when the axis is long."""
    n = x.shape[-1]
    if n <= 2 * SCAN_BLOCK:
        return _window_scan(x, op)
    lead, blocks = x.shape[:-1], -(-n // SCAN_BLOCK)
    identity = reduce_identity(op, x.dtype)
    padded = _pad_last(x, 0, blocks * SCAN_BLOCK - n, identity)
    inner = _window_scan(padded.reshape(*lead, blocks, SCAN_BLOCK), op)  # each block scanned on its own
    totals = inner.shrink((*(None,) * len(lead), None, (SCAN_BLOCK - 1, SCAN_BLOCK))).reshape(*lead, blocks)
    # what the blocks before each block add up to: the scan of the totals, shifted right by one block
    carried = _pad_last(_scan_last(totals, op), 1, 0, identity).shrink((*(None,) * len(lead), (0, blocks)))
    carried = carried.unsqueeze(-1)._broadcast_to(inner.shape)
    combined = {Ops.ADD: inner.add, Ops.MUL: inner.mul, Ops.MAX: inner.maximum}[op](carried)
    return combined.reshape(*lead, blocks * SCAN_BLOCK).shrink((*(None,) * len(lead), (0, n)))


def _window_scan(x: Tensor, op: Ops) -> Tensor:
    """The inclusive scan along the last axis as one reduce over the (n, n) lower-triangular window view."""
    n = x.shape[-1]
    ctr = core.int_range(x, n)
    in_window = ctr.reshape(n, 1).ge(ctr.reshape(1, n))  # [i, j]: input j counts toward output i
    windows = x.unsqueeze(-2).expand(*x.shape[:-1], n, n)
    return reduce.reduce_along(in_window.where(windows, reduce_identity(op, x.dtype)), op, -1, False, "scan")


def logcumsumexp(t: Tensor, axis: int = 0) -> Tensor:
    """log(cumsum(exp(x))) along `axis`, without overflow or underflow: out[i] is the logsumexp of x[..i],
    computed over a triangular mask (n x n work per row), so a small early value next to a large later one
    stays exact."""
    x = core.float_input(t)
    if x.ndim == 0:
        return x
    ax = x._axis(axis, "logcumsumexp")
    last = x.transpose(ax, -1) if ax != x.ndim - 1 else x
    n = last.shape[-1]
    index = core.int_range(x, n)
    upto = index.unsqueeze(-1).ge(index)  # (n, n): row i keeps columns j <= i
    rows = upto.where(last.unsqueeze(-2), -math.inf)
    out = rows.logsumexp(-1)
    return out.transpose(ax, -1) if ax != x.ndim - 1 else out

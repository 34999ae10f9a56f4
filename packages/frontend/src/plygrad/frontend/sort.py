"""Sorting: sort, argsort and topk, as a bitonic network of compare-exchange steps over views (no data-dependent
control flow, so it fuses and runs on every backend), with PyTorch's order for ties and NaN.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

from typing import TYPE_CHECKING

from plygrad.frontend import core, scan
from plygrad.frontend.errors import ArgumentValueError
from plygrad.ir import dtypes

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

PAIRWISE_SORT_LIMIT = 2**28


def sort(t: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """`(values, indices)` sorted along `dim`; stable (equal elements keep their order) and NaN sorts as the
    largest value, like PyTorch's `sort(stable=True)`."""
    ax = t._axis(dim, "sort")
    if t.ndim == 0:
        return t, t._const(0, scan.INDEX_DTYPE, ())
    x = scan.axis_to_last(t, ax)
    if x.numel() * x.shape[-1] > PAIRWISE_SORT_LIMIT:
        values, order = _bitonic_sort(x, descending)
        return scan.axis_to_last(values, ax), scan.axis_to_last(order, ax)
    order = _sort_order(x, descending)
    return scan.axis_to_last(scan.take_last(x, order), ax), scan.axis_to_last(order, ax)


def argsort(x: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """The indices that sort the tensor along `dim` (stable)."""
    return x.sort(dim, descending)[1]


def topk(t: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:
    """`(values, indices)` of the k largest (or smallest) elements along `dim`, in sorted order (also when
    `sorted=False`, which PyTorch leaves unspecified). Among equal elements the lower index comes first."""
    del sorted
    ax = t._axis(dim, "topk")
    n = t.shape[ax] if t.ndim else 1
    if type(k) is not int:
        raise TypeError(f"topk: k must be an int, got {type(k).__name__} {k!r}")
    if not 0 <= k <= n:
        raise ArgumentValueError(f"topk: k={k!r} is out of range for dim {dim} of size {n} (tensor of shape "
                                 f"{t.shape}); pick 0 <= k <= {n}")
    if t.ndim == 0:
        return t, t._const(0, scan.INDEX_DTYPE, ())
    x = scan.axis_to_last(t, ax)
    first_k = (*(None,) * (x.ndim - 1), (0, k))
    if x.numel() * x.shape[-1] > PAIRWISE_SORT_LIMIT:
        values, order = _bitonic_sort(x, descending=largest)
        return scan.axis_to_last(values.shrink(first_k), ax), scan.axis_to_last(order.shrink(first_k), ax)
    order = _sort_order(x, descending=largest).shrink(first_k)
    return scan.axis_to_last(scan.take_last(x, order), ax), scan.axis_to_last(order, ax)


def _sort_order(x: Tensor, descending: bool) -> Tensor:
    """For each rank r along the last axis, the index of the element that sorts to position r.

    An element's rank is how many elements precede it: a smaller value (larger, descending), or an equal one
    at a lower index, which makes the order total and the sort stable. The ranks are a permutation; the
    index of rank r is then found with a one-hot sum. Both steps are pairwise, n*n work per row."""
    n = x.shape[-1]
    if n <= 1:
        return x._const(0, scan.INDEX_DTYPE)
    ctr = core.int_range(x, n)
    mine, theirs = x.unsqueeze(-1), x.unsqueeze(-2)  # [..., i, j]: element i and element j
    smaller = scan.less_in_sort_order(theirs, mine) if not descending else scan.less_in_sort_order(mine, theirs)
    tie = scan.less_in_sort_order(theirs, mine).logical_or(scan.less_in_sort_order(mine, theirs)).logical_not()
    earlier = ctr.reshape(1, n).lt(ctr.reshape(n, 1))  # j < i
    rank = smaller.logical_or(tie.logical_and(earlier)).sum(-1)  # (..., n): the rank of element i
    at_rank = rank.unsqueeze(-2).eq(ctr.reshape(n, 1))  # [..., r, i]: element i has rank r
    return at_rank.where(ctr.reshape(1, n), 0).sum(-1)._cast_to(scan.INDEX_DTYPE)


def _bitonic_sort(x: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
    """`(values, indices)` sorted along the last axis by a bitonic network: n log^2 n work instead of n^2.

    The axis is padded to a power of two P. Stage s sorts blocks of 2**s: first each element is compared with
    its mirror image in the block, then with the element 2**j further for j = s-2..0, the earlier position
    keeping the element that sorts first. Each compare-exchange is a pair of views and a WHERE, so values keep
    an exact (permutation) gradient; each step is realized (CONTIGUOUS) so the graph does not grow
    exponentially. Pads carry indices >= n and always sort last, whatever their value."""
    n = x.shape[-1]
    if n <= 1:
        return x, x._const(0, scan.INDEX_DTYPE)
    lead, stages = x.shape[:-1], (n - 1).bit_length()
    size = 2**stages
    values = x.pad((*(None,) * len(lead), (0, size - n)))
    index = core.int_range(x, size)._broadcast_to((*lead, size))
    for stage in range(1, stages + 1):
        for step in range(stage - 1, -1, -1):
            mirror = step == stage - 1
            values, index = _compare_exchange(values, index, n, 2**step, mirror, descending)
    bounds = (*(None,) * len(lead), (0, n))
    return values.shrink(bounds), index.shrink(bounds)


def _compare_exchange(x: Tensor, index: Tensor, n: int, half: int, mirror: bool,
                      descending: bool) -> tuple[Tensor, Tensor]:
    """One layer of the network on the last axis, viewed as (..., blocks, 2, half): the two halves of each block
    are compared elementwise (the second half reversed when `mirror`) and the element that sorts first goes to
    the first half."""
    lead, size = x.shape[:-1], x.shape[-1]
    blocked = (*lead, size // (2 * half), 2, half)

    def halves(t: Tensor) -> tuple[Tensor, Tensor]:
        t = t.reshape(blocked)
        first = t.shrink((*(None,) * (len(blocked) - 2), (0, 1), None))
        second = t.shrink((*(None,) * (len(blocked) - 2), (1, 2), None))
        return first, second.flip(-1) if mirror else second

    (a, b), (ai, bi) = halves(x), halves(index)
    b_first = _sorts_before(b, a, bi, ai, n, descending)
    lo, hi = b_first.where(b, a), b_first.where(a, b)
    lo_i, hi_i = b_first.where(bi, ai), b_first.where(ai, bi)
    if mirror:
        hi, hi_i = hi.flip(-1), hi_i.flip(-1)
    first_half = x._const(True, dtypes.bool, (*(1,) * (len(blocked) - 2), 1, 1)).pad(
        (*(None,) * (len(blocked) - 2), (0, 1), None))
    values = first_half.where(lo._broadcast_to(blocked), hi._broadcast_to(blocked)).reshape(*lead, size)
    indices = first_half.where(lo_i._broadcast_to(blocked), hi_i._broadcast_to(blocked)).reshape(*lead, size)
    return values.contiguous(), indices.contiguous()


def _sorts_before(x: Tensor, other: Tensor, index: Tensor, other_index: Tensor, n: int, descending: bool) -> Tensor:
    """Does (self, index) come before (other, other_index) in the sort? Pads (index >= n) come last, equal
    values in index order (stability), NaN after every number (before, descending)."""
    pad, other_pad = index.ge(n), other_index.ge(n)
    ahead = scan.less_in_sort_order(other, x) if descending else scan.less_in_sort_order(x, other)
    tie = scan.less_in_sort_order(x, other).logical_or(scan.less_in_sort_order(other, x)).logical_not()
    by_value = ahead.logical_or(tie.logical_and(index.lt(other_index)))
    both_real = pad.logical_or(other_pad).logical_not()
    return both_real.logical_and(by_value).logical_or(other_pad.logical_and(pad.logical_not())).logical_or(
        pad.logical_and(other_pad).logical_and(index.lt(other_index)))

"""Statistics, logical reductions, arg-reductions, scans and sorting, all built from the reduce layer.

The IR has only three reductions (ADD, MUL, MAX), so everything here is one of them over a cleverly shaped view:

- **Scans** (cumsum, cumprod, cummax) reduce, for each output position i, the window `x[0..i]`: the axis is
  broadcast to an (n, n) square whose upper triangle is masked with the reduction's identity. The square is a view
  and a mask (EXPAND + WHERE), which the scheduler fuses into the reduce, so it costs n*n arithmetic but no n*n
  memory. Axes longer than `2 * SCAN_BLOCK` are cut into blocks: each block is scanned on its own, the block totals
  are scanned (recursively) and carried into the next block, for n * SCAN_BLOCK work instead of n * n.
- **Arg-reductions and orderings** (argmax, cummax's indices, sort) compare elements pairwise and reduce the
  comparisons; indices are int32 like tinygrad's (PyTorch returns int64).
- **Gradients** come from autograd over these primitives. Where PyTorch routes a gradient to one chosen element
  (cummax, sort, topk), the values are read back through their indices with a one-hot sum (`_take_last`), whose
  gradient flows to exactly that element, rather than taken from a MAX, which would share it among ties.

NaN follows PyTorch: it is the largest value for sorting, and max-like ops (argmax, argmin, cummax, cummin) pick it.
"""

from __future__ import annotations

import math
from typing import Self

from plygrad.frontend import random
from plygrad.frontend.lazy import Scalar
from plygrad.frontend.reduce import HALF_FLOATS, Axis, ReduceOps
from plygrad.ir import Ops, dtypes, reduce_identity, sum_acc_dtype

INDEX_DTYPE = dtypes.int32
"""The dtype of every index these ops return (argmax, cummax, sort, topk): tinygrad's; PyTorch's is int64."""
SCAN_BLOCK = 256
"""Scans of axes longer than twice this are done in blocks of this many elements (see the module docstring)."""
PAIRWISE_SORT_LIMIT = 2**28
"""Sorts needing more pairwise comparisons than this (rows * n * n) use the bitonic network instead. The pairwise
sort is 3 kernels; the network is (log2 n)^2 / 2 steps of 2 kernels each, which costs compile time on first use (a
(4, 4096) sort: 0.7 s pairwise, 0.4 s bitonic once compiled, 20 s to compile on a 2-core machine)."""


class ScanOps(ReduceOps):
    """Statistics, logical reductions, arg-reductions, scans and sorting."""

    __slots__ = ()

    # ---- building blocks --------------------------------------------------------------------------------------
    def _counter(self, n: int) -> Self:
        """0..n-1 as an INDEX_DTYPE tensor of shape (n,), computed in the graph (no memory)."""
        return self._make(random.counter(n, INDEX_DTYPE, self.device), self.device)

    def _isnan(self) -> Self:
        return self.ne(self) if self.dtype.is_float else self._const(False, dtypes.bool)

    def _same(self, other: Self) -> Self:
        """Equal, counting NaN equal to NaN (how max-like ops recognise the element they picked)."""
        if not self.dtype.is_float:
            return self.eq(other)
        return self.eq(other).logical_or(self._isnan().logical_and(other._isnan()))

    def _less(self, other: Self) -> Self:
        """`self < other` in sorting order, where NaN is larger than every number (PyTorch's sort order)."""
        if not self.dtype.is_float:
            return self.lt(other)
        return self.lt(other).logical_or(other._isnan().logical_and(self._isnan().logical_not()))

    def _reversed_order(self) -> Self:
        """A map that reverses the order and keeps NaN NaN, so min-like ops are max-like ops of it: NEG for floats,
        bitwise NOT for integers (NEG of INT_MIN wraps) and bool."""
        if self.dtype.is_float:
            return self.neg()
        return self._alu(Ops.XOR, self._const(True if self.dtype.is_bool else -1))

    def _pad_last(self, before: int, after: int, value: Scalar) -> Self:
        """The last axis padded with `value` (PAD itself pads with zeros, so other values go in through a mask)."""
        pads = (*(None,) * (self.ndim - 1), (before, after))
        padded = self.pad(pads)
        if value == 0 and not (isinstance(value, float) and math.copysign(1.0, value) < 0):
            return padded
        inside = self._const(True, dtypes.bool).pad(pads)
        return inside.where(padded, value)

    def _take_last(self, index: Self) -> Self:
        """`self[..., index[..., k]]` along the last axis, as a one-hot sum: the gradient reaches exactly the
        chosen element. `index` has the same leading shape as self; its last axis may be any length."""
        n = self.shape[-1]
        onehot = index.unsqueeze(-1).eq(self._counter(n))  # (..., k, n)
        picked = onehot.where(self.unsqueeze(-2), reduce_identity(Ops.ADD, self.dtype))
        return picked.sum(-1)._cast_to(self.dtype)

    def _along_last(self, axis: int) -> Self:
        """A view with `axis` swapped with the last axis (its own inverse)."""
        return self.transpose(axis, -1) if axis != self.ndim - 1 else self

    # ---- statistics -------------------------------------------------------------------------------------------
    def var(self, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> Self:
        """The variance, sum((x - mean)^2) / max(N - correction, 0) (Bessel's correction by default): NaN or inf
        when N <= correction, like PyTorch. Integers give the default float; half floats are computed in float32."""
        x = self._float_input()
        wide = x._cast_to(dtypes.float32) if x.dtype in HALF_FLOATS else x
        count = math.prod(wide.shape[a] for a in wide._axes(axis, "var"))
        squares = wide.sub(wide.mean(axis, keepdim=True)).square().sum(axis, keepdim)
        return squares.div(max(count - correction, 0))._cast_to(x.dtype)

    def std(self, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> Self:
        """The standard deviation: the square root of `var`."""
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(self, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> tuple[Self, Self]:
        """`(var, mean)` over the same axes (PyTorch's order)."""
        return self.var(axis, keepdim, correction), self._float_input().mean(axis, keepdim)

    def std_mean(self, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> tuple[Self, Self]:
        """`(std, mean)` over the same axes (PyTorch's order)."""
        return self.std(axis, keepdim, correction), self._float_input().mean(axis, keepdim)

    def logsumexp(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """log(sum(exp(x))) without overflow: the max m is taken out first, log(sum(exp(x - m))) + m. An infinite m
        is replaced by 0 so rows of -inf give -inf (not NaN); the gradient through m cancels mathematically."""
        x = self._float_input()
        if any(x.shape[a] == 0 for a in x._axes(axis, "logsumexp")):
            return x.exp().sum(axis, keepdim).log()  # log(0): -inf over zero elements, like PyTorch
        m = x.max(axis, keepdim=True)
        m = m.abs().eq(float("inf")).where(0.0, m)
        total = x.sub(m).exp().sum(axis, keepdim).log()
        return total.add(m if keepdim else m.reshape(total.shape))

    # ---- logical reductions -----------------------------------------------------------------------------------
    def any(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """Is any element non-zero (True) over `axis`? A bool tensor; False over zero elements."""
        return self._cast_to(dtypes.bool).sum(axis, keepdim).ne(0)

    def all(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """Is every element non-zero (True) over `axis`? A bool tensor; True over zero elements."""
        return self._cast_to(dtypes.bool).logical_not().any(axis, keepdim).logical_not()

    # ---- arg-reductions ---------------------------------------------------------------------------------------
    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """The index of the largest element along `axis` (of the flattened tensor when None): the first one on
        ties, a NaN if there is one (PyTorch). int32 (tinygrad's index dtype; PyTorch's is int64)."""
        return self._arg_best(axis, keepdim, "argmax")

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """The index of the smallest element along `axis`: the first one on ties, a NaN if there is one."""
        return self._reversed_order()._arg_best(axis, keepdim, "argmin")

    def _arg_best(self, axis: int | None, keepdim: bool, name: str) -> Self:
        if axis is None:
            best = self.flatten()._arg_best(0, False, name)
            return best.reshape((1,) * self.ndim) if keepdim else best
        ax = self._axis(axis, name)
        if self.ndim == 0:
            return self._const(0, INDEX_DTYPE, ())
        self._nonempty_reduce(ax, name)
        n = self.shape[ax]
        hit = self._same(self.max(ax, keepdim=True)._broadcast_to(self.shape))
        # n - i is largest for the first hit; the max over the axis of it (0 where no hit) finds that one
        countdown = self._counter(n).sub(n, reverse=True).reshape(n, *(1,) * (self.ndim - ax - 1))
        first = hit.where(countdown, 0).max(ax, keepdim)
        return first.sub(n, reverse=True)._cast_to(INDEX_DTYPE)

    # ---- scans ------------------------------------------------------------------------------------------------
    def cumsum(self, axis: int = 0) -> Self:
        """Running sums along `axis`; bool and narrow integers accumulate (and return) like `sum`."""
        acc = dtypes.float32 if self.dtype in HALF_FLOATS else sum_acc_dtype(self.dtype)
        out = self._cast_to(acc)._scan(axis, Ops.ADD, "cumsum")
        return out._cast_to(self.dtype) if self.dtype in HALF_FLOATS else out

    def cumprod(self, axis: int) -> Self:
        """Running products along `axis`, with `prod`'s dtype rules."""
        acc = dtypes.float32 if self.dtype in HALF_FLOATS else sum_acc_dtype(self.dtype)
        out = self._cast_to(acc)._scan(axis, Ops.MUL, "cumprod")
        return out._cast_to(self.dtype) if self.dtype in HALF_FLOATS else out

    def cummax(self, axis: int = 0) -> tuple[Self, Self]:
        """Running maxima along `axis` and their indices (torch.cummax): on ties the latest index, and once a NaN
        is seen the value is NaN with the index of the latest NaN."""
        return self._cum_best(axis, "cummax", self)

    def cummin(self, axis: int = 0) -> tuple[Self, Self]:
        """Running minima along `axis` and their indices (torch.cummin), with cummax's rules."""
        return self._cum_best(axis, "cummin", self._reversed_order())

    def _cum_best(self, axis: int, name: str, key: Self) -> tuple[Self, Self]:
        """cummax of `key` (self or its order reversed), the values read from self through the indices."""
        ax = self._axis(axis, name)
        if self.ndim == 0:
            return self, self._const(0, INDEX_DTYPE, ())
        x, k = self._along_last(ax), key._along_last(ax)
        n = x.shape[-1]
        if n == 0:
            return self, self._const(0, INDEX_DTYPE)
        running = k._scan_last(Ops.MAX)  # (..., n): the max of k[..., :i+1]
        ctr = self._counter(n)
        in_window = ctr.reshape(n, 1).ge(ctr.reshape(1, n))  # [i, j]: j <= i
        hit = in_window.logical_and(k.unsqueeze(-2)._same(running.unsqueeze(-1)))  # (..., n_i, n_j)
        index = hit.where(ctr.reshape(1, n), -1).max(-1)  # the latest j where k[j] is the running max
        return x._take_last(index)._along_last(ax), index._along_last(ax)

    def _scan(self, axis: int, op: Ops, name: str) -> Self:
        """The inclusive scan of `op` along `axis`."""
        ax = self._axis(axis, name)
        if self.ndim == 0:
            return self
        return self._along_last(ax)._scan_last(op)._along_last(ax)

    def _scan_last(self, op: Ops) -> Self:
        """The inclusive scan of `op` along the last axis, blocked when the axis is long."""
        n = self.shape[-1]
        if n <= 2 * SCAN_BLOCK:
            return self._window_scan(op)
        lead, blocks = self.shape[:-1], -(-n // SCAN_BLOCK)
        identity = reduce_identity(op, self.dtype)
        padded = self._pad_last(0, blocks * SCAN_BLOCK - n, identity)
        inner = padded.reshape(*lead, blocks, SCAN_BLOCK)._window_scan(op)  # each block scanned on its own
        totals = inner.shrink((*(None,) * len(lead), None, (SCAN_BLOCK - 1, SCAN_BLOCK))).reshape(*lead, blocks)
        # what the blocks before each block add up to: the scan of the totals, shifted right by one block
        carried = totals._scan_last(op)._pad_last(1, 0, identity).shrink((*(None,) * len(lead), (0, blocks)))
        carried = carried.unsqueeze(-1)._broadcast_to(inner.shape)
        combined = {Ops.ADD: inner.add, Ops.MUL: inner.mul, Ops.MAX: inner.maximum}[op](carried)
        return combined.reshape(*lead, blocks * SCAN_BLOCK).shrink((*(None,) * len(lead), (0, n)))

    def _window_scan(self, op: Ops) -> Self:
        """The inclusive scan along the last axis as one reduce over the (n, n) lower-triangular window view."""
        n = self.shape[-1]
        ctr = self._counter(n)
        in_window = ctr.reshape(n, 1).ge(ctr.reshape(1, n))  # [i, j]: input j counts toward output i
        windows = self.unsqueeze(-2).expand(*self.shape[:-1], n, n)
        return in_window.where(windows, reduce_identity(op, self.dtype))._reduce(op, -1, False, "scan")

    # ---- sorting ----------------------------------------------------------------------------------------------
    def sort(self, dim: int = -1, descending: bool = False) -> tuple[Self, Self]:
        """`(values, indices)` sorted along `dim`; stable (equal elements keep their order) and NaN sorts as the
        largest value, like PyTorch's `sort(stable=True)`."""
        ax = self._axis(dim, "sort")
        if self.ndim == 0:
            return self, self._const(0, INDEX_DTYPE, ())
        x = self._along_last(ax)
        if x.numel() * x.shape[-1] > PAIRWISE_SORT_LIMIT:
            values, order = x._bitonic_sort(descending)
            return values._along_last(ax), order._along_last(ax)
        order = x._sort_order(descending)
        return x._take_last(order)._along_last(ax), order._along_last(ax)

    def argsort(self, dim: int = -1, descending: bool = False) -> Self:
        """The indices that sort the tensor along `dim` (stable)."""
        return self.sort(dim, descending)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Self, Self]:
        """`(values, indices)` of the k largest (or smallest) elements along `dim`, in sorted order (also when
        `sorted=False`, which PyTorch leaves unspecified). Among equal elements the lower index comes first."""
        del sorted
        ax = self._axis(dim, "topk")
        n = self.shape[ax] if self.ndim else 1
        if type(k) is not int or not 0 <= k <= n:
            raise ValueError(f"topk: k={k!r} is out of range for dim {dim} of size {n} (tensor of shape {self.shape})"
                             f"; pick 0 <= k <= {n}")
        if self.ndim == 0:
            return self, self._const(0, INDEX_DTYPE, ())
        x = self._along_last(ax)
        first_k = (*(None,) * (x.ndim - 1), (0, k))
        if x.numel() * x.shape[-1] > PAIRWISE_SORT_LIMIT:
            values, order = x._bitonic_sort(descending=largest)
            return values.shrink(first_k)._along_last(ax), order.shrink(first_k)._along_last(ax)
        order = x._sort_order(descending=largest).shrink(first_k)
        return x._take_last(order)._along_last(ax), order._along_last(ax)

    def _sort_order(self, descending: bool) -> Self:
        """For each rank r along the last axis, the index of the element that sorts to position r.

        An element's rank is how many elements precede it: a smaller value (larger, descending), or an equal one
        at a lower index, which makes the order total and the sort stable. The ranks are a permutation; the
        index of rank r is then found with a one-hot sum. Both steps are pairwise, n*n work per row."""
        n = self.shape[-1]
        if n <= 1:
            return self._const(0, INDEX_DTYPE)
        ctr = self._counter(n)
        mine, theirs = self.unsqueeze(-1), self.unsqueeze(-2)  # [..., i, j]: element i and element j
        smaller = theirs._less(mine) if not descending else mine._less(theirs)
        tie = theirs._less(mine).logical_or(mine._less(theirs)).logical_not()
        earlier = ctr.reshape(1, n).lt(ctr.reshape(n, 1))  # j < i
        rank = smaller.logical_or(tie.logical_and(earlier)).sum(-1)  # (..., n): the rank of element i
        at_rank = rank.unsqueeze(-2).eq(ctr.reshape(n, 1))  # [..., r, i]: element i has rank r
        return at_rank.where(ctr.reshape(1, n), 0).sum(-1)._cast_to(INDEX_DTYPE)

    def _bitonic_sort(self, descending: bool) -> tuple[Self, Self]:
        """`(values, indices)` sorted along the last axis by a bitonic network: n log^2 n work instead of n^2.

        The axis is padded to a power of two P. Stage s sorts blocks of 2**s: first each element is compared with
        its mirror image in the block, then with the element 2**j further for j = s-2..0, the earlier position
        keeping the element that sorts first. Each compare-exchange is a pair of views and a WHERE, so values keep
        an exact (permutation) gradient; each step is realized (CONTIGUOUS) so the graph does not grow
        exponentially. Pads carry indices >= n and always sort last, whatever their value."""
        n = self.shape[-1]
        if n <= 1:
            return self, self._const(0, INDEX_DTYPE)
        lead, stages = self.shape[:-1], (n - 1).bit_length()
        size = 2**stages
        values = self.pad((*(None,) * len(lead), (0, size - n)))
        index = self._counter(size)._broadcast_to((*lead, size))
        for stage in range(1, stages + 1):
            for step in range(stage - 1, -1, -1):
                mirror = step == stage - 1
                values, index = values._compare_exchange(index, n, 2**step, mirror, descending)
        bounds = (*(None,) * len(lead), (0, n))
        return values.shrink(bounds), index.shrink(bounds)

    def _compare_exchange(self, index: Self, n: int, half: int, mirror: bool, descending: bool) -> tuple[Self, Self]:
        """One layer of the network on the last axis, viewed as (..., blocks, 2, half): the two halves of each block
        are compared elementwise (the second half reversed when `mirror`) and the element that sorts first goes to
        the first half."""
        lead, size = self.shape[:-1], self.shape[-1]
        blocked = (*lead, size // (2 * half), 2, half)

        def halves(t: Self) -> tuple[Self, Self]:
            t = t.reshape(blocked)
            first = t.shrink((*(None,) * (len(blocked) - 2), (0, 1), None))
            second = t.shrink((*(None,) * (len(blocked) - 2), (1, 2), None))
            return first, second.flip(-1) if mirror else second

        (a, b), (ai, bi) = halves(self), halves(index)
        b_first = b._sorts_before(a, bi, ai, n, descending)
        lo, hi = b_first.where(b, a), b_first.where(a, b)
        lo_i, hi_i = b_first.where(bi, ai), b_first.where(ai, bi)
        if mirror:
            hi, hi_i = hi.flip(-1), hi_i.flip(-1)
        first_half = self._const(True, dtypes.bool, (*(1,) * (len(blocked) - 2), 1, 1)).pad(
            (*(None,) * (len(blocked) - 2), (0, 1), None))
        values = first_half.where(lo._broadcast_to(blocked), hi._broadcast_to(blocked)).reshape(*lead, size)
        indices = first_half.where(lo_i._broadcast_to(blocked), hi_i._broadcast_to(blocked)).reshape(*lead, size)
        return values.contiguous(), indices.contiguous()

    def _sorts_before(self, other: Self, index: Self, other_index: Self, n: int, descending: bool) -> Self:
        """Does (self, index) come before (other, other_index) in the sort? Pads (index >= n) come last, equal
        values in index order (stability), NaN after every number (before, descending)."""
        pad, other_pad = index.ge(n), other_index.ge(n)
        ahead = other._less(self) if descending else self._less(other)
        tie = self._less(other).logical_or(other._less(self)).logical_not()
        by_value = ahead.logical_or(tie.logical_and(index.lt(other_index)))
        both_real = pad.logical_or(other_pad).logical_not()
        return both_real.logical_and(by_value).logical_or(other_pad.logical_and(pad.logical_not())).logical_or(
            pad.logical_and(other_pad).logical_and(index.lt(other_index)))


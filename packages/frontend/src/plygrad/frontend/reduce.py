"""Reductions and what is built from them: sum/max/min/mean/prod, softmax, log_softmax, matmul.

A REDUCE in the IR keeps reduced axes as size 1 (docs/ir.md §4.6); `keepdim=False` is a RESHAPE on top, which the
scheduler strips for free. Sums accumulate in `sum_acc_dtype` (bool and narrow integers would overflow otherwise);
float16 and bfloat16 accumulate in float32 and round once at the end, as PyTorch does, since a long half-precision
running sum loses every small addend; mean, softmax and matmul of half floats also compute in float32 and round once.

Long float sums are blocked (`_blocked`): a sum over more than SPLIT_ABOVE elements becomes sums of blocks of
BLOCK elements, then a sum of those partial sums (again blocked if there are many), so no accumulator ever adds more
than BLOCK terms. A single running float32 sum stops growing at 2^24 (adding 1.0 to 16777216.0 gives 16777216.0)
and its rounding error grows with n; blocked, the error grows like BLOCK * log_BLOCK(n) and 2^25 ones sum exactly.
It also gives the first kernel independent partials per block, which the CPU backend spreads over its cores and a
GPU over its workgroups. A block of a float sum is read as BLOCK/LANES rows of LANES consecutive elements and gives
LANES partials, one per column (each adding BLOCK/LANES terms): the first kernel then loads whole rows as vectors
into LANES vector-lane accumulators, walking memory in order, where one partial per block would have made its
vector lanes of 16 blocks each a row apart (a gather per vector). The partials of all blocks go to the next level.
Every reduction kernel a scheduler or code generator makes from this graph keeps the property: it is in the graph.

Other long reductions with few outputs (max, integer sums, products over more than SPLIT_ABOVE elements into at
most FEW_OUTPUTS values) are staged the same way, for that second reason alone: a full reduction in one kernel would
be one serial loop on one core or one workgroup of a GPU. They are exact whatever the order (max, wrapping integer
sums) or, for float products, as exact as any order; the padding of the last block is the op's identity.

matmul is a broadcast multiply and a sum over the shared axis: the scheduler fuses the two into one kernel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, Self

from plygrad.frontend.movement import MovementOps
from plygrad.ir import DTypeLike, Ops, ShapeError, UOp, dtypes, reduce_identity, result_dtype, sum_acc_dtype, to_dtype

Axis = int | Sequence[int] | None
HALF_FLOATS = (dtypes.float16, dtypes.bfloat16, *dtypes.fp8s)  # accumulate in float32
SPLIT_ABOVE: Final = 1 << 14  # float sums over more elements than this are blocked
BLOCK: Final = 1 << 12  # terms one accumulator adds at most in a blocked sum
LANES: Final = 16  # a block of a float sum gives this many partials, each the sum of every LANES-th term
FEW_OUTPUTS: Final = 16  # a long max/integer sum/product into at most this many values is staged too


class ReduceOps(MovementOps):
    """Reductions over any axes, softmax and matrix products."""

    __slots__ = ()

    def _reduce(self, op: Ops, axis: Axis, keepdim: bool, name: str) -> Self:
        axes = self._axes(axis, name)
        if not axes:
            return self
        n = math.prod(self.shape[a] for a in axes)
        outputs = math.prod(d for i, d in enumerate(self.shape) if i not in axes)
        if n > SPLIT_ABOVE and ((op is Ops.ADD and self.dtype.is_float) or outputs <= FEW_OUTPUTS):
            kept = self._blocked(op, axes)
        else:
            kept = self._new(UOp(Ops.REDUCE, self.dtype, (self.uop,), (op, axes)))
        return kept if keepdim else kept.reshape(tuple(n for i, n in enumerate(self.shape) if i not in axes))

    def _blocked(self, op: Ops, axes: tuple[int, ...]) -> Self:
        """The reduction `op` over `axes` (kept as size 1) in stages with no accumulator taking more than BLOCK
        terms: the reduced axes are moved last and flattened, padded with the op's identity to whole blocks, and
        reduced block by block, level after level (see the module docstring)."""
        kept_axes = tuple(i for i in range(self.ndim) if i not in axes)
        kept_shape = tuple(self.shape[i] for i in kept_axes)
        n = math.prod(self.shape[a] for a in axes)
        x = self.permute(*kept_axes, *axes).reshape(*kept_shape, n)
        while n > SPLIT_ABOVE:
            blocks = -(-n // BLOCK)
            pairs = ((0, 0),) * len(kept_shape) + ((0, blocks * BLOCK - n),)
            padded = x._pad_zeros(pairs) if op is Ops.ADD else x.pad(pairs, value=reduce_identity(op, self.dtype))
            if op is Ops.ADD:  # LANES strided partials per block: contiguous vector loads (module docstring)
                x = padded.reshape(*kept_shape, blocks, BLOCK // LANES, LANES)
                x = x._new(UOp(Ops.REDUCE, x.dtype, (x.uop,), (op, (x.ndim - 2,))))
                n = blocks * LANES
            else:
                x = padded.reshape(*kept_shape, blocks, BLOCK)
                x = x._new(UOp(Ops.REDUCE, x.dtype, (x.uop,), (op, (x.ndim - 1,))))
                n = blocks
            x = x.reshape(*kept_shape, n)
        total = x._new(UOp(Ops.REDUCE, x.dtype, (x.uop,), (op, (x.ndim - 1,))))
        return total.reshape(tuple(1 if i in axes else d for i, d in enumerate(self.shape)))

    def sum(self, axis: Axis = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Self:
        """The sum over `axis` (all axes when None; `()` reduces nothing, like NumPy). Bool and narrow integers
        accumulate per sum_acc_dtype; `dtype` casts the input first and is then the result's dtype (PyTorch)."""
        return self._accumulate(Ops.ADD, axis, keepdim, dtype, "sum")

    def prod(self, axis: Axis = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Self:
        """The product over `axis`, with sum's dtype rules."""
        return self._accumulate(Ops.MUL, axis, keepdim, dtype, "prod")

    def _accumulate(self, op: Ops, axis: Axis, keepdim: bool, dtype: DTypeLike | None, name: str) -> Self:
        x = self if dtype is None else self._cast_to(to_dtype(dtype))
        acc = dtypes.float32 if x.dtype in HALF_FLOATS else sum_acc_dtype(x.dtype)
        out = x._cast_to(acc)._reduce(op, axis, keepdim, name)
        return out._cast_to(x.dtype) if dtype is not None or x.dtype in HALF_FLOATS else out

    def max(self, axis: Axis = None, keepdim: bool = False) -> Self:
        self._nonempty_reduce(axis, "max")
        return self._reduce(Ops.MAX, axis, keepdim, "max")

    def min(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """The minimum, as max of an order-reversing map: NEG for floats, bitwise NOT for integers and bool
        (NEG of INT_MIN would wrap)."""
        self._nonempty_reduce(axis, "min")
        if self.dtype.is_float:
            return self.neg()._reduce(Ops.MAX, axis, keepdim, "min").neg()
        ones = self._const(True if self.dtype.is_bool else -1)
        flipped = self._alu(Ops.XOR, ones)._reduce(Ops.MAX, axis, keepdim, "min")
        return flipped._alu(Ops.XOR, flipped._const(True if self.dtype.is_bool else -1))

    def _nonempty_reduce(self, axis: Axis, name: str) -> None:
        axes = self._axes(axis, name)
        if any(self.shape[a] == 0 for a in axes):
            raise ShapeError(f"{name} over axes {axes} of shape {self.shape}: a zero-size axis has no {name} "
                             "(it has no identity); reduce over non-empty axes")

    def mean(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """The average; integer inputs give the default float (NaN over zero elements, like NumPy)."""
        axes = self._axes(axis, "mean")
        count = 1
        for a in axes:
            count *= self.shape[a]
        if not self.dtype.is_float:
            total = self.sum(axis, keepdim)._cast_to(dtypes.default_float)
            return total.div(float(count)) if count else total.mul(float("nan"))
        # half floats: divide the float32 sum, then round once (rounding the sum first overflows past 65504)
        wide = self._cast_to(dtypes.float32) if self.dtype in HALF_FLOATS else self
        total = wide._reduce(Ops.ADD, axis, keepdim, "mean")
        return (total.div(float(count)) if count else total.mul(float("nan")))._cast_to(self.dtype)

    def softmax(self, axis: int = -1) -> Self:
        """exp(x - max) / sum(exp(x - max)) over `axis`: the max keeps exp from overflowing."""
        x = self._float_input()
        wide = x._cast_to(dtypes.float32) if x.dtype in HALF_FLOATS else x  # rounded once, as PyTorch
        shifted = wide.sub(wide.max(axis, keepdim=True))
        e = shifted.exp()
        return e.div(e.sum(axis, keepdim=True))._cast_to(x.dtype)

    def log_softmax(self, axis: int = -1) -> Self:
        x = self._float_input()
        wide = x._cast_to(dtypes.float32) if x.dtype in HALF_FLOATS else x
        shifted = wide.sub(wide.max(axis, keepdim=True))
        return shifted.sub(shifted.exp().sum(axis, keepdim=True).log())._cast_to(x.dtype)

    def matmul(self, other: Self) -> Self:
        """NumPy's matmul: 1-D operands gain and lose an axis, leading (batch) axes broadcast."""
        if self.ndim == 0 or other.ndim == 0:
            raise ShapeError(f"matmul: both arguments to matmul need to be at least 1D, but they are {self.ndim}D and "
                             f"{other.ndim}D (shapes {self.shape} and {other.shape}); reshape a scalar to (1,) or "
                             "multiply with *")
        a = self.unsqueeze(0) if self.ndim == 1 else self
        b = other.unsqueeze(-1) if other.ndim == 1 else other
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"matmul of shapes {self.shape} and {other.shape}: inner sizes {a.shape[-1]} and "
                             f"{b.shape[-2]} differ")
        dt = result_dtype(self.dtype, other.dtype)
        n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
        left = a.reshape(*a.shape[:-2], n, 1, k)
        right = b.transpose(-1, -2).reshape(*b.shape[:-2], 1, m, k)
        # half floats multiply in float32 (a product of two halves is exact there) and accumulate there, as PyTorch
        wide = dtypes.float32 if dt in HALF_FLOATS else dt
        product = left._cast_to(wide).mul(right._cast_to(wide)).sum(-1)
        product = product._cast_to(dt)  # the sum accumulated in sum_acc_dtype (bool, narrow ints) or float32
        if self.ndim == 1:
            product = product.squeeze(-2)
        if other.ndim == 1:
            product = product.squeeze(-1)
        return product

    def dot(self, other: Self) -> Self:
        return self.matmul(other)

    def __matmul__(self, other: Self) -> Self:
        return self.matmul(other)

    def __rmatmul__(self, other: Self) -> Self:
        return other.matmul(self)

"""Matrix products: matmul (`@`), dot, linear and einsum.

A matmul is a broadcast multiply and a sum over the shared axis (a REDUCE over a view), which the scheduler fuses
into one kernel and codegen tiles; einsum permutes and reshapes its operands into that same form.
"""


from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from plygrad.frontend import blocked, lazy, reduce
from plygrad.frontend.composite import composite
from plygrad.frontend.errors import ArgumentValueError
from plygrad.ir import DType, DTypeLike, Ops, ShapeError, UOp, broadcast_shapes, dtypes, result_dtype, to_dtype
from plygrad.ir.shape import dim_max

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

# distinct placeholder labels for the axes an einsum `...` stands for (never an ASCII letter, so never clash)
_ELLIPSIS_LABELS = "".join(chr(0x3B1 + i) for i in range(24))


def accumulate_dtype(dtype: DType) -> DType:
    """Half-precision products are summed in float32 (as PyTorch's CPU kernels do) and rounded once at the end."""
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


def matmul(x: Tensor, other: Tensor) -> Tensor:
    """NumPy's matmul: 1-D operands gain and lose an axis, leading (batch) axes broadcast."""
    if x.ndim == 0 or other.ndim == 0:
        raise ShapeError(f"matmul: both arguments to matmul need to be at least 1D, but they are {x.ndim}D and "
                         f"{other.ndim}D (shapes {x.shape} and {other.shape}); reshape a scalar to (1,) or "
                         "multiply with *")
    a = x.unsqueeze(0) if x.ndim == 1 else x
    b = other.unsqueeze(-1) if other.ndim == 1 else other
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul of shapes {x.shape} and {other.shape}: inner sizes {a.shape[-1]} and "
                         f"{b.shape[-2]} differ")
    if (x.ndim >= 2 and other.ndim >= 2 and x.dtype is other.dtype and x.dtype.is_float
            and x.dtype not in reduce.HALF_FLOATS and dim_max(x.shape[-1]) <= blocked.SPLIT_ABOVE
            and not type(x).no_grad):
        return _matmul_nodes(x, other)
    return _matmul_by_tensors(x, other, a, b)


def _matmul_by_tensors(x: Tensor, other: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """matmul op by op through Tensors (`a`, `b`: the operands with 1-D ones given an axis)."""
    dt = result_dtype(x.dtype, other.dtype)
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    left = a.reshape(*a.shape[:-2], n, 1, k)
    right = b.transpose(-1, -2).reshape(*b.shape[:-2], 1, m, k)
    # half floats multiply in float32 (a product of two halves is exact there) and accumulate there, as PyTorch
    wide = dtypes.float32 if dt in reduce.HALF_FLOATS else dt
    product = left._cast_to(wide).mul(right._cast_to(wide)).sum(-1)
    product = product._cast_to(dt)  # the sum accumulated in sum_acc_dtype (bool, narrow ints) or float32
    if x.ndim == 1:
        product = product.squeeze(-2)
    if other.ndim == 1:
        product = product.squeeze(-1)
    return product


def _matmul_nodes(x: Tensor, other: Tensor) -> Tensor:
    """The graph `_matmul_by_tensors` builds through ~8 Tensors, as one chain of nodes in one Tensor, for the
    common case: two operands of one float dtype (no cast, no float32 widening), at least 2-D, and a reduce
    axis short enough that the sum is one REDUCE (not blocked). Not under no_grad, where the op-by-op form wraps
    its first ops in gradient stops (lazy.py)."""
    n, k, m = x.shape[-2], x.shape[-1], other.shape[-1]
    left = lazy.movement(x.uop, Ops.RESHAPE, (*x.shape[:-2], n, 1, k))
    swap = (*range(other.ndim - 2), other.ndim - 1, other.ndim - 2)  # other.transpose(-1, -2)
    right = lazy.movement(lazy.movement(other.uop, Ops.PERMUTE, swap), Ops.RESHAPE, (*other.shape[:-2], 1, m, k))
    shape = broadcast_shapes(lazy.shape_of(left), lazy.shape_of(right))
    product = lazy.broadcast_uop(left, shape).alu(Ops.MUL, lazy.broadcast_uop(right, shape))
    summed = UOp(Ops.REDUCE, product.dtype, (product,), (Ops.ADD, (len(shape) - 1,)))  # .sum(-1)
    return x._new(lazy.movement(summed, Ops.RESHAPE, shape[:-1]), other)


def dot(x: Tensor, other: Tensor) -> Tensor:
    return x.matmul(other)


@composite()
def linear(t: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: DTypeLike | None = None) -> Tensor:
    """`self @ weight + bias` with weight of shape (in, out) as in tinygrad (torch.nn.Linear stores (out, in)
    and computes `x @ weight.T`); a 1-D weight scales elementwise."""
    x, w = (t, weight) if dtype is None else (t.cast(dtype), weight.cast(dtype))
    if w.ndim == 1:
        out = x.mul(w)
    else:
        if x.ndim == 0 or x.shape[-1] != w.shape[0]:
            raise ShapeError(f"linear: input of shape {t.shape} does not match weight of shape {weight.shape} "
                             "(tinygrad layout: weight is (in_features, out_features))")
        out = x.matmul(w)
    return out if bias is None else out.add(bias)


def einsum(formula: str, *operands: Tensor | Sequence[Tensor], dtype: DTypeLike | None = None) -> Tensor:
    """Einstein summation like `torch.einsum`: explicit (`ij,jk->ik`) or implicit output (the labels seen once,
    in alphabetical order), repeated labels in one operand (diagonals, `ii->i`), `...` for broadcast axes, and
    size-1 axes broadcasting against the same label elsewhere.

    Each operand is brought to one common axis order (output labels first, then the summed ones) and the
    product of all of them is summed over the trailing axes: one fused reduce."""
    ops: list[Tensor] = [*operands[0]] if len(operands) == 1 and isinstance(operands[0], (list, tuple)) \
        else list(operands)  # type: ignore[arg-type]
    if not ops:
        raise ArgumentValueError(f"einsum {formula!r}: needs at least one operand")
    spec = formula.replace(" ", "")
    lhs, arrow, rhs = spec.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        raise ArgumentValueError(f"einsum {formula!r}: the formula names {len(terms)} operands but {len(ops)} were "
                                 "given")
    for term in (*terms, rhs):
        letters = term.replace("...", "")
        if term.count("...") > 1 or not all(c.isascii() and c.isalpha() for c in letters):
            raise ValueError(f"einsum {formula!r}: a term may use only letters and one '...'; got {term!r}")
    ellipsis_dims = max((x.ndim - len(t.replace("...", "")) for x, t in zip(ops, terms, strict=True)
                         if "..." in t), default=0)
    if ellipsis_dims > len(_ELLIPSIS_LABELS):
        raise ValueError(f"einsum {formula!r}: '...' covers {ellipsis_dims} axes, at most "
                         f"{len(_ELLIPSIS_LABELS)} are supported")
    ellipsis = _ELLIPSIS_LABELS[:max(ellipsis_dims, 0)]
    labelled: list[tuple[Tensor, str]] = []
    for i, (x, term) in enumerate(zip(ops, terms, strict=True)):
        named = len(term.replace("...", ""))
        if "..." in term:
            own = x.ndim - named
            if own < 0:
                raise ShapeError(f"einsum {formula!r}: operand {i} of shape {x.shape} has fewer axes than the "
                                 f"{named} letters of {term!r}")
            head, tail = term.split("...")
            labels = head + ellipsis[len(ellipsis) - own:] + tail  # '...' axes align from the right
        else:
            labels = term
            if named != x.ndim:
                raise ShapeError(f"einsum {formula!r}: operand {i} of shape {x.shape} has {x.ndim} axes but "
                                 f"{term!r} names {named}")
        labelled.append(_einsum_diagonals(x, labels, formula))
    if arrow:
        out = rhs.replace("...", ellipsis)
        seen = "".join(labels for _, labels in labelled)
        for c in out:
            if out.count(c) > 1 or c not in seen:
                raise ValueError(f"einsum {formula!r}: output label {c!r} repeats or is not in any input")
    else:
        counts = "".join(t.replace("...", "") for t in terms)
        out = ellipsis + "".join(sorted(c for c in set(counts) if counts.count(c) == 1))
    sizes: dict[str, int] = {}
    for i, (x, labels) in enumerate(labelled):
        for c, n in zip(labels, x.shape, strict=True):
            if sizes.get(c, 1) not in (1, n) and n != 1:
                raise ShapeError(f"einsum {formula!r}: label {c!r} has size {sizes[c]} in one operand and {n} "
                                 f"in operand {i} (shape {x.shape})")
            sizes[c] = max(sizes.get(c, 1), n)
    summed = "".join(dict.fromkeys(c for _, labels in labelled for c in labels if c not in out))
    order = out + summed
    dt = to_dtype(dtype) if dtype is not None else functools.reduce(result_dtype, (x.dtype for x, _ in labelled))
    acc = accumulate_dtype(dt)
    aligned = [x._cast_to(acc).permute(sorted(range(x.ndim), key=lambda a: order.index(labels[a])))
               .reshape(tuple(sizes[c] if c in labels and x.shape[labels.index(c)] != 1 else 1 for c in order))
               for x, labels in labelled]
    product = functools.reduce(lambda a, b: a.mul(b), aligned)
    product = product.expand(tuple(sizes[c] for c in order))
    if summed:
        product = product.sum(tuple(range(len(out), len(order))))
    return product._cast_to(dt)


def _einsum_diagonals(x: Tensor, labels: str, formula: str) -> tuple[Tensor, str]:
    """Repeated labels within one operand read its diagonal (`ii` of a matrix is its diagonal, labelled i)."""
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        a = labels.index(c)
        b = labels.index(c, a + 1)
        if x.shape[a] != x.shape[b]:
            raise ShapeError(f"einsum {formula!r}: repeated label {c!r} spans axes of sizes {x.shape[a]} and "
                             f"{x.shape[b]} (operand shape {x.shape}); a diagonal needs equal sizes")
        x = x.diagonal(0, a, b)
        labels = labels[:a] + labels[a + 1:b] + labels[b + 1:] + c
    return x, labels

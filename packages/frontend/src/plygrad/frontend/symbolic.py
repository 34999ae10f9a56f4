"""Symbolic shapes: sizes that are variables, so one compiled program serves every value (tinygrad's `Variable`).

`Variable("n", 1, 128)` is a DEFINE_VAR of the index dtype; `.bind(10)` gives it a value (a BIND). A bound variable,
or an index expression of one (`n + 2`, `n * 3`), can be a size in `reshape`/`expand` and an amount in
`shrink`/`pad`; the tensor's shape then holds that expression where it would hold an int. In the graph it is an
extra source of the movement op (docs/ir.md §4.3). Before a graph is scheduled, every BIND is replaced by one at
its variable's minimum (frontend/scheduling.py), so every bound value shares one schedule and one program; the
CALL passes the value. Memory for a symbolic tensor is sized for the variables' maxima, and holds it row-major.

Checks that need a size's value (reshape's element count, shrink bounds, `numpy()`) use the bound values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from plygrad.ir import DType, EvaluationError, Ops, ShapeError, UOp, dtypes, evaluate
from plygrad.ir.shape import SYMBOLIC_MOVEMENT, dim_text, shape_text, size_expr_problem

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

__all__ = ["Variable", "bound_shape", "bound_value", "is_sym", "split_symbolic"]


def Variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.index) -> UOp:  # noqa: N802 - tinygrad's name
    """A size variable named `name` taking values min_val..max_val; `.bind(value)` gives it a value."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"Variable: the name must be an identifier, got {name!r}")
    if type(min_val) is not int or type(max_val) is not int or not 0 <= min_val <= max_val:
        raise ValueError(f"Variable {name!r}: needs ints 0 <= min_val <= max_val, got {min_val!r}, {max_val!r}")
    if dtype is not dtypes.index:
        raise ValueError(f"Variable {name!r}: a size variable has dtype index, got {dtype}")
    return UOp.variable(name, min_val, max_val)


def is_sym(x: object) -> bool:
    """Whether `x` is a symbolic size (a UOp) rather than an int."""
    return isinstance(x, UOp)


def check_size(x: Any, where: str) -> None:
    """A symbolic size must be an index-dtype expression of constants and variables (the IR's rule,
    `size_expr_problem`), checked before a graph is built with it."""
    bad = size_expr_problem(x)
    if bad is not None:
        raise ShapeError(f"{where}: a symbolic size must be a Variable (bound with .bind) or an index expression of "
                         f"one; this one holds a {bad.op.name} of dtype {bad.dtype.name}")


def bound_value(x: int | UOp) -> int:
    """The value of a size at its variables' bound values."""
    if type(x) is int:
        return x
    assert isinstance(x, UOp)
    try:
        return int(evaluate(x))
    except EvaluationError:
        names = sorted({str(n.arg[0]) for n in x.toposort if n.op is Ops.DEFINE_VAR})
        raise ShapeError(f"size {dim_text(x)} has no value: bind its variable{'s' if len(names) > 1 else ''} "
                         f"{', '.join(names)} first (Variable(...).bind(value))") from None


def size_tensor(like: Tensor, size: UOp) -> Tensor:
    """The value of symbolic size `size` as a tensor of `like`'s shape and dtype (read at run time, so the graph
    is the same for every bound value)."""
    from plygrad.frontend.lazy import broadcast_uop
    value = UOp(Ops.CAST, like.dtype, (size,))
    return like._new(broadcast_uop(value, like.shape))


def symbolic_text(shape: Sequence[int | UOp]) -> str:
    """A symbolic shape as text with its variables' bound values: `(2, n) with n=3`."""
    values = {str(n.src[0].arg[0]): int(n.src[1].arg) for d in shape if isinstance(d, UOp) for n in d.toposort
              if n.op is Ops.BIND}
    bound = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
    return shape_text(tuple(shape)) + (f" with {bound}" if bound else "")


def bound_shape(shape: Sequence[int | UOp]) -> tuple[int, ...]:
    """`shape` at the bound values of its variables."""
    return tuple(bound_value(d) for d in shape)


def has_sym(arg: Any) -> bool:
    """Whether a movement argument (sizes, or pairs of amounts) holds a symbolic entry."""
    return any(isinstance(v, UOp) or (type(v) is tuple and any(isinstance(w, UOp) for w in v)) for v in arg)


def split_symbolic(op: Ops, arg: Any) -> tuple[Any, tuple[UOp, ...]]:
    """A movement argument as the IR holds it: each symbolic entry None, its expression an extra source."""
    if op not in SYMBOLIC_MOVEMENT:
        raise ShapeError(f"{op.name} takes no symbolic sizes, got {shape_text(arg)}")
    extra: list[UOp] = []

    def entry(v: Any) -> Any:
        if isinstance(v, UOp):
            check_size(v, op.name.lower())
            extra.append(v)
            return None
        return v

    if op in (Ops.PAD, Ops.SHRINK):
        return tuple(tuple(entry(v) for v in p) for p in arg), tuple(extra)
    return tuple(entry(v) for v in arg), tuple(extra)



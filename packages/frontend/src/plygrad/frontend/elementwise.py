"""Elementwise ops: arithmetic with PyTorch promotion and broadcasting, comparisons, math functions, casts.

The IR never promotes or broadcasts (docs/ir.md §3, §4.3): every ALU op takes operands of one dtype and one shape.
So each binary op here first picks the result dtype with `result_dtype` (Python scalars are weak), CASTs both sides
to it, and broadcasts both with RESHAPE + EXPAND. Functions the IR has no op for are built from the ones it has
(exp from EXP2, floor division from C's truncating IDIV/MOD, ...).
"""


from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from plygrad.frontend import core
from plygrad.frontend.errors import ArgumentValueError
from plygrad.frontend.lazy import LazyTensor, Scalar, broadcast_uop, const_uop
from plygrad.ir import (
    DType,
    DTypeError,
    DTypeKind,
    DTypeLike,
    Ops,
    UOp,
    broadcast_shapes,
    dtypes,
    result_dtype,
    to_dtype,
)

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

RoundingMode = Literal["trunc", "floor"]


# ---- building blocks --------------------------------------------------------------------------------------
def operands(t: Tensor, other: Tensor | Scalar, dtype: DType | None = None, reverse: bool = False,
             op: str = "op") -> tuple[Tensor, Tensor]:
    """Both operands of a binary op at one dtype (promoted unless given) and one broadcast shape."""
    if isinstance(other, LazyTensor):
        if other.device != t.device:
            raise ArgumentValueError(f"{op}: operands are on different devices ({t.device} and {other.device}); "
                                     "move one with .to(device)")
        # same dtype and same shape (most ops of a model) need no promotion and no broadcast: skip the lattice walk
        dt = (t.dtype if t.dtype is other.dtype else result_dtype(t.dtype, other.dtype)) if dtype is None else dtype
        own, theirs = t.shape, other.shape
        shape = own if own == theirs else broadcast_shapes(own, theirs)
        y = other._cast_to(dt)._broadcast_to(shape)
    elif isinstance(other, (bool, int, float)):
        dt = result_dtype(t.dtype, other) if dtype is None else dtype
        shape = t.shape
        y = t._const(other, dt)
    else:
        raise TypeError(f"{op}: unsupported operand type {type(other).__name__} (use a Tensor or a Python scalar)")
    x = t._cast_to(dt)._broadcast_to(shape)
    return (y, x) if reverse else (x, y)


def _binary(t: Tensor, op: Ops, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    if not isinstance(other, LazyTensor) and isinstance(other, (bool, int, float)):
        return _scalar_alu(t, op, other, _scalar_dtype(t.dtype, other), reverse)
    x, y = operands(t, other, reverse=reverse, op=op.name)
    return core.alu(x, op, y)


def _scalar_dtype(dtype: DType, value: Scalar) -> DType:
    """`result_dtype(dtype, value)`, answered at once for a float tensor (a Python scalar never lifts it)."""
    return dtype if dtype.is_float else result_dtype(dtype, value)


def _scalar_alu(t: Tensor, op: Ops, value: Scalar, dtype: DType, reverse: bool = False) -> Tensor:
    """`op(t, value)` (reversed: `op(value, t)`) at `dtype`, the graph `operands` and `core.alu` build, without a
    Tensor for the constant: it reads no Buffer and never requires grad, so the result's inputs and requires_grad
    are `t`'s alone. Most scalar ops of a model (polynomials, scales, epsilons) go this way."""
    x = t._cast_to(dtype)
    const = const_uop(dtype, value, x.shape)
    return x._new(const.alu(op, x.uop) if reverse else x.uop.alu(op, const))


def _no_bool(x: Tensor, op: str) -> None:
    if x.dtype.is_bool:
        raise DTypeError(f"{op} of a bool tensor is not defined; cast it to an integer or float dtype first")


# ---- arithmetic -------------------------------------------------------------------------------------------
def add(x: Tensor, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    return _binary(x, Ops.ADD, other, reverse)


def sub(t: Tensor, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    if not isinstance(other, LazyTensor) and isinstance(other, (bool, int, float)):
        dt = _scalar_dtype(t.dtype, other)
        if not dt.is_bool:  # a bool difference raises below
            return _scalar_alu(t, Ops.SUB, other, dt, reverse)
    x, y = operands(t, other, reverse=reverse, op="SUB")
    _no_bool(x, "subtraction")
    return core.alu(x, Ops.SUB, y)


def mul(x: Tensor, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    return _binary(x, Ops.MUL, other, reverse)


def _true_div(t: Tensor, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    """True division: integers and bool divide as the default float (PyTorch)."""
    if not isinstance(other, LazyTensor) and isinstance(other, (bool, int, float)):
        dt = _scalar_dtype(t.dtype, other)
        if dt.is_float:  # integers are cast after `operands` (the cast of a constant is its own graph)
            return _scalar_alu(t, Ops.FDIV, other, dt, reverse)
    x, y = operands(t, other, reverse=reverse, op="FDIV")
    if not x.dtype.is_float:
        x, y = x._cast_to(dtypes.default_float), y._cast_to(dtypes.default_float)
    return core.alu(x, Ops.FDIV, y)


def floordiv(t: Tensor, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    """Floor division (Python's and PyTorch's `//`), built from C's truncating IDIV for integers."""
    x, y = operands(t, other, reverse=reverse, op="floordiv")
    if x.dtype.is_float:
        return core.alu(x, Ops.FDIV, y).floor()
    _no_bool(x, "floor division")
    q = core.alu(x, Ops.IDIV, y)
    if x.dtype.kind is DTypeKind.UNSIGNED:
        return q
    return q.sub(_needs_floor_fix(x, y)._cast_to(q.dtype))


def mod(t: Tensor, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    """Floor modulo (Python's `%`, PyTorch's `remainder`): the result takes the divisor's sign."""
    x, y = operands(t, other, reverse=reverse, op="mod")
    if x.dtype.is_float:
        return x.sub(core.alu(x, Ops.FDIV, y).floor().mul(y))
    _no_bool(x, "modulo")
    r = core.alu(x, Ops.MOD, y)
    if x.dtype.kind is DTypeKind.UNSIGNED:
        return r
    return _needs_floor_fix(x, y).where(r.add(y), r)


def _needs_floor_fix(x: Tensor, y: Tensor) -> Tensor:
    """Where C's truncation and floor disagree: a non-zero remainder whose sign differs from the divisor's."""
    r = core.alu(x, Ops.MOD, y)
    zero = r._const(0)
    return r.ne(zero).logical_and(r.lt(zero).ne(y.lt(zero)))


def pow(t: Tensor, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    """`x ** y` through C's pow; integer powers are computed in float64 and cast back to the integer dtype."""
    x, y = operands(t, other, reverse=reverse, op="POW")
    if x.dtype.is_float:
        return core.alu(x, Ops.POW, y)
    wide = core.alu(x._cast_to(dtypes.float64), Ops.POW, y._cast_to(dtypes.float64))
    return wide.round_half_away()._cast_to(x.dtype)


def round_half_away(x: Tensor) -> Tensor:
    """Round to nearest, halves away from zero (for integer results computed in floating point)."""
    return x.add(x.sign().mul(0.5)).trunc()


def neg(x: Tensor) -> Tensor:
    _no_bool(x, "negation")
    return core.alu(x, Ops.NEG)


def maximum(x: Tensor, other: Tensor | Scalar) -> Tensor:
    return _binary(x, Ops.MAX, other)


def minimum(t: Tensor, other: Tensor | Scalar) -> Tensor:
    x, y = operands(t, other, op="minimum")
    if x.dtype.is_float:  # NEG keeps MAX's NaN propagation; integers use WHERE (NEG of INT_MIN wraps)
        return core.alu(x.neg(), Ops.MAX, y.neg()).neg()
    return x.lt(y).where(x, y)


def where(t: Tensor, x: Tensor | Scalar, y: Tensor | Scalar) -> Tensor:
    """`self ? x : y` elementwise, broadcasting all three; `self` is read as bool."""
    cond = t._cast_to(dtypes.bool)
    if not type(t).no_grad and isinstance(x, LazyTensor) != isinstance(y, LazyTensor):
        value = y if isinstance(x, LazyTensor) else x
        if isinstance(value, (bool, int, float)):
            return _where_scalar(cond, x, y)
    return _where_by_tensors(cond, x, y)


def _where_scalar(cond: Tensor, x: Tensor | Scalar, y: Tensor | Scalar) -> Tensor:
    """`where` with one Python scalar branch: the graph `_where_by_tensors` builds, without a Tensor for the
    constant or for the three broadcasts. The result's requires_grad is decided by the tensor branch and by
    `cond`, as the op-by-op form decides it (a bool carries its inputs' requires_grad through its broadcast too:
    `_derived_grad`). Not under no_grad, where the op-by-op form wraps its broadcasts in gradient stops."""
    tensor, value = (x, y) if isinstance(x, LazyTensor) else (y, x)
    assert isinstance(tensor, LazyTensor) and not isinstance(value, LazyTensor)
    branch = tensor._cast_to(_scalar_dtype(tensor.dtype, value))
    const = const_uop(branch.dtype, value, tensor.shape)
    shape = broadcast_shapes(cond.shape, branch.shape)
    when_true, when_false = (branch.uop, const) if tensor is x else (const, branch.uop)
    node = UOp(Ops.WHERE, branch.dtype, (broadcast_uop(cond.uop, shape), broadcast_uop(when_true, shape),
                                         broadcast_uop(when_false, shape)))
    node, requires_grad = branch._derived_grad(node, branch, cond)
    return branch._make(node, branch.device, branch.inputs | cond.inputs, requires_grad)


def _where_by_tensors(cond: Tensor, x: Tensor | Scalar, y: Tensor | Scalar) -> Tensor:
    """`where` op by op through Tensors (`cond` already read as bool)."""
    if isinstance(x, LazyTensor):
        a, b = operands(x, y, op="where")
    elif isinstance(y, LazyTensor):
        b, a = operands(y, x, op="where")
    else:
        dt = result_dtype(x, y)
        a, b = cond._const(x, dt), cond._const(y, dt)
    shape = broadcast_shapes(cond.shape, a.shape)
    cond, a, b = cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape)
    return a._new(UOp(Ops.WHERE, a.dtype, (cond.uop, a.uop, b.uop)), cond, b)


# ---- comparisons and logic --------------------------------------------------------------------------------
def lt(x: Tensor, other: Tensor | Scalar) -> Tensor:
    return _binary(x, Ops.CMPLT, other)


def gt(x: Tensor, other: Tensor | Scalar) -> Tensor:
    return _binary(x, Ops.CMPLT, other, reverse=True)


def le(t: Tensor, other: Tensor | Scalar) -> Tensor:
    x, y = operands(t, other, op="le")
    return core.alu(x, Ops.CMPLT, y).logical_or(core.alu(x, Ops.CMPEQ, y))  # false with NaN, like IEEE <=


def ge(t: Tensor, other: Tensor | Scalar) -> Tensor:
    x, y = operands(t, other, op="ge")
    return core.alu(y, Ops.CMPLT, x).logical_or(core.alu(x, Ops.CMPEQ, y))


def eq(x: Tensor, other: Tensor | Scalar) -> Tensor:
    return _binary(x, Ops.CMPEQ, other)


def ne(x: Tensor, other: Tensor | Scalar) -> Tensor:
    return _binary(x, Ops.CMPNE, other)


def logical_and(t: Tensor, other: Tensor | Scalar) -> Tensor:
    x, y = operands(t, other, dtypes.bool, op="logical_and")
    return core.alu(x, Ops.AND, y)


def logical_or(t: Tensor, other: Tensor | Scalar) -> Tensor:
    x, y = operands(t, other, dtypes.bool, op="logical_or")
    return core.alu(x, Ops.OR, y)


def logical_not(t: Tensor) -> Tensor:
    x = t._cast_to(dtypes.bool)
    return core.alu(x, Ops.XOR, x._const(True))


# ---- bitwise ops and shifts -------------------------------------------------------------------------------
def _bitwise(t: Tensor, op: Ops, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    x, y = operands(t, other, reverse=reverse, op=op.name)
    if x.dtype.is_float:
        raise DTypeError(f"{op.name} (bitwise) of {x.dtype} tensors is not defined; it takes integers or bool")
    return core.alu(x, op, y)


def bitwise_and(x: Tensor, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    return _bitwise(x, Ops.AND, other, reverse)


def bitwise_or(x: Tensor, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    return _bitwise(x, Ops.OR, other, reverse)


def bitwise_xor(x: Tensor, other: Tensor | Scalar, reverse: bool = False) -> Tensor:
    return _bitwise(x, Ops.XOR, other, reverse)


def bitwise_not(x: Tensor) -> Tensor:
    """`~x`: every bit flipped on integers, logical not on bool."""
    if x.dtype.is_float:
        raise DTypeError(f"bitwise_not (~) of a {x.dtype} tensor is not defined; it takes integers or bool")
    return x.logical_not() if x.dtype.is_bool else core.alu(x, Ops.XOR, x._const(-1))


def _shift(t: Tensor, op: Ops, other: Tensor | Scalar, reverse: bool) -> Tensor:
    """SHL/SHR with PyTorch's answer for every shift amount: the IR defines only 0 <= y < bits, so amounts
    outside it give 0 (left) or the sign fill, -1 or 0 (right), as if shifted one bit at a time."""
    name = "lshift" if op is Ops.SHL else "rshift"
    x, y = operands(t, other, reverse=reverse, op=name)
    if not x.dtype.is_int:
        raise DTypeError(f"{name} of {x.dtype} tensors is not defined; shifts take integer tensors "
                         f"(shapes {x.shape} and {y.shape})")
    bits = x.dtype.bitsize
    if isinstance(other, int) and not reverse and 0 <= other < bits:
        return core.alu(x, op, y)
    valid = y.ge(0).logical_and(y.lt(bits))
    shifted = core.alu(x, op, valid.where(y, 0))
    if op is Ops.SHL or x.dtype.is_unsigned:
        return valid.where(shifted, 0)
    return valid.where(shifted, core.alu(x, Ops.SHR, x._const(bits - 1)))


def lshift(x: Tensor, other: Tensor | int, reverse: bool = False) -> Tensor:
    """`x << y` (bits shifted past the width are lost; negative or too large amounts give 0)."""
    return _shift(x, Ops.SHL, other, reverse)


def rshift(x: Tensor, other: Tensor | int, reverse: bool = False) -> Tensor:
    """`x >> y`: arithmetic (sign-filling) on signed integers, logical on unsigned ones."""
    return _shift(x, Ops.SHR, other, reverse)


def bitcast(x: Tensor, dtype: DTypeLike) -> Tensor:
    """The same bytes read as `dtype` (IR BITCAST), like `torch.Tensor.view(dtype)`: to a dtype of another size the
    last axis scales (bitcast.py). A disk tensor takes it as a view of its file where it can (disk.py). No gradient
    flows."""
    from plygrad.frontend import bitcast, disk  # they build with Tensor methods

    dtype = to_dtype(dtype)
    if dtype is x.dtype:
        return x
    if disk.is_disk(x.device):
        return disk.bitcast(x, dtype)
    if dtype.itemsize != x.dtype.itemsize:
        return bitcast.resized_bitcast(x, dtype)
    return x._new(UOp(Ops.BITCAST, dtype, (x.uop,)))


def reciprocal(x: Tensor) -> Tensor:
    return core.alu(core.float_input(x), Ops.RECIPROCAL)


# ---- rounding, sign and magnitude -------------------------------------------------------------------------
def trunc(x: Tensor) -> Tensor:
    return core.alu(x, Ops.TRUNC) if x.dtype.is_float else x


def floor(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return x
    t = x.trunc()
    return t.sub(t.gt(x)._cast_to(x.dtype))


def ceil(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return x
    t = x.trunc()
    return t.add(t.lt(x)._cast_to(x.dtype))


def round(x: Tensor) -> Tensor:
    """Round to nearest, halves to even (torch.round, NumPy's rint): 0.5 -> 0, 1.5 -> 2, -2.5 -> -2."""
    if not x.dtype.is_float:
        return x
    f = x.floor()
    frac = x.sub(f)  # exact: f <= x < f + 1
    odd = f.mul(0.5).floor().mul(2.0).ne(f)
    up = frac.gt(0.5).logical_or(frac.eq(0.5).logical_and(odd))
    return f.add(up._cast_to(x.dtype))


def abs(x: Tensor) -> Tensor:
    """|x|; its gradient is sign(x), 0 at 0 like PyTorch (x - x keeps NaN and gives +0.0 for -0.0)."""
    if x.dtype.is_bool or x.dtype.is_unsigned:
        return x
    if not x.dtype.is_float:
        return core.alu(x, Ops.MAX, x.neg())
    return x.gt(0).where(x, x.lt(0).where(x.neg(), x.sub(x)))


def sign(x: Tensor) -> Tensor:
    """-1, 0 or 1 in the input's dtype (0 for NaN, like PyTorch); zero gradient."""
    if x.dtype.is_bool:
        return x
    zero = x._const(0)
    positive = x.gt(zero)._cast_to(x.dtype)
    if x.dtype.is_unsigned:
        return positive
    return positive.sub(x.lt(zero)._cast_to(x.dtype))


def _signbit(x: Tensor) -> Tensor:
    """True where the sign bit is set (-0.0 and negative NaNs too), read through a BITCAST."""
    as_int = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[x.dtype.itemsize]
    return x.bitcast(as_int).lt(0)


def copysign(t: Tensor, other: Tensor | Scalar) -> Tensor:
    """|self| with the sign bit of `other` (including -0.0); the gradient is +-1, 0 where self is 0 (PyTorch)."""
    x, y = operands(t, other, op="copysign")
    x, y = core.float_input(x), y._cast_to(dtypes.default_float) if not y.dtype.is_float else y
    if y.dtype is not x.dtype:
        x, y = x._cast_to(result_dtype(x.dtype, y.dtype)), y._cast_to(result_dtype(x.dtype, y.dtype))
    z = x.eq(0).where(x.mul(0.0), x)
    return _signbit(x).ne(_signbit(y)).where(z.neg(), z)


def lerp(t: Tensor, end: Tensor | Scalar, weight: Tensor | Scalar) -> Tensor:
    """self + weight * (end - self), evaluated from the nearer end (PyTorch's formula: exact at weight 1)."""
    x, e = operands(t, end, op="lerp")
    if isinstance(weight, LazyTensor):
        w, x = operands(weight, x, op="lerp")
        x, e = operands(x, e, op="lerp")
        w, x = operands(w, x, op="lerp")
    else:
        w = x._const(weight)
    diff = e.sub(x)
    return w.lt(0.5).where(x.add(w.mul(diff)), e.sub(diff.mul(w.sub(1.0, reverse=True))))


def clamp(t: Tensor, min_: Tensor | Scalar | None = None, max_: Tensor | Scalar | None = None) -> Tensor:
    """Limit values to [min_, max_] (each optional, tensor or scalar; max_ wins where min_ > max_). NaN stays
    NaN; the gradient passes where min_ <= x <= max_, bounds included (PyTorch)."""
    if min_ is None and max_ is None:
        raise ArgumentValueError(f"clamp of a tensor of shape {t.shape}: give min_, max_ or both")
    x = t
    if min_ is not None:
        x, lo = operands(x, min_, op="clamp")
        x = x.lt(lo).where(lo, x)
    if max_ is not None:
        x, hi = operands(x, max_, op="clamp")
        x = x.gt(hi).where(hi, x)
    return x


def clip(x: Tensor, min_: Tensor | Scalar | None = None, max_: Tensor | Scalar | None = None) -> Tensor:
    return x.clamp(min_, max_)


# ---- classification ---------------------------------------------------------------------------------------
def isnan(x: Tensor) -> Tensor:
    return x.ne(x)


def isinf(x: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    if not x.dtype.is_float:
        return x._const(False, dtypes.bool)
    return x.eq(math.inf).logical_and(detect_positive).logical_or(
        x.eq(-math.inf).logical_and(detect_negative))


def isfinite(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return x._const(True, dtypes.bool)
    return x.isnan().logical_or(x.isinf()).logical_not()


def isclose(t: Tensor, other: Tensor | Scalar, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """|self - other| <= atol + rtol * |other| where both are finite; equal values (infinities too) are close;
    NaNs are close to each other only with equal_nan."""
    x, y = operands(t, other, op="isclose")
    if x.dtype.is_bool:
        return x.eq(y)
    x, y = core.float_input(x), core.float_input(y)
    near = x.sub(y).abs().le(y.abs().mul(rtol).add(atol)).logical_and(x.isfinite()).logical_and(y.isfinite())
    close = x.eq(y).logical_or(near)
    return close.logical_or(x.isnan().logical_and(y.isnan())) if equal_nan else close


def square(x: Tensor) -> Tensor:
    return x.mul(x)


def cast(x: Tensor, dtype: DTypeLike) -> Tensor:
    """The values converted to `dtype` (a DType or its name, `"float16"`; floats to integers truncate toward
    zero)."""
    return x._cast_to(to_dtype(dtype))


def div(t: Tensor, other: Tensor | Scalar, reverse: bool = False, rounding_mode: RoundingMode | None = None) -> Tensor:
    """Division (`x / y`). `rounding_mode=None` is true division (integers divide as the default float);
    "trunc" rounds the quotient toward zero and "floor" down, and then integer operands keep their integer
    dtype (PyTorch's and tinygrad's `div`)."""
    if rounding_mode is None:
        return _true_div(t, other, reverse)
    if rounding_mode == "floor":
        return t.floordiv(other, reverse)
    if rounding_mode != "trunc":
        raise ArgumentValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    x, y = operands(t, other, reverse=reverse, op="div")
    if x.dtype.is_float:
        return x.div(y).trunc()
    _no_bool(x, "division with rounding_mode='trunc'")
    return core.alu(x, Ops.IDIV, y)


def fmod(t: Tensor, other: Tensor | Scalar) -> Tensor:
    """C's remainder (torch.fmod): `x - trunc(x / y) * y`, taking the sign of the dividend (unlike `%`, which
    takes the divisor's)."""
    x, y = operands(t, other, op="fmod")
    if x.dtype.is_float:
        return x.sub(x.div(y, rounding_mode="trunc").mul(y))
    _no_bool(x, "fmod")
    return core.alu(x, Ops.MOD, y)


def allclose(x: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Are all elements close (`isclose`)? A Python bool, like torch.allclose (this realizes both tensors)."""
    close = x.isclose(other, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if close.numel() == 0:
        return True
    return bool(close.flatten().min(0))

"""Elementwise ops: arithmetic with PyTorch promotion and broadcasting, comparisons, math functions, casts.

The IR never promotes or broadcasts (docs/ir.md §3, §4.3): every ALU op takes operands of one dtype and one shape.
So each binary op here first picks the result dtype with `result_dtype` (Python scalars are weak), CASTs both sides
to it, and broadcasts both with RESHAPE + EXPAND. Functions the IR has no op for are built from the ones it has
(exp from EXP2, floor division from C's truncating IDIV/MOD, ...).
"""

from __future__ import annotations

import math
from typing import Self

from plygrad.frontend.lazy import LazyTensor, Scalar
from plygrad.ir import DType, DTypeError, DTypeKind, Ops, UOp, broadcast_shapes, dtypes, result_dtype

LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)


class ElementwiseOps(LazyTensor):
    """Arithmetic, comparisons and math functions; operands are tensors or Python scalars."""

    __slots__ = ()

    # ---- building blocks --------------------------------------------------------------------------------------
    def _operands(self, other: Self | Scalar, dtype: DType | None = None, reverse: bool = False,
                  op: str = "op") -> tuple[Self, Self]:
        """Both operands of a binary op at one dtype (promoted unless given) and one broadcast shape."""
        if isinstance(other, LazyTensor):
            if other.device != self.device:
                raise ValueError(f"{op}: operands are on different devices ({self.device} and {other.device}); "
                                 "move one with .to(device)")
            dt = result_dtype(self.dtype, other.dtype) if dtype is None else dtype
            shape = broadcast_shapes(self.shape, other.shape)
            y = other._cast_to(dt)._broadcast_to(shape)
        elif isinstance(other, (bool, int, float)):
            dt = result_dtype(self.dtype, other) if dtype is None else dtype
            shape = self.shape
            y = self._const(other, dt)
        else:
            raise TypeError(f"{op}: unsupported operand type {type(other).__name__} (use a Tensor or a Python scalar)")
        x = self._cast_to(dt)._broadcast_to(shape)
        return (y, x) if reverse else (x, y)

    def _alu(self, op: Ops, *srcs: Self) -> Self:
        return self._new(self.uop.alu(op, *(s.uop for s in srcs)), *srcs)

    def _binary(self, op: Ops, other: Self | Scalar, reverse: bool = False) -> Self:
        x, y = self._operands(other, reverse=reverse, op=op.name)
        return x._alu(op, y)

    def _float_input(self) -> Self:
        """Math functions act on floats; integers and bool are cast to the default float first (PyTorch)."""
        return self if self.dtype.is_float else self._cast_to(dtypes.default_float)

    def _no_bool(self, op: str) -> None:
        if self.dtype.is_bool:
            raise DTypeError(f"{op} of a bool tensor is not defined; cast it to an integer or float dtype first")

    # ---- arithmetic -------------------------------------------------------------------------------------------
    def add(self, other: Self | Scalar, reverse: bool = False) -> Self:
        return self._binary(Ops.ADD, other, reverse)

    def sub(self, other: Self | Scalar, reverse: bool = False) -> Self:
        x, y = self._operands(other, reverse=reverse, op="SUB")
        x._no_bool("subtraction")
        return x._alu(Ops.SUB, y)

    def mul(self, other: Self | Scalar, reverse: bool = False) -> Self:
        return self._binary(Ops.MUL, other, reverse)

    def div(self, other: Self | Scalar, reverse: bool = False) -> Self:
        """True division: integers and bool divide as the default float (PyTorch)."""
        x, y = self._operands(other, reverse=reverse, op="FDIV")
        if not x.dtype.is_float:
            x, y = x._cast_to(dtypes.default_float), y._cast_to(dtypes.default_float)
        return x._alu(Ops.FDIV, y)

    def floordiv(self, other: Self | Scalar, reverse: bool = False) -> Self:
        """Floor division (Python's and PyTorch's `//`), built from C's truncating IDIV for integers."""
        x, y = self._operands(other, reverse=reverse, op="floordiv")
        if x.dtype.is_float:
            return x._alu(Ops.FDIV, y).floor()
        x._no_bool("floor division")
        q = x._alu(Ops.IDIV, y)
        if x.dtype.kind is DTypeKind.UNSIGNED:
            return q
        return q.sub(x._needs_floor_fix(y)._cast_to(q.dtype))

    def mod(self, other: Self | Scalar, reverse: bool = False) -> Self:
        """Floor modulo (Python's `%`, PyTorch's `remainder`): the result takes the divisor's sign."""
        x, y = self._operands(other, reverse=reverse, op="mod")
        if x.dtype.is_float:
            return x.sub(x._alu(Ops.FDIV, y).floor().mul(y))
        x._no_bool("modulo")
        r = x._alu(Ops.MOD, y)
        if x.dtype.kind is DTypeKind.UNSIGNED:
            return r
        return x._needs_floor_fix(y).where(r.add(y), r)

    def _needs_floor_fix(self, y: Self) -> Self:
        """Where C's truncation and floor disagree: a non-zero remainder whose sign differs from the divisor's."""
        r = self._alu(Ops.MOD, y)
        zero = r._const(0)
        return r.ne(zero).logical_and(r.lt(zero).ne(y.lt(zero)))

    def pow(self, other: Self | Scalar, reverse: bool = False) -> Self:
        """`x ** y` through C's pow; integer powers are computed in float64 and cast back to the integer dtype."""
        x, y = self._operands(other, reverse=reverse, op="POW")
        if x.dtype.is_float:
            return x._alu(Ops.POW, y)
        wide = x._cast_to(dtypes.float64)._alu(Ops.POW, y._cast_to(dtypes.float64))
        return wide.round_half_away()._cast_to(x.dtype)

    def round_half_away(self) -> Self:
        """Round to nearest, halves away from zero (for integer results computed in floating point)."""
        return self.add(self.sign().mul(0.5)).trunc()

    def neg(self) -> Self:
        self._no_bool("negation")
        return self._alu(Ops.NEG)

    def maximum(self, other: Self | Scalar) -> Self:
        return self._binary(Ops.MAX, other)

    def minimum(self, other: Self | Scalar) -> Self:
        x, y = self._operands(other, op="minimum")
        if x.dtype.is_float:  # NEG keeps MAX's NaN propagation; integers use WHERE (NEG of INT_MIN wraps)
            return x.neg()._alu(Ops.MAX, y.neg()).neg()
        return x.lt(y).where(x, y)

    def where(self, x: Self | Scalar, y: Self | Scalar) -> Self:
        """`self ? x : y` elementwise, broadcasting all three; `self` is read as bool."""
        cond = self._cast_to(dtypes.bool)
        if isinstance(x, LazyTensor):
            a, b = x._operands(y, op="where")
        elif isinstance(y, LazyTensor):
            b, a = y._operands(x, op="where")
        else:
            dt = result_dtype(x, y)
            a, b = cond._const(x, dt), cond._const(y, dt)
        shape = broadcast_shapes(cond.shape, a.shape)
        cond, a, b = cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape)
        return a._new(UOp(Ops.WHERE, a.dtype, (cond.uop, a.uop, b.uop)), cond, b)

    # ---- comparisons and logic --------------------------------------------------------------------------------
    def lt(self, other: Self | Scalar) -> Self:
        return self._binary(Ops.CMPLT, other)

    def gt(self, other: Self | Scalar) -> Self:
        return self._binary(Ops.CMPLT, other, reverse=True)

    def le(self, other: Self | Scalar) -> Self:
        x, y = self._operands(other, op="le")
        return x._alu(Ops.CMPLT, y).logical_or(x._alu(Ops.CMPEQ, y))  # false with NaN, like IEEE <=

    def ge(self, other: Self | Scalar) -> Self:
        x, y = self._operands(other, op="ge")
        return y._alu(Ops.CMPLT, x).logical_or(x._alu(Ops.CMPEQ, y))

    def eq(self, other: Self | Scalar) -> Self:
        return self._binary(Ops.CMPEQ, other)

    def ne(self, other: Self | Scalar) -> Self:
        return self._binary(Ops.CMPNE, other)

    def logical_and(self, other: Self | Scalar) -> Self:
        x, y = self._operands(other, dtypes.bool, op="logical_and")
        return x._alu(Ops.AND, y)

    def logical_or(self, other: Self | Scalar) -> Self:
        x, y = self._operands(other, dtypes.bool, op="logical_or")
        return x._alu(Ops.OR, y)

    def _bitwise(self, op: Ops, other: Self | Scalar) -> Self:
        x, y = self._operands(other, op=op.name)
        if x.dtype.is_float:
            raise DTypeError(f"{op.name} (bitwise) of {x.dtype} tensors is not defined; it takes integers or bool")
        return x._alu(op, y)

    def bitwise_and(self, other: Self | Scalar) -> Self:
        return self._bitwise(Ops.AND, other)

    def bitwise_or(self, other: Self | Scalar) -> Self:
        return self._bitwise(Ops.OR, other)

    def bitwise_xor(self, other: Self | Scalar) -> Self:
        return self._bitwise(Ops.XOR, other)

    def logical_not(self) -> Self:
        x = self._cast_to(dtypes.bool)
        return x._alu(Ops.XOR, x._const(True))

    # ---- math functions ---------------------------------------------------------------------------------------
    def exp(self) -> Self:
        x = self._float_input()
        return x.mul(LOG2_E)._alu(Ops.EXP2)

    def exp2(self) -> Self:
        return self._float_input()._alu(Ops.EXP2)

    def log(self) -> Self:
        return self._float_input()._alu(Ops.LOG2).mul(LN_2)

    def log2(self) -> Self:
        return self._float_input()._alu(Ops.LOG2)

    def sqrt(self) -> Self:
        return self._float_input()._alu(Ops.SQRT)

    def rsqrt(self) -> Self:
        return self.sqrt()._alu(Ops.RECIPROCAL)

    def reciprocal(self) -> Self:
        return self._float_input()._alu(Ops.RECIPROCAL)

    def sin(self) -> Self:
        return self._float_input()._alu(Ops.SIN)

    def cos(self) -> Self:
        x = self._float_input()
        return x.sub(math.pi / 2, reverse=True)._alu(Ops.SIN)  # cos(x) = sin(pi/2 - x)

    def tan(self) -> Self:
        return self.sin().div(self.cos())

    def trunc(self) -> Self:
        return self._alu(Ops.TRUNC) if self.dtype.is_float else self

    def floor(self) -> Self:
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return t.sub(t.gt(self)._cast_to(self.dtype))

    def ceil(self) -> Self:
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return t.add(t.lt(self)._cast_to(self.dtype))

    def abs(self) -> Self:
        if self.dtype.is_bool or self.dtype.kind is DTypeKind.UNSIGNED:
            return self
        return self._alu(Ops.MAX, self.neg())  # MAX(-0.0, 0.0) is 0.0 and NaN propagates

    def sign(self) -> Self:
        """-1, 0 or 1 in the input's dtype (NaN stays NaN)."""
        if self.dtype.is_bool:
            return self
        zero = self._const(0)
        positive = self.gt(zero)._cast_to(self.dtype)
        if self.dtype.kind is DTypeKind.UNSIGNED:
            return positive
        signed = positive.sub(self.lt(zero)._cast_to(self.dtype))
        if self.dtype.is_float:  # 0 * NaN keeps NaN where neither comparison holds
            return self.eq(self).where(signed, self.mul(zero))
        return signed

    def relu(self) -> Self:
        return self.maximum(0)

    def sigmoid(self) -> Self:
        x = self._float_input()
        return x.neg().exp().add(1.0)._alu(Ops.RECIPROCAL)

    def tanh(self) -> Self:
        x = self._float_input()
        return x.mul(2.0).sigmoid().mul(2.0).sub(1.0)

    def square(self) -> Self:
        return self.mul(self)

    def cast(self, dtype: DType) -> Self:
        """The values converted to `dtype` (floats to integers truncate toward zero)."""
        return self._cast_to(dtype)

    # ---- operators --------------------------------------------------------------------------------------------
    def __add__(self, x: Self | Scalar) -> Self: return self.add(x)
    def __radd__(self, x: Self | Scalar) -> Self: return self.add(x, True)
    def __sub__(self, x: Self | Scalar) -> Self: return self.sub(x)
    def __rsub__(self, x: Self | Scalar) -> Self: return self.sub(x, True)
    def __mul__(self, x: Self | Scalar) -> Self: return self.mul(x)
    def __rmul__(self, x: Self | Scalar) -> Self: return self.mul(x, True)
    def __truediv__(self, x: Self | Scalar) -> Self: return self.div(x)
    def __rtruediv__(self, x: Self | Scalar) -> Self: return self.div(x, True)
    def __floordiv__(self, x: Self | Scalar) -> Self: return self.floordiv(x)
    def __rfloordiv__(self, x: Self | Scalar) -> Self: return self.floordiv(x, True)
    def __mod__(self, x: Self | Scalar) -> Self: return self.mod(x)
    def __rmod__(self, x: Self | Scalar) -> Self: return self.mod(x, True)
    def __pow__(self, x: Self | Scalar) -> Self: return self.pow(x)
    def __rpow__(self, x: Self | Scalar) -> Self: return self.pow(x, True)
    def __neg__(self) -> Self: return self.neg()
    def __abs__(self) -> Self: return self.abs()
    def __lt__(self, x: Self | Scalar) -> Self: return self.lt(x)
    def __gt__(self, x: Self | Scalar) -> Self: return self.gt(x)
    def __le__(self, x: Self | Scalar) -> Self: return self.le(x)
    def __ge__(self, x: Self | Scalar) -> Self: return self.ge(x)
    def __eq__(self, x: Self | Scalar) -> Self: return self.eq(x)  # type: ignore[override]
    def __ne__(self, x: Self | Scalar) -> Self: return self.ne(x)  # type: ignore[override]
    def __and__(self, x: Self | Scalar) -> Self: return self.bitwise_and(x)
    def __or__(self, x: Self | Scalar) -> Self: return self.bitwise_or(x)
    def __xor__(self, x: Self | Scalar) -> Self: return self.bitwise_xor(x)

    def __invert__(self) -> Self:
        if self.dtype.is_float:
            raise DTypeError(f"~ (bitwise not) of a {self.dtype} tensor is not defined; it takes integers or bool")
        return self.logical_not() if self.dtype.is_bool else self._alu(Ops.XOR, self._const(-1))

    __hash__ = LazyTensor.__hash__  # tensors stay usable in sets and dicts (by identity) despite __eq__

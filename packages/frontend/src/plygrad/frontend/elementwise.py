"""Elementwise ops: arithmetic with PyTorch promotion and broadcasting, comparisons, math functions, casts.

The IR never promotes or broadcasts (docs/ir.md §3, §4.3): every ALU op takes operands of one dtype and one shape.
So each binary op here first picks the result dtype with `result_dtype` (Python scalars are weak), CASTs both sides
to it, and broadcasts both with RESHAPE + EXPAND. Functions the IR has no op for are built from the ones it has
(exp from EXP2, floor division from C's truncating IDIV/MOD, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Self

from plygrad.frontend.lazy import LazyTensor, Scalar
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

LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)
LOG10_2 = math.log10(2.0)
TAN_PI_8 = math.tan(math.pi / 8)
TAN_3PI_8 = math.tan(3 * math.pi / 8)

# Polynomial coefficients, highest power first (numbers from Cephes' single-precision atanf and erff/erfcf).
ATAN_POLY = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
ERF_T = (7.853861353153693e-5, -8.010193625184903e-4, 5.188327685732524e-3, -2.685381193529856e-2,
         1.128358514861418e-1, -3.761262582423300e-1, 1.128379165726710)
ERFC_P = (2.326819970068386e-2, -1.387039388740657e-1, 3.687424674597105e-1, -5.824733027278666e-1,
          6.210004621745983e-1, -4.944515323274145e-1, 3.404879937665872e-1, -2.741127028184656e-1,
          5.638259427386472e-1)
ERFC_R = (-1.047766399936249e1, 1.297719955372516e1, -7.495518717768503, 2.921019019210786,
          -1.015265279202700, 4.218463358204948e-1, -2.820767439740514e-1, 5.641895067754075e-1)
PIO2_PARTS = (1.5703125, 4.837512969970703125e-4, 7.54978995489188216e-8)  # Cephes' DP1..DP3 doubled
EXPM1_TAYLOR = tuple(1.0 / math.factorial(n) for n in range(10, 0, -1))  # (e^x - 1) / x = sum x^(n-1) / n!


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

    def logical_not(self) -> Self:
        x = self._cast_to(dtypes.bool)
        return x._alu(Ops.XOR, x._const(True))

    # ---- bitwise ops and shifts -------------------------------------------------------------------------------
    def _bitwise(self, op: Ops, other: Self | Scalar, reverse: bool = False) -> Self:
        x, y = self._operands(other, reverse=reverse, op=op.name)
        if x.dtype.is_float:
            raise DTypeError(f"{op.name} (bitwise) of {x.dtype} tensors is not defined; it takes integers or bool")
        return x._alu(op, y)

    def bitwise_and(self, other: Self | Scalar, reverse: bool = False) -> Self:
        return self._bitwise(Ops.AND, other, reverse)

    def bitwise_or(self, other: Self | Scalar, reverse: bool = False) -> Self:
        return self._bitwise(Ops.OR, other, reverse)

    def bitwise_xor(self, other: Self | Scalar, reverse: bool = False) -> Self:
        return self._bitwise(Ops.XOR, other, reverse)

    def bitwise_not(self) -> Self:
        """`~x`: every bit flipped on integers, logical not on bool."""
        if self.dtype.is_float:
            raise DTypeError(f"bitwise_not (~) of a {self.dtype} tensor is not defined; it takes integers or bool")
        return self.logical_not() if self.dtype.is_bool else self._alu(Ops.XOR, self._const(-1))

    def _shift(self, op: Ops, other: Self | Scalar, reverse: bool) -> Self:
        """SHL/SHR with PyTorch's answer for every shift amount: the IR defines only 0 <= y < bits, so amounts
        outside it give 0 (left) or the sign fill, -1 or 0 (right), as if shifted one bit at a time."""
        name = "lshift" if op is Ops.SHL else "rshift"
        x, y = self._operands(other, reverse=reverse, op=name)
        if not x.dtype.is_int:
            raise DTypeError(f"{name} of {x.dtype} tensors is not defined; shifts take integer tensors "
                             f"(shapes {x.shape} and {y.shape})")
        bits = x.dtype.bitsize
        if isinstance(other, int) and not reverse and 0 <= other < bits:
            return x._alu(op, y)
        valid = y.ge(0).logical_and(y.lt(bits))
        shifted = x._alu(op, valid.where(y, 0))
        if op is Ops.SHL or x.dtype.is_unsigned:
            return valid.where(shifted, 0)
        return valid.where(shifted, x._alu(Ops.SHR, x._const(bits - 1)))

    def lshift(self, other: Self | int, reverse: bool = False) -> Self:
        """`x << y` (bits shifted past the width are lost; negative or too large amounts give 0)."""
        return self._shift(Ops.SHL, other, reverse)

    def rshift(self, other: Self | int, reverse: bool = False) -> Self:
        """`x >> y`: arithmetic (sign-filling) on signed integers, logical on unsigned ones."""
        return self._shift(Ops.SHR, other, reverse)

    def bitcast(self, dtype: DTypeLike) -> Self:
        """The same bytes read as `dtype` (IR BITCAST); both dtypes must have one itemsize. No gradient flows."""
        dtype = to_dtype(dtype)
        if dtype is self.dtype:
            return self
        if dtype.itemsize != self.dtype.itemsize:
            raise DTypeError(f"bitcast of a {self.dtype} tensor of shape {self.shape} to {dtype}: itemsizes "
                             f"{self.dtype.itemsize} and {dtype.itemsize} differ; bitcast to a dtype of the same size")
        return self._new(UOp(Ops.BITCAST, dtype, (self.uop,)))

    # ---- building blocks of the math functions ----------------------------------------------------------------
    def _wide(self, fn: Callable[[Self], Self]) -> Self:
        """`fn` of the input as a float, computed in float32 for float16/bfloat16 and cast back (as PyTorch does):
        their 8 or 11 mantissa bits would otherwise compound rounding errors inside multi-step formulas."""
        x = self._float_input()
        if x.dtype.itemsize >= 4:
            return fn(x)
        return fn(x._cast_to(dtypes.float32))._cast_to(x.dtype)

    def _piecewise(self, cond: Self, when_true: Callable[[Self], Self], when_false: Callable[[Self], Self],
                   safe_true: float = 0.0, safe_false: float = 0.0) -> Self:
        """`when_true(x)` where `cond`, else `when_false(x)`. Each branch reads x only where it is chosen and a safe
        stand-in elsewhere: an inf or NaN in the branch not taken would otherwise turn its zero gradient into NaN
        (0 * inf), the classic trap of `where`."""
        inside = cond.where(self, safe_true)
        outside = cond.where(safe_false, self)
        return cond.where(when_true(inside), when_false(outside))

    def _sign_const(self) -> Self:
        """-1.0 where x < 0, else 1.0 (NaN included): a constant (no gradient) to fold odd functions onto x >= 0."""
        return self.lt(0).where(self._const(-1.0), 1.0)

    def _horner(self, coeffs: tuple[float, ...]) -> Self:
        """The polynomial coeffs[0]*x**n + ... + coeffs[n] at x."""
        acc = self._const(coeffs[0])
        for c in coeffs[1:]:
            acc = acc.mul(self).add(c)
        return acc

    # ---- exponentials and logarithms --------------------------------------------------------------------------
    def exp(self) -> Self:
        return self._wide(lambda x: x.mul(LOG2_E)._alu(Ops.EXP2))

    def exp2(self) -> Self:
        return self._wide(lambda x: x._alu(Ops.EXP2))

    def expm1(self) -> Self:
        """exp(x) - 1, accurate near 0 (a Taylor polynomial for |x| < 0.5, where exp(x) - 1 would cancel)."""
        def small(x: Self) -> Self:
            return x._horner(EXPM1_TAYLOR).mul(x)
        return self._wide(lambda x: x._piecewise(x.abs().lt(0.5), small, lambda y: y.exp().sub(1.0)))

    def log(self) -> Self:
        return self._wide(lambda x: x._alu(Ops.LOG2).mul(LN_2))

    def log2(self) -> Self:
        return self._wide(lambda x: x._alu(Ops.LOG2))

    def log10(self) -> Self:
        return self._wide(lambda x: x._alu(Ops.LOG2).mul(LOG10_2))

    def log1p(self) -> Self:
        """log(1 + x), accurate near 0: log(u) for u = 1 + x rounded, plus the first-order correction
        (x - (u - 1)) / u for that rounding. Outside (-1, inf) it is log(1 + x) itself (-inf, NaN, inf)."""
        def corrected(x: Self) -> Self:
            u = x.add(1.0)
            return u.log().sub(u.sub(1.0).sub(x).div(u))
        def plain(x: Self) -> Self:
            return x.add(1.0).log()
        return self._wide(lambda x: x._piecewise(x.gt(-1.0).logical_and(x.lt(math.inf)), corrected, plain))

    def sqrt(self) -> Self:
        return self._float_input()._alu(Ops.SQRT)

    def rsqrt(self) -> Self:
        return self.sqrt()._alu(Ops.RECIPROCAL)

    def reciprocal(self) -> Self:
        return self._float_input()._alu(Ops.RECIPROCAL)

    def logaddexp(self, other: Self | Scalar) -> Self:
        """log(exp(x) + exp(y)) without overflow: max(x, y) + log1p(exp(-|x - y|)); x + log 2 where x == y
        (which also keeps inf + inf and -inf + -inf from becoming NaN)."""
        x, y = self._operands(other, op="logaddexp")
        x, y = x._float_input(), y._float_input()
        same = x.eq(y)
        gap = same.where(0.0, x.sub(y))
        spread = gap.abs().neg().exp().log1p()
        return same.where(x.add(LN_2), x.maximum(y).add(spread))

    # ---- trigonometric and hyperbolic functions ---------------------------------------------------------------
    def sin(self) -> Self:
        return self._wide(lambda x: x._alu(Ops.SIN))

    def cos(self) -> Self:
        """cos from SIN after Cody-Waite reduction x = k pi/2 + r, |r| <= pi/4 (pi/2 split in three parts so k*part
        is exact): cos r, -sin r, -cos r or sin r by k mod 4, with cos r = 1 - 2 sin(r/2)^2 (no cancellation there).
        sin(pi/2 - x) would round pi/2 - x and lose every digit near the zeros of cos."""
        def fn(x: Self) -> Self:
            k = x.mul(2 / math.pi).round()
            r = x.sub(k.mul(PIO2_PARTS[0])).sub(k.mul(PIO2_PARTS[1])).sub(k.mul(PIO2_PARTS[2]))
            quadrant = k.sub(k.mul(0.25).floor().mul(4.0))
            s, h = r._alu(Ops.SIN), r.mul(0.5)._alu(Ops.SIN)
            c = h.mul(h).mul(-2.0).add(1.0)
            reduced = quadrant.eq(0).where(c, quadrant.eq(1).where(s.neg(), quadrant.eq(2).where(c.neg(), s)))
            half = x.mul(0.5)._alu(Ops.SIN)  # past 8192 the three parts stop being exact: the half-angle form
            return x.abs().lt(8192.0).where(reduced, half.mul(half).mul(-2.0).add(1.0))
        return self._wide(fn)

    def tan(self) -> Self:
        return self._wide(lambda x: x.sin().div(x.cos()))

    def atan(self) -> Self:
        """Cephes' atanf: fold onto [0, tan(pi/8)] with atan(x) = pi/2 + atan(-1/x) and pi/4 + atan((x-1)/(x+1)),
        then an odd polynomial (about 1 ulp in float32)."""
        def fn(x: Self) -> Self:
            sign = x._sign_const()
            ax = x.mul(sign)
            big, mid = ax.gt(TAN_3PI_8), ax.gt(TAN_PI_8)
            inverted = ax._piecewise(big, lambda t: t.reciprocal().neg(), lambda t: t, 1.0, 1.0)
            t = mid.logical_and(big.logical_not()).where(ax.sub(1.0).div(ax.add(1.0)), inverted)
            offset = big.where(ax._const(math.pi / 2), mid.where(ax._const(math.pi / 4), 0.0))
            z = t.mul(t)
            return offset.add(z._horner(ATAN_POLY).mul(z).mul(t).add(t)).mul(sign)
        return self._wide(fn)

    def asin(self) -> Self:
        """2 atan(x / (1 + sqrt((1-x)(1+x)))): accurate at both ends and with a finite gradient inside (-1, 1)."""
        return self._wide(lambda x: x.div(x.sub(1.0, reverse=True).mul(x.add(1.0)).sqrt().add(1.0)).atan().mul(2.0))

    def acos(self) -> Self:
        """2 atan(sqrt((1-x)/(1+x))): no cancellation near x = 1, where pi/2 - asin(x) would lose the digits."""
        return self._wide(lambda x: x.sub(1.0, reverse=True).div(x.add(1.0)).sqrt().atan().mul(2.0))

    def atan2(self, other: Self | Scalar) -> Self:
        """The angle of the point (x=other, y=self) in (-pi, pi], like torch.atan2(self, other)."""
        y, x = self._operands(other, op="atan2")
        y, x = y._float_input(), x._float_input()
        base = y.div(x.eq(0).where(1.0, x)).atan()
        half_turn = y.lt(0).where(y._const(-math.pi), math.pi)
        on_axis = y.gt(0).where(y._const(math.pi / 2), y.lt(0).where(y._const(-math.pi / 2), y.mul(0.0)))
        return x.gt(0).where(base, x.lt(0).where(base.add(half_turn), on_axis))

    def sinh(self) -> Self:
        return self._wide(lambda x: x.expm1().sub(x.neg().expm1()).mul(0.5))

    def cosh(self) -> Self:
        return self._wide(lambda x: x.exp().add(x.neg().exp()).mul(0.5))

    def tanh(self) -> Self:
        """tanh(|x|) = -e / (2 + e) with e = expm1(-2|x|), sign restored: never overflows (e lies in [-1, 0]),
        exact near 0, and the gradient 1 - tanh^2 holds at 0 too (|x| is built from `where`, not abs)."""
        def fn(x: Self) -> Self:
            positive = x.gt(0)
            e = positive.where(x.neg(), x).mul(2.0).expm1()
            magnitude = e.neg().div(e.add(2.0))
            return positive.where(magnitude, magnitude.neg())
        return self._wide(fn)

    def asinh(self) -> Self:
        """log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) (accurate near 0); log(2|x|) above 1e4, where x^2 would overflow."""
        def fn(x: Self) -> Self:
            sign = x._sign_const()
            ax = x.mul(sign)
            def small(t: Self) -> Self:
                sq = t.mul(t)
                return t.add(sq.div(sq.add(1.0).sqrt().add(1.0))).log1p()
            return ax._piecewise(ax.gt(1e4), lambda t: t.log().add(LN_2), small, 1.0, 0.0).mul(sign)
        return self._wide(fn)

    def acosh(self) -> Self:
        """log1p((x-1) + sqrt((x-1)(x+1))) (accurate near 1); log(2x) above 1e4."""
        def small(t: Self) -> Self:
            d = t.sub(1.0)
            return d.add(d.sqrt().mul(t.add(1.0).sqrt())).log1p()  # sqrt(d) is NaN below 1, as acosh is
        return self._wide(lambda x: x._piecewise(x.gt(1e4), lambda t: t.log().add(LN_2), small, 1e4, 1.0))

    def atanh(self) -> Self:
        """0.5 log1p(2|x| / (1 - |x|)), sign restored: accurate near 0 and near +-1, NaN outside [-1, 1]."""
        def fn(x: Self) -> Self:
            sign = x._sign_const()
            ax = x.mul(sign)
            return ax.mul(2.0).div(ax.sub(1.0, reverse=True)).log1p().mul(sign.mul(0.5))
        return self._wide(fn)

    def erf(self) -> Self:
        """Cephes' erff: x T(x^2) for |x| < 1, else 1 - erfc(|x|) with erfc(a) = exp(-a^2)/a P(1/a^2) (two
        polynomials, split at 2); |x| is capped at 4, past which erf is 1 to float32 precision."""
        def small(x: Self) -> Self:
            return x.mul(x)._horner(ERF_T).mul(x)
        def large(x: Self) -> Self:
            sign = x._sign_const()
            a = x.mul(sign).minimum(4.0)
            q = a.reciprocal()
            w = q.mul(q)
            p = a.lt(2.0).where(w._horner(ERFC_P), w._horner(ERFC_R))
            erfc = a.mul(a).neg().exp().mul(q).mul(p)
            return erfc.sub(1.0, reverse=True).mul(sign)
        return self._wide(lambda x: x._piecewise(x.abs().lt(1.0), small, large, 0.0, 1.0))

    # ---- rounding, sign and magnitude -------------------------------------------------------------------------
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

    def round(self) -> Self:
        """Round to nearest, halves to even (torch.round, NumPy's rint): 0.5 -> 0, 1.5 -> 2, -2.5 -> -2."""
        if not self.dtype.is_float:
            return self
        f = self.floor()
        frac = self.sub(f)  # exact: f <= x < f + 1
        odd = f.mul(0.5).floor().mul(2.0).ne(f)
        up = frac.gt(0.5).logical_or(frac.eq(0.5).logical_and(odd))
        return f.add(up._cast_to(self.dtype))

    def abs(self) -> Self:
        """|x|; its gradient is sign(x), 0 at 0 like PyTorch (x - x keeps NaN and gives +0.0 for -0.0)."""
        if self.dtype.is_bool or self.dtype.is_unsigned:
            return self
        if not self.dtype.is_float:
            return self._alu(Ops.MAX, self.neg())
        return self.gt(0).where(self, self.lt(0).where(self.neg(), self.sub(self)))

    def sign(self) -> Self:
        """-1, 0 or 1 in the input's dtype (0 for NaN, like PyTorch); zero gradient."""
        if self.dtype.is_bool:
            return self
        zero = self._const(0)
        positive = self.gt(zero)._cast_to(self.dtype)
        if self.dtype.is_unsigned:
            return positive
        return positive.sub(self.lt(zero)._cast_to(self.dtype))

    def _signbit(self) -> Self:
        """True where the sign bit is set (-0.0 and negative NaNs too), read through a BITCAST."""
        as_int = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[self.dtype.itemsize]
        return self.bitcast(as_int).lt(0)

    def copysign(self, other: Self | Scalar) -> Self:
        """|self| with the sign bit of `other` (including -0.0); the gradient is +-1, 0 where self is 0 (PyTorch)."""
        x, y = self._operands(other, op="copysign")
        x, y = x._float_input(), y._cast_to(dtypes.default_float) if not y.dtype.is_float else y
        if y.dtype is not x.dtype:
            x, y = x._cast_to(result_dtype(x.dtype, y.dtype)), y._cast_to(result_dtype(x.dtype, y.dtype))
        z = x.eq(0).where(x.mul(0.0), x)
        return x._signbit().ne(y._signbit()).where(z.neg(), z)

    def lerp(self, end: Self | Scalar, weight: Self | Scalar) -> Self:
        """self + weight * (end - self), evaluated from the nearer end (PyTorch's formula: exact at weight 1)."""
        x, e = self._operands(end, op="lerp")
        if isinstance(weight, LazyTensor):
            w, x = weight._operands(x, op="lerp")
            x, e = x._operands(e, op="lerp")
            w, x = w._operands(x, op="lerp")
        else:
            w = x._const(weight)
        diff = e.sub(x)
        return w.lt(0.5).where(x.add(w.mul(diff)), e.sub(diff.mul(w.sub(1.0, reverse=True))))

    def clamp(self, min_: Self | Scalar | None = None, max_: Self | Scalar | None = None) -> Self:
        """Limit values to [min_, max_] (each optional, tensor or scalar; max_ wins where min_ > max_). NaN stays
        NaN; the gradient passes where min_ <= x <= max_, bounds included (PyTorch)."""
        if min_ is None and max_ is None:
            raise ValueError(f"clamp of a tensor of shape {self.shape}: give min_, max_ or both")
        x = self
        if min_ is not None:
            x, lo = x._operands(min_, op="clamp")
            x = x.lt(lo).where(lo, x)
        if max_ is not None:
            x, hi = x._operands(max_, op="clamp")
            x = x.gt(hi).where(hi, x)
        return x

    def clip(self, min_: Self | Scalar | None = None, max_: Self | Scalar | None = None) -> Self:
        return self.clamp(min_, max_)

    # ---- classification ---------------------------------------------------------------------------------------
    def isnan(self) -> Self:
        return self.ne(self)

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Self:
        if not self.dtype.is_float:
            return self._const(False, dtypes.bool)
        return self.eq(math.inf).logical_and(detect_positive).logical_or(
            self.eq(-math.inf).logical_and(detect_negative))

    def isfinite(self) -> Self:
        if not self.dtype.is_float:
            return self._const(True, dtypes.bool)
        return self.isnan().logical_or(self.isinf()).logical_not()

    def isclose(self, other: Self | Scalar, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Self:
        """|self - other| <= atol + rtol * |other| where both are finite; equal values (infinities too) are close;
        NaNs are close to each other only with equal_nan."""
        x, y = self._operands(other, op="isclose")
        if x.dtype.is_bool:
            return x.eq(y)
        x, y = x._float_input(), y._float_input()
        near = x.sub(y).abs().le(y.abs().mul(rtol).add(atol)).logical_and(x.isfinite()).logical_and(y.isfinite())
        close = x.eq(y).logical_or(near)
        return close.logical_or(x.isnan().logical_and(y.isnan())) if equal_nan else close

    # ---- activations the lower layers need --------------------------------------------------------------------
    def relu(self) -> Self:
        """max(x, 0) with PyTorch's gradient 0 at 0; NaN stays NaN."""
        if self.dtype.is_bool:
            raise DTypeError("relu of a bool tensor is not defined; cast it to a number dtype first")
        return self.le(0).where(self._const(0), self)

    def sigmoid(self) -> Self:
        """1 / (1 + exp(-x)) for x > 0 and exp(x) / (1 + exp(x)) otherwise, both through e = exp(-|x|) in (0, 1]:
        no overflow in the value or the gradient at any x."""
        def fn(x: Self) -> Self:
            positive = x.gt(0)
            e = positive.where(x.neg(), x).exp()
            return positive.where(e.add(1.0).reciprocal(), e.div(e.add(1.0)))
        return self._wide(fn)

    def square(self) -> Self:
        return self.mul(self)

    def cast(self, dtype: DTypeLike) -> Self:
        """The values converted to `dtype` (a DType or its name, `"float16"`; floats to integers truncate toward
        zero)."""
        return self._cast_to(to_dtype(dtype))

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
    def __rand__(self, x: Self | Scalar) -> Self: return self.bitwise_and(x, True)
    def __or__(self, x: Self | Scalar) -> Self: return self.bitwise_or(x)
    def __ror__(self, x: Self | Scalar) -> Self: return self.bitwise_or(x, True)
    def __xor__(self, x: Self | Scalar) -> Self: return self.bitwise_xor(x)
    def __rxor__(self, x: Self | Scalar) -> Self: return self.bitwise_xor(x, True)
    def __lshift__(self, x: Self | int) -> Self: return self.lshift(x)
    def __rlshift__(self, x: Self | int) -> Self: return self.lshift(x, True)
    def __rshift__(self, x: Self | int) -> Self: return self.rshift(x)
    def __rrshift__(self, x: Self | int) -> Self: return self.rshift(x, True)
    def __invert__(self) -> Self: return self.bitwise_not()

    __hash__ = LazyTensor.__hash__  # tensors stay usable in sets and dicts (by identity) despite __eq__

"""Transcendental functions built from the IR's EXP2, LOG2, SIN and SQRT: exp, log, the trig and hyperbolic
families, erf, logaddexp.

The IR has only a few math ops (docs/ir.md §5); the rest are compositions with the accuracy PyTorch users expect:
range reductions (Cephes' split of pi/2 for tan and cos), polynomials for atan and erf (Cephes' single-precision
coefficients, evaluated by Horner's rule) and piecewise forms where one formula loses precision (expm1, log1p,
asinh near 0). Every function takes a tensor (`x`) and returns a new one; `Tensor` binds them as methods.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from plygrad.frontend import core, elementwise
from plygrad.frontend.composite import composite
from plygrad.frontend.lazy import Scalar, const_uop
from plygrad.ir import Ops, dtypes

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

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


def computed_wide(t: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """`fn` of the input as a float, computed in float32 for float16/bfloat16 and cast back (as PyTorch does):
    their 8 or 11 mantissa bits would otherwise compound rounding errors inside multi-step formulas."""
    x = core.float_input(t)
    if x.dtype.itemsize >= 4:
        return fn(x)
    return fn(x._cast_to(dtypes.float32))._cast_to(x.dtype)


def piecewise(x: Tensor, cond: Tensor, when_true: Callable[[Tensor], Tensor], when_false: Callable[[Tensor], Tensor],
              safe_true: float = 0.0, safe_false: float = 0.0) -> Tensor:
    """`when_true(x)` where `cond`, else `when_false(x)`. Each branch reads x only where it is chosen and a safe
    stand-in elsewhere: an inf or NaN in the branch not taken would otherwise turn its zero gradient into NaN
    (0 * inf), the classic trap of `where`."""
    inside = cond.where(x, safe_true)
    outside = cond.where(safe_false, x)
    return cond.where(when_true(inside), when_false(outside))


def _sign_const(x: Tensor) -> Tensor:
    """-1.0 where x < 0, else 1.0 (NaN included): a constant (no gradient) to fold odd functions onto x >= 0."""
    return x.lt(0).where(x._const(-1.0), 1.0)


def _horner(x: Tensor, coeffs: tuple[float, ...]) -> Tensor:
    """The polynomial coeffs[0]*x**n + ... + coeffs[n] at x: the graph of `acc.mul(x).add(c)` from the constant
    coeffs[0], built as one chain of nodes and wrapped in one Tensor (gradients are taken through the graph, not
    the Tensors: erf's three polynomials made ~50 Tensors per call). Under no_grad each op wraps its result in a
    gradient stop (lazy.py), so that graph is built op by op as before; so is a constant (no op reads x)."""
    if type(x).no_grad or len(coeffs) == 1:
        acc = x._const(coeffs[0])
        for c in coeffs[1:]:
            acc = acc.mul(x).add(c)
        return acc
    dtype, shape, node = x.dtype, x.shape, x.uop
    chain = const_uop(dtype, coeffs[0], shape)
    for c in coeffs[1:]:
        chain = chain.alu(Ops.MUL, node).alu(Ops.ADD, const_uop(dtype, c, shape))
    return x._new(chain)


def exp(t: Tensor) -> Tensor:
    return computed_wide(t, lambda x: core.alu(x.mul(LOG2_E), Ops.EXP2))


def exp2(t: Tensor) -> Tensor:
    return computed_wide(t, lambda x: core.alu(x, Ops.EXP2))


def expm1(t: Tensor) -> Tensor:
    """exp(x) - 1, accurate near 0 (a Taylor polynomial for |x| < 0.5, where exp(x) - 1 would cancel)."""
    def small(x: Tensor) -> Tensor:
        return _horner(x, EXPM1_TAYLOR).mul(x)
    return computed_wide(t, lambda x: piecewise(x, x.abs().lt(0.5), small, lambda y: y.exp().sub(1.0)))


def log(t: Tensor) -> Tensor:
    return computed_wide(t, lambda x: core.alu(x, Ops.LOG2).mul(LN_2))


def log2(t: Tensor) -> Tensor:
    return computed_wide(t, lambda x: core.alu(x, Ops.LOG2))


def log10(t: Tensor) -> Tensor:
    return computed_wide(t, lambda x: core.alu(x, Ops.LOG2).mul(LOG10_2))


def log1p(t: Tensor) -> Tensor:
    """log(1 + x), accurate near 0: log(u) for u = 1 + x rounded, plus the first-order correction
    (x - (u - 1)) / u for that rounding. Outside (-1, inf) it is log(1 + x) itself (-inf, NaN, inf)."""
    def corrected(x: Tensor) -> Tensor:
        u = x.add(1.0)
        return u.log().sub(u.sub(1.0).sub(x).div(u))
    def plain(x: Tensor) -> Tensor:
        return x.add(1.0).log()
    return computed_wide(t, lambda x: piecewise(x, x.gt(-1.0).logical_and(x.lt(math.inf)), corrected, plain))


def sqrt(x: Tensor) -> Tensor:
    return core.alu(core.float_input(x), Ops.SQRT)


def rsqrt(x: Tensor) -> Tensor:
    return core.alu(x.sqrt(), Ops.RECIPROCAL)


def logaddexp(t: Tensor, other: Tensor | Scalar) -> Tensor:
    """log(exp(x) + exp(y)) without overflow: max(x, y) + log1p(exp(-|x - y|)); x + log 2 where x == y
    (which also keeps inf + inf and -inf + -inf from becoming NaN)."""
    x, y = elementwise.operands(t, other, op="logaddexp")
    x, y = core.float_input(x), core.float_input(y)
    same = x.eq(y)
    gap = same.where(0.0, x.sub(y))
    spread = gap.abs().neg().exp().log1p()
    return same.where(x.add(LN_2), x.maximum(y).add(spread))


def sin(t: Tensor) -> Tensor:
    return computed_wide(t, lambda x: core.alu(x, Ops.SIN))


def cos(t: Tensor) -> Tensor:
    """cos from SIN after Cody-Waite reduction x = k pi/2 + r, |r| <= pi/4 (pi/2 split in three parts so k*part
    is exact): cos r, -sin r, -cos r or sin r by k mod 4, with cos r = 1 - 2 sin(r/2)^2 (no cancellation there).
    sin(pi/2 - x) would round pi/2 - x and lose every digit near the zeros of cos."""
    def fn(x: Tensor) -> Tensor:
        k = x.mul(2 / math.pi).round()
        r = x.sub(k.mul(PIO2_PARTS[0])).sub(k.mul(PIO2_PARTS[1])).sub(k.mul(PIO2_PARTS[2]))
        quadrant = k.sub(k.mul(0.25).floor().mul(4.0))
        s, h = core.alu(r, Ops.SIN), core.alu(r.mul(0.5), Ops.SIN)
        c = h.mul(h).mul(-2.0).add(1.0)
        reduced = quadrant.eq(0).where(c, quadrant.eq(1).where(s.neg(), quadrant.eq(2).where(c.neg(), s)))
        half = core.alu(x.mul(0.5), Ops.SIN)  # past 8192 the three parts stop being exact: the half-angle form
        return x.abs().lt(8192.0).where(reduced, half.mul(half).mul(-2.0).add(1.0))
    return computed_wide(t, fn)


def tan(t: Tensor) -> Tensor:
    return computed_wide(t, lambda x: x.sin().div(x.cos()))


def atan(tensor: Tensor) -> Tensor:
    """Cephes' atanf: fold onto [0, tan(pi/8)] with atan(x) = pi/2 + atan(-1/x) and pi/4 + atan((x-1)/(x+1)),
    then an odd polynomial (about 1 ulp in float32)."""
    def fn(x: Tensor) -> Tensor:
        sign = _sign_const(x)
        ax = x.mul(sign)
        big, mid = ax.gt(TAN_3PI_8), ax.gt(TAN_PI_8)
        inverted = piecewise(ax, big, lambda t: t.reciprocal().neg(), lambda t: t, 1.0, 1.0)
        t = mid.logical_and(big.logical_not()).where(ax.sub(1.0).div(ax.add(1.0)), inverted)
        offset = big.where(ax._const(math.pi / 2), mid.where(ax._const(math.pi / 4), 0.0))
        z = t.mul(t)
        return offset.add(_horner(z, ATAN_POLY).mul(z).mul(t).add(t)).mul(sign)
    return computed_wide(tensor, fn)


def asin(t: Tensor) -> Tensor:
    """2 atan(x / (1 + sqrt((1-x)(1+x)))): accurate at both ends and with a finite gradient inside (-1, 1)."""
    return computed_wide(t, lambda x: x.div(x.sub(1.0, reverse=True).mul(x.add(1.0)).sqrt().add(1.0)).atan().mul(2.0))


def acos(t: Tensor) -> Tensor:
    """2 atan(sqrt((1-x)/(1+x))): no cancellation near x = 1, where pi/2 - asin(x) would lose the digits."""
    return computed_wide(t, lambda x: x.sub(1.0, reverse=True).div(x.add(1.0)).sqrt().atan().mul(2.0))


def atan2(t: Tensor, other: Tensor | Scalar) -> Tensor:
    """The angle of the point (x=other, y=self) in (-pi, pi], like torch.atan2(self, other)."""
    y, x = elementwise.operands(t, other, op="atan2")
    y, x = core.float_input(y), core.float_input(x)
    base = y.div(x.eq(0).where(1.0, x)).atan()
    half_turn = y.lt(0).where(y._const(-math.pi), math.pi)
    on_axis = y.gt(0).where(y._const(math.pi / 2), y.lt(0).where(y._const(-math.pi / 2), y.mul(0.0)))
    return x.gt(0).where(base, x.lt(0).where(base.add(half_turn), on_axis))


def sinh(t: Tensor) -> Tensor:
    return computed_wide(t, lambda x: x.expm1().sub(x.neg().expm1()).mul(0.5))


def cosh(t: Tensor) -> Tensor:
    return computed_wide(t, lambda x: x.exp().add(x.neg().exp()).mul(0.5))


def tanh(t: Tensor) -> Tensor:
    """tanh(|x|) = -e / (2 + e) with e = expm1(-2|x|), sign restored: never overflows (e lies in [-1, 0]),
    exact near 0, and the gradient 1 - tanh^2 holds at 0 too (|x| is built from `where`, not abs)."""
    def fn(x: Tensor) -> Tensor:
        positive = x.gt(0)
        e = positive.where(x.neg(), x).mul(2.0).expm1()
        magnitude = e.neg().div(e.add(2.0))
        return positive.where(magnitude, magnitude.neg())
    return computed_wide(t, fn)


def asinh(tensor: Tensor) -> Tensor:
    """log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) (accurate near 0); log(2|x|) above 1e4, where x^2 would overflow."""
    def fn(x: Tensor) -> Tensor:
        sign = _sign_const(x)
        ax = x.mul(sign)
        def small(t: Tensor) -> Tensor:
            sq = t.mul(t)
            return t.add(sq.div(sq.add(1.0).sqrt().add(1.0))).log1p()
        return piecewise(ax, ax.gt(1e4), lambda t: t.log().add(LN_2), small, 1.0, 0.0).mul(sign)
    return computed_wide(tensor, fn)


def acosh(tensor: Tensor) -> Tensor:
    """log1p((x-1) + sqrt((x-1)(x+1))) (accurate near 1); log(2x) above 1e4."""
    def small(t: Tensor) -> Tensor:
        d = t.sub(1.0)
        return d.add(d.sqrt().mul(t.add(1.0).sqrt())).log1p()  # sqrt(d) is NaN below 1, as acosh is
    return computed_wide(tensor, lambda x: piecewise(x, x.gt(1e4), lambda t: t.log().add(LN_2), small, 1e4, 1.0))


def atanh(t: Tensor) -> Tensor:
    """0.5 log1p(2|x| / (1 - |x|)), sign restored: accurate near 0 and near +-1, NaN outside [-1, 1]."""
    def fn(x: Tensor) -> Tensor:
        sign = _sign_const(x)
        ax = x.mul(sign)
        return ax.mul(2.0).div(ax.sub(1.0, reverse=True)).log1p().mul(sign.mul(0.5))
    return computed_wide(t, fn)


@composite()
def erf(t: Tensor) -> Tensor:
    """Cephes' erff: x T(x^2) for |x| < 1, else 1 - erfc(|x|) with erfc(a) = exp(-a^2)/a P(1/a^2) (two
    polynomials, split at 2); |x| is capped at 4, past which erf is 1 to float32 precision."""
    def small(x: Tensor) -> Tensor:
        return _horner(x.mul(x), ERF_T).mul(x)
    def large(x: Tensor) -> Tensor:
        sign = _sign_const(x)
        a = x.mul(sign).minimum(4.0)
        q = a.reciprocal()
        w = q.mul(q)
        p = a.lt(2.0).where(_horner(w, ERFC_P), _horner(w, ERFC_R))
        erfc = a.mul(a).neg().exp().mul(q).mul(p)
        return erfc.sub(1.0, reverse=True).mul(sign)
    return computed_wide(t, lambda x: piecewise(x, x.abs().lt(1.0), small, large, 0.0, 1.0))

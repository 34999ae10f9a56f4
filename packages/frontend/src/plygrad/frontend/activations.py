"""Activation functions: relu6, leaky_relu, elu, gelu, silu, mish, softplus, hardswish, softmin, ...

Each is built from elementwise and transcendental functions, so its gradient is whatever autograd derives from those
pieces. Where PyTorch's gradient at a kink differs from what a formula would give (hardtanh passes no gradient at its
bounds, hardswish has slope 0 at -3), the formula is picked with `where` so that both value and gradient match;
branches that can overflow go through `_piecewise`, which keeps inf out of the branch not taken.
"""


from __future__ import annotations

import math
from typing import TYPE_CHECKING

from plygrad.frontend import core, transcendental
from plygrad.frontend.composite import composite
from plygrad.frontend.errors import ArgumentValueError
from plygrad.ir import DTypeError

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

SELU_ALPHA = 1.6732632423543772848170429916717


SELU_SCALE = 1.0507009873554804934193349852946


SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def hardtanh(t: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor:
    """x limited to [min_val, max_val]; unlike clamp, no gradient at the bounds themselves (PyTorch)."""
    x = core.float_input(t)
    return x.le(min_val).where(x._const(min_val), x.ge(max_val).where(x._const(max_val), x))


def relu6(x: Tensor) -> Tensor:
    return x.hardtanh(0, 6)


def leaky_relu(t: Tensor, neg_slope: float = 0.01) -> Tensor:
    """x for x > 0, neg_slope * x otherwise (the slope at 0 is neg_slope, like PyTorch)."""
    x = core.float_input(t)
    return x.gt(0).where(x, x.mul(neg_slope))


def elu(tensor: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""
    x = core.float_input(tensor)
    return transcendental.piecewise(x, x.gt(0), lambda t: t, lambda t: t.expm1().mul(alpha))


def celu(tensor: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha * (exp(x / alpha) - 1) otherwise."""
    x = core.float_input(tensor)
    return transcendental.piecewise(x, x.gt(0), lambda t: t, lambda t: t.div(alpha).expm1().mul(alpha))


def selu(x: Tensor, alpha: float = SELU_ALPHA, gamma: float = SELU_SCALE) -> Tensor:
    """gamma * elu(x, alpha), with PyTorch's full-precision constants as the defaults."""
    return x.elu(alpha).mul(gamma)


@composite()
def gelu(t: Tensor, approximate: str = "tanh") -> Tensor:
    """x * Phi(x). `approximate="tanh"` (tinygrad's default) is 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
    PyTorch's `approximate='tanh'`; `"none"` is the exact 0.5 x (1 + erf(x / sqrt 2)), PyTorch's default."""
    x = core.float_input(t)
    if approximate == "tanh":
        inner = x.mul(x).mul(0.044715).add(1.0).mul(x).mul(SQRT_2_OVER_PI)
        return x.mul(0.5).mul(inner.tanh().add(1.0))
    if approximate in ("none", "erf"):
        return x.mul(0.5).mul(x.mul(1 / math.sqrt(2)).erf().add(1.0))
    raise ArgumentValueError(f"gelu: approximate={approximate!r} is not supported; use 'tanh' or 'none'")


def quick_gelu(t: Tensor) -> Tensor:
    """x * sigmoid(1.702 x), the fast GELU of CLIP."""
    x = core.float_input(t)
    return x.mul(x.mul(1.702).sigmoid())


def hardsigmoid(x: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
    """alpha * x + beta limited to [0, 1]: PyTorch's relu6(x + 3) / 6 with the defaults."""
    return core.float_input(x).mul(alpha).add(beta).hardtanh(0, 1)


def hardswish(t: Tensor) -> Tensor:
    """x * relu6(x + 3) / 6, written per piece so the slopes at -3 and 3 are PyTorch's one-sided ones (0 and 1);
    x * 0 below -3 keeps PyTorch's NaN at -inf."""
    x = core.float_input(t)
    middle = x.mul(x.add(3.0)).mul(1 / 6)
    return x.le(-3.0).where(x.mul(0.0), x.ge(3.0).where(x, middle))


def silu(t: Tensor) -> Tensor:
    """x * sigmoid(x)."""
    x = core.float_input(t)
    return x.mul(x.sigmoid())


def swish(x: Tensor) -> Tensor:
    return x.silu()


def softplus(t: Tensor, beta: float = 1.0) -> Tensor:
    """log(1 + exp(beta x)) / beta as max(beta x, 0) + log1p(exp(-|beta x|)), the max and |.| built from
    `where` on one comparison: no overflow, and the gradient sigmoid(beta x) holds at 0 too."""
    x = core.float_input(t)
    bx = x.mul(beta)
    positive = bx.gt(0)
    tail = positive.where(bx.neg(), bx).exp().log1p()
    return positive.where(bx, 0.0).add(tail).div(beta)


def mish(t: Tensor) -> Tensor:
    """x * tanh(softplus(x))."""
    x = core.float_input(t)
    return x.mul(x.softplus().tanh())


def softsign(t: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    x = core.float_input(t)
    return x.div(x.abs().add(1.0))


def logsigmoid(x: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), finite for every finite x."""
    return core.float_input(x).neg().softplus().neg()


def softmin(x: Tensor, axis: int = -1) -> Tensor:
    """softmax(-x) over `axis`."""
    return core.float_input(x).neg().softmax(axis)


def relu(x: Tensor) -> Tensor:
    """max(x, 0) with PyTorch's gradient 0 at 0; NaN stays NaN."""
    if x.dtype.is_bool:
        raise DTypeError("relu of a bool tensor is not defined; cast it to a number dtype first")
    return x.le(0).where(x._const(0), x)


def sigmoid(t: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) for x > 0 and exp(x) / (1 + exp(x)) otherwise, both through e = exp(-|x|) in (0, 1]:
    no overflow in the value or the gradient at any x."""
    def fn(x: Tensor) -> Tensor:
        positive = x.gt(0)
        e = positive.where(x.neg(), x).exp()
        return positive.where(e.add(1.0).reciprocal(), e.div(e.add(1.0)))
    return transcendental.computed_wide(t, fn)

"""Activation functions: relu6, leaky_relu, elu, gelu, silu, mish, softplus, hardswish, softmin, ...

Each is built from the elementwise layer's functions, so its gradient is whatever autograd derives from those
pieces. Where PyTorch's gradient at a kink differs from what a formula would give (hardtanh passes no gradient at its
bounds, hardswish has slope 0 at -3), the formula is picked with `where` so that both value and gradient match;
branches that can overflow go through `_piecewise`, which keeps inf out of the branch not taken.
"""

from __future__ import annotations

import math
from typing import Self

from plygrad.frontend.indexing import IndexingOps

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


class ActivationOps(IndexingOps):
    """Activation functions."""

    __slots__ = ()

    def hardtanh(self, min_val: float = -1, max_val: float = 1) -> Self:
        """x limited to [min_val, max_val]; unlike clamp, no gradient at the bounds themselves (PyTorch)."""
        x = self._float_input()
        return x.le(min_val).where(x._const(min_val), x.ge(max_val).where(x._const(max_val), x))

    def relu6(self) -> Self:
        return self.hardtanh(0, 6)

    def leaky_relu(self, neg_slope: float = 0.01) -> Self:
        """x for x > 0, neg_slope * x otherwise (the slope at 0 is neg_slope, like PyTorch)."""
        x = self._float_input()
        return x.gt(0).where(x, x.mul(neg_slope))

    def elu(self, alpha: float = 1.0) -> Self:
        """x for x > 0, alpha * (exp(x) - 1) otherwise."""
        x = self._float_input()
        return x._piecewise(x.gt(0), lambda t: t, lambda t: t.expm1().mul(alpha))

    def celu(self, alpha: float = 1.0) -> Self:
        """x for x > 0, alpha * (exp(x / alpha) - 1) otherwise."""
        x = self._float_input()
        return x._piecewise(x.gt(0), lambda t: t, lambda t: t.div(alpha).expm1().mul(alpha))

    def selu(self, alpha: float = SELU_ALPHA, gamma: float = SELU_SCALE) -> Self:
        """gamma * elu(x, alpha), with PyTorch's full-precision constants as the defaults."""
        return self.elu(alpha).mul(gamma)

    def gelu(self, approximate: str = "tanh") -> Self:
        """x * Phi(x). `approximate="tanh"` (tinygrad's default) is 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
        PyTorch's `approximate='tanh'`; `"none"` is the exact 0.5 x (1 + erf(x / sqrt 2)), PyTorch's default."""
        x = self._float_input()
        if approximate == "tanh":
            inner = x.mul(x).mul(0.044715).add(1.0).mul(x).mul(SQRT_2_OVER_PI)
            return x.mul(0.5).mul(inner.tanh().add(1.0))
        if approximate in ("none", "erf"):
            return x.mul(0.5).mul(x.mul(1 / math.sqrt(2)).erf().add(1.0))
        raise ValueError(f"gelu: approximate={approximate!r} is not supported; use 'tanh' or 'none'")

    def quick_gelu(self) -> Self:
        """x * sigmoid(1.702 x), the fast GELU of CLIP."""
        x = self._float_input()
        return x.mul(x.mul(1.702).sigmoid())

    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Self:
        """alpha * x + beta limited to [0, 1]: PyTorch's relu6(x + 3) / 6 with the defaults."""
        return self._float_input().mul(alpha).add(beta).hardtanh(0, 1)

    def hardswish(self) -> Self:
        """x * relu6(x + 3) / 6, written per piece so the slopes at -3 and 3 are PyTorch's one-sided ones (0 and 1);
        x * 0 below -3 keeps PyTorch's NaN at -inf."""
        x = self._float_input()
        middle = x.mul(x.add(3.0)).mul(1 / 6)
        return x.le(-3.0).where(x.mul(0.0), x.ge(3.0).where(x, middle))

    def silu(self) -> Self:
        """x * sigmoid(x)."""
        x = self._float_input()
        return x.mul(x.sigmoid())

    def swish(self) -> Self:
        return self.silu()

    def softplus(self, beta: float = 1.0) -> Self:
        """log(1 + exp(beta x)) / beta as max(beta x, 0) + log1p(exp(-|beta x|)), the max and |.| built from
        `where` on one comparison: no overflow, and the gradient sigmoid(beta x) holds at 0 too."""
        x = self._float_input()
        bx = x.mul(beta)
        positive = bx.gt(0)
        tail = positive.where(bx.neg(), bx).exp().log1p()
        return positive.where(bx, 0.0).add(tail).div(beta)

    def mish(self) -> Self:
        """x * tanh(softplus(x))."""
        x = self._float_input()
        return x.mul(x.softplus().tanh())

    def softsign(self) -> Self:
        """x / (1 + |x|)."""
        x = self._float_input()
        return x.div(x.abs().add(1.0))

    def logsigmoid(self) -> Self:
        """log(sigmoid(x)) = -softplus(-x), finite for every finite x."""
        return self._float_input().neg().softplus().neg()

    def softmin(self, axis: int = -1) -> Self:
        """softmax(-x) over `axis`."""
        return self._float_input().neg().softmax(axis)

    def allclose(self, other: Self, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
        """Are all elements close (`isclose`)? A Python bool, like torch.allclose (this realizes both tensors)."""
        close = self.isclose(other, rtol=rtol, atol=atol, equal_nan=equal_nan)
        if close.numel() == 0:
            return True
        return bool(close.flatten().min(0))

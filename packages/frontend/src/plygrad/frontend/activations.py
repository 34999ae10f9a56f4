"""Activation functions: relu6, leaky_relu, elu, gelu, silu, mish, softplus, hardswish, softmin, ..."""

from __future__ import annotations

from plygrad.frontend.indexing import IndexingOps


class ActivationOps(IndexingOps):
    """Activation functions."""

    __slots__ = ()

"""Neural-network ops on tensors: linear, einsum, convolutions, pooling, interpolation, normalization,
attention, dropout and losses."""

from __future__ import annotations

from plygrad.frontend.activations import ActivationOps


class NNOps(ActivationOps):
    """Neural-network ops on tensors."""

    __slots__ = ()

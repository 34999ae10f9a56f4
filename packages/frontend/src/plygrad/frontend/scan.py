"""Statistics, logical reductions, arg-reductions and scans: var/std, any/all, argmax/argmin, logsumexp,
cumsum/cumprod/cummax, sort/argsort/topk."""

from __future__ import annotations

from plygrad.frontend.reduce import ReduceOps


class ScanOps(ReduceOps):
    """Statistics, logical reductions, arg-reductions and scans."""

    __slots__ = ()

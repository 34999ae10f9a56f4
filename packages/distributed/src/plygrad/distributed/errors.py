"""plygrad.distributed's exception: each message names the collective, its sequence number and the rank."""

from __future__ import annotations

from plygrad.runtime.collectives import CollectiveError


class DistributedError(CollectiveError):
    """A job cannot go on: mpi4py is missing, a collective timed out (a rank died or hangs), the ranks called
    different collectives or passed different shapes or dtypes, or the launch environment contradicts itself."""

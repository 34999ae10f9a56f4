"""plygrad.distributed's exception: each message names the collective, its sequence number and the rank."""

from __future__ import annotations

from plygrad.runtime.collectives import CollectiveError


class DistributedError(CollectiveError):
    """A job cannot go on: mpi4py is missing, a collective timed out (a rank died or hangs), the ranks called
    different collectives or passed different shapes or dtypes, or the launch environment contradicts itself."""


def rank_prefixed(rank: int, text: str) -> str:
    """`text` with every line prefixed `[rank k] `, as a failing rank reports to the job's shared stderr."""
    return "".join(f"[rank {rank}] {line}\n" for line in text.rstrip("\n").splitlines())

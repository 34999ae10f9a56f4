"""Which process of the job this is: `init()`, `rank()`, `world_size()`, `local_rank()`.

A launcher says it in the environment: torchrun-style `RANK`/`WORLD_SIZE`/`LOCAL_RANK`, MPICH's `PMI_RANK`/
`PMI_SIZE`/`MPI_LOCALRANKID`, Open MPI's `OMPI_COMM_WORLD_*`, Slurm's `SLURM_PROCID`/`SLURM_NTASKS`/`SLURM_LOCALID`.
`init()` opens the collective provider (plygrad.runtime.collectives: `mpi` under an MPI launcher, else the world of
one, no MPI needed) and checks that what the environment says agrees with what the provider found.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Final

from plygrad.distributed.errors import DistributedError
from plygrad.runtime.collectives import CollectiveProvider, get_provider

# (rank, world size, local rank) variables of each launcher, in the order they are trusted
LAUNCHER_VARIABLES: Final = (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                             ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
                             ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                             ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))


@dataclass(frozen=True)
class World:
    """This process's place in the job and the provider it meets the others through."""

    rank: int
    world_size: int
    local_rank: int
    provider: CollectiveProvider


_WORLD: World | None = None
_LOCK = threading.Lock()


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise DistributedError(f"{name}={raw!r} is not an integer (a launcher sets it to this process's rank or "
                               "the job's size)") from None


def _from_environment() -> tuple[str, int, int, int] | None:
    """(the variables' names, rank, world size, local rank) from the first launcher that set its variables."""
    for rank_name, size_name, local_name in LAUNCHER_VARIABLES:
        rank, size = _env_int(rank_name), _env_int(size_name)
        if rank is not None and size is not None:
            local = _env_int(local_name)
            return f"{rank_name}/{size_name}", rank, size, rank if local is None else local
    return None


def init() -> World:
    """Join the job (once per process; later calls return the same World)."""
    global _WORLD  # noqa: PLW0603 (the process's one membership in its job)
    with _LOCK:
        if _WORLD is not None:
            return _WORLD
        provider = get_provider()
        found = _from_environment()
        local = 0
        if found is not None:
            names, rank, size, local = found
            if (rank, size) != (provider.rank, provider.world_size):
                raise DistributedError(
                    f"the environment says rank {rank} of {size} ({names}), but the {provider.name!r} collective "
                    f"provider is rank {provider.rank} of {provider.world_size}; start the job with "
                    "`python -m plygrad.distributed.run -n N script.py` (or mpiexec), or set PLYGRAD_COLLECTIVES")
        _WORLD = World(provider.rank, provider.world_size, local, provider)
        return _WORLD


def rank() -> int:
    """This process's rank, 0..world_size()-1 (joining the job first if needed)."""
    return init().rank


def world_size() -> int:
    return init().world_size


def local_rank() -> int:
    """This process's index among the job's processes on its machine (which GPU it should take)."""
    return init().local_rank


def reset() -> None:
    """Forget the membership (tests): the next call joins again through whatever provider is chosen then."""
    global _WORLD  # noqa: PLW0603
    with _LOCK:
        _WORLD = None

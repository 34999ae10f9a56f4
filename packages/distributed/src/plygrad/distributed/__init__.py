"""plygrad.distributed: plygrad across processes (docs/distributed.md).

    # python -m plygrad.distributed.run -n 4 train.py
    from plygrad import distributed as dist
    dist.init()
    total = dist.all_reduce(Tensor([float(dist.rank())]))       # 0 + 1 + 2 + 3 on every rank
    dp = dist.DataParallel(model)                                # rank 0's parameters everywhere
    loss.backward(); dp.sync_gradients(); opt.step()             # gradients averaged over the ranks

Collectives run through a `plygrad.collectives` provider (plygrad.runtime.collectives): `mpi` from this package
under an MPI launcher, else the built-in world of one, where every collective is the identity and no MPI is needed.
"""

from plygrad.distributed.config import PLYGRAD_DIST_TIMEOUT
from plygrad.distributed.data_parallel import DataParallel
from plygrad.distributed.errors import DistributedError
from plygrad.distributed.ops import all_gather, all_reduce, all_reduce_, barrier, broadcast
from plygrad.distributed.world import World, init, local_rank, rank, world_size
from plygrad.runtime.collectives import ReduceOp

__all__ = [
    "PLYGRAD_DIST_TIMEOUT",
    "DataParallel",
    "DistributedError",
    "ReduceOp",
    "World",
    "all_gather",
    "all_reduce",
    "all_reduce_",
    "barrier",
    "broadcast",
    "init",
    "local_rank",
    "rank",
    "world_size",
]

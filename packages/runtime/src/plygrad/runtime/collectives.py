"""Collective providers: how the processes of one job reduce, broadcast and gather host buffers (docs/design.md §4).

A `CollectiveProvider` is one process's communicator (its `rank` among `world_size`): `all_reduce`, `broadcast`,
`all_gather` and `barrier` on host memory (a writable `memoryview` and the plygrad.ir `DType` of its elements), and
`abort`, which ends the whole job. Providers are plugins found like backends (discovery.py): the entry-point group
`plygrad.collectives` maps a name to a factory `() -> CollectiveProvider`, called once per process. The built-in
`local` provider is the world of one (every collective is the identity); `mpi` comes with plygrad-distributed.
`PLYGRAD_COLLECTIVES` chooses one; unset, it is `mpi` under an MPI launcher, else `local`. docs/distributed.md
explains the model and how to write a provider.
"""

from __future__ import annotations

import enum
import os
import sys
import threading
from abc import ABC, abstractmethod
from typing import Final, NoReturn

from plygrad.ir.dtype import DType, dtypes
from plygrad.ir.settings import StrSetting
from plygrad.runtime import discovery
from plygrad.runtime.errors import RuntimeLayerError

COLLECTIVES: Final = "plygrad.collectives"
LOCAL: Final = "local"

PLYGRAD_COLLECTIVES: Final = StrSetting("PLYGRAD_COLLECTIVES", "", "name of the plygrad.collectives provider the "
                                        "processes of a job meet through ('local': a world of one; 'mpi': "
                                        "plygrad-distributed[mpi]); unset: 'mpi' under an MPI launcher, else 'local'")
SETTINGS: Final = (PLYGRAD_COLLECTIVES,)

# variables an MPI launcher sets in every rank: MPICH's hydra and Intel MPI (PMI), Open MPI, Slurm's srun --mpi=pmix
MPI_LAUNCHER_VARIABLES: Final = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


class CollectiveError(RuntimeLayerError):
    """A collective provider is unknown, failed to load, or a collective was called with arguments it cannot take."""


class ReduceOp(enum.Enum):
    """How `all_reduce` combines the ranks' values, element by element. MEAN is the SUM divided by world_size (for
    floating-point dtypes only: the mean of integers is not an integer)."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"
    MEAN = "mean"


class CollectiveProvider(ABC):
    """One process's communicator with the others of its job.

    Every method is collective: each rank calls it, in the same order, with buffers of the same size and dtype
    (broadcast: the same root). Buffers are host memory: `memoryview`s of C-contiguous bytes, writable where the
    result lands. `check_*` below are the argument checks every provider runs first, so a wrong call raises the
    same `CollectiveError` whichever provider is installed.
    """

    name: str = "?"

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's index in the job, 0..world_size-1."""

    @property
    @abstractmethod
    def world_size(self) -> int:
        """How many processes the job has."""

    @abstractmethod
    def all_reduce(self, buf: memoryview, dtype: DType, op: ReduceOp, shape: tuple[int, ...] | None = None) -> None:
        """Replace `buf` on every rank by the element-wise `op` over every rank's `buf` (elements of `dtype`).
        `shape` is the array's logical shape, for checks and messages; None: one dimension."""

    @abstractmethod
    def broadcast(self, buf: memoryview, dtype: DType, root: int, shape: tuple[int, ...] | None = None) -> None:
        """Replace `buf` on every rank by rank `root`'s `buf`."""

    @abstractmethod
    def all_gather(self, send: memoryview, recv: memoryview, dtype: DType,
                   shape: tuple[int, ...] | None = None) -> None:
        """Fill `recv` (world_size times `send`'s size) with every rank's `send`, rank 0's first."""

    @abstractmethod
    def barrier(self) -> None:
        """Return on each rank only once every rank has called it."""

    @abstractmethod
    def abort(self, code: int = 1) -> NoReturn:
        """End every process of the job now with exit status `code` (fail-stop: the others must not hang)."""

    def close(self) -> None:  # noqa: B027 (an optional hook: most providers have nothing to release)
        """Release what the provider holds (called at most once, at interpreter exit or `reset`)."""

    # ---- the checks every provider runs first -----------------------------------------------------------------
    @staticmethod
    def check_buffer(what: str, buf: memoryview, dtype: DType, *, writable: bool) -> None:
        """`buf` is C-contiguous, holds whole elements of `dtype` and is writable when the result lands in it."""
        if not isinstance(buf, memoryview):
            raise CollectiveError(f"{what}: expected a memoryview of host memory, got {type(buf).__name__}")
        if not buf.c_contiguous:
            raise CollectiveError(f"{what}: the buffer is not C-contiguous; copy it first (numpy.ascontiguousarray)")
        if writable and buf.readonly:
            raise CollectiveError(f"{what}: the buffer is read-only, but the result is written into it")
        if dtype.count != 1 or dtype.itemsize == 0:
            raise CollectiveError(f"{what}: {dtype!r} is not a scalar dtype with a size")
        if buf.nbytes % dtype.itemsize:
            raise CollectiveError(f"{what}: {buf.nbytes} bytes are not a whole number of {dtype!r} elements "
                                  f"({dtype.itemsize} bytes each)")

    @staticmethod
    def check_reduce_op(dtype: DType, op: ReduceOp) -> None:
        if not isinstance(op, ReduceOp):
            raise CollectiveError(f"all_reduce: op must be a ReduceOp ({', '.join(o.value for o in ReduceOp)}), "
                                  f"got {op!r}")
        if op is ReduceOp.MEAN and dtype not in _FLOATS:
            raise CollectiveError(f"all_reduce: op 'mean' needs a floating-point dtype, got {dtype!r}; reduce with "
                                  "'sum' or cast to float first")

    def check_root(self, root: int) -> None:
        if not isinstance(root, int) or not 0 <= root < self.world_size:
            raise CollectiveError(f"broadcast: root {root!r} is not a rank of this job (0..{self.world_size - 1})")

    def check_gather(self, send: memoryview, recv: memoryview) -> None:
        if recv.nbytes != send.nbytes * self.world_size:
            raise CollectiveError(f"all_gather: the receive buffer holds {recv.nbytes} bytes, expected world_size "
                                  f"({self.world_size}) x {send.nbytes}")


_FLOATS: Final = frozenset(dtypes.floats)


class LocalProvider(CollectiveProvider):
    """The world of one: rank 0 of 1, and every collective leaves the data as it is (after the common checks)."""

    name = LOCAL

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    def all_reduce(self, buf: memoryview, dtype: DType, op: ReduceOp, shape: tuple[int, ...] | None = None) -> None:
        self.check_buffer("all_reduce", buf, dtype, writable=True)
        self.check_reduce_op(dtype, op)

    def broadcast(self, buf: memoryview, dtype: DType, root: int, shape: tuple[int, ...] | None = None) -> None:
        self.check_buffer("broadcast", buf, dtype, writable=True)
        self.check_root(root)

    def all_gather(self, send: memoryview, recv: memoryview, dtype: DType,
                   shape: tuple[int, ...] | None = None) -> None:
        self.check_buffer("all_gather", send, dtype, writable=False)
        self.check_buffer("all_gather", recv, dtype, writable=True)
        self.check_gather(send, recv)
        as_bytes(recv)[:] = as_bytes(send)

    def barrier(self) -> None:
        pass

    def abort(self, code: int = 1) -> NoReturn:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def as_bytes(buf: memoryview) -> memoryview:
    """A C-contiguous buffer as a flat view of its bytes (memoryview.cast refuses a shape with a zero in it)."""
    return buf.cast("B") if buf.nbytes else memoryview(bytearray())


def launched_by_mpi() -> bool:
    """Whether an MPI launcher (mpiexec, mpirun, srun --mpi=...) started this process."""
    return any(os.environ.get(name) for name in MPI_LAUNCHER_VARIABLES)


def provider_name() -> str:
    """The provider `get_provider()` opens now: PLYGRAD_COLLECTIVES, else `mpi` under an MPI launcher, else local."""
    return PLYGRAD_COLLECTIVES.get() or ("mpi" if launched_by_mpi() else LOCAL)


def available() -> list[str]:
    """Every provider name that can be asked for: the built-in `local` and each `plygrad.collectives` entry point."""
    return sorted({LOCAL, *discovery.plugins(COLLECTIVES)})


_OPEN: dict[str, CollectiveProvider] = {}
_LOCK = threading.Lock()


def get_provider(name: str | None = None) -> CollectiveProvider:
    """The provider `name` (default: `provider_name()`), opened on first use and kept for the process's lifetime:
    a communicator is process-wide. A plugin that is missing, fails to import, is not callable, raises, or returns
    something that is not a CollectiveProvider raises CollectiveError naming it and its distribution."""
    chosen = name or provider_name()
    with _LOCK:
        found = _OPEN.get(chosen)
        if found is None:
            found = _OPEN[chosen] = _open(chosen)
        return found


def _open(name: str) -> CollectiveProvider:
    if name == LOCAL and LOCAL not in discovery.plugins(COLLECTIVES):
        return LocalProvider()
    factory = discovery.load_callable(COLLECTIVES, name, "collective provider",
                                      f"set {PLYGRAD_COLLECTIVES.name} to one of: {', '.join(available())}",
                                      CollectiveError)
    described = discovery.describe(COLLECTIVES, name, "collective provider")
    try:
        provider = factory()
    except CollectiveError:
        raise
    except Exception as exc:
        raise CollectiveError(f"{described} failed to open: {type(exc).__name__}: {exc}") from exc
    if not isinstance(provider, CollectiveProvider):
        raise CollectiveError(f"{described} returned {type(provider).__name__}, not a CollectiveProvider")
    return provider


def reset() -> None:
    """Forget every opened provider (closing each): the next `get_provider` opens its provider again. For tests
    that plug in a provider with `discovery.installed`; a real communicator (MPI) opens once per process."""
    with _LOCK:
        opened = list(_OPEN.values())
        _OPEN.clear()
    for provider in opened:
        provider.close()


__all__ = ["COLLECTIVES", "LOCAL", "MPI_LAUNCHER_VARIABLES", "PLYGRAD_COLLECTIVES", "SETTINGS", "CollectiveError",
           "CollectiveProvider", "LocalProvider", "ReduceOp", "as_bytes", "available", "get_provider",
           "launched_by_mpi", "provider_name", "reset"]

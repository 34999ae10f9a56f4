"""The `mpi` collective provider: MPI_COMM_WORLD through mpi4py, on host buffers, never blocking forever.

- A deadline: every collective is MPI's non-blocking form (`Iallreduce`, `Ibcast`, `Iallgather`, `Ibarrier`) polled
  for `PLYGRAD_DIST_TIMEOUT` seconds; then DistributedError names the op, its sequence number and this rank, and
  the provider refuses every later collective (the launcher's rank wrapper aborts the job on the uncaught error).
- An agreement: before each collective the ranks exchange a fixed-size descriptor (op, its argument, dtype, size,
  shape, sequence number) with one small `Iallgather` under the same deadline. Every rank sees the same table, so a
  mismatch raises the same DistributedError on every rank, naming what differed, and the communicator stays usable.

mpi4py is imported when the provider opens (`open_mpi`, the entry point); without it DistributedError names
`pip install plygrad-distributed[mpi]`. docs/distributed.md, "Failure".
"""

from __future__ import annotations

import sys
import time
import traceback
import zlib
from dataclasses import dataclass
from enum import IntEnum
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Final, NoReturn

import numpy as np

from plygrad.distributed.config import PLYGRAD_DIST_TIMEOUT
from plygrad.distributed.errors import DistributedError, rank_prefixed
from plygrad.ir.dtype import DType, dtypes
from plygrad.runtime.collectives import CollectiveProvider, ReduceOp, as_bytes

if TYPE_CHECKING:
    from mpi4py import MPI

INSTALL_HINT: Final = "pip install plygrad-distributed[mpi]"
MAX_DIMS: Final = 8  # dimensions a descriptor carries one by one; longer shapes are compared by their checksum
# every dtype a descriptor can name, by its index here (a new dtype appended keeps the old indices)
KNOWN_DTYPES: Final = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                       dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32,
                       dtypes.float64, *dtypes.fp8s)
# dtypes MPI reduces natively through mpi4py's NumPy buffers; the rest are reduced in float32 (or uint8 for bool)
NATIVE_REDUCE: Final = frozenset({dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                                  dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64})


class Kind(IntEnum):
    """The collective a descriptor announces."""

    ALL_REDUCE = 1
    BROADCAST = 2
    ALL_GATHER = 3
    BARRIER = 4


REDUCE_CODES: Final = {ReduceOp.SUM: 1, ReduceOp.MAX: 2, ReduceOp.MIN: 3, ReduceOp.MEAN: 4}
FIELDS: Final = 7 + MAX_DIMS  # an encoded descriptor: seq, kind, arg, dtype, nbytes, ndim, shape checksum, dims


@dataclass(frozen=True)
class Descriptor:
    """What one rank is about to do; all ranks must announce the same one. `arg` is the reduce op's code or the
    broadcast root (0 otherwise)."""

    seq: int
    kind: Kind
    arg: int
    dtype: int  # index in KNOWN_DTYPES, -1 for none (barrier)
    nbytes: int
    shape: tuple[int, ...]

    def encode(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        dims = [*self.shape[:MAX_DIMS], *([-1] * (MAX_DIMS - min(len(self.shape), MAX_DIMS)))]
        checksum = zlib.crc32(repr(self.shape).encode())
        fields = [self.seq, int(self.kind), self.arg, self.dtype, self.nbytes, len(self.shape), checksum, *dims]
        return np.array(fields, dtype=np.int64)

    @staticmethod
    def describe_field(row: np.ndarray[Any, np.dtype[np.int64]], field: str) -> str:
        """One field of an encoded descriptor as a reader wants it in a message."""
        if field == "op":
            kind = Kind(int(row[1]))
            if kind is Kind.ALL_REDUCE:
                op = next(o for o, code in REDUCE_CODES.items() if code == int(row[2]))
                return f"all_reduce({op.value})"
            return f"broadcast(root={int(row[2])})" if kind is Kind.BROADCAST else kind.name.lower()
        if field == "dtype":
            return repr(KNOWN_DTYPES[int(row[3])]) if int(row[3]) >= 0 else "none"
        if field == "shape":
            ndim = int(row[5])
            return str(tuple(int(d) for d in row[7:7 + ndim])) if ndim <= MAX_DIMS else f"a shape of {ndim} dims"
        if field == "size":
            return f"{int(row[4])} bytes"
        return f"#{int(row[0])}"


# (field, the columns of an encoded descriptor it covers), in the order a mismatch is reported: the first that
# differs names the real mistake (a different op explains a different shape; a different sequence number, all)
_COMPARED: Final = (("sequence number", [0]), ("op", [1, 2]), ("dtype", [3]), ("shape", list(range(5, FIELDS))),
                    ("size", [4]))


class MPIProvider(CollectiveProvider):
    """MPI_COMM_WORLD of this process (docs/distributed.md)."""

    name = "mpi"

    def __init__(self, mpi: ModuleType) -> None:
        self._mpi = mpi
        self._comm: MPI.Intracomm = mpi.COMM_WORLD
        self._rank = int(self._comm.Get_rank())
        self._size = int(self._comm.Get_size())
        self._seq = 0
        self._broken = ""  # why the communicator may no longer be used (a collective left unfinished)
        if self._size > 1:
            self._abort_on_uncaught_exceptions()

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._size

    # ---- the collectives ----------------------------------------------------------------------------------------
    def all_reduce(self, buf: memoryview, dtype: DType, op: ReduceOp, shape: tuple[int, ...] | None = None) -> None:
        self.check_buffer("all_reduce", buf, dtype, writable=True)
        self.check_reduce_op(dtype, op)
        array = _as_array(buf, dtype, "all_reduce")
        seq, deadline = self._agree(Kind.ALL_REDUCE, REDUCE_CODES[op], dtype, buf, shape)
        work: np.ndarray[Any, Any] = array
        if dtype not in NATIVE_REDUCE:  # float16, bool: MPI has no portable reduction; reduce wider, round once
            work = array.astype(np.uint8 if dtype is dtypes.bool else np.float32)
        mpi_op = {ReduceOp.MAX: self._mpi.MAX, ReduceOp.MIN: self._mpi.MIN}.get(op, self._mpi.SUM)
        self._wait(self._comm.Iallreduce(self._mpi.IN_PLACE, work, op=mpi_op), "all_reduce", seq, deadline)
        if op is ReduceOp.MEAN:
            work /= self._size
        if work is not array:
            array[...] = work.astype(array.dtype)

    def broadcast(self, buf: memoryview, dtype: DType, root: int, shape: tuple[int, ...] | None = None) -> None:
        self.check_buffer("broadcast", buf, dtype, writable=True)
        self.check_root(root)
        seq, deadline = self._agree(Kind.BROADCAST, root, dtype, buf, shape)
        self._wait(self._comm.Ibcast([as_bytes(buf), self._mpi.BYTE], root=root), "broadcast", seq, deadline)

    def all_gather(self, send: memoryview, recv: memoryview, dtype: DType,
                   shape: tuple[int, ...] | None = None) -> None:
        self.check_buffer("all_gather", send, dtype, writable=False)
        self.check_buffer("all_gather", recv, dtype, writable=True)
        self.check_gather(send, recv)
        seq, deadline = self._agree(Kind.ALL_GATHER, 0, dtype, send, shape)
        request = self._comm.Iallgather([as_bytes(send), self._mpi.BYTE], [as_bytes(recv), self._mpi.BYTE])
        self._wait(request, "all_gather", seq, deadline)

    def barrier(self) -> None:
        seq, deadline = self._agree(Kind.BARRIER, 0, None, None, ())
        self._wait(self._comm.Ibarrier(), "barrier", seq, deadline)

    def abort(self, code: int = 1) -> NoReturn:
        sys.stdout.flush()
        sys.stderr.flush()
        self._comm.Abort(code)
        raise SystemExit(code)  # Abort does not return; this line is for the type checker

    def _abort_on_uncaught_exceptions(self) -> None:
        """Under plain `mpiexec python script.py` (no rank wrapper) an exception on one rank would leave the others
        waiting forever: the interpreter's last step for an uncaught exception now reports it and aborts the job."""
        def report_and_abort(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
            sys.stderr.write(rank_prefixed(self._rank, "".join(traceback.format_exception(kind, exc, tb))))
            sys.stderr.write(rank_prefixed(self._rank, "uncaught exception; aborting the job"))
            self.abort(1)

        sys.excepthook = report_and_abort

    # ---- the two rules --------------------------------------------------------------------------------------------
    def _agree(self, kind: Kind, arg: int, dtype: DType | None, buf: memoryview | None,
               shape: tuple[int, ...] | None) -> tuple[int, float]:
        """Check that every rank announces the same collective; return its sequence number and deadline."""
        op = kind.name.lower()
        if self._broken:
            raise DistributedError(f"{op} on rank {self._rank}: the communicator is unusable since {self._broken}; "
                                   "the job must end (the launcher aborts it on the uncaught error)")
        self._seq += 1
        seq = self._seq
        deadline = time.monotonic() + PLYGRAD_DIST_TIMEOUT.get()
        nbytes = 0 if buf is None else buf.nbytes
        if shape is None:
            shape = (nbytes // dtype.itemsize,) if dtype is not None else ()
        dtype_code = -1 if dtype is None else _dtype_code(dtype, op)
        mine = Descriptor(seq, kind, arg, dtype_code, nbytes, tuple(int(d) for d in shape)).encode()
        table = np.empty((self._size, FIELDS), dtype=np.int64)
        self._wait(self._comm.Iallgather(mine, table), f"{op} (agreeing on the call)", seq, deadline)
        for field, columns in _COMPARED:
            if (table[:, columns] != table[0, columns]).any():
                raise DistributedError(self._mismatch(op, seq, field, table))
        return seq, deadline

    def _mismatch(self, op: str, seq: int, field: str, table: np.ndarray[Any, np.dtype[np.int64]]) -> str:
        per_rank = ", ".join(f"rank {r}: {Descriptor.describe_field(table[r], field)}" for r in range(self._size))
        return (f"{op} #{seq} on rank {self._rank}: the ranks disagree on the {field} ({per_rank}); every rank "
                "must call the same collectives in the same order with tensors of the same shape and dtype")

    def _wait(self, request: MPI.Request, op: str, seq: int, deadline: float) -> None:
        """Poll `request` until it completes or the deadline passes (then the communicator is broken)."""
        pause = 0.0
        while not request.Test():
            if time.monotonic() > deadline:
                timeout = PLYGRAD_DIST_TIMEOUT.get()
                self._broken = f"{op} #{seq} timed out"
                raise DistributedError(f"{op} #{seq} on rank {self._rank}: the other ranks did not take part within "
                                       f"{PLYGRAD_DIST_TIMEOUT.name}={timeout:g} s (a rank died, hangs, or called "
                                       "another collective); aborting the job")
            time.sleep(pause)  # a short sleep, growing to 1 ms: ranks may share cores with each other
            pause = min(pause * 2 or 1e-5, 1e-3)


def _dtype_code(dtype: DType, op: str) -> int:
    try:
        return KNOWN_DTYPES.index(dtype)
    except ValueError:
        raise DistributedError(f"{op}: dtype {dtype!r} cannot be sent between ranks") from None


def _as_array(buf: memoryview, dtype: DType, op: str) -> np.ndarray[Any, Any]:
    """The buffer's elements as a writable NumPy view (no copy)."""
    name = dtype.numpy_name
    if name is None or dtype is dtypes.bfloat16 or dtype in dtypes.fp8s:
        raise DistributedError(f"{op}: {dtype!r} has no NumPy dtype to reduce in; stage the tensor as float32")
    return np.frombuffer(as_bytes(buf), dtype=np.dtype(name))


def import_mpi() -> ModuleType:
    """mpi4py's MPI module (initializing MPI), or DistributedError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise DistributedError(f"the 'mpi' collective provider needs mpi4py and an MPI library ({exc}); "
                               f"{INSTALL_HINT}") from exc
    return MPI


def open_mpi() -> MPIProvider:
    """The `plygrad.collectives` entry point `mpi`."""
    return MPIProvider(import_mpi())

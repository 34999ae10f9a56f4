"""DISK memory: a buffer is a byte range of a file mapped into memory (mmap, shared with the file).

`alloc(n)` opens the device's file (creating it, or growing it to `n` bytes where it is shorter: a sparse extension
on file systems that have them, so a large `Tensor.empty` costs no writes) and maps its first `n` bytes; `offset`
names a range of such a mapping without copying (a tensor of a checkpoint). Copies in and out are memory copies from
the mapping, so only the pages touched are read from the file; `COUNTERS` adds up the bytes each way, which is how
the tests show that loading a checkpoint reads only the tensors used. A file that cannot be opened for writing
(read-only file or folder) is mapped read-only, and writing into it raises.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from dataclasses import dataclass
from typing import Any, Final

from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import Allocator


class DiskCounters:
    """Bytes copied out of (`read`) and into (`written`) DISK buffers by this process since the last `reset`."""

    def __init__(self) -> None:
        self.read = 0
        self.written = 0
        self._lock = threading.Lock()  # copies may run on several threads at once

    def add(self, read: int = 0, written: int = 0) -> None:
        with self._lock:
            self.read += read
            self.written += written

    def reset(self) -> None:
        with self._lock:
            self.read = self.written = 0


COUNTERS: Final = DiskCounters()
# why opening for writing may fail where reading works: a read-only file or folder, a read-only file system
_READ_ONLY: Final = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


@dataclass(frozen=True)
class DiskHandle:
    """`nbytes` bytes at byte `offset` of `mapping` (None for an empty buffer: mmap cannot map 0 bytes)."""

    mapping: mmap.mmap | None
    offset: int
    nbytes: int
    writable: bool


class DiskAllocator(Allocator[DiskHandle]):
    """Buffers of the file `path` (None for the bare device name `DISK`, which names no file: allocating raises)."""

    def __init__(self, device: str, path: str | None) -> None:
        self.device = device
        self.path = path

    def alloc(self, nbytes: int) -> DiskHandle:
        if self.path is None:
            raise BackendError(f"device {self.device!r} names no file: a DISK device is a file, as in "
                               "device='disk:/path/to/file'")
        try:
            try:
                fd, writable = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666), True
            except OSError as e:
                if e.errno not in _READ_ONLY:
                    raise
                fd, writable = os.open(self.path, os.O_RDONLY), False  # reading it is still fine
        except OSError as e:
            raise BackendError(f"{self.device}: cannot open {self.path!r} ({e.strerror})") from None
        try:
            size = os.fstat(fd).st_size
            if size < nbytes:
                if not writable:
                    raise BackendError(f"{self.device}: {self.path!r} has {size} bytes, a buffer of {nbytes} needs it "
                                       "to grow, and it is read-only")
                os.ftruncate(fd, nbytes)
            if nbytes == 0:
                return DiskHandle(None, 0, 0, writable)
            mapping = mmap.mmap(fd, nbytes, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
        finally:
            os.close(fd)  # the mapping keeps the file open as long as it lives
        return DiskHandle(mapping, 0, nbytes, writable)

    def offset(self, handle: DiskHandle, offset: int, nbytes: int) -> DiskHandle:
        if offset < 0 or offset + nbytes > handle.nbytes:
            raise BackendError(f"{self.device}: a view of {nbytes} bytes at byte {offset} does not fit in a buffer of "
                               f"{handle.nbytes} bytes")
        return DiskHandle(handle.mapping, handle.offset + offset, nbytes, handle.writable)

    def free(self, handle: DiskHandle) -> None:
        """Nothing to do: the mapping closes when its last handle (views included) is dropped, and closing it here
        could pull the memory from under a view or an exported memoryview."""

    def copyin(self, handle: DiskHandle, src: memoryview) -> None:
        if not src.nbytes:
            return
        if not handle.writable:
            raise BackendError(f"{self.device}: {self.path!r} was opened read-only (no permission to write it), so "
                               "a tensor on it cannot be written")
        assert handle.mapping is not None  # only empty handles have none
        with memoryview(handle.mapping) as whole:
            whole[handle.offset:handle.offset + src.nbytes] = src.cast("B")
        COUNTERS.add(written=src.nbytes)

    def copyout(self, dst: memoryview, handle: DiskHandle) -> None:
        if not dst.nbytes:
            return
        assert handle.mapping is not None
        with memoryview(handle.mapping) as whole:
            dst.cast("B")[:] = whole[handle.offset:handle.offset + dst.nbytes]
        COUNTERS.add(read=dst.nbytes)

    def transfer(self, dst: DiskHandle, source: Allocator[Any], src: Any, nbytes: int) -> bool:
        """DISK to DISK (another file, or another range of the same one): one copy between the mappings."""
        if not isinstance(source, DiskAllocator) or not isinstance(src, DiskHandle) or not nbytes:
            return False
        staging = bytearray(nbytes)  # through a copy: the two ranges may overlap in one file
        source.copyout(memoryview(staging), src)
        self.copyin(dst, memoryview(staging))
        return True

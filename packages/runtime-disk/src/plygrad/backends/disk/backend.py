"""The DISK backend: `Device["DISK:/path/to/file"]` is that file mapped into memory (allocator.py).

Like tinygrad's DISK device it is memory and nothing else: it compiles and runs no kernels. The runtime moves data
to and from it with COPY (a DISK buffer's bytes are read from the mapping, on demand), and the frontend takes the
views of a disk tensor that are one byte range (a reshape, a slice of the outer axes, a bitcast) as a `Buffer.view`
of the file; everything else is computed after a copy to a compute device (docs/backends.md, "DISK").
"""

from __future__ import annotations

from plygrad.backends.disk.allocator import DiskAllocator
from plygrad.ir.target import Target
from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import Backend, Compiler, Program


def _no_kernels(device: str) -> BackendError:
    return BackendError(f"{device} runs no kernels: it is a file, and a tensor on it can only be copied or written; "
                        "move it to a compute device first (t.to('CPU')) and compute there")


class DiskCompiler(Compiler):
    """Refuses every program: a kernel placed on a DISK device is a mistake the user can fix with `.to()`."""

    def __init__(self, device: str) -> None:
        self.device = device

    @property
    def cache_key(self) -> str:
        return "disk-none"

    def compile(self, source: str) -> bytes:
        raise _no_kernels(self.device)


class DiskBackend(Backend):
    """One file as a device. `path` None is the bare name `DISK`: it opens (so listings show the backend as
    working) but naming no file, allocating on it raises and says how to name one."""

    def __init__(self, name: str, path: str | None) -> None:
        # renderer "c" only so that a kernel wrongly placed here reaches `DiskCompiler`, which says what to do
        super().__init__(name, Target(device="DISK", renderer="c"), DiskAllocator(name, path), DiskCompiler(name))
        self.path = path

    def load(self, name: str, binary: bytes) -> Program:
        raise _no_kernels(self.name)

    def synchronize(self) -> None:
        """Copies are done when they return, and a shared mapping's writes are the file's contents at once."""


def open_disk(device: str) -> DiskBackend:
    """The factory: "DISK:/tmp/w.bin" -> a backend over that file (created when first allocated)."""
    _, _, path = device.partition(":")
    return DiskBackend(device, path or None)

"""The backend plugin API: what a `plygrad-foo` distribution implements so that `Device["FOO"]` works.

A backend ships two things:
- a `BackendDescriptor` named by an entry point in the `plygrad.backends` group. It is cheap: the registry reads
  it for every installed backend (to list them, to pick the default), so the module holding it must import nothing
  heavy. Its `factory` names, as "module:attribute", the callable that really opens the backend;
- that factory, `factory(device: str) -> Backend`, called the first time someone asks for the device. Importing a
  GPU driver binding, probing a compiler and the like happens here, and a failure here is recorded, not fatal.

A `Backend` bundles an `Allocator` (device memory with host copies), a `Compiler` (source -> binary, with a
`cache_key` property so binaries can be cached on disk), `load` (binary -> `Program`), `synchronize`, `close`
(teardown, optional), `batch` (several launches in one call, optional) and the `Target` that codegen lowers kernels
for. docs/backends.md walks through writing one.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from plygrad.ir.target import Target
from plygrad.runtime.errors import BackendError

Handle = TypeVar("Handle")


@dataclass(frozen=True)
class BackendDescriptor:
    """What the registry knows about a backend before opening it.

    `ir_major`/`ir_minor` are the opset version (plygrad.ir.OPSET_VERSION) the backend was built against: the
    registry skips a backend whose major differs from the installed plygrad-ir's, or whose minor is newer (it may
    rely on ops this plygrad-ir does not have). Among backends that open, the highest `priority` is the default.
    """

    name: str
    priority: int
    ir_major: int
    ir_minor: int
    factory: str  # "module:attribute" of a callable (device: str) -> Backend, imported on first use

    def __post_init__(self) -> None:
        if not self.name or not self.name.isidentifier() or self.name.upper() != self.name:
            raise BackendError(f"backend name {self.name!r} must be an upper-case identifier like 'CPU' or 'NV'")
        module, sep, attr = self.factory.partition(":")
        if not (sep and module and attr):
            raise BackendError(f"backend {self.name}: factory {self.factory!r} must look like 'package.module:name'")

    def load_factory(self) -> Callable[[str], Backend]:
        """Import the factory named by `factory`; errors propagate so the registry can record them."""
        module_name, _, attr = self.factory.partition(":")
        module = importlib.import_module(module_name)
        factory: Callable[[str], Backend] = getattr(module, attr)
        return factory


class Allocator(ABC, Generic[Handle]):
    """Device memory. A handle is whatever the backend uses to name an allocation (a pointer, a cffi array...)."""

    @abstractmethod
    def alloc(self, nbytes: int) -> Handle:
        """Allocate `nbytes` (0 is allowed and must work); raise MemoryError when the device is out of memory."""

    @abstractmethod
    def free(self, handle: Handle) -> None:
        """Release an allocation; the handle is never used again."""

    @abstractmethod
    def copyin(self, handle: Handle, src: memoryview) -> None:
        """Copy the host bytes `src` to the start of the allocation (`len(src)` <= its size)."""

    @abstractmethod
    def copyout(self, dst: memoryview, handle: Handle) -> None:
        """Copy the first `len(dst)` bytes of the allocation into the writable host buffer `dst`."""

    def offset(self, handle: Handle, offset: int, nbytes: int) -> Handle:
        """A handle naming the `nbytes` bytes at byte `offset` of the allocation `handle`, sharing its memory
        (`Buffer.view`): what a DISK tensor's slice of a file is. Never freed itself: the allocation it views is
        freed once. Optional: the default says this allocator has no sub-buffer views."""
        raise BackendError(f"{type(self).__name__} has no sub-buffer views (Allocator.offset); copy the part "
                           "wanted into a buffer of its own instead")

    def transfer(self, dst: Handle, source: Allocator[Any], src: Any, nbytes: int) -> bool:
        """Copy `nbytes` from `source`'s allocation `src` into `dst` without the host, if this allocator can
        (the same device, a peer device of its kind); return False where it cannot, and the runtime's COPY goes
        through host memory instead. The copy must see every write already launched to `src` and come before
        any launch that follows on this device. Optional: the default says it cannot."""
        return False


class Compiler(ABC):
    """Turns rendered source into a binary the backend can `load`."""

    @property
    @abstractmethod
    def cache_key(self) -> str:
        """Names the compiler, its version and its flags: binaries are cached on disk under this key (with the
        source and the target), so anything that changes the binary for the same source must change the key."""

    @abstractmethod
    def compile(self, source: str) -> bytes:
        """Compile `source`; raise CompileError naming the failing source line when the compiler rejects it."""


class Program(ABC):
    """One loaded program, callable many times."""

    @abstractmethod
    def __call__(self, buffers: Sequence[Any], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None, vals: Sequence[int], wait: bool = False) -> float | None:
        """Launch with allocator handles in parameter order and variable values in the PROGRAM's DEFINE_VAR order.

        With `wait`, block until the program finished and return its run time in seconds; otherwise return None
        (a device may still be running it: `Backend.synchronize` waits).
        """


@dataclass(frozen=True)
class BatchEntry:
    """One kernel of a batch (`Backend.batch`): the program, its launch sizes, and how many buffer handles and
    variable values it takes."""

    program: Program
    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int] | None
    buffers: int
    vals: int


class BatchLaunch(ABC):
    """Kernels launched one after another by one call: what `Backend.batch` returns."""

    @abstractmethod
    def __call__(self, handles: Sequence[Any], vals: Sequence[int]) -> None:
        """Launch every kernel in order, as `Program.__call__` without `wait` would: kernel i takes the next
        `buffers` handles of `handles` and the next `vals` values of `vals` (its BatchEntry's counts)."""


class Backend(ABC):
    """An opened device: `Device["CPU:1"]` is one of these."""

    def __init__(self, name: str, target: Target, allocator: Allocator[Any], compiler: Compiler) -> None:
        self.name = name  # the full device name, e.g. "CPU" or "CPU:1"
        self.target = target
        self.allocator = allocator
        self.compiler = compiler

    @abstractmethod
    def load(self, name: str, binary: bytes) -> Program:
        """Load a binary produced by this backend's compiler; `name` is the entry function (ProgramInfo.name)."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait until every launched program and copy has finished."""

    def batch(self, entries: Sequence[BatchEntry]) -> BatchLaunch | None:
        """A launcher that runs `entries` in order in one call, or None (the default): the runtime then launches
        each program itself. Plans and captures ask once for every run of two or more consecutive kernels on this
        device (a plan at its second run, a capture at its first replay), and launch through it unless DEBUG >= 2
        (which times each kernel). What it saves is the runtime's Python per launch (a few microseconds each, more
        on cold caches); a backend returns None for entries it cannot run that way."""
        return None

    def close(self) -> None:
        """Release what the backend holds beyond device memory (temp folders, compiler handles, worker pools).

        The registry calls it once when it forgets the backend: `Device.reset()` and interpreter exit. Buffers
        allocated from the backend may still be freed afterwards, so `allocator.free` must keep working (a GPU
        backend keeps its context until the process exits). The default does nothing.
        """
        return  # optional by design: most backends own nothing that outlives a process

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} target={self.target.renderer}/{self.target.arch or '-'}>"

"""Runtime memory: `Buffer`, named across the IR by a process-wide id (the `BufferRef` id of BUFFER nodes).

A buffer allocates lazily (a schedule may declare buffers that are never written, and a frontend may create many
before running anything) and frees its memory when the last reference goes: the id table is weak, so it never keeps
a buffer alive. There is no numpy here: data goes in as bytes-like and comes out as `bytes` or a `memoryview`.
"""

from __future__ import annotations

import itertools
import sys
import threading
import weakref
from array import array
from typing import Any, Final, TypeAlias

from plygrad.ir.dtype import DType, dtypes
from plygrad.ir.records import BufferRef
from plygrad.runtime.device import Device, canonical_device
from plygrad.runtime.errors import InvalidBufferError
from plygrad.runtime.plugin import Backend

BytesLike: TypeAlias = "bytes | bytearray | memoryview | array[Any]"
_NEXT_ID: Final = itertools.count()
# id -> weak reference to the live Buffer; an entry goes in Buffer.__del__ (a WeakValueDictionary's Python-level
# KeyedRef and removal callback cost about a microsecond per buffer, and a small op allocates one per run)
_TABLE: Final[dict[int, weakref.ref[Buffer]]] = {}
# first allocation of a Buffer shared by threads: without it two threads could each allocate, and the data one of
# them copied into its memory would be lost when the other's handle replaced it
_ALLOCATING: Final = threading.Lock()
_VALUE_DTYPES: Final = frozenset(dtypes.all())  # a set: `in` on the tuple costs ~2 us per Buffer


class Buffer:
    """`size` elements of `dtype` on `device`; memory is allocated on first use."""

    def __init__(self, device: str, size: int, dtype: DType) -> None:
        if dtype not in _VALUE_DTYPES:
            raise InvalidBufferError(f"Buffer dtype must be one of dtypes.all() (a scalar value dtype), got {dtype}")
        if type(size) is not int or size < 0:
            raise InvalidBufferError(f"Buffer size must be an int >= 0 (elements), got {size!r}")
        self.device = canonical_device(device)
        self.size = size
        self.dtype = dtype
        self.id = next(_NEXT_ID)
        self._handle: Any = None
        self._backend: Backend | None = None
        _TABLE[self.id] = weakref.ref(self)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = Device[self.device]
        return self._backend

    @property
    def allocated(self) -> bool:
        return self._handle is not None

    @property
    def handle(self) -> Any:
        """The allocator handle, allocating on first access (once, also when threads ask at the same time)."""
        handle = self._handle
        if handle is None:
            allocator = self.backend.allocator  # opened outside the lock: opening a backend takes the registry's
            with _ALLOCATING:
                if self._handle is None:
                    self._handle = allocator.alloc(self.nbytes)
                handle = self._handle
        return handle

    def ref(self) -> BufferRef:
        """How the IR names this buffer (the BUFFER node's argument)."""
        return BufferRef(self.id, self.device, self.size)

    def copyin(self, data: BytesLike) -> Buffer:
        """Fill the whole buffer from host bytes (exactly `nbytes` of them)."""
        view = memoryview(data).cast("B")
        if view.nbytes != self.nbytes:
            raise InvalidBufferError(f"copyin of {view.nbytes} bytes into buffer {self.id} ({self.size} x "
                                     f"{self.dtype} = {self.nbytes} bytes on {self.device}): sizes must match")
        self.backend.allocator.copyin(self.handle, view)
        return self

    def copyout_into(self, dst: bytearray | memoryview) -> memoryview:
        """Copy the whole buffer into the writable host buffer `dst` (waiting for the device first)."""
        view = memoryview(dst).cast("B")
        if view.nbytes != self.nbytes or view.readonly:
            raise InvalidBufferError(f"copyout of buffer {self.id} ({self.nbytes} bytes) needs a writable "
                                     f"destination of exactly that size, got {view.nbytes} bytes"
                                     f"{' (read-only)' if view.readonly else ''}")
        self.backend.synchronize()
        self.backend.allocator.copyout(view, self.handle)
        return view

    def copyout(self) -> bytes:
        """The buffer's contents as bytes."""
        out = bytearray(self.nbytes)
        self.copyout_into(out)
        return bytes(out)

    def __del__(self) -> None:
        # at interpreter exit the module's table may be gone, the backend's modules (cffi, its library) may already
        # be torn down, and the process is returning all its memory anyway: freeing then can only fail
        if sys.is_finalizing():
            return
        buffer_id = getattr(self, "id", None)  # absent when __init__ raised
        if buffer_id is not None:
            _TABLE.pop(buffer_id, None)
        handle, backend = getattr(self, "_handle", None), getattr(self, "_backend", None)
        if handle is not None and backend is not None:
            backend.allocator.free(handle)

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else "lazy"
        return f"<Buffer {self.id} {self.device} {self.size} x {self.dtype} {state}>"


def lookup_buffer(buffer_id: int) -> Buffer:
    """The live buffer with this id; InvalidBufferError when it was never created or has been freed."""
    ref = _TABLE.get(buffer_id)
    found = None if ref is None else ref()
    if found is None:
        raise InvalidBufferError(f"no live buffer has id {buffer_id}: it was freed (nothing referenced it) or "
                                 "never created; keep a reference to the Buffer or pass it to run_linear(buffers=...)")
    return found

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
from plygrad.runtime import trace
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
        self._base: Buffer | None = None  # set by `view`: the buffer whose memory this one names a part of
        self._offset = 0  # bytes into the base
        _TABLE[self.id] = weakref.ref(self)

    def view(self, offset: int, size: int, dtype: DType) -> Buffer:
        """A buffer naming `size` elements of `dtype` at byte `offset` of this one's memory, which it shares (the
        allocator's `offset`; DISK has it, so a tensor of a checkpoint is a slice of the mapped file). A view of a
        view is a view of the same base; the base stays alive while a view does."""
        if type(offset) is not int or offset < 0 or offset + size * dtype.itemsize > self.nbytes:
            raise InvalidBufferError(f"view of {size} x {dtype} at byte {offset!r} of buffer {self.id} "
                                     f"({self.nbytes} bytes on {self.device}): it must lie inside the buffer")
        out = Buffer(self.device, size, dtype)
        base = self if self._base is None else self._base
        out._base, out._offset, out._backend = base, self._offset + offset, self._backend
        return out

    @property
    def base(self) -> Buffer:
        """The buffer whose memory this one is (itself unless it is a `view`)."""
        return self if self._base is None else self._base

    @property
    def offset(self) -> int:
        """Bytes from the start of `base` to this buffer's first byte (0 unless it is a `view`)."""
        return self._offset

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
            base = self._base
            base_handle = None if base is None else base.handle  # before the lock: the base takes it itself
            with _ALLOCATING:
                if self._handle is None:
                    self._handle = (allocator.alloc(self.nbytes) if base_handle is None
                                    else allocator.offset(base_handle, self._offset, self.nbytes))
                    rec = trace.RECORDER
                    if rec is not None and base_handle is None:  # a view allocates nothing
                        rec.alloc(self.id, self.device, self.nbytes)
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

    def __del__(self, _finalizing: Any = sys.is_finalizing) -> None:
        # at interpreter exit the module's table may be gone, the backend's modules (cffi, its library) may already
        # be torn down, and the process is returning all its memory anyway: freeing then can only fail. The check is
        # bound when the class is made: tearing modules down sets their globals (`sys` here) to None
        if _finalizing() or _TABLE is None:
            return
        buffer_id = getattr(self, "id", None)  # absent when __init__ raised
        if buffer_id is not None:
            _TABLE.pop(buffer_id, None)
        handle, backend = getattr(self, "_handle", None), getattr(self, "_backend", None)
        if handle is not None and backend is not None and getattr(self, "_base", None) is None:  # a view owns none
            backend.allocator.free(handle)
            rec = trace.RECORDER
            if rec is not None and buffer_id is not None:
                rec.free(buffer_id)

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

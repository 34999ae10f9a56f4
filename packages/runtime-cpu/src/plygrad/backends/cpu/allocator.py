"""Host memory for the CPU backend: cffi-owned `char[]` arrays, whose addresses never move.

Freed arrays of at least `CACHE_FROM` bytes are kept, up to PLYGRAD_CPU_BUFFER_CACHE bytes in all, and handed to
the next allocation of the same size. A fresh large array is zero-filled memory the kernel has never touched: its
first write page-faults every 4 KiB page, which for a 64 MiB output costs about as much as the kernel that fills it;
realizing `x + y` again, or a training step, frees and asks for the same sizes every time. A reused array holds
whatever its last owner left (the Allocator contract promises no contents; every kernel writes all of its output).

Every array handed out stays referenced by the allocator (`_live`) until `free`. An aligned array's memory is
released by cffi's finalizer of the array object (the `new_allocator` free function), and Python's cyclic garbage
collector runs the finalizers of everything in one garbage batch: were the array reachable only from its Buffer, a
Buffer freed in a reference cycle would put the array in the reuse list while cffi's finalizer of that same array
returned its memory to malloc, and the next allocation of the size would be handed freed memory. Held here, the
array is never garbage while a Buffer owns it, and its memory goes only when `free` releases it.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Any, Final

import cffi

from plygrad.backends.cpu.config import PLYGRAD_CPU_BUFFER_CACHE
from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import Allocator

CACHE_FROM: Final = 1 << 16  # smaller arrays are cheap to make (malloc's own free lists): not worth holding
# every array starts on a cache line: malloc aligns to 16 bytes only (a large array sits 16 bytes past a page),
# so each 64-byte vector load of an AVX-512 kernel would straddle two lines (matmul 1024: 150 -> 210 GFLOP/s)
ALIGNMENT: Final = 64
ALIGN_FROM: Final = 1024  # smaller arrays come from ffi.new, whose C path is cheaper than cffi's allocator callback
# arrays of HUGE_FROM bytes or more start on a huge page and ask Linux for transparent huge pages (madvise), as
# NumPy does for its own: a 64 MiB operand then spans 32 TLB entries, not 16384, so streaming it does not flush the
# translations (and the page-table lines) of everything else the process touches next
HUGE_PAGE: Final = 1 << 21
HUGE_FROM: Final = 1 << 22
MADV_HUGEPAGE: Final = 14  # Linux; elsewhere madvise refuses it (EINVAL) and the array stays on small pages
_LIBC_CDEF: Final = ("int posix_memalign(void **memptr, size_t alignment, size_t size); void free(void *ptr);"
                     "int madvise(void *addr, size_t length, int advice);")


def aligned_new(ffi: cffi.FFI) -> Any:
    """`ffi.new` whose arrays start on an ALIGNMENT-byte boundary and are zeroed (cffi's `new_allocator` over
    libc's `posix_memalign`), or plain `ffi.new` where the C library has no `posix_memalign` (not POSIX)."""
    libc_ffi = cffi.FFI()
    libc_ffi.cdef(_LIBC_CDEF)
    try:
        libc: Any = libc_ffi.dlopen(None)
        memalign, free = libc.posix_memalign, libc.free
    except (OSError, AttributeError):
        return ffi.new
    madvise: Any = getattr(libc, "madvise", None) if sys.platform.startswith("linux") else None

    def allocate(nbytes: int) -> Any:
        slot = libc_ffi.new("void **")  # one per call: buffers are allocated from several threads at once
        huge = madvise is not None and nbytes >= HUGE_FROM
        if memalign(slot, HUGE_PAGE if huge else ALIGNMENT, max(nbytes, 1)) != 0:
            return ffi.NULL  # cffi raises MemoryError
        if huge:  # before cffi zero-fills it, so the first touches fault in huge pages; refused: small pages
            madvise(slot[0], nbytes - nbytes % HUGE_PAGE, MADV_HUGEPAGE)
        return ffi.cast("void *", slot[0])

    void_p = libc_ffi.typeof("void *")  # looked up now: at interpreter exit cffi can no longer parse a type name

    def release(pointer: Any) -> None:
        free(libc_ffi.cast(void_p, pointer))

    return ffi.new_allocator(alloc=allocate, free=release, should_clear_after_alloc=True)


class CFFIAllocator(Allocator[Any]):
    """`alloc` gives a `char[nbytes]` cdata (ALIGNMENT-aligned from ALIGN_FROM bytes on, malloc-aligned below;
    zeroed when new, reused ones keep their bytes); copies (also between CPU devices) are memmoves."""

    def __init__(self, ffi: cffi.FFI) -> None:
        self.ffi = ffi
        self._new = aligned_new(ffi)
        self._char_array = ffi.typeof("char[]")  # looked up once: ffi.new of a C type skips parsing the name
        self._kept: dict[int, list[Any]] = {}  # freed arrays by size, the most recently freed last
        self._freed: OrderedDict[int, tuple[int, Any]] = OrderedDict()  # id -> (size, array), oldest first
        self._kept_bytes = 0
        self._live: dict[int, Any] = {}  # id -> every array handed out and not yet freed (module docstring)
        self._lock = threading.Lock()  # a Buffer may be freed by the garbage collector in any thread

    def alloc(self, nbytes: int) -> Any:
        if nbytes >= CACHE_FROM:
            with self._lock:
                kept = self._kept.get(nbytes)
                if kept:
                    handle = kept.pop()
                    del self._freed[id(handle)]
                    self._kept_bytes -= nbytes
                    self._live[id(handle)] = handle
                    return handle
        handle = self._new(self._char_array, nbytes) if nbytes >= ALIGN_FROM else self.ffi.new(self._char_array, nbytes)
        self._live[id(handle)] = handle  # one dict store: atomic under the GIL, no lock needed
        return handle

    def free(self, handle: Any) -> None:
        if self._live.pop(id(handle), None) is not handle:
            raise BackendError(f"CPU allocator: free of an array it did not hand out or already freed "
                               f"({self.ffi.sizeof(handle)} bytes at {int(self.ffi.cast('uintptr_t', handle)):#x}); "
                               "its memory is left alone")
        nbytes = self.ffi.sizeof(handle)
        limit = PLYGRAD_CPU_BUFFER_CACHE.get() if nbytes >= CACHE_FROM else 0
        if nbytes > limit:
            self.ffi.release(handle)
            return
        evicted: list[Any] = []
        with self._lock:
            self._kept.setdefault(nbytes, []).append(handle)
            self._freed[id(handle)] = (nbytes, handle)
            self._kept_bytes += nbytes
            while self._kept_bytes > limit:  # the arrays freed longest ago go first
                _, (size, old) = self._freed.popitem(last=False)
                self._kept[size].remove(old)
                self._kept_bytes -= size
                evicted.append(old)
        for old in evicted:
            self.ffi.release(old)

    def live_count(self) -> int:
        """Arrays handed out and not yet freed."""
        return len(self._live)

    def kept_bytes(self) -> int:
        """Bytes of freed arrays held for reuse now."""
        return self._kept_bytes

    def copyin(self, handle: Any, src: memoryview) -> None:
        self.ffi.memmove(handle, src, src.nbytes)

    def copyout(self, dst: memoryview, handle: Any) -> None:
        self.ffi.memmove(dst, handle, dst.nbytes)

    def transfer(self, dst: Any, source: Allocator[Any], src: Any, nbytes: int) -> bool:
        """Between two CPU devices (`CPU`, `CPU:1`: the same host memory) one memmove, no staging copy; CPU
        programs finish before their launch returns, so nothing is pending on `src`."""
        if not isinstance(source, CFFIAllocator):
            return False
        self.ffi.memmove(dst, src, nbytes)
        return True

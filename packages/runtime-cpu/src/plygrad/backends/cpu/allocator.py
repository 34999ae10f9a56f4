"""Host memory for the CPU backend: cffi-owned `char[]` arrays, whose addresses never move."""

from __future__ import annotations

from typing import Any

import cffi

from plygrad.runtime.plugin import Allocator


class CFFIAllocator(Allocator[Any]):
    """`alloc` gives a zeroed `char[nbytes]` cdata (malloc-aligned); copies (also between CPU devices) are memmoves."""

    def __init__(self, ffi: cffi.FFI) -> None:
        self.ffi = ffi

    def alloc(self, nbytes: int) -> Any:
        return self.ffi.new("char[]", nbytes)

    def free(self, handle: Any) -> None:
        self.ffi.release(handle)

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

"""The CPU allocator's cache of freed arrays (allocator.py): same-size allocations reuse them, bounded by
PLYGRAD_CPU_BUFFER_CACHE, the arrays freed longest ago evicted first, small arrays never kept."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from pathlib import Path

import cffi
import pytest

from plygrad.backends.cpu.allocator import ALIGN_FROM, ALIGNMENT, CACHE_FROM, HUGE_FROM, HUGE_PAGE, CFFIAllocator
from plygrad.runtime.errors import BackendError


def _address(ffi: cffi.FFI, handle: object) -> int:
    return int(ffi.cast("uintptr_t", handle))


def test_a_freed_array_serves_the_next_allocation_of_its_size() -> None:
    ffi = cffi.FFI()
    allocator = CFFIAllocator(ffi)
    first = allocator.alloc(CACHE_FROM)
    where = _address(ffi, first)
    allocator.free(first)
    assert allocator.kept_bytes() == CACHE_FROM
    other = allocator.alloc(2 * CACHE_FROM)  # another size: a new array
    assert _address(ffi, other) != where
    again = allocator.alloc(CACHE_FROM)
    assert _address(ffi, again) == where and allocator.kept_bytes() == 0


def test_small_arrays_are_released_at_once() -> None:
    allocator = CFFIAllocator(cffi.FFI())
    allocator.free(allocator.alloc(CACHE_FROM - 1))
    assert allocator.kept_bytes() == 0


def test_the_cache_is_bounded_and_drops_the_arrays_freed_longest_ago(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLYGRAD_CPU_BUFFER_CACHE", str(3 * CACHE_FROM))
    ffi = cffi.FFI()
    allocator = CFFIAllocator(ffi)
    a, b = allocator.alloc(CACHE_FROM), allocator.alloc(2 * CACHE_FROM)
    c = allocator.alloc(CACHE_FROM)
    where_b, where_c = _address(ffi, b), _address(ffi, c)
    allocator.free(a)
    allocator.free(b)
    assert allocator.kept_bytes() == 3 * CACHE_FROM
    allocator.free(c)  # over the bound: a, freed longest ago, goes
    assert allocator.kept_bytes() == 3 * CACHE_FROM
    assert _address(ffi, allocator.alloc(CACHE_FROM)) == where_c
    assert _address(ffi, allocator.alloc(2 * CACHE_FROM)) == where_b
    monkeypatch.setenv("PLYGRAD_CPU_BUFFER_CACHE", "0")
    allocator.free(allocator.alloc(CACHE_FROM))
    assert allocator.kept_bytes() == 0


def test_reused_memory_round_trips_new_data() -> None:
    allocator = CFFIAllocator(cffi.FFI())
    handle = allocator.alloc(CACHE_FROM)
    allocator.copyin(handle, memoryview(b"\xff" * CACHE_FROM))
    allocator.free(handle)
    handle = allocator.alloc(CACHE_FROM)
    data = bytes(range(256)) * (CACHE_FROM // 256)
    allocator.copyin(handle, memoryview(data))
    out = bytearray(CACHE_FROM)
    allocator.copyout(memoryview(out), handle)
    assert bytes(out) == data


@pytest.mark.parametrize("nbytes", [ALIGN_FROM, 4100, 1 << 16, (4 << 20) + 4])
def test_arrays_start_on_a_cache_line(nbytes: int) -> None:
    """malloc gives 16-byte alignment (a large array sits 16 bytes past a page): 64-byte vector loads would then
    straddle two cache lines. Fresh arrays are zeroed, reused ones keep their alignment."""
    ffi = cffi.FFI()
    allocator = CFFIAllocator(ffi)
    handle = allocator.alloc(nbytes)
    assert int(ffi.cast("uintptr_t", handle)) % ALIGNMENT == 0 and ffi.sizeof(handle) == nbytes
    assert bytes(ffi.buffer(handle)) == bytes(nbytes)
    allocator.free(handle)
    again = allocator.alloc(nbytes)
    assert int(ffi.cast("uintptr_t", again)) % ALIGNMENT == 0


def test_threads_allocating_at_once_get_distinct_arrays() -> None:
    """The aligned allocator's out-parameter is per call: shared, two threads could both get the pointer one of
    them was given, and write into each other's buffers."""
    ffi = cffi.FFI()
    allocator = CFFIAllocator(ffi)
    kept: list[list[object]] = [[] for _ in range(4)]  # every array stays alive until all are compared

    def grab(k: int) -> None:
        kept[k] = [allocator.alloc(4096 + 64 * k) for _ in range(200)]

    workers = [threading.Thread(target=grab, args=(k,)) for k in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    addresses = [int(ffi.cast("uintptr_t", h)) for handles in kept for h in handles]
    assert len(addresses) == 800 and len(set(addresses)) == 800


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds `address` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0] if line else ""
        if "-" in head and ":" not in head:
            low, high = (int(part, 16) for part in head.split("-"))
            inside = low <= address < high
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    return []


@pytest.mark.skipif(not Path("/sys/kernel/mm/transparent_hugepage").exists() or not Path("/proc/self/smaps").exists(),
                    reason="no transparent huge pages (Linux's) here")
def test_a_large_array_starts_on_a_huge_page_and_asks_for_huge_pages() -> None:
    """From HUGE_FROM bytes on an array starts on a 2 MiB boundary and its whole huge pages are madvise()d for
    transparent huge pages (smaps flag `hg`) before it is zero-filled; whether Linux then finds free huge pages is
    its business (small pages are still correct). Smaller arrays keep the cache-line alignment and no advice."""
    ffi = cffi.FFI()
    allocator = CFFIAllocator(ffi)
    nbytes = HUGE_FROM * 4 + 12
    handle = allocator.alloc(nbytes)
    small = allocator.alloc(HUGE_FROM - 64)
    try:
        address = int(ffi.cast("uintptr_t", handle))
        assert address % HUGE_PAGE == 0 and ffi.sizeof(handle) == nbytes
        assert bytes(ffi.buffer(handle)) == bytes(nbytes)
        assert "hg" in _vm_flags(address) and "hg" in _vm_flags(address + HUGE_FROM * 4 - 1)
        assert int(ffi.cast("uintptr_t", small)) % ALIGNMENT == 0
    finally:
        allocator.free(small)
        allocator.free(handle)
    # in a fresh process, where the small array gets a mapping of its own: here malloc may hand it memory an
    # earlier large array was advised in (glibc serves large blocks from the heap once it has freed some)
    script = (f"import cffi, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_allocator as t; "
              "from plygrad.backends.cpu.allocator import CFFIAllocator, HUGE_FROM; ffi = cffi.FFI(); "
              "a = CFFIAllocator(ffi).alloc(HUGE_FROM - 64); "
              "print(' '.join(t._vm_flags(int(ffi.cast('uintptr_t', a)))))")
    flags = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert "rd" in flags and "hg" not in flags


def test_an_array_dropped_in_a_garbage_cycle_keeps_its_memory_until_freed() -> None:
    """An array whose last outside reference sits in a reference cycle is not garbage while the allocator has
    handed it out: the cyclic collector would otherwise run cffi's finalizer (the aligned allocator's free) in the
    same batch as the owner's __del__ that puts the array in the reuse list, and the list would hold freed memory."""
    ffi = cffi.FFI()
    allocator = CFFIAllocator(ffi)
    for _ in range(20):
        class Owner:
            def __init__(self) -> None:
                self.handle = allocator.alloc(CACHE_FROM)
                self.cycle = [self]

            def __del__(self) -> None:
                allocator.free(self.handle)

        owner = Owner()
        where = _address(ffi, owner.handle)
        del owner
        gc.collect()
        assert allocator.kept_bytes() == CACHE_FROM and allocator.live_count() == 0
        unrelated = bytearray(CACHE_FROM)  # where malloc would put a block it had been given back
        again = allocator.alloc(CACHE_FROM)
        assert _address(ffi, again) == where
        allocator.copyin(again, memoryview(b"\x07" * CACHE_FROM))
        assert not any(unrelated)
        allocator.free(again)


def test_a_second_free_of_an_array_is_an_error_and_leaves_the_cache_alone() -> None:
    ffi = cffi.FFI()
    allocator = CFFIAllocator(ffi)
    handle = allocator.alloc(CACHE_FROM)
    allocator.free(handle)
    with pytest.raises(BackendError, match="already freed"):
        allocator.free(handle)
    assert allocator.kept_bytes() == CACHE_FROM  # kept once: two allocations would otherwise share it
    assert allocator.alloc(CACHE_FROM) is handle and allocator.alloc(CACHE_FROM) is not handle


def test_a_buffer_freed_by_the_cycle_collector_leaves_no_freed_memory_for_the_next_buffer() -> None:
    """The shared repro (a realized Buffer reachable only through a cycle, then the next of its size) in a fresh
    process: before the allocator held its arrays this wrote into malloc's memory and crashed or aborted."""
    script = """
import gc
from plygrad.ir.dtype import dtypes
from plygrad.runtime.buffer import Buffer
n = 1 << 14  # float32: 64 KiB, the smallest size the CPU allocator keeps
for i in range(50):
    b = Buffer("CPU", n, dtypes.float32)
    b.copyin(bytes(4 * n))
    cycle = [b, None]
    cycle[1] = cycle
    del b, cycle
    gc.collect()
    other = bytearray(4 * n)
    a = Buffer("CPU", n, dtypes.float32)
    a.copyin(b"\\x01" * (4 * n))
    assert a.copyout() == b"\\x01" * (4 * n), i
    assert not any(other), f"round {i}: a Buffer was handed memory malloc had given to a bytearray"
print("clean")
"""
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", script], check=False,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "clean", done.stderr[-2000:]

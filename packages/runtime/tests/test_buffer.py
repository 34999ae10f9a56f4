"""Buffers: ids, lazy allocation, copies, the weak id table."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rt_fakes import ByteArrayAllocator

from plygrad.ir import BufferRef, dtypes
from plygrad.runtime import Buffer, Device, InvalidBufferError, lookup_buffer

DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint16, dtypes.int32, dtypes.int64, dtypes.float16, dtypes.float32,
          dtypes.float64]


def test_ids_are_unique_and_ref_names_the_buffer(fakes: None) -> None:
    a, b = Buffer("PY", 4, dtypes.float32), Buffer("py:0", 2, dtypes.int8)
    assert a.id != b.id
    assert a.ref() == BufferRef(a.id, "PY", 4) and b.device == "PY"
    assert lookup_buffer(a.id) is a


def _allocator() -> ByteArrayAllocator:
    allocator = Device["PY"].allocator
    assert isinstance(allocator, ByteArrayAllocator)
    return allocator


def test_allocation_is_lazy(fakes: None) -> None:
    buf = Buffer("PY", 16, dtypes.float32)
    before = _allocator().live
    assert (buf.allocated, _allocator().live) == (False, before)
    buf.copyin(bytes(64))
    assert (buf.allocated, _allocator().live) == (True, before + 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(size=st.integers(0, 300), seed=st.integers(0, 2**32 - 1))
def test_round_trip_matches_numpy(fakes: None, dtype: object, size: int, seed: int) -> None:
    np_dtype = np.dtype(dtype.name)  # type: ignore[attr-defined]
    data = np.random.default_rng(seed).integers(0, 256, size * np_dtype.itemsize, dtype=np.uint8).view(np_dtype)
    buf = Buffer("PY", size, dtype).copyin(data.tobytes())  # type: ignore[arg-type]
    out = np.frombuffer(buf.copyout(), dtype=np_dtype)
    np.testing.assert_array_equal(out.view(np.uint8), data.view(np.uint8))


def test_copyin_size_must_match(fakes: None) -> None:
    with pytest.raises(InvalidBufferError, match="sizes must match"):
        Buffer("PY", 3, dtypes.float32).copyin(bytes(11))


def test_copyout_into_needs_a_writable_destination(fakes: None) -> None:
    buf = Buffer("PY", 2, dtypes.int16).copyin(bytes([1, 2, 3, 4]))
    with pytest.raises(InvalidBufferError, match="read-only"):
        buf.copyout_into(memoryview(bytes(4)))
    out = bytearray(4)
    buf.copyout_into(out)
    assert out == bytes([1, 2, 3, 4])


def test_freed_buffer_releases_memory_and_leaves_the_table(fakes: None) -> None:
    buf = Buffer("PY", 8, dtypes.int32).copyin(bytes(32))
    live, buffer_id = _allocator().live, buf.id
    del buf
    gc.collect()
    assert _allocator().live == live - 1
    with pytest.raises(InvalidBufferError, match=f"no live buffer has id {buffer_id}"):
        lookup_buffer(buffer_id)


def test_buffer_freed_in_a_cycle_leaves_the_table(fakes: None) -> None:
    holder: list[object] = []
    buf = Buffer("PY", 4, dtypes.int32)
    holder.append(buf)
    buf.cycle = holder  # type: ignore[attr-defined]
    buffer_id = buf.id
    assert lookup_buffer(buffer_id) is buf
    del buf, holder
    gc.collect()
    with pytest.raises(InvalidBufferError, match=f"no live buffer has id {buffer_id}"):
        lookup_buffer(buffer_id)


def test_only_live_buffers_are_found_by_id(fakes: None) -> None:
    kept = [Buffer("PY", 2, dtypes.int8) for _ in range(3)]
    dropped_id = Buffer("PY", 2, dtypes.int8).id  # freed at once
    assert [lookup_buffer(b.id) for b in kept] == kept
    with pytest.raises(InvalidBufferError):
        lookup_buffer(dropped_id)


@pytest.mark.parametrize(("size", "dtype"), [(-1, dtypes.float32), (3, dtypes.index), (2, dtypes.void)])
def test_invalid_buffers_are_refused(size: int, dtype: object) -> None:
    with pytest.raises(InvalidBufferError):
        Buffer("PY", size, dtype)  # type: ignore[arg-type]

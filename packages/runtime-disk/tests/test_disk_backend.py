"""The DISK backend on its own (no frontend): files as devices, buffers as byte ranges of them, copies in and out,
sub-buffer views at offsets, and the errors a user can act on. Contents are checked with numpy.fromfile."""

from __future__ import annotations

import errno
import os
from array import array
from pathlib import Path

import numpy as np
import pytest

from plygrad.backends.disk.allocator import COUNTERS
from plygrad.ir import dtypes
from plygrad.runtime import Buffer, Device, canonical_device
from plygrad.runtime.errors import BackendError, InvalidBufferError
from plygrad.runtime.plugin import Allocator


def test_device_names_keep_the_path() -> None:
    assert canonical_device("disk:/tmp/w.bin") == "DISK:/tmp/w.bin"
    assert canonical_device("DISK:relative/w.bin") == "DISK:relative/w.bin"
    assert canonical_device("cpu:0") == "CPU"  # indices are unchanged
    assert Device["disk:/tmp/a.bin"] is Device["DISK:/tmp/a.bin"]


def test_a_buffer_creates_the_file_and_writes_through(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    buf = Buffer(f"disk:{path}", 8, dtypes.float32)
    values = np.arange(8, dtype=np.float32) * 1.5
    buf.copyin(values.tobytes())
    np.testing.assert_array_equal(np.fromfile(path, np.float32), values)
    assert np.array_equal(np.frombuffer(buf.copyout(), np.float32), values)


def test_a_larger_buffer_grows_the_file_sparsely(tmp_path: Path) -> None:
    path = tmp_path / "grow.bin"
    path.write_bytes(b"\x01\x02")
    buf = Buffer(f"disk:{path}", 1 << 20, dtypes.uint8)
    buf.handle  # noqa: B018 - allocating maps (and grows) the file
    assert path.stat().st_size == 1 << 20
    assert path.read_bytes()[:3] == b"\x01\x02\x00"  # the old bytes stay, the new ones read as zeros


def test_views_share_the_file_at_byte_offsets(tmp_path: Path) -> None:
    path = tmp_path / "v.bin"
    base = Buffer(f"disk:{path}", 16, dtypes.int32)
    base.copyin(np.arange(16, dtype=np.int32).tobytes())
    view = base.view(8, 4, dtypes.int32)  # elements 2..5
    assert np.array_equal(np.frombuffer(view.copyout(), np.int32), [2, 3, 4, 5])
    inner = view.view(4, 2, dtypes.int32)  # a view of a view: elements 3, 4 of the base
    assert inner.base is base and inner.offset == 12
    inner.copyin(np.array([-3, -4], np.int32).tobytes())
    np.testing.assert_array_equal(np.fromfile(path, np.int32)[2:6], [2, -3, -4, 5])
    as_bytes = base.view(4, 4, dtypes.uint8)  # another dtype over the same bytes
    assert bytes(as_bytes.copyout()) == np.array([1], np.int32).tobytes()


def test_a_view_must_lie_inside_its_buffer(tmp_path: Path) -> None:
    base = Buffer(f"disk:{tmp_path / 'b.bin'}", 4, dtypes.float32)
    with pytest.raises(InvalidBufferError, match="inside the buffer"):
        base.view(12, 2, dtypes.float32)


def test_counters_add_up_the_bytes_each_way(tmp_path: Path) -> None:
    COUNTERS.reset()
    buf = Buffer(f"disk:{tmp_path / 'c.bin'}", 100, dtypes.uint8)
    buf.copyin(bytes(100))
    buf.view(10, 20, dtypes.uint8).copyout()
    assert (COUNTERS.read, COUNTERS.written) == (20, 100)


def test_disk_to_disk_transfer(tmp_path: Path) -> None:
    src = Buffer(f"disk:{tmp_path / 's.bin'}", 6, dtypes.uint8)
    src.copyin(b"abcdef")
    dst = Buffer(f"disk:{tmp_path / 'd.bin'}", 4, dtypes.uint8)
    part = src.view(1, 4, dtypes.uint8)
    assert dst.backend.allocator.transfer(dst.handle, part.backend.allocator, part.handle, 4)
    assert (tmp_path / "d.bin").read_bytes() == b"bcde"


def test_an_empty_buffer_works(tmp_path: Path) -> None:
    buf = Buffer(f"disk:{tmp_path / 'e.bin'}", 0, dtypes.float32)
    buf.copyin(b"")
    assert buf.copyout() == b""


def test_the_bare_name_opens_but_names_no_file() -> None:
    assert Device["DISK"].name == "DISK"  # listed as working
    with pytest.raises(BackendError, match=r"names no file.*disk:/path/to/file"):
        Buffer("disk", 4, dtypes.float32).copyin(array("f", range(4)))


def test_no_kernels_run_on_disk(tmp_path: Path) -> None:
    backend = Device[f"disk:{tmp_path / 'k.bin'}"]
    with pytest.raises(BackendError, match=r"runs no kernels.*\.to\('CPU'\)"):
        backend.compiler.compile("void f(void) {}")


@pytest.mark.parametrize("error", [errno.EACCES, errno.EROFS])
def test_a_file_that_cannot_be_written_reads_but_refuses_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 error: int) -> None:
    path = tmp_path / "ro.bin"
    path.write_bytes(b"\x05" * 8)
    real_open = os.open

    def read_only_open(name: str, flags: int, *args: int) -> int:  # a read-only file, or file system (root too)
        if flags & os.O_RDWR:
            raise OSError(error, os.strerror(error), name)
        return real_open(name, flags, *args)

    monkeypatch.setattr(os, "open", read_only_open)
    buf = Buffer(f"disk:{path}", 8, dtypes.uint8)
    assert buf.copyout() == b"\x05" * 8
    with pytest.raises(BackendError, match="read-only"):
        buf.copyin(bytes(8))
    with pytest.raises(BackendError, match="needs it to grow, and it is read-only"):
        Buffer(f"disk:{path}", 16, dtypes.uint8).copyout()


def test_a_device_argument_must_look_like_a_path() -> None:
    with pytest.raises(BackendError, match="must look like"):
        canonical_device("disk:weights")  # no '/' or '.': a malformed index, as 'CPU:x' is


class _NoViews(Allocator[bytearray]):
    """An allocator that keeps the plugin API's default `offset`."""

    def alloc(self, nbytes: int) -> bytearray:
        return bytearray(nbytes)

    def free(self, handle: bytearray) -> None:
        pass

    def copyin(self, handle: bytearray, src: memoryview) -> None:
        handle[:src.nbytes] = src

    def copyout(self, dst: memoryview, handle: bytearray) -> None:
        dst[:] = handle[:dst.nbytes]


def test_allocators_without_views_say_so() -> None:
    with pytest.raises(BackendError, match="no sub-buffer views"):
        _NoViews().offset(bytearray(8), 4, 4)


def test_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="cannot open"):
        Buffer(f"disk:{tmp_path / 'no' / 'such.bin'}", 4, dtypes.uint8).copyout()

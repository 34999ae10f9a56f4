"""Archives as Tensors (tinygrad's `nn.state.tar_extract`, `zip_extract` and `TensorIO`; `nn.state` re-exports them).

An archive is given by path or as a 1-d uint8 Tensor of its bytes, and each member comes back as a 1-d uint8 Tensor
of its bytes, keyed by its name in the archive. Members stored uncompressed are not copied: from a path each is a
Tensor over its span of the memory-mapped file (read only when realized), from a Tensor it is a slice of that Tensor,
so a large dataset archive costs nothing until a member is used. Compressed members (deflated zip entries, a gzip /
bzip2 / xz tar) are inflated here, with the standard library's checks (CRC, declared sizes).

`TensorIO` is the file object the standard library's readers need: read-only and seekable over a Tensor's bytes,
which it reads back from the device once, at the first read.

An archive is untrusted input: a member whose data lies outside the archive, an encrypted entry, or a compression
method the standard library does not read raises a ValueError naming the archive and the member.
"""

from __future__ import annotations

import io
import struct
import tarfile
import zipfile
from typing import Any, Final

from plygrad.frontend.nn.host import PathLike, raw_bytes, source_bytes, tensor_from_bytes
from plygrad.frontend.tensor import Tensor
from plygrad.ir import dtypes

__all__ = ["TensorIO", "tar_extract", "zip_extract"]

_ZIP_LOCAL_HEADER: Final = 30  # bytes of a zip local file header before the name and extra field
_ZIP_LOCAL_MAGIC: Final = b"PK\x03\x04"


class _ViewIO(io.RawIOBase):
    """A read-only, seekable binary file over a memoryview (no copy of the bytes)."""

    def __init__(self, data: memoryview | None = None) -> None:
        super().__init__()
        self._view, self._position = data, 0

    def _data(self) -> memoryview:
        assert self._view is not None
        return self._view

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._data()
        out = memoryview(buffer).cast("B")
        piece = data[self._position:self._position + len(out)]
        out[:len(piece)] = piece
        self._position += len(piece)
        return len(piece)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        size = len(self._data())
        if whence not in (io.SEEK_SET, io.SEEK_CUR, io.SEEK_END):
            raise ValueError(f"seek: whence must be 0 (start), 1 (current) or 2 (end), got {whence}")
        base = (0, self._position, size)[whence]
        self._position = min(size, max(0, base + offset))  # clamped to the data, as tinygrad's TensorIO does
        return self._position

    def tell(self) -> int:
        return self._position

    def write(self, b: Any) -> int:
        raise io.UnsupportedOperation(f"{type(self).__name__} is read-only")


class TensorIO(_ViewIO):
    """A read-only, seekable binary file over the bytes of a 1-d uint8 Tensor (tinygrad's `nn.state.TensorIO`):
    `tarfile.open(fileobj=TensorIO(t))`, `zipfile.ZipFile(TensorIO(t))`, `pickle.load(TensorIO(t))`."""

    def __init__(self, t: Tensor) -> None:
        if t.ndim != 1 or t.dtype is not dtypes.uint8:
            raise ValueError(f"TensorIO: the tensor must be 1-d uint8 (a file's bytes), got a {t.dtype.name} tensor of "
                             f"shape {t.shape}; use t.flatten().bitcast(dtypes.uint8) for another tensor's bytes")
        super().__init__()
        self._tensor = t

    def _data(self) -> memoryview:
        if self._view is None:  # read back from the device once, at the first read or seek
            self._view = memoryview(raw_bytes(self._tensor))
        return self._view

    def __len__(self) -> int:
        return self._tensor.numel()


def _member(fn: Tensor | PathLike, data: memoryview, start: int, size: int) -> Tensor:
    """The bytes [start, start + size) of the archive, without copying: a slice of the source Tensor, or a Tensor
    over that span of the mapped file."""
    if isinstance(fn, Tensor):
        return fn[start:start + size]
    return tensor_from_bytes(data[start:start + size], dtypes.uint8, (size,))


def _check_span(archive: str, member: str, start: int, size: int, total: int) -> None:
    if start < 0 or size < 0 or start + size > total:
        raise ValueError(f"archive {archive}: the data of member {member!r} (bytes {start}..{start + size}) lies "
                         f"outside the {total}-byte archive; the archive is truncated or corrupt")


def tar_extract(fn: Tensor | PathLike) -> dict[str, Tensor]:
    """The regular files of a tar archive (a path, or a uint8 Tensor of its bytes) as 1-d uint8 Tensors keyed by
    member name; an uncompressed archive's members are views of it (no copy), a compressed one's are inflated."""
    data, name = source_bytes(fn, "tar_extract")
    try:
        with tarfile.open(fileobj=_ViewIO(data), mode="r:") as tar:
            members = [m for m in tar if m.isfile()]
    except tarfile.ReadError:
        return _compressed_tar(data, name)
    out: dict[str, Tensor] = {}
    for m in members:
        _check_span(name, m.name, m.offset_data, m.size, len(data))
        out[m.name] = _member(fn, data, m.offset_data, m.size)
    return out


def _compressed_tar(data: memoryview, name: str) -> dict[str, Tensor]:
    """A gzip, bzip2 or xz tar: its members have no span of the archive to view, so they are inflated."""
    out: dict[str, Tensor] = {}
    try:
        with tarfile.open(fileobj=_ViewIO(data), mode="r:*") as tar:
            for m in tar:
                f = tar.extractfile(m) if m.isfile() else None
                if f is not None:
                    out[m.name] = Tensor(f.read(), dtype=dtypes.uint8)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ValueError(f"tar_extract: {name} is not a readable tar archive ({e})") from None
    return out


def zip_extract(fn: Tensor | PathLike) -> dict[str, Tensor]:
    """The entries of a zip archive (a path, or a uint8 Tensor of its bytes) as 1-d uint8 Tensors keyed by entry
    name; stored entries are views of the archive (no copy), deflated, bzip2 and lzma ones are inflated (CRC
    checked)."""
    data, name = source_bytes(fn, "zip_extract")
    try:
        archive = zipfile.ZipFile(_ViewIO(data))
    except (zipfile.BadZipFile, OSError) as e:
        raise ValueError(f"zip_extract: {name} is not a zip archive ({e})") from None
    out: dict[str, Tensor] = {}
    with archive:
        for info in archive.infolist():
            if info.flag_bits & 0x1:
                raise ValueError(f"zip_extract: entry {info.filename!r} of {name} is encrypted; decrypt the archive "
                                 "first")
            if info.compress_type != zipfile.ZIP_STORED:
                out[info.filename] = _inflate(archive, info, name)
                continue
            start = _zip_data_start(data, info, name)
            _check_span(name, info.filename, start, info.compress_size, len(data))
            out[info.filename] = _member(fn, data, start, info.compress_size)
    return out


def _zip_data_start(data: memoryview, info: zipfile.ZipInfo, name: str) -> int:
    """Where an entry's data starts: after its local header, whose name and extra field lengths may differ from the
    central directory's (so they are read from the local header itself)."""
    offset = info.header_offset
    header = bytes(data[offset:offset + _ZIP_LOCAL_HEADER])
    if len(header) < _ZIP_LOCAL_HEADER or header[:4] != _ZIP_LOCAL_MAGIC:
        raise ValueError(f"zip_extract: the local header of entry {info.filename!r} of {name} (at byte {offset}) is "
                         "missing or damaged; the archive is corrupt")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    return int(offset + _ZIP_LOCAL_HEADER + name_length + extra_length)


def _inflate(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str) -> Tensor:
    try:
        return Tensor(archive.read(info), dtype=dtypes.uint8)
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, EOFError) as e:
        raise ValueError(f"zip_extract: entry {info.filename!r} of {name} cannot be read ({e})") from None

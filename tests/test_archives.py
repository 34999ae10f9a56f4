"""nn.state.tar_extract / zip_extract / TensorIO against the standard library's own readers, Tensors of raw bytes
(`bytes` data and NumPy `|S` arrays, as uint8), and the split of nn.state into modules (everything still importable
from nn.state)."""

from __future__ import annotations

import importlib
import io
import pickle
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from plygrad.frontend import Tensor, dtypes, nn
from plygrad.frontend.nn.state import TensorIO, tar_extract, zip_extract

FILES: dict[str, bytes] = {
    "a.bin": bytes(range(256)) * 3,
    "dir/b.txt": b"hello, archive",
    "empty": b"",
    "weights.npy": np.arange(10, dtype=np.float32).tobytes(),
}


def _as_bytes(found: dict[str, Tensor]) -> dict[str, bytes]:
    for name, t in found.items():
        assert t.dtype is dtypes.uint8 and t.ndim == 1, name
    return {name: t.numpy().tobytes() for name, t in found.items()}


def _tar(path: Path, compression: str = "") -> Path:
    """A tar of FILES (and a directory entry), compressed by the named standard-library module ("" for none)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        directory = tarfile.TarInfo("dir")
        directory.type = tarfile.DIRTYPE
        tar.addfile(directory)  # not a regular file: left out
        for name, data in FILES.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = out.getvalue()
    path.write_bytes(importlib.import_module(compression).compress(raw) if compression else raw)
    return path


def _zip(path: Path, compression: int) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in FILES.items():
            archive.writestr(name, data)
    return path


# ---- tar -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("compression", ["", "gzip", "bz2", "lzma"])
def test_tar_extract_reads_every_file_from_a_path(tmp_path: Path, compression: str) -> None:
    path = _tar(tmp_path / "a.tar", compression)
    assert _as_bytes(tar_extract(path)) == FILES
    assert _as_bytes(tar_extract(str(path))) == FILES


def test_tar_extract_from_a_tensor_gives_slices_of_it(tmp_path: Path) -> None:
    raw = _tar(tmp_path / "a.tar").read_bytes()
    source = Tensor(raw)
    found = tar_extract(source)
    assert all(t.inputs == source.inputs for t in found.values())  # lazy slices of the source, not copies
    assert _as_bytes(found) == FILES


def test_tar_extract_members_are_read_only_when_used(tmp_path: Path) -> None:
    """From a path, a member is a Tensor over its span of the mapped file: changing the file before realizing it
    shows the new bytes (nothing was copied at extraction)."""
    path = _tar(tmp_path / "a.tar")
    found = tar_extract(path)
    raw = bytearray(path.read_bytes())
    start = raw.index(b"hello, archive")
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(b"HELLO")
    assert found["dir/b.txt"].numpy().tobytes() == b"HELLO, archive"


@pytest.mark.parametrize("content", [b"", b"not a tar archive at all" * 40])
def test_tar_extract_rejects_other_files(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.tar"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="not a readable tar archive"):
        tar_extract(path)


def test_tar_extract_rejects_a_truncated_member(tmp_path: Path) -> None:
    raw = _tar(tmp_path / "a.tar").read_bytes()
    cut = raw.index(FILES["weights.npy"]) + 8
    path = tmp_path / "cut.tar"
    path.write_bytes(raw[:cut])
    with pytest.raises(ValueError, match=r"end of data|outside the"):
        tar_extract(path)


# ---- zip -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2,
                                         zipfile.ZIP_LZMA])
def test_zip_extract_matches_zipfile(tmp_path: Path, compression: int) -> None:
    path = _zip(tmp_path / "a.zip", compression)
    with zipfile.ZipFile(path) as archive:
        want = {name: archive.read(name) for name in archive.namelist()}
    assert _as_bytes(zip_extract(path)) == want == FILES
    assert _as_bytes(zip_extract(Tensor(path.read_bytes()))) == FILES


def test_zip_extract_reads_a_local_header_with_an_extra_field(tmp_path: Path) -> None:
    """The local header's extra field can differ from the central directory's: the data starts after the local one."""
    path = tmp_path / "extra.zip"
    with zipfile.ZipFile(path, "w") as archive:
        info = zipfile.ZipInfo("x.bin")
        info.extra = b"\xfe\xca\x04\x00abcd"  # one 4-byte extra block (id 0xcafe)
        archive.writestr(info, b"payload")
    assert _as_bytes(zip_extract(path)) == {"x.bin": b"payload"}


@pytest.mark.parametrize(("compression", "message"), [(zipfile.ZIP_STORED, "local header"),
                                                     (zipfile.ZIP_DEFLATED, "cannot be read")])
def test_zip_extract_rejects_a_corrupt_archive(tmp_path: Path, compression: int, message: str) -> None:
    raw = bytearray(_zip(tmp_path / "a.zip", compression).read_bytes())
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"PK but not really")
    with pytest.raises(ValueError, match="not a zip archive"):
        zip_extract(bad)
    start = raw.index(b"PK\x03\x04", 1)  # the second entry's local header
    raw[start:start + 4] = b"XXXX"
    bad.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=f"dir/b.txt.*{message}|{message}.*dir/b.txt"):
        zip_extract(bad)


# ---- TensorIO --------------------------------------------------------------------------------------------------------
def test_tensorio_reads_and_seeks_like_bytesio() -> None:
    data = bytes(range(200))
    ours, ref = TensorIO(Tensor(data)), io.BytesIO(data)
    assert ours.readable() and ours.seekable() and len(ours) == 200
    for whence, offset, size in [(0, 10, 5), (1, 7, 20), (2, -30, 100), (0, 0, -1), (0, 190, 50)]:
        assert ours.seek(offset, whence) == ref.seek(offset, whence)
        assert ours.read(size) == ref.read(size)
        assert ours.tell() == ref.tell()
    assert ours.seek(-500, 1) == 0  # clamped to the data, as tinygrad's
    with pytest.raises(io.UnsupportedOperation):
        ours.write(b"x")


def test_tensorio_feeds_the_standard_library_readers() -> None:
    obj = {"a": [1, 2, 3], "b": "text"}
    assert pickle.load(TensorIO(Tensor(pickle.dumps(obj)))) == obj


def test_tensorio_needs_a_flat_uint8_tensor() -> None:
    with pytest.raises(ValueError, match="1-d uint8"):
        TensorIO(Tensor(np.zeros((2, 2), np.uint8)))
    with pytest.raises(ValueError, match="1-d uint8"):
        TensorIO(Tensor([1.0, 2.0]))


# ---- Tensors of raw bytes --------------------------------------------------------------------------------------------
def test_bytes_become_a_uint8_tensor() -> None:
    t = Tensor(b"hello")
    assert t.dtype is dtypes.uint8 and t.shape == (5,)
    np.testing.assert_array_equal(t.numpy(), np.frombuffer(b"hello", np.uint8))
    assert Tensor(b"").shape == (0,)


@pytest.mark.parametrize("dtype", ["float32", "int16", "float64", "bfloat16"])
def test_bytes_with_a_dtype_are_reinterpreted(dtype: str) -> None:
    values = np.array([1.5, -2.0, 3.25, 0.0], np.float32)
    if dtype == "bfloat16":  # exact in bfloat16: the raw bits are the top halves of the float32 bits
        raw = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
        want: Any = values
    else:
        raw, want = values.astype(dtype).tobytes(), values.astype(dtype)
    np.testing.assert_array_equal(Tensor(raw, dtype=getattr(dtypes, dtype)).numpy(), want)


def test_bytes_that_do_not_fill_whole_elements_are_refused() -> None:
    with pytest.raises(ValueError, match="whole number of float32"):
        Tensor(b"abcde", dtype=dtypes.float32)


def test_numpy_byte_strings_become_their_bytes() -> None:
    strings = np.array([[b"ab", b"c"], [b"", b"de"]], dtype="|S2")
    t = Tensor(strings)
    assert t.dtype is dtypes.uint8 and t.shape == (2, 2, 2)
    np.testing.assert_array_equal(t.numpy(), strings.view(np.uint8).reshape(2, 2, 2))
    assert Tensor(np.array(b"xyz")).numpy().tobytes() == b"xyz"


# ---- the nn.state split ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("module", "names"), [
    ("safetensors", ["safe_save", "safe_load", "safe_load_metadata"]),
    ("torch_load", ["torch_load", "CheckpointError"]),
    ("archives", ["TensorIO", "tar_extract", "zip_extract"]),
])
def test_nn_state_reexports_each_format_module(module: str, names: list[str]) -> None:
    found = importlib.import_module(f"plygrad.frontend.nn.{module}")
    for name in names:
        assert getattr(nn.state, name) is getattr(found, name)

"""PyTorch checkpoints without torch: `torch_load` reads the zip format of `torch.save` (1.6+) and the legacy
pickle format, memory-mapped, through a restricted unpickler that only rebuilds tensors (no code from the file runs,
and torch is never imported). A file is untrusted input: what it claims beyond what it holds is refused before any
allocation, and no compressed entry is inflated past the bytes its storages declare (`nn.state` re-exports this).
"""

from __future__ import annotations

import math
import os
import pickle
import struct
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Final

import numpy as np

from plygrad.frontend.nn.host import PathLike, map_file, tensor_from_bytes
from plygrad.frontend.tensor import Tensor
from plygrad.ir import DType, dtypes

__all__ = ["CheckpointError", "torch_load"]

# ---- PyTorch checkpoints --------------------------------------------------------------------------------------------
class CheckpointError(ValueError, pickle.UnpicklingError):
    """A PyTorch checkpoint that is malformed, or whose pickle asks for something outside torch_load's allow-list."""


TORCH_STORAGES: Final[dict[str, DType]] = {
    "DoubleStorage": dtypes.float64, "FloatStorage": dtypes.float32, "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
    "UInt16Storage": dtypes.uint16, "UInt32Storage": dtypes.uint32, "UInt64Storage": dtypes.uint64,
}
# the dtype globals (`torch.uint16`) that `_rebuild_tensor_v3` receives along with an untyped (byte) storage
TORCH_DTYPES: Final[dict[str, DType]] = {dt.name: dt for dt in dtypes.all()}
LEGACY_MAGIC: Final = 0x1950A86A20F9469CFC6C  # the first pickle of a pre-1.6 (non-zip) torch.save file
LEGACY_PROTOCOL: Final = 1001
# what a zip checkpoint may make torch_load allocate beyond its tensors' declared bytes: a state dict's pickle is
# kilobytes to a few megabytes, `byteorder` a word
MAX_PICKLE_BYTES: Final = 256 << 20
_MAX_SMALL_ENTRY: Final = 64
_INFLATE_CHUNK: Final = 1 << 20
_MAX_DEFLATE_RATIO: Final = 1032  # deflate's limit: one 258-byte match per (at best) two bits of input


@dataclass(frozen=True)
class _TorchDType:
    """What a pickled `torch.float32` (etc.) global becomes."""

    dtype: DType


@dataclass(frozen=True)
class _StorageType:
    """What the pickle's `torch.FloatStorage` (etc.) global becomes: only its dtype matters, and it is not callable."""

    dtype: DType


@dataclass
class _Storage:
    """One saved storage: `numel` elements of `dtype` in `data` (None in the first pass over a legacy file, where the
    data's place is known only after the pickle). Every tensor of the storage is a view of one flat Tensor, so tensors
    that shared memory in PyTorch share one Buffer here."""

    key: str
    dtype: DType
    numel: int
    data: memoryview | None
    _flat: Tensor | None = None

    def flat(self) -> Tensor:
        if self._flat is None:
            assert self.data is not None
            self._flat = tensor_from_bytes(self.data, self.dtype, (self.numel,))
        return self._flat

    def as_dtype(self, dtype: DType) -> _Storage:
        """This storage's bytes read as `dtype` (an untyped storage of `_rebuild_tensor_v3`)."""
        if dtype is self.dtype:
            return self
        nbytes = self.numel * self.dtype.itemsize
        if nbytes % dtype.itemsize:
            raise CheckpointError(f"torch_load: storage {self.key!r} of {nbytes} bytes cannot hold {dtype.name} "
                                  "elements")
        return _Storage(self.key, dtype, nbytes // dtype.itemsize, self.data)


def _rebuild_tensor(storage: object, storage_offset: object, size: object, stride: object, *_: object) -> Tensor | None:
    """`torch._utils._rebuild_tensor(_v2)`: the tensor viewing `storage` with this offset, size and stride."""
    if not isinstance(storage, _Storage):
        raise CheckpointError(f"torch_load: a tensor is rebuilt from a {type(storage).__name__}, not a storage")
    if (type(storage_offset) is not int or not isinstance(size, tuple) or not isinstance(stride, tuple)
            or len(size) != len(stride) or not all(type(n) is int and n >= 0 for n in (*size, *stride))
            or storage_offset < 0):
        raise CheckpointError(f"torch_load: a tensor of storage {storage.key!r} has an invalid layout: offset "
                              f"{storage_offset!r:.50}, size {size!r:.100}, stride {stride!r:.100}")
    shape: tuple[int, ...] = size
    if storage.data is None:
        return None
    if math.prod(shape) == 0:
        return tensor_from_bytes(memoryview(b""), storage.dtype, shape)
    last = storage_offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
    if last >= storage.numel:
        raise CheckpointError(f"torch_load: a tensor of shape {shape} (offset {storage_offset}, stride {stride}) "
                              f"reads element {last} of storage {storage.key!r}, which has {storage.numel}")
    view = _permuted_view(storage, storage_offset, shape, stride)
    return view if view is not None else _strided_copy(storage, storage_offset, shape, stride)


def _permuted_view(storage: _Storage, offset: int, shape: tuple[int, ...], stride: tuple[int, ...]) -> Tensor | None:
    """The tensor as movement ops over the flat storage (no copy) when its layout is a permutation of a contiguous
    block, with broadcast (stride-0) axes; None for other layouts (overlapping or gapped strides)."""
    axes = sorted((i for i, (n, s) in enumerate(zip(shape, stride, strict=True)) if n > 1 and s > 0),
                  key=lambda i: -stride[i])
    expected = 1
    for i in reversed(axes):
        if stride[i] != expected:
            return None
        expected *= shape[i]
    block = storage.flat().shrink(((offset, offset + expected),)).reshape(*[shape[i] for i in axes])
    if axes:
        block = block.permute(*sorted(range(len(axes)), key=lambda k: axes[k]))
    kept = set(axes)
    return block.reshape(*[n if i in kept else 1 for i, n in enumerate(shape)]).expand(*shape)


def _numpy_dtype(dtype: DType) -> np.dtype[Any]:
    return np.dtype(np.uint16) if dtype is dtypes.bfloat16 else np.dtype(dtype.numpy_name)


def _strided_copy(storage: _Storage, offset: int, shape: tuple[int, ...], stride: tuple[int, ...]) -> Tensor:
    """Any other layout, gathered on the host now (one copy of this tensor's elements; bounds were checked)."""
    assert storage.data is not None
    flat = np.frombuffer(storage.data, dtype=_numpy_dtype(storage.dtype), count=storage.numel)
    item = flat.itemsize
    view = np.lib.stride_tricks.as_strided(flat[offset:], shape=shape, strides=[s * item for s in stride])
    dense = np.ascontiguousarray(view).reshape(-1).view(np.uint8)
    return tensor_from_bytes(dense.data, storage.dtype, shape)


def _rebuild_tensor_v3(storage: object, storage_offset: object, size: object, stride: object,  # noqa: PLR0917 (torch's)
                       requires_grad: object, backward_hooks: object, dtype: object, *_: object) -> Tensor | None:
    """`torch._utils._rebuild_tensor_v3`: an untyped (byte) storage and the tensor's dtype given separately."""
    if not isinstance(storage, _Storage) or not isinstance(dtype, _TorchDType):
        raise CheckpointError(f"torch_load: _rebuild_tensor_v3 got a {type(storage).__name__} and a "
                              f"{type(dtype).__name__}, not a storage and a dtype")
    return _rebuild_tensor(storage.as_dtype(dtype.dtype), storage_offset, size, stride)


def _rebuild_parameter(data: object, *_: object) -> object:
    """`torch._utils._rebuild_parameter(_with_state)`: a Parameter loads as its tensor."""
    return data


_ALLOWED: Final[dict[tuple[str, str], Any]] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch", "Size"): tuple,
}


class _RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that can build only dicts, lists and scalars plus the allow-listed torch rebuild functions (mapped
    to ours): anything else a pickle names is refused before it is imported, so a hostile checkpoint cannot run code."""

    def __init__(self, file: IO[bytes], name: str, load_storage: Callable[[tuple[Any, ...]], _Storage]) -> None:
        super().__init__(file)
        self.name, self.load_storage = name, load_storage

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in TORCH_STORAGES:
            return _StorageType(TORCH_STORAGES[name])
        if module == "torch.storage" and name == "UntypedStorage":
            return _StorageType(dtypes.uint8)
        if module == "torch" and name in TORCH_DTYPES:
            return _TorchDType(TORCH_DTYPES[name])
        found = _ALLOWED.get((module, name))
        if found is None:
            raise CheckpointError(f"torch_load: {self.name} asks to load {module}.{name}, which is not one of the "
                                  "tensor-rebuilding functions a PyTorch state dict uses; refusing it (torch_load "
                                  "reads tensors, dicts, lists and numbers, not pickled Python objects or whole "
                                  "models)")
        return found

    def persistent_load(self, pid: Any) -> Any:
        if (not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage" or not isinstance(pid[1], _StorageType)
                or type(pid[4]) is not int or pid[4] < 0):
            raise CheckpointError(f"torch_load: {self.name} references an unknown persistent object {pid!r:.200}")
        if len(pid) > 5 and pid[5] is not None:
            raise CheckpointError(f"torch_load: {self.name} uses storage views (PyTorch < 1.0), which are not "
                                  "supported")
        return self.load_storage(pid)


def _unpickle(file: IO[bytes], name: str, load_storage: Callable[[tuple[Any, ...]], _Storage]) -> Any:
    try:
        return _RestrictedUnpickler(file, name, load_storage).load()
    except CheckpointError:
        raise
    except Exception as e:  # a corrupt pickle fails in many ways (EOFError, UnpicklingError, TypeError, ...)
        raise CheckpointError(f"torch_load: {name} is not a readable PyTorch checkpoint ({type(e).__name__}: "
                              f"{e})") from None


def torch_load(fn: PathLike) -> dict[str, Any]:
    """The contents of a `torch.save` file (a `.pt`/`.pth` state dict) with Tensors for its tensors, without torch.

    Reads the zip format (PyTorch >= 1.6, any top folder name) and the legacy pickle format. Saved views keep their
    offset, shape and strides (a transposed weight loads transposed) and tensors that shared a storage share a Buffer.
    Storages are memory-mapped: read only when a tensor is realized (except for compressed zip entries, big-endian
    files and layouts that are not a permutation of a block, which are gathered when loaded). Nested checkpoints
    (`{"model": ..., "epoch": 3}`) come back nested. Only tensors, dicts, lists, tuples and scalars can be loaded:
    anything else in the pickle raises CheckpointError (a ValueError) without running code. What the pickle declares
    is checked against what the file holds before anything is allocated, and a compressed entry is inflated in
    chunks, never past the bytes its storage declares: a small crafted file cannot ask for gigabytes."""
    name = os.fspath(fn)
    mapped = map_file(fn)
    is_zip = bytes(mapped[:4]) == b"PK\x03\x04"  # (zipfile.is_zipfile itself raises on some damaged files)
    result = _load_zip(name, mapped) if is_zip else _load_legacy(name, mapped)
    if not isinstance(result, dict):
        raise CheckpointError(f"torch_load: {name} holds a {type(result).__name__}, not a dict of tensors")
    return result


def _load_zip(name: str, mapped: memoryview) -> Any:
    try:
        archive = zipfile.ZipFile(name)
    except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError) as e:
        raise CheckpointError(f"torch_load: {name} is a damaged zip file ({e})") from None
    with archive:
        entries = {info.filename: info for info in archive.infolist()}
        pickles = [n for n in entries if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise CheckpointError(f"torch_load: {name} is a zip file but not a PyTorch checkpoint: it needs exactly "
                                  f"one <folder>/data.pkl, found {pickles}")
        root = pickles[0].removesuffix("data.pkl")
        byteorder = _read_bounded(archive, entries[root + "byteorder"], name, _MAX_SMALL_ENTRY).decode(
            errors="replace").strip() if root + "byteorder" in entries else "little"
        if byteorder not in {"little", "big"}:
            raise CheckpointError(f"torch_load: {name} has byteorder {byteorder!r:.50}; expected little or big")
        storages: dict[str, _Storage] = {}

        def load_storage(pid: tuple[Any, ...]) -> _Storage:
            key, dtype, numel = str(pid[2]), pid[1].dtype, pid[4]
            if key not in storages:
                info = entries.get(f"{root}data/{key}")
                if info is None:
                    raise CheckpointError(f"torch_load: {name} has no data for storage {key!r} ({root}data/{key})")
                data = _storage_bytes(archive, info, mapped, name, key, numel, dtype)
                if byteorder == "big" and dtype.itemsize > 1:
                    data = np.frombuffer(data, _numpy_dtype(dtype).newbyteorder(">")).astype(
                        _numpy_dtype(dtype)).view(np.uint8).data
                storages[key] = _Storage(key, dtype, numel, data)
            found = storages[key]
            if found.dtype is not dtype or found.numel != numel:
                raise CheckpointError(f"torch_load: storage {key!r} of {name} is used as two different storages")
            return found

        if entries[pickles[0]].file_size > MAX_PICKLE_BYTES:
            raise CheckpointError(f"torch_load: {pickles[0]} in {name} declares {entries[pickles[0]].file_size} bytes; "
                                  f"a state dict's pickle is far below {MAX_PICKLE_BYTES} (the tensors' data is "
                                  "stored beside it), so the file is not a checkpoint torch_load reads")
        try:
            pickle_file = archive.open(pickles[0])
        except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError) as e:
            raise CheckpointError(f"torch_load: cannot read {pickles[0]} in {name} ({e})") from None
        with pickle_file:
            return _unpickle(pickle_file, name, load_storage)


_ZIP_ERRORS: Final = (zipfile.BadZipFile, NotImplementedError, OSError, EOFError, zlib.error)


def _read_bounded(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, limit: int) -> bytearray:
    """At most `limit` bytes of a zip entry, inflated a chunk at a time: a compressed entry that expands to more
    stops costing memory at `limit + 1` bytes, whatever its size fields claim (zipfile also stops at the declared
    uncompressed size and checks the CRC there, so a lying size is an error, not a silent truncation)."""
    out = bytearray()
    try:
        with archive.open(info) as f:
            while len(out) <= limit:
                chunk = f.read(min(_INFLATE_CHUNK, limit + 1 - len(out)))
                if not chunk:
                    break
                out += chunk
    except _ZIP_ERRORS as e:
        raise CheckpointError(f"torch_load: cannot read {info.filename} in {name} ({type(e).__name__}: {e})") from None
    if len(out) > limit:
        raise CheckpointError(f"torch_load: the zip entry {info.filename} of {name} expands past {limit} bytes, more "
                              "than it may hold")
    return out


def _storage_bytes(archive: zipfile.ZipFile, info: zipfile.ZipInfo, mapped: memoryview, name: str,  # noqa: PLR0917
                   key: str, numel: int, dtype: DType) -> memoryview:
    """The bytes of a storage the pickle declares as `numel` elements of `dtype`, checked against its zip entry
    before anything is allocated: torch.save writes each storage's bytes exactly, so an entry of another size (or a
    compressed one that could not expand to the declared size) is a damaged or crafted file."""
    nbytes = numel * dtype.itemsize
    where = f"torch_load: storage {key!r} of {name} ({info.filename})"
    if info.file_size != nbytes:
        story = "the file is truncated" if info.file_size < nbytes else "the file is damaged or crafted"
        raise CheckpointError(f"{where} holds {info.file_size} bytes but the pickle declares {numel} {dtype.name} "
                              f"elements, which are {nbytes} bytes; {story}")
    if info.compress_type == zipfile.ZIP_STORED:
        return _stored_entry(info, mapped, name)
    if info.compress_type == zipfile.ZIP_DEFLATED and nbytes > info.compress_size * _MAX_DEFLATE_RATIO + 1024:
        raise CheckpointError(f"{where} declares {nbytes} bytes, but its {info.compress_size} compressed bytes can "
                              f"expand to at most {_MAX_DEFLATE_RATIO}x that; the file is damaged or crafted")
    data = _read_bounded(archive, info, name, nbytes)
    if len(data) != nbytes:
        raise CheckpointError(f"{where} expands to {len(data)} bytes but the pickle declares {numel} {dtype.name} "
                              f"elements, which are {nbytes} bytes; the file is truncated")
    return memoryview(data)


def _stored_entry(info: zipfile.ZipInfo, mapped: memoryview, name: str) -> memoryview:
    """A stored (uncompressed) entry, as torch.save writes them: a slice of the mapping, read only when touched."""
    header = bytes(mapped[info.header_offset:info.header_offset + 30])
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise CheckpointError(f"torch_load: the zip entry {info.filename} of {name} has a damaged local header")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    start = info.header_offset + 30 + name_len + extra_len
    if start + info.file_size > len(mapped):
        raise CheckpointError(f"torch_load: the zip entry {info.filename} of {name} runs past the end of the file")
    return mapped[start:start + info.file_size]


def _load_legacy(name: str, mapped: memoryview) -> Any:
    """The pre-1.6 format: pickles of a magic number, a protocol version and system info, then the object (storages
    as persistent ids), then the list of storage keys, then each storage as an int64 element count and its bytes."""
    def no_storage(pid: tuple[Any, ...]) -> _Storage:
        raise CheckpointError(f"torch_load: {name} references a storage before its object")

    storages: dict[str, _Storage] = {}

    def record_storage(pid: tuple[Any, ...]) -> _Storage:
        key = str(pid[2])
        return storages.setdefault(key, _Storage(key, pid[1].dtype, pid[4], None))

    with open(name, "rb") as f:
        if _unpickle(f, name, no_storage) != LEGACY_MAGIC:
            raise CheckpointError(f"torch_load: {name} is not a PyTorch checkpoint (neither the zip format nor the "
                                  "legacy pickle format; tar checkpoints from PyTorch < 0.4 are not supported)")
        protocol, info = _unpickle(f, name, no_storage), _unpickle(f, name, no_storage)
        if protocol != LEGACY_PROTOCOL or not isinstance(info, dict) or info.get("little_endian") is not True:
            raise CheckpointError(f"torch_load: {name} is a legacy checkpoint of protocol {protocol!r:.50} "
                                  f"(little_endian={info.get('little_endian') if isinstance(info, dict) else None}); "
                                  f"only little-endian protocol {LEGACY_PROTOCOL} is supported")
        start = f.tell()
        _unpickle(f, name, record_storage)  # first pass: which storages, with which dtypes and sizes
        keys = _unpickle(f, name, no_storage)
        pos = f.tell()
        if not isinstance(keys, list) or sorted(map(str, keys)) != sorted(storages):
            raise CheckpointError(f"torch_load: the storage list of {name} does not match its tensors")
        for key in map(str, keys):
            storage = storages[key]
            count = int.from_bytes(mapped[pos:pos + 8], "little")
            nbytes = count * storage.dtype.itemsize
            if count != storage.numel:
                raise CheckpointError(f"torch_load: storage {key!r} of {name} is stored with {count} elements where "
                                      f"the pickle declares {storage.numel}; the file is damaged or crafted")
            if pos + 8 + nbytes > len(mapped):
                raise CheckpointError(f"torch_load: storage {key!r} of {name} declares {count} "
                                      f"{storage.dtype.name} elements ({nbytes} bytes) but only "
                                      f"{max(len(mapped) - pos - 8, 0)} bytes are left in the file; the file is "
                                      "truncated")
            storage.data = mapped[pos + 8:pos + 8 + nbytes]
            pos += 8 + nbytes
        f.seek(start)
        return _unpickle(f, name, lambda pid: storages[str(pid[2])])

"""`plygrad.frontend.nn.state`: state dicts, safetensors files and PyTorch checkpoints (tinygrad's `nn.state`).

A model is a plain object tree, so its state dict is found by walking attributes, lists, tuples and dicts: the path
to each Tensor is its key (`layers.0.weight`), which is PyTorch's key for the same layer. Loading writes into the
model's own tensors in place (`assign`), so an optimizer that already holds them keeps working.

Files are read without copying: `safe_load` and `torch_load` map the file into memory and give each Tensor a Buffer
whose bytes are staged from the mapping, so nothing is read from disk until a tensor is realized, and a tensor that
is never used (or is replaced by `load_state_dict` before it is realized) costs nothing. Files are untrusted input:
every malformed one raises a ValueError naming the file and the entry, and `torch_load` unpickles with an allow-list
of PyTorch's tensor-rebuilding functions (no arbitrary code runs, and torch is never imported).
"""

from __future__ import annotations

import itertools
import json
import math
import mmap
import os
import pickle
import struct
import time
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any, Final, cast

import numpy as np

from plygrad.frontend import scheduling
from plygrad.frontend.lazy import buffer_view, resolve_device
from plygrad.frontend.tensor import Tensor, no_grad
from plygrad.ir import DType, dtypes
from plygrad.runtime import Buffer

__all__ = [
    "CheckpointError",
    "get_parameters",
    "get_state_dict",
    "load_state_dict",
    "safe_load",
    "safe_load_metadata",
    "safe_save",
    "torch_load",
]

PathLike = str | os.PathLike[str]


# ---- state dicts ----------------------------------------------------------------------------------------------------
def get_state_dict(obj: object, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
    """Every Tensor reachable from `obj` through attributes, lists, tuples and dicts, keyed by its dotted path.

    `get_state_dict(model)` of `model.layers = [nn.Linear(2, 3)]` is `{"layers.0.weight": ..., "layers.0.bias": ...}`,
    PyTorch's names for the same model. A tensor reachable by two paths (tied weights) appears under both keys, like
    PyTorch; an object met again on the way down (a back-reference to a parent) is not walked twice.
    """
    found: dict[str, Tensor] = {}
    _walk(obj, prefix, tensor_type, found, set())
    return found


def _walk(obj: object, prefix: str, tensor_type: type, found: dict[str, Tensor], seen: set[int]) -> None:
    if isinstance(obj, tensor_type):
        found[prefix.strip(".")] = cast(Tensor, obj)
        return
    if id(obj) in seen:
        return
    items: Any
    if hasattr(obj, "_asdict"):  # a namedtuple: its field names, not its positions
        items = obj._asdict().items()
    elif isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif isinstance(getattr(obj, "__dict__", None), dict):
        items = vars(obj).items()
    else:
        return
    seen.add(id(obj))
    for key, value in list(items):
        _walk(value, f"{prefix}{key}.", tensor_type, found, seen)


def get_parameters(obj: object) -> list[Tensor]:
    """The Tensors of `get_state_dict(obj)`, each once (tied weights are one parameter), in state-dict order."""
    return list({id(t): t for t in get_state_dict(obj).values()}.values())


def load_state_dict(model: object, state_dict: Mapping[str, Tensor], strict: bool = True,  # noqa: PLR0917 (tinygrad's)
                    verbose: bool = False, consume: bool = False, realize: bool = True) -> list[Tensor]:
    """Write `state_dict`'s values into `model`'s tensors in place; return the model tensors that were loaded.

    The model's tensor objects stay the same (an optimizer holding them keeps working): each is `assign`ed its value,
    cast to the model tensor's dtype and moved to its device, and all are realized in one schedule (`realize=False`
    leaves the writes pending until the model is next realized). With `strict`, keys of the model missing from
    `state_dict` and keys of `state_dict` the model does not have raise a RuntimeError listing them all; otherwise
    they are skipped. A shape mismatch raises a ValueError naming the key and both shapes (shapes () and (1,) are
    interchangeable, as in tinygrad). `consume` deletes each loaded key from `state_dict` (a dict) to free it early.
    """
    start = time.perf_counter()
    model_state = get_state_dict(model)
    missing = [k for k in model_state if k not in state_dict]
    unexpected = [k for k in state_dict if k not in model_state]
    if strict and (missing or unexpected):
        lines = [f"load_state_dict: the state dict does not fit the {type(model).__name__} model."]
        if missing:
            lines.append(f"Missing key(s) ({len(missing)}): {', '.join(missing)}.")
        if unexpected:
            lines.append(f"Unexpected key(s) ({len(unexpected)}): {', '.join(unexpected)}.")
        lines.append("Pass strict=False to load only the keys both have.")
        raise RuntimeError(" ".join(lines))
    loaded: list[Tensor] = []
    with no_grad():
        for key, target in model_state.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                raise TypeError(f"load_state_dict: the value of {key!r} is a {type(value).__name__}, not a Tensor")
            if value.shape != target.shape:
                if {value.shape, target.shape} != {(), (1,)}:
                    raise ValueError(f"load_state_dict: shape mismatch for {key!r}: the model has shape {target.shape}"
                                     f" but the state dict has shape {value.shape}")
                value = value.reshape(target.shape)
            target.assign(_own_copy(value.cast(target.dtype).to(target.device), target))
            if consume and isinstance(state_dict, dict):
                del state_dict[key]
            loaded.append(target)
    if realize and loaded:
        unique = list({id(t): t for t in loaded}.values())
        unique[0].realize(*unique[1:])
    if verbose:
        print(f"load_state_dict: loaded {len(loaded)} tensors in {(time.perf_counter() - start) * 1e3:.1f} ms"
              + (f", skipped missing {missing}" if missing else "") + (f", ignored {unexpected}" if unexpected else ""))
    return loaded


def _own_copy(value: Tensor, target: Tensor) -> Tensor:
    """`value`, made a computation when `target` has no memory of its own: such a target takes `value`'s graph, and a
    plain view of another tensor's Buffer would leave the model sharing (and later writing into) that memory."""
    if target._is_realized() or not value._is_realized():
        return value
    return value.contiguous()


# ---- lazy tensors over host memory -------------------------------------------------------------------------------
def _tensor_from_bytes(data: memoryview, dtype: DType, shape: tuple[int, ...]) -> Tensor:
    """A tensor whose Buffer is filled from `data` (a view of a mapped file) the first time a realize needs it: until
    then nothing is read or copied."""
    device = resolve_device(None)
    buf = Buffer(device, math.prod(shape), dtype)
    # the staging table is typed `bytes`, but it only hands the value to Buffer.copyin, which takes any bytes-like
    scheduling.stage_host_data(buf, data)
    return Tensor._make(buffer_view(buf, shape), device, (buf,))


def _map_file(path: PathLike) -> memoryview:
    """The whole file as a read-only memory map (pages are read only when touched)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def _raw_bytes(t: Tensor) -> bytes:
    """The tensor's values in row-major order as raw little-endian bytes (bfloat16 as its own bits)."""
    return t._buffer().copyout()


# ---- safetensors ----------------------------------------------------------------------------------------------------
SAFETENSORS_DTYPES: Final[dict[str, DType]] = {
    "F64": dtypes.float64, "F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16,
    "I64": dtypes.int64, "I32": dtypes.int32, "I16": dtypes.int16, "I8": dtypes.int8, "U8": dtypes.uint8,
    "BOOL": dtypes.bool, "U16": dtypes.uint16, "U32": dtypes.uint32, "U64": dtypes.uint64,
}
_SAFETENSORS_CODES: Final[dict[DType, str]] = {dt: code for code, dt in SAFETENSORS_DTYPES.items()}
MAX_HEADER_BYTES: Final = 100_000_000  # the reference implementation's limit: a header is never this big


def safe_save(tensors: Mapping[str, Tensor], fn: PathLike, metadata: Mapping[str, str] | None = None) -> None:
    """Write `tensors` to `fn` in the safetensors format, with optional string-to-string `metadata`.

    The tensors are realized together (one schedule) and written in the order given, each in row-major order."""
    header: dict[str, Any] = {}
    if metadata is not None:
        bad = [k for k, v in metadata.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise ValueError(f"safe_save: metadata must map str to str (the safetensors format), not for keys {bad}")
        header["__metadata__"] = dict(metadata)
    for key, t in tensors.items():
        if not isinstance(key, str) or key == "__metadata__":
            raise ValueError(f"safe_save: {key!r} cannot be a tensor name in a safetensors file")
        if not isinstance(t, Tensor):
            raise TypeError(f"safe_save: the value of {key!r} is a {type(t).__name__}, not a Tensor")
    values = list(tensors.values())
    if values:
        values[0].realize(*values[1:])
    blobs: list[bytes] = []
    offset = 0
    for key, t in tensors.items():
        blob = _raw_bytes(t) if t.numel() else b""
        header[key] = {"dtype": _SAFETENSORS_CODES[t.dtype], "shape": list(t.shape),
                       "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # pad with spaces so the data starts 8-byte aligned, like the reference
    with open(fn, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for blob in blobs:
            f.write(blob)


def safe_load_metadata(fn: Tensor | PathLike) -> tuple[Tensor, int, dict[str, Any]]:
    """(the file as a uint8 Tensor, the byte offset where tensor data starts, the parsed JSON header) of a
    safetensors file; the user metadata is `header.get("__metadata__", {})`. The header is validated in full."""
    data, name = _source_bytes(fn)
    start, header = _parse_safetensors(data, name)
    return _tensor_from_bytes(data, dtypes.uint8, (len(data),)), start, header


def safe_load(fn: Tensor | PathLike) -> dict[str, Tensor]:
    """The tensors of a safetensors file (a path, or a uint8 Tensor of its bytes), keyed by name, in file order.

    The file is memory-mapped: each tensor's data is read from the mapping only when the tensor is realized."""
    data, name = _source_bytes(fn)
    start, header = _parse_safetensors(data, name)
    out: dict[str, Tensor] = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[key] = _tensor_from_bytes(data[start + begin:start + end], SAFETENSORS_DTYPES[info["dtype"]],
                                      tuple(info["shape"]))
    return out


def _source_bytes(fn: Tensor | PathLike) -> tuple[memoryview, str]:
    if isinstance(fn, Tensor):
        if fn.dtype is not dtypes.uint8 or fn.ndim != 1:
            raise ValueError(f"safe_load: a Tensor source must hold the file's bytes (1-d uint8), got a "
                             f"{fn.dtype.name} tensor of shape {fn.shape}")
        return memoryview(_raw_bytes(fn)), "<tensor>"
    return _map_file(fn), os.fspath(fn)


def _parse_safetensors(data: memoryview, name: str) -> tuple[int, dict[str, Any]]:
    """The data start and the validated header of the safetensors bytes `data`; ValueError if anything is off."""
    size = len(data)
    if size < 8:
        raise ValueError(f"safe_load: {name} is {size} bytes: too short for a safetensors file (it starts with an "
                         "8-byte header length); the file is truncated or not a safetensors file")
    length = int.from_bytes(data[:8], "little")
    if length > size - 8:
        raise ValueError(f"safe_load: {name} declares a {length}-byte header but the file has {size - 8} bytes after "
                         "the length field; the file is truncated or not a safetensors file")
    if length > MAX_HEADER_BYTES:
        raise ValueError(f"safe_load: {name} declares a {length}-byte header, over the format's limit of "
                         f"{MAX_HEADER_BYTES} bytes; the file is not a safetensors file")
    try:
        header = json.loads(bytes(data[8:8 + length]).decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ValueError(f"safe_load: the header of {name} is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"safe_load: the header of {name} is a JSON {type(header).__name__}, not an object")
    start, available = 8 + length, size - 8 - length
    spans: list[tuple[int, int, str]] = []
    for key, info in header.items():
        if key == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise ValueError(f"safe_load: __metadata__ of {name} must be an object of strings, got {info!r:.200}")
            continue
        spans.append(_check_entry(name, key, info, available))
    spans.sort()
    for (_, end, key), (begin, _, next_key) in itertools.pairwise(spans):
        if begin < end:
            raise ValueError(f"safe_load: in {name} the data of {key!r} and {next_key!r} overlap (byte {begin} is in "
                             "both); the file is corrupt")
    return start, header


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = [k for k, _ in pairs]
        raise ValueError(f"duplicate keys {sorted({k for k in seen if seen.count(k) > 1})}")
    return out


def _check_entry(name: str, key: str, info: Any, available: int) -> tuple[int, int, str]:
    where = f"safe_load: tensor {key!r} of {name}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise ValueError(f"{where} needs dtype, shape and data_offsets, got {info!r:.200}")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str) or code not in SAFETENSORS_DTYPES:
        raise ValueError(f"{where} has unknown dtype {code!r:.50} (known: {', '.join(SAFETENSORS_DTYPES)})")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"{where} has shape {shape!r:.200}: it must be a list of non-negative ints")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(n) is int for n in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= available):
        raise ValueError(f"{where} has data_offsets {offsets!r:.200}: they must be [begin, end] with "
                         f"0 <= begin <= end <= {available} (the bytes after the header)")
    nbytes = math.prod(shape) * SAFETENSORS_DTYPES[code].itemsize
    if offsets[1] - offsets[0] != nbytes:
        raise ValueError(f"{where}: shape {shape} of {code} needs {nbytes} bytes but data_offsets {offsets} span "
                         f"{offsets[1] - offsets[0]}")
    return offsets[0], offsets[1], key


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
            self._flat = _tensor_from_bytes(self.data, self.dtype, (self.numel,))
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
        return _tensor_from_bytes(memoryview(b""), storage.dtype, shape)
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
    return _tensor_from_bytes(dense.data, storage.dtype, shape)


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
    mapped = _map_file(fn)
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

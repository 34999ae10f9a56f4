"""`plygrad.frontend.nn.state`: state dicts, safetensors files and PyTorch checkpoints (tinygrad's `nn.state`).

A model is a plain object tree, so its state dict is found by walking attributes, lists, tuples and dicts: the path
to each Tensor is its key (`layers.0.weight`), which is PyTorch's key for the same layer. Loading writes into the
model's own tensors in place (`assign`), so an optimizer that already holds them keeps working.

Files are read without copying: `safe_load` and `torch_load` map the file into memory and give each Tensor a Buffer
whose bytes are staged from the mapping, so nothing is read from disk until a tensor is realized, and a tensor that
is never used (or is replaced by `load_state_dict` before it is realized) costs nothing. Files are untrusted input:
every malformed one raises a ValueError naming the file and the entry, and `torch_load` (`nn/checkpoint.py`) unpickles
with an allow-list of PyTorch's tensor-rebuilding functions (no arbitrary code runs, and torch is never imported).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
import time
from collections.abc import Mapping
from typing import Any, Final, cast

from plygrad.frontend.nn.checkpoint import CheckpointError, torch_load
from plygrad.frontend.nn.host import PathLike, map_file, tensor_from_bytes
from plygrad.frontend.tensor import Tensor, no_grad
from plygrad.ir import DType, dtypes

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


# ---- raw bytes -----------------------------------------------------------------------------------------------------
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
    return tensor_from_bytes(data, dtypes.uint8, (len(data),)), start, header


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
        out[key] = tensor_from_bytes(data[start + begin:start + end], SAFETENSORS_DTYPES[info["dtype"]],
                                      tuple(info["shape"]))
    return out


def _source_bytes(fn: Tensor | PathLike) -> tuple[memoryview, str]:
    if isinstance(fn, Tensor):
        if fn.dtype is not dtypes.uint8 or fn.ndim != 1:
            raise ValueError(f"safe_load: a Tensor source must hold the file's bytes (1-d uint8), got a "
                             f"{fn.dtype.name} tensor of shape {fn.shape}")
        return memoryview(_raw_bytes(fn)), "<tensor>"
    return map_file(fn), os.fspath(fn)


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

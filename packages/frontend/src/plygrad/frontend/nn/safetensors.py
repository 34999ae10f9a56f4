"""safetensors files (`nn.state` re-exports this): `safe_save`, and `safe_load` / `safe_load_metadata`, which map the
file into memory and give each Tensor a Buffer staged from the mapping, so nothing is read from disk until a tensor
is realized. A file is untrusted input: the header is validated in full (known dtypes, shapes matching byte spans,
spans inside the file and not overlapping, no duplicate keys, a bounded size) before any tensor is made, and every
malformed file raises a ValueError naming the file and the entry.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from collections.abc import Mapping
from typing import Any, Final

from plygrad.frontend.nn.host import PathLike, raw_bytes, source_bytes, tensor_from_bytes
from plygrad.frontend.tensor import Tensor
from plygrad.ir import DType, dtypes

__all__ = ["SAFETENSORS_DTYPES", "safe_load", "safe_load_metadata", "safe_save"]


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
        blob = raw_bytes(t) if t.numel() else b""
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
    data, name = source_bytes(fn, "safe_load")
    start, header = _parse_safetensors(data, name)
    return tensor_from_bytes(data, dtypes.uint8, (len(data),)), start, header


def safe_load(fn: Tensor | PathLike) -> dict[str, Tensor]:
    """The tensors of a safetensors file (a path, or a uint8 Tensor of its bytes), keyed by name, in file order.

    The file is memory-mapped: each tensor's data is read from the mapping only when the tensor is realized."""
    data, name = source_bytes(fn, "safe_load")
    start, header = _parse_safetensors(data, name)
    out: dict[str, Tensor] = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[key] = tensor_from_bytes(data[start + begin:start + end], SAFETENSORS_DTYPES[info["dtype"]],
                                      tuple(info["shape"]))
    return out


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

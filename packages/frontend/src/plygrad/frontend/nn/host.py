"""Tensors over host memory for the file readers of `nn.state`: a memory-mapped file, a Tensor whose Buffer is
filled from a view of it only when a realize needs it (so an unused tensor of a checkpoint costs nothing), and the
bytes of a file given either by path or as a uint8 Tensor (tinygrad's readers take both)."""

from __future__ import annotations

import math
import mmap
import os

from plygrad.frontend.lazy import buffer_view, resolve_device
from plygrad.frontend.realize_state import STATE
from plygrad.frontend.tensor import Tensor
from plygrad.ir import DType, dtypes
from plygrad.runtime import Buffer

PathLike = str | os.PathLike[str]


def tensor_from_bytes(data: memoryview, dtype: DType, shape: tuple[int, ...]) -> Tensor:
    """A tensor whose Buffer is filled from `data` (a view of a mapped file) the first time a realize needs it: until
    then nothing is read or copied."""
    device = resolve_device(None)
    buf = Buffer(device, math.prod(shape), dtype)
    # the staging table is typed `bytes`, but it only hands the value to Buffer.copyin, which takes any bytes-like
    STATE.stage(buf, data)
    return Tensor._make(buffer_view(buf, shape), device, (buf,))


def map_file(path: PathLike) -> memoryview:
    """The whole file as a read-only memory map (pages are read only when touched)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def raw_bytes(t: Tensor) -> bytes:
    """The tensor's values in row-major order as raw little-endian bytes (bfloat16 as its own bits)."""
    return t._buffer().copyout()


def source_bytes(fn: Tensor | PathLike, reader: str) -> tuple[memoryview, str]:
    """The bytes of a file named by path (memory-mapped) or held in a 1-d uint8 Tensor (read back once), and a name
    for error messages."""
    if isinstance(fn, Tensor):
        if fn.dtype is not dtypes.uint8 or fn.ndim != 1:
            raise ValueError(f"{reader}: a Tensor source must hold the file's bytes (1-d uint8), got a "
                             f"{fn.dtype.name} tensor of shape {fn.shape}")
        return memoryview(raw_bytes(fn)), "<tensor>"
    return map_file(fn), os.fspath(fn)

"""Tensors over host memory for the file readers of `nn.state`: a memory-mapped file, and a Tensor whose Buffer is
filled from a view of it only when a realize needs it (so an unused tensor of a checkpoint costs nothing)."""

from __future__ import annotations

import math
import mmap
import os

from plygrad.frontend import scheduling
from plygrad.frontend.lazy import buffer_view, resolve_device
from plygrad.frontend.tensor import Tensor
from plygrad.ir import DType
from plygrad.runtime import Buffer

PathLike = str | os.PathLike[str]


def tensor_from_bytes(data: memoryview, dtype: DType, shape: tuple[int, ...]) -> Tensor:
    """A tensor whose Buffer is filled from `data` (a view of a mapped file) the first time a realize needs it: until
    then nothing is read or copied."""
    device = resolve_device(None)
    buf = Buffer(device, math.prod(shape), dtype)
    # the staging table is typed `bytes`, but it only hands the value to Buffer.copyin, which takes any bytes-like
    scheduling.stage_host_data(buf, data)
    return Tensor._make(buffer_view(buf, shape), device, (buf,))


def map_file(path: PathLike) -> memoryview:
    """The whole file as a read-only memory map (pages are read only when touched)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))

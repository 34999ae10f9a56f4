"""Tensors over host memory for the file readers of `nn.state`: a memory-mapped file, a Tensor whose Buffer is
filled from a view of it only when a realize needs it (so an unused tensor of a checkpoint costs nothing), and the
bytes of a file given either by path or as a uint8 Tensor (tinygrad's readers take both).

Where the DISK backend (plygrad-disk) is installed, a tensor over bytes of a mapped file is a `Buffer.view` of that
file on DISK copied to the default device (a lazy COPY, disk.py): realizing it reads its own bytes from the file
and nothing else, and the DISK backend counts them. The readers parse the file through `map_file`'s mapping; the
mappings made here are remembered (weakly) with their files, so `tensor_from_bytes` knows where a slice of one lies.
Without plygrad-disk the tensor's Buffer is staged from the slice, read the same way on first realize."""

from __future__ import annotations

import math
import mmap
import os
import weakref
from dataclasses import dataclass
from typing import Final

import numpy as np

from plygrad.frontend import disk
from plygrad.frontend.disk import disk_device
from plygrad.frontend.lazy import buffer_view, resolve_device
from plygrad.frontend.realize_state import STATE
from plygrad.frontend.tensor import Tensor
from plygrad.ir import DType, dtypes
from plygrad.runtime import Buffer, Device

PathLike = str | os.PathLike[str]


@dataclass
class _Mapped:
    """A mapping `map_file` made: its address range, its file, and (made on first use) the file as a uint8 Buffer
    on DISK, which the tensors over slices of the mapping view."""

    mapping: weakref.ref[mmap.mmap]
    address: int
    nbytes: int
    path: str
    disk: Buffer | None = None


_MAPPED: Final[list[_Mapped]] = []  # pruned of dead mappings whenever a file is mapped


def _address(data: memoryview) -> int:
    return int(np.frombuffer(data, np.uint8).ctypes.data)


def _file_slice(data: memoryview) -> tuple[_Mapped, int] | None:
    """The live mapping `data` is a slice of, and its byte offset there; None for other memory."""
    if not data.nbytes or not data.c_contiguous:
        return None
    start = _address(data)
    for mapped in _MAPPED:
        if mapped.mapping() is not None and mapped.address <= start and start + data.nbytes <= mapped.address + \
                mapped.nbytes:
            return mapped, start - mapped.address
    return None


def tensor_from_bytes(data: memoryview, dtype: DType, shape: tuple[int, ...]) -> Tensor:
    """A tensor of `data`'s bytes (a view of a mapped file), read the first time a realize needs it: until then
    nothing is read or copied. A slice of a file `map_file` mapped is read from the file on DISK (module docstring)."""
    device = resolve_device(None)
    found = _file_slice(data) if "DISK" in Device.records() else None
    if found is not None:
        mapped, offset = found
        if mapped.disk is None:
            mapped.disk = Buffer(disk_device(mapped.path), mapped.nbytes, dtypes.uint8)
            mapped.disk.handle  # noqa: B018 - mapped now (reading nothing): the file may be deleted before a realize
        view = mapped.disk.view(offset, math.prod(shape), dtype)
        on_disk = Tensor._make(buffer_view(view, shape), view.device, (view,))
        return on_disk.to(device)
    buf = Buffer(device, math.prod(shape), dtype)
    # the staging table is typed `bytes`, but it only hands the value to Buffer.copyin, which takes any bytes-like
    STATE.stage(buf, data)
    return Tensor._make(buffer_view(buf, shape), device, (buf,))


def map_file(path: PathLike) -> memoryview:
    """The whole file as a read-only memory map (pages are read only when touched)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return memoryview(b"")
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mapping)
    _MAPPED[:] = [m for m in _MAPPED if m.mapping() is not None]
    _MAPPED.append(_Mapped(weakref.ref(mapping), _address(view), len(mapping), os.path.abspath(os.fspath(path))))
    return view


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
        part = disk.contiguous_view(fn) if disk.is_disk(fn.device) else None
        if part is not None:  # `Tensor(pathlib.Path(f))` or a slice of it: map the file, read nothing yet
            path = part.device.partition(":")[2]
            return map_file(path)[part.offset:part.offset + part.nbytes], path
        return memoryview(raw_bytes(fn)), "<tensor>"
    return map_file(fn), os.fspath(fn)

"""Disk tensors: tensors on a DISK device (`device="disk:/path/to/file"`, the plygrad-disk backend), a file mapped into
memory. No kernel runs on DISK: `to_device` reads a disk tensor's graph by copying the byte range it covers to a
compute device (a contiguous view is a `Buffer.view` copied as it is), and `write` computes a value on a compute
device and puts its bytes into the file at once (strided views by read-modify-write). docs/frontend.md, "Disk
tensors", is the user's guide; docs/frontend-internals.md, "Disk tensors", the mechanics.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from plygrad.frontend.disk_view import Strided, file_view, is_disk, spans
from plygrad.frontend.lazy import buffer_view, default_device, movement
from plygrad.frontend.realize_state import STATE
from plygrad.ir import DType, DTypeError, Ops, ShapeError, UOp, dtypes
from plygrad.runtime import Buffer

if TYPE_CHECKING:
    from plygrad.frontend.lazy import LazyTensor, Scalar
    from plygrad.frontend.tensor import Tensor

__all__ = ["compute_device", "contiguous_view", "disk_device", "is_disk", "realize", "setitem", "to_device", "write"]


def compute_device() -> str:
    """Where disk tensors are computed and read: the default device, or the CPU if DISK is the default."""
    device = default_device()
    return "CPU" if is_disk(device) else device


def disk_device(path: str | os.PathLike[str]) -> str:
    """The DISK device of a file, by its absolute path (so the name does not change with the working folder)."""
    return f"DISK:{os.path.abspath(os.fspath(path))}"


# ---- reading ----------------------------------------------------------------------------------------------------
def _disk_buffer(t: LazyTensor, node: UOp) -> Buffer:
    """The disk Buffer the BUFFER node `node` of `t`'s graph names, with any data staged for it written first
    (`Tensor(data, device="disk:...")` stages it like any tensor made from data; views of it must see it)."""
    for buf in t.inputs:
        if buf.id == node.arg.id:
            STATE.flush((buf,))
            return buf
    raise RuntimeError(f"disk tensor of shape {t.shape}: its graph reads buffer {node.arg.id}, which is not among "
                       "its inputs")


def contiguous_view(t: LazyTensor) -> Buffer | None:
    """The disk tensor `t` as a `Buffer.view` of its file, where its graph is one contiguous byte range."""
    view = file_view(t.uop)
    if not isinstance(view, Strided) or view.itemsize != t.dtype.itemsize or not view.contiguous():
        return None
    base = _disk_buffer(t, view.buffer)
    return base.view(view.offset if t.numel() else 0, t.numel(), t.dtype)


def to_device(t: Tensor, device: str) -> Tensor:
    """`t.to(device)` where `t` or `device` is a DISK device (see the module docstring)."""
    from plygrad.frontend.tensor import Tensor  # imports this module

    if is_disk(device):
        out = Tensor.empty(*t.shape, dtype=t.dtype, device=device)
        return write(out, t)
    sub = contiguous_view(t)
    if sub is not None:
        node = buffer_view(sub, t.shape)
        return Tensor._make(UOp(Ops.COPY, t.dtype, (node,), device), device, (sub,))
    # anything else is computed on `device`, over a copy of the bytes each disk buffer is read at: padded back to
    # the buffer's length (with zeros nothing reads), the graph above it is unchanged
    read = spans(file_view(t.uop))
    mapping: dict[UOp, UOp] = {}
    inputs = {buf for buf in t.inputs if not is_disk(buf.device)}
    for node in t.uop.toposort:
        if node.op is not Ops.BUFFER or not is_disk(node.arg.device):
            continue
        size, itemsize = node.arg.size, node.dtype.itemsize
        low, high = read.get(node, (0, 0))
        first, end = low // itemsize, -(-high // itemsize)
        part = _disk_buffer(t, node).view(first * itemsize, end - first, node.dtype)
        copied = UOp(Ops.COPY, node.dtype, (buffer_view(part, (end - first,)),), device)
        mapping[node] = movement(copied, Ops.PAD, ((first, size - end),)) if end - first != size else copied
        inputs.add(part)
    return Tensor._make(t.uop.substitute(mapping), device, inputs)


def realize(t: Tensor) -> None:
    """`t.realize()` of a disk tensor: a contiguous view becomes a plain view of its file (nothing is read); other
    graphs cannot be computed on DISK. Data staged for the tensor's file is written to it."""
    STATE.flush(t.inputs)
    if t._is_realized():
        return
    sub = contiguous_view(t)
    if sub is None:
        raise RuntimeError(f"realize: this disk tensor (shape {t.shape} on {t.device}) is not one contiguous range of "
                           "its file and DISK runs no kernels; read it with .to('CPU') (or .numpy()), which copies "
                           "the bytes it covers and computes the view there")
    t.uop, t.inputs = buffer_view(sub, t.shape), frozenset((sub,))


def bitcast(x: Tensor, dtype: DType) -> Tensor:
    """A disk tensor's bitcast: a view of the same bytes of the file where it is one contiguous range, else computed
    after a copy like any other graph on DISK (bitcast.py's rules either way)."""
    from plygrad.frontend.bitcast import check_resize, resized_bitcast, resized_shape
    from plygrad.frontend.tensor import Tensor  # imports this module

    if dtype.itemsize != x.dtype.itemsize:
        check_resize(x.shape, x.dtype, dtype)
    sub = contiguous_view(x)
    if sub is None:
        if dtype.itemsize != x.dtype.itemsize:
            return resized_bitcast(x, dtype)
        return x._new(UOp(Ops.BITCAST, dtype, (x.uop,)))
    shape = resized_shape(x.shape, x.dtype, dtype) if x.shape else ()
    view = sub.base.view(sub.offset, math.prod(shape), dtype)
    return Tensor._make(buffer_view(view, shape), x.device, (view,))


# ---- writing ----------------------------------------------------------------------------------------------------
def _value_bytes(value: LazyTensor | Scalar | Any, dtype: DType, shape: tuple[int, ...], op: str) -> bytes:
    """`value` computed on the compute device as `shape` of `dtype`, its bytes in row-major order."""
    from plygrad.frontend.lazy import LazyTensor
    from plygrad.frontend.tensor import Tensor  # imports this module

    device = compute_device()
    if isinstance(value, LazyTensor):
        if value.dtype is not dtype:
            raise DTypeError(f"{op}: a {value.dtype.name} value into a {dtype.name} disk tensor; cast it with "
                             f".cast(dtypes.{dtype.name}) first")
        v = value if isinstance(value, Tensor) else Tensor._make(value.uop, value.device, value.inputs)
        v = v.to(device)
    elif isinstance(value, (bool, int, float, list, tuple, np.ndarray)):  # as assign takes them: in t's dtype
        v = Tensor(value, dtype=dtype, device=device)
    else:
        raise TypeError(f"{op}: unsupported value type {type(value).__name__} (use a Tensor, a Python scalar, a "
                        "list or a NumPy array)")
    if v.shape != shape:
        try:
            v = v._broadcast_to(shape)
        except ShapeError:
            raise ShapeError(f"{op}: a value of shape {v.shape} into a disk tensor of shape {shape}; it must "
                             "broadcast to the tensor's shape") from None
    return v.contiguous()._buffer().copyout() if math.prod(shape) else b""


def write(t: Tensor, value: LazyTensor | Scalar | Any, op: str = "assign") -> Tensor:
    """Write `value` into the bytes of the file the disk tensor `t` views, now; returns `t` (which reads them)."""
    if not t.numel():  # nothing to write (an empty view may not even read its buffer): only the value is checked
        _value_bytes(value, t.dtype, t.shape, op)
        return t
    view = file_view(t.uop)
    writable = isinstance(view, Strided) and view.itemsize == t.dtype.itemsize and not view.bounds and not any(
        s == 0 and n > 1 for n, s in zip(view.shape, view.strides, strict=True))
    if not isinstance(view, Strided) or not writable:
        raise RuntimeError(f"{op}: this disk tensor (shape {t.shape} on {t.device}) is not a view of bytes of its file "
                           "(it has padding, broadcasting or arithmetic in it), so there is nowhere to write; write "
                           "into a reshape, slice, permute or flip of the disk tensor")
    raw = _value_bytes(value, t.dtype, t.shape, op)
    span = view.span()
    if span is None:
        return t
    base = _disk_buffer(t, view.buffer)
    if view.contiguous():
        base.view(view.offset, t.numel(), t.dtype).copyin(raw)
        return t
    # a strided view: the bytes it covers are read, the elements written in place by NumPy, and written back
    region = base.view(span[0], span[1] - span[0], dtypes.uint8)
    data = bytearray(region.copyout())
    covered = np.frombuffer(data, np.uint8)
    target: Any = np.lib.stride_tricks.as_strided(covered[view.offset - span[0]:], (*view.shape, view.itemsize),
                                                  (*view.strides, 1), writeable=True)
    target[...] = np.frombuffer(raw, np.uint8).reshape(*view.shape, view.itemsize)
    region.copyin(data)
    return t


def setitem(x: Tensor, index: Any, value: LazyTensor | Scalar | Any) -> None:
    """`x[index] = value` for a disk tensor: a write into the view `x[index]` (basic indexing: ints, slices with
    steps, None, ...); a value that is not a Tensor is made into one of x's dtype first."""
    from plygrad.frontend.lazy import LazyTensor
    from plygrad.frontend.tensor import Tensor  # imports this module

    if not isinstance(value, (LazyTensor, bool, int, float)):
        value = Tensor(value, dtype=x.dtype, device=compute_device())
    elif isinstance(value, LazyTensor) and value.dtype is not x.dtype:
        value = Tensor._make(value.uop, value.device, value.inputs).cast(x.dtype)
    write(x[index], value, "setitem")


def from_path(t: Tensor, path: os.PathLike[str]) -> None:
    """`Tensor(pathlib.Path(f))`: the file's bytes as a 1-d uint8 disk tensor (nothing is read)."""
    device = disk_device(path)
    buf = Buffer(device, os.path.getsize(path), dtypes.uint8)
    buf.handle  # noqa: B018 - mapped now (reading nothing): the file stays readable if it is deleted or replaced
    t.uop, t.device, t.inputs = buffer_view(buf, (buf.size,)), device, frozenset((buf,))

"""A tensor's storage: reading it as raw memory (`data`), copying it (`clone`), swapping it (`replace`, `to_`) and
making a tensor from memory outside plygrad (`from_blob`).

These work on the Tensor layer itself (they realize, and they read or rebind a tensor's Buffer), so they take the
`Tensor` class, unlike the op modules that only build graphs.

`from_blob` differs from tinygrad's on purpose: tinygrad wraps the foreign pointer without copying (the memory must
outlive the tensor), while plygrad's runtime allocates every Buffer itself, so the bytes at the address are copied
into a new Buffer when `from_blob` is called. The caller may free or change the memory right after; later changes to
it are not seen by the tensor.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from plygrad.frontend.lazy import buffer_view, resolve_device
from plygrad.frontend.realize_state import STATE
from plygrad.ir import DType, DTypeError, ShapeError, dtypes
from plygrad.runtime import Buffer

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor


def memory_format(dtype: DType) -> str:
    """The `struct` character that `memoryview.cast` accepts for `dtype` (bool '?', float32 'f', int64 'q', ...)."""
    name = dtype.numpy_name
    if dtype is dtypes.bfloat16 or name is None:
        raise DTypeError(f"data(): a {dtype.name} tensor has no memoryview format; use .float().data() or .numpy()")
    char = np.dtype(name).char
    if char == "e":  # memoryview.cast learns half floats only in Python 3.12
        raise DTypeError(f"data(): memoryview cannot hold {dtype.name} in this Python; use .float().data() or "
                         ".numpy()")
    # NumPy's 'l'/'L' are 8 bytes on LP64 but struct's native 'l' follows the C long too: use the fixed spellings
    return {"l": "q", "L": "Q"}.get(char, char) if dtype.itemsize == 8 else char


def data(t: Tensor) -> memoryview:
    """The realized contents as a memoryview of `t.shape` in the dtype's format (tinygrad's `Tensor.data`)."""
    fmt = memory_format(t.dtype)
    # typeshed types memoryview.cast by literal format only; the format here is computed
    raw: Any = memoryview(bytearray(t._buffer().copyout() if t.numel() else b""))
    return cast(memoryview, raw.cast(fmt, t.shape) if t.numel() else raw.cast(fmt))


def clone(t: Tensor, device: str | None = None) -> Tensor:
    """The same values in a new Buffer (on `device` if given): writes to either tensor do not reach the other. Like
    PyTorch's clone it is part of the graph (gradients flow back through it); like tinygrad's, `.grad` is cloned
    along."""
    copy = t.contiguous() if device is None else t.to(device).contiguous()
    if t.grad is not None:
        copy.grad = clone(t.grad, device)
    return copy


def replace(t: Tensor, x: Tensor) -> Tensor:
    """Point `t` at `x`'s graph and storage (dtype and device may change, the shape may not); returns `t`."""
    if t.shape != x.shape:
        raise ShapeError(f"replace: the new tensor has shape {x.shape}, but the tensor replaced has {t.shape}; "
                         "the shapes must match")
    t.uop, t.device, t.inputs = x.uop, x.device, x.inputs
    return t


def to_(t: Tensor, device: str) -> Tensor:
    """Move `t` (and its `.grad`) to `device` in place; returns `t`."""
    grad = t.grad.to(device) if t.grad is not None else None
    replace(t, t.to(device))
    t.grad = grad
    return t


def from_blob(cls: type[Tensor], ptr: int | ctypes.c_void_p, shape: Sequence[int], dtype: DType | None = None,
              device: str | None = None) -> Tensor:
    """A tensor of `shape` and `dtype` holding a copy of the bytes at address `ptr` (see the module docstring)."""
    dims = tuple(shape)
    if not all(type(d) is int and d >= 0 for d in dims):
        raise ShapeError(f"from_blob: shape must be ints >= 0, got {shape!r}")
    dt = dtypes.default_float if dtype is None else dtype
    address = (ptr.value or 0) if isinstance(ptr, ctypes.c_void_p) else ptr
    count = math.prod(dims)
    if count and not address:
        raise ValueError(f"from_blob: a null pointer cannot hold {count} elements of {dt.name}")
    buf = Buffer(resolve_device(device), count, dt)
    if count:
        STATE.stage(buf, ctypes.string_at(address, count * dt.itemsize))
    return cls._make(buffer_view(buf, dims), buf.device, (buf,))

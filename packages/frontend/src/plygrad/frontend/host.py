"""Host data in and out: what `Tensor(data)` makes of Python values, NumPy arrays and bytes, and what `numpy()`
gives back.

A tensor made from data allocates its Buffer at once but copies nothing: the bytes are staged with
`realize_state.STATE` and copied in the first time a realize needs the buffer, so graphs can be built (and tested)
without a backend doing any work. Python lists follow PyTorch's default dtypes, NumPy arrays keep theirs; bfloat16
and the fp8 types, which NumPy lacks, travel as their bit patterns.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from plygrad.frontend import autograd
from plygrad.frontend.host_fp8 import fp8_bytes, fp8_values, is_fp8
from plygrad.frontend.lazy import Scalar, buffer_view, is_tensor, resolve_device
from plygrad.frontend.realize_state import STATE
from plygrad.frontend.symbolic import bound_shape
from plygrad.ir import DType, DTypeError, DTypeLike, UOp, dtypes, to_dtype
from plygrad.runtime import Buffer

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

Data: TypeAlias = "Scalar | bytes | Sequence[Any] | np.ndarray[Any, Any] | os.PathLike[str]"


def numpy_dtype(dtype: DType) -> np.dtype[Any]:
    """The NumPy dtype holding `dtype`'s bytes (bfloat16 and the fp8s, which NumPy lacks, travel as their bits)."""
    if is_fp8(dtype):
        return np.dtype(np.uint8)
    return np.dtype(np.uint16) if dtype is dtypes.bfloat16 else np.dtype(dtype.numpy_name)


def _plygrad_dtype(array: np.ndarray[Any, Any]) -> DType:
    try:
        return dtypes.from_numpy_name(str(array.dtype))
    except KeyError:
        raise DTypeError(f"NumPy dtype {array.dtype} has no plygrad dtype; convert the array first "
                         f"(plygrad dtypes: {', '.join(d.name for d in dtypes.all())})") from None


def _to_bfloat16_bits(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """float32 values rounded to nearest-even bfloat16, as uint16 bit patterns."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(array, dtype=np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


def _fits(array: np.ndarray[Any, Any], dtype: DType) -> bool:
    return array.size == 0 or (dtype.min <= int(array.min()) and int(array.max()) <= dtype.max)


def init_data(t: Tensor, data: Data | Tensor, dtype_like: DTypeLike | None, device: str | None) -> None:
    """Give the new tensor `t` the graph, device and inputs of `data` (`Tensor(data, dtype, device)`)."""
    dtype = None if dtype_like is None else to_dtype(dtype_like)  # a name fails here, at the call
    if isinstance(data, os.PathLike):  # a file: its bytes as a uint8 DISK tensor, as tinygrad's Tensor(Path)
        from plygrad.frontend import disk  # imports the Tensor layer

        disk.from_path(t, data)
        if dtype is not None or device is not None:
            moved = t.bitcast(dtype) if dtype is not None else t
            moved = moved.to(device) if device is not None else moved
            t.uop, t.device, t.inputs = moved.uop, moved.device, moved.inputs
        return
    if is_tensor(data):
        moved = data.to(device) if device is not None else data
        moved = moved.cast(dtype) if dtype is not None else moved
        t.uop, t.device, t.inputs = moved.uop, moved.device, moved.inputs
        return
    t.device = resolve_device(device)
    if isinstance(data, (bytes, bytearray, memoryview)):
        _init_bytes(t, bytes(data), dtype or dtypes.uint8)
        return
    if isinstance(data, np.ndarray) and data.dtype.kind == "S":  # fixed-size byte strings: their bytes, as uint8
        data = np.ascontiguousarray(data).view(np.uint8).reshape(*data.shape, data.dtype.itemsize)
    if isinstance(data, (bool, int, float)):
        t.uop, t.inputs = UOp.const(dtypes.from_py(data) if dtype is None else dtype, data), frozenset()
        return
    array = data if isinstance(data, np.ndarray) else np.array(data)
    # Python lists follow PyTorch's defaults, not NumPy's 64-bit ones; with a dtype given they go straight to it
    # (through the defaults first, -2**63 as int64 or 1e19 as float64 would arrive wrong)
    if not isinstance(data, np.ndarray) and dtype is None:
        if array.dtype.kind == "f":
            array = array.astype(numpy_dtype(dtypes.default_float))
        elif array.dtype.kind in "iu" and _fits(array, dtypes.default_int):  # else int64, never wrapped
            array = array.astype(numpy_dtype(dtypes.default_int))
    dt = _plygrad_dtype(array) if dtype is None else dtype
    if is_fp8(dt):
        host = fp8_bytes(array, dt)
    else:
        host = _to_bfloat16_bits(array) if dt is dtypes.bfloat16 else array.astype(numpy_dtype(dt), copy=False)
    buf = Buffer(t.device, int(array.size), dt)
    STATE.stage(buf, np.ascontiguousarray(host).tobytes())
    t.uop, t.inputs = buffer_view(buf, tuple(array.shape)), frozenset((buf,))
    STATE.add_reader(t)
    STATE.add_holder(buf, t)
    autograd.record_undecided(t)


def _init_bytes(t: Tensor, raw: bytes, dtype: DType) -> None:
    """Raw bytes as a 1-d tensor, reinterpreted as `dtype` (uint8 by default), as tinygrad's `Tensor(bytes)`."""
    if len(raw) % dtype.itemsize:
        raise ValueError(f"Tensor(bytes): {len(raw)} bytes are not a whole number of {dtype.name} elements "
                         f"({dtype.itemsize} bytes each); pass dtype=dtypes.uint8 or trim the data")
    buf = Buffer(t.device, len(raw) // dtype.itemsize, dtype)
    STATE.stage(buf, raw)
    t.uop, t.inputs = buffer_view(buf, (buf.size,)), frozenset((buf,))
    STATE.add_reader(t)
    STATE.add_holder(buf, t)
    autograd.record_undecided(t)


def to_numpy(t: Tensor, buf: Buffer) -> np.ndarray[Any, Any]:
    """The values of `t`, realized in `buf`, as a NumPy array; bfloat16 and the fp8s come back as float32."""
    shape = bound_shape(t.shape)  # a symbolic tensor's buffer holds it row-major, sized for the variables' maxima
    array = np.frombuffer(buf.copyout(), dtype=numpy_dtype(t.dtype))[:math.prod(shape)].reshape(shape)
    if t.dtype is dtypes.bfloat16:
        return (array.astype(np.uint32) << 16).view(np.float32)
    if is_fp8(t.dtype):
        return fp8_values(array, t.dtype)
    return array.copy()

"""The building blocks every op family shares: an ALU node, the float input of a math function, the counter
`0..n-1`, host data in and out of the graph, and the Tensor type of a LazyTensor.

An op module may use these, other op modules' public functions and the Tensor methods; never another module's
`_private` name (packages/frontend/tests/test_private_names.py checks it; docs/frontend.md, "What an op module may
use"). This module imports no op module, so any op module can import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from plygrad.frontend.lazy import LazyTensor, buffer_view
from plygrad.frontend.randomness import stream
from plygrad.frontend.realize_state import STATE
from plygrad.ir import DType, Ops, UOp, dtypes
from plygrad.runtime import Buffer

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor


# ---- graph nodes -----------------------------------------------------------------------------------------
def alu(x: Tensor, op: Ops, *srcs: Tensor) -> Tensor:
    """The ALU op `op` of `x` and `srcs` as they are: no promotion, no broadcast (elementwise.operands does those)."""
    return x._new(x.uop.alu(op, *(s.uop for s in srcs)), *srcs)


def float_input(x: Tensor) -> Tensor:
    """Math functions act on floats; integers and bool are cast to the default float first (PyTorch)."""
    return x if x.dtype.is_float else x._cast_to(dtypes.default_float)


def int_range_uop(count: int, device: str) -> UOp:
    """0..count-1 as a graph, int32 (int64 when count does not fit)."""
    return stream.counter(count, dtypes.int32 if count < 2**31 else dtypes.int64, device)


def int_range(x: Tensor, n: int) -> Tensor:
    """0..n-1 as int32 on x's device, made in the graph (no memory): what a one-hot mask compares indices with."""
    return x._make(stream.counter(n, dtypes.int32, x.device), x.device)


def typed_like(x: Tensor, other: LazyTensor) -> Tensor:
    """`other` typed as this tensor's class (every tensor of a program is one class, the Tensor)."""
    assert isinstance(other, type(x)), f"expected a {type(x).__name__}, got {type(other).__name__}"
    return other


# ---- host data (the few ops whose result size depends on values) ----------------------------------------
def from_host(x: Tensor, array: np.ndarray[Any, Any], dtype: DType | None = None) -> Tensor:
    """A tensor on x's device holding `array` (staged on the host, copied in at the first realize). Integer
    data defaults to int32 (int64 when a value needs it), like `nonzero`'s and `one_hot`'s results."""
    if dtype is None:
        wide = array.size and max(int(array.max()), -int(array.min()) - 1) >= 2**31
        dtype = dtypes.int64 if wide else dtypes.int32
    if dtype is dtypes.bfloat16:  # NumPy has no bfloat16: stage float32, CAST in the graph
        return from_host(x, array, dtypes.float32)._cast_to(dtype)
    data = np.ascontiguousarray(array.astype(dtype.numpy_name, copy=False))
    buf = Buffer(x.device, int(data.size), dtype)
    STATE.stage(buf, data.tobytes())
    return x._make(buffer_view(buf, tuple(data.shape)), x.device, (buf,))


def read_back(x: Tensor) -> np.ndarray[Any, Any]:
    """This tensor's values on the host (realizing it)."""
    return np.asarray(x.numpy())

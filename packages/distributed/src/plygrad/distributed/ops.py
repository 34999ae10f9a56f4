"""Collectives on Tensors, staged through host memory: realize, copy to NumPy, run the provider's collective,
and make a Tensor of the result on the input's device.

The results are new tensors with no autograd history: a collective is not differentiated (DataParallel averages
gradients after `backward`, which is what training needs). bfloat16 and fp8 tensors travel as float32 and are
rounded back once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plygrad.distributed.errors import DistributedError
from plygrad.distributed.world import init
from plygrad.frontend import Tensor
from plygrad.ir.dtype import DType, dtypes
from plygrad.runtime.collectives import ReduceOp

Array = np.ndarray[Any, Any]


def reduce_op(op: str | ReduceOp) -> ReduceOp:
    """`op` as a ReduceOp ("sum", "max", "min", "mean")."""
    if isinstance(op, ReduceOp):
        return op
    try:
        return ReduceOp(op)
    except ValueError:
        known = ", ".join(o.value for o in ReduceOp)
        raise DistributedError(f"all_reduce: unknown op {op!r}; one of {known}") from None


def host_copy(t: Tensor) -> tuple[Array, DType]:
    """A writable C-contiguous NumPy copy of `t`'s values and the dtype of its elements."""
    array = np.array(t.numpy(), order="C", copy=True)
    return array, dtypes.from_numpy_name(str(array.dtype))


def _tensor_like(array: Array, like: Tensor) -> Tensor:
    return Tensor(array, dtype=like.dtype, device=like.device)


def all_reduce(t: Tensor, op: str | ReduceOp = "sum") -> Tensor:
    """A new tensor holding the element-wise `op` ("sum", "max", "min", "mean") of `t` over every rank."""
    chosen = reduce_op(op)
    if chosen is ReduceOp.MEAN and t.dtype not in dtypes.floats:
        raise DistributedError(f"all_reduce: op 'mean' needs a floating-point tensor, got {t.dtype!r}; reduce with "
                               "'sum' or cast to float first")
    array, dtype = host_copy(t)
    init().provider.all_reduce(array.data, dtype, chosen, tuple(array.shape))
    return _tensor_like(array, t)


def all_reduce_(t: Tensor, op: str | ReduceOp = "sum") -> Tensor:
    """`all_reduce` written into `t` in place (Tensor.assign); returns `t`."""
    return t.assign(all_reduce(t, op))


def broadcast(t: Tensor, src: int = 0) -> Tensor:
    """A new tensor holding rank `src`'s `t` on every rank (the others' `t` gives only the shape and dtype)."""
    array, dtype = host_copy(t)
    init().provider.broadcast(array.data, dtype, src, tuple(array.shape))
    return _tensor_like(array, t)


def all_gather(t: Tensor) -> Tensor:
    """A new tensor of shape (world_size, *t.shape): row r is rank r's `t`."""
    world = init()
    send, dtype = host_copy(t)
    recv = np.empty((world.world_size, *send.shape), dtype=send.dtype)
    world.provider.all_gather(send.data, recv.data, dtype, tuple(send.shape))
    return _tensor_like(recv, t)


def barrier() -> None:
    """Return once every rank has reached its `barrier()`."""
    init().provider.barrier()

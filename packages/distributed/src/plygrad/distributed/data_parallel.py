"""Data parallelism: every rank holds the whole model, takes its share of each batch, and the ranks average their
gradients before each optimizer step, so every rank takes the same step and the parameters stay identical.

    dp = DataParallel(model)          # rank 0's parameters (and running statistics) copied to every rank
    loss = model(x_shard).sparse_categorical_crossentropy(y_shard)
    loss.backward()
    dp.sync_gradients()               # each .grad is now the mean over the ranks
    opt.step()

Gradients travel in buckets: the gradients of one dtype concatenated into flat tensors of about `bucket_bytes`
(25 MiB, as PyTorch's DDP), one all_reduce each, instead of one collective per parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from plygrad.distributed.errors import DistributedError
from plygrad.distributed.ops import host_copy
from plygrad.distributed.world import init
from plygrad.frontend import Tensor
from plygrad.frontend.nn.state import get_parameters
from plygrad.ir.dtype import dtypes
from plygrad.runtime.collectives import ReduceOp

BUCKET_BYTES = 25 * 2**20


def buckets(tensors: Sequence[Tensor], bucket_bytes: int) -> list[list[int]]:
    """Indices of `tensors` grouped into buckets: consecutive tensors of one dtype and device, each bucket at most
    `bucket_bytes` (a tensor larger than that is a bucket of its own)."""
    groups: list[list[int]] = []
    size = 0
    for i, t in enumerate(tensors):
        nbytes = t.numel() * t.dtype.itemsize
        if groups:
            head = tensors[groups[-1][0]]
            if (head.dtype, head.device) == (t.dtype, t.device) and size + nbytes <= bucket_bytes:
                groups[-1].append(i)
                size += nbytes
                continue
        groups.append([i])
        size = nbytes
    return groups


class DataParallel:
    """Keeps a model's parameters identical across ranks: `model_or_params` is a model (its `get_parameters`), one
    Tensor or a list of Tensors. Tensors that require grad are parameters, the others (running statistics) buffers.
    In a world of one every method does nothing."""

    def __init__(self, model_or_params: object, bucket_bytes: int = BUCKET_BYTES) -> None:
        if isinstance(model_or_params, Tensor):
            tensors = [model_or_params]
        elif isinstance(model_or_params, (list, tuple)) and all(isinstance(t, Tensor) for t in model_or_params):
            tensors = list(model_or_params)
        else:
            tensors = get_parameters(model_or_params)
        if bucket_bytes < 1:
            raise DistributedError(f"DataParallel: bucket_bytes must be positive, got {bucket_bytes}")
        self.module = model_or_params
        self.params = [t for t in tensors if t.requires_grad]
        self.buffers = [t for t in tensors if not t.requires_grad]
        self.bucket_bytes = bucket_bytes
        self.world = init()
        self.broadcast_state()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped model (for `dp(x)` in place of `model(x)`)."""
        if not callable(self.module):
            raise TypeError(f"DataParallel: the wrapped {type(self.module).__name__} is not callable")
        forward: Callable[..., Any] = self.module
        return forward(*args, **kwargs)

    def broadcast_state(self) -> None:
        """Copy rank 0's parameters and buffers to every rank, in place (done at construction)."""
        if self.world.world_size == 1:
            return
        tensors = [*self.params, *self.buffers]
        for bucket in buckets(tensors, self.bucket_bytes):
            self._through_host([tensors[i] for i in bucket], lambda buf, dt, shape: self.world.provider.broadcast(
                buf, dt, 0, shape), assign=True)

    def sync_gradients(self) -> None:
        """Replace every parameter's .grad by its mean over the ranks (after `backward`, before `opt.step()`).
        Every parameter must have a gradient on every rank: one that took no part in the loss is an error."""
        if self.world.world_size == 1:
            return
        for i, p in enumerate(self.params):
            if p.grad is None:
                raise DistributedError(f"sync_gradients on rank {self.world.rank}: parameter {i} (shape {p.shape}) "
                                       "has no gradient; every parameter DataParallel syncs must take part in the "
                                       "loss (pass DataParallel only the parameters that do)")
        grads = [p.grad for p in self.params if p.grad is not None]
        for bucket in buckets(grads, self.bucket_bytes):
            means = self._through_host([grads[i] for i in bucket], lambda buf, dt, shape: self.world.provider.
                                       all_reduce(buf, dt, ReduceOp.MEAN, shape), assign=False)
            for i, mean in zip(bucket, means, strict=True):
                self.params[i].grad = mean

    def sync_buffers(self) -> None:
        """Average the floating-point buffers (BatchNorm's running statistics) over the ranks and copy the others
        from rank 0, in place: call it before evaluating or saving, so every rank holds the same state."""
        if self.world.world_size == 1:
            return
        floats = [b for b in self.buffers if b.dtype in dtypes.floats]
        others = [b for b in self.buffers if b.dtype not in dtypes.floats]
        for bucket in buckets(floats, self.bucket_bytes):
            self._through_host([floats[i] for i in bucket], lambda buf, dt, shape: self.world.provider.all_reduce(
                buf, dt, ReduceOp.MEAN, shape), assign=True)
        for bucket in buckets(others, self.bucket_bytes):
            self._through_host([others[i] for i in bucket], lambda buf, dt, shape: self.world.provider.broadcast(
                buf, dt, 0, shape), assign=True)

    def _through_host(self, tensors: list[Tensor], collective: Callable[[memoryview, Any, tuple[int, ...]], None],
                      *, assign: bool) -> list[Tensor]:
        """Run `collective` on the tensors' values concatenated into one flat host buffer; return the results as
        tensors shaped like the inputs, or write them into the inputs (`assign`)."""
        if not tensors:
            return []
        flat = tensors[0].flatten() if len(tensors) == 1 else tensors[0].flatten().cat(
            *(t.flatten() for t in tensors[1:]))
        array, dtype = host_copy(flat.detach())
        collective(array.data, dtype, tuple(array.shape))
        results: list[Tensor] = []
        offset = 0
        for t in tensors:
            n = t.numel()
            part = np.ascontiguousarray(array[offset:offset + n]).reshape(t.shape)
            results.append(Tensor(part, dtype=t.dtype, device=t.device))
            offset += n
        if assign:
            for t, new in zip(tensors, results, strict=True):
                t.assign(new)
            tensors[0].realize(*tensors[1:])
        return results

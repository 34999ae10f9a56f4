"""The optimizer base (`Optimizer`, `OptimizerGroup`) and the state helpers every optimizer in `nn.optim` uses.

`step()` builds every update as a graph and realizes the new parameters and the optimizer's state (momentum, Adam
moments, ...) with `assign`, all in ONE schedule, so a step is one trip through the scheduler however many
parameters there are. The learning rate is a 0-d Tensor (`opt.lr`) that the graph reads rather than a constant baked
into it: a schedule writes a new value into it and the step graph, and so its compiled kernels, stay the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from plygrad.frontend.tensor import Tensor
from plygrad.ir import DType, dtypes, least_upper_dtype


def _dedup(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Distinct tensors in order, by identity (`==` on Tensors builds a comparison, so `in` cannot be used)."""
    seen: set[int] = set()
    out: list[Tensor] = []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def new_state(specs: Sequence[tuple[tuple[int, ...], DType, float]], device: str) -> list[Tensor]:
    """Realized state tensors (shape, dtype, initial value), each in a Buffer of its own.

    Each starts as `empty().assign(value)`: identical lazy graphs (two `zeros(3).contiguous()`) are one hash-consed
    node, which one realize would give one shared Buffer, and state updated in place must never share memory.
    """
    state = [Tensor.empty(*shape, dtype=dt, device=device).assign(value) for shape, dt, value in specs]
    state[0].realize(*state[1:])
    for t in state:
        t.requires_grad_(False)
    return state


def _state_dtype(dt: DType) -> DType:
    """Optimizer state is kept in at least float32, so half-precision parameters still accumulate accurately."""
    return least_upper_dtype(dt, dtypes.float32) if dt.is_float else dtypes.float32


class Optimizer:
    """The base of every optimizer: holds the parameters and the learning rate; subclasses write `_step`.

    Tensors in `params` whose `requires_grad` is False (running statistics) are not trained but are realized with
    each step, so in-place updates made during the forward pass (BatchNorm's `assign`) land with it.
    """

    def __init__(self, params: Sequence[Tensor], lr: float, device: str | None = None) -> None:
        if lr < 0:
            raise ValueError(f"{type(self).__name__}: invalid learning rate {lr}; it must be >= 0")
        self.params: list[Tensor] = _dedup([t for t in params if t.requires_grad is not False])
        self.buffers: list[Tensor] = _dedup([t for t in params if t.requires_grad is False])
        if not self.params:
            raise ValueError(f"{type(self).__name__}: got no parameters to optimize (every tensor given has "
                             "requires_grad=False, or the list is empty)")
        for t in self.params:
            if t.requires_grad is None:  # tinygrad's convention: an undecided tensor handed to an optimizer trains
                t.requires_grad_(True)
        self.device = self.params[0].device if device is None else device
        self.initial_lr: float | None = None  # set by the first learning-rate schedule (PyTorch's 'initial_lr')
        lr_dtype = least_upper_dtype(dtypes.default_float, dtypes.float32)
        self.lr = Tensor(np.array(lr, dtype=np.float64), dtype=lr_dtype, device=self.device).requires_grad_(False)
        # parameters start lazy (an init graph); the in-place update needs buffers to write into
        lazy = [t for t in (*self.params, *self.buffers, self.lr) if not t._is_realized()]
        if lazy:
            lazy[0].realize(*lazy[1:])

    def _zeros_like_params(self) -> list[Tensor]:
        """One realized zero state tensor per parameter, in the parameter's state dtype, on the optimizer's device."""
        return new_state([(t.shape, _state_dtype(t.dtype), 0.0) for t in self.params], self.device)

    def zero_grad(self) -> None:
        """Forget the gradients (the next backward() starts fresh instead of adding)."""
        for t in self.params:
            t.grad = None

    def step(self) -> None:
        """One update of every parameter that has a gradient, realized in one schedule."""
        tensors = self.schedule_step()
        tensors[0].realize(*tensors[1:])

    def schedule_step(self) -> list[Tensor]:
        """Assign the updates (lazily) and return every tensor that must be realized to perform the step."""
        live = [i for i, t in enumerate(self.params) if t.grad is not None]
        updates, state = self._step(live)
        for i, update in zip(live, updates, strict=True):
            t = self.params[i]
            t.assign((t.detach() - update).cast(t.dtype))
        return [*state, *self.params, *self.buffers]

    def _step(self, live: list[int]) -> tuple[list[Tensor], list[Tensor]]:
        """The update (to subtract) of each parameter `self.params[i]` for i in `live`, and the state tensors the
        step assigns into."""
        raise NotImplementedError

    def _grad(self, i: int) -> Tensor:
        t = self.params[i]
        assert t.grad is not None
        return t.grad.detach().to(self.device).cast(_state_dtype(t.dtype))

    def _value(self, i: int) -> Tensor:
        t = self.params[i]
        return t.detach().to(self.device).cast(_state_dtype(t.dtype))


class OptimizerGroup(Optimizer):
    """Several optimizers stepped as one (one schedule), e.g. Adam for some parameters and SGD for others."""

    def __init__(self, *optimizers: Optimizer) -> None:  # no super().__init__: the members own the state
        if not optimizers:
            raise ValueError("OptimizerGroup needs at least one optimizer")
        self.optimizers = optimizers
        self.params = [t for o in optimizers for t in o.params]
        self.buffers = [t for o in optimizers for t in o.buffers]

    def __getitem__(self, i: int) -> Optimizer:
        return self.optimizers[i]

    def zero_grad(self) -> None:
        for o in self.optimizers:
            o.zero_grad()

    def schedule_step(self) -> list[Tensor]:
        return [t for o in self.optimizers for t in o.schedule_step()]

"""Optimizers (SGD, Adam, AdamW, LAMB, LARS, Muon) with PyTorch's and tinygrad's semantics, and the learning-rate
schedules (`schedules.py`, re-exported here as PyTorch's `torch.optim.lr_scheduler` names).

    opt = nn.optim.AdamW(nn.state.get_parameters(model), lr=1e-3)
    with Tensor.train():
        loss = model(x).cross_entropy(y)
        opt.zero_grad()
        loss.backward()
        opt.step()

Each optimizer only writes `_step`, the update of each parameter as a graph; the base (`Optimizer`) assigns them and
realizes the whole step, state included, in ONE schedule, however many parameters there are. The learning rate is a
0-d Tensor (`opt.lr`) that the graph reads: a schedule writes a new value into it, and the step's kernels stay.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from plygrad.frontend.nn.schedules import (
    CosineAnnealingLR,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    LRScheduler,
    MultiStepLR,
    OneCycleLR,
    SequentialLR,
    StepLR,
)
from plygrad.frontend.tensor import Tensor
from plygrad.ir import DType, dtypes, least_upper_dtype

__all__ = [
    "LAMB",
    "LARS",
    "SGD",
    "Adam",
    "AdamW",
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "Muon",
    "OneCycleLR",
    "Optimizer",
    "OptimizerGroup",
    "SequentialLR",
    "StepLR",
]


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

    def members(self) -> list[Optimizer]:
        """The optimizers whose learning rates a schedule drives (PyTorch's param groups): this one."""
        return [self]

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

    def members(self) -> list[Optimizer]:
        return [m for o in self.optimizers for m in o.members()]

    def zero_grad(self) -> None:
        for o in self.optimizers:
            o.zero_grad()

    def schedule_step(self) -> list[Tensor]:
        return [t for o in self.optimizers for t in o.schedule_step()]


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov momentum and (L2) weight decay.

    Like PyTorch: g += weight_decay * p; b = momentum * b + g; p -= lr * (g + momentum * b if nesterov else b).
    `classic=True` scales by the learning rate before the momentum (b = momentum * b + lr * g; p -= b), which differs
    from the default only when the learning rate changes during training.
    """

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False, classic: bool = False, device: str | None = None) -> None:
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: momentum ({momentum}) and weight_decay ({weight_decay}) must be >= 0")
        if nesterov and momentum == 0:
            raise ValueError("SGD: nesterov momentum needs momentum > 0")
        super().__init__(params, lr, device)
        self.momentum, self.weight_decay, self.nesterov, self.classic = momentum, weight_decay, nesterov, classic
        self.b = self._zeros_like_params() if momentum else []

    def _step(self, live: list[int]) -> tuple[list[Tensor], list[Tensor]]:
        updates: list[Tensor] = []
        for i in live:
            g = self._grad(i)
            if self.weight_decay:
                g = g + self._value(i) * self.weight_decay
            if self.classic:
                g = g * self.lr
            if self.momentum:
                b = self.b[i].assign(self.b[i] * self.momentum + g)
                g = g + b * self.momentum if self.nesterov else b
            if not self.classic:
                g = g * self.lr
            updates.append(g)
        return updates, self.b


class LAMB(Optimizer):
    """LAMB (You et al. 2019, arXiv:1904.00962): Adam's step plus decoupled weight decay, scaled per parameter by
    the trust ratio ||p|| / ||step|| (1 where either norm is 0). `adam=True` drops the trust ratio, giving AdamW.
    """

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-6, weight_decay: float = 0.0, adam: bool = False, device: str | None = None) -> None:
        if weight_decay < 0:
            raise ValueError(f"{type(self).__name__}: invalid weight_decay {weight_decay}; it must be >= 0")
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"{type(self).__name__}: betas ({b1}, {b2}) must be in [0, 1)")
        super().__init__(params, lr, device)
        self.b1, self.b2, self.eps, self.weight_decay, self.adam = b1, b2, eps, weight_decay, adam
        self.l2_decay = False  # Adam's coupled (L2) decay adds to the gradient instead; see Adam
        # b1**t and b2**t for bias correction, advanced once per step
        self.b1_t, self.b2_t = new_state([((), dtypes.float32, 1.0)] * 2, self.device)
        self.m = self._zeros_like_params()
        self.v = self._zeros_like_params()

    def _step(self, live: list[int]) -> tuple[list[Tensor], list[Tensor]]:
        b1_t = self.b1_t.assign(self.b1_t * self.b1)
        b2_t = self.b2_t.assign(self.b2_t * self.b2)
        updates: list[Tensor] = []
        for i in live:
            g = self._grad(i)
            if self.l2_decay and self.weight_decay:
                g = g + self._value(i) * self.weight_decay
            m = self.m[i].assign(self.m[i] * self.b1 + g * (1.0 - self.b1))
            v = self.v[i].assign(self.v[i] * self.b2 + g.square() * (1.0 - self.b2))
            m_hat = m / (1.0 - b1_t.cast(m.dtype))
            v_hat = v / (1.0 - b2_t.cast(v.dtype))
            up = m_hat / (v_hat.sqrt() + self.eps)
            if not self.l2_decay and self.weight_decay:
                up = up + self._value(i) * self.weight_decay
            if not self.adam:
                p_norm = self._value(i).square().sum().sqrt()
                up_norm = up.square().sum().sqrt()
                trust = (p_norm > 0).where((up_norm > 0).where(p_norm / up_norm, 1.0), 1.0)
                up = up * trust
            updates.append(up * self.lr)
        return updates, [self.b1_t, self.b2_t, *self.m, *self.v]


class AdamW(LAMB):
    """Adam with decoupled weight decay (Loshchilov & Hutter, arXiv:1711.05101): p -= lr * (adam_step + wd * p)."""

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.01, device: str | None = None) -> None:
        super().__init__(params, lr, b1, b2, eps, weight_decay, adam=True, device=device)


class Adam(LAMB):
    """Adam (Kingma & Ba, arXiv:1412.6980). `weight_decay` (keyword only, default 0; tinygrad's Adam has none) is
    PyTorch's Adam decay: L2, added to the gradient before the moments, unlike AdamW's decoupled decay."""

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-8, device: str | None = None, *, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr, b1, b2, eps, weight_decay, adam=True, device=device)
        self.l2_decay = True


class LARS(Optimizer):
    """LARS (You et al. 2017, arXiv:1708.03888) with tinygrad's options, which also make it Muon's engine.

    Per parameter p with gradient g: the trust ratio r = tcoef * |p| / (|g| + weight_decay * |p|) (1 where either
    norm is 0; r = 1 when tcoef is 0); with `pre_wd`, g += weight_decay * p; `classic` scales g by r * lr before the
    momentum, otherwise after it; momentum b = momentum * b + g, the step is g + momentum * b (`nesterov`) or b;
    with `ns_coefficients` the step (as a (rows, -1) matrix) is orthogonalized by `ns_steps` Newton-Schulz
    iterations; without `pre_wd` the decay is added after all that, decoupled: step += weight_decay * lr * p.
    """

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4,
                 ns_steps: int = 0, ns_coefficients: Sequence[float] | None = None, nesterov: bool = False,
                 classic: bool = True, pre_wd: bool = True, tcoef: float = 0.001, device: str | None = None) -> None:
        name = type(self).__name__
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"{name}: momentum ({momentum}) and weight_decay ({weight_decay}) must be >= 0")
        if nesterov and momentum == 0:
            raise ValueError(f"{name}: nesterov momentum needs momentum > 0")
        if ns_coefficients is not None and (ns_steps < 0 or not ns_coefficients):
            raise ValueError(f"{name}: Newton-Schulz needs ns_steps >= 0 and at least one coefficient, got "
                             f"ns_steps={ns_steps}, ns_coefficients={tuple(ns_coefficients)}")
        super().__init__(params, lr, device)
        self.momentum, self.wd, self.ns_steps = momentum, weight_decay, ns_steps
        self.ns_coefficients = tuple(ns_coefficients) if ns_coefficients else None
        self.nesterov, self.classic, self.pre_wd, self.tcoef = nesterov, classic, pre_wd, tcoef
        self.b = self._zeros_like_params() if momentum else []

    def _trust_ratio(self, p: Tensor, g: Tensor) -> Tensor | float:
        if self.tcoef == 0:
            return 1.0
        p_norm, g_norm = p.square().sum().sqrt(), g.square().sum().sqrt()
        ratio = p_norm * self.tcoef / (g_norm + p_norm * self.wd)
        return (p_norm > 0).where((g_norm > 0).where(ratio, 1.0), 1.0)

    def _step(self, live: list[int]) -> tuple[list[Tensor], list[Tensor]]:
        updates: list[Tensor] = []
        for i in live:
            p, g = self._value(i), self._grad(i)
            r = self._trust_ratio(p, g)
            if self.pre_wd and self.wd > 0:
                g = g + p * self.wd
            if self.classic:
                g = g * r * self.lr
            if self.momentum:
                b = self.b[i].assign(self.b[i] * self.momentum + g)
                g = g + b * self.momentum if self.nesterov else b
            if self.ns_coefficients:
                matrix = g.reshape(g.shape[0], -1) if g.ndim else g.reshape(1, 1)
                g = matrix.newton_schulz(self.ns_steps, self.ns_coefficients).reshape(g.shape)
            if not self.classic:
                g = g * r * self.lr
            if not self.pre_wd and self.wd > 0:
                g = g + p * self.lr * self.wd
            updates.append(g)
        return updates, self.b


class Muon(LARS):
    """Muon (Jordan et al., kellerjordan.github.io/posts/muon; arXiv:2502.16982): SGD with Nesterov momentum whose
    step is orthogonalized by Newton-Schulz iterations (each parameter's step as a (rows, -1) matrix), then scaled by
    the learning rate, plus decoupled weight decay lr * weight_decay * p. tinygrad's signature and defaults."""

    def __init__(self, params: Sequence[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1,
                 ns_steps: int = 5, ns_coefficients: Sequence[float] = (3.4445, -4.775, 2.0315), nesterov: bool = True,
                 device: str | None = None) -> None:
        super().__init__(params, lr, momentum, weight_decay, ns_steps, ns_coefficients, nesterov, classic=False,
                         pre_wd=False, tcoef=0.0, device=device)

"""Optimizers (SGD, Adam, AdamW, LAMB) and learning-rate schedules (PyTorch's semantics).

    opt = nn.optim.AdamW(nn.state.get_parameters(model), lr=1e-3)
    with Tensor.train():
        loss = model(x).cross_entropy(y)
        opt.zero_grad()
        loss.backward()
        opt.step()

`step()` builds every update as a graph and realizes the new parameters and the optimizer's state (momentum, Adam
moments, ...) with `assign`, all in ONE schedule, so a step is one trip through the scheduler however many
parameters there are. The learning rate is a 0-d Tensor (`opt.lr`) that the graph reads rather than a constant baked
into it: a schedule writes a new value into it and the step graph, and so its compiled kernels, stay the same.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Literal

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


def _state(specs: Sequence[tuple[tuple[int, ...], DType, float]], device: str) -> list[Tensor]:
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
        return _state([(t.shape, _state_dtype(t.dtype), 0.0) for t in self.params], self.device)

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
        self.b1_t, self.b2_t = _state([((), dtypes.float32, 1.0)] * 2, self.device)
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


# ---- learning-rate schedules ------------------------------------------------------------------------------------

def _members(optimizer: Optimizer) -> list[Optimizer]:
    """The optimizers whose learning rates a schedule drives (PyTorch's param groups)."""
    if isinstance(optimizer, OptimizerGroup):
        return [m for o in optimizer.optimizers for m in _members(o)]
    return [optimizer]


class LRScheduler:
    """The base of the schedules, with PyTorch's protocol: creating one sets the learning rate for epoch 0; each
    `step()` advances `last_epoch` and writes `get_lr()` into the optimizers' `lr` Tensors.

    Subclasses compute the learning rate in closed form from `base_lrs` and `last_epoch` (PyTorch's chained
    updates give the same values, up to rounding, when nothing else changes the learning rate).
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        self.members = _members(optimizer)
        if last_epoch == -1:
            for o in self.members:
                o.initial_lr = float(o.lr.item())
        initial = [o.initial_lr for o in self.members]
        if any(lr is None for lr in initial):
            raise ValueError(f"{type(self).__name__}: last_epoch={last_epoch} resumes a schedule, but the optimizer "
                             "has no initial_lr (create the schedule with last_epoch=-1 first)")
        self.base_lrs: list[float] = [lr for lr in initial if lr is not None]
        self.last_epoch = last_epoch
        self._last_lr: list[float] = []
        self.step()

    def get_lr(self) -> list[float]:
        """The learning rate of each member optimizer at `self.last_epoch`."""
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The learning rates the last `step()` set."""
        return list(self._last_lr)

    def step(self) -> None:
        self.last_epoch += 1
        self._last_lr = self.get_lr()
        lrs = [o.lr.assign(o.lr.full_like(value)) for o, value in zip(self.members, self._last_lr, strict=True)]
        lrs[0].realize(*lrs[1:])


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch); one function, or one per member optimizer."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
                 last_epoch: int = -1) -> None:
        n = len(_members(optimizer))
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, Sequence) else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError(f"LambdaLR: got {len(self.lr_lambdas)} lr_lambdas for {n} optimizers")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * f(self.last_epoch) for base, f in zip(self.base_lrs, self.lr_lambdas, strict=True)]


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        if step_size <= 0:
            raise ValueError(f"StepLR: step_size must be a positive int, got {step_size}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """lr = base_lr * gamma ** (number of milestones <= epoch)."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        passed = bisect.bisect_right(self.milestones, self.last_epoch)
        return [base * self.gamma ** passed for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """lr = base_lr * gamma ** epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (SGDR without restarts; past T_max
    the cosine keeps going, back up over the next T_max epochs, as in PyTorch)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,  # noqa: N803 - PyTorch's name
                 last_epoch: int = -1) -> None:
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be a positive int, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        cosine = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        return [self.eta_min + (base - self.eta_min) * cosine for base in self.base_lrs]


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin, arXiv:1708.07120): warm up from max_lr/div_factor to max_lr over
    pct_start of the steps, then anneal to max_lr/div_factor/final_div_factor (three_phase: back to the start
    first). Unlike PyTorch, `cycle_momentum` defaults to False and True is refused: momentum and betas here are
    constants of the step graph, not tensors a schedule can change.
    """

    def __init__(self, optimizer: Optimizer, max_lr: float | Sequence[float], total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: Literal["cos", "linear"] = "cos", cycle_momentum: bool = False,
                 div_factor: float = 25.0, final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1) -> None:
        if cycle_momentum:
            raise NotImplementedError("OneCycleLR: cycle_momentum=True is not supported (momentum is a constant of "
                                      "the optimizer's step graph); pass cycle_momentum=False")
        if total_steps is None:
            if epochs is None or steps_per_epoch is None or epochs <= 0 or steps_per_epoch <= 0:
                raise ValueError("OneCycleLR: give total_steps, or both epochs and steps_per_epoch (positive ints)")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0:
            raise ValueError(f"OneCycleLR: total_steps must be a positive int, got {total_steps}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: pct_start must be in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        members = _members(optimizer)
        peaks = [float(max_lr)] * len(members) if isinstance(max_lr, (int, float)) else [float(v) for v in max_lr]
        if len(peaks) != len(members):
            raise ValueError(f"OneCycleLR: got {len(peaks)} max_lr values for {len(members)} optimizers")
        self.max_lrs = peaks
        self.initial_lrs = [peak / div_factor for peak in peaks]
        self.min_lrs = [start / final_div_factor for start in self.initial_lrs]
        warm_end = float(pct_start * total_steps) - 1
        # (end step, which lr it starts from, which it ends at): 0 initial, 1 max, 2 min
        self.phases: list[tuple[float, int, int]] = [(warm_end, 0, 1), (float(total_steps - 1), 1, 2)]
        if three_phase:
            self.phases = [(warm_end, 0, 1), (float(2 * pct_start * total_steps) - 2, 1, 0),
                           (float(total_steps - 1), 0, 2)]
        if last_epoch == -1:  # the cycle starts at max_lr / div_factor, whatever the optimizer was created with
            lrs = [o.lr.assign(o.lr.full_like(start)) for o, start in zip(members, self.initial_lrs, strict=True)]
            lrs[0].realize(*lrs[1:])
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: tried to step {step} times; the schedule has total_steps="
                             f"{self.total_steps}")
        lrs: list[float] = []
        for k in range(len(self.members)):
            points = (self.initial_lrs[k], self.max_lrs[k], self.min_lrs[k])
            start_step = 0.0
            for j, (end_step, start, end) in enumerate(self.phases):
                if step <= end_step or j == len(self.phases) - 1:
                    pct = (step - start_step) / (end_step - start_step)
                    lrs.append(self._anneal(points[start], points[end], pct))
                    break
                start_step = end_step
        return lrs

"""Learning-rate schedules for `nn.optim` (PyTorch's `torch.optim.lr_scheduler` semantics; `nn.optim` re-exports
them): each writes the new rate into the optimizers' `lr` Tensors, so the step graph never changes."""

# The public signatures are PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from plygrad.frontend.nn.optim import Optimizer


class LRScheduler:
    """The base of the schedules, with PyTorch's protocol: creating one sets the learning rate for epoch 0; each
    `step()` advances `last_epoch` and writes `get_lr()` into the optimizers' `lr` Tensors.

    Subclasses compute the learning rate in closed form from `base_lrs` and `last_epoch` (PyTorch's chained
    updates give the same values, up to rounding, when nothing else changes the learning rate).
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        self.members = optimizer.members()
        if last_epoch == -1:  # the first schedule of an optimizer sets its initial rate (PyTorch's setdefault)
            for o in self.members:
                if o.initial_lr is None:
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
        n = len(optimizer.members())
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


class LinearLR(LRScheduler):
    """lr = base_lr * factor, the factor going linearly from start_factor to end_factor over total_iters epochs and
    staying there (PyTorch's LinearLR; a warmup with the defaults' shape)."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1) -> None:
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: start_factor ({start_factor}) must be in (0, 1] and end_factor "
                             f"({end_factor}) in [0, 1]")
        if total_iters <= 0:
            raise ValueError(f"LinearLR: total_iters must be a positive int, got {total_iters}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        done = min(self.last_epoch, self.total_iters) / self.total_iters
        factor = self.start_factor + (self.end_factor - self.start_factor) * done
        return [base * factor for base in self.base_lrs]


class SequentialLR(LRScheduler):
    """One schedule after another (PyTorch's SequentialLR): `schedulers[i]` drives epochs from `milestones[i - 1]`
    on, counting its own epochs from 0 there. Warmup then cosine:
    `SequentialLR(opt, [LinearLR(opt, 0.01, total_iters=w), CosineAnnealingLR(opt, T_max=n - w)], [w])`."""

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1) -> None:
        if not schedulers:
            raise ValueError("SequentialLR: needs at least one scheduler")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR: {len(schedulers)} schedulers need {len(schedulers) - 1} milestones, "
                             f"got {len(milestones)}")
        if list(milestones) != sorted(milestones):
            raise ValueError(f"SequentialLR: milestones {list(milestones)} must be increasing")
        for i, sched in enumerate(schedulers):
            if sched.optimizer is not optimizer:
                raise ValueError(f"SequentialLR: scheduler {i} ({type(sched).__name__}) drives another optimizer")
        self.schedulers, self.milestones = list(schedulers), list(milestones)
        # not LRScheduler.__init__: the schedulers made above already moved the rate away from the initial one
        self.optimizer, self.members = optimizer, optimizer.members()
        self.base_lrs = list(self.schedulers[0].base_lrs)
        self.last_epoch = last_epoch
        self._last_lr = []
        self.step()

    def get_lr(self) -> list[float]:
        index = bisect.bisect_right(self.milestones, self.last_epoch)
        sched = self.schedulers[index]
        sched.last_epoch = self.last_epoch - (self.milestones[index - 1] if index else 0)
        return sched.get_lr()


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
        members = optimizer.members()
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

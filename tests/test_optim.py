"""plygrad.frontend.nn.optim against torch.optim: the same gradients fed to both give the same parameters step by
step; LAMB against a NumPy transcription of the paper; the learning-rate schedules against
torch.optim.lr_scheduler; a step is one schedule; a small model trains the same as in PyTorch."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from plygrad.frontend import Tensor, nn, scheduling
from plygrad.frontend.nn import optim

Array = np.ndarray[Any, Any]
SHAPES = [(3, 4), (5,)]
STEPS = 4


def _params(seed: int = 0) -> list[Array]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _grads(step: int) -> list[Array]:
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def run_both(make_pg: Callable[[list[Tensor]], optim.Optimizer],
             make_torch: Callable[[list[torch.Tensor]], torch.optim.Optimizer], steps: int = STEPS,
             atol: float = 1e-5) -> None:
    """Feed the same gradients to both optimizers for `steps` steps; the parameters must agree after each."""
    start = _params()
    pg = [Tensor(p, requires_grad=True) for p in start]
    ref = [torch.tensor(p, requires_grad=True) for p in start]
    pg_opt, ref_opt = make_pg(pg), make_torch(ref)
    for step in range(steps):
        for p, r, g in zip(pg, ref, _grads(step), strict=True):
            p.grad = Tensor(g)
            r.grad = torch.from_numpy(g.copy())
        pg_opt.step()
        ref_opt.step()
        for i, (p, r) in enumerate(zip(pg, ref, strict=True)):
            np.testing.assert_allclose(p.numpy(), r.detach().numpy(), atol=atol, rtol=1e-5,
                                       err_msg=f"parameter {i} after step {step}")


@pytest.mark.parametrize("kw", [
    {},
    {"momentum": 0.9},
    {"momentum": 0.9, "nesterov": True},
    {"weight_decay": 0.1},
    {"momentum": 0.8, "weight_decay": 0.05, "nesterov": True},
])
def test_sgd_matches_torch(kw: dict[str, Any]) -> None:
    run_both(lambda ps: optim.SGD(ps, lr=0.1, **kw), lambda ps: torch.optim.SGD(ps, lr=0.1, **kw))


def test_sgd_classic_momentum_matches_torch_at_a_constant_lr() -> None:
    run_both(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, classic=True),
             lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))


def test_adam_matches_torch() -> None:
    run_both(lambda ps: optim.Adam(ps, lr=0.01), lambda ps: torch.optim.Adam(ps, lr=0.01))


def test_adamw_matches_torch() -> None:
    run_both(lambda ps: optim.AdamW(ps, lr=0.01, b1=0.8, b2=0.99, weight_decay=0.1),
             lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1))


def test_adam_weight_decay_is_l2_unlike_adamw() -> None:
    """Adam's decay goes into the gradient (and so through the moments); AdamW's is applied to the weights."""
    run_both(lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.1),
             lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1))
    with pytest.raises(AssertionError):
        run_both(lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1),
                 lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1), steps=2)


def lamb_reference(params: list[Array], grads: list[list[Array]], lr: float, b1: float, b2: float, eps: float,
                   wd: float) -> list[Array]:
    """LAMB as written in You et al. 2019 (Algorithm 2, phi = identity), in float64 NumPy."""
    x = [p.astype(np.float64) for p in params]
    m = [np.zeros_like(p) for p in x]
    v = [np.zeros_like(p) for p in x]
    for t, step_grads in enumerate(grads, start=1):
        for i, g in enumerate(step_grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            r = (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps)
            update = r + wd * x[i]
            x_norm, u_norm = np.linalg.norm(x[i]), np.linalg.norm(update)
            trust = x_norm / u_norm if x_norm > 0 and u_norm > 0 else 1.0
            x[i] = x[i] - lr * trust * update
    return x


def test_lamb_matches_the_paper() -> None:
    start = _params()
    pg = [Tensor(p, requires_grad=True) for p in start]
    opt = optim.LAMB(pg, lr=0.02, b1=0.9, b2=0.99, eps=1e-6, weight_decay=0.01)
    for step in range(STEPS):
        for p, g in zip(pg, _grads(step), strict=True):
            p.grad = Tensor(g)
        opt.step()
    want = lamb_reference(start, [_grads(s) for s in range(STEPS)], 0.02, 0.9, 0.99, 1e-6, 0.01)
    for p, w in zip(pg, want, strict=True):
        np.testing.assert_allclose(p.numpy(), w, atol=1e-5, rtol=1e-5)


def test_parameters_without_gradient_are_left_alone() -> None:
    a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
    opt = optim.SGD([a, b], lr=0.5)
    a.grad = Tensor([1.0, 1.0])
    opt.step()
    np.testing.assert_allclose(a.numpy(), [0.5, 1.5])
    np.testing.assert_allclose(b.numpy(), [3.0])
    opt.zero_grad()
    assert a.grad is None


def test_step_is_one_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    params = [Tensor(p, requires_grad=True) for p in _params()]
    opt = optim.Adam(params, lr=0.01)
    for p, g in zip(params, _grads(0), strict=True):
        p.grad = Tensor(g)
    runs: list[int] = []
    real_run = scheduling.run

    def counting_run(*args: Any, **kwargs: Any) -> Any:
        runs.append(1)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(scheduling, "run", counting_run)
    opt.step()
    assert len(runs) == 1


def test_optimizer_group_steps_each_member() -> None:
    a, b = Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)
    group = optim.OptimizerGroup(optim.SGD([a], lr=0.1), optim.SGD([b], lr=0.5))
    a.grad, b.grad = Tensor([1.0]), Tensor([1.0])
    group.step()
    np.testing.assert_allclose([a.item(), b.item()], [0.9, 0.5], rtol=1e-6)
    assert isinstance(group[1], optim.SGD)


def test_bad_hyperparameters_raise() -> None:
    p = [Tensor([1.0], requires_grad=True)]
    with pytest.raises(ValueError, match="learning rate"):
        optim.SGD(p, lr=-1.0)
    with pytest.raises(ValueError, match="no parameters"):
        optim.Adam([])
    with pytest.raises(ValueError, match="weight_decay"):
        optim.AdamW(p, weight_decay=-0.1)


# ---- learning-rate schedules --------------------------------------------------------------------------------------

SCHEDULES: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any]]] = [
    ("StepLR", lambda o: optim.StepLR(o, step_size=3, gamma=0.5),
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    ("MultiStepLR", lambda o: optim.MultiStepLR(o, milestones=[2, 5, 6], gamma=0.3),
     lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[2, 5, 6], gamma=0.3)),
    ("ExponentialLR", lambda o: optim.ExponentialLR(o, gamma=0.9),
     lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)),
    ("CosineAnnealingLR", lambda o: optim.CosineAnnealingLR(o, T_max=4, eta_min=0.01),
     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4, eta_min=0.01)),
    ("LambdaLR", lambda o: optim.LambdaLR(o, lambda e: 1 / (e + 1)),
     lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1 / (e + 1))),
    ("LinearLR", lambda o: optim.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=6),
     lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=6)),
    ("SequentialLR-warmup-cosine", lambda o: optim.SequentialLR(
        o, [optim.LinearLR(o, 0.1, total_iters=3), optim.CosineAnnealingLR(o, T_max=5, eta_min=0.01)], [3]),
     lambda o: torch.optim.lr_scheduler.SequentialLR(o, [
         torch.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=3),
         torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.01)], [3])),
    ("OneCycleLR", lambda o: optim.OneCycleLR(o, max_lr=1.0, total_steps=10),
     lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=10, cycle_momentum=False)),
    ("OneCycleLR-linear-3phase", lambda o: optim.OneCycleLR(o, max_lr=0.5, epochs=2, steps_per_epoch=5,
                                                              anneal_strategy="linear", three_phase=True),
     lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, epochs=2, steps_per_epoch=5, cycle_momentum=False,
                                                   anneal_strategy="linear", three_phase=True)),
]


@pytest.mark.parametrize(("name", "make_pg", "make_torch"), SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_schedule_matches_torch(name: str, make_pg: Callable[[Any], Any], make_torch: Callable[[Any], Any]) -> None:
    pg_opt = optim.SGD([Tensor([1.0], requires_grad=True)], lr=0.1)
    ref_opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    pg_sched, ref_sched = make_pg(pg_opt), make_torch(ref_opt)
    for epoch in range(10):
        want = ref_sched.get_last_lr()
        np.testing.assert_allclose(pg_sched.get_last_lr(), want, rtol=1e-7, err_msg=f"{name} epoch {epoch}")
        np.testing.assert_allclose(pg_opt.lr.item(), want[0], rtol=1e-6, err_msg=f"{name} epoch {epoch}")
        ref_opt.step()
        pg_sched.step()
        ref_sched.step()


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")  # torch, of _stepping
def test_schedule_changes_the_step_it_drives() -> None:
    """The lr Tensor is read by the step graph: a schedule's new value takes effect without rebuilding anything."""
    run_both(lambda ps: _stepping(optim.SGD(ps, lr=0.1, momentum=0.9), lambda o: optim.StepLR(o, 1, gamma=0.5)),
             lambda ps: _stepping(torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                                  lambda o: torch.optim.lr_scheduler.StepLR(o, 1, gamma=0.5)))


def _stepping(opt: Any, make_schedule: Callable[[Any], Any]) -> Any:
    """`opt` whose step() also advances a schedule afterwards."""
    schedule = make_schedule(opt)
    inner = opt.step

    def step() -> None:
        inner()
        schedule.step()

    opt.step = step
    return opt


def test_onecycle_refuses_momentum_cycling_and_overstepping() -> None:
    opt = optim.SGD([Tensor([1.0], requires_grad=True)], lr=0.1)
    with pytest.raises(NotImplementedError, match="cycle_momentum"):
        optim.OneCycleLR(opt, max_lr=1.0, total_steps=5, cycle_momentum=True)
    sched = optim.OneCycleLR(opt, max_lr=1.0, total_steps=2)
    sched.step()
    sched.step()
    with pytest.raises(ValueError, match="total_steps"):
        sched.step()


# ---- training end to end ------------------------------------------------------------------------------------------

def test_mlp_trains_like_torch() -> None:
    """Linear-ReLU-Linear on a regression problem: 5 Adam steps from the same weights give the same weights."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)
    ref = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
    l1, l2 = nn.Linear(3, 6), nn.Linear(6, 2)
    for layer, r in ((l1, ref[0]), (l2, ref[2])):
        layer.weight = Tensor(r.weight.detach().numpy().copy(), requires_grad=True)
        layer.bias = Tensor(r.bias.detach().numpy().copy(), requires_grad=True)
    params = [l1.weight, l1.bias, l2.weight, l2.bias]
    opt = optim.Adam([p for p in params if p is not None], lr=0.05)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.05)
    for _ in range(5):
        opt.zero_grad()
        loss = (l2(l1(Tensor(x)).relu()) - Tensor(y)).square().mean()
        loss_value = loss.item()  # before the step: a lazy loss would read the updated weights
        loss.backward()
        opt.step()
        ref_opt.zero_grad()
        ref_loss = (ref(torch.from_numpy(x)) - torch.from_numpy(y)).square().mean()
        ref_loss.backward()
        ref_opt.step()
        assert math.isclose(loss_value, ref_loss.item(), rel_tol=1e-4, abs_tol=1e-6)
    for p, r in zip(params, ref.parameters(), strict=True):
        assert p is not None
        np.testing.assert_allclose(p.numpy(), r.detach().numpy(), atol=1e-5, rtol=1e-4)

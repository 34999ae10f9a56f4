"""nn.LayerNorm2d against PyTorch (forward and gradients), and optim.LARS / optim.Muon against a NumPy transcription
of their update rules (PyTorch has no LARS, and its Muon keeps a different momentum), step by step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch_compare import compare

from plygrad.frontend import ShapeError, Tensor, nn
from plygrad.frontend.nn import optim

Array = np.ndarray[Any, Any]
SHAPES = [(4, 6), (6, 3), (5,), (2, 3, 2)]
STEPS = 3


# ---- LayerNorm2d ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm2d_normalizes_the_channels_like_torch(affine: bool) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 3, 4, 5)) * 2 + 1).astype(np.float32)
    w, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    norm = nn.LayerNorm2d(3, eps=1e-5, elementwise_affine=affine)

    def pg(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        norm.weight, norm.bias = (w, b) if affine else (None, None)
        return norm(x)

    def pt(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (3,), w if affine else None,
                                           b if affine else None, eps=1e-5)
        return y.permute(0, 3, 1, 2)

    compare(pg, pt, x, w, b, differentiable=[True, affine, affine])


def test_layernorm2d_state_dict_and_shape_check() -> None:
    norm = nn.LayerNorm2d(3)
    assert set(nn.state.get_state_dict(norm)) == {"weight", "bias"}
    assert norm.weight is not None and norm.weight.shape == (3,)
    with pytest.raises(ShapeError, match=r"LayerNorm2d.*\(N, C, H, W\)"):
        norm(Tensor.zeros(2, 3, 4))


# ---- LARS and Muon: a NumPy reference -------------------------------------------------------------------------------
def np_newton_schulz(g: Array, steps: int, coefficients: tuple[float, ...], eps: float = 1e-7) -> Array:
    if g.shape[0] > g.shape[1]:
        return np_newton_schulz(g.T, steps, coefficients, eps).T
    x = g / (np.sqrt((g * g).sum()) + eps)
    for _ in range(steps):
        gram = x @ x.T
        term, total = x, coefficients[0] * x
        for c in coefficients[1:]:
            term = gram @ term
            total = total + c * term
        x = total
    out: Array = x
    return out


def np_lars_step(p: Array, g: Array, b: Array | None, kw: dict[str, Any]) -> tuple[Array, Array | None]:
    """One LARS update of p (tinygrad's rule, written out): returns (new p, new momentum)."""
    lr, wd, tcoef, momentum = kw["lr"], kw["weight_decay"], kw["tcoef"], kw["momentum"]
    r = 1.0
    if tcoef:
        pn, gn = np.sqrt((p * p).sum()), np.sqrt((g * g).sum())
        r = tcoef * pn / (gn + wd * pn) if pn > 0 and gn > 0 else 1.0
    if kw["pre_wd"] and wd > 0:
        g = g + wd * p
    if kw["classic"]:
        g = g * r * lr
    if momentum:
        assert b is not None
        b = momentum * b + g
        g = g + momentum * b if kw["nesterov"] else b
    if kw.get("ns_coefficients"):
        g = np_newton_schulz(g.reshape(g.shape[0], -1), kw["ns_steps"], kw["ns_coefficients"]).reshape(g.shape)
    if not kw["classic"]:
        g = g * r * lr
    if not kw["pre_wd"] and wd > 0:
        g = g + wd * lr * p
    return p - g, b


LARS_DEFAULTS: dict[str, Any] = {"lr": 0.001, "momentum": 0.9, "weight_decay": 1e-4, "nesterov": False,
                                 "classic": True, "pre_wd": True, "tcoef": 0.001}
MUON_DEFAULTS: dict[str, Any] = {"lr": 0.001, "momentum": 0.95, "weight_decay": 0.1, "nesterov": True,
                                 "classic": False, "pre_wd": False, "tcoef": 0.0, "ns_steps": 5,
                                 "ns_coefficients": (3.4445, -4.775, 2.0315)}


def run_against_numpy(make: Any, kw: dict[str, Any]) -> None:
    rng = np.random.default_rng(1)
    start = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    params = [Tensor(p, requires_grad=True) for p in start]
    opt = make(params)
    ref = [p.astype(np.float64) for p in start]
    momenta: list[Array | None] = [np.zeros_like(p) if kw["momentum"] else None for p in ref]
    for step in range(STEPS):
        grads = [np.random.default_rng(50 + step * 10 + i).standard_normal(s).astype(np.float32)
                 for i, s in enumerate(SHAPES)]
        for p, g in zip(params, grads, strict=True):
            p.grad = Tensor(g)
        opt.step()
        for i, g in enumerate(grads):
            ref[i], momenta[i] = np_lars_step(ref[i], g.astype(np.float64), momenta[i], kw)
            np.testing.assert_allclose(params[i].numpy(), ref[i], rtol=2e-4, atol=2e-5,
                                       err_msg=f"parameter {i} after step {step}")


@pytest.mark.parametrize("kw", [
    {},
    {"lr": 0.1, "tcoef": 0.02, "weight_decay": 0.01},
    {"lr": 0.05, "classic": False, "nesterov": True, "momentum": 0.8},
    {"lr": 0.05, "momentum": 0.0, "tcoef": 0.0, "weight_decay": 0.0},  # plain SGD
    {"lr": 0.02, "pre_wd": False, "weight_decay": 0.3, "classic": False},
])
def test_lars_matches_numpy(kw: dict[str, Any]) -> None:
    full = {**LARS_DEFAULTS, **kw}
    run_against_numpy(lambda ps: optim.LARS(ps, **full), full)


@pytest.mark.parametrize("kw", [
    {},
    {"lr": 0.02, "momentum": 0.9, "weight_decay": 0.0, "nesterov": False},
    {"lr": 0.01, "ns_steps": 3, "ns_coefficients": (2.0, -1.5, 0.5)},
])
def test_muon_matches_numpy(kw: dict[str, Any]) -> None:
    full = {**MUON_DEFAULTS, **kw}
    muon_kw = {k: full[k] for k in ("lr", "momentum", "weight_decay", "ns_steps", "ns_coefficients", "nesterov")}
    run_against_numpy(lambda ps: optim.Muon(ps, **muon_kw), full)


def test_muon_orthogonalizes_the_step() -> None:
    """With no momentum history and no decay, one Muon step's update has singular values near 1 (times lr)."""
    rng = np.random.default_rng(2)
    w = Tensor(rng.standard_normal((8, 16)).astype(np.float32), requires_grad=True)
    before = w.numpy()
    opt = optim.Muon([w], lr=1.0, momentum=0.0, weight_decay=0.0, nesterov=False)
    w.grad = Tensor(rng.standard_normal((8, 16)).astype(np.float32))
    opt.step()
    singular = np.linalg.svd(before - w.numpy(), compute_uv=False)
    assert np.all((singular > 0.5) & (singular < 1.3)), singular  # Muon's quintic maps them into about [0.7, 1.2]


def test_lars_rejects_bad_arguments() -> None:
    w = Tensor.zeros(3).requires_grad_()
    with pytest.raises(ValueError, match="momentum"):
        optim.LARS([w], momentum=-1.0)
    with pytest.raises(ValueError, match="nesterov"):
        optim.LARS([w], momentum=0.0, nesterov=True)
    with pytest.raises(ValueError, match="Newton-Schulz"):
        optim.Muon([w], ns_coefficients=())

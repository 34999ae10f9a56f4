"""The pieces a language model's training step needs, against PyTorch: the embedding gradient as a scatter-add
(repeated ids, a GPT-2-sized vocabulary, no batch x vocabulary buffer), cross-entropy over 50257 classes without a
one-hot buffer, clip_grad_norm_ (eagerly and replayed by TinyJit), AdamW over 20 steps with decay groups and a
warmup + cosine schedule."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from plygrad.frontend import Tensor, TinyJit, dtypes, nn
from plygrad.frontend.nn import optim
from plygrad.ir import Ops, UOp

Array = np.ndarray[Any, Any]
GPT2_VOCAB = 50257


def _largest_buffer(schedule: UOp) -> int:
    """The most elements of any buffer a schedule reads or writes."""
    return max(b.arg.size for call in schedule.src for b in call.src[1:] if b.op is Ops.BUFFER)


@pytest.mark.parametrize(("vocab", "batch", "dtype"), [(GPT2_VOCAB, (4, 64), "float32"), (96, (2, 9), "float16")])
def test_embedding_gradient_is_torchs_scatter_add(vocab: int, batch: tuple[int, ...], dtype: str) -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, size=batch)
    ids.flat[:9] = 7  # one id many times, another twice, the largest and 0
    ids.flat[10], ids.flat[-1], ids.flat[11], ids.flat[12] = 3, 3, vocab - 1, 0
    table = rng.standard_normal((vocab, 16)).astype(dtype)
    upstream = rng.standard_normal((*batch, 16)).astype(dtype)
    emb = nn.Embedding(vocab, 16)
    emb.weight = Tensor(table, requires_grad=True)
    (emb(Tensor(ids.astype(np.int32))) * Tensor(upstream)).sum().backward()
    assert emb.weight.grad is not None
    n = math.prod(batch)
    if vocab == GPT2_VOCAB:
        assert _largest_buffer(emb.weight.grad.schedule()) < n * vocab // 4, "a batch x vocabulary buffer"
    got = emb.weight.grad.numpy()
    ref = torch.tensor(table.astype(np.float32), requires_grad=True)
    (torch.nn.functional.embedding(torch.from_numpy(ids), ref) * torch.from_numpy(upstream.astype(np.float32))
     ).sum().backward()
    assert ref.grad is not None
    tol = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(got.astype(np.float32), ref.grad.numpy(), rtol=tol, atol=tol)


def test_embedding_gradient_ignores_ids_outside_the_table() -> None:
    emb = nn.Embedding(5, 3)
    emb.weight = Tensor(np.ones((5, 3), np.float32), requires_grad=True)
    ids = Tensor(np.array([[4, -1, 5, 4, 0, 9]], dtype=np.int32))
    (emb(ids) * Tensor(np.arange(18, dtype=np.float32).reshape(1, 6, 3))).sum().backward()
    assert emb.weight.grad is not None
    expected = np.zeros((5, 3), np.float32)
    expected[4] = [0 + 9, 1 + 10, 2 + 11]
    expected[0] = [12, 13, 14]
    np.testing.assert_array_equal(emb.weight.grad.numpy(), expected)


def test_cross_entropy_over_a_gpt2_vocabulary() -> None:
    smoothing = 0.1
    rng = np.random.default_rng(1)
    logits = (rng.standard_normal((48, GPT2_VOCAB)) * 3).astype(np.float32)
    target = rng.integers(0, GPT2_VOCAB, size=48)
    target[::5] = -100
    x = Tensor(logits, requires_grad=True).realize()
    loss = x.cross_entropy(Tensor(target.astype(np.int32)), label_smoothing=smoothing)
    loss.backward()
    assert x.grad is not None
    assert _largest_buffer(x.grad.schedule(loss)) <= logits.size
    sizes = [b.arg.size for call in x.grad.schedule(loss).src for b in call.src[1:] if b.op is Ops.BUFFER]
    assert sum(s == logits.size for s in set(sizes)) <= 2, "only the logits and their gradient are batch x vocab"
    ref = torch.tensor(logits, requires_grad=True)
    ref_loss = torch.nn.functional.cross_entropy(ref, torch.from_numpy(target), label_smoothing=smoothing)
    ref_loss.backward()
    assert ref.grad is not None
    np.testing.assert_allclose(loss.item(), ref_loss.item(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), ref.grad.numpy(), rtol=1e-4, atol=1e-8)


def _params(seed: int) -> list[Array]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in [(6, 4), (4,), (3, 4)]]


@pytest.mark.parametrize(("max_norm", "norm_type"), [(0.5, 2.0), (100.0, 2.0), (0.3, math.inf), (1.0, 3.0)])
def test_clip_grad_norm_matches_torch(max_norm: float, norm_type: float) -> None:
    grads = _params(3)
    ps = [Tensor(np.zeros_like(g), requires_grad=True) for g in grads]
    for p, g in zip(ps, grads, strict=True):
        p.grad = Tensor(g)
    ps.append(Tensor(np.ones(2, np.float32), requires_grad=True))  # no gradient: left alone
    total = nn.utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type)
    ref = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for r, g in zip(ref, grads, strict=True):
        r.grad = torch.from_numpy(g.copy())
    ref_total = torch.nn.utils.clip_grad_norm_(ref, max_norm, norm_type=norm_type)
    np.testing.assert_allclose(total.item(), ref_total.item(), rtol=1e-6)
    for p, r in zip(ps, ref, strict=False):
        assert p.grad is not None and r.grad is not None
        np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), rtol=1e-6, atol=1e-7)
    assert ps[-1].grad is None


def test_clip_grad_norm_refuses_a_nonfinite_norm_when_asked() -> None:
    p = Tensor(np.zeros(3, np.float32), requires_grad=True)
    p.grad = Tensor(np.array([1.0, np.inf, 0.0], np.float32))
    with pytest.raises(RuntimeError, match="error_if_nonfinite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    assert math.isinf(nn.utils.clip_grad_norm_([p], 1.0).item())


def _twins(seed: int) -> tuple[list[Tensor], list[torch.Tensor]]:
    start = _params(seed)
    return ([Tensor(p, requires_grad=True) for p in start], [torch.tensor(p, requires_grad=True) for p in start])


def _warmup_cosine(opt: Any, lib: Any, warmup: int, steps: int) -> Any:
    """The same schedule in either library: LinearLR warmup, then cosine to 10%."""
    s = lib.lr_scheduler if lib is torch.optim else lib
    return s.SequentialLR(opt, [s.LinearLR(opt, 0.1, total_iters=warmup),
                                s.CosineAnnealingLR(opt, T_max=steps - warmup, eta_min=0.001)], [warmup])


def test_jitted_step_with_clipping_adamw_and_schedule_follows_torch() -> None:
    """20 steps of AdamW (weight decay on matrices only) with clipping and warmup + cosine, the step under TinyJit."""
    steps, warmup = 20, 4
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((5, 6)).astype(np.float32) for _ in range(steps)]
    ps, ref = _twins(11)
    decay, plain = [p for p in ps if p.ndim == 2], [p for p in ps if p.ndim < 2]
    opt = optim.OptimizerGroup(optim.AdamW(decay, lr=0.05, b1=0.9, b2=0.95, weight_decay=0.1),
                               optim.AdamW(plain, lr=0.05, b1=0.9, b2=0.95, weight_decay=0.0))
    ref_opt = torch.optim.AdamW([{"params": [r for r in ref if r.ndim == 2], "weight_decay": 0.1},
                                 {"params": [r for r in ref if r.ndim < 2], "weight_decay": 0.0}],
                                lr=0.05, betas=(0.9, 0.95))
    sched, ref_sched = _warmup_cosine(opt, optim, warmup, steps), _warmup_cosine(ref_opt, torch.optim, warmup, steps)

    def loss_of(x: Any, w1: Any, b1: Any, w2: Any) -> Any:
        return ((x @ w1 + b1).tanh() @ w2.T).square().mean()

    @TinyJit
    def step(x: Tensor) -> tuple[Tensor, Tensor]:
        opt.zero_grad()
        loss = loss_of(x, *ps)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(ps, 0.5)
        opt.step()
        return loss.realize(), norm.realize()

    for i, x in enumerate(xs):
        loss, norm = step(Tensor(x))
        ref_opt.zero_grad()
        ref_loss = loss_of(torch.from_numpy(x), *ref)
        ref_loss.backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref, 0.5)
        ref_opt.step()
        np.testing.assert_allclose(loss.item(), ref_loss.item(), rtol=1e-5, err_msg=f"loss at step {i}")
        np.testing.assert_allclose(norm.item(), ref_norm.item(), rtol=1e-5, err_msg=f"norm at step {i}")
        np.testing.assert_allclose(sched.get_last_lr(), ref_sched.get_last_lr(), rtol=1e-7)
        sched.step()
        ref_sched.step()
    for p, r in zip(ps, ref, strict=True):
        np.testing.assert_allclose(p.numpy(), r.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert ps[0].dtype is dtypes.float32

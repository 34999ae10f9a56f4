"""Runs of CPU kernels launched by one call (runtime batch.py, the CPU backend's batch.py) give the bits of the same
kernels launched one by one, in a plan and in a TinyJit replay."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from plygrad.backends.cpu import batch as cpu_batch
from plygrad.backends.cpu.backend import CPUBackend
from plygrad.frontend import Tensor
from plygrad.frontend.jit import TinyJit
from plygrad.runtime import clear_plans


def _calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A record of every batched launch (its kernel count), kept by wrapping the real launcher."""
    seen: list[int] = []
    launch = cpu_batch.CPUBatch.__call__

    def counted(self: cpu_batch.CPUBatch, handles: object, vals: object) -> None:
        seen.append(self.count)
        launch(self, handles, vals)  # type: ignore[arg-type]

    monkeypatch.setattr(cpu_batch.CPUBatch, "__call__", counted)
    return seen


def _model(rng: np.random.Generator) -> Callable[[Tensor], Tensor]:
    w1, w2 = (Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((48, 64), (64, 10)))
    return lambda x: ((x @ w1).relu() @ w2).log_softmax(1).sum(0) * Tensor(np.float32(3.0))


def test_a_plan_of_many_kernels_gives_the_single_launches_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((32, 48)).astype(np.float32)).realize()
    model = _model(rng)
    seen = _calls(monkeypatch)
    clear_plans()
    first = model(x).numpy()
    assert not seen, "a plan's first run launches one kernel at a time"
    batched = model(x).numpy()
    assert seen and max(seen) >= 2, f"the forward's kernels should run in batches: {seen}"
    np.testing.assert_array_equal(batched, first)
    monkeypatch.setattr(CPUBackend, "batch", lambda self, entries: None)
    clear_plans()
    model(x).numpy()
    single = model(x).numpy()
    np.testing.assert_array_equal(batched, single)


def test_a_jit_replay_gives_the_eager_bits_through_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    model = _model(rng)
    step = TinyJit(lambda x: model(x).realize())
    inputs = [Tensor(rng.standard_normal((32, 48)).astype(np.float32)).realize() for _ in range(4)]
    seen = _calls(monkeypatch)
    replayed = [step(x).numpy().copy() for x in inputs]
    assert seen, "the replays should launch in batches"
    for x, got in zip(inputs, replayed, strict=True):
        np.testing.assert_array_equal(got, model(x).numpy())

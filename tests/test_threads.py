"""Threads (docs/threads.md): separate TinyJit functions and eager work run side by side, each thread keeps its own
"current" state (the capture a TinyJit records into, the chosen scheduler, grad mode), and a cold process opens its
backends once even when many threads ask at the same moment. Every result is checked against NumPy.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from plygrad.frontend import Tensor, no_grad, scheduling
from plygrad.frontend.jit import JitError, TinyJit
from plygrad.frontend.nn import optim
from plygrad.frontend.realize_state import STATE
from plygrad.runtime.testing import fine_thread_switching

Array = np.ndarray[Any, Any]
JOIN_TIMEOUT_S = 120.0
ROUNDS = 3  # the interleaving that records one thread's kernels into another's capture is not certain


def _run_threads(workers: list[Callable[[], None]]) -> None:
    """Start every worker at once (a barrier), join them, and re-raise the first failure with its thread named."""
    barrier = threading.Barrier(len(workers))
    errors: list[tuple[int, BaseException]] = []

    def wrap(i: int, work: Callable[[], None]) -> Callable[[], None]:
        def body() -> None:
            try:
                barrier.wait()
                work()
            except BaseException as exc:  # reported by the main thread below
                errors.append((i, exc))
        return body

    threads = [threading.Thread(target=wrap(i, w), name=f"worker-{i}") for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    if errors:
        i, exc = errors[0]
        raise AssertionError(f"worker {i} failed ({len(errors)} of {len(workers)} failed): {exc!r}") from exc


@pytest.fixture
def busy_switching() -> Iterator[None]:
    with fine_thread_switching():
        yield


@pytest.mark.usefixtures("busy_switching")
def test_separate_jit_functions_beside_eager_work_are_all_correct() -> None:
    n_jit, n_eager, calls = 4, 2, 8
    rng = np.random.default_rng(1)
    jit_inputs = [[rng.standard_normal((16, 8)).astype(np.float32) for _ in range(calls)] for _ in range(n_jit)]
    eager_inputs = [[rng.standard_normal((8, 8)).astype(np.float32) for _ in range(calls)] for _ in range(n_eager)]
    recording = threading.Barrier(n_jit + n_eager)  # every JIT records while every other thread is busy too
    wrong: list[str] = []

    def jit_worker(k: int) -> Callable[[], None]:
        scale = float(k + 2)

        @TinyJit
        def f(x: Tensor) -> Tensor:  # a different function per thread: its own graph, kernels and capture
            y = (x * scale + k).relu().realize()  # several runs per call: a longer window for another thread
            z = (y - x).realize()
            return z.sum(1)

        def work() -> None:
            for i, a in enumerate(jit_inputs[k]):
                if i == 1:
                    recording.wait()
                got = f(Tensor(a)).numpy()
                want = (np.maximum(a * scale + k, 0) - a).sum(1)
                if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                    wrong.append(f"jit {k} call {i}")
        return work

    def eager_worker(k: int) -> Callable[[], None]:
        def work() -> None:
            for i, a in enumerate(eager_inputs[k]):
                if i == 1:
                    recording.wait()
                got = (Tensor(a) @ Tensor(a) + k).exp2().mean(0).numpy()
                want = np.exp2(a @ a + k).mean(0)
                if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
                    wrong.append(f"eager {k} call {i}")
        return work

    for _ in range(ROUNDS):  # fresh TinyJit objects each round: each round records again
        _run_threads([jit_worker(k) for k in range(n_jit)] + [eager_worker(k) for k in range(n_eager)])
    assert not wrong, f"{len(wrong)} of {ROUNDS * (n_jit + n_eager) * calls} results wrong: {wrong}"


def _train(seed: int, steps: int = 15) -> list[float]:
    """Fit a linear layer to a random linear map with SGD; the loss of every step (no random draws from plygrad,
    so the result does not depend on how threads interleave their draws of the shared generator)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    y = x @ rng.standard_normal((4, 1)).astype(np.float32)
    w = Tensor(rng.standard_normal((4, 1)).astype(np.float32), requires_grad=True)
    b = Tensor(np.zeros(1, np.float32), requires_grad=True)
    opt = optim.SGD([w, b], lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((Tensor(x) @ w + b - Tensor(y)) ** 2).mean()
        loss.backward()
        opt.step()  # under no_grad, which must stay this thread's business
        losses.append(loss.item())
    return losses


@pytest.mark.usefixtures("busy_switching")
def test_training_in_threads_matches_training_one_after_another() -> None:
    seeds = range(4)
    alone = [_train(s) for s in seeds]
    together: dict[int, list[float]] = {}
    _run_threads([lambda s=s: together.__setitem__(s, _train(s)) for s in seeds])
    assert [together[s] for s in seeds] == alone
    assert all(losses[-1] < losses[0] for losses in alone), "the fits make progress"


_COLD_START = textwrap.dedent("""
    import threading
    from plygrad.frontend import Tensor
    N = 8
    barrier = threading.Barrier(N)
    results = [None] * N
    def work(i):
        barrier.wait()
        try:
            results[i] = Tensor.ones(4).sum().item()
        except Exception as exc:
            results[i] = repr(exc)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(results)
""")


@pytest.mark.parametrize("attempt", range(3))
def test_threads_whose_first_action_opens_the_backend_all_succeed(attempt: int) -> None:
    done = subprocess.run([sys.executable, "-c", _COLD_START], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([4.0] * 8), f"attempt {attempt}: {done.stdout}{done.stderr}"


def test_the_scheduler_chosen_in_one_thread_is_not_used_by_another() -> None:
    chosen = threading.Event()
    release = threading.Event()
    seen: dict[str, tuple[str, int]] = {}
    a = np.arange(12, dtype=np.float32)

    def kernels_of(name: str) -> None:
        with STATE.capturing() as capture:
            out = ((Tensor(a) + 1) * 2).numpy()
        np.testing.assert_allclose(out, (a + 1) * 2)
        seen[name] = (scheduling.scheduler_name(), capture.kernel_count)

    def unfused() -> None:
        with Tensor.scheduler("unfused"):
            chosen.set()
            kernels_of("unfused")
            release.wait(JOIN_TIMEOUT_S)  # hold the choice while the other thread realizes

    def default() -> None:
        try:
            chosen.wait(JOIN_TIMEOUT_S)
            kernels_of("default")
        finally:
            release.set()

    _run_threads([unfused, default])
    assert seen["unfused"][0] == "unfused" and seen["default"][0] == scheduling.scheduler_name()
    assert seen["unfused"][1] > seen["default"][1] == 1, seen


def test_grad_mode_is_per_thread() -> None:
    inside = threading.Event()
    release = threading.Event()
    flags: dict[str, bool | None] = {}

    def off() -> None:
        with no_grad():
            inside.set()
            release.wait(JOIN_TIMEOUT_S)
            flags["no_grad thread"] = (Tensor.ones(2, requires_grad=True) * 2).requires_grad

    def on() -> None:
        try:
            inside.wait(JOIN_TIMEOUT_S)
            flags["other thread"] = (Tensor.ones(2, requires_grad=True) * 2).requires_grad
        finally:
            release.set()

    _run_threads([off, on])
    assert flags == {"no_grad thread": False, "other thread": True}
    assert not Tensor.no_grad


def test_one_tinyjit_entered_from_two_threads_at_once_is_refused() -> None:
    entered = threading.Event()
    release = threading.Event()

    @TinyJit
    def slow(x: Tensor) -> Tensor:
        entered.set()
        release.wait(JOIN_TIMEOUT_S)
        return x + 1

    refused: list[BaseException] = []

    def first() -> None:
        try:
            np.testing.assert_allclose(slow(Tensor([1.0])).numpy(), [2.0])
        finally:
            entered.set()  # never leave the other thread waiting when this one fails

    def second() -> None:
        entered.wait(JOIN_TIMEOUT_S)
        try:
            slow(Tensor([1.0]))
        except JitError as exc:
            refused.append(exc)
        finally:
            release.set()

    _run_threads([first, second])
    assert len(refused) == 1 and "another thread" in str(refused[0])

"""Per-thread "current" state of the frontend (docs/threads.md): the chosen scheduler, grad mode and training mode
belong to the thread that set them, the shared random generator hands each draw its own counter range, and one
TinyJit object refuses a second caller while it is busy. Graph building only: no scheduler or backend is needed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from plygrad.frontend import Tensor, enable_grad, no_grad, scheduling
from plygrad.frontend.jit import JitError, TinyJit
from plygrad.frontend.randomness import stream as random
from plygrad.frontend.realize_state import STATE
from plygrad.runtime.testing import fine_thread_switching

WAIT_S = 60.0


@pytest.fixture(autouse=True)
def busy_switching() -> Iterator[None]:
    with fine_thread_switching():
        yield


def _run(*workers: Callable[[], None]) -> None:
    """Run each worker in its own thread; re-raise the first failure here."""
    errors: list[BaseException] = []

    def body(work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


def _in_order(n: int) -> list[threading.Event]:
    """Events to force one interleaving of steps across threads: step i waits for event i-1 and sets event i."""
    return [threading.Event() for _ in range(n)]


def test_use_scheduler_is_seen_only_by_its_thread() -> None:
    steps = _in_order(2)
    seen: dict[str, str] = {}

    def chooser() -> None:
        with Tensor.scheduler("unfused"):
            steps[0].set()
            steps[1].wait(WAIT_S)
            seen["chooser"] = scheduling.scheduler_name()

    def other() -> None:
        steps[0].wait(WAIT_S)
        seen["other"] = scheduling.scheduler_name()
        steps[1].set()

    _run(chooser, other)
    assert seen == {"chooser": "unfused", "other": "default"}
    assert scheduling.scheduler_name() == "default"


def test_capturing_in_one_thread_is_not_current_in_another() -> None:
    steps = _in_order(2)
    current: dict[str, object] = {}

    def recorder() -> None:
        with STATE.capturing() as capture:
            steps[0].set()
            steps[1].wait(WAIT_S)
            current["recorder"] = STATE.capture() is capture

    def other() -> None:
        steps[0].wait(WAIT_S)
        current["other"] = STATE.capture()
        steps[1].set()

    _run(recorder, other)
    assert current == {"recorder": True, "other": None}


def test_interleaved_no_grad_blocks_leave_no_thread_stuck() -> None:
    # A enters, B enters, A leaves, B leaves: with one process-wide flag, B restores the True it saw on entry
    steps = _in_order(4)
    after: dict[str, bool] = {}

    def a() -> None:
        with no_grad():
            steps[0].set()
            steps[1].wait(WAIT_S)
        after["a"] = Tensor.no_grad
        steps[2].set()

    def b() -> None:
        steps[0].wait(WAIT_S)
        with no_grad():
            assert Tensor.no_grad
            steps[1].set()
            steps[2].wait(WAIT_S)
        after["b"] = Tensor.no_grad

    _run(a, b)
    assert after == {"a": False, "b": False} and not Tensor.no_grad


def test_grad_mode_of_one_thread_does_not_reach_another() -> None:
    steps = _in_order(2)
    requires: dict[str, bool | None] = {}

    def off() -> None:
        Tensor.no_grad = True  # tinygrad's spelling: the calling thread's flag
        try:
            steps[0].set()
            steps[1].wait(WAIT_S)
            requires["off"] = (Tensor([1.0, 2.0], requires_grad=True) * 2).requires_grad
            with enable_grad():
                requires["off, enable_grad"] = (Tensor([1.0, 2.0], requires_grad=True) * 2).requires_grad
        finally:
            Tensor.no_grad = False

    def on() -> None:
        steps[0].wait(WAIT_S)
        requires["on"] = (Tensor([1.0, 2.0], requires_grad=True) * 2).requires_grad
        steps[1].set()

    _run(off, on)
    assert requires == {"off": False, "off, enable_grad": True, "on": True}


def test_training_mode_is_per_thread_and_new_threads_start_in_eval_mode() -> None:
    seen: dict[str, bool] = {}
    with Tensor.train():
        _run(lambda: seen.__setitem__("new thread", Tensor.training))
        seen["main"] = Tensor.training
    assert seen == {"new thread": False, "main": True} and not Tensor.training


def test_concurrent_draws_take_distinct_counter_ranges() -> None:
    threads, draws, n = 4, 50, 3
    offsets: list[list[int]] = [[] for _ in range(threads)]
    start = random._STATE.offset

    def drawer(k: int) -> Callable[[], None]:
        def work() -> None:
            for _ in range(draws):
                before = random.drawn_here()
                Tensor.rand(n)
                assert random.drawn_here() == before + n, "drawn_here counts only this thread's draws"
            offsets[k].append(random.drawn_here())
        return work

    _run(*(drawer(k) for k in range(threads)))
    assert offsets == [[draws * n]] * threads
    assert random._STATE.offset - start == threads * draws * n, "no draw's counter range was lost or shared"


def test_one_tinyjit_refuses_a_second_thread_while_busy_and_serves_it_after() -> None:
    steps = _in_order(2)
    outcomes: list[Any] = []

    @TinyJit
    def wait_for_release(tag: str) -> str:
        steps[0].set()
        steps[1].wait(WAIT_S)
        return tag

    def first() -> None:
        try:
            outcomes.append(wait_for_release("first"))
        finally:
            steps[0].set()

    def second() -> None:
        steps[0].wait(WAIT_S)
        try:
            with pytest.raises(JitError, match=r"while another thread .* is inside it"):
                wait_for_release("second")
        finally:
            steps[1].set()

    _run(first, second)
    assert outcomes == ["first"]
    outcome: list[str] = []
    wait_for_release.reset()  # so the next call runs plainly: recording would refuse the str it returns
    _run(lambda: outcome.append(wait_for_release("later")))  # one after another, from another thread: fine
    assert outcome == ["later"] and wait_for_release.cnt == 1


def test_a_tinyjit_calling_itself_is_refused() -> None:
    @TinyJit
    def recurse(depth: int) -> int:
        return depth if depth == 0 else recurse(depth - 1)

    with pytest.raises(JitError, match="from inside its own call"):
        recurse(1)
    recurse.reset()  # the next call runs plainly (recording would refuse the int it returns)
    assert recurse(0) == 0, "the refusal left the TinyJit usable"

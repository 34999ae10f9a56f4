"""The runtime's shared state under threads (docs/threads.md): the backend registry opens each device once and
never shows a half-built table, a Buffer shared by threads is allocated once, and the plan cache hands every thread
the same plan, which runs correctly in several threads at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import pytest
import rt_fakes
from rt_schedules import add_then_sum

from plygrad.ir import Stage, dtypes, serialize
from plygrad.runtime import Backend, BackendDescriptor, BackendStatus, Buffer, Device, load_plan
from plygrad.runtime.discovery import BACKENDS, installed
from plygrad.runtime.testing import fine_thread_switching

T = TypeVar("T")
THREADS = 8
SLOW = BackendDescriptor("SLOW", priority=200, ir_major=1, ir_minor=0, factory="rt_fakes:open_slow_py")


@pytest.fixture(autouse=True)
def busy_switching() -> Iterator[None]:
    with fine_thread_switching():
        yield


def _at_once(work: Callable[[int], T], n: int = THREADS) -> list[T]:
    """Run work(0..n-1) in n threads released together; their results in order (a failure is re-raised)."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


def test_threads_asking_for_a_device_at_once_open_it_once(fakes: None) -> None:
    rt_fakes.SLOW_OPENS.clear()
    with installed(BACKENDS, "SLOW", SLOW):
        opened: list[Backend] = _at_once(lambda i: Device["SLOW"] if i % 2 else Device[Device.DEFAULT])
    assert rt_fakes.SLOW_OPENS == ["SLOW"], "the factory ran once"
    assert all(b is opened[0] for b in opened) and opened[0].name == "SLOW"


def test_threads_reading_the_records_at_once_see_every_backend(fakes: None) -> None:
    with installed(BACKENDS, "SLOW", SLOW):
        Device.reset()
        seen = _at_once(lambda i: sorted(Device.records()))
        everything = sorted(Device.records())
    assert {"PY", "SLOW"} <= set(everything) and all(names == everything for names in seen), seen


def test_a_failed_open_is_recorded_once_for_every_thread(fakes: None) -> None:
    broken = BackendDescriptor("BROKEN", priority=1, ir_major=1, ir_minor=0, factory="rt_fakes:open_broken")

    def ask(i: int) -> str:
        try:
            Device["BROKEN"]
        except Exception as exc:  # the message is what the test checks
            return str(exc)
        return "opened"

    with installed(BACKENDS, "BROKEN", broken):
        messages = _at_once(ask)
        assert Device.records()["BROKEN"].status is BackendStatus.OPEN_FAILED
    assert all("libfake.so" in m for m in messages), messages


def test_a_shared_buffer_is_allocated_once(fakes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    allocator = Device["PY"].allocator
    real_alloc = allocator.alloc
    calls: list[int] = []

    def slow_alloc(nbytes: int) -> Any:  # the real allocation, made slow enough for threads to overlap in it
        calls.append(nbytes)
        time.sleep(0.01)
        return real_alloc(nbytes)

    monkeypatch.setattr(allocator, "alloc", slow_alloc)
    buf = Buffer("PY", 4, dtypes.float32)
    handles = _at_once(lambda i: buf.handle)
    assert calls == [16] and all(h is handles[0] for h in handles)


def test_every_thread_gets_the_one_cached_plan_and_runs_it_correctly(fakes: None) -> None:
    rng = np.random.default_rng(0)
    inputs = [(rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32))
              for _ in range(THREADS)]
    bufs = [(Buffer("PY", 6, dtypes.float32).copyin(a.tobytes()), Buffer("PY", 6, dtypes.float32).copyin(b.tobytes()))
            for a, b in inputs]
    # one schedule structure, named over the first pair; every thread runs it over its own pair of Buffers
    template = add_then_sum(bufs[0][0], bufs[0][1], 2, 3)
    data = serialize(template, Stage.SCHEDULE)
    a_id, b_id = bufs[0][0].id, bufs[0][1].id

    def work(i: int) -> tuple[object, np.ndarray[Any, Any]]:
        plan = load_plan(data)
        out = plan.run({a_id: bufs[i][0], b_id: bufs[i][1]})[-2]
        return plan, np.frombuffer(out.copyout(), dtype=np.float32)

    results = _at_once(work)
    assert all(plan is results[0][0] for plan, _ in results), "one plan, built once per schedule"
    for (a, b), (_, got) in zip(inputs, results, strict=True):
        np.testing.assert_allclose(got, (a + b).reshape(2, 3).sum(1), rtol=1e-6)

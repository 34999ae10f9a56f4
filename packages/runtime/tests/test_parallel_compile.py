"""A schedule's new programs compile side by side (lowering.prepare_kernels, PLYGRAD_COMPILE_JOBS): a compiler is
another process, so on n cores a cold schedule of many kernels takes about 1/n of the time. The plan is the same
as with one job, and a program that fails to compile is still reported for its kernel, in schedule order."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from rt_fakes import TextCompiler
from rt_schedules import add_then_sum

from plygrad.ir import Stage, dtypes, serialize
from plygrad.runtime import Buffer, CompileError, load_plan


class _Overlap:
    """Counts compiles running at once (each one held for a while, as a C compiler would take)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.calls = 0

    def watch(self, monkeypatch: pytest.MonkeyPatch, fail_on: str | None = None) -> None:
        real = TextCompiler.compile

        def slow_compile(compiler: TextCompiler, source: str) -> bytes:
            with self.lock:
                self.running += 1
                self.calls += 1
                self.most = max(self.most, self.running)
            try:
                time.sleep(0.2)
                if fail_on is not None and fail_on in source:
                    raise CompileError("PY compiler: refused on purpose", line=1, source_line=fail_on)
                return real(compiler, source)
            finally:
                with self.lock:
                    self.running -= 1

        monkeypatch.setattr(TextCompiler, "compile", slow_compile)


@pytest.fixture
def overlap(monkeypatch: pytest.MonkeyPatch, fakes: None) -> Iterator[_Overlap]:
    watcher = _Overlap()
    watcher.watch(monkeypatch)
    yield watcher


def _run_add_then_sum() -> np.ndarray:
    a = Buffer("PY", 6, dtypes.float32).copyin(np.arange(6, dtype=np.float32).tobytes())
    b = Buffer("PY", 6, dtypes.float32).copyin(np.ones(6, dtype=np.float32).tobytes())
    plan = load_plan(serialize(add_then_sum(a, b, 2, 3), Stage.SCHEDULE))
    out = plan.run({a.id: a, b.id: b})[-2]
    return np.frombuffer(out.copyout(), dtype=np.float32)


@pytest.mark.parametrize("jobs", ["2", "4"])
def test_the_kernels_of_a_schedule_compile_at_once(overlap: _Overlap, monkeypatch: pytest.MonkeyPatch,
                                                   jobs: str) -> None:
    monkeypatch.setenv("PLYGRAD_COMPILE_JOBS", jobs)
    np.testing.assert_array_equal(_run_add_then_sum(), [6.0, 15.0])
    assert overlap.calls == 2  # each program compiled once, not again when it is loaded
    assert overlap.most == 2


def test_one_job_compiles_one_after_another(overlap: _Overlap, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLYGRAD_COMPILE_JOBS", "1")
    np.testing.assert_array_equal(_run_add_then_sum(), [6.0, 15.0])
    assert (overlap.calls, overlap.most) == (2, 1)


def test_a_failed_compile_is_reported_for_its_kernel(fakes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    watcher = _Overlap()
    watcher.watch(monkeypatch, fail_on="REDUCE")  # the second kernel (the row sum) fails, the first compiles
    monkeypatch.setenv("PLYGRAD_COMPILE_JOBS", "2")
    with pytest.raises(CompileError, match="refused on purpose"):
        _run_add_then_sum()
    assert watcher.most == 2

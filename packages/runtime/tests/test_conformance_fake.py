"""The shipped conformance suite, run against the fake PY backend (the CPU backend runs it in its own tests)."""

from __future__ import annotations

import unittest
from collections.abc import Iterator

import pytest
from rt_fakes import fake_plugins

from plygrad.runtime.testing import BackendConformance


@pytest.fixture(autouse=True)
def _fakes() -> Iterator[None]:
    with fake_plugins():
        yield


class TestPyConformance(BackendConformance):
    device = "PY"


class TestPyOtherIndexConformance(BackendConformance):
    device = "PY:1"


def test_suite_skips_with_the_cause_when_the_device_does_not_open() -> None:
    class Missing(BackendConformance):
        device = "NOPE"

    with pytest.raises(unittest.SkipTest, match="backend NOPE does not open here: unknown device 'NOPE'"):
        Missing().test_allocator_round_trip()


def test_kernel_checks_skip_without_codegen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLYGRAD_CODEGEN", "not-installed")
    with pytest.raises(unittest.SkipTest, match=r"no plygrad\.codegen entry point named 'not-installed'"):
        TestPyConformance().test_kernel_add()


def test_kernel_checks_catch_a_wrong_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite can fail: a backend whose programs compute garbage is caught."""
    from rt_fakes import InterpretedProgram

    def wrong(self: InterpretedProgram, buffers: list[bytearray], *args: object, **kwargs: object) -> None:
        for buf in buffers[:1]:
            buf[:] = bytes(len(buf))  # writes zeros instead of the result

    monkeypatch.setattr(InterpretedProgram, "__call__", wrong)
    with pytest.raises(AssertionError, match="PY add kernel: element"):
        TestPyConformance().test_kernel_add()


def test_semantics_checks_catch_a_backend_whose_max_drops_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    """What -ffast-math does to MAX (maximum(nan, 0) = 0), done by the fake backend's interpreter."""
    import math

    import rt_fakes

    from plygrad.ir import Ops
    from plygrad.ir import exec_alu as real

    def fast_math(op: Ops, dtype: object, operands: tuple[object, ...]) -> object:
        x, y = operands[:2] if len(operands) == 2 else (None, None)
        if op is Ops.MAX and isinstance(x, float) and math.isnan(x):
            return y  # x86's maxss with NaN first: the other operand
        return real(op, dtype, operands)  # type: ignore[arg-type]

    monkeypatch.setattr(rt_fakes, "exec_alu", fast_math)
    with pytest.raises(AssertionError, match=r"PY breaks IR semantics \(NaN and inf.*\n.*MAX\(nan, 0\.0\) = 0\.0, "
                                             r"the IR says nan"):
        TestPyConformance().test_nan_and_inf_propagate()

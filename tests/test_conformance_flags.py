"""The conformance suite (plygrad.runtime.testing) checks IR semantics, not just that kernels run: the CPU
backend's classes under another name pass it, and the same backend built with a compiler flag that changes the
IR's arithmetic fails it, naming the values it got wrong (tests/mycpu_backend.py)."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from pathlib import Path

import pytest
from mycpu_backend import installed_mycpu

from plygrad.runtime.testing import BackendConformance
from plygrad.runtime.testing_semantics import IRSemanticsChecks


@pytest.fixture(autouse=True)
def _backends() -> Iterator[None]:
    with installed_mycpu():
        yield


class TestMyCPUConformance(BackendConformance):
    """A third-party-shaped backend with the CPU's flags passes the whole suite."""

    device = "MYCPU"


SEMANTICS = sorted(name for name in vars(IRSemanticsChecks) if name.startswith("test_"))


def _failures(device: str) -> dict[str, str]:
    """The semantics checks that fail on `device`, with their messages."""

    class Suite(BackendConformance):
        pass

    Suite.device = device
    failed = {}
    for name in SEMANTICS:
        try:
            getattr(Suite(), name)()
        except AssertionError as exc:
            failed[name] = str(exc)
    return failed


def test_a_fast_math_backend_fails_the_suite() -> None:
    failed = _failures("FASTCPU")
    assert {"test_nan_and_inf_propagate", "test_nan_and_inf_in_float64"} <= failed.keys(), failed
    message = failed["test_nan_and_inf_propagate"]
    assert "MAX(0.0, nan) = 0.0, the IR says nan" in message
    assert "isnan as x CMPNE x(nan, 0.0) = False, the IR says True" in message
    assert "-ffast-math may not change them" in message


def _has_fma() -> bool:
    if platform.machine() in ("aarch64", "arm64"):
        return True
    try:
        return " fma " in f" {Path('/proc/cpuinfo').read_text()} ".replace("\n", " ")
    except OSError:
        return False


@pytest.mark.skipif(not _has_fma(), reason="this CPU has no fused multiply-add instruction to contract a*b+c into")
def test_a_backend_that_contracts_multiply_add_fails_the_suite() -> None:
    failed = _failures("FMACPU")
    assert set(failed) == {"test_no_fused_multiply_add"}, failed
    assert "a*b+c rounds twice in float32" in failed["test_no_fused_multiply_add"]

"""plygrad.runtime's conformance suite against the CPU backend.

`TestCPUConformance` uses whatever `plygrad.codegen` is installed (its kernel checks skip, saying why, when none
is); `TestCPUConformanceHandLowered` runs the basic kernel checks with this package's hand-written C lowering, so
they never skip here (the IR-semantics checks need a real codegen).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cpu_programs import hand_lowering

from plygrad.runtime.discovery import CODEGEN, installed
from plygrad.runtime.testing import BackendConformance


class TestCPUConformance(BackendConformance):
    device = "CPU"


class TestCPUConformanceHandLowered(BackendConformance):
    device = "CPU"
    semantics_checks = False  # hand_lowering has C for the four basic kernels only, not the IR-semantics ones

    @pytest.fixture(autouse=True)
    def _lowering(self) -> Iterator[None]:
        with installed(CODEGEN, "default", hand_lowering):
            yield

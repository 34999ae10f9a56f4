"""plygrad.runtime's conformance suite against the CPU backend.

`TestCPUConformance` uses whatever `plygrad.codegen` is installed (its kernel checks skip, saying why, when none
is); `TestCPUConformanceHandLowered` runs the same kernel checks with this package's hand-written C lowering, so
they never skip here.
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

    @pytest.fixture(autouse=True)
    def _lowering(self) -> Iterator[None]:
        with installed(CODEGEN, "default", hand_lowering):
            yield

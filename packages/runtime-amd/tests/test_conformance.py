"""plygrad.runtime's conformance suite against AMD: it needs an AMD GPU, so where none opens every test skips with
the registry's cause (no HIP runtime, no GPU). This is the package's only skip; everything else runs without
hardware."""

from __future__ import annotations

from plygrad.runtime.testing import BackendConformance


class TestAMDConformance(BackendConformance):
    device = "AMD"

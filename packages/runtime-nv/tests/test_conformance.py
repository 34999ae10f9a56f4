"""plygrad.runtime's conformance suite against NV: it needs a GPU, so where none opens every test skips with the
registry's cause (no driver, no GPU). This is the package's only skip; everything else runs without hardware."""

from __future__ import annotations

from plygrad.runtime.testing import BackendConformance


class TestNVConformance(BackendConformance):
    device = "NV"


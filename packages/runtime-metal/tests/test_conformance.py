"""plygrad.runtime's conformance suite against METAL: it needs a Mac with a Metal GPU, so elsewhere every test skips
with the registry's cause ("unavailable: Metal needs macOS"). This is the package's only skip: everything else runs
on Linux, against a stand-in Objective-C runtime (test_backend.py)."""

from __future__ import annotations

from plygrad.runtime.testing import BackendConformance


class TestMetalConformance(BackendConformance):
    device = "METAL"

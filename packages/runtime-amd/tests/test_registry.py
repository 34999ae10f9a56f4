"""AMD through the installed entry point: recorded "unavailable" with its cause where no HIP runtime opens, the
default device where one does, and listed by `python -m plygrad.runtime` either way."""

from __future__ import annotations

import importlib

from plygrad.runtime import BackendError, Device
from plygrad.runtime.testing_gpu import (
    assert_cheap_descriptor,
    assert_import_loads_nothing_else,
    assert_recorded_unavailable,
    library_opens,
    listing_line,
)

HAS_RUNTIME = library_opens("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5")


def test_the_entry_point_names_the_cheap_descriptor() -> None:
    assert_cheap_descriptor("AMD", "plygrad.backends.amd")


def test_importing_the_descriptor_does_not_load_the_runtime() -> None:
    assert_import_loads_nothing_else("plygrad.backends.amd.descriptor", "plygrad.backends.amd")


def test_amd_is_unavailable_without_a_runtime_and_opens_where_one_is() -> None:
    """One test for both kinds of machine, so neither skips: this one's answer depends on the HIP runtime."""
    if HAS_RUNTIME:
        try:
            backend = Device["AMD"]
        except BackendError as exc:  # ROCm without an AMD GPU: recorded as such
            assert "unavailable: no AMD GPU" in str(exc)
            return
        assert backend.target.renderer == "hip" and backend.target.arch.startswith("gfx")
        return
    assert_recorded_unavailable("AMD", r"unavailable: no AMD driver \(libamdhip64\.so not found\)")


def test_python_m_plygrad_runtime_lists_amd_with_its_status() -> None:
    line = listing_line("AMD")
    if HAS_RUNTIME:
        assert "priority 50" in line and (" ok" in line or "unavailable" in line), line
    else:
        assert "failed to open" in line and "unavailable: no AMD driver (libamdhip64.so not found)" in line, line


def test_the_backend_module_imports_without_a_runtime() -> None:
    module = importlib.import_module("plygrad.backends.amd.backend")
    assert callable(module.open_amd)

"""NV through the installed entry point: recorded "unavailable" with its cause where no driver opens, the default
device where one does, and listed by `python -m plygrad.runtime` either way."""

from __future__ import annotations

import importlib

from plygrad.runtime import Device
from plygrad.runtime.testing_gpu import (
    assert_cheap_descriptor,
    assert_import_loads_nothing_else,
    assert_recorded_unavailable,
    library_opens,
    listing_line,
)

HAS_DRIVER = library_opens("libcuda.so.1")


def test_the_entry_point_names_the_cheap_descriptor() -> None:
    assert_cheap_descriptor("NV", "plygrad.backends.nv")


def test_importing_the_descriptor_does_not_load_the_driver() -> None:
    assert_import_loads_nothing_else("plygrad.backends.nv.descriptor", "plygrad.backends.nv")


def test_nv_is_unavailable_without_a_driver_and_the_default_where_it_opens() -> None:
    """One test for both kinds of machine, so neither skips: this one's answer depends on the driver."""
    if HAS_DRIVER:
        backend = Device["NV"]
        assert backend.target.renderer == "cuda" and backend.target.arch.startswith("sm_")
        assert Device.DEFAULT == "NV"
        return
    assert_recorded_unavailable("NV", r"unavailable: no NVIDIA driver \(libcuda\.so\.1 not found\)")


def test_python_m_plygrad_runtime_lists_nv_with_its_status() -> None:
    line = listing_line("NV")
    if HAS_DRIVER:
        assert "priority 50" in line and (" ok" in line or "unavailable" in line), line
    else:
        assert "failed to open" in line and "unavailable: no NVIDIA driver (libcuda.so.1 not found)" in line, line


def test_the_backend_module_imports_without_a_driver() -> None:
    module = importlib.import_module("plygrad.backends.nv.backend")
    assert callable(module.open_nv)

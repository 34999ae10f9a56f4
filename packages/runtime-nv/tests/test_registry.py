"""NV through the installed entry point: recorded "unavailable" with its cause where no driver opens, the default
device where one does, and listed by `python -m plygrad.runtime` either way."""

from __future__ import annotations

import ctypes
import importlib
import subprocess
import sys

import pytest

from plygrad.runtime import BackendError, BackendStatus, Device


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


HAS_DRIVER = _driver_present()


def test_the_entry_point_names_the_cheap_descriptor() -> None:
    record = Device.records()["NV"]
    assert record.entry_point == "plygrad.backends.nv.descriptor:DESCRIPTOR"
    assert record.descriptor is not None and record.descriptor.priority > 10, "NV must win over the CPU where it opens"


def test_importing_the_descriptor_does_not_load_the_driver() -> None:
    code = ("import sys, plygrad.backends.nv.descriptor; "
            "assert 'plygrad.backends.nv.driver' not in sys.modules, 'the descriptor must not import the driver'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nv_is_unavailable_without_a_driver_and_the_default_where_it_opens() -> None:
    """One test for both kinds of machine, so neither skips: this one's answer depends on the driver."""
    if HAS_DRIVER:
        backend = Device["NV"]
        assert backend.target.renderer == "cuda" and backend.target.arch.startswith("sm_")
        assert Device.DEFAULT == "NV"
        return
    cause = r"unavailable: no NVIDIA driver \(libcuda\.so\.1 not found\)"
    with pytest.raises(BackendError, match=rf"backend NV failed to open device NV: BackendError: {cause}"):
        Device["NV"]
    record = Device.records()["NV"]
    assert record.status is BackendStatus.OPEN_FAILED
    assert "unavailable: no NVIDIA driver (libcuda.so.1 not found)" in record.cause
    with pytest.raises(BackendError, match=rf"backend NV is unavailable: failed to open: BackendError: {cause}"):
        Device["NV:1"]
    if "CPU" in Device.records():  # plygrad-cpu is not a dependency: the package's own session lacks it
        assert Device.DEFAULT == "CPU", "a backend that does not open is skipped for the default"


def test_python_m_plygrad_runtime_lists_nv_with_its_status() -> None:
    done = subprocess.run([sys.executable, "-m", "plygrad.runtime"], capture_output=True, text=True, check=True)
    line = next((line for line in done.stdout.splitlines() if line.split()[:1] == ["NV"]), None)
    assert line is not None, f"NV is missing from the listing:\n{done.stdout}"
    if HAS_DRIVER:
        assert "priority 50" in line and (" ok" in line or "unavailable" in line), line
    else:
        assert "failed to open" in line and "unavailable: no NVIDIA driver (libcuda.so.1 not found)" in line, line


def test_the_backend_module_imports_without_a_driver() -> None:
    module = importlib.import_module("plygrad.backends.nv.backend")
    assert callable(module.open_nv)

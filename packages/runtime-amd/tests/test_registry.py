"""AMD through the installed entry point: recorded "unavailable" with its cause where no HIP runtime opens, the
default device where one does, and listed by `python -m plygrad.runtime` either way."""

from __future__ import annotations

import ctypes
import importlib
import subprocess
import sys

import pytest

from plygrad.runtime import BackendError, BackendStatus, Device


def _runtime_present() -> bool:
    for name in ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


HAS_RUNTIME = _runtime_present()


def test_the_entry_point_names_the_cheap_descriptor() -> None:
    record = Device.records()["AMD"]
    assert record.entry_point == "plygrad.backends.amd.descriptor:DESCRIPTOR"
    assert record.descriptor is not None and record.descriptor.priority > 10, "AMD must win over the CPU where it opens"


def test_importing_the_descriptor_does_not_load_the_runtime() -> None:
    code = ("import sys, plygrad.backends.amd.descriptor; "
            "assert 'plygrad.backends.amd.hip' not in sys.modules, 'the descriptor must not import the runtime'")
    subprocess.run([sys.executable, "-c", code], check=True)


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
    cause = r"unavailable: no AMD driver \(libamdhip64\.so not found\)"
    with pytest.raises(BackendError, match=rf"backend AMD failed to open device AMD: BackendError: {cause}"):
        Device["AMD"]
    record = Device.records()["AMD"]
    assert record.status is BackendStatus.OPEN_FAILED
    assert "unavailable: no AMD driver (libamdhip64.so not found)" in record.cause
    with pytest.raises(BackendError, match=rf"backend AMD is unavailable: failed to open: BackendError: {cause}"):
        Device["AMD:1"]
    if "CPU" in Device.records():  # plygrad-cpu is not a dependency: the package's own session lacks it
        assert Device.DEFAULT != "AMD", "a backend that does not open is skipped for the default"


def test_python_m_plygrad_runtime_lists_amd_with_its_status() -> None:
    done = subprocess.run([sys.executable, "-m", "plygrad.runtime"], capture_output=True, text=True, check=True)
    line = next((line for line in done.stdout.splitlines() if line.split()[:1] == ["AMD"]), None)
    assert line is not None, f"AMD is missing from the listing:\n{done.stdout}"
    if HAS_RUNTIME:
        assert "priority 50" in line and (" ok" in line or "unavailable" in line), line
    else:
        assert "failed to open" in line and "unavailable: no AMD driver (libamdhip64.so not found)" in line, line


def test_the_backend_module_imports_without_a_runtime() -> None:
    module = importlib.import_module("plygrad.backends.amd.backend")
    assert callable(module.open_amd)

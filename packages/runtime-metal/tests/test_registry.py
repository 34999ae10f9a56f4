"""METAL through the installed entry point: recorded "unavailable: Metal needs macOS" off macOS, the default device
on a Mac with a Metal GPU, and listed by `python -m plygrad.runtime` with its status either way."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from plygrad.backends.metal.objc import running_on
from plygrad.runtime import BackendError, BackendStatus, Device

ON_MAC = running_on() == "darwin"


def test_the_entry_point_names_the_cheap_descriptor() -> None:
    record = Device.records()["METAL"]
    assert record.entry_point == "plygrad.backends.metal.descriptor:DESCRIPTOR"
    assert record.descriptor is not None and record.descriptor.priority > 10, "METAL must win over the CPU on a Mac"


def test_importing_the_descriptor_loads_nothing_of_metal() -> None:
    code = ("import sys, plygrad.backends.metal.descriptor; "
            "assert not any(m.startswith('plygrad.backends.metal.') and m != 'plygrad.backends.metal.descriptor' "
            "for m in sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_metal_is_unavailable_off_macos_and_opens_on_a_mac() -> None:
    """One test for both kinds of machine, so neither skips: this one's answer depends on the OS."""
    if ON_MAC:
        try:
            backend = Device["METAL"]
        except BackendError as exc:  # a Mac without a Metal GPU (a VM): recorded like any unavailable device
            assert "unavailable" in str(exc)
            return
        assert backend.target.renderer == "metal" and backend.target.arch.startswith(("apple", "mac"))
        return
    cause = rf"unavailable: Metal needs macOS \(this is {sys.platform}\)"
    with pytest.raises(BackendError, match=rf"backend METAL failed to open device METAL: BackendError: {cause}"):
        Device["METAL"]
    record = Device.records()["METAL"]
    assert record.status is BackendStatus.OPEN_FAILED
    assert f"unavailable: Metal needs macOS (this is {sys.platform})" in record.cause
    if "CPU" in Device.records():  # plygrad-cpu is not a dependency: the package's own session lacks it
        assert Device.DEFAULT == "CPU", "a backend that does not open is skipped for the default"


def test_python_m_plygrad_runtime_lists_metal_with_its_status() -> None:
    done = subprocess.run([sys.executable, "-m", "plygrad.runtime"], capture_output=True, text=True, check=True)
    line = next((line for line in done.stdout.splitlines() if line.split()[:1] == ["METAL"]), None)
    assert line is not None, f"METAL is missing from the listing:\n{done.stdout}"
    assert "priority 50" in line
    if ON_MAC:
        assert " ok" in line or "unavailable" in line, line
    else:
        assert "failed to open" in line and "unavailable: Metal needs macOS" in line, line


def test_the_backend_modules_import_anywhere() -> None:
    for module in ("backend", "device", "objc", "compiler", "launch", "target"):
        importlib.import_module(f"plygrad.backends.metal.{module}")
    backend = importlib.import_module("plygrad.backends.metal.backend")
    if not ON_MAC:
        with pytest.raises(BackendError, match="unavailable: Metal needs macOS"):
            backend.open_metal("METAL:1")  # the OS is checked first: no claim about a second GPU off macOS

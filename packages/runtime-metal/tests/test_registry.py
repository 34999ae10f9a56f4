"""METAL through the installed entry point: recorded "unavailable: Metal needs macOS" off macOS, the default device
on a Mac with a Metal GPU, and listed by `python -m plygrad.runtime` with its status either way."""

from __future__ import annotations

import importlib
import sys

import pytest

from plygrad.backends.metal.objc import running_on
from plygrad.runtime import BackendError, Device
from plygrad.runtime.testing_gpu import (
    assert_cheap_descriptor,
    assert_import_loads_nothing_else,
    assert_recorded_unavailable,
    listing_line,
)

ON_MAC = running_on() == "darwin"


def test_the_entry_point_names_the_cheap_descriptor() -> None:
    assert_cheap_descriptor("METAL", "plygrad.backends.metal")


def test_importing_the_descriptor_loads_nothing_of_metal() -> None:
    assert_import_loads_nothing_else("plygrad.backends.metal.descriptor", "plygrad.backends.metal")


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
    assert_recorded_unavailable("METAL", rf"unavailable: Metal needs macOS \(this is {sys.platform}\)",
                                second_device=False)


def test_python_m_plygrad_runtime_lists_metal_with_its_status() -> None:
    line = listing_line("METAL")
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

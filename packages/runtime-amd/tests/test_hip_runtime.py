"""The HIP runtime wrapper's error mapping, messages and queries, checked against a stand-in for libamdhip64
(amd_fakes.FakeHip)."""

from __future__ import annotations

import ctypes

import pytest
from amd_fakes import FakeHip

from plygrad.backends.amd import hip as hip_module
from plygrad.backends.amd.hip import (
    PROTOTYPES,
    HipError,
    HipOutOfMemoryError,
    HipRuntime,
    arch_from_properties,
    declare,
    load_hip,
)
from plygrad.runtime.errors import BackendError
from plygrad.runtime.testing_gpu import check_driver_errors


def test_errors_name_the_call_the_hip_error_and_what_was_asked() -> None:
    hip = HipRuntime(FakeHip(free_bytes=2 << 30, total_bytes=64 << 30))
    check_driver_errors(
        hip, allocate=hip.malloc,
        out_of_memory="hipMalloc: hipErrorOutOfMemory, asked 80 GiB, 2 GiB free of 64 GiB (out of memory)",
        missing_function="hipModuleGetFunction: hipErrorNotFound, function 'nope' (named symbol not found)",
        bad_image="hipModuleLoadData: hipErrorInvalidImage, a 7 bytes code object",
        unnamed=("hipDeviceSynchronize", "HIP error 999"))
    assert issubclass(HipOutOfMemoryError, HipError)


@pytest.mark.parametrize("status", [100, 35])
def test_init_without_a_usable_gpu_is_unavailable(status: int) -> None:
    with pytest.raises(BackendError, match=r"^unavailable: no AMD GPU \(hipInit: ") as caught:
        HipRuntime(FakeHip(init_status=status)).init()
    assert not isinstance(caught.value, HipError), "'unavailable' is the registry's record, not a call failure"


def test_init_failing_otherwise_is_a_hip_error() -> None:
    with pytest.raises(HipError, match=r"^hipInit: hipErrorInvalidValue$"):
        HipRuntime(FakeHip(init_status=1)).init()


def test_no_device_from_the_count_is_zero_devices() -> None:
    assert HipRuntime(FakeHip(count_status=100)).device_count() == 0
    assert HipRuntime(FakeHip(gpus=3)).device_count() == 3


def test_a_missing_runtime_library_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hip_module, "_LOADED", [])
    with pytest.raises(BackendError, match=r"^unavailable: no AMD driver \(libamdhip64-missing\.so not found\)$"):
        load_hip(("libamdhip64-missing.so", "libamdhip64-missing.so.6"))


def test_device_queries_return_the_runtime_values() -> None:
    hip = HipRuntime(FakeHip(gpus=3, arch="gfx1100"))
    assert hip.device_name(2) == "Fake Instinct #2" and hip.arch(2) == "gfx1100"
    with pytest.raises(HipError, match=r"^hipSetDevice: hipErrorInvalidDevice, device 5$"):
        hip.set_device(5)
    assert hip.version() == 60241134


@pytest.mark.parametrize(("raw", "arch"), [
    (b"AMD Instinct MI250X\x00" + bytes(300) + b"gfx90a:sramecc+:xnack-\x00", "gfx90a:sramecc+:xnack-"),
    (b"Radeon RX 7900 XTX\x00" + bytes(900) + b"gfx1100\x00\x00", "gfx1100"),
    (b"no arch here\x00" + bytes(100), None),
])
def test_the_arch_is_found_in_either_properties_layout(raw: bytes, arch: str | None) -> None:
    assert arch_from_properties(raw) == arch


def test_a_properties_struct_without_an_arch_is_an_error() -> None:
    fake = FakeHip(arch="none")
    with pytest.raises(BackendError, match="names no gfx architecture"):
        HipRuntime(fake).arch(0)


def test_declare_sets_every_prototype_and_needs_the_required_ones() -> None:
    class Library:
        """Holds a ctypes function object per runtime name, as a CDLL would (libc's `abs` stands in for each)."""

    library = Library()
    address = ctypes.cast(ctypes.CDLL(None).abs, ctypes.c_void_p).value
    assert address is not None
    for name in (*PROTOTYPES, "hipGetErrorName", "hipGetErrorString"):
        setattr(library, name, ctypes.CFUNCTYPE(ctypes.c_int)(address))
    declare(library)
    assert library.hipMalloc.argtypes == PROTOTYPES["hipMalloc"]  # type: ignore[attr-defined]
    assert library.hipGetErrorName.restype is ctypes.c_char_p  # type: ignore[attr-defined]
    del library.hipMalloc  # type: ignore[attr-defined]
    with pytest.raises(BackendError, match="has no hipMalloc: the HIP runtime is too old"):
        declare(library)


"""The runtime prototypes against a C library with libamdhip64's ABI (libamdhip64_stub.c, built with the system C
compiler): what the Python stand-in cannot show, that ctypes passes each argument at the width and in the place the
C function expects (device pointers, the `extra` list and its packed buffer, NULL streams, out-pointers, the ROCm 5
properties call), end to end through `load_hip`, the allocator and a launch."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pytest

from plygrad.backends.amd import hip as hip_module
from plygrad.backends.amd.backend import AMDBackend
from plygrad.backends.amd.hip import HipOutOfMemoryError, HipRuntime, load_hip
from plygrad.runtime.errors import BackendError
from plygrad.runtime.testing_gpu import NoCompiler, assert_round_trip, build_stub_library

CODE_OBJECT = b"\x7fELF" + bytes(60)


@pytest.fixture(scope="module")
def stub_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_stub_library(Path(__file__).with_name("libamdhip64_stub.c"), tmp_path_factory.mktemp("stub"))


@pytest.fixture
def stub(stub_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[HipRuntime, ctypes.CDLL]]:
    monkeypatch.setattr(hip_module, "_LOADED", [])  # load this library, not a runtime loaded before
    hip = load_hip(("libamdhip64-missing.so", str(stub_path)))  # the first that loads
    yield hip, hip.lib


def _last_launch(lib: ctypes.CDLL) -> list[int]:
    out = (ctypes.c_uint64 * 24)()
    return list(out[:lib.stub_last_launch(out)])


def test_load_hip_declares_and_inits(stub: tuple[HipRuntime, ctypes.CDLL]) -> None:
    hip, _ = stub
    assert hip.version() == 60241134 and hip.device_count() == 1
    assert hip.arch(0) == "gfx942:sramecc+:xnack-", "ROCm 5's hipGetDeviceProperties when R0600 is missing"
    assert load_hip() is hip, "the runtime is opened once per process"


def test_memory_round_trip_through_device_pointers(stub: tuple[HipRuntime, ctypes.CDLL]) -> None:
    backend = AMDBackend("AMD", stub[0], 0, NoCompiler())
    assert backend.target.arch == "gfx942"
    handle = assert_round_trip(backend.allocator, bytes(range(256)) * 5)
    assert handle > 0 and handle % 256 == 0
    backend.synchronize()


def test_out_of_memory_through_the_abi(stub: tuple[HipRuntime, ctypes.CDLL]) -> None:
    with pytest.raises(HipOutOfMemoryError, match=r"^hipMalloc: hipErrorOutOfMemory, asked 3 GiB, 2 GiB free of "
                                                  r"64 GiB \(out of memory\)$"):
        stub[0].malloc(3 << 30)


def test_a_launch_passes_dims_and_the_argument_buffer_as_the_c_side_reads_them(
        stub: tuple[HipRuntime, ctypes.CDLL]) -> None:
    hip, lib = stub
    backend = AMDBackend("AMD", hip, 0, NoCompiler())
    program = backend.load("kernel", CODE_OBJECT)
    out, src = backend.allocator.alloc(64), backend.allocator.alloc(64)
    assert program([out, src], (70000, 3, 2), (128, 2, 1), [-5]) is None
    assert _last_launch(lib) == [70000, 3, 2, 128, 2, 1, out, src, (-5) & (2**64 - 1)]
    assert program([out, src], (1, 1, 1), None, [9], wait=True) == pytest.approx(0.0025)


def test_load_errors_through_the_abi(stub: tuple[HipRuntime, ctypes.CDLL]) -> None:
    backend = AMDBackend("AMD", stub[0], 0, NoCompiler())
    with pytest.raises(BackendError, match=r"code object has no kernel 'other' \(hipModuleGetFunction: "
                                           r"hipErrorNotFound"):
        backend.load("other", CODE_OBJECT)
    with pytest.raises(BackendError, match="device AMD:1: this machine has 1 AMD GPU"):
        AMDBackend("AMD:1", stub[0], 1, NoCompiler())

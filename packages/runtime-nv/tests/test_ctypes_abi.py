"""The driver prototypes against a C library with libcuda's ABI (libcuda_stub.c, built with the system C compiler):
what the Python stand-in cannot show, that ctypes passes each argument at the width and in the place the C
function expects (64-bit device pointers, the kernelParams array, NULL streams, out-pointers), end to end through
`load_driver`, the allocator and a launch."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pytest

from plygrad.backends.nv import driver as driver_module
from plygrad.backends.nv.backend import NVBackend
from plygrad.backends.nv.driver import CudaDriver, CudaOutOfMemoryError, load_driver
from plygrad.runtime.errors import BackendError
from plygrad.runtime.testing_gpu import NoCompiler, assert_round_trip, build_stub_library

CUBIN = b"\x7fELF" + bytes(60)


@pytest.fixture(scope="module")
def stub_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_stub_library(Path(__file__).with_name("libcuda_stub.c"), tmp_path_factory.mktemp("stub"))


@pytest.fixture
def stub(stub_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[CudaDriver, ctypes.CDLL]]:
    monkeypatch.setattr(driver_module, "_LOADED", [])  # load this library, not a driver loaded before
    driver = load_driver(str(stub_path))
    yield driver, driver.lib


def _last_launch(lib: ctypes.CDLL) -> list[int]:
    out = (ctypes.c_uint64 * 16)()
    return list(out[:lib.stub_last_launch(out)])


def _set_params(lib: ctypes.CDLL, *sizes: int) -> None:
    lib.stub_set_params(len(sizes), (ctypes.c_int * len(sizes))(*sizes))


def test_load_driver_declares_and_inits(stub: tuple[CudaDriver, ctypes.CDLL]) -> None:
    driver, _ = stub
    assert driver.version() == 13000 and driver.device_count() == 1
    assert driver.total_memory(driver.device(0)) == 80 << 30
    assert load_driver() is driver, "the driver is opened once per process"


def test_memory_round_trip_through_64_bit_pointers(stub: tuple[CudaDriver, ctypes.CDLL]) -> None:
    backend = NVBackend("NV", stub[0], 0, NoCompiler())
    handle = assert_round_trip(backend.allocator, bytes(range(256)) * 5)
    assert handle > 0
    backend.synchronize()


def test_out_of_memory_through_the_abi(stub: tuple[CudaDriver, ctypes.CDLL]) -> None:
    with pytest.raises(CudaOutOfMemoryError, match=r"^cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY, asked 3 GiB, 2 GiB free "
                                                   r"of 80 GiB$"):
        stub[0].mem_alloc(3 << 30)


@pytest.mark.parametrize("sizes", [(8, 8, 8), (8, 8, 4)])
def test_a_launch_passes_dims_and_arguments_as_the_c_side_reads_them(stub: tuple[CudaDriver, ctypes.CDLL],
                                                                      sizes: tuple[int, ...]) -> None:
    driver, lib = stub
    _set_params(lib, *sizes)
    backend = NVBackend("NV", driver, 0, NoCompiler())
    program = backend.load("kernel", CUBIN)
    out, src = backend.allocator.alloc(64), backend.allocator.alloc(64)
    assert program([out, src], (70000, 3, 2), (128, 2, 1), [-5]) is None
    assert _last_launch(lib) == [70000, 3, 2, 128, 2, 1, out, src, (-5) & (2**64 - 1)]
    assert program([out, src], (1, 1, 1), None, [9], wait=True) == pytest.approx(0.0025)


def test_load_errors_through_the_abi(stub: tuple[CudaDriver, ctypes.CDLL]) -> None:
    backend = NVBackend("NV", stub[0], 0, NoCompiler())
    with pytest.raises(BackendError, match=r"cubin has no kernel 'other' \(cuModuleGetFunction: CUDA_ERROR_NOT_FOUND"):
        backend.load("other", CUBIN)
    with pytest.raises(BackendError, match="device NV:1: this machine has 1 NVIDIA GPU"):
        NVBackend("NV:1", stub[0], 1, NoCompiler())

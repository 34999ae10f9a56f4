"""The driver wrapper's error mapping and messages, checked against a stand-in for libcuda (nv_fakes.FakeCuda)."""

from __future__ import annotations

import ctypes

import pytest
from nv_fakes import FakeCuda

from plygrad.backends.nv import driver as driver_module
from plygrad.backends.nv.driver import (
    PROTOTYPES,
    CudaDriver,
    CudaError,
    CudaOutOfMemoryError,
    declare,
    load_driver,
)
from plygrad.runtime.errors import BackendError
from plygrad.runtime.testing_gpu import check_driver_errors


def test_errors_name_the_call_the_cuda_error_and_what_was_asked() -> None:
    driver = CudaDriver(FakeCuda(free_bytes=2 << 30, total_bytes=80 << 30))
    check_driver_errors(
        driver, allocate=driver.mem_alloc,
        out_of_memory="cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY, asked 80 GiB, 2 GiB free of 80 GiB (out of memory)",
        missing_function="cuModuleGetFunction: CUDA_ERROR_NOT_FOUND, function 'nope' (named symbol not found)",
        bad_image="cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE, a 7 bytes image",
        unnamed=("cuCtxSynchronize", "CUDA error 999"))
    assert issubclass(CudaOutOfMemoryError, CudaError)


@pytest.mark.parametrize(("status", "message"), [
    (100, r"^unavailable: no NVIDIA GPU \(cuInit: CUDA_ERROR_NO_DEVICE\)$"),
    (34, r"^unavailable: libcuda\.so\.1 is the CUDA toolkit's stub.*install the NVIDIA driver$"),
])
def test_init_without_a_usable_gpu_is_unavailable(status: int, message: str) -> None:
    with pytest.raises(BackendError, match=message) as caught:
        CudaDriver(FakeCuda(init_status=status)).init()
    assert not isinstance(caught.value, CudaError), "'unavailable' is the registry's record, not a call failure"


def test_init_failing_otherwise_is_a_cuda_error() -> None:
    with pytest.raises(CudaError, match=r"^cuInit: CUDA_ERROR_INVALID_VALUE$"):
        CudaDriver(FakeCuda(init_status=1)).init()


def test_a_missing_driver_library_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_module, "_LOADED", [])
    with pytest.raises(BackendError, match=r"^unavailable: no NVIDIA driver \(libcuda-missing\.so\.1 not found\)$"):
        load_driver("libcuda-missing.so.1")


def test_device_queries_return_the_driver_values() -> None:
    driver = CudaDriver(FakeCuda(gpus=3))
    assert driver.device_count() == 3
    device = driver.device(2)
    assert driver.device_name(device) == "Fake H100 #2"
    assert driver.attribute(device, driver_module.Attribute.COMPUTE_CAPABILITY_MAJOR) == 9
    with pytest.raises(CudaError, match=r"^cuDeviceGet: CUDA error 101, device 5$"):
        driver.device(5)


def test_param_sizes_stop_at_the_drivers_invalid_value() -> None:
    fake = FakeCuda(kernels={"k": (8, 8, 4)})
    driver = CudaDriver(fake)
    assert driver.param_sizes(driver.module_function(1, "k")) == (8, 8, 4)


def test_param_sizes_are_unknown_on_a_driver_before_12_4() -> None:
    class OldDriver(FakeCuda):
        def __getattribute__(self, name: str) -> object:
            if name == "cuFuncGetParamInfo":
                raise AttributeError(name)
            return super().__getattribute__(name)

    fake = OldDriver(kernels={"k": (8,)})
    driver = CudaDriver(fake)
    assert driver.param_sizes(driver.module_function(1, "k")) is None


def test_declare_sets_every_prototype_and_needs_the_required_ones() -> None:
    class Library:
        """Holds a ctypes function object per driver name, as a CDLL would (libc's `abs` stands in for each)."""

    library = Library()
    address = ctypes.cast(ctypes.CDLL(None).abs, ctypes.c_void_p).value
    assert address is not None
    for name in PROTOTYPES:
        setattr(library, name, ctypes.CFUNCTYPE(ctypes.c_int)(address))
    declare(library)
    assert library.cuMemAlloc_v2.argtypes == PROTOTYPES["cuMemAlloc_v2"]  # type: ignore[attr-defined]
    assert library.cuLaunchKernel.restype is ctypes.c_int  # type: ignore[attr-defined]
    del library.cuFuncGetParamInfo  # type: ignore[attr-defined]
    declare(library)  # optional: a driver older than 12.4 still opens
    del library.cuMemAlloc_v2  # type: ignore[attr-defined]
    with pytest.raises(BackendError, match="has no cuMemAlloc_v2: the NVIDIA driver is too old"):
        declare(library)


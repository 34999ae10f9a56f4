"""NVBackend over a stand-in driver (nv_fakes.FakeCuda): what it asks of the driver for each plugin-API call.

The checks every GPU backend shares (allocator, copies, timed launches, synchronize) are plygrad.runtime.testing_gpu's
`FakeGPUBackendChecks`, run here by `TestNVOverFakeDriver`; the rest are NV's own."""

from __future__ import annotations

import pytest
from nv_fakes import H100_ATTRIBUTES, FakeCuda

from plygrad.backends.nv.backend import NVAllocator, NVBackend
from plygrad.backends.nv.compiler import NVCompiler
from plygrad.backends.nv.driver import CudaDriver, CudaOutOfMemoryError
from plygrad.backends.nv.target import cuda_target
from plygrad.ir.target import Target
from plygrad.runtime.errors import BackendError
from plygrad.runtime.testing_gpu import FakeGPU, FakeGPUBackendChecks, NoCompiler

CUBIN = b"\x7fELF" + bytes(60)  # the fake driver only looks at the magic


def _open(fake: FakeCuda, name: str = "NV", ordinal: int = 0) -> NVBackend:
    # these tests load prepared binaries; a toolchain is not what they are about (test_compiler.py is)
    return NVBackend(name, CudaDriver(fake), ordinal, NoCompiler())


class TestNVOverFakeDriver(FakeGPUBackendChecks):
    binary = CUBIN
    allocator_type = NVAllocator

    def make_fake(self, kernel: str | None = None, **fields: object) -> FakeGPU:
        return FakeCuda(kernels={} if kernel is None else {kernel: (8,)}, **fields)

    def open(self, fake: FakeGPU, ordinal: int = 0) -> NVBackend:
        assert isinstance(fake, FakeCuda)
        return _open(fake, "NV" if ordinal == 0 else f"NV:{ordinal}", ordinal)

    def alloc_call(self, nbytes: int, ordinal: int) -> str:
        return f"alloc {nbytes} in {0xc0 + ordinal:#x}"  # in the GPU's primary context

    def sync_call(self, ordinal: int) -> str:
        return f"sync {0xc0 + ordinal:#x}"

    def transfer_calls(self) -> list[str]:
        return ["dtod", "sync 0xc0", "peer 0xc0 -> 0xc1"]


def test_target_and_limits_come_from_the_device() -> None:
    backend = _open(FakeCuda())
    target = backend.target
    assert (target.device, target.renderer, target.arch, target.has_local, target.has_shared) == \
        ("NV", "cuda", "sm_90", True, True)
    assert (target.shared_max, target.local_max, target.max_threads_per_group) == (49152, (1024, 1024, 64), 1024)
    assert target.global_max == (2**31 - 1, 65535, 65535) and target.threads == 1
    assert "Fake H100 #0" in repr(backend) and "sm_90" in repr(backend)


def test_the_target_follows_the_devices_own_limits() -> None:
    fake = FakeCuda(attributes={**H100_ATTRIBUTES, 1: 512, 4: 32, 6: 1000, 8: 32768, 75: 8, 76: 6})
    target = _open(fake).target
    assert (target.arch, target.max_threads_per_group, target.local_max, target.shared_max) == \
        ("sm_86", 512, (1024, 1024, 32), 32768)
    assert target.global_max == (2**31 - 1, 1000, 65535)


def test_a_target_without_a_device_is_target_cuda() -> None:
    assert cuda_target("sm_80") == Target.cuda("sm_80", device="NV")


def test_the_default_compiler_targets_the_device_arch() -> None:
    fake = FakeCuda()
    backend = NVBackend("NV", CudaDriver(fake), 0)
    assert isinstance(backend.compiler, NVCompiler) and backend.compiler.arch == "sm_90"


def test_device_index_beyond_the_gpus_says_which_exist() -> None:
    with pytest.raises(BackendError, match=r"device NV:2: this machine has 2 NVIDIA GPU\(s\), use NV, NV:1"):
        _open(FakeCuda(gpus=2), "NV:2", 2)
    with pytest.raises(BackendError, match=r"^unavailable: no NVIDIA GPU"):
        _open(FakeCuda(gpus=0))


def test_out_of_memory_is_a_memory_error() -> None:
    with pytest.raises(MemoryError, match="cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY, asked 3 GiB, 2 GiB free"):
        _open(FakeCuda(free_bytes=2 << 30)).allocator.alloc(3 << 30)
    assert issubclass(CudaOutOfMemoryError, BackendError)


def test_launch_passes_buffers_then_variables_in_the_devices_context() -> None:
    fake = FakeCuda(kernels={"scale": (8, 8, 4)})
    backend = _open(fake, "NV:1", 1)
    program = backend.load("scale", CUBIN)
    out, src = backend.allocator.alloc(16), backend.allocator.alloc(16)
    assert program([out, src], (4, 1, 1), (32, 1, 1), [7]) is None
    launch = fake.launches[-1]
    assert (launch.grid, launch.block, launch.arguments) == ((4, 1, 1), (32, 1, 1), [out, src, 7])
    assert fake.calls[-1] == "launch scale in 0xc1"


def test_a_launch_that_disagrees_with_the_kernel_signature_is_refused() -> None:
    fake = FakeCuda(kernels={"k": (8, 8)})
    program = _open(fake).load("k", CUBIN)
    with pytest.raises(BackendError, match=r"'k' takes 2 parameters, but the launch gives 1 buffers and 2 var"):
        program([0x1000], (1, 1, 1), None, [3, 4])
    assert not fake.launches


def test_load_refuses_bytes_that_are_not_a_cubin() -> None:
    with pytest.raises(BackendError, match="not a cubin"):
        _open(FakeCuda()).load("k", b"// some PTX text")


def test_load_names_a_missing_kernel_and_the_expected_signature() -> None:
    with pytest.raises(BackendError, match=r"the cubin has no kernel 'E_4'.*CUDA_ERROR_NOT_FOUND.*"
                                           r'extern "C" __global__ void E_4'):
        _open(FakeCuda(kernels={"other": ()})).load("E_4", CUBIN)

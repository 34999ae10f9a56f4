"""NVBackend over a stand-in driver (nv_fakes.FakeCuda): what it asks of the driver for each plugin-API call."""

from __future__ import annotations

import pytest
from nv_fakes import H100_ATTRIBUTES, FakeCuda

from plygrad.backends.nv.backend import NVAllocator, NVBackend
from plygrad.backends.nv.compiler import NVCompiler
from plygrad.backends.nv.driver import CudaDriver, CudaOutOfMemoryError
from plygrad.backends.nv.target import cuda_target
from plygrad.ir.target import Target
from plygrad.runtime.errors import BackendError, CompileError
from plygrad.runtime.plugin import Allocator, Compiler

CUBIN = b"\x7fELF" + bytes(60)  # the fake driver only looks at the magic


class NoCompiler(Compiler):
    """These tests load prepared binaries; a toolchain is not what they are about (test_compiler.py is)."""

    cache_key = "none"

    def compile(self, source: str) -> bytes:
        raise CompileError("not used here")


def _open(fake: FakeCuda, name: str = "NV", ordinal: int = 0) -> NVBackend:
    return NVBackend(name, CudaDriver(fake), ordinal, NoCompiler())


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


@pytest.mark.parametrize("size", [1, 3, 4096])
def test_allocator_round_trip_in_the_devices_context(size: int) -> None:
    fake = FakeCuda()
    second = _open(fake, "NV:1", 1)
    data = bytes((i * 7 + 3) % 256 for i in range(size))
    handle = second.allocator.alloc(size)
    assert fake.calls[-1] == f"alloc {size} in 0xc1", "memory of NV:1 is allocated in GPU 1's context"
    second.allocator.copyin(handle, memoryview(data))  # read-only source
    out = bytearray(size)
    second.allocator.copyout(memoryview(out), handle)
    assert bytes(out) == data
    second.allocator.free(handle)
    assert handle not in fake.memory


def test_copyin_accepts_typed_views() -> None:
    fake = FakeCuda()
    allocator = _open(fake).allocator
    handle = allocator.alloc(8)
    allocator.copyin(handle, memoryview(bytearray(range(8))).cast("i"))
    assert fake.memory[handle] == bytearray(range(8))


def test_zero_bytes_need_no_driver_call() -> None:
    fake = FakeCuda()
    allocator = _open(fake).allocator
    handle = allocator.alloc(0)
    allocator.copyin(handle, memoryview(b""))
    allocator.copyout(memoryview(bytearray()), handle)
    allocator.free(handle)
    assert handle == 0 and not fake.memory


def test_out_of_memory_is_a_memory_error() -> None:
    with pytest.raises(MemoryError, match="cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY, asked 3 GiB, 2 GiB free"):
        _open(FakeCuda(free_bytes=2 << 30)).allocator.alloc(3 << 30)
    assert issubclass(CudaOutOfMemoryError, BackendError)


def test_copies_between_devices_go_peer_to_peer_and_within_one_device_to_device() -> None:
    fake = FakeCuda()
    first, second = _open(fake), _open(fake, "NV:1", 1)
    a, b = first.allocator, second.allocator
    assert isinstance(a, NVAllocator) and isinstance(b, NVAllocator)
    src, same, other = a.alloc(4), a.alloc(4), b.alloc(4)
    a.copyin(src, memoryview(b"\x01\x02\x03\x04"))
    assert a.transfer(same, a, src, 4)
    assert b.transfer(other, a, src, 4)
    assert fake.memory[same] == fake.memory[other] == bytearray(b"\x01\x02\x03\x04")
    assert fake.calls[-3:] == ["dtod", "sync 0xc0", "peer 0xc0 -> 0xc1"]
    assert not a.transfer(same, _HostAllocator(), 0, 4), "another kind of device goes through the host"


class _HostAllocator(Allocator[int]):
    """Another backend's allocator: NV cannot read it directly."""

    def alloc(self, nbytes: int) -> int:
        return 0

    def free(self, handle: int) -> None:
        return

    def copyin(self, handle: int, src: memoryview) -> None:
        return

    def copyout(self, dst: memoryview, handle: int) -> None:
        return


def test_launch_passes_buffers_then_variables_in_the_devices_context() -> None:
    fake = FakeCuda(kernels={"scale": (8, 8, 4)})
    backend = _open(fake, "NV:1", 1)
    program = backend.load("scale", CUBIN)
    out, src = backend.allocator.alloc(16), backend.allocator.alloc(16)
    assert program([out, src], (4, 1, 1), (32, 1, 1), [7]) is None
    launch = fake.launches[-1]
    assert (launch.grid, launch.block, launch.arguments) == ((4, 1, 1), (32, 1, 1), [out, src, 7])
    assert fake.calls[-1] == "launch scale in 0xc1"


def test_a_timed_launch_returns_the_event_time_in_seconds() -> None:
    fake = FakeCuda(kernels={"k": (8,)})
    backend = _open(fake)
    program = backend.load("k", CUBIN)
    assert program([backend.allocator.alloc(4)], (1, 1, 1), (1, 1, 1), [], wait=True) == pytest.approx(0.0015)
    assert not fake._events, "the timing events are destroyed after use"


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


def test_synchronize_waits_on_the_devices_context() -> None:
    fake = FakeCuda()
    first, second = _open(fake), _open(fake, "NV:1", 1)
    second.synchronize()
    first.synchronize()
    assert fake.calls[-2:] == ["sync 0xc1", "sync 0xc0"]

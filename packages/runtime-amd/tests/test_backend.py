"""AMDBackend over a stand-in runtime (amd_fakes.FakeHip): what it asks of the HIP runtime for each plugin-API call."""

from __future__ import annotations

import pytest
from amd_fakes import FakeHip

from plygrad.backends.amd.backend import AMDAllocator, AMDBackend
from plygrad.backends.amd.compiler import AMDCompiler, find_toolchain
from plygrad.backends.amd.hip import HipOutOfMemoryError, HipRuntime
from plygrad.ir.target import Target
from plygrad.runtime.errors import BackendError, CompileError
from plygrad.runtime.plugin import Allocator, Compiler

CODE_OBJECT = b"\x7fELF" + bytes(60)  # the fake runtime only looks at the magic


class NoCompiler(Compiler):
    """These tests load prepared binaries; a toolchain is not what they are about (test_compiler.py is)."""

    cache_key = "none"

    def compile(self, source: str) -> bytes:
        raise CompileError("not used here")


def _open(fake: FakeHip, name: str = "AMD", ordinal: int = 0) -> AMDBackend:
    return AMDBackend(name, HipRuntime(fake), ordinal, NoCompiler())


@pytest.mark.parametrize(("arch", "lanes"), [("gfx90a:sramecc+:xnack-", 64), ("gfx1100", 32), ("gfx1030", None)])
def test_the_target_comes_from_the_device_arch(arch: str, lanes: int | None) -> None:
    backend = _open(FakeHip(arch=arch))
    target = backend.target
    assert target == Target.hip(arch, device="AMD")
    assert (target.device, target.renderer, target.arch) == ("AMD", "hip", arch.split(":", maxsplit=1)[0])
    assert [tc.threads for tc in target.tensor_cores] == ([] if lanes is None else [lanes, lanes])
    assert "Fake Instinct #0" in repr(backend) and arch in repr(backend)


def test_the_default_compiler_targets_the_device_arch() -> None:
    backend = AMDBackend("AMD", HipRuntime(FakeHip(arch="gfx942:sramecc+:xnack-")), 0)
    assert isinstance(backend.compiler, AMDCompiler) and backend.compiler.arch == "gfx942"
    assert backend.compiler.toolchain is find_toolchain()


def test_device_index_beyond_the_gpus_says_which_exist() -> None:
    with pytest.raises(BackendError, match=r"device AMD:2: this machine has 2 AMD GPU\(s\), use AMD, AMD:1"):
        _open(FakeHip(gpus=2), "AMD:2", 2)
    with pytest.raises(BackendError, match=r"^unavailable: no AMD GPU"):
        _open(FakeHip(gpus=0))


@pytest.mark.parametrize("size", [1, 3, 4096])
def test_allocator_round_trip_on_the_devices_own_gpu(size: int) -> None:
    fake = FakeHip()
    second = _open(fake, "AMD:1", 1)
    _open(fake)  # makes GPU 0 current: the allocator must switch back
    data = bytes((i * 7 + 3) % 256 for i in range(size))
    handle = second.allocator.alloc(size)
    assert fake.calls[-1] == f"alloc {size} on 1", "memory of AMD:1 is allocated on GPU 1"
    second.allocator.copyin(handle, memoryview(data))  # read-only source
    out = bytearray(size)
    second.allocator.copyout(memoryview(out), handle)
    assert bytes(out) == data
    second.allocator.free(handle)
    assert handle not in fake.memory


def test_copyin_accepts_typed_views() -> None:
    fake = FakeHip()
    allocator = _open(fake).allocator
    handle = allocator.alloc(8)
    allocator.copyin(handle, memoryview(bytearray(range(8))).cast("i"))
    assert fake.memory[handle] == bytearray(range(8))


def test_zero_bytes_need_no_runtime_call() -> None:
    fake = FakeHip()
    allocator = _open(fake).allocator
    handle = allocator.alloc(0)
    allocator.copyin(handle, memoryview(b""))
    allocator.copyout(memoryview(bytearray()), handle)
    allocator.free(handle)
    assert handle == 0 and not fake.memory


def test_out_of_memory_is_a_memory_error() -> None:
    with pytest.raises(MemoryError, match="hipMalloc: hipErrorOutOfMemory, asked 3 GiB, 2 GiB free"):
        _open(FakeHip(free_bytes=2 << 30)).allocator.alloc(3 << 30)
    assert issubclass(HipOutOfMemoryError, BackendError)


class _HostAllocator(Allocator[int]):
    """Another backend's allocator: AMD cannot read it directly."""

    def alloc(self, nbytes: int) -> int:
        return 0

    def free(self, handle: int) -> None:
        return

    def copyin(self, handle: int, src: memoryview) -> None:
        return

    def copyout(self, dst: memoryview, handle: int) -> None:
        return


def test_copies_between_devices_go_peer_to_peer_and_within_one_device_to_device() -> None:
    fake = FakeHip()
    first, second = _open(fake), _open(fake, "AMD:1", 1)
    a, b = first.allocator, second.allocator
    assert isinstance(a, AMDAllocator) and isinstance(b, AMDAllocator)
    src, same, other = a.alloc(4), a.alloc(4), b.alloc(4)
    a.copyin(src, memoryview(b"\x01\x02\x03\x04"))
    assert a.transfer(same, a, src, 4)
    assert b.transfer(other, a, src, 4)
    assert fake.memory[same] == fake.memory[other] == bytearray(b"\x01\x02\x03\x04")
    assert fake.calls[-3:] == ["dtod on 0", "sync 0", "peer 0 -> 1"]
    assert not a.transfer(same, _HostAllocator(), 0, 4), "another kind of device goes through the host"


def test_launch_passes_buffers_then_variables_in_one_buffer_on_the_devices_gpu() -> None:
    fake = FakeHip(kernels={"scale"})
    backend = _open(fake, "AMD:1", 1)
    program = backend.load("scale", CODE_OBJECT)
    out, src = backend.allocator.alloc(16), backend.allocator.alloc(16)
    _open(fake)  # GPU 0 current again
    assert program([out, src], (4, 1, 1), (64, 1, 1), [7, -2]) is None
    launch = fake.launches[-1]
    assert (launch.grid, launch.block, launch.arguments) == ((4, 1, 1), (64, 1, 1), (out, src, 7, -2))
    assert launch.markers == (1, 2, 3), "HIP_LAUNCH_PARAM_BUFFER_POINTER, _SIZE, _END"
    assert fake.calls[-1] == "launch scale on 1"


def test_a_timed_launch_returns_the_event_time_in_seconds() -> None:
    fake = FakeHip(kernels={"k"})
    backend = _open(fake)
    program = backend.load("k", CODE_OBJECT)
    assert program([backend.allocator.alloc(4)], (1, 1, 1), (1, 1, 1), [], wait=True) == pytest.approx(0.0015)
    assert not fake._events, "the timing events are destroyed after use"


def test_a_launch_the_device_cannot_run_is_refused_before_the_runtime() -> None:
    fake = FakeHip(kernels={"k"})
    program = _open(fake).load("k", CODE_OBJECT)
    with pytest.raises(BackendError, match=r"'k' cannot launch.*2048 work-items per workgroup"):
        program([], (1, 1, 1), (2048, 1, 1), [])
    assert not fake.launches


def test_load_refuses_bytes_that_are_not_a_code_object() -> None:
    with pytest.raises(BackendError, match="not a code object"):
        _open(FakeHip()).load("k", b"// some HIP text")


def test_load_names_a_missing_kernel_and_the_expected_signature() -> None:
    with pytest.raises(BackendError, match=r"the code object has no kernel 'E_4'.*hipErrorNotFound.*"
                                           r'extern "C" __attribute__\(\(global\)\) void E_4'):
        _open(FakeHip(kernels={"other"})).load("E_4", CODE_OBJECT)


def test_synchronize_waits_on_the_devices_gpu() -> None:
    fake = FakeHip()
    first, second = _open(fake), _open(fake, "AMD:1", 1)
    second.synchronize()
    first.synchronize()
    assert fake.calls[-2:] == ["sync 1", "sync 0"]

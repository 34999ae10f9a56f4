"""AMDBackend over a stand-in runtime (amd_fakes.FakeHip): what it asks of the HIP runtime for each plugin-API call.

The checks every GPU backend shares (allocator, copies, timed launches, synchronize) are plygrad.runtime.testing_gpu's
`FakeGPUBackendChecks`, run here by `TestAMDOverFakeRuntime`; the rest are AMD's own."""

from __future__ import annotations

import pytest
from amd_fakes import FakeHip

from plygrad.backends.amd.backend import AMDAllocator, AMDBackend
from plygrad.backends.amd.compiler import AMDCompiler, find_toolchain
from plygrad.backends.amd.hip import HipOutOfMemoryError, HipRuntime
from plygrad.ir.target import Target
from plygrad.runtime.errors import BackendError
from plygrad.runtime.testing_gpu import FakeGPU, FakeGPUBackendChecks, NoCompiler

CODE_OBJECT = b"\x7fELF" + bytes(60)  # the fake runtime only looks at the magic


def _open(fake: FakeHip, name: str = "AMD", ordinal: int = 0) -> AMDBackend:
    # these tests load prepared binaries; a toolchain is not what they are about (test_compiler.py is)
    return AMDBackend(name, HipRuntime(fake), ordinal, NoCompiler())


class TestAMDOverFakeRuntime(FakeGPUBackendChecks):
    binary = CODE_OBJECT
    allocator_type = AMDAllocator

    def make_fake(self, kernel: str | None = None, **fields: object) -> FakeGPU:
        return FakeHip(kernels=set() if kernel is None else {kernel}, **fields)

    def open(self, fake: FakeGPU, ordinal: int = 0) -> AMDBackend:
        assert isinstance(fake, FakeHip)
        return _open(fake, "AMD" if ordinal == 0 else f"AMD:{ordinal}", ordinal)

    def alloc_call(self, nbytes: int, ordinal: int) -> str:
        return f"alloc {nbytes} on {ordinal}"

    def sync_call(self, ordinal: int) -> str:
        return f"sync {ordinal}"

    def transfer_calls(self) -> list[str]:
        return ["dtod on 0", "sync 0", "peer 0 -> 1"]


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


def test_out_of_memory_is_a_memory_error() -> None:
    with pytest.raises(MemoryError, match="hipMalloc: hipErrorOutOfMemory, asked 3 GiB, 2 GiB free"):
        _open(FakeHip(free_bytes=2 << 30)).allocator.alloc(3 << 30)
    assert issubclass(HipOutOfMemoryError, BackendError)


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

"""MetalBackend over a stand-in Objective-C runtime (fake_objc.FakeObjC): the Metal messages each plugin-API call
sends, with their arguments, and what the backend makes of Metal's answers. The stand-in enforces Cocoa's rules
(ownership, autorelease pools, one ctypes argument per selector colon), so a wrong message fails here on Linux."""

from __future__ import annotations

import gc
import struct

import pytest
from fake_objc import FakeObjC

from plygrad.backends.metal.backend import MetalAllocator, MetalBackend, open_metal
from plygrad.backends.metal.compiler import MetalCompiler
from plygrad.backends.metal.device import MetalDevice
from plygrad.backends.metal.objc import running_on
from plygrad.backends.metal.target import metal_target
from plygrad.ir.target import Target
from plygrad.runtime.errors import BackendError, CompileError

ADD = """#include <metal_stdlib>
using namespace metal;
kernel void add(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]],
                constant long& n [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]],
                uint3 lid [[thread_position_in_threadgroup]]) {
  data0[gid.x * 4 + lid.x] = data1[gid.x * 4 + lid.x] + (float)n;
}
"""


def _add(buffers: list[memoryview], values: list[bytes], groups: tuple[int, int, int],
         threads: tuple[int, int, int]) -> None:
    """What `ADD` does, in Python: the stand-in GPU runs this for the kernel named "add"."""
    out, x = buffers[0].cast("f"), buffers[1].cast("f")
    (n,) = struct.unpack("<q", values[0])
    for g in range(groups[0]):
        for t in range(threads[0]):
            out[g * 4 + t] = x[g * 4 + t] + n


def _open(fake: FakeObjC | None = None) -> tuple[MetalBackend, FakeObjC]:
    fake = fake or FakeObjC(kernels={"add": _add})
    device = MetalDevice(fake)
    return MetalBackend("METAL", device, MetalCompiler(validate=device.library_from_source,
                                                       release=device.release)), fake


def test_target_and_limits_come_from_the_device() -> None:
    backend, _ = _open()
    target = backend.target
    assert (target.device, target.renderer, target.arch, target.has_local, target.has_shared) == \
        ("METAL", "metal", "apple9", True, True)
    assert (target.shared_max, target.local_max, target.max_threads_per_group) == (32768, (1024, 1024, 1024), 1024)
    assert "Fake Apple M3" in repr(backend) and "apple9" in repr(backend)
    older, _ = _open(FakeObjC(family=1007))
    assert older.target.arch == "apple7"
    assert metal_target("apple8") == Target.metal("apple8")


def test_no_gpu_is_unavailable() -> None:
    with pytest.raises(BackendError, match="unavailable: macOS reports no Metal GPU"):
        MetalDevice(FakeObjC(gpu=False))


def test_open_metal_off_macos_is_unavailable() -> None:
    if running_on() == "darwin":
        pytest.skip("this machine is a Mac: test_registry.py opens the real device")  # never on CI's Linux
    with pytest.raises(BackendError, match="unavailable: Metal needs macOS"):
        open_metal("METAL")


@pytest.mark.parametrize("nbytes", [0, 1, 3, 4096, 100_003])
def test_buffers_round_trip_through_shared_memory(nbytes: int) -> None:
    backend, fake = _open()
    allocator = backend.allocator
    assert isinstance(allocator, MetalAllocator)
    handle = allocator.alloc(nbytes)
    data = bytes(i % 251 for i in range(nbytes))
    allocator.copyin(handle, memoryview(data))
    back = bytearray(nbytes)
    allocator.copyout(memoryview(back), handle)
    assert bytes(back) == data
    assert fake.messages("newBufferWithLength:options:")[-1] == (max(1, nbytes), 0)  # shared storage
    allocator.free(handle)
    assert fake.live("buffer") == 0


def test_a_launch_binds_buffers_then_variables_and_dispatches_groups_of_threads() -> None:
    backend, fake = _open()
    program = backend.load("add", backend.compiler.compile(ADD))
    out, x = backend.allocator.alloc(32), backend.allocator.alloc(32)
    backend.allocator.copyin(x, memoryview(struct.pack("<8f", *range(8))))
    assert program([out, x], (2, 1, 1), (4, 1, 1), [10]) is None  # asynchronous
    backend.synchronize()
    got = bytearray(32)
    backend.allocator.copyout(memoryview(got), out)
    assert struct.unpack("<8f", got) == tuple(float(i + 10) for i in range(8))
    assert [m[2] for m in fake.messages("setBuffer:offset:atIndex:")] == [0, 1]
    assert fake.messages("setBytes:length:atIndex:")[0][1:] == (8, 2)  # one 8-byte long after the buffers
    assert fake.messages("dispatchThreadgroups:threadsPerThreadgroup:") == [((2, 1, 1), (4, 1, 1))]
    assert fake.live("command_buffer") == 0  # released once waited for


def test_one_compile_per_program_and_safe_math() -> None:
    backend, fake = _open()
    backend.load("add", backend.compiler.compile(ADD))
    assert fake.compiled_sources == [ADD]  # load took the library compile made
    options = [o for o in fake.objects.values() if o.kind == "options"]
    assert options[0].attrs == {"mathMode": 0, "mathFloatingPointFunctions": 1} and options[0].references == 0
    older, old_fake = _open(FakeObjC(has_math_mode=False, kernels={"add": _add}))
    older.compiler.compile(ADD)
    assert [o.attrs for o in old_fake.objects.values() if o.kind == "options"] == [{"fastMathEnabled": False}]


def test_timed_launches_return_gpu_seconds() -> None:
    backend, _ = _open()
    program = backend.load("add", backend.compiler.compile(ADD))
    out, x = backend.allocator.alloc(16), backend.allocator.alloc(16)
    assert program([out, x], (1, 1, 1), (4, 1, 1), [0], wait=True) == pytest.approx(0.25)


def test_a_compile_error_quotes_the_line_metal_blamed() -> None:
    backend, _ = _open()
    broken = ADD.replace("using namespace metal;", "#error not metal")
    with pytest.raises(CompileError, match=r"line 2: `#error not metal`") as failure:
        backend.compiler.compile(broken)
    assert failure.value.line == 2


def test_load_refuses_bytes_that_are_not_its_format_and_names_missing_kernels() -> None:
    backend, _ = _open()
    with pytest.raises(BackendError, match="neither a metallib"):
        backend.load("add", b"\xff\xfe garbage")
    with pytest.raises(BackendError, match="no kernel 'mul'"):
        backend.load("mul", ADD.encode())


def test_a_metallib_loads_through_new_library_with_data() -> None:
    backend, fake = _open()
    program = backend.load("add", b"MTLB" + ADD.encode())
    assert fake.messages("newLibraryWithData:error:") and program.pipeline.max_threads == 1024


def test_a_gpu_fault_surfaces_in_synchronize_naming_the_program() -> None:
    backend, fake = _open()
    program = backend.load("add", ADD.encode())
    out, x = backend.allocator.alloc(16), backend.allocator.alloc(16)
    fake.fail_next_command_buffer = True
    program([out, x], (1, 1, 1), (4, 1, 1), [0])
    with pytest.raises(BackendError, match=r"Metal program 'add' failed on the GPU: .*Timeout"):
        backend.synchronize()


def test_a_launch_beyond_the_pipeline_fails_before_dispatch() -> None:
    backend, fake = _open(FakeObjC(pipeline_max_threads=256, kernels={"add": _add}))
    program = backend.load("add", ADD.encode())
    out, x = backend.allocator.alloc(16), backend.allocator.alloc(16)
    with pytest.raises(BackendError, match="this pipeline allows 256"):
        program([out, x], (1, 1, 1), (512, 1, 1), [0])
    assert fake.messages("dispatchThreadgroups:threadsPerThreadgroup:") == []


def test_dropping_a_program_releases_what_it_owns() -> None:
    backend, fake = _open()
    program = backend.load("add", backend.compiler.compile(ADD))
    assert (fake.live("pipeline"), fake.live("function"), fake.live("library")) == (1, 1, 1)
    del program
    gc.collect()
    assert (fake.live("pipeline"), fake.live("function"), fake.live("library")) == (0, 0, 0)


def test_copies_between_metal_buffers_stay_on_the_device() -> None:
    backend, _ = _open()
    allocator = backend.allocator
    src, dst = allocator.alloc(8), allocator.alloc(8)
    allocator.copyin(src, memoryview(b"abcdefgh"))
    assert allocator.transfer(dst, allocator, src, 8)
    back = bytearray(8)
    allocator.copyout(memoryview(back), dst)
    assert bytes(back) == b"abcdefgh"


WIDE = """#include <metal_stdlib>
using namespace metal;
struct plygrad_args { device float* data0; ... };
kernel void wide(constant plygrad_args& args [[buffer(0)]], uint3 gid [[threadgroup_position_in_grid]],
                 uint3 lid [[thread_position_in_threadgroup]]) {}
"""


def test_more_than_31_bindings_pass_gpu_addresses_in_one_struct() -> None:
    seen: list[tuple[list[bytes], list[int]]] = []

    def wide(buffers: list[memoryview], values: list[bytes], groups: tuple[int, int, int],
             threads: tuple[int, int, int]) -> None:
        (packed,) = values  # the struct alone, at binding 0: 40 addresses, then the variable
        fields = [int.from_bytes(packed[i:i + 8], "little", signed=True) for i in range(0, len(packed), 8)]
        seen.append((values, fields))
        out = fake.buffer_at(fields[0]).cast("f")
        out[0] = sum(fake.buffer_at(address).cast("f")[0] for address in fields[1:40]) * fields[40]

    backend, fake = _open(FakeObjC(kernels={"wide": wide}))
    program = backend.load("wide", WIDE.encode())
    buffers = [backend.allocator.alloc(4) for _ in range(40)]
    for k, buf in enumerate(buffers[1:], 1):
        backend.allocator.copyin(buf, memoryview(struct.pack("<f", k)))
    program(buffers, (1, 1, 1), (1, 1, 1), [2])
    backend.synchronize()
    got = bytearray(4)
    backend.allocator.copyout(memoryview(got), buffers[0])
    assert struct.unpack("<f", got)[0] == sum(range(1, 40)) * 2
    assert len(seen[0][0][0]) == 41 * 8 and fake.messages("setBuffer:offset:atIndex:") == []
    assert len(fake.messages("useResource:usage:")) == 40  # each buffer made resident
    assert fake.messages("setBytes:length:atIndex:")[0][1:] == (41 * 8, 0)


def test_an_argument_struct_needs_gpu_addresses() -> None:
    backend, _ = _open(FakeObjC(has_gpu_address=False))
    program = backend.load("wide", WIDE.encode())
    buffers = [backend.allocator.alloc(4) for _ in range(32)]
    with pytest.raises(BackendError, match=r"gpuAddress\), which this macOS lacks"):
        program(buffers, (1, 1, 1), (1, 1, 1), [])

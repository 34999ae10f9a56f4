"""Stand-in GPU drivers for backends' tests, and the checks a GPU backend runs over its stand-in.

`FakeGPU` is the driver-independent half of a stand-in driver library (libcuda, libamdhip64): memory, modules,
events and the call log; a backend's fake names the driver's functions and calls its helpers. `FakeGPUBackendChecks`
checks a backend's allocator, copies, timed launches and synchronize against such a fake (a backend's test class
subclasses it). The registry checks (`library_opens`, `assert_recorded_unavailable`, `listing_line`, ...) are for a
backend that may not open here. No pytest import needed (docs/backends.md, "The shared plumbing").
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plygrad.runtime.compiling import run_tool
from plygrad.runtime.device import BackendStatus, Device
from plygrad.runtime.driver import DriverError, DriverLibrary
from plygrad.runtime.errors import BackendError, CompileError
from plygrad.runtime.plugin import Allocator, Backend, Compiler


@dataclass
class FakeGPU:
    """The half of a stand-in GPU driver library (libcuda, libamdhip64) that does not depend on the driver, for
    backends' tests on machines without the GPU: device memory as bytearrays at fake addresses, modules that are
    any ELF image, events, and the `calls` a test watches. A subclass names the driver's functions and calls these
    helpers, which return the driver's status (0 success, 1 invalid value, 2 out of memory, 200 invalid image,
    500 not found, 600 not ready: the numbers CUDA and HIP share). Out-pointers are written through `[0]`."""

    gpus: int = 2
    init_status: int = 0
    free_bytes: int = 2 << 30
    total_bytes: int = 80 << 30
    current: int = 0  # the context or device made current last
    memory: dict[int, bytearray] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    _next: int = 0x7F0000000000
    _functions: dict[int, str] = field(default_factory=dict)
    _events: dict[int, bool] = field(default_factory=dict)

    def _handle(self) -> int:
        self._next += 0x1000
        return self._next

    def mem_info(self, free: Any, total: Any) -> int:
        free[0], total[0] = self.free_bytes, self.total_bytes
        return 0

    def alloc(self, out: Any, nbytes: int, where: str) -> int:
        if nbytes > self.free_bytes:
            return 2
        pointer = self._handle()
        self.memory[pointer] = bytearray(nbytes)
        self.calls.append(f"alloc {nbytes} {where}")
        out[0] = pointer
        return 0

    def free(self, pointer: int) -> int:
        return 0 if self.memory.pop(pointer, None) is not None else 1

    def copy_to_device(self, dst: int, src: int, nbytes: int) -> int:
        self.memory[dst][:nbytes] = ctypes.string_at(src, nbytes)
        return 0

    def copy_to_host(self, dst: int, src: int, nbytes: int) -> int:
        ctypes.memmove(dst, bytes(self.memory[src][:nbytes]), nbytes)
        return 0

    def copy_on_device(self, dst: int, src: int, nbytes: int, call: str) -> int:
        self.memory[dst][:nbytes] = self.memory[src][:nbytes]
        self.calls.append(call)
        return 0

    def module_load(self, out: Any, image: bytes) -> int:
        if not image.startswith(b"\x7fELF"):
            return 200
        out[0] = self._handle()
        return 0

    def module_function(self, out: Any, name: bytes, known: bool) -> int:
        """A handle for kernel `name` when the module has it (`known`), remembered by name."""
        if not known:
            return 500
        handle = self._handle()
        self._functions[handle] = name.decode()
        out[0] = handle
        return 0

    def event_create(self, out: Any) -> int:
        handle = self._handle()
        self._events[handle] = False
        out[0] = handle
        return 0

    def event_record(self, event: int, stream: Any) -> int:
        self._events[event] = True
        return 0

    def event_synchronize(self, event: int) -> int:
        return 0 if self._events[event] else 600  # not ready: never recorded

    def event_elapsed(self, out: Any, start: int, end: int) -> int:
        out[0] = 1.5  # milliseconds
        return 0

    def event_destroy(self, event: int) -> int:
        del self._events[event]
        return 0


class NoCompiler(Compiler):
    """For tests that load prepared binaries: a toolchain is not what they are about."""

    cache_key = "none"

    def compile(self, source: str) -> bytes:
        raise CompileError("not used here")


class ForeignAllocator(Allocator[int]):
    """Another backend's allocator, which a GPU backend's `transfer` cannot read directly."""

    def alloc(self, nbytes: int) -> int:
        return 0

    def free(self, handle: int) -> None:
        return

    def copyin(self, handle: int, src: memoryview) -> None:
        return

    def copyout(self, dst: memoryview, handle: int) -> None:
        return


def build_stub_library(source: Path, folder: Path) -> Path:
    """Build a C stand-in for a driver library (`source`, e.g. libcuda_stub.c) into `folder` with the system C
    compiler, for tests of the ctypes prototypes end to end; AssertionError when there is no C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, f"these tests build {source.name} and need a C compiler (cc, gcc or clang)"
    out = folder / source.with_suffix(".so").name
    done = run_tool([cc, "-O1", "-shared", "-fPIC", "-o", str(out), str(source)])
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    return out


def assert_round_trip(allocator: Allocator[Any], data: bytes) -> Any:
    """Copy `data` into a new buffer and back out, check it came back whole, free the buffer; the handle it had."""
    handle = allocator.alloc(len(data))
    allocator.copyin(handle, memoryview(data))
    out = bytearray(len(data))
    allocator.copyout(memoryview(out), handle)
    assert bytes(out) == data, "the bytes copied out are not the bytes copied in"
    allocator.free(handle)
    return handle


def _raised(action: Callable[[], object]) -> DriverError:
    try:
        action()
    except DriverError as exc:
        return exc
    raise AssertionError("expected a DriverError")


def check_driver_errors(wrapper: DriverLibrary, *, allocate: Callable[[int], object], out_of_memory: str,
                        missing_function: str, bad_image: str, unnamed: tuple[str, str]) -> None:
    """A driver wrapper over a FakeGPU (2 GiB free) names its errors as the driver does: allocating 80 GiB raises
    `out_of_memory` (a MemoryError, with call, status 2 and name), a missing kernel `missing_function` and 7 bytes
    of garbage as a module `bad_image` (neither a MemoryError), and a status the driver cannot name its number
    (`unnamed`: the call, and the message after it)."""
    error = _raised(lambda: allocate(80 << 30))
    assert str(error) == out_of_memory, str(error)
    assert isinstance(error, MemoryError), "the Allocator contract asks for MemoryError on a full device"
    assert error.status == 2 and out_of_memory.startswith(f"{error.call}: {error.name}, "), (error.call, error.name)
    for action, message in ((lambda: wrapper.module_function(1, "nope"), missing_function),  # type: ignore[attr-defined]
                            (lambda: wrapper.module_load(b"garbage"), bad_image)):  # type: ignore[attr-defined]
        error = _raised(action)
        assert str(error) == message and not isinstance(error, MemoryError), str(error)
    call, text = unnamed
    error = wrapper.error(call, 999)
    assert str(error) == f"{call}: {text}" and error.status == 999, str(error)


class FakeGPUBackendChecks:
    """What every GPU backend over a `FakeGPU` must do for the plugin API. A subclass named Test... sets `binary`
    (bytes its `load` takes), `make_fake(**fields)` (its fake; `kernel` names one kernel the module holds),
    `open(fake, ordinal)` (the backend for device `ordinal`) and the call-log lines its driver writes."""

    binary: bytes = b"\x7fELF" + bytes(60)  # the fakes only look at the magic
    # the class of the backend's allocator (transfer between two of them needs no host)
    allocator_type: type[Allocator[Any]]

    def make_fake(self, kernel: str | None = None, **fields: Any) -> FakeGPU:
        raise NotImplementedError

    def open(self, fake: FakeGPU, ordinal: int = 0) -> Backend:
        raise NotImplementedError

    def alloc_call(self, nbytes: int, ordinal: int) -> str:
        """The call-log line of allocating `nbytes` on device `ordinal`."""
        raise NotImplementedError

    def sync_call(self, ordinal: int) -> str:
        raise NotImplementedError

    def transfer_calls(self) -> list[str]:
        """The call-log lines of a copy within device 0, then from device 0 to device 1."""
        raise NotImplementedError

    def test_allocator_round_trip_on_the_devices_own_gpu(self) -> None:
        for size in (1, 3, 4096):
            fake = self.make_fake()
            second = self.open(fake, 1)
            self.open(fake)  # makes GPU 0 current: the allocator must switch back
            data = bytes((i * 7 + 3) % 256 for i in range(size))
            handle = second.allocator.alloc(size)
            assert fake.calls[-1] == self.alloc_call(size, 1), "memory of device 1 is allocated on GPU 1"
            second.allocator.copyin(handle, memoryview(data))  # read-only source
            out = bytearray(size)
            second.allocator.copyout(memoryview(out), handle)
            assert bytes(out) == data
            second.allocator.free(handle)
            assert handle not in fake.memory

    def test_copyin_accepts_typed_views(self) -> None:
        fake = self.make_fake()
        allocator = self.open(fake).allocator
        handle = allocator.alloc(8)
        allocator.copyin(handle, memoryview(bytearray(range(8))).cast("i"))
        assert fake.memory[handle] == bytearray(range(8))

    def test_zero_bytes_need_no_driver_call(self) -> None:
        fake = self.make_fake()
        allocator = self.open(fake).allocator
        handle = allocator.alloc(0)
        allocator.copyin(handle, memoryview(b""))
        allocator.copyout(memoryview(bytearray()), handle)
        allocator.free(handle)
        assert handle == 0 and not fake.memory

    def test_copies_between_devices_go_peer_to_peer_and_within_one_device_to_device(self) -> None:
        fake = self.make_fake()
        a, b = self.open(fake).allocator, self.open(fake, 1).allocator
        assert isinstance(a, self.allocator_type) and isinstance(b, self.allocator_type)
        src, same, other = a.alloc(4), a.alloc(4), b.alloc(4)
        a.copyin(src, memoryview(b"\x01\x02\x03\x04"))
        assert a.transfer(same, a, src, 4)
        assert b.transfer(other, a, src, 4)
        assert fake.memory[same] == fake.memory[other] == bytearray(b"\x01\x02\x03\x04")
        assert fake.calls[-3:] == self.transfer_calls()
        assert not a.transfer(same, ForeignAllocator(), 0, 4), "another kind of device goes through the host"

    def test_a_timed_launch_returns_the_event_time_in_seconds(self) -> None:
        fake = self.make_fake(kernel="k")
        backend = self.open(fake)
        program = backend.load("k", self.binary)
        seconds = program([backend.allocator.alloc(4)], (1, 1, 1), (1, 1, 1), [], wait=True)
        assert seconds is not None and abs(seconds - 0.0015) < 1e-9, seconds
        assert not fake._events, "the timing events are destroyed after use"

    def test_synchronize_waits_on_the_devices_gpu(self) -> None:
        fake = self.make_fake()
        first, second = self.open(fake), self.open(fake, 1)
        second.synchronize()
        first.synchronize()
        assert fake.calls[-2:] == [self.sync_call(1), self.sync_call(0)]


# ---- the registry, for a backend that may not open here ----------------------------------------------------------
def library_opens(*names: str) -> bool:
    """Whether ctypes opens any of the libraries `names` (a driver present on this machine)."""
    for name in names:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def assert_cheap_descriptor(device: str, package: str) -> None:
    """`device` is registered by `<package>.descriptor:DESCRIPTOR`, with a priority above the CPU's."""
    record = Device.records()[device]
    assert record.entry_point == f"{package}.descriptor:DESCRIPTOR", record.entry_point
    assert record.descriptor is not None and record.descriptor.priority > 10, \
        f"{device} must win over the CPU where it opens"


def assert_import_loads_nothing_else(module: str, package: str) -> None:
    """Importing `module` in a fresh process imports no other module of `package` (no driver loads at import)."""
    code = (f"import sys, {module}; "
            f"extra = [m for m in sys.modules if m.startswith('{package}.') and m != '{module}']; "
            "assert not extra, f'importing the descriptor imported {extra}'")
    subprocess.run([sys.executable, "-c", code], check=True)  # noqa: S603 (this interpreter, code built here)


def assert_recorded_unavailable(device: str, cause: str, second_device: bool = True) -> None:
    """Opening `device` fails with `cause` (a regex of the factory's message), recorded as OPEN_FAILED; asking for
    `device:1` (when `second_device`) quotes the record; the default device is another backend."""
    for name, regex in ((device, rf"backend {device} failed to open device {device}: BackendError: {cause}"),
                        (f"{device}:1", rf"backend {device} is unavailable: failed to open: BackendError: {cause}")):
        if name != device and not second_device:
            continue
        try:
            Device[name]
        except BackendError as exc:
            assert re.search(regex, str(exc)), f"{exc} does not match {regex}"
        else:
            raise AssertionError(f"{name} opened; expected it to be unavailable ({cause})")
    record = Device.records()[device]
    assert record.status is BackendStatus.OPEN_FAILED, record.status
    assert re.search(cause, record.cause), record.cause
    if "CPU" in Device.records():  # plygrad-cpu is not a dependency: a backend package's own session lacks it
        assert device != Device.DEFAULT, "a backend that does not open is skipped for the default"


def listing_line(device: str) -> str:
    """The line `python -m plygrad.runtime` prints for `device` (AssertionError when it lists none)."""
    done = subprocess.run([sys.executable, "-m", "plygrad.runtime"], capture_output=True, text=True,
                          check=True)
    line = next((line for line in done.stdout.splitlines() if line.split()[:1] == [device]), None)
    assert line is not None, f"{device} is missing from the listing:\n{done.stdout}"
    return line

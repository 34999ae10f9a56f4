"""The METAL backend: Metal Shading Language programs built by the Metal framework (or `xcrun metal`) and run on the
Mac's GPU through the Objective-C runtime.

`Device["METAL"]` is the Mac's GPU (`MTLCreateSystemDefaultDevice`); a Mac has one, so `METAL:1` is refused. On
any other OS the factory raises `BackendError("unavailable: Metal needs macOS (this is linux)")`, which the registry
records: the package installs and imports everywhere, `python -m plygrad.runtime` lists it with that cause, and the
default device falls through to the next backend.

Buffers are shared-storage MTLBuffers (Apple GPUs have unified memory): a copy is a memmove through `contents`,
after the GPU finished what it was doing (`synchronize`), since a launch may still be reading or writing them.
Launches are asynchronous: each is one committed command buffer (device.py), all on one queue, which runs them in
order; `synchronize` waits for every one committed so far and raises the first GPU error. With `wait=True`
(DEBUG>=2, BEAM) a launch returns its GPU time (`GPUEndTime - GPUStartTime`).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from plygrad.backends.metal.compiler import MetalCompiler, find_xcrun, is_metallib
from plygrad.backends.metal.device import Completion, MetalDevice, Pipeline
from plygrad.backends.metal.launch import argument_struct, launch_dims, uses_argument_struct, variable_bytes
from plygrad.backends.metal.objc import load_objc
from plygrad.backends.metal.target import metal_target
from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import Allocator, Backend, Program


class MetalBuffer:
    """One shared MTLBuffer: the object, the CPU address of its bytes, its size."""

    __slots__ = ("address", "buffer", "nbytes")

    def __init__(self, buffer: int, address: int, nbytes: int) -> None:
        self.buffer, self.address, self.nbytes = buffer, address, nbytes

    def __repr__(self) -> str:
        return f"<MetalBuffer {self.nbytes} bytes at {self.address:#x}>"


def _host_address(view: memoryview) -> tuple[int, Any]:
    """The address of a host buffer's bytes and the object keeping them alive (a read-only view is copied once)."""
    flat = view if view.format == "B" and view.ndim == 1 else view.cast("B")
    array_type = ctypes.c_char * flat.nbytes
    array = array_type.from_buffer_copy(flat) if flat.readonly else array_type.from_buffer(flat)
    return ctypes.addressof(array), array


class MetalAllocator(Allocator[MetalBuffer]):
    """Shared-storage buffers of the Mac's GPU; copies wait for the GPU first."""

    def __init__(self, backend: MetalBackend) -> None:
        self.backend = backend
        self.device = backend.device

    def alloc(self, nbytes: int) -> MetalBuffer:
        buffer = self.device.new_buffer(nbytes)
        return MetalBuffer(buffer, self.device.contents(buffer), nbytes)

    def free(self, handle: MetalBuffer) -> None:
        self.device.release(handle.buffer)

    def copyin(self, handle: MetalBuffer, src: memoryview) -> None:
        if src.nbytes:
            self.backend.synchronize()  # a launch in flight may still read the old bytes
            address, keep = _host_address(src)
            ctypes.memmove(handle.address, address, src.nbytes)
            del keep

    def copyout(self, dst: memoryview, handle: MetalBuffer) -> None:
        if dst.nbytes:
            self.backend.synchronize()
            address, keep = _host_address(dst)
            ctypes.memmove(address, handle.address, dst.nbytes)
            del keep

    def transfer(self, dst: MetalBuffer, source: Allocator[Any], src: Any, nbytes: int) -> bool:
        """A COPY between METAL buffers without a host staging copy: both live in the same unified memory."""
        if not isinstance(source, MetalAllocator):
            return False
        if nbytes:
            source.backend.synchronize()
            self.backend.synchronize()
            ctypes.memmove(dst.address, src.address, nbytes)
        return True


def _release(device: MetalDevice, objects: tuple[int, ...]) -> None:
    for obj in objects:
        device.release(obj)


class MetalProgram(Program):
    """One kernel: its library, function and compute pipeline."""

    def __init__(self, backend: MetalBackend, name: str, binary: bytes) -> None:
        self.backend, self.device, self.name = backend, backend.device, name
        self.library = backend.library_for(binary, name)
        try:
            self.pipeline: Pipeline = self.device.pipeline(self.library, name)
        except BackendError:
            self.device.release(self.library)
            raise
        # released when the program is dropped, not at exit: by then the framework may be shutting down
        weakref.finalize(self, _release, self.device, (self.pipeline.state, self.pipeline.function,
                                                       self.library)).atexit = False

    def __call__(self, buffers: Sequence[Any], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None, vals: Sequence[int], wait: bool = False) -> float | None:
        groups, threads = launch_dims(global_size, local_size, self.pipeline.max_threads,
                                      self.device.max_threads_per_threadgroup, self.name)
        handles = [b.buffer for b in buffers]
        values: list[bytes] = []
        struct = None
        if uses_argument_struct(len(buffers), len(vals)):  # more than 31 bindings (launch.py)
            struct = argument_struct([self.device.gpu_address(h) for h in handles], vals, self.name)
        else:
            values = variable_bytes(vals, len(buffers), self.name)
        completion = self.backend.submit(lambda: self.device.dispatch(
            self.pipeline, handles, values, groups=groups, threads=threads, name=self.name, argument_struct=struct))
        return self.backend.wait_for(completion) if wait else None

class MetalBackend(Backend):
    """The Mac's GPU: `Device["METAL"]`."""

    def __init__(self, name: str, device: MetalDevice, compiler: MetalCompiler | None = None) -> None:
        self.device = device
        if compiler is None:
            xcrun = find_xcrun()
            compiler = MetalCompiler(xcrun) if xcrun is not None else \
                MetalCompiler(validate=device.library_from_source, release=device.release)
        self.metal_compiler = compiler
        target = metal_target(device.family, device.max_threads_per_threadgroup, device.max_threadgroup_memory)
        self._pending: list[Completion] = []
        self._lock = threading.Lock()
        super().__init__(name, target, MetalAllocator(self), compiler)

    def library_for(self, binary: bytes, name: str) -> int:
        """A library of `binary` (metallib or source bytes, compiler.py), reusing the one `compile` just made."""
        if is_metallib(binary):
            return self.device.library_from_data(binary)
        kept = self.metal_compiler.take_library(binary)
        if kept is not None:
            return kept
        try:
            source = binary.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BackendError(f"Metal program {name!r}: the binary is neither a metallib (MTLB) nor MSL source "
                               "text; the METAL backend loads what its MetalCompiler produced") from exc
        return self.device.library_from_source(source)

    def load(self, name: str, binary: bytes) -> Program:
        return MetalProgram(self, name, binary)

    def submit(self, dispatch: Any) -> Completion:
        """Run `dispatch` (which commits one command buffer) and remember its completion, in commit order."""
        with self._lock:
            completion: Completion = dispatch()
            self._pending.append(completion)
        return completion

    def wait_for(self, completion: Completion) -> float:
        """Wait for everything committed up to `completion` (the queue runs in order); its GPU seconds."""
        seconds = 0.0
        with self._lock:
            while self._pending:
                done = self._pending.pop(0)
                elapsed = self.device.wait(done)
                if done is completion:
                    seconds = elapsed
                    break
        return seconds

    def synchronize(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        errors = []
        for completion in pending:
            try:
                self.device.wait(completion)
            except BackendError as exc:  # wait for the rest all the same, then raise the first
                errors.append(exc)
        if errors:
            raise errors[0]

    def close(self) -> None:
        try:
            self.synchronize()
        finally:
            self.metal_compiler.close()

    def __repr__(self) -> str:
        return f"<MetalBackend {self.name} {self.device.name} {self.device.family}>"


def open_metal(device: str) -> MetalBackend:
    """The factory the descriptor names ("METAL"): raises BackendError("unavailable: Metal needs macOS ...") off
    macOS and ("unavailable: ...") on a Mac without a Metal GPU."""
    objc = load_objc()
    _, _, index = device.partition(":")
    if index not in ("", "0"):
        raise BackendError(f"device {device}: a Mac has one Metal GPU, use METAL")
    return MetalBackend(device, MetalDevice(objc))

"""The AMD backend: HIP programs compiled to AMDGPU code objects and launched through the HIP runtime.

`Device["AMD"]` is GPU 0, `Device["AMD:1"]` GPU 1. HIP keeps one current device per host thread, so every call
that touches a device first makes it current (`hipSetDevice`): the runtime compiles and copies from worker threads
too. Launches go to the null stream, which orders them with the blocking copies: `copyout` waits for the kernels
before it, and `synchronize` waits for everything. With `wait=True` (DEBUG>=2) a launch is timed between two HIP
events, so the time is the GPU's, not the host's.

Buffers are device pointers (ints; a zero-byte buffer is the null pointer, which no kernel dereferences).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from plygrad.backends.amd.compiler import CODE_OBJECT_MAGIC, AMDCompiler
from plygrad.backends.amd.hip import (
    MEMCPY_DEVICE_TO_DEVICE,
    MEMCPY_DEVICE_TO_HOST,
    MEMCPY_HOST_TO_DEVICE,
    HipError,
    HipRuntime,
    load_hip,
)
from plygrad.backends.amd.launch import LaunchLimits, launch_dims, pack_arguments
from plygrad.ir.target import Target
from plygrad.runtime.device_memory import DeviceMemory
from plygrad.runtime.driver import check_ordinal
from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import Backend, Compiler, Program


class AMDAllocator(DeviceMemory):
    """Device memory of one GPU (hipMalloc); copies are blocking hipMemcpy calls on the null stream, so they follow
    the kernels launched before them; between two GPUs hipMemcpyPeer (plygrad.runtime.device_memory)."""

    device: AMDBackend

    def __init__(self, device: AMDBackend) -> None:
        super().__init__(device)
        self.hip = device.hip

    def device_alloc(self, nbytes: int) -> int:
        return self.hip.malloc(nbytes)

    def device_free(self, handle: int) -> None:
        self.hip.free(handle)

    def to_device(self, dst: int, src_address: int, nbytes: int) -> None:
        self.hip.copy(dst, src_address, nbytes, MEMCPY_HOST_TO_DEVICE)

    def to_host(self, dst_address: int, src: int, nbytes: int) -> None:
        self.hip.copy(dst_address, src, nbytes, MEMCPY_DEVICE_TO_HOST)

    def on_device(self, dst: int, src: int, nbytes: int) -> None:
        self.hip.copy(dst, src, nbytes, MEMCPY_DEVICE_TO_DEVICE)

    def from_peer(self, dst: int, source: DeviceMemory, src: int, nbytes: int) -> None:
        assert isinstance(source, AMDAllocator)
        self.hip.copy_peer(dst, self.device.ordinal, src, source.device.ordinal, nbytes)

    def same_gpu(self, other: DeviceMemory) -> bool:
        return isinstance(other, AMDAllocator) and other.device.ordinal == self.device.ordinal


def _unload(hip: HipRuntime, ordinal: int, module: int) -> None:
    try:
        hip.set_device(ordinal)
        hip.module_unload(module)
    except HipError:
        pass  # the runtime is being torn down: its modules go with it


class AMDProgram(Program):
    """One kernel of a loaded code object."""

    def __init__(self, device: AMDBackend, name: str, binary: bytes) -> None:
        if not binary.startswith(CODE_OBJECT_MAGIC):
            raise BackendError(f"AMD program {name!r}: the binary is not a code object (no ELF header, no offload "
                               "bundle); the AMD backend loads what its AMDCompiler produced")
        self.device, self.hip, self.name = device, device.hip, name
        device.activate()
        self.module = self.hip.module_load(binary)
        # unload when the program is dropped, not at exit: by then the runtime may be shutting down
        weakref.finalize(self, _unload, self.hip, device.ordinal, self.module).atexit = False
        try:
            self.function = self.hip.module_function(self.module, name)
        except HipError as exc:
            raise BackendError(f"the code object has no kernel {name!r} ({exc}): the source must define "
                               f'`extern "C" __attribute__((global)) void {name}(...)`') from exc

    def __call__(self, buffers: Sequence[Any], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None, vals: Sequence[int], wait: bool = False) -> float | None:
        grid, block = launch_dims(global_size, local_size, self.device.limits, self.name)
        arguments = pack_arguments([int(b) for b in buffers], vals, self.name)
        self.device.activate()
        if not wait:
            self.hip.launch(self.function, grid, block, arguments.extra, self.name)
            return None
        return self.hip.timed(lambda: self.hip.launch(self.function, grid, block, arguments.extra, self.name))


class AMDBackend(Backend):
    """One AMD GPU: `Device["AMD"]` (GPU 0), `Device["AMD:1"]`..."""

    def __init__(self, name: str, hip: HipRuntime, ordinal: int, compiler: Compiler | None = None) -> None:
        count = hip.device_count()
        if count == 0:
            raise BackendError("unavailable: no AMD GPU (the HIP runtime is installed, but hipGetDeviceCount is 0)")
        check_ordinal(name, ordinal, count, "AMD", "AMD GPU")
        self.hip, self.ordinal = hip, ordinal
        self.activate()
        self.gpu_name = hip.device_name(ordinal)
        self.arch_name = hip.arch(ordinal)  # "gfx90a:sramecc+:xnack-": the features do not change the code
        target = Target.hip(self.arch_name, device="AMD")
        self.arch = target.arch
        self.limits = LaunchLimits(target.max_threads_per_group, target.local_max, target.global_max)
        super().__init__(name, target, AMDAllocator(self), compiler if compiler is not None else AMDCompiler(self.arch))

    def activate(self) -> None:
        """Make this GPU the calling thread's current HIP device."""
        self.hip.set_device(self.ordinal)

    def load(self, name: str, binary: bytes) -> Program:
        return AMDProgram(self, name, binary)

    def synchronize(self) -> None:
        self.activate()
        self.hip.synchronize()

    def __repr__(self) -> str:
        return f"<AMDBackend {self.name} {self.gpu_name} {self.arch_name}>"


def open_amd(device: str) -> AMDBackend:
    """The factory the descriptor names ("AMD", "AMD:1"); raises BackendError("unavailable: ...") where the HIP
    runtime or a GPU is missing, and BackendError naming what to install where no HIP compiler is."""
    _, _, index = device.partition(":")
    return AMDBackend(device, load_hip(), int(index or 0))

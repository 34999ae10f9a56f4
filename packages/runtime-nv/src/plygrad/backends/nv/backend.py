"""The NV backend: CUDA C programs compiled to cubins and launched through the CUDA driver API.

`Device["NV"]` is GPU 0, `Device["NV:1"]` GPU 1. Each device works in its GPU's primary context (the one PyTorch's
CUDA runtime uses too), made current on the calling thread before every driver call, since the runtime calls from
worker threads as well. Launches go to the default stream, which orders them with the blocking copies: `copyout`
waits for the kernels before it, and `synchronize` waits for everything. With `wait=True` (DEBUG>=2) a launch is
timed between two CUDA events, so the time is the GPU's, not the host's.

Buffers are device pointers (ints; a zero-byte buffer is the null pointer, which no kernel dereferences).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Final

from plygrad.backends.nv.compiler import NVCompiler
from plygrad.backends.nv.driver import Attribute, CudaDriver, CudaError, load_driver
from plygrad.backends.nv.launch import launch_dims, pack_arguments
from plygrad.backends.nv.target import cuda_target
from plygrad.runtime.device_memory import DeviceMemory
from plygrad.runtime.driver import check_ordinal
from plygrad.runtime.errors import BackendError
from plygrad.runtime.launching import LaunchLimits
from plygrad.runtime.plugin import Backend, Compiler, Program

ELF_MAGIC: Final = b"\x7fELF"


class NVAllocator(DeviceMemory):
    """Device memory of one GPU (cuMemAlloc); copies are blocking cuMemcpy calls on the default stream, so they
    follow the kernels launched before them. Between two GPUs a peer copy (cuMemcpyPeer orders against the
    destination context only, so the source GPU is synchronized first: plygrad.runtime.device_memory)."""

    device: NVBackend

    def __init__(self, device: NVBackend) -> None:
        super().__init__(device)
        self.driver = device.driver

    def device_alloc(self, nbytes: int) -> int:
        return self.driver.mem_alloc(nbytes)

    def device_free(self, handle: int) -> None:
        self.driver.mem_free(handle)

    def to_device(self, dst: int, src_address: int, nbytes: int) -> None:
        self.driver.copy_to_device(dst, src_address, nbytes)

    def to_host(self, dst_address: int, src: int, nbytes: int) -> None:
        self.driver.copy_to_host(dst_address, src, nbytes)

    def on_device(self, dst: int, src: int, nbytes: int) -> None:
        self.driver.copy_on_device(dst, src, nbytes)

    def from_peer(self, dst: int, source: DeviceMemory, src: int, nbytes: int) -> None:
        assert isinstance(source, NVAllocator)
        self.driver.copy_peer(dst, self.device.context, src, source.device.context, nbytes)

    def same_gpu(self, other: DeviceMemory) -> bool:
        return isinstance(other, NVAllocator) and other.device.context == self.device.context


def _unload(driver: CudaDriver, context: int, module: int) -> None:
    try:
        driver.set_current(context)
        driver.module_unload(module)
    except CudaError:
        pass  # the context is being torn down: its modules go with it


class NVProgram(Program):
    """One kernel of a loaded cubin."""

    def __init__(self, device: NVBackend, name: str, binary: bytes) -> None:
        if not binary.startswith(ELF_MAGIC):
            raise BackendError(f"NV program {name!r}: the binary is not a cubin (no ELF header); the NV backend "
                               "loads what its NVCompiler produced")
        self.device, self.driver, self.name = device, device.driver, name
        device.activate()
        self.module = self.driver.module_load(binary)
        # unload when the program is dropped, not at exit: by then the driver may be shutting down
        weakref.finalize(self, _unload, self.driver, device.context, self.module).atexit = False
        try:
            self.function = self.driver.module_function(self.module, name)
        except CudaError as exc:
            raise BackendError(f"the cubin has no kernel {name!r} ({exc}): the source must define "
                               f'`extern "C" __global__ void {name}(...)`') from exc
        self.param_sizes = self.driver.param_sizes(self.function)

    def __call__(self, buffers: Sequence[Any], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None, vals: Sequence[int], wait: bool = False) -> float | None:
        grid, block = launch_dims(global_size, local_size, self.device.limits, self.name)
        arguments = pack_arguments([int(b) for b in buffers], vals, self.param_sizes, self.name)
        self.device.activate()
        if not wait:
            self.driver.launch(self.function, grid, block, arguments.params, self.name)
            return None
        return self.driver.timed(lambda: self.driver.launch(self.function, grid, block, arguments.params, self.name))


class NVBackend(Backend):
    """One NVIDIA GPU: `Device["NV"]` (GPU 0), `Device["NV:1"]`..."""

    def __init__(self, name: str, driver: CudaDriver, ordinal: int, compiler: Compiler | None = None) -> None:
        count = driver.device_count()
        if count == 0:
            raise BackendError("unavailable: no NVIDIA GPU (the driver is installed, but cuDeviceGetCount is 0)")
        check_ordinal(name, ordinal, count, "NV", "NVIDIA GPU")
        self.driver, self.ordinal = driver, ordinal
        self.cu_device = driver.device(ordinal)
        self.context = driver.primary_context(self.cu_device)
        self.activate()
        self.gpu_name = driver.device_name(self.cu_device)

        def attribute(which: Attribute) -> int:
            return driver.attribute(self.cu_device, which)

        major, minor = attribute(Attribute.COMPUTE_CAPABILITY_MAJOR), attribute(Attribute.COMPUTE_CAPABILITY_MINOR)
        self.arch = f"sm_{major}{minor}"
        self.limits = LaunchLimits(
            attribute(Attribute.MAX_THREADS_PER_BLOCK),
            (attribute(Attribute.MAX_BLOCK_DIM_X), attribute(Attribute.MAX_BLOCK_DIM_Y),
             attribute(Attribute.MAX_BLOCK_DIM_Z)),
            (attribute(Attribute.MAX_GRID_DIM_X), attribute(Attribute.MAX_GRID_DIM_Y),
             attribute(Attribute.MAX_GRID_DIM_Z)))
        target = cuda_target(self.arch, self.limits, attribute(Attribute.MAX_SHARED_MEMORY_PER_BLOCK))
        super().__init__(name, target, NVAllocator(self), compiler if compiler is not None else NVCompiler(self.arch))

    def activate(self) -> None:
        """Make this GPU's context current on the calling thread."""
        self.driver.set_current(self.context)

    def load(self, name: str, binary: bytes) -> Program:
        return NVProgram(self, name, binary)

    def synchronize(self) -> None:
        self.activate()
        self.driver.synchronize()

    def __repr__(self) -> str:
        return f"<NVBackend {self.name} {self.gpu_name} {self.arch}>"


def open_nv(device: str) -> NVBackend:
    """The factory the descriptor names ("NV", "NV:1"); raises BackendError("unavailable: ...") where the driver
    or a GPU is missing, and BackendError naming what to install where no CUDA compiler is."""
    _, _, index = device.partition(":")
    return NVBackend(device, load_driver(), int(index or 0))

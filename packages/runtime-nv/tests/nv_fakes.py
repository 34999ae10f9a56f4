"""A stand-in for libcuda with the driver functions the backend calls, for machines without a GPU.

It is not the thing under test: the tests check our wrapper (error names and messages, argument packing, context
activation, the allocator's copies, event timing) by watching what it asks of the driver. Memory, modules and
events are plygrad.runtime.testing_gpu's `FakeGPU`; this names them as libcuda does.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from plygrad.runtime.testing_gpu import FakeGPU

ERROR_NAMES = {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
               34: "CUDA_ERROR_STUB_LIBRARY", 100: "CUDA_ERROR_NO_DEVICE", 200: "CUDA_ERROR_INVALID_IMAGE",
               500: "CUDA_ERROR_NOT_FOUND", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"}
ERROR_TEXT = {2: "out of memory", 500: "named symbol not found"}
H100_ATTRIBUTES = {1: 1024, 2: 1024, 3: 1024, 4: 64, 5: 2**31 - 1, 6: 65535, 7: 65535, 8: 49152, 16: 132,
                   75: 9, 76: 0}


@dataclass
class Launch:
    function: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    arguments: list[int]  # each parameter's value, read at the width cuFuncGetParamInfo gives


@dataclass
class FakeCuda(FakeGPU):
    """Answers like libcuda for `gpus` devices; `kernels` maps a kernel name to its parameter sizes."""

    kernels: dict[str, tuple[int, ...]] = field(default_factory=dict)
    attributes: dict[int, int] = field(default_factory=lambda: dict(H100_ATTRIBUTES))
    launches: list[Launch] = field(default_factory=list)

    def cuGetErrorName(self, status: int, out: Any) -> int:
        if status not in ERROR_NAMES:
            return 1
        out[0] = ERROR_NAMES[status].encode()
        return 0

    def cuGetErrorString(self, status: int, out: Any) -> int:
        if status not in ERROR_TEXT:
            return 1
        out[0] = ERROR_TEXT[status].encode()
        return 0

    def cuInit(self, flags: int) -> int:
        return self.init_status

    def cuDeviceGetCount(self, out: Any) -> int:
        out[0] = self.gpus
        return 0

    def cuDeviceGet(self, out: Any, ordinal: int) -> int:
        if not 0 <= ordinal < self.gpus:
            return 101  # CUDA_ERROR_INVALID_DEVICE
        out[0] = ordinal
        return 0

    def cuDeviceGetName(self, buf: Any, size: int, device: int) -> int:
        buf.value = f"Fake H100 #{device}".encode()
        return 0

    def cuDeviceGetAttribute(self, out: Any, attribute: int, device: int) -> int:
        out[0] = self.attributes[attribute]
        return 0

    def cuDevicePrimaryCtxRetain(self, out: Any, device: int) -> int:
        out[0] = 0xC0 + device
        return 0

    def cuCtxSetCurrent(self, context: int) -> int:
        self.current = context
        return 0

    def cuCtxSynchronize(self) -> int:
        self.calls.append(f"sync {self.current:#x}")
        return 0

    def cuMemGetInfo_v2(self, free: Any, total: Any) -> int:
        return self.mem_info(free, total)

    def cuMemAlloc_v2(self, out: Any, nbytes: int) -> int:
        if nbytes == 0:
            return 1  # the real driver refuses zero bytes too
        return self.alloc(out, nbytes, f"in {self.current:#x}")

    def cuMemFree_v2(self, pointer: int) -> int:
        return self.free(pointer)

    def cuMemcpyHtoD_v2(self, dst: int, src: int, nbytes: int) -> int:
        return self.copy_to_device(dst, src, nbytes)

    def cuMemcpyDtoH_v2(self, dst: int, src: int, nbytes: int) -> int:
        return self.copy_to_host(dst, src, nbytes)

    def cuMemcpyDtoD_v2(self, dst: int, src: int, nbytes: int) -> int:
        return self.copy_on_device(dst, src, nbytes, "dtod")

    def cuMemcpyPeer(self, dst: int, dst_ctx: int, src: int, src_ctx: int, nbytes: int) -> int:
        return self.copy_on_device(dst, src, nbytes, f"peer {src_ctx:#x} -> {dst_ctx:#x}")

    def cuModuleLoadData(self, out: Any, image: bytes) -> int:
        return self.module_load(out, image)

    def cuModuleUnload(self, module: int) -> int:
        return 0

    def cuModuleGetFunction(self, out: Any, module: int, name: bytes) -> int:
        return self.module_function(out, name, name.decode() in self.kernels)

    def cuFuncGetParamInfo(self, function: int, index: int, offset: Any, size: Any) -> int:
        sizes = self.kernels[self._functions[function]]
        if index >= len(sizes):
            return 1
        offset[0], size[0] = sum(sizes[:index]), sizes[index]
        return 0

    def cuLaunchKernel(self, function: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int,
                       stream: Any, params: Any, extra: Any) -> int:
        sizes = self.kernels[self._functions[function]]
        if bx * by * bz > self.attributes[1]:
            return 701
        kinds = {4: ctypes.c_int32, 8: ctypes.c_int64}
        arguments = [kinds[size].from_address(params[i]).value for i, size in enumerate(sizes)]
        self.launches.append(Launch(function, (gx, gy, gz), (bx, by, bz), arguments))
        self.calls.append(f"launch {self._functions[function]} in {self.current:#x}")
        return 0

    def cuEventCreate(self, out: Any, flags: int) -> int:
        return self.event_create(out)

    def cuEventRecord(self, event: int, stream: Any) -> int:
        return self.event_record(event, stream)

    def cuEventSynchronize(self, event: int) -> int:
        return self.event_synchronize(event)

    def cuEventElapsedTime(self, out: Any, start: int, end: int) -> int:
        return self.event_elapsed(out, start, end)

    def cuEventDestroy_v2(self, event: int) -> int:
        return self.event_destroy(event)

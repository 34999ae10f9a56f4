"""A stand-in for libcuda with the driver functions the backend calls, for machines without a GPU.

It is not the thing under test: the tests check our wrapper (error names and messages, argument packing, context
activation, the allocator's copies, event timing) by watching what it asks of the driver. Memory is host memory:
`cuMemAlloc` hands out fake device addresses backed by bytearrays, and the copies go through ctypes addresses the
way the real driver reads them. Out-pointers arrive as `ctypes.pointer` objects, written through `[0]`.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

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
class FakeCuda:
    """Answers like libcuda for `gpus` devices; `kernels` maps a kernel name to its parameter sizes."""

    gpus: int = 2
    init_status: int = 0
    free_bytes: int = 2 << 30
    total_bytes: int = 80 << 30
    kernels: dict[str, tuple[int, ...]] = field(default_factory=dict)
    attributes: dict[int, int] = field(default_factory=lambda: dict(H100_ATTRIBUTES))
    current: int = 0  # the context made current last
    memory: dict[int, bytearray] = field(default_factory=dict)
    launches: list[Launch] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    _next: int = 0x7F0000000000
    _functions: dict[int, str] = field(default_factory=dict)
    _events: dict[int, bool] = field(default_factory=dict)

    def _handle(self) -> int:
        self._next += 0x1000
        return self._next

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
        free[0], total[0] = self.free_bytes, self.total_bytes
        return 0

    def cuMemAlloc_v2(self, out: Any, nbytes: int) -> int:
        if nbytes > self.free_bytes:
            return 2
        if nbytes == 0:
            return 1  # the real driver refuses zero bytes too
        pointer = self._handle()
        self.memory[pointer] = bytearray(nbytes)
        self.calls.append(f"alloc {nbytes} in {self.current:#x}")
        out[0] = pointer
        return 0

    def cuMemFree_v2(self, pointer: int) -> int:
        return 0 if self.memory.pop(pointer, None) is not None else 1

    def cuMemcpyHtoD_v2(self, dst: int, src: int, nbytes: int) -> int:
        self.memory[dst][:nbytes] = ctypes.string_at(src, nbytes)
        return 0

    def cuMemcpyDtoH_v2(self, dst: int, src: int, nbytes: int) -> int:
        ctypes.memmove(dst, bytes(self.memory[src][:nbytes]), nbytes)
        return 0

    def cuMemcpyDtoD_v2(self, dst: int, src: int, nbytes: int) -> int:
        self.memory[dst][:nbytes] = self.memory[src][:nbytes]
        self.calls.append("dtod")
        return 0

    def cuMemcpyPeer(self, dst: int, dst_ctx: int, src: int, src_ctx: int, nbytes: int) -> int:
        self.memory[dst][:nbytes] = self.memory[src][:nbytes]
        self.calls.append(f"peer {src_ctx:#x} -> {dst_ctx:#x}")
        return 0

    def cuModuleLoadData(self, out: Any, image: bytes) -> int:
        if not image.startswith(b"\x7fELF"):
            return 200
        out[0] = self._handle()
        return 0

    def cuModuleUnload(self, module: int) -> int:
        return 0

    def cuModuleGetFunction(self, out: Any, module: int, name: bytes) -> int:
        if name.decode() not in self.kernels:
            return 500
        handle = self._handle()
        self._functions[handle] = name.decode()
        out[0] = handle
        return 0

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
        handle = self._handle()
        self._events[handle] = False
        out[0] = handle
        return 0

    def cuEventRecord(self, event: int, stream: Any) -> int:
        self._events[event] = True
        return 0

    def cuEventSynchronize(self, event: int) -> int:
        return 0 if self._events[event] else 600  # CUDA_ERROR_NOT_READY: never recorded

    def cuEventElapsedTime(self, out: Any, start: int, end: int) -> int:
        out[0] = 1.5  # milliseconds
        return 0

    def cuEventDestroy_v2(self, event: int) -> int:
        del self._events[event]
        return 0

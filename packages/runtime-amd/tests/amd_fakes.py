"""A stand-in for libamdhip64 with the runtime functions the backend calls, for machines without an AMD GPU.

It is not the thing under test: the tests check our wrapper (error names and messages, the argument buffer, the
current device, the allocator's copies, event timing) by watching what it asks of the runtime. Memory is host
memory: `hipMalloc` hands out fake device addresses backed by bytearrays, and the copies go through ctypes addresses
the way the real runtime reads them. Out-pointers arrive as `ctypes.pointer` objects, written through `[0]`.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field
from typing import Any

ERROR_NAMES = {0: "hipSuccess", 1: "hipErrorInvalidValue", 2: "hipErrorOutOfMemory", 100: "hipErrorNoDevice",
               101: "hipErrorInvalidDevice", 200: "hipErrorInvalidImage", 500: "hipErrorNotFound",
               600: "hipErrorNotReady"}
ERROR_TEXT = {2: "out of memory", 500: "named symbol not found"}
PROPERTIES_OFFSET = 1160  # where gcnArchName sits in this fake's struct (the real offset differs per ROCm release)


@dataclass(frozen=True)
class Launch:
    function: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    arguments: tuple[int, ...]  # the argument buffer read as 8-byte values
    markers: tuple[int, int, int]  # the HIP_LAUNCH_PARAM markers of `extra`


@dataclass
class FakeHip:
    """Answers like libamdhip64 for `gpus` devices of arch `arch`; `kernels` names the kernels a module holds."""

    gpus: int = 2
    arch: str = "gfx90a:sramecc+:xnack-"
    init_status: int = 0
    count_status: int = 0
    free_bytes: int = 2 << 30
    total_bytes: int = 64 << 30
    kernels: set[str] = field(default_factory=set)
    current: int = 0
    memory: dict[int, bytearray] = field(default_factory=dict)
    launches: list[Launch] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    _next: int = 0x7F0000000000
    _functions: dict[int, str] = field(default_factory=dict)
    _events: dict[int, bool] = field(default_factory=dict)

    def _handle(self) -> int:
        self._next += 0x1000
        return self._next

    def hipGetErrorName(self, status: int) -> bytes:
        return ERROR_NAMES.get(status, "").encode()

    def hipGetErrorString(self, status: int) -> bytes:
        return ERROR_TEXT.get(status, "").encode()

    def hipInit(self, flags: int) -> int:
        return self.init_status

    def hipRuntimeGetVersion(self, out: Any) -> int:
        out[0] = 60241134
        return 0

    def hipGetDeviceCount(self, out: Any) -> int:
        out[0] = self.gpus
        return self.count_status

    def hipSetDevice(self, ordinal: int) -> int:
        if not 0 <= ordinal < self.gpus:
            return 101
        self.current = ordinal
        return 0

    def hipDeviceGetName(self, buf: Any, size: int, ordinal: int) -> int:
        buf.value = f"Fake Instinct #{ordinal}".encode()
        return 0

    def hipGetDevicePropertiesR0600(self, raw: Any, ordinal: int) -> int:
        name = f"Fake Instinct #{ordinal}".encode()
        ctypes.memmove(raw, name, len(name))
        arch = self.arch.encode() + b"\x00"
        ctypes.memmove(ctypes.addressof(raw) + PROPERTIES_OFFSET, arch, len(arch))
        return 0

    def hipDeviceSynchronize(self) -> int:
        self.calls.append(f"sync {self.current}")
        return 0

    def hipMemGetInfo(self, free: Any, total: Any) -> int:
        free[0], total[0] = self.free_bytes, self.total_bytes
        return 0

    def hipMalloc(self, out: Any, nbytes: int) -> int:
        if nbytes > self.free_bytes:
            return 2
        pointer = self._handle()
        self.memory[pointer] = bytearray(nbytes)
        self.calls.append(f"alloc {nbytes} on {self.current}")
        out[0] = pointer
        return 0

    def hipFree(self, pointer: int) -> int:
        return 0 if self.memory.pop(pointer, None) is not None else 1

    def hipMemcpy(self, dst: int, src: int, nbytes: int, kind: int) -> int:
        if kind == 1:
            self.memory[dst][:nbytes] = ctypes.string_at(src, nbytes)
        elif kind == 2:
            ctypes.memmove(dst, bytes(self.memory[src][:nbytes]), nbytes)
        elif kind == 3:
            self.memory[dst][:nbytes] = self.memory[src][:nbytes]
            self.calls.append(f"dtod on {self.current}")
        else:
            return 1
        return 0

    def hipMemcpyPeer(self, dst: int, dst_device: int, src: int, src_device: int, nbytes: int) -> int:
        self.memory[dst][:nbytes] = self.memory[src][:nbytes]
        self.calls.append(f"peer {src_device} -> {dst_device}")
        return 0

    def hipModuleLoadData(self, out: Any, image: bytes) -> int:
        if not image.startswith(b"\x7fELF"):
            return 200
        out[0] = self._handle()
        return 0

    def hipModuleUnload(self, module: int) -> int:
        return 0

    def hipModuleGetFunction(self, out: Any, module: int, name: bytes) -> int:
        if name.decode() not in self.kernels:
            return 500
        handle = self._handle()
        self._functions[handle] = name.decode()
        out[0] = handle
        return 0

    def hipModuleLaunchKernel(self, function: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                              shared: int, stream: Any, params: Any, extra: Any) -> int:
        if params is not None or shared != 0:
            return 1
        markers = (int(extra[0] or 0), int(extra[2] or 0), int(extra[4] or 0))
        size = ctypes.c_size_t.from_address(extra[3]).value
        raw = ctypes.string_at(extra[1], size)
        arguments = struct.unpack(f"<{size // 8}q", raw)
        self.launches.append(Launch(function, (gx, gy, gz), (bx, by, bz), arguments, markers))
        self.calls.append(f"launch {self._functions[function]} on {self.current}")
        return 0

    def hipEventCreate(self, out: Any) -> int:
        handle = self._handle()
        self._events[handle] = False
        out[0] = handle
        return 0

    def hipEventRecord(self, event: int, stream: Any) -> int:
        self._events[event] = True
        return 0

    def hipEventSynchronize(self, event: int) -> int:
        return 0 if self._events[event] else 600

    def hipEventElapsedTime(self, out: Any, start: int, end: int) -> int:
        out[0] = 1.5  # milliseconds
        return 0

    def hipEventDestroy(self, event: int) -> int:
        del self._events[event]
        return 0

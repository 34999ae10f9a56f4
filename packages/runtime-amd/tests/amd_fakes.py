"""A stand-in for libamdhip64 with the runtime functions the backend calls, for machines without an AMD GPU.

It is not the thing under test: the tests check our wrapper (error names and messages, the argument buffer, the
current device, the allocator's copies, event timing) by watching what it asks of the runtime. Memory, modules and
events are plygrad.runtime.testing_gpu's `FakeGPU`; this names them as libamdhip64 does.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field
from typing import Any

from plygrad.runtime.testing_gpu import FakeGPU

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
class FakeHip(FakeGPU):
    """Answers like libamdhip64 for `gpus` devices of arch `arch`; `kernels` names the kernels a module holds."""

    total_bytes: int = 64 << 30
    arch: str = "gfx90a:sramecc+:xnack-"
    count_status: int = 0
    kernels: set[str] = field(default_factory=set)
    launches: list[Launch] = field(default_factory=list)

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
        return self.mem_info(free, total)

    def hipMalloc(self, out: Any, nbytes: int) -> int:
        return self.alloc(out, nbytes, f"on {self.current}")

    def hipFree(self, pointer: int) -> int:
        return self.free(pointer)

    def hipMemcpy(self, dst: int, src: int, nbytes: int, kind: int) -> int:
        if kind == 1:
            return self.copy_to_device(dst, src, nbytes)
        if kind == 2:
            return self.copy_to_host(dst, src, nbytes)
        if kind == 3:
            return self.copy_on_device(dst, src, nbytes, f"dtod on {self.current}")
        return 1

    def hipMemcpyPeer(self, dst: int, dst_device: int, src: int, src_device: int, nbytes: int) -> int:
        return self.copy_on_device(dst, src, nbytes, f"peer {src_device} -> {dst_device}")

    def hipModuleLoadData(self, out: Any, image: bytes) -> int:
        return self.module_load(out, image)

    def hipModuleUnload(self, module: int) -> int:
        return 0

    def hipModuleGetFunction(self, out: Any, module: int, name: bytes) -> int:
        return self.module_function(out, name, name.decode() in self.kernels)

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
        return self.event_create(out)

    def hipEventRecord(self, event: int, stream: Any) -> int:
        return self.event_record(event, stream)

    def hipEventSynchronize(self, event: int) -> int:
        return self.event_synchronize(event)

    def hipEventElapsedTime(self, out: Any, start: int, end: int) -> int:
        return self.event_elapsed(out, start, end)

    def hipEventDestroy(self, event: int) -> int:
        return self.event_destroy(event)

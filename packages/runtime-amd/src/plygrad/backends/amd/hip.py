"""The HIP runtime (`libamdhip64.so`) through ctypes: only the calls the AMD backend makes, each checked.

`load_hip`, which the backend's factory calls, opens the library: importing this module touches nothing. A failing
call raises `HipError` naming the call, the HIP error name and what was asked (`hipMalloc: hipErrorOutOfMemory,
asked 80 GiB, 2 GiB free of 64 GiB (out of memory)`); no library or no GPU raise `BackendError("unavailable: ...")`,
which the registry records. `HipRuntime` wraps any object with the runtime's functions, so it is tested with a
stand-in; the checking and error mapping are plygrad.runtime.driver's `DriverLibrary`. The arch is read as the
`gfx...` string of the properties struct (its layout changed in ROCm 6), and a launch's `extra` list ends with
HIP_LAUNCH_PARAM_END = 3, not 0 (docs/backends.md, "AMD: HIP on AMD GPUs").
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Sequence
from typing import Any, Final

from plygrad.runtime.driver import DriverError, DriverLibrary, declare_prototypes, format_bytes
from plygrad.runtime.errors import BackendError

LIBRARIES: Final = ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5")
HIP_SUCCESS: Final = 0
HIP_ERROR_INVALID_VALUE: Final = 1
HIP_ERROR_OUT_OF_MEMORY: Final = 2
HIP_ERROR_INSUFFICIENT_DRIVER: Final = 35
HIP_ERROR_NO_DEVICE: Final = 100
MEMCPY_HOST_TO_DEVICE: Final = 1
MEMCPY_DEVICE_TO_HOST: Final = 2
MEMCPY_DEVICE_TO_DEVICE: Final = 3
PROPERTIES_BYTES: Final = 8192  # more than any ROCm's hipDeviceProp_t (R0600: ~1.5 KiB)
_ARCH_NAME: Final = re.compile(rb"gfx[0-9a-f]+(?::[a-z0-9+-]+)*(?=\x00)")

_RESULT = ctypes.c_int  # hipError_t
_HANDLE = ctypes.c_void_p  # hipModule_t, hipFunction_t, hipEvent_t, hipStream_t, device pointers
_SIZE = ctypes.c_size_t
_P = ctypes.POINTER

# name -> argtypes; every function returns a hipError_t (the two error-text functions a string, set in `declare`)
PROTOTYPES: Final[dict[str, list[Any]]] = {
    "hipInit": [ctypes.c_uint],
    "hipRuntimeGetVersion": [_P(ctypes.c_int)],
    "hipGetDeviceCount": [_P(ctypes.c_int)],
    "hipSetDevice": [ctypes.c_int],
    "hipDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "hipGetDeviceProperties": [ctypes.c_void_p, ctypes.c_int],
    "hipDeviceSynchronize": [],
    "hipMalloc": [_P(_HANDLE), _SIZE],
    "hipFree": [_HANDLE],
    "hipMemGetInfo": [_P(_SIZE), _P(_SIZE)],
    "hipMemcpy": [_HANDLE, _HANDLE, _SIZE, ctypes.c_int],
    "hipMemcpyPeer": [_HANDLE, ctypes.c_int, _HANDLE, ctypes.c_int, _SIZE],
    "hipModuleLoadData": [_P(_HANDLE), ctypes.c_void_p],
    "hipModuleUnload": [_HANDLE],
    "hipModuleGetFunction": [_P(_HANDLE), _HANDLE, ctypes.c_char_p],
    "hipModuleLaunchKernel": [_HANDLE, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                              ctypes.c_uint, ctypes.c_uint, _HANDLE, _P(ctypes.c_void_p), _P(ctypes.c_void_p)],
    "hipEventCreate": [_P(_HANDLE)],
    "hipEventRecord": [_HANDLE, _HANDLE],
    "hipEventSynchronize": [_HANDLE],
    "hipEventElapsedTime": [_P(ctypes.c_float), _HANDLE, _HANDLE],
    "hipEventDestroy": [_HANDLE],
}
# ROCm 6's name for the properties of its own struct layout; ROCm 5 has only the plain one
OPTIONAL: Final = frozenset({"hipGetDevicePropertiesR0600"})


class HipError(DriverError):
    """A HIP runtime call failed; `call`, `status` (the hipError_t) and `name` (e.g. hipErrorInvalidValue) say
    which and how."""


class HipOutOfMemoryError(HipError, MemoryError):
    """hipMalloc found no room: a MemoryError too, as the Allocator contract asks."""


def arch_from_properties(raw: bytes) -> str | None:
    """The `gcnArchName` in the bytes of a hipDeviceProp_t of any ROCm layout ("gfx90a:sramecc+:xnack-"), or None."""
    found = _ARCH_NAME.search(raw)
    return found.group(0).decode() if found else None


class HipRuntime(DriverLibrary):
    """Checked wrappers over the HIP runtime functions of `lib` (a ctypes library, or a stand-in with the same
    names). Handles (modules, functions, events) and device pointers are plain ints here; 0 is null."""

    SUCCESS = HIP_SUCCESS
    OUT_OF_MEMORY = HIP_ERROR_OUT_OF_MEMORY
    error_type = HipError
    out_of_memory_type = HipOutOfMemoryError
    unnamed = "HIP error"

    # ---- errors ----------------------------------------------------------------------------------------------
    def _text(self, function: str, status: int) -> str:
        try:
            found = getattr(self.lib, function)(status)
        except (AttributeError, OSError):
            return ""
        if isinstance(found, bytes):
            return found.decode(errors="replace")
        return found if isinstance(found, str) else ""

    def status_texts(self, status: int) -> tuple[str, str]:
        return self._text("hipGetErrorName", status), self._text("hipGetErrorString", status)

    # ---- setup -----------------------------------------------------------------------------------------------
    def init(self) -> None:
        """hipInit, with a machine that has the runtime but no usable GPU mapped to "unavailable"."""
        status = self.lib.hipInit(0)
        if status in (HIP_ERROR_NO_DEVICE, HIP_ERROR_INSUFFICIENT_DRIVER):
            raise BackendError(f"unavailable: no AMD GPU ({self.error('hipInit', status)})")
        self.check("hipInit", status)

    def version(self) -> int:
        """The HIP runtime version (ROCm 6.2: 60240000-ish; major * 10^7 + minor * 10^5 + patch)."""
        return self._int("hipRuntimeGetVersion")

    def device_count(self) -> int:
        out = ctypes.c_int()
        status = self.lib.hipGetDeviceCount(ctypes.pointer(out))
        if status == HIP_ERROR_NO_DEVICE:
            return 0
        self.check("hipGetDeviceCount", status)
        return out.value

    def set_device(self, ordinal: int) -> None:
        """Make device `ordinal` the calling thread's (HIP's current device is per thread, and the runtime calls
        from worker threads as well)."""
        self.check("hipSetDevice", self.lib.hipSetDevice(ordinal), f"device {ordinal}")

    def device_name(self, ordinal: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self.check("hipDeviceGetName", self.lib.hipDeviceGetName(buf, len(buf), ordinal), f"device {ordinal}")
        return buf.value.decode(errors="replace")

    def arch(self, ordinal: int) -> str:
        """The device's gcnArchName ("gfx90a:sramecc+:xnack-"), from hipGetDeviceProperties of either layout."""
        raw = ctypes.create_string_buffer(PROPERTIES_BYTES)
        function = getattr(self.lib, "hipGetDevicePropertiesR0600", None) or self.lib.hipGetDeviceProperties
        self.check("hipGetDeviceProperties", function(raw, ordinal), f"device {ordinal}")
        found = arch_from_properties(raw.raw)
        if found is None:
            raise BackendError(f"hipGetDeviceProperties of device {ordinal} names no gfx architecture "
                               "(gcnArchName): this HIP runtime is not one plygrad-amd knows")
        return found

    def synchronize(self) -> None:
        self.check("hipDeviceSynchronize", self.lib.hipDeviceSynchronize())

    # ---- memory ----------------------------------------------------------------------------------------------
    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current device."""
        free, total = _SIZE(), _SIZE()
        self.check("hipMemGetInfo", self.lib.hipMemGetInfo(ctypes.pointer(free), ctypes.pointer(total)))
        return free.value, total.value

    def malloc(self, nbytes: int) -> int:
        out = _HANDLE()
        status = self.lib.hipMalloc(ctypes.pointer(out), nbytes)
        if status == HIP_SUCCESS:
            return out.value or 0
        raise self.allocation_error("hipMalloc", status, nbytes)

    def free(self, pointer: int) -> None:
        self.check("hipFree", self.lib.hipFree(pointer), f"pointer {pointer:#x}")

    def copy(self, dst: int, src: int, nbytes: int, kind: int) -> None:
        """hipMemcpy (blocking; ordered after the work launched before it on the null stream)."""
        names = {MEMCPY_HOST_TO_DEVICE: "host to device", MEMCPY_DEVICE_TO_HOST: "device to host",
                 MEMCPY_DEVICE_TO_DEVICE: "device to device"}
        self.check("hipMemcpy", self.lib.hipMemcpy(dst, src, nbytes, kind), f"{format_bytes(nbytes)} {names[kind]}")

    def copy_peer(self, dst: int, dst_device: int, src: int, src_device: int, nbytes: int) -> None:
        self.check("hipMemcpyPeer", self.lib.hipMemcpyPeer(dst, dst_device, src, src_device, nbytes),
                   f"{format_bytes(nbytes)} from device {src_device} to {dst_device}")

    # ---- modules and launches --------------------------------------------------------------------------------
    def module_load(self, image: bytes) -> int:
        return self._handle("hipModuleLoadData", image, detail=f"a {format_bytes(len(image))} code object")

    def module_unload(self, module: int) -> None:
        self.check("hipModuleUnload", self.lib.hipModuleUnload(module))

    def module_function(self, module: int, name: str) -> int:
        return self._handle("hipModuleGetFunction", module, name.encode(), detail=f"function {name!r}")

    def launch(self, function: int, grid: Sequence[int], block: Sequence[int], extra: Any, name: str = "") -> None:
        """hipModuleLaunchKernel on the null stream; `extra` is the HIP_LAUNCH_PARAM list holding the argument
        buffer (launch.py)."""
        status = self.lib.hipModuleLaunchKernel(function, *grid, *block, 0, None, None, extra)
        if status != HIP_SUCCESS:
            raise self.launch_error("hipModuleLaunchKernel", status, name, grid, block)

    def event_create(self) -> int:
        return self._handle("hipEventCreate")

    def event_record(self, event: int) -> None:
        self.check("hipEventRecord", self.lib.hipEventRecord(event, None))

    def event_seconds(self, start: int, end: int) -> float:
        """Wait for `end`, then the time between the two recorded events in seconds."""
        self.check("hipEventSynchronize", self.lib.hipEventSynchronize(end))
        ms = ctypes.c_float()
        self.check("hipEventElapsedTime", self.lib.hipEventElapsedTime(ctypes.pointer(ms), start, end))
        return ms.value / 1000.0

    def event_destroy(self, event: int) -> None:
        self.check("hipEventDestroy", self.lib.hipEventDestroy(event))


def declare(lib: Any, library: str = LIBRARIES[0]) -> None:
    """Give each runtime function of a ctypes library its prototype; a missing required one means a HIP runtime too
    old to use."""
    declare_prototypes(lib, {**PROTOTYPES, "hipGetDevicePropertiesR0600": PROTOTYPES["hipGetDeviceProperties"]},
                       OPTIONAL, f"{library} has no {{name}}: the HIP runtime is too old, update ROCm")
    for name in ("hipGetErrorName", "hipGetErrorString"):
        function = getattr(lib, name)
        function.restype = ctypes.c_char_p
        function.argtypes = [_RESULT]


_LOCK = threading.Lock()
_LOADED: list[HipRuntime] = []


def load_hip(libraries: Sequence[str] = LIBRARIES) -> HipRuntime:
    """Open the HIP runtime (the first of `libraries` that loads) and hipInit it, once per process (a failure is
    not remembered: the next device asked for tries again). Raises BackendError("unavailable: ...") where no
    runtime or GPU is usable."""
    with _LOCK:
        if _LOADED:
            return _LOADED[0]
        lib, name = None, libraries[0]
        for name in libraries:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise BackendError(f"unavailable: no AMD driver ({libraries[0]} not found)")
        declare(lib, name)
        runtime = HipRuntime(lib)
        runtime.init()
        _LOADED.append(runtime)
        return runtime

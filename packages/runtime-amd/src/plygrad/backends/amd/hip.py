"""The HIP runtime (`libamdhip64.so`) through ctypes: only the calls the AMD backend makes, each checked.

The library is opened by `load_hip`, which the backend's factory calls: importing this module touches nothing, so
`import plygrad.runtime` and `python -m plygrad.runtime` work on machines without ROCm. Every failing call raises
`HipError` naming the call, the HIP error name and what was asked (`hipMalloc: hipErrorOutOfMemory, asked 80 GiB,
2 GiB free of 64 GiB (out of memory)`). The states in which the runtime cannot serve at all (no library, no GPU)
raise `BackendError("unavailable: ...")`, which the registry records.

`HipRuntime` wraps any object with the runtime's functions as attributes, so the error mapping and formatting can be
tested with a stand-in for the library on machines without a GPU; `load_hip` gives it the real one, with every
prototype declared (argtypes and restype), so ctypes converts Python ints to the right widths.

Two facts of the HIP ABI shape this module. The device properties struct changed layout between ROCm 5 and 6
(`hipGetDevicePropertiesR0600` is 6's), so the arch is read as the `gfx...` string the struct holds
(`gcnArchName`), found by its form rather than by an offset. And a launch passes its arguments as one packed buffer
through `hipModuleLaunchKernel`'s `extra` (launch.py), whose list ends with HIP_LAUNCH_PARAM_END = 3, not 0.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Sequence
from typing import Any, Final

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


class HipError(BackendError):
    """A HIP runtime call failed; `call`, `status` (the hipError_t) and `name` (e.g. hipErrorInvalidValue) say
    which and how."""

    def __init__(self, message: str, *, call: str, status: int, name: str) -> None:
        super().__init__(message)
        self.call = call
        self.status = status
        self.name = name


class HipOutOfMemoryError(HipError, MemoryError):
    """hipMalloc found no room: a MemoryError too, as the Allocator contract asks."""


def format_bytes(nbytes: int) -> str:
    """80 GiB, 1.5 MiB, 12 bytes: sizes in messages a person reads."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if nbytes >= unit:
            return f"{nbytes / unit:.1f}".removesuffix(".0") + f" {name}"
    return f"{nbytes} bytes"


def arch_from_properties(raw: bytes) -> str | None:
    """The `gcnArchName` in the bytes of a hipDeviceProp_t of any ROCm layout ("gfx90a:sramecc+:xnack-"), or None."""
    found = _ARCH_NAME.search(raw)
    return found.group(0).decode() if found else None


class HipRuntime:
    """Checked wrappers over the HIP runtime functions of `lib` (a ctypes library, or a stand-in with the same
    names). Handles (modules, functions, events) and device pointers are plain ints here; 0 is null."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    # ---- errors ----------------------------------------------------------------------------------------------
    def _text(self, function: str, status: int) -> str:
        try:
            found = getattr(self.lib, function)(status)
        except (AttributeError, OSError):
            return ""
        if isinstance(found, bytes):
            return found.decode(errors="replace")
        return found if isinstance(found, str) else ""

    def error(self, call: str, status: int, detail: str = "") -> HipError:
        """The exception for `call` returning `status`, its message naming the call, the error and `detail`."""
        name = self._text("hipGetErrorName", status) or f"HIP error {status}"
        text = self._text("hipGetErrorString", status)
        message = f"{call}: {name}" + (f", {detail}" if detail else "") + (f" ({text})" if text else "")
        kind = HipOutOfMemoryError if status == HIP_ERROR_OUT_OF_MEMORY else HipError
        return kind(message, call=call, status=status, name=name)

    def check(self, call: str, status: int, detail: str = "") -> None:
        if status != HIP_SUCCESS:
            raise self.error(call, status, detail)

    # ---- setup -----------------------------------------------------------------------------------------------
    def init(self) -> None:
        """hipInit, with a machine that has the runtime but no usable GPU mapped to "unavailable"."""
        status = self.lib.hipInit(0)
        if status in (HIP_ERROR_NO_DEVICE, HIP_ERROR_INSUFFICIENT_DRIVER):
            raise BackendError(f"unavailable: no AMD GPU ({self.error('hipInit', status)})")
        self.check("hipInit", status)

    def _int(self, call: str, *args: Any) -> int:
        out = ctypes.c_int()
        self.check(call, getattr(self.lib, call)(ctypes.pointer(out), *args))
        return out.value

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
        detail = f"asked {format_bytes(nbytes)}"
        if status == HIP_ERROR_OUT_OF_MEMORY:
            try:
                free, total = self.mem_info()
                detail += f", {format_bytes(free)} free of {format_bytes(total)}"
            except HipError:
                pass  # the allocation's own error is the one to report
        raise self.error("hipMalloc", status, detail)

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
        out = _HANDLE()
        self.check("hipModuleLoadData", self.lib.hipModuleLoadData(ctypes.pointer(out), image),
                   f"a {format_bytes(len(image))} code object")
        return out.value or 0

    def module_unload(self, module: int) -> None:
        self.check("hipModuleUnload", self.lib.hipModuleUnload(module))

    def module_function(self, module: int, name: str) -> int:
        out = _HANDLE()
        self.check("hipModuleGetFunction", self.lib.hipModuleGetFunction(ctypes.pointer(out), module, name.encode()),
                   f"function {name!r}")
        return out.value or 0

    def launch(self, function: int, grid: Sequence[int], block: Sequence[int], extra: Any, name: str = "") -> None:
        """hipModuleLaunchKernel on the null stream; `extra` is the HIP_LAUNCH_PARAM list holding the argument
        buffer (launch.py)."""
        status = self.lib.hipModuleLaunchKernel(function, *grid, *block, 0, None, None, extra)
        if status != HIP_SUCCESS:
            raise self.error("hipModuleLaunchKernel", status,
                             f"kernel {name!r}, grid {tuple(grid)}, block {tuple(block)}")

    def event_create(self) -> int:
        out = _HANDLE()
        self.check("hipEventCreate", self.lib.hipEventCreate(ctypes.pointer(out)))
        return out.value or 0

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
    for name, argtypes in {**PROTOTYPES, "hipGetDevicePropertiesR0600": PROTOTYPES["hipGetDeviceProperties"]}.items():
        try:
            function = getattr(lib, name)
        except AttributeError as exc:
            if name in OPTIONAL:
                continue
            raise BackendError(f"unavailable: {library} has no {name}: the HIP runtime is too old, "
                               "update ROCm") from exc
        function.restype = _RESULT
        function.argtypes = argtypes
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

"""The CUDA driver API (`libcuda.so.1`) through ctypes: only the calls the NV backend makes, each checked.

`load_driver`, which the backend's factory calls, opens the library: importing this module touches nothing. A
failing call raises `CudaError` naming the call, the CUDA error name and what was asked (`cuMemAlloc:
CUDA_ERROR_OUT_OF_MEMORY, asked 80 GiB, 2 GiB free of 80 GiB (out of memory)`); no library, no GPU or the
toolkit's stub library raise `BackendError("unavailable: ...")`, which the registry records. `CudaDriver` wraps any
object with the driver's functions, so it is tested with a stand-in; the checking and error mapping are
plygrad.runtime.driver's `DriverLibrary` (docs/backends.md, "The shared plumbing").
"""

from __future__ import annotations

import ctypes
import enum
import threading
from collections.abc import Sequence
from typing import Any, Final

from plygrad.runtime.driver import DriverError, DriverLibrary, declare_prototypes, format_bytes
from plygrad.runtime.errors import BackendError

LIBRARY: Final = "libcuda.so.1"
CUDA_SUCCESS: Final = 0
CUDA_ERROR_INVALID_VALUE: Final = 1
CUDA_ERROR_OUT_OF_MEMORY: Final = 2
CUDA_ERROR_STUB_LIBRARY: Final = 34
CUDA_ERROR_NO_DEVICE: Final = 100

_RESULT = ctypes.c_int  # CUresult
_DEVICE = ctypes.c_int  # CUdevice is an ordinal-like int
_DEVPTR = ctypes.c_uint64  # CUdeviceptr
_HANDLE = ctypes.c_void_p  # CUcontext, CUmodule, CUfunction, CUevent, CUstream
_SIZE = ctypes.c_size_t
_P = ctypes.POINTER

# name -> argtypes; every function returns a CUresult. The _v2 names are the 64-bit ones `cuda.h` maps the plain
# names to; a library symbol without the suffix is the old 32-bit variant.
PROTOTYPES: Final[dict[str, list[Any]]] = {
    "cuGetErrorName": [_RESULT, _P(ctypes.c_char_p)],
    "cuGetErrorString": [_RESULT, _P(ctypes.c_char_p)],
    "cuInit": [ctypes.c_uint],
    "cuDriverGetVersion": [_P(ctypes.c_int)],
    "cuDeviceGetCount": [_P(ctypes.c_int)],
    "cuDeviceGet": [_P(_DEVICE), ctypes.c_int],
    "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, _DEVICE],
    "cuDeviceGetAttribute": [_P(ctypes.c_int), ctypes.c_int, _DEVICE],
    "cuDeviceTotalMem_v2": [_P(_SIZE), _DEVICE],
    "cuDevicePrimaryCtxRetain": [_P(_HANDLE), _DEVICE],
    "cuCtxSetCurrent": [_HANDLE],
    "cuCtxSynchronize": [],
    "cuMemAlloc_v2": [_P(_DEVPTR), _SIZE],
    "cuMemFree_v2": [_DEVPTR],
    "cuMemGetInfo_v2": [_P(_SIZE), _P(_SIZE)],
    "cuMemcpyHtoD_v2": [_DEVPTR, ctypes.c_void_p, _SIZE],
    "cuMemcpyDtoH_v2": [ctypes.c_void_p, _DEVPTR, _SIZE],
    "cuMemcpyDtoD_v2": [_DEVPTR, _DEVPTR, _SIZE],
    "cuMemcpyPeer": [_DEVPTR, _HANDLE, _DEVPTR, _HANDLE, _SIZE],
    "cuModuleLoadData": [_P(_HANDLE), ctypes.c_void_p],
    "cuModuleUnload": [_HANDLE],
    "cuModuleGetFunction": [_P(_HANDLE), _HANDLE, ctypes.c_char_p],
    "cuFuncGetParamInfo": [_HANDLE, _SIZE, _P(_SIZE), _P(_SIZE)],
    "cuLaunchKernel": [_HANDLE, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                       ctypes.c_uint, ctypes.c_uint, _HANDLE, _P(ctypes.c_void_p), _P(ctypes.c_void_p)],
    "cuEventCreate": [_P(_HANDLE), ctypes.c_uint],
    "cuEventRecord": [_HANDLE, _HANDLE],
    "cuEventSynchronize": [_HANDLE],
    "cuEventElapsedTime": [_P(ctypes.c_float), _HANDLE, _HANDLE],
    "cuEventDestroy_v2": [_HANDLE],
}
# cuFuncGetParamInfo arrived in CUDA 12.4; an older driver still works, without the argument-count check
OPTIONAL: Final = frozenset({"cuFuncGetParamInfo"})


class Attribute(enum.IntEnum):
    """The CUdevice_attribute values the backend reads (cuda.h numbers them; the numbers are ABI)."""

    MAX_THREADS_PER_BLOCK = 1
    MAX_BLOCK_DIM_X = 2
    MAX_BLOCK_DIM_Y = 3
    MAX_BLOCK_DIM_Z = 4
    MAX_GRID_DIM_X = 5
    MAX_GRID_DIM_Y = 6
    MAX_GRID_DIM_Z = 7
    MAX_SHARED_MEMORY_PER_BLOCK = 8
    MULTIPROCESSOR_COUNT = 16
    COMPUTE_CAPABILITY_MAJOR = 75
    COMPUTE_CAPABILITY_MINOR = 76


class CudaError(DriverError):
    """A CUDA driver call failed; `call`, `status` (the CUresult) and `name` (e.g. CUDA_ERROR_INVALID_VALUE) say
    which and how."""


class CudaOutOfMemoryError(CudaError, MemoryError):
    """cuMemAlloc found no room: a MemoryError too, as the Allocator contract asks."""


class CudaDriver(DriverLibrary):
    """Checked wrappers over the driver functions of `lib` (a ctypes library, or a stand-in with the same names).

    Handles (contexts, modules, functions, events) and device pointers are plain ints here; 0 is null.
    """

    SUCCESS = CUDA_SUCCESS
    OUT_OF_MEMORY = CUDA_ERROR_OUT_OF_MEMORY
    error_type = CudaError
    out_of_memory_type = CudaOutOfMemoryError
    unnamed = "CUDA error"

    # ---- errors ----------------------------------------------------------------------------------------------
    def _string(self, function: str, status: int) -> str:
        out = ctypes.c_char_p()
        try:
            found = getattr(self.lib, function)(status, ctypes.pointer(out))
        except (AttributeError, OSError):
            return ""
        return out.value.decode(errors="replace") if found == CUDA_SUCCESS and out.value else ""

    def status_texts(self, status: int) -> tuple[str, str]:
        return self._string("cuGetErrorName", status), self._string("cuGetErrorString", status)

    # ---- setup -----------------------------------------------------------------------------------------------
    def init(self) -> None:
        """cuInit, with the two ways a machine has a driver library but no usable GPU mapped to "unavailable"."""
        status = self.lib.cuInit(0)
        if status == CUDA_ERROR_NO_DEVICE:
            raise BackendError(f"unavailable: no NVIDIA GPU ({self.error('cuInit', status)})")
        if status == CUDA_ERROR_STUB_LIBRARY:
            raise BackendError(f"unavailable: {LIBRARY} is the CUDA toolkit's stub, not a driver "
                               f"({self.error('cuInit', status)}); install the NVIDIA driver")
        self.check("cuInit", status)

    def version(self) -> int:
        """The driver's CUDA version as 1000 * major + 10 * minor (13000 is CUDA 13.0)."""
        return self._int("cuDriverGetVersion")

    def device_count(self) -> int:
        return self._int("cuDeviceGetCount")

    def device(self, ordinal: int) -> int:
        return self._int("cuDeviceGet", ordinal, detail=f"device {ordinal}")

    def device_name(self, device: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self.check("cuDeviceGetName", self.lib.cuDeviceGetName(buf, len(buf), device))
        return buf.value.decode(errors="replace")

    def attribute(self, device: int, attribute: Attribute) -> int:
        return self._int("cuDeviceGetAttribute", int(attribute), device, detail=attribute.name)

    def total_memory(self, device: int) -> int:
        out = _SIZE()
        self.check("cuDeviceTotalMem", self.lib.cuDeviceTotalMem_v2(ctypes.pointer(out), device))
        return out.value

    def primary_context(self, device: int) -> int:
        """Retain the device's primary context: the one the CUDA runtime (and so PyTorch) uses too, so both can
        share pointers in one process. It is never released: it lives as long as the process."""
        return self._handle("cuDevicePrimaryCtxRetain", device)

    def set_current(self, context: int) -> None:
        """Make `context` current on the calling thread (contexts are per thread, and a device's calls may come
        from any thread: the runtime compiles and copies from worker threads)."""
        self.check("cuCtxSetCurrent", self.lib.cuCtxSetCurrent(context))

    def synchronize(self) -> None:
        self.check("cuCtxSynchronize", self.lib.cuCtxSynchronize())

    # ---- memory ----------------------------------------------------------------------------------------------
    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current context's device."""
        free, total = _SIZE(), _SIZE()
        self.check("cuMemGetInfo", self.lib.cuMemGetInfo_v2(ctypes.pointer(free), ctypes.pointer(total)))
        return free.value, total.value

    def mem_alloc(self, nbytes: int) -> int:
        out = _DEVPTR()
        status = self.lib.cuMemAlloc_v2(ctypes.pointer(out), nbytes)
        if status == CUDA_SUCCESS:
            return out.value
        raise self.allocation_error("cuMemAlloc", status, nbytes)

    def mem_free(self, pointer: int) -> None:
        self.check("cuMemFree", self.lib.cuMemFree_v2(pointer), f"pointer {pointer:#x}")

    def copy_to_device(self, dst: int, src_address: int, nbytes: int) -> None:
        self.check("cuMemcpyHtoD", self.lib.cuMemcpyHtoD_v2(dst, src_address, nbytes), f"{format_bytes(nbytes)}")

    def copy_to_host(self, dst_address: int, src: int, nbytes: int) -> None:
        self.check("cuMemcpyDtoH", self.lib.cuMemcpyDtoH_v2(dst_address, src, nbytes), f"{format_bytes(nbytes)}")

    def copy_on_device(self, dst: int, src: int, nbytes: int) -> None:
        self.check("cuMemcpyDtoD", self.lib.cuMemcpyDtoD_v2(dst, src, nbytes), f"{format_bytes(nbytes)}")

    def copy_peer(self, dst: int, dst_context: int, src: int, src_context: int, nbytes: int) -> None:
        """Copy between two devices' memory (over NVLink/PCIe peer access where there is some, else staged by the
        driver through the host)."""
        self.check("cuMemcpyPeer", self.lib.cuMemcpyPeer(dst, dst_context, src, src_context, nbytes),
                   f"{format_bytes(nbytes)}")

    # ---- modules and launches --------------------------------------------------------------------------------
    def module_load(self, image: bytes) -> int:
        return self._handle("cuModuleLoadData", image, detail=f"a {format_bytes(len(image))} image")

    def module_unload(self, module: int) -> None:
        self.check("cuModuleUnload", self.lib.cuModuleUnload(module))

    def module_function(self, module: int, name: str) -> int:
        return self._handle("cuModuleGetFunction", module, name.encode(), detail=f"function {name!r}")

    def param_sizes(self, function: int) -> tuple[int, ...] | None:
        """The byte size of each of the function's parameters, or None when the driver predates
        cuFuncGetParamInfo (CUDA 12.4). The driver answers CUDA_ERROR_INVALID_VALUE past the last parameter."""
        get = getattr(self.lib, "cuFuncGetParamInfo", None)
        if get is None:
            return None
        sizes: list[int] = []
        offset, size = _SIZE(), _SIZE()
        while True:
            status = get(function, len(sizes), ctypes.pointer(offset), ctypes.pointer(size))
            if status == CUDA_ERROR_INVALID_VALUE:
                return tuple(sizes)
            self.check("cuFuncGetParamInfo", status, f"parameter {len(sizes)}")
            sizes.append(size.value)

    def launch(self, function: int, grid: Sequence[int], block: Sequence[int], params: Any, name: str = "") -> None:
        """cuLaunchKernel on the default stream; `params` is the `void*[]` of pointers to each argument value."""
        status = self.lib.cuLaunchKernel(function, *grid, *block, 0, None, params, None)
        if status != CUDA_SUCCESS:
            raise self.launch_error("cuLaunchKernel", status, name, grid, block)

    def event_create(self) -> int:
        return self._handle("cuEventCreate", 0)

    def event_record(self, event: int) -> None:
        self.check("cuEventRecord", self.lib.cuEventRecord(event, None))

    def event_seconds(self, start: int, end: int) -> float:
        """Wait for `end`, then the time between the two recorded events in seconds."""
        self.check("cuEventSynchronize", self.lib.cuEventSynchronize(end))
        ms = ctypes.c_float()
        self.check("cuEventElapsedTime", self.lib.cuEventElapsedTime(ctypes.pointer(ms), start, end))
        return ms.value / 1000.0

    def event_destroy(self, event: int) -> None:
        self.check("cuEventDestroy", self.lib.cuEventDestroy_v2(event))


def declare(lib: Any) -> None:
    """Give each driver function of a ctypes library its prototype; a missing required one means a driver too old
    to use (the _v2 entry points exist since CUDA 3.2, cuGetErrorName since 6.0)."""
    declare_prototypes(lib, PROTOTYPES, OPTIONAL, f"{LIBRARY} has no {{name}}: the NVIDIA driver is too old, update it")


_LOCK = threading.Lock()
_LOADED: list[CudaDriver] = []


def load_driver(library: str = LIBRARY) -> CudaDriver:
    """Open the driver library and cuInit it, once per process (a failure is not remembered: the next device
    asked for tries again). Raises BackendError("unavailable: ...") where no driver or GPU is usable."""
    with _LOCK:
        if _LOADED:
            return _LOADED[0]
        try:
            lib = ctypes.CDLL(library)
        except OSError as exc:
            raise BackendError(f"unavailable: no NVIDIA driver ({library} not found)") from exc
        declare(lib)
        driver = CudaDriver(lib)
        driver.init()
        _LOADED.append(driver)
        return driver

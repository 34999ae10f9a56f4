"""The Metal calls the backend makes, as Objective-C messages through an `ObjC` runtime (objc.py).

One `MetalDevice` wraps the Mac's GPU (`MTLCreateSystemDefaultDevice`) and its one command queue: shared-storage
buffers, libraries from MSL source or a metallib with docs/ir.md's arithmetic, and one command buffer per launch
(which messages, in what order: docs/backends.md, "Metal: the Apple backend"). Errors are `BackendError`s naming
the message that failed and Metal's own description; a library that does not compile raises `CompileError` with
the first line Metal blamed (`program_source:LINE:COL: error: ...`).
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from plygrad.backends.metal.objc import MTLSize, ObjC
from plygrad.runtime.compiling import compile_error
from plygrad.runtime.errors import BackendError

MTL_RESOURCE_STORAGE_MODE_SHARED: Final = 0
MTL_RESOURCE_USAGE_READ_WRITE: Final = 1 | 2
MTL_MATH_MODE_SAFE: Final = 0
MTL_MATH_FP_FUNCTIONS_PRECISE: Final = 1
MTL_COMMAND_BUFFER_STATUS_COMPLETED: Final = 4
MTL_COMMAND_BUFFER_STATUS_ERROR: Final = 5
# MTLGPUFamily values, newest first: what Target.metal's arch names
GPU_FAMILIES: Final = (("apple10", 1010), ("apple9", 1009), ("apple8", 1008), ("apple7", 1007), ("mac2", 2002))
# Metal reports `program_source:LINE:COL: error: ...`
_LINE: Final = re.compile(r"program_source:(\d+):\d+: (?:fatal )?error")


@dataclass(frozen=True)
class Pipeline:
    """A compute pipeline state and what the device allows for it (fewer threads per threadgroup than the device's
    maximum when the kernel needs many registers)."""

    state: int
    function: int
    max_threads: int


@dataclass
class Completion:
    """A committed command buffer (retained until `MetalDevice.wait` releases it)."""

    buffer: int
    name: str


class MetalDevice:
    """The Mac's GPU and its command queue, through `objc` (see the module docstring)."""

    def __init__(self, objc: ObjC) -> None:
        self.objc = objc
        device = objc.create_system_default_device()
        if not device:
            raise BackendError("unavailable: macOS reports no Metal GPU (MTLCreateSystemDefaultDevice returned nil)")
        self.device = device
        with objc.autorelease_pool():
            self.name = self.string(objc.send(device, "name"))
        self.queue = self._new("newCommandQueue", device)
        self.family = next((name for name, family in GPU_FAMILIES
                            if objc.send(device, "supportsFamily:", ctypes.c_int64(family), restype=ctypes.c_bool)),
                           "apple7")
        size = objc.send(device, "maxThreadsPerThreadgroup", restype=MTLSize)
        self.max_threads_per_threadgroup = (int(size.width), int(size.height), int(size.depth))
        self.max_threadgroup_memory = int(objc.send(device, "maxThreadgroupMemoryLength", restype=ctypes.c_uint64))
        self._has_gpu_address: bool | None = None  # asked of the first buffer that needs it

    # ---- objects -----------------------------------------------------------------------------------------------
    def _new(self, selector: str, receiver: int, *args: object) -> int:
        """An object a `new...` message returns (owned by the caller); BackendError when it is nil."""
        found = self.objc.send(receiver, selector, *args)
        if not found:
            raise BackendError(f"Metal: -{selector} returned nil on {self.name}")
        return int(found)

    def release(self, obj: int) -> None:
        if obj:
            self.objc.send(obj, "release", restype=None)

    def string(self, nsstring: int) -> str:
        """The text of an NSString (empty for nil)."""
        if not nsstring:
            return ""
        raw = self.objc.send(nsstring, "UTF8String", restype=ctypes.c_char_p)
        return raw.decode(errors="replace") if raw else ""

    def nsstring(self, text: str) -> int:
        """An autoreleased NSString of `text` (call inside an autorelease pool)."""
        return int(self.objc.send(self.objc.cls("NSString"), "stringWithUTF8String:", ctypes.c_char_p(text.encode())))

    def _error_text(self, error: int) -> str:
        return self.string(self.objc.send(error, "localizedDescription")) if error else "no error description"

    # ---- memory ------------------------------------------------------------------------------------------------
    def new_buffer(self, nbytes: int) -> int:
        """A shared-storage buffer of `nbytes` (at least 1: Metal makes no empty buffer)."""
        buffer = self.objc.send(self.device, "newBufferWithLength:options:", ctypes.c_uint64(max(1, nbytes)),
                                ctypes.c_uint64(MTL_RESOURCE_STORAGE_MODE_SHARED))
        if not buffer:
            raise MemoryError(f"Metal: newBufferWithLength:{nbytes} failed on {self.name} (out of memory)")
        return int(buffer)

    def contents(self, buffer: int) -> int:
        """The CPU address of a shared buffer's bytes."""
        return int(self.objc.send(buffer, "contents"))

    # ---- programs ----------------------------------------------------------------------------------------------
    def compile_options(self) -> int:
        """MTLCompileOptions keeping the IR's arithmetic (module docstring); owned by the caller."""
        objc = self.objc
        options = self._new("new", objc.cls("MTLCompileOptions"))
        if objc.send(options, "respondsToSelector:", ctypes.c_void_p(objc.selector("setMathMode:")),
                     restype=ctypes.c_bool):
            objc.send(options, "setMathMode:", ctypes.c_int64(MTL_MATH_MODE_SAFE), restype=None)
            objc.send(options, "setMathFloatingPointFunctions:", ctypes.c_int64(MTL_MATH_FP_FUNCTIONS_PRECISE),
                      restype=None)
        else:
            objc.send(options, "setFastMathEnabled:", ctypes.c_bool(False), restype=None)
        return options

    def library_from_source(self, source: str) -> int:
        """Compile MSL `source` into a library (owned by the caller); CompileError naming Metal's first error."""
        error = ctypes.c_void_p(0)
        with self.objc.autorelease_pool():
            options = self.compile_options()
            try:
                library = self.objc.send(self.device, "newLibraryWithSource:options:error:",
                                         ctypes.c_void_p(self.nsstring(source)), ctypes.c_void_p(options),
                                         ctypes.pointer(error))
            finally:
                self.release(options)
            if not library:
                raise compile_error(source, self._error_text(error.value or 0), "Metal", _LINE)
        return int(library)

    def library_from_data(self, data: bytes) -> int:
        """Load a metallib (`xcrun metal` output) into a library (owned by the caller)."""
        error = ctypes.c_void_p(0)
        buffer = ctypes.create_string_buffer(data, len(data))
        with self.objc.autorelease_pool():
            dispatch = self.objc.dispatch_data(ctypes.cast(buffer, ctypes.c_void_p), len(data))
            try:
                library = self.objc.send(self.device, "newLibraryWithData:error:", ctypes.c_void_p(dispatch),
                                         ctypes.pointer(error))
            finally:
                self.release(dispatch)
            if not library:
                raise BackendError(f"Metal: newLibraryWithData failed: {self._error_text(error.value or 0)}")
        return int(library)

    def pipeline(self, library: int, name: str) -> Pipeline:
        """The compute pipeline of kernel `name` in `library`."""
        error = ctypes.c_void_p(0)
        with self.objc.autorelease_pool():
            function = self.objc.send(library, "newFunctionWithName:", ctypes.c_void_p(self.nsstring(name)))
            if not function:
                raise BackendError(f"the Metal library has no kernel {name!r}: the source must define `kernel void "
                                   f"{name}(...)`")
            state = self.objc.send(self.device, "newComputePipelineStateWithFunction:error:",
                                   ctypes.c_void_p(function), ctypes.pointer(error))
            if not state:
                self.release(function)
                raise BackendError(f"Metal: no compute pipeline for {name!r}: {self._error_text(error.value or 0)}")
        max_threads = int(self.objc.send(state, "maxTotalThreadsPerThreadgroup", restype=ctypes.c_uint64))
        return Pipeline(int(state), int(function), max_threads)

    # ---- launches ----------------------------------------------------------------------------------------------
    def gpu_address(self, buffer: int) -> int:
        """A buffer's GPU address (`gpuAddress`, macOS 13+), for an argument struct."""
        if self._has_gpu_address is None:
            self._has_gpu_address = bool(self.objc.send(buffer, "respondsToSelector:", ctypes.c_void_p(
                self.objc.selector("gpuAddress")), restype=ctypes.c_bool))
        if not self._has_gpu_address:
            raise BackendError("a kernel with more than 31 buffers and variables passes them as GPU addresses "
                               "(MTLBuffer.gpuAddress), which this macOS lacks (13 or newer has it)")
        return int(self.objc.send(buffer, "gpuAddress", restype=ctypes.c_uint64))

    def dispatch(self, pipeline: Pipeline, buffers: Sequence[int], values: Sequence[bytes], *,
                 groups: tuple[int, int, int], threads: tuple[int, int, int], name: str,
                 argument_struct: bytes | None = None) -> Completion:
        """Encode and commit one launch: buffers bound at 0.., each of `values` (setBytes) after them; or, with an
        `argument_struct` (launch.py), the buffers made resident and the struct alone at binding 0."""
        objc = self.objc
        with objc.autorelease_pool():
            command_buffer = objc.send(self.queue, "commandBuffer")
            if not command_buffer:
                raise BackendError(f"Metal: the command queue gave no command buffer for {name!r}")
            objc.send(command_buffer, "retain")  # kept past this pool until `wait`
            encoder = objc.send(command_buffer, "computeCommandEncoder")
            if not encoder:
                objc.send(command_buffer, "release", restype=None)
                raise BackendError(f"Metal: no compute command encoder for {name!r}")
            objc.send(encoder, "setComputePipelineState:", ctypes.c_void_p(pipeline.state), restype=None)
            if argument_struct is not None:  # the kernel reaches the buffers through their GPU addresses
                for buffer in buffers:
                    objc.send(encoder, "useResource:usage:", ctypes.c_void_p(buffer),
                              ctypes.c_uint64(MTL_RESOURCE_USAGE_READ_WRITE), restype=None)
                bytes_at = [(argument_struct, 0)]
            else:
                for index, buffer in enumerate(buffers):
                    objc.send(encoder, "setBuffer:offset:atIndex:", ctypes.c_void_p(buffer), ctypes.c_uint64(0),
                              ctypes.c_uint64(index), restype=None)
                bytes_at = [(value, len(buffers) + offset) for offset, value in enumerate(values)]
            for value, index in bytes_at:
                raw = ctypes.create_string_buffer(value, len(value))
                objc.send(encoder, "setBytes:length:atIndex:", ctypes.cast(raw, ctypes.c_void_p),
                          ctypes.c_uint64(len(value)), ctypes.c_uint64(index), restype=None)
            objc.send(encoder, "dispatchThreadgroups:threadsPerThreadgroup:", MTLSize(*groups), MTLSize(*threads),
                      restype=None)
            objc.send(encoder, "endEncoding", restype=None)
            objc.send(command_buffer, "commit", restype=None)
        return Completion(int(command_buffer), name)

    def wait(self, completion: Completion) -> float:
        """Wait for a committed command buffer, release it, and return its GPU time in seconds; BackendError when
        the GPU reported an error (a fault, a timeout)."""
        objc, buffer = self.objc, completion.buffer
        try:
            with objc.autorelease_pool():
                objc.send(buffer, "waitUntilCompleted", restype=None)
                status = int(objc.send(buffer, "status", restype=ctypes.c_int64))
                if status == MTL_COMMAND_BUFFER_STATUS_ERROR:
                    text = self._error_text(objc.send(buffer, "error"))
                    raise BackendError(f"Metal program {completion.name!r} failed on the GPU: {text}")
                if status != MTL_COMMAND_BUFFER_STATUS_COMPLETED:
                    raise BackendError(f"Metal program {completion.name!r}: its command buffer ended with status "
                                       f"{status}, not completed")
                start = float(objc.send(buffer, "GPUStartTime", restype=ctypes.c_double))
                end = float(objc.send(buffer, "GPUEndTime", restype=ctypes.c_double))
        finally:
            self.release(buffer)
        return max(0.0, end - start)

"""A stand-in for the Objective-C runtime with a Mac GPU behind it, for testing plygrad-metal on Linux.

`FakeObjC` implements the `ObjC` protocol (plygrad.backends.metal.objc) and answers the Metal messages the backend
sends the way Metal does, keeping the rules a wrong call would break:

- every message must name a selector the object's kind answers, with one ctypes-typed argument per colon (the real
  runtime builds the C prototype from those types), sent to a live object (not nil, not released);
- objects from `new...` messages are owned and must be released once; autoreleased ones (`commandBuffer`,
  `stringWithUTF8String:`, `localizedDescription`...) may only be made inside an autorelease pool, and a command
  buffer used after its pool must have been retained;
- buffers are real memory (`contents` is an address), `setBytes` copies the bytes at the call, and a committed
  command buffer "runs" its dispatches by calling `kernels[name](buffers, values, groups, threads)`, a Python
  function the test supplies, on memoryviews of the buffers' bytes; or, with a `runner`, `runner(name, source,
  buffers, values, groups, threads)` for every kernel (tests/test_metal_emulated.py runs the MSL through the
  CPU emulation of Metal that way). `compile_check(source)` may return a compiler log to fail a library with.

`log` records every message as (kind, selector, args as Python values), so a test can check the sequence.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from plygrad.backends.metal.objc import MTLSize, selector_arity

Kernel = Callable[[list[memoryview], list[bytes], tuple[int, int, int], tuple[int, int, int]], None]
# runs any dispatched kernel from its source: (name, MSL source, buffers, setBytes values, groups, threads)
Runner = Callable[[str, str, list[memoryview], list[bytes], tuple[int, int, int], tuple[int, int, int]], None]
# messages whose result is autoreleased (made only inside a pool)
AUTORELEASED = frozenset({"name", "stringWithUTF8String:", "commandBuffer", "computeCommandEncoder",
                          "localizedDescription", "error"})


@dataclass
class FakeObject:
    kind: str
    owned: bool  # from a new... message: must be released
    attrs: dict[str, Any] = field(default_factory=dict)
    references: int = 1
    pool: int | None = None  # the pool an autoreleased object belongs to


def _value(arg: Any) -> Any:
    """A ctypes argument as a Python value, for the log and the handlers."""
    if isinstance(arg, MTLSize):
        return (int(arg.width), int(arg.height), int(arg.depth))
    if isinstance(arg, ctypes._Pointer):
        return arg
    if isinstance(arg, ctypes.c_char_p):
        return arg.value
    return arg.value


class FakeObjC:
    """The Objective-C runtime of a pretend Mac (module docstring). `family` is the newest GPU family it supports
    (1007 apple7 ... 1009 apple9), `has_math_mode` whether MTLCompileOptions answers setMathMode: (macOS 15+)."""

    def __init__(self, *, gpu: bool = True, family: int = 1009, has_math_mode: bool = True,
                 pipeline_max_threads: int = 1024, kernels: dict[str, Kernel] | None = None,
                 runner: Runner | None = None, compile_check: Callable[[str], str | None] | None = None,
                 has_gpu_address: bool = True) -> None:
        self.has_gpu_address = has_gpu_address
        self.runner, self.compile_check = runner, compile_check
        self.gpu, self.family, self.has_math_mode = gpu, family, has_math_mode
        self.pipeline_max_threads = pipeline_max_threads
        self.kernels: dict[str, Kernel] = dict(kernels or {})
        self.objects: dict[int, FakeObject] = {}
        self.classes: dict[str, int] = {}
        self.log: list[tuple[str, str, tuple[Any, ...]]] = []
        self._threads = threading.local()  # autorelease pools are per thread, as in Cocoa
        self._lock = threading.RLock()  # the runtime compiles programs on worker threads
        self._next = 0x1000
        self._memory: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self.compiled_sources: list[str] = []
        self.fail_next_command_buffer = False

    # ---- the ObjC protocol -------------------------------------------------------------------------------------
    def create_system_default_device(self) -> int:
        return self._make("device", owned=True) if self.gpu else 0

    def cls(self, name: str) -> int:
        with self._lock:
            return self._cls(name)

    def _cls(self, name: str) -> int:
        if name not in self.classes:
            self.classes[name] = self._make(f"class {name}", owned=False)
            self.objects[self.classes[name]].pool = None  # a class lives as long as the process
        return self.classes[name]

    def selector(self, name: str) -> int:
        return 0x5E1 + sum(map(ord, name))  # any stable nonzero value; the handlers look at the name

    def dispatch_data(self, data: ctypes.c_void_p, size: int) -> int:
        return self._make("dispatch_data", owned=True, data=ctypes.string_at(data.value or 0, size))

    @property
    def pools(self) -> list[int]:
        """This thread's open autorelease pools, innermost last."""
        if not hasattr(self._threads, "pools"):
            self._threads.pools = []
        pools: list[int] = self._threads.pools
        return pools

    @contextmanager
    def autorelease_pool(self) -> Iterator[None]:
        with self._lock:
            token = self._next
            self._next += 1
        self.pools.append(token)
        try:
            yield
        finally:
            self.pools.pop()
            with self._lock:
                for obj in self.objects.values():  # autoreleased objects without a retain die with their pool
                    if obj.pool == token:
                        assert obj.references >= 1, f"an autoreleased {obj.kind} was released by its user too"
                        obj.references -= 1
                        obj.pool = None

    def send(self, receiver: int, selector: str, *args: Any, restype: Any = ctypes.c_void_p) -> Any:
        with self._lock:
            return self._send(receiver, selector, *args, restype=restype)

    def _send(self, receiver: int, selector: str, *args: Any, restype: Any = ctypes.c_void_p) -> Any:
        assert selector_arity(selector) == len(args), f"-{selector} takes {selector_arity(selector)} args"
        for arg in args:
            assert isinstance(arg, ctypes._SimpleCData | ctypes.Structure | ctypes._Pointer), \
                f"-{selector}: argument {arg!r} is not a ctypes value (the runtime needs its C type)"
        obj = self.objects.get(receiver)
        assert obj is not None, f"-{selector} sent to {'nil' if not receiver else 'an unknown object'}"
        assert obj.references > 0, f"-{selector} sent to a released {obj.kind}"
        values = tuple(_value(a) for a in args)
        self.log.append((obj.kind, selector, values))
        if selector in AUTORELEASED:
            assert self.pools, f"-{selector} outside an autorelease pool: its result would leak"
        if selector in ("retain", "release"):  # every object answers these
            obj.references += 1 if selector == "retain" else -1
            # an autoreleased object still in its pool holds one reference the pool will give back
            assert obj.references >= (1 if obj.pool is not None else 0), \
                f"a {obj.kind} released more often than it was owned"
            return receiver if selector == "retain" else None
        handler = getattr(self, "_" + re.sub(r"\W", "_", f"{obj.kind.split()[0]}_{selector}"), None)
        assert handler is not None, f"a {obj.kind} does not answer -{selector}"
        result = handler(receiver, obj, *values)
        if restype is MTLSize or restype is None or restype is ctypes.c_char_p:
            return result
        if restype is ctypes.c_void_p:
            return int(result or 0)
        return restype(result).value

    # ---- bookkeeping -------------------------------------------------------------------------------------------
    def _make(self, kind: str, owned: bool, **attrs: Any) -> int:
        with self._lock:
            handle = self._next
            self._next += 16
            self.objects[handle] = FakeObject(kind, owned, attrs, pool=None if owned else (self.pools or [None])[-1])
        return handle

    def _autoreleased(self, kind: str, **attrs: Any) -> int:
        return self._make(kind, owned=False, **attrs)

    def live(self, kind: str) -> int:
        """How many objects of `kind` are still referenced."""
        return sum(1 for o in self.objects.values() if o.kind == kind and o.references > 0)

    def messages(self, selector: str) -> list[tuple[Any, ...]]:
        return [args for _, sel, args in self.log if sel == selector]

    def nsstring(self, text: str) -> int:
        return self._autoreleased("NSString", text=text)

    def _error(self, pointer: Any, text: str) -> None:
        pointer.contents.value = self._autoreleased("NSError", text=text)

    # ---- classes -------------------------------------------------------------------------------------------------
    def _class_stringWithUTF8String_(self, handle: int, obj: FakeObject, text: bytes) -> int:
        assert obj.kind == "class NSString"
        return self.nsstring(text.decode())

    def _class_new(self, handle: int, obj: FakeObject) -> int:
        assert obj.kind == "class MTLCompileOptions", obj.kind
        return self._make("options", owned=True)

    def _NSString_UTF8String(self, handle: int, obj: FakeObject) -> bytes:
        return str(obj.attrs["text"]).encode()

    def _NSError_localizedDescription(self, handle: int, obj: FakeObject) -> int:
        return self.nsstring(obj.attrs["text"])

    # ---- the device --------------------------------------------------------------------------------------------
    def _device_name(self, handle: int, obj: FakeObject) -> int:
        return self.nsstring("Fake Apple M3")

    def _device_newCommandQueue(self, handle: int, obj: FakeObject) -> int:
        return self._make("queue", owned=True)

    def _device_supportsFamily_(self, handle: int, obj: FakeObject, family: int) -> bool:
        return family <= self.family if family < 2000 else False

    def _device_maxThreadsPerThreadgroup(self, handle: int, obj: FakeObject) -> MTLSize:
        return MTLSize(1024, 1024, 1024)

    def _device_maxThreadgroupMemoryLength(self, handle: int, obj: FakeObject) -> int:
        return 32768

    def _device_newBufferWithLength_options_(self, handle: int, obj: FakeObject, nbytes: int, options: int) -> int:
        assert nbytes >= 1, "Metal makes no empty buffer"
        assert options == 0, "plygrad's buffers are MTLResourceStorageModeShared (0)"
        memory = ctypes.create_string_buffer(nbytes)
        buffer = self._make("buffer", owned=True, length=nbytes)
        self._memory[buffer] = memory
        return buffer

    def _device_newLibraryWithSource_options_error_(self, handle: int, obj: FakeObject, source: int, options: int,
                                                    error: Any) -> int:
        text = str(self.objects[source].attrs["text"])
        settings = self.objects[options].attrs
        assert settings.get("mathMode") == 0 or settings.get("fastMathEnabled") is False, \
            "a library must be compiled with safe math (docs/ir.md)"
        self.compiled_sources.append(text)
        bad = next((n for n, line in enumerate(text.splitlines(), 1) if "#error" in line), None)
        if bad is not None:
            self._error(error, f"program_source:{bad}:2: error: the test program is broken\n  #error")
            return 0
        log = self.compile_check(text) if self.compile_check is not None else None
        if log is not None:
            self._error(error, log)
            return 0
        return self._make("library", owned=True, source=text)

    def _device_newLibraryWithData_error_(self, handle: int, obj: FakeObject, data: int, error: Any) -> int:
        raw = self.objects[data].attrs["data"]
        if not raw.startswith(b"MTLB"):
            self._error(error, "Invalid library file")
            return 0
        return self._make("library", owned=True, source=raw[4:].decode())

    def _device_newComputePipelineStateWithFunction_error_(self, handle: int, obj: FakeObject, function: int,
                                                           error: Any) -> int:
        return self._make("pipeline", owned=True, **self.objects[function].attrs)

    # ---- compile options ---------------------------------------------------------------------------------------
    def _options_respondsToSelector_(self, handle: int, obj: FakeObject, selector: int) -> bool:
        return self.has_math_mode and selector == self.selector("setMathMode:")

    def _options_setMathMode_(self, handle: int, obj: FakeObject, mode: int) -> None:
        assert self.has_math_mode, "setMathMode: does not exist before macOS 15"
        obj.attrs["mathMode"] = mode

    def _options_setMathFloatingPointFunctions_(self, handle: int, obj: FakeObject, functions: int) -> None:
        obj.attrs["mathFloatingPointFunctions"] = functions

    def _options_setFastMathEnabled_(self, handle: int, obj: FakeObject, enabled: bool) -> None:
        obj.attrs["fastMathEnabled"] = enabled

    # ---- libraries, pipelines, buffers -------------------------------------------------------------------------
    def _library_newFunctionWithName_(self, handle: int, obj: FakeObject, name: int) -> int:
        wanted = str(self.objects[name].attrs["text"])
        if f"kernel void {wanted}(" not in obj.attrs["source"]:
            return 0
        return self._make("function", owned=True, name=wanted, source=obj.attrs["source"])

    def _pipeline_maxTotalThreadsPerThreadgroup(self, handle: int, obj: FakeObject) -> int:
        return self.pipeline_max_threads

    def _buffer_contents(self, handle: int, obj: FakeObject) -> int:
        return ctypes.addressof(self._memory[handle])

    def _buffer_respondsToSelector_(self, handle: int, obj: FakeObject, selector: int) -> bool:
        return self.has_gpu_address and selector == self.selector("gpuAddress")

    def _buffer_gpuAddress(self, handle: int, obj: FakeObject) -> int:
        assert self.has_gpu_address, "gpuAddress does not exist before macOS 13"
        return 0x1_0000_0000 + ctypes.addressof(self._memory[handle])  # some other address space than the CPU's

    def buffer_at(self, gpu_address: int) -> memoryview:
        """The bytes of the buffer at a GPU address (what a kernel reading an argument struct reaches)."""
        for handle, memory in self._memory.items():
            if self.objects[handle].references > 0 and 0x1_0000_0000 + ctypes.addressof(memory) == gpu_address:
                return memoryview(memory).cast("B")
        raise AssertionError(f"no live buffer at GPU address {gpu_address:#x}")

    # ---- command buffers and encoders --------------------------------------------------------------------------
    def _queue_commandBuffer(self, handle: int, obj: FakeObject) -> int:
        return self._autoreleased("command_buffer", dispatches=[], status=1)

    def _command_buffer_computeCommandEncoder(self, handle: int, obj: FakeObject) -> int:
        encoder = self._autoreleased("encoder", command_buffer=handle, buffers={}, values={}, resident=[])
        return encoder

    def _encoder_setComputePipelineState_(self, handle: int, obj: FakeObject, pipeline: int) -> None:
        obj.attrs["pipeline"] = pipeline

    def _encoder_setBuffer_offset_atIndex_(self, handle: int, obj: FakeObject, buffer: int, offset: int,
                                           index: int) -> None:
        assert offset == 0 and index not in obj.attrs["values"] and index < 31
        obj.attrs["buffers"][index] = buffer

    def _encoder_useResource_usage_(self, handle: int, obj: FakeObject, resource: int, usage: int) -> None:
        assert self.objects[resource].kind == "buffer" and usage == 3, "buffers are used for reading and writing"
        obj.attrs["resident"].append(resource)

    def _encoder_setBytes_length_atIndex_(self, handle: int, obj: FakeObject, data: int, length: int,
                                          index: int) -> None:
        assert index not in obj.attrs["buffers"] and index < 31
        obj.attrs["values"][index] = ctypes.string_at(data, length)  # setBytes copies at the call

    def _encoder_dispatchThreadgroups_threadsPerThreadgroup_(self, handle: int, obj: FakeObject,
                                                             groups: tuple[int, int, int],
                                                             threads: tuple[int, int, int]) -> None:
        command_buffer = self.objects[obj.attrs["command_buffer"]]
        bound = sorted({**obj.attrs["buffers"], **obj.attrs["values"]})
        assert bound == list(range(len(bound))), f"bindings {bound} are not 0, 1, 2..."
        # a kernel reaching its buffers through an argument struct sees the resident ones, in the order made so
        buffers = dict(obj.attrs["buffers"]) or dict(enumerate(obj.attrs["resident"]))
        command_buffer.attrs["dispatches"].append((obj.attrs["pipeline"], buffers, dict(obj.attrs["values"]), groups,
                                                   threads))

    def _encoder_endEncoding(self, handle: int, obj: FakeObject) -> None:
        obj.attrs["ended"] = True

    def _command_buffer_commit(self, handle: int, obj: FakeObject) -> None:
        assert obj.attrs["status"] == 1, "a command buffer is committed once"
        obj.attrs["status"] = 4
        for pipeline, buffers, values, groups, threads in obj.attrs["dispatches"]:
            name, source = self.objects[pipeline].attrs["name"], self.objects[pipeline].attrs["source"]
            views = [memoryview(self._memory[buffers[i]]).cast("B") for i in sorted(buffers)]
            try:
                if self.fail_next_command_buffer:
                    self.fail_next_command_buffer = False
                    raise RuntimeError("Caused GPU Timeout Error (00000002:kIOGPUCommandBufferCallbackErrorTimeout)")
                if self.runner is not None:
                    self.runner(name, source, views, [values[i] for i in sorted(values)], groups, threads)
                else:
                    self.kernels[name](views, [values[i] for i in sorted(values)], groups, threads)
            except Exception as exc:  # the GPU "faulted": the command buffer ends in error
                obj.attrs["status"] = 5
                obj.attrs["error"] = str(exc)

    def _command_buffer_waitUntilCompleted(self, handle: int, obj: FakeObject) -> None:
        assert obj.attrs["status"] in (4, 5), "waiting for a command buffer that was never committed"

    def _command_buffer_status(self, handle: int, obj: FakeObject) -> int:
        return int(obj.attrs["status"])

    def _command_buffer_error(self, handle: int, obj: FakeObject) -> int:
        return self._autoreleased("NSError", text=obj.attrs.get("error", ""))

    def _command_buffer_GPUStartTime(self, handle: int, obj: FakeObject) -> float:
        return 100.0

    def _command_buffer_GPUEndTime(self, handle: int, obj: FakeObject) -> float:
        return 100.25

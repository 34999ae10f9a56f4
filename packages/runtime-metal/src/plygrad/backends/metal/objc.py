"""The Objective-C runtime through ctypes: the one module that calls `objc_msgSend`.

Each message is `objc_msgSend` (`objc_msgSend_stret` for a struct returned by value on x86-64) cast to the exact C
prototype of its arguments and return type, so no PyObjC is needed. `ObjC` is the protocol the Metal layer
(device.py) programs against; `ObjCRuntime` implements it on macOS, tests/fake_objc.py on Linux. Ownership follows
Cocoa's rules, and objects that are autoreleased are made inside `autorelease_pool()`. docs/backends.md ("Metal").
"""

from __future__ import annotations

import ctypes
import platform
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, Protocol

from plygrad.runtime.errors import BackendError

LIBOBJC: Final = "/usr/lib/libobjc.A.dylib"
LIBSYSTEM: Final = "/usr/lib/libSystem.B.dylib"  # libdispatch's dispatch_data_create
METAL_FRAMEWORK: Final = "/System/Library/Frameworks/Metal.framework/Metal"
FOUNDATION_FRAMEWORK: Final = "/System/Library/Frameworks/Foundation.framework/Foundation"
# Apple: "in macOS, in order for the system to provide a default Metal device object, you must link to the Core
# Graphics framework"; a Python process links nothing, so it is loaded by hand
CORE_GRAPHICS_FRAMEWORK: Final = "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics"
NSUTF8StringEncoding: Final = 4


class MTLSize(ctypes.Structure):
    """Metal's `MTLSize`: three NSUIntegers."""

    _fields_ = [("width", ctypes.c_uint64), ("height", ctypes.c_uint64), ("depth", ctypes.c_uint64)]


class ObjC(Protocol):
    """What the Metal layer needs from the Objective-C runtime. Object references are ints (0 is nil)."""

    def create_system_default_device(self) -> int:
        """`MTLCreateSystemDefaultDevice()`: the Mac's GPU, or 0 where there is none."""

    def cls(self, name: str) -> int:
        """The class object named `name`."""

    def send(self, receiver: int, selector: str, *args: Any, restype: Any = ctypes.c_void_p) -> Any:
        """Send `selector` to `receiver` with ctypes-typed `args`; the result as `restype` (an object is an int,
        0 for nil)."""

    def selector(self, name: str) -> int:
        """The selector (SEL) named `name`, as an argument value (`respondsToSelector:`)."""

    def dispatch_data(self, data: ctypes.c_void_p, size: int) -> int:
        """A dispatch_data_t holding a copy of `size` bytes at `data` (owned by the caller: `release` it)."""

    def autorelease_pool(self) -> Any:
        """A context manager draining the objects autoreleased inside it."""


def running_on() -> str:
    """`sys.platform`, through a function so type checkers on Linux still check the macOS code."""
    return str(sys.platform)


def selector_arity(selector: str) -> int:
    """How many arguments a selector takes: one per colon."""
    return selector.count(":")


class ObjCRuntime:
    """libobjc through ctypes (macOS only): see the module docstring."""

    def __init__(self) -> None:
        system = running_on()
        if system != "darwin":
            raise BackendError(f"unavailable: Metal needs macOS (this is {system})")
        try:
            self.libobjc = ctypes.CDLL(LIBOBJC)
            self.metal = ctypes.CDLL(METAL_FRAMEWORK)
            self.libsystem = ctypes.CDLL(LIBSYSTEM)
            ctypes.CDLL(FOUNDATION_FRAMEWORK)  # NSString, NSError
            ctypes.CDLL(CORE_GRAPHICS_FRAMEWORK)  # else MTLCreateSystemDefaultDevice returns nil
        except OSError as exc:
            raise BackendError(f"unavailable: the Objective-C runtime or the Metal framework does not load ({exc})") \
                from exc
        for name, restype, argtypes in (("objc_getClass", ctypes.c_void_p, [ctypes.c_char_p]),
                                        ("sel_registerName", ctypes.c_void_p, [ctypes.c_char_p]),
                                        ("objc_autoreleasePoolPush", ctypes.c_void_p, []),
                                        ("objc_autoreleasePoolPop", None, [ctypes.c_void_p])):
            function = getattr(self.libobjc, name)
            function.restype, function.argtypes = restype, argtypes
        self.metal.MTLCreateSystemDefaultDevice.restype = ctypes.c_void_p
        self.metal.MTLCreateSystemDefaultDevice.argtypes = []
        self.libsystem.dispatch_data_create.restype = ctypes.c_void_p
        self.libsystem.dispatch_data_create.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                                        ctypes.c_void_p]
        self._send = ctypes.cast(self.libobjc.objc_msgSend, ctypes.c_void_p).value
        stret = getattr(self.libobjc, "objc_msgSend_stret", None)  # x86-64 only; arm64 has one objc_msgSend
        self._send_stret = ctypes.cast(stret, ctypes.c_void_p).value if stret is not None else None
        self._big_structs_by_stret = platform.machine() == "x86_64"
        self._selectors: dict[str, int] = {}
        self._prototypes: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()

    def create_system_default_device(self) -> int:
        return int(self.metal.MTLCreateSystemDefaultDevice() or 0)

    def cls(self, name: str) -> int:
        found = self.libobjc.objc_getClass(name.encode())
        if not found:
            raise BackendError(f"the Objective-C class {name} does not exist on this macOS")
        return int(found)

    def selector(self, name: str) -> int:
        return self._selector(name)

    def dispatch_data(self, data: ctypes.c_void_p, size: int) -> int:
        # no queue, the default destructor (NULL): libdispatch copies the bytes now
        found = self.libsystem.dispatch_data_create(data, size, None, None)
        if not found:
            raise BackendError(f"dispatch_data_create of {size} bytes failed")
        return int(found)

    def _selector(self, name: str) -> int:
        with self._lock:
            if name not in self._selectors:
                self._selectors[name] = int(self.libobjc.sel_registerName(name.encode()))
            return self._selectors[name]

    def send(self, receiver: int, selector: str, *args: Any, restype: Any = ctypes.c_void_p) -> Any:
        if selector_arity(selector) != len(args):
            raise BackendError(f"objc: -{selector} takes {selector_arity(selector)} argument(s), got {len(args)}")
        if not receiver:
            raise BackendError(f"objc: -{selector} sent to nil")
        argtypes = tuple(type(a) for a in args)
        by_stret = (self._big_structs_by_stret and isinstance(restype, type) and issubclass(restype, ctypes.Structure)
                    and ctypes.sizeof(restype) > 16)
        key = (restype, argtypes, by_stret)
        with self._lock:
            function = self._prototypes.get(key)
            if function is None:
                address = self._send_stret if by_stret else self._send
                if address is None:
                    raise BackendError(f"objc: no objc_msgSend{'_stret' if by_stret else ''} in {LIBOBJC}")
                prototype = ctypes.CFUNCTYPE(restype, ctypes.c_void_p, ctypes.c_void_p, *argtypes)
                function = self._prototypes[key] = prototype(address)
        result = function(ctypes.c_void_p(receiver), ctypes.c_void_p(self._selector(selector)), *args)
        if restype is ctypes.c_void_p:
            return int(result or 0)
        return result

    @contextmanager
    def autorelease_pool(self) -> Iterator[None]:
        pool = self.libobjc.objc_autoreleasePoolPush()
        try:
            yield
        finally:
            self.libobjc.objc_autoreleasePoolPop(pool)


def load_objc() -> ObjCRuntime:
    """The Objective-C runtime of this Mac; BackendError("unavailable: ...") anywhere else."""
    return ObjCRuntime()

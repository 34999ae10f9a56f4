"""What a GPU backend's driver wrapper needs around its ctypes library: checked calls and the errors they raise.

`DriverLibrary` is the base of a wrapper (the CUDA driver's `CudaDriver`, HIP's `HipRuntime`): `check` turns a
failing status into a `DriverError` naming the call, the driver's error name and what was asked; a failed
allocation becomes an out-of-memory error saying what was free. `declare_prototypes` gives a ctypes library its
prototypes (a missing one: the driver is too old, "unavailable"). Nothing here opens a library at import.
docs/backends.md ("The shared plumbing") says how a backend uses it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar

from plygrad.runtime.errors import BackendError


class DriverError(BackendError):
    """A driver call failed; `call`, `status` (the driver's status code) and `name` (its name for it, e.g.
    CUDA_ERROR_INVALID_VALUE) say which and how."""

    def __init__(self, message: str, *, call: str, status: int, name: str) -> None:
        super().__init__(message)
        self.call = call
        self.status = status
        self.name = name


def format_bytes(nbytes: int) -> str:
    """80 GiB, 1.5 MiB, 12 bytes: sizes in messages a person reads."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if nbytes >= unit:
            return f"{nbytes / unit:.1f}".removesuffix(".0") + f" {name}"
    return f"{nbytes} bytes"


def declare_prototypes(lib: Any, prototypes: Mapping[str, list[Any]], optional: Collection[str], missing: str) -> None:
    """Give each function of a ctypes library its argtypes (and an int status as its result); a missing function
    not in `optional` raises BackendError("unavailable: <missing with {name}>") (a driver too old to use)."""
    for name, argtypes in prototypes.items():
        try:
            function = getattr(lib, name)
        except AttributeError as exc:
            if name in optional:
                continue
            raise BackendError("unavailable: " + missing.format(name=name)) from exc
        function.restype = ctypes.c_int
        function.argtypes = argtypes


def host_array(view: memoryview) -> ctypes.Array[ctypes.c_char]:
    """A ctypes view of the bytes of `view`, for a driver call to read or write (a read-only source is copied
    once, since ctypes cannot take the address of an immutable buffer)."""
    flat = view if view.format == "B" and view.ndim == 1 else view.cast("B")
    array_type = ctypes.c_char * flat.nbytes
    return array_type.from_buffer_copy(flat) if flat.readonly else array_type.from_buffer(flat)


def check_ordinal(name: str, ordinal: int, count: int, device: str, gpus: str) -> None:
    """BackendError naming the devices there are when `name` (device `device`:`ordinal`) asks for a GPU beyond
    the `count` of them (`gpus` names their kind: "NVIDIA GPU")."""
    if not 0 <= ordinal < count:
        names = device if count == 1 else f"{device}, {device}:1 ... {device}:{count - 1}"
        raise BackendError(f"device {name}: this machine has {count} {gpus}(s), use {names}")


class DriverLibrary:
    """Checked calls over a driver's functions in `lib` (a ctypes library, or a stand-in with the same names).

    A subclass names its status codes and error types and says how the driver names a status (`status_texts`);
    its methods then call `check(call, status, detail)` after every driver call."""

    SUCCESS: ClassVar[int] = 0
    OUT_OF_MEMORY: ClassVar[int]
    # the error raised for a failing call, and for a failing allocation (that is a MemoryError too)
    error_type: ClassVar[type[DriverError]]
    out_of_memory_type: ClassVar[type[DriverError]]
    # how a status the driver has no name for is named: "CUDA error" gives "CUDA error 101"
    unnamed: ClassVar[str]

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def status_texts(self, status: int) -> tuple[str, str]:
        """The driver's name for `status` and its description ("" where it has none)."""
        raise NotImplementedError

    def error(self, call: str, status: int, detail: str = "") -> DriverError:
        """The exception for `call` returning `status`, its message naming the call, the error and `detail`."""
        name, text = self.status_texts(status)
        name = name or f"{self.unnamed} {status}"
        message = f"{call}: {name}" + (f", {detail}" if detail else "") + (f" ({text})" if text else "")
        kind = self.out_of_memory_type if status == self.OUT_OF_MEMORY else self.error_type
        return kind(message, call=call, status=status, name=name)

    def check(self, call: str, status: int, detail: str = "") -> None:
        if status != self.SUCCESS:
            raise self.error(call, status, detail)

    def _out(self, call: str, ctype: Any, *args: Any, detail: str = "") -> Any:
        """The value a `call(ctype* out, *args)` function writes, the call checked."""
        out = ctype()
        self.check(call, getattr(self.lib, call)(ctypes.pointer(out), *args), detail)
        return out.value

    def _int(self, call: str, *args: Any, detail: str = "") -> int:
        """The int a `call(int* out, *args)` function writes."""
        return int(self._out(call, ctypes.c_int, *args, detail=detail))

    def _handle(self, call: str, *args: Any, detail: str = "") -> int:
        """The handle (a pointer; 0 for null) a `call(void** out, *args)` function writes."""
        return int(self._out(call, ctypes.c_void_p, *args, detail=detail) or 0)

    def launch_error(self, call: str, status: int, name: str, grid: Sequence[int], block: Sequence[int]
                     ) -> DriverError:
        """The exception for a kernel launch that failed, naming the kernel and its sizes."""
        return self.error(call, status, f"kernel {name!r}, grid {tuple(grid)}, block {tuple(block)}")

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current device."""
        raise NotImplementedError

    def allocation_error(self, call: str, status: int, nbytes: int) -> DriverError:
        """The exception for an allocation of `nbytes` that failed; when it ran out of memory, the message says how
        much was free of how much."""
        detail = f"asked {format_bytes(nbytes)}"
        if status == self.OUT_OF_MEMORY:
            try:
                free, total = self.mem_info()
                detail += f", {format_bytes(free)} free of {format_bytes(total)}"
            except DriverError:
                pass  # the allocation's own error is the one to report
        return self.error(call, status, detail)

    # ---- timing: a subclass gives the driver's event calls ---------------------------------------------------
    def event_create(self) -> int:
        raise NotImplementedError

    def event_record(self, event: int) -> None:
        raise NotImplementedError

    def event_seconds(self, start: int, end: int) -> float:
        """Wait for `end`, then the time between the two recorded events in seconds."""
        raise NotImplementedError

    def event_destroy(self, event: int) -> None:
        raise NotImplementedError

    def timed(self, launch: Callable[[], None]) -> float:
        """Run `launch` between two events and return the GPU's seconds for it. The events are made per call, so
        two threads timing the same program do not share them."""
        start, end = self.event_create(), self.event_create()
        try:
            self.event_record(start)
            launch()
            self.event_record(end)
            return self.event_seconds(start, end)
        finally:
            self.event_destroy(start)
            self.event_destroy(end)

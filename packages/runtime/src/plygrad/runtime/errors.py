"""The runtime's exceptions: each names the backend, buffer or program involved and what to do about it."""

from __future__ import annotations

from plygrad.ir.dtype import DType


class RuntimeLayerError(Exception):
    """Base of every error plygrad.runtime raises on purpose."""


class BackendError(RuntimeLayerError):
    """A backend is unknown, failed to import or open, or was built against an IR it cannot read."""


class CodegenError(RuntimeLayerError):
    """No usable lowering engine (`plygrad.codegen` entry point), or it returned something that is not a PROGRAM."""


class CompileError(RuntimeLayerError):
    """A backend compiler rejected a program's source.

    `line` is the 1-based source line the compiler blamed (0 when it named none) and `source_line` its text. `str()`
    shows that line under the message (unless the backend's message already quotes it), so every backend's error
    names the offending line without the reader having to dump the whole source.
    """

    def __init__(self, message: str, *, line: int = 0, source_line: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.source_line = source_line

    def __str__(self) -> str:
        text = self.source_line.strip()
        if not self.line or (text and text in self.message):
            return self.message
        return f"{self.message}\n  at source line {self.line}" + (f": {text}" if text else "")


class InvalidBufferError(RuntimeLayerError):
    """A buffer was used with the wrong size, dtype or device, or looked up after it was freed."""


class ScheduleError(RuntimeLayerError):
    """A schedule cannot run: a buffer id it references is unknown, a kernel's parameters do not match its
    buffers, or (IndexBoundsError) a kernel would access memory outside them."""


class MalformedScheduleError(ScheduleError):
    """A schedule a plugin produced failed a check before anything ran: its bytes do not decode, it fails
    verification at the SCHEDULE stage (or one of its kernels at the KERNEL stage), or its buffers do not fit the
    graph or the programs. `producer` names the plugin (entry point, module, distribution; None: unknown), `check`
    says which check failed, and `__cause__` is the original error."""

    def __init__(self, message: str, *, producer: str | None, check: str) -> None:
        super().__init__(message)
        self.producer = producer
        self.check = check


class IndexBoundsError(ScheduleError):
    """A kernel of a schedule would read or write outside a buffer it is given (bounds.py could not prove its
    index range inside the buffer), so the schedule was refused before anything was lowered or launched.

    The attributes say where: the kernel's name and its CALL's position in the LINEAR, the PARAM and the buffer
    (id, size in elements, dtype), the index range that was proved, and who produced the schedule (None: unknown).
    """

    def __init__(self, message: str, *, kernel: str, position: int, param: int, buffer_id: int, size: int,
                 dtype: DType, bounds: tuple[int, int], producer: str | None) -> None:
        super().__init__(message)
        self.kernel = kernel
        self.position = position
        self.param = param
        self.buffer_id = buffer_id
        self.size = size
        self.dtype = dtype
        self.bounds = bounds
        self.producer = producer

"""The runtime's exceptions: each names the backend, buffer or program involved and what to do about it."""

from __future__ import annotations


class RuntimeLayerError(Exception):
    """Base of every error plygrad.runtime raises on purpose."""


class BackendError(RuntimeLayerError):
    """A backend is unknown, failed to import or open, or was built against an IR it cannot read."""


class CodegenError(RuntimeLayerError):
    """No usable lowering engine (`plygrad.codegen` entry point), or it returned something that is not a PROGRAM."""


class CompileError(RuntimeLayerError):
    """A backend compiler rejected a program's source.

    `line` is the 1-based source line the compiler blamed (0 when it named none) and `source_line` its text, so the
    message shows the offending line without the reader having to dump the whole source.
    """

    def __init__(self, message: str, *, line: int = 0, source_line: str = "") -> None:
        super().__init__(message)
        self.line = line
        self.source_line = source_line


class InvalidBufferError(RuntimeLayerError):
    """A buffer was used with the wrong size, dtype or device, or looked up after it was freed."""


class ScheduleError(RuntimeLayerError):
    """A schedule cannot run: a buffer id it references is unknown, or a kernel's parameters do not match its
    buffers."""

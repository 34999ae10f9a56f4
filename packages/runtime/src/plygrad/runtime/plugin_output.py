"""Errors for a plugin's malformed output that name the plugin and the check it failed.

A scheduler is a plugin (docs/design.md §4) whose bytes the runtime decodes, verifies and runs; when they are
wrong, the error must say whose they are. The caller passes the plugin's description down as `producer`, and every
check raises `MalformedScheduleError` with it, the check that failed (`CHECK_BYTES`, `CHECK_DECODE`,
`CHECK_VERIFY`, `CHECK_BUFFERS`) and the original error as `__cause__`. Without a producer (a hand-built schedule
given to `run_linear`) the original errors are raised unchanged. docs/scheduler.md, "Writing a scheduler plugin".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from plygrad.ir.dtype import DType
from plygrad.ir.errors import IRDecodeError, IRVerifyError, IRVersionError
from plygrad.ir.shape import max_shape
from plygrad.ir.uop import UOp
from plygrad.runtime.errors import MalformedScheduleError

CHECK_BYTES: Final = "returned something that is not bytes"
CHECK_DECODE: Final = "does not decode as serialized plygrad IR"
CHECK_VERIFY: Final = "fails IR verification"
CHECK_BUFFERS: Final = "has buffers that do not fit"
HINT: Final = ("; the plugin is at fault, not your program: report it to its authors (a scheduler plugin can test "
               "itself with `python -m plygrad.scheduler.conformance <name>`)")


def malformed(producer: str, check: str, detail: str) -> MalformedScheduleError:
    """The error for a schedule from `producer` that failed `check` (one of the CHECK_* phrases)."""
    return MalformedScheduleError(f"the schedule from {producer} {check}: {detail}{HINT}", producer=producer,
                                  check=check)


def check_of(exc: BaseException) -> str | None:
    """Which check a decode/verify failure is (None: not one of them, raise it as it is)."""
    if isinstance(exc, IRVerifyError) or isinstance(exc.__cause__, IRVerifyError):
        return CHECK_VERIFY  # the decoder reports a failed verification as an IRDecodeError caused by it
    if isinstance(exc, (IRDecodeError, IRVersionError)):
        return CHECK_DECODE
    return None


def check_bytes(schedule: object, producer: str) -> None:
    """A plugin's schedule is bytes (or a LINEAR UOp from an in-process caller)."""
    if not isinstance(schedule, (bytes, bytearray, memoryview, UOp)):
        raise malformed(producer, CHECK_BYTES, f"got a {type(schedule).__name__}; a scheduler returns "
                                               "serialize(linear, Stage.SCHEDULE)")


def check_outputs(outputs: Sequence[tuple[DType, int] | None], roots: Sequence[UOp], producer: str) -> None:
    """The schedule names one buffer per tensor of the SINK (`outputs`: each one's dtype and size, None where the
    buffer is one the schedule does not use), of the tensor's dtype and at least its number of elements."""
    if len(outputs) != len(roots):
        raise malformed(producer, CHECK_BUFFERS, f"its LINEAR.arg names {len(outputs)} output buffers for a tensor "
                                                 f"graph of {len(roots)} tensors (one per SINK source, in order)")
    for n, (out, root) in enumerate(zip(outputs, roots, strict=True)):
        if out is None:
            continue
        dtype, size = out
        numel = math.prod(max_shape(root.shape or ()))  # a symbolic size needs room for its largest value
        if dtype is not root.dtype or size < numel:
            raise malformed(producer, CHECK_BUFFERS, f"output {n} is a buffer of {size} x {dtype}, but SINK source "
                                                     f"{n} is a {root.op.name} of {numel} x {root.dtype}")

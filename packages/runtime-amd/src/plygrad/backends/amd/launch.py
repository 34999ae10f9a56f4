"""The HIP program contract on the launching side: grid and block from a PROGRAM's sizes, and the argument buffer.

A program is `extern "C" __attribute__((global)) void NAME(T0* data0, ..., long long VAR0, ...)` (docs/codegen.md
§5.3): one 8-byte pointer per buffer, then one 8-byte `long long` per variable, so the explicit arguments are those
values packed back to back. `hipModuleLaunchKernel` takes them as that one buffer through `extra`
(`{HIP_LAUNCH_PARAM_BUFFER_POINTER, &buffer, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END}`, markers
1, 2 and 3: HIP's END is 3, CUDA's 0). Grid and block are plygrad.runtime.launching's; an AMD GPU counts work-items
per dimension in 32 bits, so a grid x block reaching 2^32 is refused (docs/backends.md, "AMD: HIP on AMD GPUs").
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from plygrad.runtime.errors import BackendError
from plygrad.runtime.launching import LaunchLimits as SharedLaunchLimits
from plygrad.runtime.launching import launch_dims as checked_launch_dims

ARGUMENT_SIZE: Final = 8
# every buffer pointer a program gets is aligned to this (docs/codegen.md §5): its 16-byte vector accesses rely on it
POINTER_ALIGN: Final = 16
PARAM_BUFFER_POINTER: Final = 1
PARAM_BUFFER_SIZE: Final = 2
PARAM_END: Final = 3


@dataclass(frozen=True)
class KernelArguments:
    """The packed explicit arguments and the `extra` list pointing at them. Both are held here so they stay alive
    until the launch has read them (hipModuleLaunchKernel copies them before returning)."""

    buffer: ctypes.Array[ctypes.c_char]
    size: ctypes.c_size_t
    extra: ctypes.Array[ctypes.c_void_p]


def pack_arguments(buffers: Sequence[int], vals: Sequence[int], name: str = "") -> KernelArguments:
    """The `extra` list for a launch of program `name` with device pointers `buffers` and variable values `vals`.
    Every buffer pointer must be POINTER_ALIGN-byte aligned (the null pointer of a zero-byte buffer is), and every
    variable fit a `long long`."""
    for index, pointer in enumerate(buffers):
        if pointer % POINTER_ALIGN:
            raise BackendError(f"HIP program {name!r}: buffer {index} is at {pointer:#x}, not a multiple of "
                               f"{POINTER_ALIGN} bytes; the program contract hands kernels {POINTER_ALIGN}-byte "
                               "aligned pointers (their vector loads rely on it): pass the start of an allocation")
    for index, value in enumerate(vals):
        if not -(2**63) <= value < 2**63:
            raise BackendError(f"HIP program {name!r}: variable {index} = {value} does not fit its `long long`")
    packed = struct.pack(f"<{len(buffers)}Q{len(vals)}q", *buffers, *vals)
    buffer = ctypes.create_string_buffer(packed, max(len(packed), 1))
    size = ctypes.c_size_t(len(packed))
    extra = (ctypes.c_void_p * 5)(PARAM_BUFFER_POINTER, ctypes.addressof(buffer), PARAM_BUFFER_SIZE,
                                  ctypes.addressof(size), PARAM_END)
    return KernelArguments(buffer, size, extra)


@dataclass(frozen=True)
class LaunchLimits(SharedLaunchLimits):
    """What one launch may ask of the device (a workgroup may be 1024 work-items long in any dimension)."""

    max_block: tuple[int, int, int] = (1024, 1024, 1024)


def launch_dims(global_size: Sequence[int], local_size: Sequence[int] | None, limits: SharedLaunchLimits,
                name: str = "") -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) for hipModuleLaunchKernel, checked against the device's limits so that a PROGRAM the device
    cannot run fails naming its sizes rather than as a bare hipErrorInvalidValue."""
    return checked_launch_dims(global_size, local_size, limits, program=f"HIP program {name!r}",
                               threads="work-items per workgroup", work_items_in_32_bits=True)

"""The HIP program contract on the launching side: grid and block from a PROGRAM's sizes, and the argument buffer.

A program is `extern "C" __attribute__((global)) void NAME(T0* data0, ..., long long VAR0, ...)` (docs/codegen.md
§5.3): one 8-byte device pointer per buffer in `ProgramInfo.params` order, then one 8-byte `long long` per variable
in the PROGRAM's DEFINE_VAR order. Every one of them is 8 bytes and 8-byte aligned, so the kernel's explicit
arguments are exactly those values packed back to back (the code object's metadata says the same: kernarg size
8 * n). `hipModuleLaunchKernel` takes them as that one buffer through `extra`:
`{HIP_LAUNCH_PARAM_BUFFER_POINTER, &buffer, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END}` with the
markers 1, 2 and 3 (HIP's END is 3, CUDA's 0); the runtime appends the hidden arguments itself.

`ProgramInfo.global_size` counts workgroups per dimension and `local_size` work-items per workgroup, as
hipModuleLaunchKernel's grid and block do. An AMD GPU counts work-items per dimension in 32 bits, so a launch whose
grid times block reaches 2^32 in a dimension is refused here rather than wrapped on the device.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from plygrad.runtime.errors import BackendError

ARGUMENT_SIZE: Final = 8
# every buffer pointer a program gets is aligned to this (docs/codegen.md §5): its 16-byte vector accesses rely on it
POINTER_ALIGN: Final = 16
PARAM_BUFFER_POINTER: Final = 1
PARAM_BUFFER_SIZE: Final = 2
PARAM_END: Final = 3
MAX_WORK_ITEMS: Final = 2**32 - 1  # per dimension: grid * block


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
class LaunchLimits:
    """What one launch may ask of the device."""

    max_threads_per_block: int = 1024
    max_block: tuple[int, int, int] = (1024, 1024, 1024)
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)


def launch_dims(global_size: Sequence[int], local_size: Sequence[int] | None, limits: LaunchLimits,
                name: str = "") -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) for hipModuleLaunchKernel, checked against the device's limits so that a PROGRAM the device
    cannot run fails naming its sizes rather than as a bare hipErrorInvalidValue."""
    block = (1, 1, 1) if local_size is None else (int(local_size[0]), int(local_size[1]), int(local_size[2]))
    grid = (int(global_size[0]), int(global_size[1]), int(global_size[2]))
    threads = block[0] * block[1] * block[2]
    problems = []
    if threads > limits.max_threads_per_block:
        problems.append(f"{threads} work-items per workgroup (at most {limits.max_threads_per_block})")
    if any(not 0 < b <= m for b, m in zip(block, limits.max_block, strict=True)):
        problems.append(f"block {block} (each dimension in 1..{limits.max_block})")
    if any(not 0 < g <= m for g, m in zip(grid, limits.max_grid, strict=True)):
        problems.append(f"grid {grid} (each dimension in 1..{limits.max_grid})")
    elif any(g * b > MAX_WORK_ITEMS for g, b in zip(grid, block, strict=True)):
        problems.append(f"grid x block {tuple(g * b for g, b in zip(grid, block, strict=True))} work-items (at "
                        f"most 2^32 - 1 per dimension)")
    if problems:
        raise BackendError(f"HIP program {name!r} cannot launch with global size {tuple(global_size)} and local "
                           f"size {None if local_size is None else tuple(local_size)}: {'; '.join(problems)}; "
                           "codegen must keep within the Target's global_max, local_max and max_threads_per_group")
    return grid, block

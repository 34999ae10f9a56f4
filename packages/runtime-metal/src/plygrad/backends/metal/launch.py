"""The Metal program contract on the launching side: threadgroups and threads from a PROGRAM's sizes, and the
bytes of its variables.

A program is `kernel void NAME(device T0* data0 [[buffer(0)]], ..., constant long& VAR0 [[buffer(n)]], ...,
uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]])` (docs/codegen.md §5.2):
the buffers bound at 0.. in `ProgramInfo.params` order, then each variable as 8 bytes (a little-endian `long`,
`setBytes`) in the PROGRAM's DEFINE_VAR order; at most 31 bindings in all, Metal's buffer argument table. A
program with more takes one argument struct at binding 0 instead: the buffers' GPU addresses (Metal 3's `gpuAddress`)
then the variables, 8 bytes each, which the launcher passes with setBytes after making every buffer resident
(`useResource:usage:`).
`ProgramInfo.global_size` counts threadgroups and `local_size` threads per threadgroup
(`dispatchThreadgroups:threadsPerThreadgroup:`), as CUDA's grid and block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from plygrad.runtime.errors import BackendError

MAX_BINDINGS: Final = 31
MAX_SET_BYTES: Final = 4096
VARIABLE_BYTES: Final = 8


def uses_argument_struct(buffers: int, variables: int) -> bool:
    """Whether a program takes its buffers and variables as one argument struct: exactly when they need more than
    Metal's 31 bindings (the metal renderer decides the same way)."""
    return buffers + variables > MAX_BINDINGS


def _value_bytes(index: int, value: int, name: str) -> bytes:
    if not -(2**63) <= int(value) < 2**63:
        raise BackendError(f"Metal program {name!r}: variable {index} = {value} does not fit its 64-bit `long`")
    return int(value).to_bytes(VARIABLE_BYTES, "little", signed=True)


def variable_bytes(vals: Sequence[int], buffers: int, name: str = "") -> list[bytes]:
    """The setBytes value of each variable, bound after `buffers` buffers: 8 bytes each, little-endian signed."""
    if uses_argument_struct(buffers, len(vals)):
        raise BackendError(f"Metal program {name!r}: {buffers} buffers and {len(vals)} variables need "
                           f"{buffers + len(vals)} bindings, Metal has {MAX_BINDINGS}: pass an argument_struct")
    return [_value_bytes(index, value, name) for index, value in enumerate(vals)]


def argument_struct(addresses: Sequence[int], vals: Sequence[int], name: str = "") -> bytes:
    """The `plygrad_args` of a program with more than 31 bindings: each buffer's GPU address (`gpuAddress`), then each
    variable, 8 bytes apiece in that order, as the renderer declares the struct; setBytes passes 4 KiB at most."""
    fields = [int(address).to_bytes(8, "little") for address in addresses]
    fields += [_value_bytes(index, value, name) for index, value in enumerate(vals)]
    if len(fields) * 8 > MAX_SET_BYTES:
        raise BackendError(f"Metal program {name!r}: {len(fields)} buffers and variables make a {len(fields) * 8}-byte "
                           f"argument struct, setBytes passes {MAX_SET_BYTES}")
    return b"".join(fields)


def launch_dims(global_size: Sequence[int], local_size: Sequence[int] | None, max_threads: int,
                max_per_dimension: tuple[int, int, int], name: str = "") -> tuple[tuple[int, int, int],
                                                                                  tuple[int, int, int]]:
    """(threadgroups, threads per threadgroup) for a dispatch, checked against the pipeline's
    `maxTotalThreadsPerThreadgroup` (below the device's maximum for a kernel that needs many registers) and the
    device's per-dimension limits, so a program that cannot run fails naming its sizes."""
    threads = (1, 1, 1) if local_size is None else (int(local_size[0]), int(local_size[1]), int(local_size[2]))
    groups = (int(global_size[0]), int(global_size[1]), int(global_size[2]))
    total = threads[0] * threads[1] * threads[2]
    problems = []
    if total > max_threads:
        problems.append(f"{total} threads per threadgroup (this pipeline allows {max_threads})")
    if any(not 0 < t <= m for t, m in zip(threads, max_per_dimension, strict=True)):
        problems.append(f"threadgroup {threads} (each dimension in 1..{max_per_dimension})")
    if any(not 0 < g < 2**32 for g in groups):
        problems.append(f"grid {groups} (each dimension in 1..2**32-1)")
    if problems:
        raise BackendError(f"Metal program {name!r} cannot launch with global size {tuple(global_size)} and local "
                           f"size {None if local_size is None else tuple(local_size)}: {'; '.join(problems)}; lower "
                           "it for this device's Target (its local_max and max_threads_per_group)")
    return groups, threads

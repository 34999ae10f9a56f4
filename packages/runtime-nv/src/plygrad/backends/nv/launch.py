"""The CUDA program contract on the launching side: grid and block from a PROGRAM's sizes, and the argument array.

A program is `extern "C" __global__ void NAME(T0* data0, ..., long long VAR0, ...)`: one device pointer per
buffer in `ProgramInfo.params` order, then one integer per variable in the PROGRAM's DEFINE_VAR order (docs/codegen.md,
"the CUDA program contract"). `cuLaunchKernel` takes them as `kernelParams`, an array holding a pointer to each
argument's value. When the driver can say how wide each parameter is (cuFuncGetParamInfo, CUDA 12.4+), the
variables are packed at that width and the count is checked, so a program and a launch that disagree fail with a
message instead of reading garbage; otherwise pointers are 8 bytes and variables `long long`, per the contract.
Grid and block are plygrad.runtime.launching's (the grid is the global size, the block the local size).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from plygrad.runtime.errors import BackendError
from plygrad.runtime.launching import LaunchLimits
from plygrad.runtime.launching import launch_dims as checked_launch_dims

POINTER_SIZE: Final = 8
# every buffer pointer a program gets is aligned to this (docs/codegen.md §5): codegen makes 16-byte vector accesses
# (float4) where an index is a multiple of the width, which is aligned only from an aligned start. cuMemAlloc gives
# 256; an offset into an allocation (a view) would have to keep it.
POINTER_ALIGN: Final = 16
VARIABLE_SIZE: Final = 8  # `long long`, as the C contract's variables
_INTEGER_TYPES: Final[dict[int, type[ctypes.c_int32] | type[ctypes.c_int64]]] = {4: ctypes.c_int32,
                                                                                  8: ctypes.c_int64}
ArgumentValue = ctypes.c_uint64 | ctypes.c_int32 | ctypes.c_int64


@dataclass(frozen=True)
class KernelArguments:
    """`params` is the `void*[]` cuLaunchKernel reads: params[i] is the address of `values[i]`. The values are
    held here so they stay alive until the launch has read them (cuLaunchKernel copies them before returning)."""

    values: tuple[ArgumentValue, ...]
    params: ctypes.Array[ctypes.c_void_p]


def pack_arguments(buffers: Sequence[int], vals: Sequence[int], param_sizes: Sequence[int] | None = None,
                   name: str = "") -> KernelArguments:
    """The argument array for a launch of program `name` with device pointers `buffers` and variable values `vals`.

    `param_sizes` (from cuFuncGetParamInfo, or None when unknown) is checked against the contract: the count must
    match, buffers must be 8-byte pointers and variables 4 or 8 bytes (a value must fit a 4-byte one). Every buffer
    pointer must be POINTER_ALIGN-byte aligned (the null pointer of a zero-byte buffer is).
    """
    sizes = [POINTER_SIZE] * len(buffers) + [VARIABLE_SIZE] * len(vals)
    if param_sizes is not None:
        if len(param_sizes) != len(sizes):
            raise BackendError(f"CUDA program {name!r} takes {len(param_sizes)} parameters, but the launch gives "
                               f"{len(buffers)} buffers and {len(vals)} variables: the PROGRAM's params and "
                               "variables must match the kernel's signature")
        for index, size in enumerate(param_sizes):
            kind = "buffer" if index < len(buffers) else "variable"
            allowed = (POINTER_SIZE,) if kind == "buffer" else tuple(_INTEGER_TYPES)
            if size not in allowed:
                raise BackendError(f"CUDA program {name!r}: parameter {index} (a {kind}) is {size} bytes wide; the "
                                   f"program contract passes a {kind} as {' or '.join(map(str, allowed))} bytes")
        sizes = list(param_sizes)
    for index, pointer in enumerate(buffers):
        if pointer % POINTER_ALIGN:
            raise BackendError(f"CUDA program {name!r}: buffer {index} is at {pointer:#x}, not a multiple of "
                               f"{POINTER_ALIGN} bytes; the program contract hands kernels {POINTER_ALIGN}-byte "
                               "aligned pointers (their vector loads rely on it): pass the start of an allocation")
    values: list[ArgumentValue] = [ctypes.c_uint64(pointer) for pointer in buffers]
    for offset, value in enumerate(vals):
        size = sizes[len(buffers) + offset]
        if size == 4 and not -(2**31) <= value < 2**31:
            raise BackendError(f"CUDA program {name!r}: variable {offset} = {value} does not fit its 32-bit "
                               "parameter")
        values.append(_INTEGER_TYPES[size](value))
    params = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
    return KernelArguments(tuple(values), params)


def launch_dims(global_size: Sequence[int], local_size: Sequence[int] | None, limits: LaunchLimits,
                name: str = "") -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) for cuLaunchKernel, checked against the device's limits so that a PROGRAM the device cannot
    run fails naming its sizes rather than as a bare CUDA_ERROR_INVALID_VALUE."""
    return checked_launch_dims(global_size, local_size, limits, program=f"CUDA program {name!r}")

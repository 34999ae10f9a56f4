"""The launch side of the HIP program contract: the packed argument buffer, the `extra` list, the grid/block checks."""

from __future__ import annotations

import ctypes
import struct

import pytest

from plygrad.backends.amd.launch import (
    PARAM_BUFFER_POINTER,
    PARAM_BUFFER_SIZE,
    PARAM_END,
    LaunchLimits,
    launch_dims,
    pack_arguments,
)
from plygrad.runtime.errors import BackendError


def test_extra_points_at_the_buffers_then_the_variables_packed_as_8_bytes() -> None:
    buffers, vals = [0x7F0000001000, 0x7F0000002000, 0], [7, -3]
    packed = pack_arguments(buffers, vals)
    extra = [packed.extra[i] or 0 for i in range(5)]
    assert (extra[0], extra[2], extra[4]) == (PARAM_BUFFER_POINTER, PARAM_BUFFER_SIZE, PARAM_END) == (1, 2, 3)
    assert extra[1] == ctypes.addressof(packed.buffer) and extra[3] == ctypes.addressof(packed.size)
    assert packed.size.value == 40
    assert struct.unpack("<3Q2q", ctypes.string_at(extra[1], 40)) == (*buffers, *vals)


def test_no_arguments_is_an_empty_buffer() -> None:
    packed = pack_arguments([], [])
    assert packed.size.value == 0


def test_a_misaligned_buffer_pointer_is_refused() -> None:
    """Kernels make 16-byte vector accesses where an index is a multiple of the width: only an aligned start keeps
    them aligned (the program contract, docs/codegen.md §5)."""
    pack_arguments([0x1000, 0x7F0000000010, 0], [])
    with pytest.raises(BackendError, match=r"'E_4': buffer 1 is at 0x1008, not a multiple of 16 bytes"):
        pack_arguments([0x1000, 0x1008], [], name="E_4")


def test_a_variable_beyond_long_long_is_refused() -> None:
    with pytest.raises(BackendError, match=r"variable 0 = 9223372036854775808 does not fit"):
        pack_arguments([], [2**63], name="k")


def test_grid_is_the_global_size_and_block_the_local_size() -> None:
    assert launch_dims((4, 2, 1), (256, 1, 1), LaunchLimits()) == ((4, 2, 1), (256, 1, 1))
    assert launch_dims((1, 1, 1), None, LaunchLimits()) == ((1, 1, 1), (1, 1, 1))


@pytest.mark.parametrize(("global_size", "local_size", "message"), [
    ((1, 1, 1), (64, 32, 1), r"2048 work-items per workgroup \(at most 1024\)"),
    ((1, 1, 1), (1, 1, 2048), r"block \(1, 1, 2048\)"),
    ((1, 70000, 1), (1, 1, 1), r"grid \(1, 70000, 1\)"),
    ((0, 1, 1), (1, 1, 1), r"grid \(0, 1, 1\)"),
    ((2**23, 1, 1), (1024, 1, 1), r"grid x block \(8589934592, 1, 1\) work-items \(at most 2\^32 - 1"),
])
def test_sizes_beyond_the_device_limits_are_refused(global_size: tuple[int, int, int],
                                                    local_size: tuple[int, int, int], message: str) -> None:
    with pytest.raises(BackendError, match=rf"HIP program 'r_8' cannot launch.*{message}"):
        launch_dims(global_size, local_size, LaunchLimits(), name="r_8")
